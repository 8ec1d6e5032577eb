/* The amd backend against the mi300x-8 fixture (KFD topology, DRM, PCI
 * files), the KFD properties parser, and copies of the fixture with one
 * file broken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture_tree.h"
#include "hw/amd_kfd.h"
#include <sys/stat.h>

static const char *const pcis[8] = {"0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0",
                                    "0000:85:00.0", "0000:a5:00.0", "0000:c5:00.0", "0000:e5:00.0"};
#define KFD "/sys/class/kfd/kfd/topology/nodes"

/* ---- the parser ---- */

static void test_props_parser(void **state)
{
    hw_kfd_props_t p = {0};
    char why[256];
    const char *good = "cpu_cores_count 0\nsimd_count 1216\n\nhive_id 18446744073709551615\n";
    assert_int_equal(hw_kfd_props_parse(good, strlen(good), &p, why, sizeof(why)), 0);
    uint64_t v;
    assert_true(hw_kfd_props_get(&p, "simd_count", &v));
    assert_int_equal(v, 1216);
    assert_true(hw_kfd_props_get(&p, "hive_id", &v));
    assert_true(v == UINT64_MAX);
    assert_false(hw_kfd_props_get(&p, "simd_per_cu", &v));
    hw_kfd_props_free(&p);

    static const struct {
        const char *text;
        const char *why;
    } bad[] = {
        {"simd_count -4\n", "line 1: expected an unsigned decimal"},
        {"a 1\nsimd_count 0x10\n", "line 2"},
        {"hive_id 18446744073709551616\n", "does not fit in 64 bits"},
        {"simd_count\n", "line 1: expected '<key> <unsigned number>'"},
        {"Simd 1\n", "line 1"},
        {"simd_count 1 2\n", "line 1"},
        {"a 1\na 2\n", "key 'a' appears twice"},
        {"a_key_that_is_far_too_long_to_be_any_kfd_property_name 1\n", "at most 47"},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        hw_kfd_props_t q = {0};
        assert_int_equal(hw_kfd_props_parse(bad[i].text, strlen(bad[i].text), &q, why, sizeof(why)),
                         CR_EPARSE);
        if (!strstr(why, bad[i].why))
            fail_msg("case %zu: '%s' lacks '%s'", i, why, bad[i].why);
        hw_kfd_props_free(&q);
    }
    assert_int_equal(hw_kfd_props_parse("a 1\0b 2", 7, &p, why, sizeof(why)), CR_EPARSE);
    hw_kfd_props_free(&p);
}

static void test_typed_views(void **state)
{
    hw_kfd_node_t n;
    char why[256];
    const char *cpu = "cpu_cores_count 192\nsimd_count 0\n";
    assert_int_equal(hw_kfd_node_parse(cpu, strlen(cpu), &n, why, sizeof(why)), 0);
    assert_int_equal(n.cpu_cores_count, 192);
    const char *gpu = "simd_count 1216\nvendor_id 4098\ndevice_id 29857\nlocation_id 1280\n";
    assert_int_equal(hw_kfd_node_parse(gpu, strlen(gpu), &n, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "simd_per_cu"));
    const char *wide = "simd_count 4\nsimd_per_cu 4\nvendor_id 65536\ndevice_id 1\n"
                       "location_id 1\n";
    assert_int_equal(hw_kfd_node_parse(wide, strlen(wide), &n, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "vendor_id 65536"));
    hw_kfd_iolink_t l;
    const char *link = "type 11\nnode_from 2\nnode_to 3\nweight 15\nmax_bandwidth 64000\n";
    assert_int_equal(hw_kfd_iolink_parse(link, strlen(link), &l, why, sizeof(why)), 0);
    assert_int_equal(l.type, HW_KFD_IOLINK_XGMI);
    assert_int_equal(l.node_to, 3);
    assert_int_equal(l.min_bandwidth, 0);
    assert_int_equal(hw_kfd_iolink_parse("type 11\n", 8, &l, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "node_from"));
    hw_kfd_membank_t b;
    assert_int_equal(hw_kfd_membank_parse("heap_type 1\n", 12, &b, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "size_in_bytes"));
}

/* ---- the fixture ---- */

