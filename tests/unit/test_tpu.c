/* The tpu backend against the fixture hosts of a v6e 4x4 and a v5p 2x2x2
 * slice, bad slice descriptions, odd /dev entries, and the GCE metadata
 * path against a stand-in server on the loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "tests/unit/fixture_tree.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static cr_node_t *discover(fixture_env_t *f)
{
    hw_options_t o = fixture_options(f);
    o.no_host = true;
    cr_node_t *node = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &node, &msg), 0);
    assert_null(msg);
    return node;
}

static size_t count_backend(const cr_node_t *n, const char *backend)
{
    size_t k = 0;
    for (size_t i = 0; i < n->devices.n; i++)
        k += strcmp(n->devices.v[i].backend, backend) == 0;
    return k;
}

static const cr_domain_t *find_domain(const cr_node_t *n, const char *kind)
{
    for (size_t i = 0; i < n->domains.n; i++)
        if (strcmp(n->domains.v[i].kind, kind) == 0)
            return &n->domains.v[i];
    return NULL;
}

/* The warnings that mention all of the given words. */
static size_t warnings_with(const cr_node_t *n, const char *a, const char *b)
{
    size_t k = 0;
    for (size_t i = 0; i < n->warnings.n; i++)
        k += strstr(n->warnings.v[i], a) && (!b || strstr(n->warnings.v[i], b));
    return k;
}

static const char *const tpu_pci[] = {"0000:00:04.0", "0000:00:05.0", "0000:00:06.0",
                                      "0000:00:07.0"};
static const int tpu_numa[] = {0, 0, 1, 1};

static void test_v6e_hosts(void **state)
{
    for (int k = 0; k < 4; k++) {
        char machine[64], buf[32];
        snprintf(machine, sizeof(machine), "tpu-v6e-4x4-w%d", k);
        fixture_env_t f;
        fixture_open(&f, machine);
        cr_node_t *n = discover(&f);
        assert_int_equal(n->warnings.n, 0);
        assert_int_equal(count_backend(n, "tpu"), 4);
        assert_int_equal(n->devices.n, 4);
        int x0 = 2 * (k % 2), y0 = 2 * (k / 2);
        for (int i = 0; i < 4; i++) {
            const cr_device_t *d = &n->devices.v[i];
            assert_string_equal(d->vendor, "Google");
            assert_string_equal(d->resource, "TPU");
            assert_string_equal(d->sku, "TPU-V6E");
            assert_string_equal(d->pci, tpu_pci[i]);
            assert_int_equal(d->pci_vendor, 0x1ae0);
            assert_int_equal(d->pci_device, 0x006f);
            assert_int_equal(d->numa, tpu_numa[i]);
            assert_int_equal(d->memory, 32ull << 30);
            assert_int_equal(d->compute_units, 1);
            snprintf(buf, sizeof(buf), "%d", i);
            assert_string_equal(d->isolation_id, buf);
            assert_int_equal(d->ncoords, 2);
            assert_int_equal(d->coords[0], x0 + i % 2);
            assert_int_equal(d->coords[1], y0 + i / 2);
        }
        /* a 2x2 block: 4 ICI neighbour pairs, none on the diagonals */
        assert_int_equal(n->links.n, 4);
        for (size_t l = 0; l < n->links.n; l++)
            assert_int_equal(n->links.v[l].kind, CR_LINK_ICI);
        assert_non_null(hw_node_find_link(n, 0, 1));
        assert_non_null(hw_node_find_link(n, 0, 2));
        assert_null(hw_node_find_link(n, 0, 3));
        assert_null(hw_node_find_link(n, 1, 2));

        const cr_domain_t *s = find_domain(n, "tpu-slice");
        assert_non_null(s);
        assert_string_equal(s->name, "v6e-s1");
        assert_string_equal(s->accelerator_type, "v6e-16");
        assert_string_equal(s->topology, "4x4");
        assert_int_equal(s->worker_id, k);
        assert_int_equal(s->worker_count, 4);
        assert_int_equal(s->nhosts, 4);
        snprintf(buf, sizeof(buf), "v6e-s1-w%d", k);
        assert_string_equal(s->hosts[k], buf);
        assert_int_equal(s->nmembers, 4);
        for (size_t i = 0; i < 4; i++)
            assert_int_equal(s->members[i], (int)i);

        snprintf(buf, sizeof(buf), "%d", k);
        assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-worker-id"), buf);
        assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-name"), "v6e-s1");
        assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-topology"), "4x4");
        assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-pod-type"), "v6e-16");
        assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "TPU-V6E");
        assert_int_equal(fixture_resource(n, "TPU"), 4 * CR_QTY_ONE);
        hw_node_free(n);
        fixture_close(&f);
    }
}

