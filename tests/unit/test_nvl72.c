/* GB200 NVL72: the gb200-tray fixture (one compute tray: 4 GPUs, 2 Grace
 * CPUs) through the stand-in NVML, whose fabric information (cluster UUID
 * and clique id, nvmlDeviceGetGpuFabricInfo) gives corral.io/nvlink-clique;
 * the 18 simulated trays of one rack (specs/gb200-nvl72/, written by
 * scripts/nvl72-rack.py); and a 72-GPU gang with domain
 * corral.io/nvlink-clique landing on one rack, never across two. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture_tree.h"
#include "sched/sched.h"

/* tests/fixtures/hw/gb200-tray/nvml.json: "fabric" of every GPU */
#define CLIQUE "9b3c2d1e-4f5a-6b7c-8d9e-0a1b2c3d4e5f.1"
#define TRAYS 18

static void test_tray_fixture(void **state)
{
    char lib[1024], stub[1100];
    fixture_env_t f;
    fixture_open(&f, "gb200-tray");
    snprintf(lib, sizeof(lib), "%s/tests/stubs/libnvml_stub.so", CORRAL_BUILD_DIR);
    snprintf(stub, sizeof(stub), "%s/nvml.json", f.dir);
    fixture_setenv(&f, "CORRAL_NVML_LIBRARY", lib);
    setenv("CORRAL_NVML_STUB", stub, 1);
    cr_node_t *n = fixture_discover(&f, NULL);
    assert_int_equal(n->devices.n, 4);
    assert_string_equal(cr_node_get_label(n, "corral.io/nvlink-clique"), CLIQUE);
    assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "GB200");
    const cr_domain_t *clique = NULL;
    for (size_t i = 0; i < n->domains.n; i++)
        if (strcmp(n->domains.v[i].kind, "nvlink-clique") == 0)
            clique = &n->domains.v[i];
    assert_non_null(clique);
    assert_string_equal(clique->name, CLIQUE);
    assert_int_equal(clique->nmembers, 4);
    /* the GPUs' own memory NUMA nodes (nvml.json's numa_id, as
     * nvmlDeviceGetNumaNodeId answers on a C2C GPU) */
    static const int numa_id[4] = {2, 10, 18, 26};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(n->devices.v[i].sku, "GB200");
        assert_int_equal(n->devices.v[i].memory_numa, numa_id[i]);
    }
    hw_node_free(n);
    unsetenv("CORRAL_NVML_STUB");
    fixture_close(&f);
}

static cr_node_t *load_tray(int t)
{
    char spec[1200];
    snprintf(spec, sizeof(spec), "%s/specs/gb200-nvl72/tray-%02d.yaml", CORRAL_SOURCE_DIR, t);
    cr_node_t *n = hw_node_new();
    char *msg = NULL;
    if (hw_spec_load(spec, n, &msg))
        fail_msg("%s", msg);
    return n;
}

/* Adds the 18 trays of rack r (1: as the specs say; 2: the same trays
 * renamed, in another clique). */
static void add_rack(sched_cluster_t *c, int r)
{
    for (int t = 1; t <= TRAYS; t++) {
        cr_node_t *n = load_tray(t);
        if (r == 2) {
            snprintf(n->id, sizeof(n->id), "gb200-r2-t%02d", t);
            cr_node_set_label(n, "corral.io/nvlink-clique",
                              "9b3c2d1e-4f5a-6b7c-8d9e-0a1b2c3d4e5f.2");
        }
        char msg[200];
        if (sched_cluster_add(c, n, msg, sizeof(msg)))
            fail_msg("rack %d tray %d: %s", r, t, msg);
        hw_node_free(n);
    }
}

static void test_rack_specs(void **state)
{
    char ids[TRAYS][64];
    for (int t = 1; t <= TRAYS; t++) {
        cr_node_t *n = load_tray(t);
        assert_int_equal(n->devices.n, 4);
        assert_string_equal(cr_node_get_label(n, "corral.io/nvlink-clique"), CLIQUE);
        snprintf(ids[t - 1], sizeof(ids[0]), "%s", n->id);
        for (int k = 0; k < t - 1; k++)
            assert_string_not_equal(ids[k], ids[t - 1]);
        hw_node_free(n);
    }
}