static void test_devices(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "mi300x-8");
    cr_node_t *n = fixture_discover(&f, NULL);
    assert_int_equal(n->devices.n, 8);
    assert_int_equal(n->warnings.n, 0);
    for (int i = 0; i < 8; i++) {
        const cr_device_t *d = &n->devices.v[i];
        char id[8];
        snprintf(id, sizeof(id), "%d", i);
        assert_int_equal(d->index, i);
        assert_string_equal(d->backend, "amd");
        assert_string_equal(d->vendor, "AMD");
        assert_string_equal(d->resource, "GPU");
        assert_string_equal(d->sku, "MI300X");
        assert_string_equal(d->product, "AMD Instinct MI300X");
        assert_string_equal(d->pci, pcis[i]);
        assert_int_equal(d->pci_vendor, 0x1002);
        assert_int_equal(d->pci_device, 0x74a1);
        assert_int_equal(d->numa, i < 4 ? 0 : 1);
        assert_true(d->memory == 192ull << 30);
        assert_int_equal(d->compute_units, 304);
        assert_string_equal(d->isolation_id, id);
        assert_int_equal(d->vendor_index, i);
        assert_string_equal(d->driver, "6.8.5");
        assert_int_equal(d->health, CR_HEALTH_OK);
        assert_int_equal(strncmp(d->uuid, "GPU-", 4), 0);
        assert_int_equal(strlen(d->uuid), 20);
        for (int k = 0; k < i; k++)
            assert_string_not_equal(d->uuid, n->devices.v[k].uuid);
    }
    assert_string_equal(n->devices.v[0].uuid, "GPU-3f1c00a2e4b75d10");
    assert_true(fixture_resource(n, "GPU") == 8 * CR_QTY_ONE);
    assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "MI300X");
    hw_node_free(n);
    fixture_close(&f);
}

static void test_links_and_hive(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "mi300x-8");
    cr_node_t *n = fixture_discover(&f, NULL);
    assert_int_equal(n->links.n, 28);
    for (int a = 0; a < 8; a++)
        for (int b = a + 1; b < 8; b++) {
            const cr_link_t *l = hw_node_find_link(n, a, b);
            assert_non_null(l);
            assert_int_equal(l->kind, CR_LINK_XGMI);
            assert_int_equal(l->count, 1);
            assert_true(l->bandwidth_gbps == 64.0);
        }
    assert_int_equal(n->domains.n, 1);
    const cr_domain_t *d = &n->domains.v[0];
    assert_string_equal(d->kind, "xgmi-hive");
    assert_string_equal(d->name, "hive-7c8a1f3e5b2d4a61");
    assert_int_equal(d->nmembers, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(d->members[i], i);
    hw_node_free(n);
    fixture_close(&f);
}

static void test_isolation(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "mi300x-8");
    cr_node_t *n = fixture_discover(&f, NULL);
    int devs[] = {3, 1};
    char *v = fixture_isolate(&f, n, devs, 2, "HIP_VISIBLE_DEVICES");
    assert_string_equal(v, "3,1");
    free(v);
    assert_null(fixture_isolate(&f, n, devs, 2, "ROCR_VISIBLE_DEVICES"));
    v = fixture_isolate(&f, n, NULL, 0, "HIP_VISIBLE_DEVICES");
    assert_string_equal(v, "");
    free(v);
    /* ROCr hides first, then HIP numbers what is left from 0 */
    fixture_setenv(&f, "CORRAL_AMD_ROCR_VISIBLE", "1");
    v = fixture_isolate(&f, n, devs, 2, "ROCR_VISIBLE_DEVICES");
    assert_string_equal(v, "3,1");
    free(v);
    v = fixture_isolate(&f, n, devs, 2, "HIP_VISIBLE_DEVICES");
    assert_string_equal(v, "0,1");
    free(v);
    hw_node_free(n);
    fixture_close(&f);
}

/* A GPU whose properties do not parse is off; the GPUs after it keep
 * their HIP index (its gpu_id still says it is a GPU). */
