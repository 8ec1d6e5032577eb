/* hw/backend_nvidia.c against the stand-in NVML (tests/stubs/nvml_stub.c)
 * and the recorded dgx-h100 and pcie-a100 trees: what NVML reports, what
 * the sysfs fallback finds without it, and that a failing or crashing NVML
 * leaves a warning and a running process. Expected values come from the
 * fixture files (nvml.json, MACHINES.md), not from the backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture_tree.h"
#include "hw/nvml_api.h"
#include "sched_fixture.h"
#include <stdlib.h>
#include <sys/stat.h>

#define MIB (1ull << 20)

static char stub_lib[1024];

static void nvml_json_path(const char *machine, char *out, size_t size)
{
    snprintf(out, size, "%s/tests/fixtures/hw/%s/nvml.json", CORRAL_SOURCE_DIR, machine);
}

static json_t *load_nvml(const char *machine)
{
    char path[1200];
    nvml_json_path(machine, path, sizeof(path));
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fail_msg("%s:%d: %s", path, je.line, je.text);
    return j;
}

/* Points the backend (through the fixture's environment) and the stub
 * (through the process environment, which is all it can read) at a
 * machine description. */
static void use_stub(fixture_env_t *f, const char *json_path)
{
    snprintf(stub_lib, sizeof(stub_lib), "%s/tests/stubs/libnvml_stub.so", CORRAL_BUILD_DIR);
    fixture_setenv(f, "CORRAL_NVML_LIBRARY", stub_lib);
    fixture_setenv(f, "CORRAL_NVML_STUB", json_path);
    setenv("CORRAL_NVML_STUB", json_path, 1);
}

