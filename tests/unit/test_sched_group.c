/* sched/: placement groups (strategies, per-bundle selectors, domain
 * constraints), TPU slice groups, golden infeasibility messages and
 * property tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "sched/sched.h"
#include "hw/hw.h"
#include <stdio.h>

static void add(sched_cluster_t *c, sched_node_spec_t sp)
{
    cr_node_t *n = hw_node_new();
    char msg[160];
    if (sched_make_node(&sp, n, msg, sizeof(msg)))
        fail_msg("make %s: %s", sp.name, msg);
    if (sched_cluster_add(c, n, msg, sizeof(msg)))
        fail_msg("add %s: %s", sp.name, msg);
    hw_node_free(n);
}

static void gpu_nodes(sched_cluster_t *c, const char *prefix, int count, const char *labels)
{
    for (int i = 0; i < count; i++) {
        char name[32];
        snprintf(name, sizeof(name), "%s%d", prefix, i);
        add(c, (sched_node_spec_t){.name = name,
                                   .cpus = 32,
                                   .resource = "GPU",
                                   .ndev = 8,
                                   .island = 8,
                                   .labels = labels});
    }
}

/* Schedules a group of n bundles, all `res`; returns the result. */
static sched_result_t group(sched_cluster_t *c, sched_strategy_t st, int n, const char *res,
                            const char *domain, const char *sel)
{
    sched_bundle_t b[64];
    memset(b, 0, sizeof(b));
    sched_err_t e;
    for (int i = 0; i < n; i++) {
        assert_int_equal(sched_parse_resources(&c->res, res, &b[i].req, &e), 0);
        if (sel)
            assert_int_equal(sched_parse_selector(&c->labels, sel, &b[i].sel, &e), 0);
    }
    sched_request_t r = {.nbundles = (uint32_t)n,
                         .bundles = b,
                         .strategy = st,
                         .domain_key =
                             domain ? sched_syms_intern(&c->labels, domain, strlen(domain)) : -1};
    sched_result_t out;
    uint64_t before = sched_cluster_digest(c);
    sched_config_t cfg = {.top_k = 1};
    sched_schedule(c, &cfg, &r, NULL, &out);
    if (out.status != SCHED_OK)
        assert_int_equal(sched_cluster_digest(c), before); /* all or nothing */
    char msg[200];
    if (sched_cluster_check(c, msg, sizeof(msg)))
        fail_msg("invariant: %s", msg);
    return out;
}

static int node_of(sched_cluster_t *c, const sched_result_t *r, uint32_t b)
{
    const sched_placement_t *p = sched_placement_get(c, r->placement);
    assert_non_null(p);
    return sched__alloc(p, b)->node;
}

static void test_strategies(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    gpu_nodes(c, "n", 3, NULL);
    sched_cluster_finalize(c);
    sched_result_t r = group(c, SCHED_STRICT_SPREAD, 3, "GPU=2", NULL, NULL);
    assert_int_equal(r.status, SCHED_OK);
    assert_true(node_of(c, &r, 0) != node_of(c, &r, 1) && node_of(c, &r, 1) != node_of(c, &r, 2) &&
                node_of(c, &r, 0) != node_of(c, &r, 2));
    sched_result_t x = group(c, SCHED_STRICT_SPREAD, 4, "GPU=1", NULL, NULL);
    assert_int_equal(x.status, SCHED_INFEASIBLE);
    assert_string_equal(x.reason, "STRICT_SPREAD group of 4 bundles: STRICT_SPREAD needs 4 "
                                  "distinct nodes; only 3 can take a bundle");
    sched_result_t p = group(c, SCHED_STRICT_PACK, 3, "GPU=2", NULL, NULL);
    assert_int_equal(p.status, SCHED_OK);
    assert_int_equal(node_of(c, &p, 0), node_of(c, &p, 2));
    x = group(c, SCHED_STRICT_PACK, 3, "GPU=3", NULL, NULL);
    assert_int_equal(x.status, SCHED_INFEASIBLE);
    assert_string_equal(x.reason, "STRICT_PACK group of 3 bundles: STRICT_PACK needs one node "
                                  "with GPU=9");
    x = group(c, SCHED_STRICT_PACK, 2, "GPU=4", NULL, NULL);
    assert_int_equal(x.status, SCHED_RETRY);
    assert_string_equal(x.reason, "STRICT_PACK group of 2 bundles, bundle 0: no node has GPU=8 "
                                  "free now: the closest, n1, has GPU=6 free");
    /* PACK that does not fit one node uses as few as it can */
    sched_result_t pk = group(c, SCHED_PACK, 3, "GPU=4", NULL, NULL);
    assert_int_equal(pk.status, SCHED_RETRY); /* two nodes have 6 free: one bundle each */
    pk = group(c, SCHED_PACK, 2, "GPU=1", NULL, NULL);
    assert_int_equal(pk.status, SCHED_OK);
    assert_int_equal(node_of(c, &pk, 0), node_of(c, &pk, 1));
    sched_result_t sp = group(c, SCHED_SPREAD_PG, 2, "GPU=1", NULL, NULL);
    assert_int_equal(sp.status, SCHED_OK);
    assert_int_not_equal(node_of(c, &sp, 0), node_of(c, &sp, 1));
    assert_int_equal(sched_release(c, pk.placement), 0);
    assert_int_equal(sched_release(c, sp.placement), 0);
    assert_int_equal(sched_release(c, p.placement), 0);
    assert_int_equal(sched_release(c, r.placement), 0);
    sched_cluster_free(c);
}