static void test_broken_properties(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "mi300x-8");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_write(root, KFD "/4/properties", "simd_count lots\n");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 7);
    assert_int_equal(n->warnings.n, 1);
    assert_int_equal(fixture_count_warnings(n, "nodes/4/properties", "GPU 2 is off"), 1);
    assert_int_equal(fixture_count_warnings(n, "expected an unsigned decimal", NULL), 1);
    assert_string_equal(n->devices.v[2].isolation_id, "3");
    assert_string_equal(n->devices.v[2].pci, pcis[3]);
    assert_int_equal(n->links.n, 21);
    assert_int_equal(n->domains.v[0].nmembers, 7);
    assert_true(fixture_resource(n, "GPU") == 7 * CR_QTY_ONE);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* When not even gpu_id tells a node's kind, the order amdkfd numbers nodes
 * in does (CPU nodes of the CRAT table first, then one node per GPU:
 * kfd_topology_init() and kfd_topology_add_device() in the kernel's
 * drivers/gpu/drm/amd/amdkfd/kfd_topology.c), and so does an xGMI link to
 * it (xGMI joins GPUs only): one unreadable node turns off only itself. */
static void test_unknown_node_kind(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "mi300x-8");
    fixture_tree_copy(&f, root, sizeof(root));
    /* KFD node 5 is GPU 3: after GPU nodes, so a GPU; the others keep their index */
    fixture_tree_write(root, KFD "/5/properties", "\x01\x02garbage");
    fixture_tree_sh(root, "rm sys/class/kfd/kfd/topology/nodes/5/gpu_id");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 7);
    assert_int_equal(n->warnings.n, 1);
    assert_int_equal(fixture_count_warnings(n, "nodes/5/properties", "GPU 3 is off"), 1);
    for (size_t i = 0; i < 7; i++) {
        int hip = (int)i < 3 ? (int)i : (int)i + 1;
        char id[8];
        snprintf(id, sizeof(id), "%d", hip);
        assert_string_equal(n->devices.v[i].isolation_id, id);
        assert_string_equal(n->devices.v[i].pci, pcis[hip]);
    }
    hw_node_free(n);
    /* KFD node 2 is GPU 0, the first GPU: its peers' xGMI links name it */
    fixture_tree_write(root, KFD "/2/properties", "\x01\x02garbage");
    fixture_tree_sh(root, "rm sys/class/kfd/kfd/topology/nodes/2/gpu_id");
    n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 6);
    assert_int_equal(fixture_count_warnings(n, "nodes/2/properties", "GPU 0 is off"), 1);
    assert_string_equal(n->devices.v[0].isolation_id, "1");
    hw_node_free(n);
    fixture_tree_remove(root);
    /* KFD node 0 is a CPU: a CPU node follows it, so it is one too */
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_write(root, KFD "/0/properties", "\x01\x02garbage");
    fixture_tree_sh(root, "rm -f sys/class/kfd/kfd/topology/nodes/0/gpu_id");
    n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 8);
    assert_string_equal(n->devices.v[0].isolation_id, "0");
    assert_int_equal(fixture_count_warnings(n, "HIP index is unknown", NULL), 0);
    hw_node_free(n);
    /* only a node between the last CPU and the first GPU that no link
     * names stays unknown; the GPUs after it are off then */
    fixture_tree_sh(root, "rm -f sys/class/kfd/kfd/topology/nodes/1/gpu_id && "
                          "printf 'x' > sys/class/kfd/kfd/topology/nodes/1/properties && "
                          "rm -rf sys/class/kfd/kfd/topology/nodes/0");
    n = fixture_discover(&f, root);
    assert_int_equal(fixture_count_warnings(n, "nodes/1/properties", "HIP index is unknown"), 1);
    assert_int_equal(n->devices.n, 0);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

static void test_broken_bank_and_link(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "mi300x-8");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_write(root, KFD "/2/mem_banks/0/properties", "heap_type 1\nsize_in_bytes\n");
    fixture_tree_write(root, KFD "/9/io_links/3/properties", "type 11\nnode_from 9\n");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 6);
    assert_int_equal(n->warnings.n, 2);
    assert_int_equal(fixture_count_warnings(n, "nodes/2/mem_banks/0/properties", "GPU 0 is off"),
                     1);
    assert_int_equal(fixture_count_warnings(n, "nodes/9/io_links/3/properties", "GPU 7 is off"), 1);
    assert_int_equal(fixture_count_warnings(n, "'node_to' is missing", NULL), 1);
    assert_string_equal(n->devices.v[0].isolation_id, "1");
    assert_int_equal(n->links.n, 15);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* Node ids sort as numbers: node 10 comes after node 9, and links name
 * nodes by id. A second link per pair doubles max_bandwidth. */