/* Writes a changed machine description to a temporary file. */
static void write_tmp(json_t *j, char *path, size_t size)
{
    snprintf(path, size, "/tmp/corral-nvml-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *fp = fdopen(fd, "w");
    assert_non_null(fp);
    assert_int_equal(json_dumpf(j, fp, JSON_INDENT(1)), 0);
    fclose(fp);
}

static cr_node_t *discover(fixture_env_t *f)
{
    hw_options_t o = fixture_options(f);
    o.no_host = true;
    cr_node_t *n = NULL;
    char *msg = NULL;
    int err = hw_discover(&o, &n, &msg);
    if (err)
        fail_msg("hw_discover: %s", msg ? msg : cr_strerror(err));
    free(msg);
    return n;
}

/* Points the stub at nvml_machine's nvml.json as edit changes it, written
 * to the temporary file tmp (the caller unlinks it). */
static void use_edited_stub(fixture_env_t *f, const char *nvml_machine, void (*edit)(json_t *),
                            char *tmp, size_t size)
{
    json_t *j = load_nvml(nvml_machine);
    edit(j);
    write_tmp(j, tmp, size);
    json_decref(j);
    use_stub(f, tmp);
}

/* Discovers machine with its own nvml.json, or with a changed copy made by
 * edit (NULL: unchanged). */
static cr_node_t *discover_with(const char *machine, const char *nvml_machine,
                                void (*edit)(json_t *), fixture_env_t *f)
{
    fixture_open(f, machine);
    char path[1200], tmp[64] = "";
    if (edit) {
        use_edited_stub(f, nvml_machine, edit, tmp, sizeof(tmp));
    } else {
        nvml_json_path(nvml_machine, path, sizeof(path));
        use_stub(f, path);
    }
    cr_node_t *n = discover(f);
    if (tmp[0])
        unlink(tmp);
    return n;
}

static size_t count_backend(const cr_node_t *n, const char *backend)
{
    size_t c = 0;
    for (size_t i = 0; i < n->devices.n; i++)
        c += strcmp(n->devices.v[i].backend, backend) == 0;
    return c;
}

static const char *find_warning(const cr_node_t *n, const char *needle)
{
    for (size_t i = 0; i < n->warnings.n; i++)
        if (strstr(n->warnings.v[i], needle))
            return n->warnings.v[i];
    return NULL;
}

static void print_warnings(const cr_node_t *n)
{
    for (size_t i = 0; i < n->warnings.n; i++)
        print_message("warning: %s\n", n->warnings.v[i]);
}

static const cr_domain_t *find_domain(const cr_node_t *n, const char *kind, size_t nth)
{
    for (size_t i = 0; i < n->domains.n; i++)
        if (strcmp(n->domains.v[i].kind, kind) == 0 && nth-- == 0)
            return &n->domains.v[i];
    return NULL;
}

static const char *jstr(const json_t *dev, const char *key)
{
    const char *s = json_string_value(json_object_get(dev, key));
    assert_non_null(s);
    return s;
}

/* ---- what NVML reports ---- */

static void test_dgx_h100(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100", NULL, &f);
    json_t *j = load_nvml("dgx-h100");
    json_t *devs = json_object_get(j, "devices");
    print_warnings(n);
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(count_backend(n, "nvidia"), 8);
    assert_int_equal(json_array_size(devs), 8);
    static const int numa[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    for (size_t i = 0; i < 8; i++) {
        const cr_device_t *d = &n->devices.v[i];
        json_t *jd = json_array_get(devs, i);
        assert_string_equal(d->backend, "nvidia");
        assert_string_equal(d->vendor, "NVIDIA");
        assert_string_equal(d->resource, "GPU");
        assert_string_equal(d->sku, "H100");
        assert_string_equal(d->product, "NVIDIA H100 80GB HBM3");
        assert_string_equal(d->uuid, jstr(jd, "uuid"));
        assert_string_equal(d->isolation_id, d->uuid);
        assert_string_equal(d->pci, jstr(jd, "pci"));
        assert_int_equal(d->pci_vendor, 0x10de);
        assert_int_equal(d->pci_device, 0x2330);
        assert_int_equal(d->numa, numa[i]);
        assert_int_equal(d->memory, 81559 * MIB);
        assert_int_equal(d->compute_units, 132);
        assert_string_equal(d->compute_capability, "9.0");
        assert_string_equal(d->driver, "550.54.15");
        assert_int_equal(d->vendor_index, (int)i);
        assert_int_equal(d->health, CR_HEALTH_OK);
        assert_int_equal(d->parent, -1);
        assert_false(d->mig_enabled);
    }
    /* NV18 between every pair, through the switches */
    assert_int_equal(n->links.n, 8 * 7 / 2);
    for (int a = 0; a < 8; a++)
        for (int b = a + 1; b < 8; b++) {
            const cr_link_t *l = hw_node_find_link(n, a, b);
            assert_non_null(l);
            assert_int_equal(l->kind, CR_LINK_NVSWITCH);
            assert_int_equal(l->count, 18);
            assert_true(l->bandwidth_gbps == 18 * 25.0);
            int count = 0;
            assert_int_equal(hw_topo_pair(n, a, b, &count), CR_LINK_NVSWITCH);
            assert_int_equal(count, 18);
        }
    const cr_domain_t *isl = find_domain(n, "nvlink-island", 0);
    assert_non_null(isl);
    assert_string_equal(isl->name, "nvlink0");
    assert_int_equal(isl->nmembers, 8);
    assert_null(find_domain(n, "nvlink-island", 1));
    assert_null(cr_node_get_label(n, "corral.io/nvlink-clique"));
    assert_int_equal(fixture_resource(n, "GPU"), 8 * CR_QTY_ONE);
    assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "H100");
    json_decref(j);
    hw_node_free(n);
    fixture_close(&f);
}

static void test_pcie_a100(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("pcie-a100", "pcie-a100", NULL, &f);
    json_t *j = load_nvml("pcie-a100");
    print_warnings(n);
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(count_backend(n, "nvidia"), 4);
    static const char *const pci[4] = {"0000:17:00.0", "0000:31:00.0", "0000:b1:00.0",
                                       "0000:ca:00.0"};
    static const int numa[4] = {0, 0, 1, 1};
    for (size_t i = 0; i < 4; i++) {
        const cr_device_t *d = &n->devices.v[i];
        assert_string_equal(d->pci, pci[i]);
        assert_int_equal(d->numa, numa[i]);
        assert_string_equal(d->sku, "A100-80G");
        assert_string_equal(d->uuid,
                            jstr(json_array_get(json_object_get(j, "devices"), i), "uuid"));
        assert_int_equal(d->memory, 81920 * MIB);
        assert_int_equal(d->compute_units, 108);
        assert_string_equal(d->compute_capability, "8.0");
        assert_string_equal(d->driver, "535.183.01");
    }
    /* NV12 bridges 0-1 and 2-3, nothing else over NVLink */
    assert_int_equal(n->links.n, 2);
    static const int pairs[2][2] = {{0, 1}, {2, 3}};
    for (int p = 0; p < 2; p++) {
        const cr_link_t *l = hw_node_find_link(n, pairs[p][0], pairs[p][1]);
        assert_non_null(l);
        assert_int_equal(l->kind, CR_LINK_NVLINK);
        assert_int_equal(l->count, 12);
        assert_true(l->bandwidth_gbps == 12 * 25.0);
    }
    assert_null(hw_node_find_link(n, 0, 2));
    assert_null(hw_node_find_link(n, 1, 3));
    for (size_t k = 0; k < 2; k++) {
        const cr_domain_t *isl = find_domain(n, "nvlink-island", k);
        assert_non_null(isl);
        assert_int_equal(isl->nmembers, 2);
        assert_int_equal(isl->members[0], pairs[k][0]);
        assert_int_equal(isl->members[1], pairs[k][1]);
    }
    assert_null(find_domain(n, "nvlink-island", 2));
    json_decref(j);
    hw_node_free(n);
    fixture_close(&f);
}

static void test_mig(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100-mig", NULL, &f);
    json_t *j = load_nvml("dgx-h100-mig");
    json_t *migs = json_object_get(json_array_get(json_object_get(j, "devices"), 0), "mig");
    assert_int_equal(json_array_size(migs), 4);
    assert_int_equal(count_backend(n, "nvidia"), 8 + 4);
    assert_true(n->devices.v[0].mig_enabled);
    for (size_t i = 1; i < 8; i++)
        assert_false(n->devices.v[i].mig_enabled);
    static const char *const profiles[4] = {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"};
    for (size_t k = 0; k < 4; k++) {
        const cr_device_t *d = &n->devices.v[8 + k];
        json_t *jm = json_array_get(migs, k);
        assert_int_equal(d->parent, 0);
        assert_string_equal(d->uuid, jstr(jm, "uuid"));
        assert_true(cr_str_has_prefix(d->uuid, "MIG-"));
        assert_string_equal(d->isolation_id, d->uuid);
        assert_string_equal(d->mig_profile, profiles[k]);
        assert_int_equal(d->memory,
                         (uint64_t)json_integer_value(json_object_get(jm, "memory_mib")) * MIB);
        assert_int_equal(d->compute_units, json_integer_value(json_object_get(jm, "sm_count")));
        assert_string_equal(d->pci, n->devices.v[0].pci);
        assert_string_equal(d->sku, "H100");
        assert_false(d->mig_enabled);
    }
    /* the GPU in MIG mode is not schedulable itself; its 4 instances are */
    assert_int_equal(fixture_resource(n, "GPU"), (7 + 4) * CR_QTY_ONE);
    assert_non_null(find_warning(n, "MIG mode on"));
    /* isolating a MIG instance names it by its MIG UUID */
    hw_options_t o = fixture_options(&f);
    cr_envlist_t env = {0};
    int devs[] = {9, 1};
    char *msg = NULL;
    assert_int_equal(hw_isolate(&o, n, devs, 1, &env, &msg), 0);
    assert_string_equal(cr_envlist_get(&env, "CUDA_VISIBLE_DEVICES"), n->devices.v[9].uuid);
    cr_envlist_free(&env);
    /* CUDA enumerates one MIG device per process and none beside a whole
     * GPU (NVIDIA MIG user guide, "CUDA Device Enumeration"): refused */
    assert_int_equal(hw_isolate(&o, n, devs, 2, &env, &msg), CR_EINVAL);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "MIG instance"));
    free(msg);
    msg = NULL;
    int two_migs[] = {10, 11};
    assert_int_equal(hw_isolate(&o, n, two_migs, 2, &env, &msg), CR_EINVAL);
    free(msg);
    cr_envlist_free(&env);
    json_decref(j);
    hw_node_free(n);
    fixture_close(&f);
}