/* A gang every bundle of which fits a node, but that the nodes could never
 * hold at once (issue 13: nine one-GPU workers on one 8-GPU node waited
 * for ever): INFEASIBLE, not RETRY, however busy the nodes are. */
static void test_total_capacity(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    gpu_nodes(c, "n", 1, NULL);
    sched_cluster_finalize(c);
    sched_result_t x = group(c, SCHED_PACK, 9, "GPU=1", NULL, NULL);
    assert_int_equal(x.status, SCHED_INFEASIBLE);
    assert_string_equal(x.reason, "PACK group of 9 bundles: 9 bundles of GPU=1 never fit at once: "
                                  "the 1 alive node(s) that can take one hold at most 8 in total");
    x = group(c, SCHED_SPREAD_PG, 2, "GPU=8", NULL, NULL);
    assert_int_equal(x.status, SCHED_INFEASIBLE);
    sched_result_t ok = group(c, SCHED_PACK, 8, "GPU=1", NULL, NULL);
    assert_int_equal(ok.status, SCHED_OK);
    /* full now: 8 more could fit an empty node, so they wait */
    sched_result_t wait = group(c, SCHED_PACK, 8, "GPU=1", NULL, NULL);
    assert_int_equal(wait.status, SCHED_RETRY);
    x = group(c, SCHED_PACK, 9, "GPU=1", NULL, NULL);
    assert_int_equal(x.status, SCHED_INFEASIBLE);
    assert_int_equal(sched_release(c, ok.placement), 0);
    /* two nodes: 3 bundles of GPU=5 sum to 15 of 16, but each node holds one */
    gpu_nodes(c, "m", 1, NULL);
    sched_cluster_finalize(c);
    x = group(c, SCHED_PACK, 3, "GPU=5", NULL, NULL);
    assert_int_equal(x.status, SCHED_INFEASIBLE);
    ok = group(c, SCHED_PACK, 2, "GPU=5", NULL, NULL);
    assert_int_equal(ok.status, SCHED_OK);
    assert_int_equal(sched_release(c, ok.placement), 0);
    sched_cluster_free(c);
}