static void test_numeric_order_and_link_count(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "mi300x-8");
    fixture_tree_copy(&f, root, sizeof(root));
#define NODES "sys/class/kfd/kfd/topology/nodes"
    fixture_tree_sh(root, "cp -a " NODES "/9 " NODES "/10 && rm -r " NODES "/10/io_links");
    fixture_tree_sh(root, "sed -i 's/^location_id .*/location_id 62976/; s/^hive_id .*/hive_id 0/; "
                          "s/^unique_id .*/unique_id 7/' " NODES "/10/properties");
    fixture_tree_write(root, KFD "/2/io_links/1/properties",
                       "type 11\nnode_from 2\nnode_to 3\nweight 15\nmin_bandwidth 64000\n"
                       "max_bandwidth 128000\n");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 9);
    assert_int_equal(n->warnings.n, 0);
    assert_string_equal(n->devices.v[8].pci, "0000:f6:00.0");
    assert_string_equal(n->devices.v[8].isolation_id, "8");
    assert_string_equal(n->devices.v[0].pci, pcis[0]);
    assert_null(hw_node_find_link(n, 7, 8));
    const cr_link_t *l = hw_node_find_link(n, 0, 1);
    assert_int_equal(l->count, 2);
    assert_true(l->bandwidth_gbps == 128.0);
    assert_int_equal(n->domains.n, 1);
    assert_int_equal(n->domains.v[0].nmembers, 8);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* ---- partitions: real captures from ROCm's k8s-device-plugin ---- */

/* Unpacks tests/fixtures/hw/<machine>/kfd-topology.tar.gz into a fresh
 * root (see that directory's README.md for where the capture comes from). */
static void unpack_capture(const char *machine, char *root, size_t size)
{
    snprintf(root, size, "/tmp/corral-kfd-XXXXXX");
    assert_non_null(mkdtemp(root));
    char cmd[1400];
    snprintf(cmd, sizeof(cmd), "tar -xzf '%s/tests/fixtures/hw/%s/kfd-topology.tar.gz' -C '%s'",
             CORRAL_SOURCE_DIR, machine, root);
    assert_int_equal(system(cmd), 0);
}

static int count_kind(const cr_node_t *n, cr_link_kind_t kind)
{
    int k = 0;
    for (size_t i = 0; i < n->links.n; i++)
        k += n->links.v[i].kind == kind;
    return k;
}