/* The scheduler on the MIG fixture (7 whole GPUs, GPU 0 split into 4
 * instances): a worker gets whole GPUs or one MIG instance, never more
 * than one instance and never an instance beside a GPU (NVIDIA MIG user
 * guide, "CUDA Device Enumeration": CUDA sees one MIG compute instance per
 * process, and not alongside non-MIG devices). */
static void test_mig_placement(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100-mig", NULL, &f);
    sched_cluster_t *c = sched_fixture_cluster(n);
    /* 9 > 7 whole GPUs: never made up with MIG instances */
    sched_result_t r = sched_fixture_place(c, "GPU=9");
    assert_int_equal(r.status, SCHED_INFEASIBLE);
    assert_non_null(strstr(r.reason, "4 MIG instances go one to a worker"));
    assert_non_null(strstr(r.reason, "7 whole GPUs"));
    /* 7 takes the whole GPUs 1..7 */
    r = sched_fixture_place(c, "GPU=7");
    int ids[16];
    assert_int_equal(sched_fixture_devices(c, &r, ids, 16), 7);
    for (int i = 0; i < 7; i++)
        assert_int_equal(ids[i], i + 1);
    /* no whole GPU left: GPU=2 cannot be two MIG instances, GPU=1 can be one */
    assert_int_equal(sched_fixture_place(c, "GPU=2").status, SCHED_RETRY);
    for (int k = 0; k < 4; k++) {
        r = sched_fixture_place(c, "GPU=1");
        assert_int_equal(sched_fixture_devices(c, &r, ids, 16), 1);
        assert_int_equal(n->devices.v[ids[0]].parent, 0);
        assert_true(n->devices.v[ids[0]].mig_profile[0] != '\0');
    }
    assert_int_equal(sched_fixture_place(c, "GPU=1").status, SCHED_RETRY);
    sched_cluster_free(c);
    /* a fresh view: GPU=1 prefers a whole GPU while one is free */
    c = sched_fixture_cluster(n);
    r = sched_fixture_place(c, "GPU=1");
    assert_int_equal(sched_fixture_devices(c, &r, ids, 16), 1);
    assert_int_equal(n->devices.v[ids[0]].parent, -1);
    assert_false(n->devices.v[ids[0]].mig_enabled);
    sched_cluster_free(c);
    hw_node_free(n);
    fixture_close(&f);
}