static void test_v5p_hosts(void **state)
{
    for (int k = 0; k < 2; k++) {
        char machine[64], buf[32];
        snprintf(machine, sizeof(machine), "tpu-v5p-2x2x2-w%d", k);
        fixture_env_t f;
        fixture_open(&f, machine);
        cr_node_t *n = discover(&f);
        assert_int_equal(n->warnings.n, 0);
        assert_int_equal(n->devices.n, 4);
        for (int i = 0; i < 4; i++) {
            const cr_device_t *d = &n->devices.v[i];
            assert_string_equal(d->sku, "TPU-V5P");
            assert_string_equal(d->pci, tpu_pci[i]);
            assert_int_equal(d->numa, tpu_numa[i]);
            assert_int_equal(d->memory, 95ull << 30);
            assert_int_equal(d->compute_units, 2);
            assert_int_equal(d->ncoords, 3);
            assert_int_equal(d->coords[0], i % 2);
            assert_int_equal(d->coords[1], i / 2);
            assert_int_equal(d->coords[2], k);
        }
        assert_int_equal(n->links.n, 4);
        const cr_domain_t *s = find_domain(n, "tpu-slice");
        assert_non_null(s);
        assert_string_equal(s->accelerator_type, "v5p-16");
        assert_string_equal(s->topology, "2x2x2");
        assert_int_equal(s->worker_id, k);
        assert_int_equal(s->worker_count, 2);
        assert_int_equal(s->nhosts, 2);
        snprintf(buf, sizeof(buf), "%d", k);
        assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-worker-id"), buf);
        assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-pod-type"), "v5p-16");
        hw_node_free(n);
        fixture_close(&f);
    }
}

static cr_envlist_t isolate(fixture_env_t *f, const cr_node_t *n, const int *devs, size_t nd,
                            int want_err)
{
    hw_options_t o = fixture_options(f);
    o.no_host = true;
    cr_envlist_t env = {0};
    char *msg = NULL;
    int err = hw_isolate(&o, n, devs, nd, &env, &msg);
    assert_int_equal(err, want_err);
    free(msg);
    return env;
}

static void test_isolation(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "tpu-v6e-4x4-w2");
    cr_node_t *n = discover(&f);

    int one[] = {2};
    cr_envlist_t e = isolate(&f, n, one, 1, 0);
    assert_string_equal(cr_envlist_get(&e, "TPU_VISIBLE_CHIPS"), "2");
    assert_string_equal(cr_envlist_get(&e, "TPU_CHIPS_PER_PROCESS_BOUNDS"), "1,1,1");
    assert_string_equal(cr_envlist_get(&e, "TPU_PROCESS_BOUNDS"), "1,1,1");
    assert_string_equal(cr_envlist_get(&e, "TPU_CHIPS_PER_HOST_BOUNDS"), "1,1,1");
    assert_string_equal(cr_envlist_get(&e, "TPU_HOST_BOUNDS"), "1,1,1");
    cr_envlist_free(&e);

    int two[] = {3, 2};
    e = isolate(&f, n, two, 2, 0);
    assert_string_equal(cr_envlist_get(&e, "TPU_VISIBLE_CHIPS"), "2,3");
    assert_string_equal(cr_envlist_get(&e, "TPU_CHIPS_PER_PROCESS_BOUNDS"), "1,2,1");
    assert_string_equal(cr_envlist_get(&e, "TPU_PROCESS_BOUNDS"), "1,1,1");
    assert_string_equal(cr_envlist_get(&e, "TPU_CHIPS_PER_HOST_BOUNDS"), "1,2,1");
    assert_string_equal(cr_envlist_get(&e, "TPU_HOST_BOUNDS"), "1,1,1");
    cr_envlist_free(&e);

    /* the whole host: nothing, libtpu's defaults describe it */
    int all[] = {0, 1, 2, 3};
    e = isolate(&f, n, all, 4, 0);
    assert_int_equal(e.vars.n, 0);
    cr_envlist_free(&e);

    /* no chip: an empty list, so that the worker sees none */
    e = isolate(&f, n, NULL, 0, 0);
    assert_string_equal(cr_envlist_get(&e, "TPU_VISIBLE_CHIPS"), "");
    assert_null(cr_envlist_get(&e, "TPU_HOST_BOUNDS"));
    cr_envlist_free(&e);

    /* three chips of four is no shape libtpu runs on */
    int three[] = {0, 1, 2};
    e = isolate(&f, n, three, 3, CR_EINVAL);
    cr_envlist_free(&e);
    hw_node_free(n);
    fixture_close(&f);
}