/* 8 MI300X in CPX mode, 63 partitions recorded (the last GPU shows 7). */
static void test_mi300x_cpx(void **state)
{
    /* the capture's location_id buses, in KFD order */
    static const char *const gpu_pci[8] = {"0000:05:00.0", "0000:27:00.0", "0000:47:00.0",
                                           "0000:65:00.0", "0000:85:00.0", "0000:a7:00.0",
                                           "0000:c7:00.0", "0000:e5:00.0"};
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "cpu-only");
    unpack_capture("mi300x-cpx", root, sizeof(root));
    /* the capture has no PCI files: give GPU 0 and GPU 4 their NUMA nodes */
    fixture_tree_write(root, "/sys/bus/pci/devices/0000:05:00.0/numa_node", "0\n");
    fixture_tree_write(root, "/sys/bus/pci/devices/0000:85:00.0/numa_node", "1\n");
    static const char *const attrs[][2] = {
        {"vendor", "0x1002\n"}, {"device", "0x74a1\n"}, {"class", "0x120000\n"}};
    for (size_t k = 0; k < CR_ARRAY_SIZE(attrs); k++) {
        char rel[128];
        snprintf(rel, sizeof(rel), "/sys/bus/pci/devices/0000:05:00.0/%s", attrs[k][0]);
        fixture_tree_write(root, rel, attrs[k][1]);
        snprintf(rel, sizeof(rel), "/sys/bus/pci/devices/0000:85:00.0/%s", attrs[k][0]);
        fixture_tree_write(root, rel, attrs[k][1]);
    }
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 63);
    assert_int_equal(n->warnings.n, 0);
    for (size_t i = 0; i < 63; i++) {
        const cr_device_t *d = &n->devices.v[i];
        char id[8];
        snprintf(id, sizeof(id), "%zu", i);
        assert_string_equal(d->sku, "MI300X");
        assert_int_equal(d->partition, (int)(i % 8));
        assert_string_equal(d->pci, gpu_pci[i / 8]);
        assert_string_equal(d->isolation_id, id); /* the HIP index: every partition is a device */
        assert_int_equal(d->compute_units, 152 / 4);
        assert_int_equal(d->numa, i / 8 == 0 ? 0 : i / 8 == 4 ? 1 : -1);
        assert_int_equal(d->parent, -1);
        for (size_t k = 0; k < i; k++)
            assert_string_not_equal(d->uuid, n->devices.v[k].uuid);
    }
    /* inside one GPU: xgmi-same-gpu, 819200 MB/s; across GPUs: xgmi */
    const cr_link_t *l = hw_node_find_link(n, 0, 1);
    assert_non_null(l);
    assert_int_equal(l->kind, CR_LINK_XGMI_SAME_GPU);
    assert_true(l->bandwidth_gbps == 819.2);
    l = hw_node_find_link(n, 7, 8);
    assert_non_null(l);
    assert_int_equal(l->kind, CR_LINK_XGMI);
    assert_int_equal(count_kind(n, CR_LINK_XGMI_SAME_GPU), 7 * 28 + 21);
    assert_int_equal(count_kind(n, CR_LINK_XGMI), 63 * 62 / 2 - (7 * 28 + 21));
    assert_true(fixture_resource(n, "GPU") == 63 * CR_QTY_ONE);
    /* one hive: the capture's hive_id is the same on every partition */
    assert_int_equal(n->domains.n, 1);
    assert_int_equal(n->domains.v[0].nmembers, 63);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* 8 MI308X in CPX mode: 4 partitions of 20 CUs and 48 GiB per GPU. */
static void test_mi308x_cpx(void **state)
{
    /* the capture's domain and location_id bus of each GPU, in KFD order */
    static const char *const gpu_pci[8] = {"0000:0a:00.0", "0000:80:00.0", "0000:a4:00.0",
                                           "0000:c8:00.0", "0001:0b:00.0", "0001:81:00.0",
                                           "0001:a5:00.0", "0001:c9:00.0"};
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "cpu-only");
    unpack_capture("mi308x-cpx", root, sizeof(root));
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 32);
    assert_int_equal(n->warnings.n, 0);
    for (size_t i = 0; i < 32; i++) {
        const cr_device_t *d = &n->devices.v[i];
        assert_string_equal(d->sku, "MI308X");
        assert_int_equal(d->partition, (int)(i % 4));
        assert_string_equal(d->pci, gpu_pci[i / 4]);
        assert_int_equal(d->compute_units, 20);
        /* the capture's own mem_banks/0 size (48 GiB, a little less on some) */
        char path[256], line[128];
        unsigned long long want = 0;
        snprintf(path, sizeof(path), "%s" KFD "/%zu/mem_banks/0/properties", root, i + 2);
        FILE *fp = fopen(path, "r");
        assert_non_null(fp);
        while (fgets(line, sizeof(line), fp))
            sscanf(line, "size_in_bytes %llu", &want);
        fclose(fp);
        assert_true(want > 51000000000ull && d->memory == want);
    }
    assert_int_equal(count_kind(n, CR_LINK_XGMI_SAME_GPU), 8 * 6);
    assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "MI308X");
    hw_node_free(n);
    /* one unreadable partition turns off only itself (KFD node 4: GPU 0's
     * partition 2, HIP index 2) */
    fixture_tree_write(root, KFD "/4/properties", "simd_count lots\n");
    n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 31);
    assert_int_equal(fixture_count_warnings(n, "nodes/4/properties", "GPU 2 is off"), 1);
    assert_string_equal(n->devices.v[2].isolation_id, "3");
    assert_int_equal(n->devices.v[2].partition, 3);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