static void ecc_on_gpu0(json_t *j)
{
    json_t *d0 = json_array_get(json_object_get(j, "devices"), 0);
    json_object_set_new(json_object_get(d0, "ecc"), "uncorrected_volatile", json_integer(1));
}

/* Memory errors on a GPU reach its MIG instances. */
static void test_mig_unhealthy_parent(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100-mig", ecc_on_gpu0, &f);
    assert_int_equal(count_backend(n, "nvidia"), 12);
    for (size_t i = 8; i < 12; i++) {
        assert_int_equal(n->devices.v[i].parent, 0);
        assert_int_equal(n->devices.v[i].health, CR_HEALTH_UNHEALTHY);
        assert_non_null(strstr(n->devices.v[i].health_reason, "uncorrected ECC"));
    }
    assert_int_equal(fixture_resource(n, "GPU"), 7 * CR_QTY_ONE);
    hw_node_free(n);
    fixture_close(&f);
}

static void anonymous_switches(json_t *j)
{
    size_t i, k;
    json_t *d, *l;
    json_array_foreach(json_object_get(j, "devices"), i, d)
    {
        json_array_foreach(json_object_get(d, "nvlinks"), k, l)
        {
            json_object_del(l, "pci");
        }
    }
}

/* Switches NVML gives no PCI address for still make one fabric. */
static void test_switches_without_address(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100", anonymous_switches, &f);
    assert_int_equal(n->links.n, 28);
    for (size_t i = 0; i < n->links.n; i++) {
        assert_int_equal(n->links.v[i].kind, CR_LINK_NVSWITCH);
        assert_int_equal(n->links.v[i].count, 18);
    }
    assert_int_equal(find_domain(n, "nvlink-island", 0)->nmembers, 8);
    hw_node_free(n);
    fixture_close(&f);
}

/* ---- isolation ---- */