static void test_domains(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    gpu_nodes(c, "a", 2, "rack=r1");
    gpu_nodes(c, "b", 4, "rack=r2");
    gpu_nodes(c, "c", 1, "rack=r3,zone=z");
    sched_cluster_finalize(c);
    uint64_t empty = sched_cluster_digest(c);
    /* best fit: r1 is exactly full afterwards, r2 stays whole */
    sched_result_t g1 = group(c, SCHED_SPREAD_PG, 2, "GPU=8", "rack", NULL);
    assert_int_equal(g1.status, SCHED_OK);
    int rack = sched_syms_find(&c->labels, "rack", 4);
    for (uint32_t b = 0; b < 2; b++)
        assert_string_equal(
            sched_syms_name(&c->labels, sched_node_label(c, node_of(c, &g1, b), rack)), "r1");
    sched_result_t g2 = group(c, SCHED_PACK, 4, "GPU=8", "rack", NULL);
    assert_int_equal(g2.status, SCHED_OK);
    for (uint32_t b = 0; b < 4; b++)
        assert_string_equal(
            sched_syms_name(&c->labels, sched_node_label(c, node_of(c, &g2, b), rack)), "r2");
    sched_result_t g3 = group(c, SCHED_PACK, 2, "GPU=8", "rack", NULL);
    assert_int_equal(g3.status, SCHED_RETRY);
    assert_string_equal(g3.reason, "no rack domain has room for the group (GPU=16) now: the "
                                   "closest, r1, has GPU=0 free");
    sched_result_t g4 = group(c, SCHED_PACK, 5, "GPU=8", "rack", NULL);
    assert_int_equal(g4.status, SCHED_INFEASIBLE);
    assert_string_equal(g4.reason, "no rack domain is large enough for GPU=40: the largest, r2, "
                                   "has GPU=32 in total");
    sched_result_t g5 = group(c, SCHED_PACK, 1, "GPU=1", "nolabel", NULL);
    assert_int_equal(g5.status, SCHED_INFEASIBLE);
    assert_string_equal(g5.reason, "no node has the label nolabel");
    /* a per-bundle selector inside the domain */
    sched_result_t g6 = group(c, SCHED_PACK, 1, "GPU=2", "rack", "zone=z");
    assert_int_equal(g6.status, SCHED_OK);
    assert_string_equal(sched_node_name(c, node_of(c, &g6, 0)), "c0");
    assert_int_equal(sched_release(c, g6.placement), 0);
    assert_int_equal(sched_release(c, g2.placement), 0);
    assert_int_equal(sched_release(c, g1.placement), 0);
    assert_int_equal(sched_cluster_digest(c), empty);
    sched_cluster_free(c);
}

static void slice(sched_cluster_t *c, const char *name, const char *topo, const char *type,
                  int hosts, int chips)
{
    for (int w = 0; w < hosts; w++) {
        char host[48];
        snprintf(host, sizeof(host), "%s-w%d", name, w);
        add(c, (sched_node_spec_t){.name = host,
                                   .cpus = 180,
                                   .resource = "TPU",
                                   .ndev = chips,
                                   .slice = name,
                                   .topology = topo,
                                   .accel_type = type,
                                   .worker_id = w,
                                   .worker_count = hosts});
    }
}

static sched_result_t tpu(sched_cluster_t *c, const char *gen, const char *topo, int per_host,
                          int nslices)
{
    sched_request_t r = {.domain_key = -1};
    r.tpu.on = true;
    r.tpu.gen = gen ? sched_syms_intern(&c->labels, gen, strlen(gen)) : -1;
    sched_err_t e;
    assert_int_equal(sched_parse_tpu_topology(topo, &r.tpu.topo, &e), 0);
    r.tpu.chips_per_host = per_host;
    r.tpu.nslices = nslices;
    sched_parse_resources(&c->res, "CPU=8", &r.tpu.extra, &e);
    sched_result_t out;
    uint64_t before = sched_cluster_digest(c);
    sched_schedule(c, NULL, &r, NULL, &out);
    if (out.status != SCHED_OK)
        assert_int_equal(sched_cluster_digest(c), before);
    char msg[200];
    if (sched_cluster_check(c, msg, sizeof(msg)))
        fail_msg("invariant: %s", msg);
    return out;
}