/* Isolation reads the node description only: a described (simulated)
 * 8-chip host, no files anywhere. */
static void test_isolation_described_host(void **state)
{
    cr_node_t *n = hw_node_new();
    for (int i = 0; i < 8; i++) {
        cr_device_t *d = cr_node_add_device(n);
        strcpy(d->backend, "tpu");
        snprintf(d->isolation_id, sizeof(d->isolation_id), "%d", i);
    }
    hw_options_t o = {.root = "/nonexistent", .no_host = true, .no_plugins = true};
    cr_envlist_t e = {0};
    int four[] = {4, 5, 6, 7};
    assert_int_equal(hw_isolate(&o, n, four, 4, &e, NULL), 0);
    assert_string_equal(cr_envlist_get(&e, "TPU_VISIBLE_CHIPS"), "4,5,6,7");
    assert_string_equal(cr_envlist_get(&e, "TPU_CHIPS_PER_PROCESS_BOUNDS"), "2,2,1");
    cr_envlist_free(&e);
    hw_node_free(n);
}

/* One bad variable: one warning naming it, chips still there, no slice. */
static void check_bad(const char *machine, const char *var, const char *val, const char *word)
{
    fixture_env_t f;
    fixture_open(&f, machine);
    fixture_setenv(&f, var, val);
    cr_node_t *n = discover(&f);
    if (n->warnings.n != 1 || warnings_with(n, var, word) != 1)
        fail_msg("%s=%s: expected one warning naming it, got %zu: %s", var, val, n->warnings.n,
                 n->warnings.n ? n->warnings.v[0] : "");
    assert_int_equal(count_backend(n, "tpu"), 4);
    assert_null(find_domain(n, "tpu-slice"));
    assert_null(cr_node_get_label(n, "corral.io/tpu-slice-name"));
    assert_null(cr_node_get_label(n, "corral.io/tpu-slice-pod-type"));
    assert_int_equal(n->devices.v[0].ncoords, 0);
    assert_int_equal(n->links.n, 0);
    /* still known from PCI */
    assert_string_equal(n->devices.v[0].sku, strstr(machine, "v5p") ? "TPU-V5P" : "TPU-V6E");
    hw_node_free(n);
    fixture_close(&f);
}

static void test_bad_slice(void **state)
{
    const char *m = "tpu-v6e-4x4-w1";
    check_bad(m, "TPU_TOPOLOGY", "3x3", "3x3");
    check_bad(m, "TPU_TOPOLOGY", "4x8", "4x8");   /* valid, but 32 chips for a v6e-16 */
    check_bad(m, "TPU_TOPOLOGY", "2x2x4", "v6e"); /* 16 chips, but v6e is 2D */
    check_bad(m, "TPU_TOPOLOGY", "banana", "banana");
    check_bad(m, "TPU_WORKER_ID", "abc", "0 to 3");
    check_bad(m, "TPU_WORKER_ID", "4", "0 to 3");
    check_bad(m, "TPU_WORKER_ID", "-1", "0 to 3");
    check_bad(m, "TPU_ACCELERATOR_TYPE", "v6e-sixteen", "v6e-sixteen");
    check_bad(m, "TPU_ACCELERATOR_TYPE", "v5p-16", "v5p");  /* not these chips */
    check_bad(m, "TPU_ACCELERATOR_TYPE", "v6e-8", "has 8"); /* 8 chips vs 4x4 */
    check_bad("tpu-v5p-2x2x2-w0", "TPU_ACCELERATOR_TYPE", "v5p-15", "TensorCores");
}