static void check_isolation(const cr_node_t *n, fixture_env_t *f, const int *devs, size_t nd,
                            const char *want)
{
    hw_options_t o = fixture_options(f);
    cr_envlist_t env = {0};
    char *msg = NULL;
    assert_int_equal(hw_isolate(&o, n, devs, nd, &env, &msg), 0);
    assert_null(msg);
    assert_string_equal(cr_envlist_get(&env, "CUDA_VISIBLE_DEVICES"), want);
    assert_string_equal(cr_envlist_get(&env, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
    cr_envlist_free(&env);
}

static void test_isolate_by_uuid_and_index(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100", NULL, &f);
    int devs[] = {3, 1};
    char want[256];
    snprintf(want, sizeof(want), "%s,%s", n->devices.v[3].uuid, n->devices.v[1].uuid);
    check_isolation(n, &f, devs, 2, want);
    check_isolation(n, &f, devs, 0, "");
    hw_node_free(n);

    fixture_setenv(&f, "CORRAL_CUDA_VISIBLE_BY", "index");
    n = discover(&f);
    check_isolation(n, &f, devs, 2, "3,1");
    int all[] = {7, 0};
    check_isolation(n, &f, all, 2, "7,0");
    hw_node_free(n);

    fixture_setenv(&f, "CORRAL_CUDA_VISIBLE_BY", "bogus");
    n = discover(&f);
    assert_non_null(find_warning(n, "CORRAL_CUDA_VISIBLE_BY=bogus"));
    check_isolation(n, &f, devs, 1, n->devices.v[3].uuid);
    hw_node_free(n);
    fixture_close(&f);
}

static void reverse_devices(json_t *j)
{
    json_t *devs = json_object_get(j, "devices"), *rev = json_array();
    for (size_t i = json_array_size(devs); i-- > 0;)
        json_array_append(rev, json_array_get(devs, i));
    json_object_set_new(j, "devices", rev);
}

/* Pins the numbering by PCI address (hw/backend_nvidia.c
 * set_isolation_ids sorts the GPUs by PCI address before numbering them):
 * with CORRAL_CUDA_VISIBLE_BY=index the CUDA index of a GPU is its rank
 * in PCI bus order, whatever order NVML enumerates them in. Authority:
 * CUDA_DEVICE_ORDER=PCI_BUS_ID "orders devices by PCI bus ID in ascending
 * order" (CUDA C++ Programming Guide, CUDA Environment Variables), which
 * corral sets beside CUDA_VISIBLE_DEVICES. The stand-in NVML here lists
 * the dgx-h100 GPUs in reverse PCI order. */
static void test_index_is_the_pci_rank(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "dgx-h100");
    char tmp[64];
    use_edited_stub(&f, "dgx-h100", reverse_devices, tmp, sizeof(tmp));
    fixture_setenv(&f, "CORRAL_CUDA_VISIBLE_BY", "index");
    cr_node_t *n = discover(&f);
    unlink(tmp);
    assert_int_equal(count_backend(n, "nvidia"), 8);
    /* NVML's first is the highest address, so the order really differs */
    assert_true(strcmp(n->devices.v[0].pci, n->devices.v[7].pci) > 0);
    for (size_t i = 0; i < n->devices.n; i++) {
        const cr_device_t *d = &n->devices.v[i];
        size_t rank = 0;
        for (size_t k = 0; k < n->devices.n; k++)
            rank += strcmp(n->devices.v[k].pci, d->pci) < 0;
        char want[8];
        snprintf(want, sizeof(want), "%zu", rank);
        assert_string_equal(d->isolation_id, want);
    }
    int first[] = {0};
    check_isolation(n, &f, first, 1, "7");
    hw_node_free(n);
    fixture_close(&f);
}

/* A described node (no NVML anywhere): isolate uses only the description. */
static void test_isolate_described_node(void **state)
{
    cr_node_t *n = hw_node_new();
    n->simulated = true;
    for (int i = 0; i < 4; i++) {
        cr_device_t *d = cr_node_add_device(n);
        cr_strlcpy(d->backend, "nvidia", sizeof(d->backend));
    }
    cr_strlcpy(n->devices.v[2].isolation_id, "GPU-fake-2", sizeof(n->devices.v[2].isolation_id));
    cr_hw_env_t env = {.root = "/"};
    cr_envlist_t out = {0};
    int devs[] = {3, 2, 0};
    assert_int_equal(hw_backend_nvidia.isolate(&env, n, devs, 3, &out), 0);
    assert_string_equal(cr_envlist_get(&out, "CUDA_VISIBLE_DEVICES"), "3,GPU-fake-2,0");
    cr_envlist_free(&out);
    cr_telemetry_t t;
    assert_int_equal(hw_backend_nvidia.telemetry(&env, n, 0, &t), CR_ENOSYS);
    hw_node_free(n);
}

/* ---- without NVML ---- */

static void test_sysfs_fallback(void **state)
{
    static const char *const machines[] = {"dgx-h100", "pcie-a100"};
    for (size_t m = 0; m < CR_ARRAY_SIZE(machines); m++) {
        fixture_env_t f;
        cr_node_t *with = discover_with(machines[m], machines[m], NULL, &f);
        fixture_setenv(&f, "CORRAL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
        cr_node_t *without = discover(&f);
        const char *w = find_warning(without, "NVML not loadable");
        assert_non_null(w);
        assert_non_null(strstr(w, "/nonexistent/libnvidia-ml.so.1"));
        assert_int_equal(count_backend(without, "nvidia"), count_backend(with, "nvidia"));
        assert_true(without->devices.n > 0);
        for (size_t i = 0; i < without->devices.n; i++) {
            const cr_device_t *a = &with->devices.v[i], *b = &without->devices.v[i];
            assert_string_equal(b->pci, a->pci);
            assert_string_equal(b->sku, a->sku);
            assert_string_equal(b->product, a->product);
            assert_string_equal(b->uuid, a->uuid); /* from /proc/driver/nvidia/gpus */
            assert_string_equal(b->isolation_id, a->isolation_id);
            assert_string_equal(b->driver, a->driver);
            assert_int_equal(b->numa, a->numa);
            assert_int_equal(b->pci_device, a->pci_device);
            assert_int_equal(b->compute_units, a->compute_units);
            assert_int_equal(b->memory, 0); /* sysfs does not say */
        }
        assert_int_equal(without->links.n, 0);
        hw_node_free(with);
        hw_node_free(without);
        fixture_close(&f);
    }
}

static void hide_last_gpu(json_t *j)
{
    json_object_set_new(j, "visible_devices", json_integer(7));
}

static void test_count_disagreement(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100", hide_last_gpu, &f);
    assert_int_equal(count_backend(n, "nvidia"), 7);
    const char *w = find_warning(n, "NVML describes 7 GPUs but the PCI bus has 8");
    assert_non_null(w);
    assert_non_null(strstr(w, "0000:df:00.0"));
    hw_node_free(n);
    fixture_close(&f);
}

static void put(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Malformed files: one warning each naming the file, only that device
 * (or that fact) lost, and nothing said about devices that are not ours. */
static void test_malformed_files(void **state)
{
    char dir[] = "/tmp/corral-nvbad-XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const struct {
        const char *dev, *vendor, *cls, *device, *numa;
    } rows[] = {
        {"0000:01:00.0", "0x10de", "0x030200", "0x2330", "zero"},
        {"0000:02:00.0", "0x10de", "0xZZ", "0x2330", "0"},
        {"0000:03:00.0", "junk", "0x030200", "0x2330", "0"},
        {"0000:04:00.0", "0x10de", "0x030200", "0x123456", "0"},
        {"0000:05:00.0", "0x10de", "0x020000", "0x1021", "0"}, /* not a GPU */
    };
    const char *files[] = {"vendor", "class", "device", "numa_node"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(rows); i++) {
        const char *vals[] = {rows[i].vendor, rows[i].cls, rows[i].device, rows[i].numa};
        for (size_t k = 0; k < 4; k++) {
            char rel[256];
            snprintf(rel, sizeof(rel), "/sys/bus/pci/devices/%s/%s", rows[i].dev, files[k]);
            put(dir, rel, vals[k]);
        }
    }
    put(dir, "/proc/driver/nvidia/version", "garbage\n");
    put(dir, "/proc/driver/nvidia/gpus/0000:01:00.0/information", "nothing useful here\n");
    fixture_env_t f;
    fixture_open(&f, "no-such-machine");
    snprintf(f.root, sizeof(f.root), "%s", dir);
    fixture_setenv(&f, "CORRAL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
    cr_node_t *n = discover(&f);
    print_warnings(n);
    assert_int_equal(count_backend(n, "nvidia"), 1);
    const cr_device_t *d = &n->devices.v[0];
    assert_string_equal(d->pci, "0000:01:00.0");
    assert_int_equal(d->numa, -1);
    assert_string_equal(d->sku, "H100");
    assert_string_equal(d->product, "NVIDIA GPU [10de:2330]");
    assert_string_equal(d->driver, "");
    assert_string_equal(d->uuid, "");
    assert_string_equal(d->isolation_id, "0");
    static const char *const want[] = {
        "0000:01:00.0/numa_node: expected a NUMA node number",
        "0000:02:00.0/class: expected a PCI class such as 0x030200",
        "0000:04:00.0/device: expected a PCI device such as 0x2330",
        "/proc/driver/nvidia/version: expected a line",
        "0000:01:00.0/information: expected 'Model:'",
    };
    assert_non_null(find_warning(n, "NVML not loadable (/nonexistent/libnvidia-ml.so.1: "));
    assert_non_null(find_warning(n, "1 GPU described from sysfs only"));
    for (size_t i = 0; i < CR_ARRAY_SIZE(want); i++) {
        const char *w = find_warning(n, want[i]);
        if (!w)
            fail_msg("no warning containing '%s'", want[i]);
        assert_non_null(strstr(w, dir));
    }
    assert_null(find_warning(n, "0000:03:00.0"));
    assert_null(find_warning(n, "0000:05:00.0"));
    hw_node_free(n);
    fixture_close(&f);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- a misbehaving NVML ---- */

static void fail_count(json_t *j)
{
    json_t *fail = json_object();
    json_object_set_new(fail, "nvmlDeviceGetCount_v2", json_string("UNKNOWN"));
    json_object_set_new(j, "fail", fail);
}

static void fail_init(json_t *j)
{
    json_t *fail = json_object();
    json_object_set_new(fail, "nvmlInit_v2", json_string("DRIVER_NOT_LOADED"));
    json_object_set_new(j, "fail", fail);
}

static void lose_gpu3(json_t *j)
{
    json_t *fail = json_object();
    json_object_set_new(fail, "nvmlDeviceGetMemoryInfo@3", json_string("GPU_IS_LOST"));
    json_object_set_new(fail, "nvmlDeviceGetHandleByIndex_v2@6", json_integer(15));
    json_object_set_new(j, "fail", fail);
}

static void test_nvml_errors(void **state)
{
    fixture_env_t f;
    /* the count fails: a warning, and the GPUs still come from sysfs */
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100", fail_count, &f);
    const char *w = find_warning(n, "nvmlDeviceGetCount failed");
    assert_non_null(w);
    assert_non_null(strstr(w, "unknown error"));
    assert_int_equal(count_backend(n, "nvidia"), 8);
    hw_node_free(n);
    fixture_close(&f);

    n = discover_with("dgx-h100", "dgx-h100", fail_init, &f);
    assert_non_null(find_warning(n, "nvmlInit failed: driver not loaded"));
    assert_int_equal(count_backend(n, "nvidia"), 8);
    hw_node_free(n);
    fixture_close(&f);

    /* one GPU lost, one handle refused: marked and left out, the rest fine */
    n = discover_with("dgx-h100", "dgx-h100", lose_gpu3, &f);
    print_warnings(n);
    assert_int_equal(count_backend(n, "nvidia"), 7);
    const cr_device_t *d3 = &n->devices.v[3];
    assert_int_equal(d3->vendor_index, 3);
    assert_int_equal(d3->health, CR_HEALTH_UNHEALTHY);
    assert_non_null(strstr(d3->health_reason, "GPU is lost"));
    assert_non_null(find_warning(n, "is unhealthy: memory info: GPU is lost"));
    assert_non_null(find_warning(n, "NVML GPU 6: GPU is lost; left out"));
    assert_non_null(find_warning(n, "not seen by NVML: 0000:d1:00.0"));
    assert_int_equal(n->devices.v[6].vendor_index, 7);
    assert_int_equal(fixture_resource(n, "GPU"), 6 * CR_QTY_ONE);
    hw_node_free(n);
    fixture_close(&f);
}

static void crash_in_nvlink(json_t *j)
{
    json_object_set_new(j, "crash", json_string("nvmlDeviceGetNvLinkState"));
}

static void test_nvml_crash(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100", crash_in_nvlink, &f);
    /* we are still here; the backend is off and says so */
    const char *w = find_warning(n, "backend nvidia");
    assert_non_null(w);
    assert_non_null(strstr(w, "crashed"));
    assert_int_equal(count_backend(n, "nvidia"), 0);
    hw_node_free(n);
    fixture_close(&f);
}

static void hang_in_name(json_t *j)
{
    json_object_set_new(j, "hang", json_string("nvmlDeviceGetName@2"));
}

static void test_nvml_hang(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "dgx-h100");
    fixture_setenv(&f, "CORRAL_PROBE_TIMEOUT_MS", "1000");
    char tmp[64];
    use_edited_stub(&f, "dgx-h100", hang_in_name, tmp, sizeof(tmp));
    cr_node_t *n = discover(&f);
    unlink(tmp);
    assert_non_null(find_warning(n, "backend nvidia off"));
    assert_int_equal(count_backend(n, "nvidia"), 0);
    hw_node_free(n);
    fixture_close(&f);
}

/* ---- health and fabric ---- */

static void bad_memory(json_t *j)
{
    json_t *devs = json_object_get(j, "devices");
    json_object_set_new(json_object_get(json_array_get(devs, 5), "ecc"), "uncorrected_volatile",
                        json_integer(2));
    json_object_set_new(json_object_get(json_array_get(devs, 6), "ecc"), "remap_pending",
                        json_true());
    json_object_set_new(json_object_get(json_array_get(devs, 7), "ecc"), "retired_pages_pending",
                        json_true());
}

static void test_health(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100", bad_memory, &f);
    assert_int_equal(n->devices.v[4].health, CR_HEALTH_OK);
    assert_int_equal(n->devices.v[5].health, CR_HEALTH_UNHEALTHY);
    assert_non_null(strstr(n->devices.v[5].health_reason, "2 uncorrected ECC errors"));
    assert_int_equal(n->devices.v[6].health, CR_HEALTH_DEGRADED);
    assert_non_null(strstr(n->devices.v[6].health_reason, "remapping pending"));
    assert_int_equal(n->devices.v[7].health, CR_HEALTH_DEGRADED);
    assert_non_null(strstr(n->devices.v[7].health_reason, "retired memory pages"));
    assert_non_null(find_warning(n, "device 5 (H100) is unhealthy"));
    assert_int_equal(fixture_resource(n, "GPU"), 7 * CR_QTY_ONE);
    hw_node_free(n);
    fixture_close(&f);
}

static void add_fabric(json_t *j)
{
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(j, "devices"), i, d)
    {
        json_t *fab = json_object();
        json_object_set_new(fab, "cluster_uuid",
                            json_string("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"));
        json_object_set_new(fab, "clique", json_integer(7));
        json_object_set_new(d, "fabric", fab);
    }
}

static void test_fabric_clique(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100", add_fabric, &f);
    const char *want = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.7";
    assert_non_null(cr_node_get_label(n, "corral.io/nvlink-clique"));
    assert_string_equal(cr_node_get_label(n, "corral.io/nvlink-clique"), want);
    const cr_domain_t *c = find_domain(n, "nvlink-clique", 0);
    assert_non_null(c);
    assert_string_equal(c->name, want);
    assert_int_equal(c->nmembers, 8);
    hw_node_free(n);
    fixture_close(&f);
}

/* ---- telemetry ---- */

static void test_telemetry(void **state)
{
    fixture_env_t f;
    cr_node_t *n = discover_with("dgx-h100", "dgx-h100", NULL, &f);
    json_t *j = load_nvml("dgx-h100");
    cr_hw_env_t env = {.root = f.root, .getenv = fixture_getenv, .getenv_ctx = &f};
    for (int i = 0; i < 8; i += 7) {
        json_t *t =
            json_object_get(json_array_get(json_object_get(j, "devices"), (size_t)i), "telemetry");
        cr_telemetry_t tel;
        hw_telemetry_init(&tel);
        assert_int_equal(hw_backend_nvidia.telemetry(&env, n, i, &tel), 0);
        json_t *ecc =
            json_object_get(json_array_get(json_object_get(j, "devices"), (size_t)i), "ecc");
        assert_int_equal(tel.ecc_corrected,
                         json_integer_value(json_object_get(ecc, "corrected_volatile")));
        assert_int_equal(tel.ecc_uncorrected,
                         json_integer_value(json_object_get(ecc, "uncorrected_volatile")));
        assert_int_equal(tel.ecc_corrected, i == 0 ? 3 : 0); /* the fixture's GPU 0 has 3 */
        assert_int_equal(tel.xid_last, 0);                   /* none on GPUs 0 and 7 */
        assert_true(tel.utilization_pct ==
                    (double)json_integer_value(json_object_get(t, "gpu_util")));
        assert_int_equal(tel.memory_used,
                         (uint64_t)json_integer_value(json_object_get(t, "memory_used_mib")) * MIB);
        assert_true(tel.power_w == json_integer_value(json_object_get(t, "power_mw")) / 1000.0);
        assert_true(tel.temperature_c ==
                    (double)json_integer_value(json_object_get(t, "temperature_c")));
        assert_int_equal(tel.health, CR_HEALTH_OK);
    }
    assert_true(n->devices.v[7].memory > 0);
    cr_telemetry_t tel;
    /* GPU 1's XIDs 13 then 31 (its "xid_events"): the last one stays */
    for (int k = 0; k < 2; k++) {
        hw_telemetry_init(&tel);
        assert_int_equal(hw_backend_nvidia.telemetry(&env, n, 1, &tel), 0);
        assert_int_equal(tel.xid_last, 31);
    }
    assert_int_equal(hw_backend_nvidia.telemetry(&env, n, 99, &tel), CR_ENODEV);
    json_decref(j);
    hw_node_free(n);
    fixture_close(&f);
}

/* ---- /proc/driver/nvidia parsers ---- */

static void test_parsers(void **state)
{
    char v[32];
    assert_int_equal(hw_nvidia_parse_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
                                             "550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC "
                                             "version: gcc 12\n",
                                             v, sizeof(v)),
                     0);
    assert_string_equal(v, "550.54.15");
    assert_int_equal(hw_nvidia_parse_version("NVRM version: NVIDIA UNIX Open Kernel Module for "
                                             "x86_64  560.35.03  Release Build  (dvs-builder@x)\n",
                                             v, sizeof(v)),
                     0);
    assert_string_equal(v, "560.35.03");
    assert_int_equal(
        hw_nvidia_parse_version("NVRM version: Kernel Module\n 550.54.15", v, sizeof(v)),
        CR_EPARSE); /* the version must be on the NVRM line */
    assert_int_equal(hw_nvidia_parse_version("NVRM version: Kernel Module 1..2 3.\n", v, sizeof(v)),
                     CR_EPARSE);
    assert_int_equal(hw_nvidia_parse_version("garbage", v, sizeof(v)), CR_EPARSE);
    assert_int_equal(hw_nvidia_parse_version("NVRM version: Kernel Module  x1", v, sizeof(v)),
                     CR_EPARSE);
    assert_int_equal(hw_nvidia_parse_version("NVRM version: Kernel Module  1.2\n", v, 3),
                     CR_EPARSE);

    hw_nvidia_info_t info;
    assert_int_equal(hw_nvidia_parse_information("Model: \t\t NVIDIA A100 80GB PCIe\nGPU UUID: "
                                                 "\t GPU-1234\nBus Location: \t 0000:17:00.0\n"
                                                 "Device Minor: \t 2\nNoColonLine\n",
                                                 &info),
                     0);
    assert_string_equal(info.model, "NVIDIA A100 80GB PCIe");
    assert_string_equal(info.uuid, "GPU-1234");
    assert_string_equal(info.bus, "0000:17:00.0");
    assert_int_equal(info.minor, 2);
    assert_int_equal(hw_nvidia_parse_information("GPU UUID: GPU-\?\?\?\?-\?\?\n", &info),
                     CR_EPARSE);
    assert_int_equal(hw_nvidia_parse_information("Device Minor: x\n", &info), CR_EPARSE);
    assert_int_equal(info.minor, -1);

    char b[20];
    assert_int_equal(hw_nvidia_normalize_busid("00000000:1A:00.0", b, sizeof(b)), 0);
    assert_string_equal(b, "0000:1a:00.0");
    assert_int_equal(hw_nvidia_normalize_busid("3b:00.1", b, sizeof(b)), 0);
    assert_string_equal(b, "0000:3b:00.1");
    static const char *const bad[] = {"",
                                      "1a:00",
                                      "0000:1a:00.8",
                                      "0000:1a:20.0",
                                      "000000001:1a:00.0",
                                      "0000:1a:00.0x",
                                      "g0:00.0",
                                      "0000:1a:00:0.0",
                                      "10000:1a:00.0"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++)
        assert_int_equal(hw_nvidia_normalize_busid(bad[i], b, sizeof(b)), CR_EPARSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgx_h100),
        cmocka_unit_test(test_pcie_a100),
        cmocka_unit_test(test_mig),
        cmocka_unit_test(test_mig_placement),
        cmocka_unit_test(test_mig_unhealthy_parent),
        cmocka_unit_test(test_switches_without_address),
        cmocka_unit_test(test_isolate_by_uuid_and_index),
        cmocka_unit_test(test_index_is_the_pci_rank),
        cmocka_unit_test(test_isolate_described_node),
        cmocka_unit_test(test_sysfs_fallback),
        cmocka_unit_test(test_count_disagreement),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_nvml_errors),
        cmocka_unit_test(test_nvml_crash),
        cmocka_unit_test(test_nvml_hang),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_fabric_clique),
        cmocka_unit_test(test_telemetry),
        cmocka_unit_test(test_parsers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