static void test_no_kfd(void **state)
{
    fixture_env_t f;
    char root[64] = "/tmp/corral-amd-XXXXXX";
    fixture_open(&f, "mi300x-8");
    assert_non_null(mkdtemp(root));
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 0);
    assert_int_equal(n->warnings.n, 0);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

static void test_telemetry(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "mi300x-8");
    cr_node_t *n = fixture_discover(&f, NULL);
    const cr_accel_component_t *c = hw_component_find("amd");
    assert_non_null(c->telemetry);
    cr_hw_env_t env = {.root = f.root, .getenv = fixture_getenv, .getenv_ctx = &f};
    cr_telemetry_t t;
    hw_telemetry_init(&t);
    assert_int_equal(c->telemetry(&env, n, 3, &t), 0);
    assert_true(t.ecc_corrected == -1 && t.ecc_uncorrected == -1); /* no ras/: unknown */
    /* GPU 0's RAS counts, summed over its blocks: umc ce 2, gfx ce 1, sdma ue 1 */
    hw_telemetry_init(&t);
    assert_int_equal(c->telemetry(&env, n, 0, &t), 0);
    assert_int_equal(t.ecc_corrected, 3);
    assert_int_equal(t.ecc_uncorrected, 1);
    assert_int_equal(t.xid_last, -1);
    assert_int_equal(c->telemetry(&env, n, 3, &t), 0);
    assert_true(t.utilization_pct == 15.0);
    assert_true(t.memory_used == 4ull << 30);
    assert_true(t.temperature_c == 43.0); /* junction, not mem */
    assert_true(t.power_w == 153.0);
    assert_int_equal(t.health, CR_HEALTH_OK);
    assert_int_equal(c->telemetry(&env, n, 8, &t), CR_ENODEV);
    /* nothing published: unknown, not zero */
    char root[64];
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_sh(root, "rm -r sys/bus/pci/devices/0000:05:00.0/hwmon "
                          "sys/bus/pci/devices/0000:05:00.0/gpu_busy_percent");
    env.root = root;
    assert_int_equal(c->telemetry(&env, n, 0, &t), 0);
    assert_true(t.utilization_pct == -1 && t.temperature_c == -1 && t.power_w == -1);
    assert_true(t.memory_used == 1ull << 30);
    fixture_tree_remove(root);
    hw_node_free(n);
    fixture_close(&f);
}

static void test_ras_parser(void **state)
{
    char why[96];
    uint64_t ue = 9, ce = 9;
    const char *ok = "ue: 4\nce: 17\nde: 2\n";
    assert_int_equal(hw_amd_ras_parse(ok, strlen(ok), &ue, &ce, why, sizeof(why)), 0);
    assert_true(ue == 4 && ce == 17);
    assert_int_equal(hw_amd_ras_parse("ue: 0\nce: 0", 11, &ue, &ce, why, sizeof(why)), 0);
    assert_true(ue == 0 && ce == 0);
    static const char *const bad[] = {"ue: 1\n",
                                      "ce: 1\n",
                                      "ue: x\nce: 1\n",
                                      "ue 1\nce: 1\n",
                                      "ue: 1 2\nce: 1\n",
                                      "ue: 123456789012345678901\nce: 1\n",
                                      ""};
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++)
        assert_int_equal(hw_amd_ras_parse(bad[i], strlen(bad[i]), &ue, &ce, why, sizeof(why)),
                         CR_EPARSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_props_parser),
        cmocka_unit_test(test_typed_views),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_links_and_hive),
        cmocka_unit_test(test_isolation),
        cmocka_unit_test(test_broken_properties),
        cmocka_unit_test(test_unknown_node_kind),
        cmocka_unit_test(test_broken_bank_and_link),
        cmocka_unit_test(test_numeric_order_and_link_count),
        cmocka_unit_test(test_mi300x_cpx),
        cmocka_unit_test(test_mi308x_cpx),
        cmocka_unit_test(test_no_kfd),
        cmocka_unit_test(test_telemetry),
        cmocka_unit_test(test_ras_parser),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