static void test_bad_hostnames(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "tpu-v6e-4x4-w0");
    fixture_setenv(&f, "TPU_WORKER_HOSTNAMES", "v6e-s1-w0,v6e-s1-w1");
    cr_node_t *n = discover(&f);
    assert_int_equal(n->warnings.n, 1);
    assert_int_equal(warnings_with(n, "TPU_WORKER_HOSTNAMES", "2 host names"), 1);
    /* only the host names are left out */
    const cr_domain_t *s = find_domain(n, "tpu-slice");
    assert_non_null(s);
    assert_int_equal(s->nhosts, 0);
    assert_int_equal(s->worker_count, 4);
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-name"), "v6e-s1");
    hw_node_free(n);
    fixture_close(&f);
}

static void test_slice_from_partial_env(void **state)
{
    /* no TPU_TOPOLOGY: the pod type implies the usual shape */
    fixture_env_t f;
    fixture_open(&f, "tpu-v6e-4x4-w3");
    fixture_setenv(&f, "TPU_TOPOLOGY", "");
    cr_node_t *n = discover(&f);
    assert_int_equal(n->warnings.n, 0);
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-topology"), "4x4");
    assert_int_equal(n->devices.v[3].coords[0], 3);
    assert_int_equal(n->devices.v[3].coords[1], 3);
    hw_node_free(n);
    fixture_close(&f);

    /* no TPU_ACCELERATOR_TYPE: the chips and the topology imply it */
    fixture_open(&f, "tpu-v5p-2x2x2-w1");
    fixture_setenv(&f, "TPU_ACCELERATOR_TYPE", "");
    n = discover(&f);
    assert_int_equal(n->warnings.n, 0);
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-pod-type"), "v5p-16");
    hw_node_free(n);
    fixture_close(&f);

    /* no TPU variable at all: chips, nothing about a slice, no warning */
    fixture_open(&f, "tpu-v6e-4x4-w0");
    static const char *const all[] = {"TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY", "TPU_WORKER_ID",
                                      "TPU_NAME", "TPU_WORKER_HOSTNAMES"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(all); i++)
        fixture_setenv(&f, all[i], "");
    n = discover(&f);
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(n->devices.n, 4);
    assert_null(find_domain(n, "tpu-slice"));
    hw_node_free(n);
    fixture_close(&f);

    /* a multi-host slice without TPU_WORKER_ID cannot place this host */
    fixture_open(&f, "tpu-v6e-4x4-w0");
    fixture_setenv(&f, "TPU_WORKER_ID", "");
    n = discover(&f);
    assert_int_equal(warnings_with(n, "TPU_WORKER_ID", "not set"), 1);
    assert_null(find_domain(n, "tpu-slice"));
    hw_node_free(n);
    fixture_close(&f);
}