static void test_tpu_slices(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    /* add the workers out of order: worker 0 must still be bundle 0 */
    slice(c, "s1", "4x4", "v6e-16", 4, 4);
    slice(c, "s2", "4x4", "v6e-16", 4, 4);
    slice(c, "small", "2x2", "v6e-4", 1, 4);
    slice(c, "p1", "2x2x2", "v5p-16", 2, 4);
    sched_cluster_finalize(c);
    sched_result_t r = tpu(c, "v6e", "4x4", 4, 1);
    assert_int_equal(r.status, SCHED_OK);
    const sched_placement_t *p = sched_placement_get(c, r.placement);
    assert_int_equal(p->nallocs, 4);
    for (uint32_t b = 0; b < 4; b++) {
        char want[32];
        snprintf(want, sizeof(want), "s1-w%u", b);
        assert_string_equal(sched_node_name(c, sched__alloc(p, b)->node), want);
        assert_int_equal(sched__alloc(p, b)->mask[1], 0xf);
    }
    /* one chip taken on s2: no whole slice is free */
    sched_bundle_t one = {0};
    sched_err_t e;
    sched_parse_resources(&c->res, "TPU=1", &one.req, &e);
    sched_parse_selector(&c->labels, "corral.io/tpu-slice-name=s2,corral.io/tpu-slice-worker-id=2",
                         &one.sel, &e);
    sched_request_t rq = {.nbundles = 1, .bundles = &one, .domain_key = -1};
    sched_result_t o1;
    sched_schedule(c, NULL, &rq, NULL, &o1);
    assert_int_equal(o1.status, SCHED_OK);
    assert_string_equal(
        sched_node_name(c, sched__alloc(sched_placement_get(c, o1.placement), 0)->node), "s2-w2");
    sched_result_t x = tpu(c, "v6e", "4x4", 4, 1);
    assert_int_equal(x.status, SCHED_RETRY);
    assert_string_equal(x.reason, "no free slice of topology 4x4 (v6e): slice s2 has 3 of 4 "
                                  "hosts free");
    x = tpu(c, "v6e", "8x8", 4, 1);
    assert_int_equal(x.status, SCHED_INFEASIBLE);
    assert_string_equal(x.reason, "no slice of topology 8x8 (v6e) with 16 hosts of 4 chips in "
                                  "the cluster");
    x = tpu(c, "v6e", "4x4", 4, 3);
    assert_int_equal(x.status, SCHED_INFEASIBLE);
    assert_string_equal(x.reason, "3 slices of topology 4x4 (v6e) wanted; the cluster has 2");
    x = tpu(c, "v5p", "4x4", 4, 1);
    assert_int_equal(x.status, SCHED_INFEASIBLE);
    sched_result_t v5 = tpu(c, "v5p", "2x2x2", 4, 1);
    assert_int_equal(v5.status, SCHED_OK);
    /* multi-slice: both v6e 4x4 slices, each whole */
    assert_int_equal(sched_release(c, o1.placement), 0);
    assert_int_equal(sched_release(c, r.placement), 0);
    sched_result_t m = tpu(c, "v6e", "4x4", 4, 2);
    assert_int_equal(m.status, SCHED_OK);
    p = sched_placement_get(c, m.placement);
    assert_int_equal(p->nallocs, 8);
    assert_string_equal(sched_node_name(c, sched__alloc(p, 0)->node), "s1-w0");
    assert_string_equal(sched_node_name(c, sched__alloc(p, 4)->node), "s2-w0");
    x = tpu(c, NULL, "2x2", 4, 1);
    assert_int_equal(x.status, SCHED_OK);
    x = tpu(c, NULL, "2x2", 3, 1);
    assert_int_equal(x.status, SCHED_INFEASIBLE); /* 3 chips a host: invalid */
    sched_cluster_free(c);
}

/* Bundles go scarcest resource first: the GPU bundle, listed second, is
 * placed before the CPU bundle could take the only GPU node's CPUs. */
static void test_scarcest_first(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    add(c, (sched_node_spec_t){.name = "gpu", .cpus = 8, .resource = "GPU", .ndev = 1});
    add(c, (sched_node_spec_t){.name = "cpu", .cpus = 8});
    sched_cluster_finalize(c);
    sched_bundle_t b[2];
    memset(b, 0, sizeof(b));
    sched_err_t e;
    assert_int_equal(sched_parse_resources(&c->res, "CPU=8", &b[0].req, &e), 0);
    assert_int_equal(sched_parse_resources(&c->res, "GPU=1,CPU=1", &b[1].req, &e), 0);
    for (int st = SCHED_PACK; st <= SCHED_SPREAD_PG; st++) {
        sched_request_t r = {
            .nbundles = 2, .bundles = b, .strategy = (sched_strategy_t)st, .domain_key = -1};
        sched_result_t out;
        sched_schedule(c, NULL, &r, NULL, &out);
        assert_int_equal(out.status, SCHED_OK);
        assert_string_equal(sched_node_name(c, node_of(c, &out, 0)), "cpu");
        assert_string_equal(sched_node_name(c, node_of(c, &out, 1)), "gpu");
        assert_int_equal(sched_release(c, out.placement), 0);
    }
    sched_cluster_free(c);
}