/* The rack each bundle of placement p landed on (by its node's clique),
 * checking they are all one: returns that clique's rack number. */
static int one_rack(sched_cluster_t *c, const sched_result_t *r, int *nodes)
{
    if (r->status != SCHED_OK)
        fail_msg("status %d: %s", r->status, r->reason);
    const sched_placement_t *p = sched_placement_get(c, r->placement);
    assert_non_null(p);
    assert_int_equal(p->nallocs, TRAYS);
    int rack = 0, seen = 0;
    uint8_t used[2 * TRAYS] = {0};
    for (uint32_t i = 0; i < p->nallocs; i++) {
        const char *name = sched_node_name(c, sched__alloc(p, i)->node);
        int rr = name[7] - '0'; /* gb200-rR-tNN */
        if (!rack)
            rack = rr;
        assert_int_equal(rr, rack);
        int devs[8];
        assert_int_equal(sched_alloc_devices(c, sched__alloc(p, i), devs, 8), 4);
        int node = sched__alloc(p, i)->node;
        seen += !used[node];
        used[node] = 1;
    }
    *nodes = seen;
    return rack;
}

static sched_result_t gang(sched_cluster_t *c)
{
    sched_bundle_t b[TRAYS];
    memset(b, 0, sizeof(b));
    sched_err_t e;
    for (int i = 0; i < TRAYS; i++)
        assert_int_equal(sched_parse_resources(&c->res, "GPU=4", &b[i].req, &e), 0);
    sched_request_t r = {.nbundles = TRAYS,
                         .bundles = b,
                         .strategy = SCHED_PACK,
                         .domain_key = sched_syms_intern(&c->labels, "corral.io/nvlink-clique",
                                                         strlen("corral.io/nvlink-clique"))};
    sched_result_t out;
    sched_config_t cfg = {.top_k = 1};
    sched_schedule(c, &cfg, &r, NULL, &out);
    char msg[200];
    if (sched_cluster_check(c, msg, sizeof(msg)))
        fail_msg("invariant: %s", msg);
    return out;
}

/* One GPU of tray t of rack r, taken by a single-GPU job. */
static uint64_t take_one(sched_cluster_t *c, int r, int t)
{
    sched_bundle_t one;
    memset(&one, 0, sizeof(one));
    sched_err_t e;
    char sel[64];
    snprintf(sel, sizeof(sel), "corral.io/node-id=gb200-r%d-t%02d", r, t);
    assert_int_equal(sched_parse_resources(&c->res, "GPU=1", &one.req, &e), 0);
    assert_int_equal(sched_parse_selector(&c->labels, sel, &one.sel, &e), 0);
    sched_request_t rq = {.nbundles = 1, .bundles = &one, .domain_key = -1};
    sched_result_t out;
    sched_config_t cfg = {.top_k = 1};
    sched_schedule(c, &cfg, &rq, NULL, &out);
    assert_int_equal(out.status, SCHED_OK);
    return out.placement;
}

static void test_gang_on_one_rack(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    add_rack(c, 1);
    add_rack(c, 2);
    assert_int_equal(sched_cluster_finalize(c), 0);
    /* one tray of rack 1 busy: the 72-GPU gang goes to rack 2, whole */
    uint64_t busy1 = take_one(c, 1, 7);
    sched_result_t g = gang(c);
    int nodes;
    assert_int_equal(one_rack(c, &g, &nodes), 2);
    assert_int_equal(nodes, TRAYS); /* 18 trays of 4 GPUs: the rack's 72 */
    assert_int_equal(sched_release(c, g.placement), 0);
    /* a tray of each rack busy: 142 GPUs free, but no rack has 72, and the
     * gang is never split over two cliques */
    uint64_t busy2 = take_one(c, 2, 3);
    sched_result_t wait = gang(c);
    assert_int_equal(wait.status, SCHED_RETRY);
    /* rack 1 whole again: the gang takes it */
    assert_int_equal(sched_release(c, busy1), 0);
    g = gang(c);
    assert_int_equal(one_rack(c, &g, &nodes), 1);
    assert_int_equal(nodes, TRAYS);
    assert_int_equal(sched_release(c, busy2), 0);
    sched_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tray_fixture),
        cmocka_unit_test(test_rack_specs),
        cmocka_unit_test(test_gang_on_one_rack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