static void test_small_multi_host_and_defaults(void **state)
{
    /* a v6e-8 (2x4) as two hosts of 4 chips: xpk's system characteristics
     * list ct6e-standard-4t with 2 VMs for v6e-8, and GKE runs it; how many
     * chips a host holds comes from the machine (this one has 4). Host 1
     * holds the upper 2x2 block: y in {2, 3}. */
    fixture_env_t f;
    fixture_open(&f, "tpu-v6e-4x4-w1");
    fixture_setenv(&f, "TPU_ACCELERATOR_TYPE", "v6e-8");
    fixture_setenv(&f, "TPU_TOPOLOGY", "2x4");
    fixture_setenv(&f, "TPU_WORKER_HOSTNAMES", "v6e-8-w0,v6e-8-w1");
    cr_node_t *n = discover(&f);
    assert_int_equal(n->warnings.n, 0);
    const cr_domain_t *s = find_domain(n, "tpu-slice");
    assert_non_null(s);
    assert_int_equal(s->worker_count, 2);
    assert_int_equal(s->worker_id, 1);
    assert_int_equal(s->nhosts, 2);
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-topology"), "2x4");
    assert_int_equal(n->devices.v[0].coords[0], 0);
    assert_int_equal(n->devices.v[0].coords[1], 2);
    assert_int_equal(n->devices.v[3].coords[0], 1);
    assert_int_equal(n->devices.v[3].coords[1], 3);
    hw_node_free(n);
    fixture_close(&f);

    /* v5p-128 without TPU_TOPOLOGY is Google's 4x4x4 on 16 hosts
     * (cloud.google.com/tpu/docs/v5p: 128 cores, 64 chips, 16 hosts) */
    fixture_open(&f, "tpu-v5p-2x2x2-w1");
    fixture_setenv(&f, "TPU_ACCELERATOR_TYPE", "v5p-128");
    fixture_setenv(&f, "TPU_TOPOLOGY", "");
    fixture_setenv(&f, "TPU_WORKER_ID", "5");
    fixture_setenv(&f, "TPU_WORKER_HOSTNAMES", "");
    n = discover(&f);
    assert_int_equal(n->warnings.n, 0);
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-topology"), "4x4x4");
    s = find_domain(n, "tpu-slice");
    assert_non_null(s);
    assert_int_equal(s->worker_count, 16);
    /* host 5 of a 4x4x4: host grid 2x2x4, x fastest: (1, 0, 1) -> chips at
     * x 2..3, y 0..1, z 1 */
    assert_int_equal(n->devices.v[0].coords[0], 2);
    assert_int_equal(n->devices.v[0].coords[1], 0);
    assert_int_equal(n->devices.v[0].coords[2], 1);
    hw_node_free(n);
    fixture_close(&f);

    /* a shape Google does not offer: refused, naming the nearest valid ones */
    check_bad("tpu-v6e-4x4-w1", "TPU_TOPOLOGY", "4x3", "nearest: 2x4 (8 chips), 4x4 (16 chips)");
    /* a pod type alone of a chip count no shape has (v5p-100: 50 chips) */
    fixture_open(&f, "tpu-v5p-2x2x2-w0");
    fixture_setenv(&f, "TPU_ACCELERATOR_TYPE", "v5p-100");
    fixture_setenv(&f, "TPU_TOPOLOGY", "");
    n = discover(&f);
    assert_int_equal(n->warnings.n, 1);
    assert_int_equal(
        warnings_with(n, "v5p-100 has 50 chips", "nearest: 2x4x4 (32 chips), 4x4x4 (64 chips)"), 1);
    assert_null(find_domain(n, "tpu-slice"));
    hw_node_free(n);
    fixture_close(&f);
}

/* ---- temporary trees ---- */

static void put(const char *root, const char *path, const char *text)
{
    char full[1024];
    snprintf(full, sizeof(full), "%s%s", root, path);
    for (char *p = full + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(full, 0755);
            *p = '/';
        }
    if (text) {
        FILE *fp = fopen(full, "w");
        assert_non_null(fp);
        fputs(text, fp);
        fclose(fp);
    } else {
        mkdir(full, 0755);
    }
}

static void link_to(const char *root, const char *path, const char *target)
{
    char full[1024];
    put(root, path, NULL);
    snprintf(full, sizeof(full), "%s%s", root, path);
    rmdir(full);
    assert_int_equal(symlink(target, full), 0);
}