static void test_zero_bundles(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    gpu_nodes(c, "n", 1, NULL);
    sched_cluster_finalize(c);
    sched_request_t r = {.nbundles = 0, .strategy = SCHED_PACK, .domain_key = -1};
    sched_result_t out;
    assert_int_equal(sched_schedule(c, NULL, &r, NULL, &out), CR_EINVAL);
    assert_int_equal(out.status, SCHED_INFEASIBLE);
    sched_cluster_free(c);
}

/* ---- properties ---- */

static void test_property_groups(void **state)
{
    static const char *shapes[] = {"GPU=1", "GPU=2", "GPU=4", "GPU=8", "CPU=4", "GPU=0.5"};
    for (uint64_t seed = 1; seed <= 30; seed++) {
        sched_rng_t rng = {seed};
        sched_cluster_t *c = sched_cluster_new();
        for (int i = 0; i < 10; i++) {
            char name[16], labels[32];
            snprintf(name, sizeof(name), "n%d", i);
            snprintf(labels, sizeof(labels), "rack=r%d", (int)(sched_rng_next(&rng) % 3));
            add(c, (sched_node_spec_t){.name = name,
                                       .cpus = 16,
                                       .resource = "GPU",
                                       .ndev = 1 + (int)(sched_rng_next(&rng) % 8),
                                       .labels = labels});
        }
        sched_cluster_finalize(c);
        uint64_t empty = sched_cluster_digest(c);
        int rack = sched_syms_find(&c->labels, "rack", 4);
        uint64_t live[64];
        int nlive = 0;
        for (int s = 0; s < 150; s++) {
            if (nlive && (sched_rng_next(&rng) % 3 == 0 || nlive == 64)) {
                int k = (int)(sched_rng_next(&rng) % (uint64_t)nlive);
                assert_int_equal(sched_release(c, live[k]), 0);
                live[k] = live[--nlive];
                continue;
            }
            sched_strategy_t st = (sched_strategy_t)(sched_rng_next(&rng) % 4);
            int nb = 1 + (int)(sched_rng_next(&rng) % 5);
            bool dom = sched_rng_next(&rng) % 2;
            sched_result_t r =
                group(c, st, nb, shapes[sched_rng_next(&rng) % 6], dom ? "rack" : NULL, NULL);
            if (r.status != SCHED_OK) {
                assert_true(r.reason[0] != '\0');
                continue;
            }
            live[nlive++] = r.placement;
            const sched_placement_t *p = sched_placement_get(c, r.placement);
            assert_int_equal(p->nallocs, nb);
            for (int a = 0; a < nb; a++)
                for (int b = a + 1; b < nb; b++) {
                    int na = sched__alloc(p, a)->node, nb2 = sched__alloc(p, b)->node;
                    if (st == SCHED_STRICT_SPREAD)
                        assert_int_not_equal(na, nb2);
                    if (st == SCHED_STRICT_PACK)
                        assert_int_equal(na, nb2);
                    if (dom)
                        assert_int_equal(sched_node_label(c, na, rack),
                                         sched_node_label(c, nb2, rack));
                }
        }
        while (nlive)
            assert_int_equal(sched_release(c, live[--nlive]), 0);
        assert_int_equal(sched_cluster_digest(c), empty);
        sched_cluster_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strategies),      cmocka_unit_test(test_total_capacity),
        cmocka_unit_test(test_domains),         cmocka_unit_test(test_tpu_slices),
        cmocka_unit_test(test_zero_bundles),    cmocka_unit_test(test_scarcest_first),
        cmocka_unit_test(test_property_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