static void make_tree(char *dir)
{
    strcpy(dir, "/tmp/corral-tpu-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_tree(const char *dir)
{
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A v4 host: /dev/accel0..3 with class links to PCI functions. */
static void make_v4_host(const char *root, bool gce)
{
    for (int i = 0; i < 4; i++) {
        char path[256], target[128];
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/0000:00:0%d.0/vendor", 4 + i);
        put(root, path, "0x1ae0\n");
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/0000:00:0%d.0/device", 4 + i);
        put(root, path, "0x005e\n");
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/0000:00:0%d.0/class", 4 + i);
        put(root, path, "0x120000\n");
        snprintf(path, sizeof(path), "/dev/accel%d", i);
        put(root, path, "");
        snprintf(path, sizeof(path), "/sys/class/accel/accel%d/device", i);
        snprintf(target, sizeof(target), "../../../bus/pci/devices/0000:00:0%d.0", 4 + i);
        link_to(root, path, target);
    }
    if (gce)
        put(root, "/sys/class/dmi/id/product_name", "Google Compute Engine\n");
}

static void test_odd_dev_entries(void **state)
{
    char dir[64];
    make_tree(dir);
    /* NVIDIA's /dev/accel/ directory, a VFIO group of another vendor, the
     * VFIO control node: no TPU */
    put(dir, "/dev/accel/accel0", "");
    put(dir, "/dev/vfio/vfio", "");
    put(dir, "/dev/vfio/7", "");
    put(dir, "/sys/bus/pci/devices/0000:41:00.0/vendor", "0x10de\n");
    link_to(dir, "/sys/kernel/iommu_groups/7/devices/0000:41:00.0",
            "../../../../bus/pci/devices/0000:41:00.0");
    fixture_env_t f;
    memset(&f, 0, sizeof(f));
    strcpy(f.root, dir);
    fixture_setenv(&f, "CORRAL_GCE_METADATA", "off");
    cr_node_t *n = discover(&f);
    assert_int_equal(n->devices.n, 0);
    assert_int_equal(n->warnings.n, 0);
    hw_node_free(n);

    /* /dev/accelN without class links: the TPU PCI functions in order,
     * not the gVNIC */
    remove_tree(dir);
    make_tree(dir);
    strcpy(f.root, dir);
    make_v4_host(dir, false);
    put(dir, "/sys/bus/pci/devices/0000:00:03.0/vendor", "0x1ae0\n");
    put(dir, "/sys/bus/pci/devices/0000:00:03.0/device", "0x0042\n");
    put(dir, "/sys/bus/pci/devices/0000:00:03.0/class", "0x020000\n");
    for (int i = 0; i < 4; i++) {
        char path[128], full[1200];
        snprintf(path, sizeof(path), "/sys/class/accel/accel%d/device", i);
        snprintf(full, sizeof(full), "%s%s", dir, path);
        unlink(full);
    }
    n = discover(&f);
    assert_int_equal(n->devices.n, 4);
    assert_string_equal(n->devices.v[2].pci, "0000:00:06.0");
    assert_string_equal(n->devices.v[2].sku, "TPU-V4");
    hw_node_free(n);

    /* an odd PCI device file: one warning naming it, the chip still there;
     * the slice then names the generation */
    put(dir, "/sys/bus/pci/devices/0000:00:05.0/device", "0xzz\n");
    fixture_setenv(&f, "TPU_ACCELERATOR_TYPE", "v4-8");
    n = discover(&f);
    assert_int_equal(n->warnings.n, 1);
    assert_int_equal(warnings_with(n, "0000:00:05.0/device", "PCI device id"), 1);
    assert_int_equal(n->devices.n, 4);
    assert_string_equal(n->devices.v[1].sku, "TPU-V4");
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-topology"), "2x2x1");
    hw_node_free(n);

    /* three chips where each host of the slice has four */
    char full[1200];
    snprintf(full, sizeof(full), "%s/dev/accel3", dir);
    unlink(full);
    n = discover(&f);
    assert_int_equal(n->devices.n, 3);
    assert_int_equal(warnings_with(n, "3 TPU chips", "has 4"), 1);
    assert_null(find_domain(n, "tpu-slice"));
    hw_node_free(n);
    fixture_close(&f);
    remove_tree(dir);
}

/* ---- GCE metadata ---- */

static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 16), 0);
    socklen_t len = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static const struct {
    const char *key, *value;
} metadata[] = {
    {"accelerator-type", "v4-16"},
    {"agent-worker-number", "1"},
    {"instance-id", "gce-slice"},
    {"tpu-env", "ACCELERATOR_TYPE: 'v4-16'\nTOPOLOGY: '2x2x2'\nWORKER_ID: '1'\n"},
    {"worker-network-endpoints", "unknown:unknown:10.0.0.2,unknown:unknown:10.0.0.3"},
};

/* The stand-in metadata server: answers until killed. */
static void serve(int lfd)
{
    for (;;) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0)
            _exit(1);
        char req[2048];
        ssize_t r = recv(c, req, sizeof(req) - 1, 0);
        req[r > 0 ? r : 0] = '\0';
        const char *val = NULL;
        for (size_t i = 0; i < CR_ARRAY_SIZE(metadata); i++) {
            char want[128];
            snprintf(want, sizeof(want), "/attributes/%s HTTP", metadata[i].key);
            if (strstr(req, want) && strstr(req, "Metadata-Flavor: Google"))
                val = metadata[i].value;
        }
        char reply[1024];
        int n = val ? snprintf(reply, sizeof(reply), "HTTP/1.0 200 OK\r\n\r\n%s", val)
                    : snprintf(reply, sizeof(reply), "HTTP/1.0 404 Not Found\r\n\r\n");
        if (send(c, reply, (size_t)n, MSG_NOSIGNAL) < 0)
            _exit(1);
        close(c);
    }
}

static void test_gce_metadata(void **state)
{
    char dir[64], addr[64];
    make_tree(dir);
    make_v4_host(dir, true);
    int port, lfd = listen_loopback(&port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        serve(lfd);
    fixture_env_t f;
    memset(&f, 0, sizeof(f));
    strcpy(f.root, dir);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    fixture_setenv(&f, "CORRAL_GCE_METADATA", addr);
    cr_node_t *n = discover(&f);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(lfd);
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(n->devices.n, 4);
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-pod-type"), "v4-16");
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-topology"), "2x2x2");
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-worker-id"), "1");
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-name"), "gce-slice");
    const cr_domain_t *s = find_domain(n, "tpu-slice");
    assert_non_null(s);
    assert_int_equal(s->nhosts, 2);
    assert_string_equal(s->hosts[1], "10.0.0.3");
    assert_int_equal(n->devices.v[0].coords[2], 1);
    hw_node_free(n);
    fixture_close(&f);
    remove_tree(dir);
}

static bool pending_connection(int lfd)
{
    int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
    if (c >= 0)
        close(c);
    return c >= 0;
}

static void test_gce_metadata_not_asked(void **state)
{
    char dir[64], addr[64];
    int port, lfd = listen_loopback(&port);
    fcntl(lfd, F_SETFL, O_NONBLOCK);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);

    /* not a GCE VM: never asked, whatever CORRAL_GCE_METADATA says */
    make_tree(dir);
    make_v4_host(dir, false);
    fixture_env_t f;
    memset(&f, 0, sizeof(f));
    strcpy(f.root, dir);
    fixture_setenv(&f, "CORRAL_GCE_METADATA", addr);
    cr_node_t *n = discover(&f);
    assert_false(pending_connection(lfd));
    assert_int_equal(n->devices.n, 4);
    assert_null(find_domain(n, "tpu-slice"));
    hw_node_free(n);
    fixture_close(&f);
    remove_tree(dir);

    /* a GCE VM with CORRAL_GCE_METADATA=off: never asked */
    make_tree(dir);
    make_v4_host(dir, true);
    memset(&f, 0, sizeof(f));
    strcpy(f.root, dir);
    fixture_setenv(&f, "CORRAL_GCE_METADATA", addr);
    fixture_setenv(&f, "CORRAL_GCE_METADATA", "off");
    n = discover(&f);
    assert_false(pending_connection(lfd));
    assert_int_equal(n->warnings.n, 0);
    hw_node_free(n);

    /* GKE's variables present: the metadata server is not needed */
    fixture_setenv(&f, "CORRAL_GCE_METADATA", addr);
    fixture_setenv(&f, "TPU_ACCELERATOR_TYPE", "v4-8");
    n = discover(&f);
    assert_false(pending_connection(lfd));
    assert_string_equal(cr_node_get_label(n, "corral.io/tpu-slice-topology"), "2x2x1");
    hw_node_free(n);

    /* a server that never answers: about 300 ms, then one warning */
    fixture_setenv(&f, "TPU_ACCELERATOR_TYPE", "");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    n = discover(&f);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_true(s < 2.0);
    assert_int_equal(warnings_with(n, "metadata", "300 ms"), 1);
    assert_int_equal(n->devices.n, 4);
    assert_null(find_domain(n, "tpu-slice"));
    hw_node_free(n);
    fixture_close(&f);
    remove_tree(dir);
    close(lfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v6e_hosts),
        cmocka_unit_test(test_v5p_hosts),
        cmocka_unit_test(test_isolation),
        cmocka_unit_test(test_isolation_described_host),
        cmocka_unit_test(test_bad_slice),
        cmocka_unit_test(test_bad_hostnames),
        cmocka_unit_test(test_slice_from_partial_env),
        cmocka_unit_test(test_small_multi_host_and_defaults),
        cmocka_unit_test(test_odd_dev_entries),
        cmocka_unit_test(test_gce_metadata),
        cmocka_unit_test(test_gce_metadata_not_asked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
