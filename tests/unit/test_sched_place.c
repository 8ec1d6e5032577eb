/* sched/: the cluster view, device-set choice, single-bundle policies,
 * release and node loss, and property tests over random clusters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "sched/sched.h"
#include "sched/sched_int.h" /* the reference scan: sched__fits_*, sched__score */
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

static sched_bundle_t bundle(sched_cluster_t *c, const char *res, const char *sel)
{
    sched_bundle_t b;
    memset(&b, 0, sizeof(b));
    sched_err_t e;
    if (sched_parse_resources(&c->res, res, &b.req, &e))
        fail_msg("resources '%s': %s", res, e.msg);
    if (sel && sched_parse_selector(&c->labels, sel, &b.sel, &e))
        fail_msg("selector '%s': %s", sel, e.msg);
    return b;
}

static sched_result_t one(sched_cluster_t *c, sched_policy_t pol, const char *res, const char *sel)
{
    sched_bundle_t b = bundle(c, res, sel);
    sched_request_t r = {.nbundles = 1, .bundles = &b, .policy = pol, .domain_key = -1};
    sched_result_t out;
    sched_config_t cfg = {.top_k = 1};
    sched_rng_t rng = {1};
    sched_schedule(c, &cfg, &r, &rng, &out);
    char msg[200];
    if (sched_cluster_check(c, msg, sizeof(msg)))
        fail_msg("invariant: %s", msg);
    return out;
}

static const sched_alloc_t *alloc_of(sched_cluster_t *c, const sched_result_t *r)
{
    assert_int_equal(r->status, SCHED_OK);
    const sched_placement_t *p = sched_placement_get(c, r->placement);
    assert_non_null(p);
    return sched__alloc(p, 0);
}

static uint64_t devs(sched_cluster_t *c, const sched_result_t *r, int k)
{
    return alloc_of(c, r)->mask[k];
}

static void test_islands_then_numa(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    add(c, (sched_node_spec_t){.name = "dgx",
                               .cpus = 64,
                               .memory = 1ull << 40,
                               .resource = "GPU",
                               .ndev = 8,
                               .island = 4,
                               .numa = 2});
    add(c, (sched_node_spec_t){.name = "pcie",
                               .cpus = 64,
                               .resource = "GPU",
                               .ndev = 8,
                               .numa = 2,
                               .labels = "kind=pcie"});
    assert_int_equal(sched_cluster_finalize(c), 0);
    sched_result_t r = one(c, SCHED_NODE_AFFINITY, "GPU=1", "corral.io/node-id=dgx");
    assert_int_equal(devs(c, &r, 0), 0x01);
    r = one(c, SCHED_HYBRID, "GPU=4", "corral.io/node-id=dgx");
    assert_int_equal(devs(c, &r, 0), 0xf0); /* island 1: island 0 has only 3 left */
    r = one(c, SCHED_HYBRID, "GPU=2", "corral.io/node-id=dgx");
    assert_int_equal(devs(c, &r, 0), 0x06);
    /* no islands: the NUMA node that fits best */
    r = one(c, SCHED_HYBRID, "GPU=1", "kind=pcie");
    assert_int_equal(devs(c, &r, 0), 0x01);
    r = one(c, SCHED_HYBRID, "GPU=4", "kind=pcie");
    assert_int_equal(devs(c, &r, 0), 0xf0);
    r = one(c, SCHED_HYBRID, "GPU=3", "kind=pcie");
    assert_int_equal(devs(c, &r, 0), 0x0e);
    r = one(c, SCHED_HYBRID, "GPU=1", "kind=pcie");
    assert_int_equal(r.status, SCHED_RETRY);
    assert_string_equal(r.reason, "no node has GPU=1 free now: the closest, pcie, has GPU=0 free");
    sched_cluster_free(c);
}

/* Device ids are the node description's: a MIG parent and an unhealthy GPU
 * are skipped, and the ids still name the right devices. */
static void test_device_ids(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    cr_node_t *n = hw_node_new();
    cr_strlcpy(n->id, "mig", sizeof(n->id));
    for (int i = 0; i < 4; i++) {
        cr_device_t *d = cr_node_add_device(n);
        cr_strlcpy(d->resource, "GPU", sizeof(d->resource));
        d->health = i == 1 ? CR_HEALTH_UNHEALTHY : CR_HEALTH_OK;
    }
    n->devices.v[0].mig_enabled = true;
    n->devices.v[3].parent = 0;                     /* device 3 is a MIG instance of device 0 */
    cr_node_add_resource(n, "GPU", 2 * CR_QTY_ONE); /* 2 and 3 */
    char msg[160];
    assert_int_equal(sched_cluster_add(c, n, msg, sizeof(msg)), 0);
    hw_node_free(n);
    sched_cluster_finalize(c);
    sched_result_t r = one(c, SCHED_HYBRID, "GPU=2", NULL);
    int ids[8];
    assert_int_equal(sched_alloc_devices(c, alloc_of(c, &r), ids, 8), 2);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 3);
    sched_cluster_free(c);
}

static void test_fractions_pack(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    add(c, (sched_node_spec_t){.name = "n", .cpus = 8, .resource = "GPU", .ndev = 2});
    sched_cluster_finalize(c);
    sched_result_t a = one(c, SCHED_HYBRID, "GPU=0.5", NULL);
    assert_int_equal(devs(c, &a, 0), 1);
    sched_result_t b = one(c, SCHED_HYBRID, "GPU=0.25", NULL);
    assert_int_equal(devs(c, &b, 0), 1); /* onto the shared device */
    sched_result_t d = one(c, SCHED_HYBRID, "GPU=0.5", NULL);
    assert_int_equal(devs(c, &d, 0), 2); /* does not fit there: split a free one */
    sched_result_t e = one(c, SCHED_HYBRID, "GPU=0.25", NULL);
    assert_int_equal(devs(c, &e, 0), 1); /* best fit: the exact remainder */
    sched_result_t f = one(c, SCHED_HYBRID, "GPU=1", NULL);
    assert_int_equal(f.status, SCHED_RETRY);
    assert_string_equal(f.reason, "no node has GPU=1 free now: the closest, n, has GPU=0.5 free");
    uint64_t before = sched_cluster_digest(c);
    sched_result_t g = one(c, SCHED_HYBRID, "GPU=0.5", NULL);
    assert_int_equal(g.status, SCHED_OK);
    assert_int_equal(sched_release(c, g.placement), 0);
    assert_int_equal(sched_cluster_digest(c), before);
    assert_int_equal(sched_release(c, g.placement), CR_ENOENT);
    sched_cluster_free(c);
    /* enough in sum, but on no whole device */
    c = sched_cluster_new();
    add(c, (sched_node_spec_t){.name = "m", .cpus = 8, .resource = "GPU", .ndev = 3});
    sched_cluster_finalize(c);
    sched_result_t x = one(c, SCHED_HYBRID, "GPU=0.5", NULL);
    assert_int_equal(devs(c, &x, 0), 1);
    x = one(c, SCHED_HYBRID, "GPU=0.6", NULL);
    assert_int_equal(devs(c, &x, 0), 2);
    x = one(c, SCHED_HYBRID, "GPU=0.7", NULL);
    assert_int_equal(devs(c, &x, 0), 4);
    x = one(c, SCHED_HYBRID, "GPU=1", NULL);
    assert_int_equal(x.status, SCHED_RETRY);
    assert_string_equal(x.reason, "GPU=1 wanted; the closest node, m, has GPU=1.2 free but not "
                                  "on whole devices");
    sched_cluster_free(c);
}

static void test_tpu_submesh(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    add(c, (sched_node_spec_t){.name = "h8",
                               .cpus = 8,
                               .resource = "TPU",
                               .ndev = 8,
                               .slice = "s",
                               .topology = "2x4",
                               .accel_type = "v5e-8",
                               .worker_count = 1});
    sched_cluster_finalize(c);
    sched_result_t r = one(c, SCHED_HYBRID, "TPU=1", NULL);
    assert_int_equal(devs(c, &r, 0), 0x01);
    r = one(c, SCHED_HYBRID, "TPU=4", NULL);
    assert_int_equal(devs(c, &r, 0), 0x3c); /* chips 2-5: the 2x2 at (0,1) */
    r = one(c, SCHED_HYBRID, "TPU=2", NULL);
    assert_int_equal(devs(c, &r, 0), 0xc0); /* (0,3),(1,3): a 1x2 pair, not 1 and 6 */
    sched_cluster_free(c);
}

static void test_hybrid_spread(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof(name), "n%d", i);
        add(c, (sched_node_spec_t){.name = name, .cpus = 8});
    }
    sched_cluster_finalize(c);
    const char *want = "000011112222201"; /* ties go to the scan order, from the last node */
    for (int i = 0; want[i]; i++) {
        sched_result_t r = one(c, SCHED_HYBRID, "CPU=1", NULL);
        if (alloc_of(c, &r)->node != want[i] - '0')
            fail_msg("decision %d went to node %d", i, alloc_of(c, &r)->node);
    }
    sched_cluster_free(c);
    c = sched_cluster_new();
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof(name), "n%d", i);
        add(c, (sched_node_spec_t){.name = name, .cpus = 8});
    }
    sched_cluster_finalize(c);
    for (int i = 0; i < 6; i++) {
        sched_result_t r = one(c, SCHED_SPREAD, "CPU=1", NULL);
        assert_int_equal(alloc_of(c, &r)->node, (i + 1) % 3); /* round robin after the last */
    }
    sched_cluster_free(c);
}

/* Pins what a selector makes of a node without its key (sched/cluster.c
 * sched_selector_match), as Kubernetes' label selectors define it
 * ("Labels and Selectors": environment!=production selects the resources
 * whose environment differs and "all resources that have no labels with
 * the environment key"): k!=v and k notin (...) match a node without k;
 * k=v, k in (...) and k exists do not, !k does. */
static void test_selector_without_the_key(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    add(c, (sched_node_spec_t){.name = "a", .cpus = 4, .labels = "zone=x"});
    add(c, (sched_node_spec_t){.name = "b", .cpus = 4, .labels = "zone=y,spot=true"});
    sched_cluster_finalize(c);
    static const struct {
        const char *sel;
        bool a, b;
    } rows[] = {
        {"spot!=true", true, false},  {"spot notin (true,no)", true, false},
        {"spot=true", false, true},   {"spot in (true,no)", false, true},
        {"spot exists", false, true}, {"!spot", true, false},
        {"zone!=x", false, true},     {"zone!=x,spot!=no", false, true},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(rows); i++) {
        sched_bundle_t b = bundle(c, "CPU=1", rows[i].sel);
        if (sched_selector_match(c, &b.sel, 0) != rows[i].a ||
            sched_selector_match(c, &b.sel, 1) != rows[i].b)
            fail_msg("%s: expected a %d, b %d", rows[i].sel, rows[i].a, rows[i].b);
    }
    sched_cluster_free(c);
}

static void test_affinity_and_selectors(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    add(c, (sched_node_spec_t){.name = "a", .cpus = 4, .labels = "zone=x"});
    add(c, (sched_node_spec_t){.name = "b", .cpus = 4, .labels = "zone=y,spot=true"});
    sched_cluster_finalize(c);
    sched_bundle_t bd = bundle(c, "CPU=4", NULL);
    sched_request_t r = {.nbundles = 1,
                         .bundles = &bd,
                         .policy = SCHED_NODE_AFFINITY,
                         .affinity_node = 1,
                         .domain_key = -1};
    sched_result_t out;
    sched_config_t cfg = {0};
    assert_int_equal(sched_schedule(c, &cfg, &r, NULL, &out), 0);
    assert_int_equal(alloc_of(c, &out)->node, 1);
    assert_int_equal(sched_schedule(c, &cfg, &r, NULL, &out), 0);
    assert_int_equal(out.status, SCHED_RETRY);
    assert_string_equal(out.reason, "node affinity to b: no node has CPU=4 free now: the "
                                    "closest, b, has CPU=0 free");
    r.affinity_soft = true;
    assert_int_equal(sched_schedule(c, &cfg, &r, NULL, &out), 0);
    assert_int_equal(alloc_of(c, &out)->node, 0);
    r.affinity_soft = false;
    r.affinity_node = 7;
    sched_schedule(c, &cfg, &r, NULL, &out);
    assert_int_equal(out.status, SCHED_INFEASIBLE);
    sched_result_t s = one(c, SCHED_HYBRID, "CPU=1", "zone=z");
    assert_int_equal(s.status, SCHED_INFEASIBLE);
    assert_string_equal(s.reason, "no alive node matches selector zone=z");
    s = one(c, SCHED_HYBRID, "CPU=8", "zone in (x,y)");
    assert_int_equal(s.status, SCHED_INFEASIBLE);
    assert_string_equal(s.reason, "no node matching zone in (x,y) has CPU=8 in total: the "
                                  "largest, a, has CPU=4");
    s = one(c, SCHED_HYBRID, "TPU=1", NULL);
    assert_string_equal(s.reason, "no node offers TPU");
    s = one(c, SCHED_HYBRID, "CPU=1", "!spot");
    assert_int_equal(s.status, SCHED_RETRY);
    sched_cluster_free(c);
}

static void test_node_loss(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    add(c, (sched_node_spec_t){.name = "a", .cpus = 4, .resource = "GPU", .ndev = 2});
    add(c, (sched_node_spec_t){.name = "b", .cpus = 4, .resource = "GPU", .ndev = 2});
    sched_cluster_finalize(c);
    uint64_t empty = sched_cluster_digest(c);
    sched_result_t r1 = one(c, SCHED_SPREAD, "GPU=1", NULL);
    sched_result_t r2 = one(c, SCHED_SPREAD, "GPU=1", NULL);
    assert_int_not_equal(alloc_of(c, &r1)->node, alloc_of(c, &r2)->node);
    int lost = alloc_of(c, &r1)->node;
    uint64_t ids[4];
    assert_int_equal(sched_node_lost(c, lost, ids, 4), 1);
    assert_int_equal(ids[0], r1.placement);
    assert_null(sched_placement_get(c, r1.placement));
    char msg[200];
    assert_int_equal(sched_cluster_check(c, msg, sizeof(msg)), 0);
    sched_result_t r3 = one(c, SCHED_HYBRID, "GPU=2", NULL);
    assert_int_equal(r3.status, SCHED_RETRY);
    sched_result_t r4 = one(c, SCHED_HYBRID, "GPU=2", "corral.io/node-id=a");
    assert_int_equal(r4.status, lost == 0 ? SCHED_INFEASIBLE : SCHED_RETRY);
    assert_int_equal(sched_node_restore(c, lost), 0);
    assert_int_equal(sched_release(c, r2.placement), 0);
    assert_int_equal(sched_cluster_digest(c), empty);
    sched_cluster_free(c);
}

static void test_bad_requests(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    add(c, (sched_node_spec_t){.name = "a", .cpus = 4});
    sched_cluster_finalize(c);
    sched_request_t r = {.nbundles = 0, .domain_key = -1};
    sched_result_t out;
    assert_int_equal(sched_schedule(c, NULL, &r, NULL, &out), CR_EINVAL);
    assert_int_equal(out.status, SCHED_INFEASIBLE);
    assert_non_null(strstr(out.reason, "at least one bundle"));
    sched_bundle_t b = {0};
    b.req.n = 1;
    b.req.id[0] = SCHED_R_CPU;
    b.req.qty[0] = -5;
    r.nbundles = 1;
    r.bundles = &b;
    assert_int_equal(sched_schedule(c, NULL, &r, NULL, &out), CR_EINVAL);
    assert_non_null(strstr(out.reason, "positive"));
    b.req.id[0] = SCHED_R_GPU;
    b.req.qty[0] = 15000;
    assert_int_equal(sched_schedule(c, NULL, &r, NULL, &out), CR_EINVAL);
    assert_non_null(strstr(out.reason, "whole number"));
    sched_cluster_free(c);
}

/* ---- properties over random clusters and requests ---- */

static const char *gpu_shapes[] = {"GPU=1",   "GPU=2",          "GPU=4", "GPU=8",
                                   "GPU=0.5", "GPU=0.25,CPU=1", "CPU=4", "CPU=2,memory=8Gi",
                                   "GPU=3"};

static sched_cluster_t *random_cluster(sched_rng_t *rng, int nn)
{
    sched_cluster_t *c = sched_cluster_new();
    for (int i = 0; i < nn; i++) {
        char name[16], labels[32];
        snprintf(name, sizeof(name), "n%d", i);
        snprintf(labels, sizeof(labels), "rack=r%d", (int)(sched_rng_next(rng) % 3));
        int nd = (int)(sched_rng_next(rng) % 9);
        add(c, (sched_node_spec_t){.name = name,
                                   .cpus = 4 + (int)(sched_rng_next(rng) % 60),
                                   .memory = (1ull + sched_rng_next(rng) % 64) << 30,
                                   .resource = nd ? "GPU" : NULL,
                                   .ndev = nd,
                                   .island = nd >= 4 ? nd / 2 : 0,
                                   .numa = 2,
                                   .labels = labels});
    }
    sched_cluster_finalize(c);
    return c;
}

/* Runs a random mix of placements and releases; returns a digest of every
 * decision (status, node, devices). */
static uint64_t run_random(uint64_t seed, int steps)
{
    sched_rng_t rng = {seed};
    sched_cluster_t *c = random_cluster(&rng, 12);
    uint64_t live[256];
    int nlive = 0;
    uint64_t h = 1469598103934665603ull;
    sched_config_t cfg = {.top_k = 3};
    for (int s = 0; s < steps; s++) {
        uint64_t pre = sched_cluster_digest(c);
        if (nlive && (sched_rng_next(&rng) % 3 == 0 || nlive == 256)) {
            int k = (int)(sched_rng_next(&rng) % (uint64_t)nlive);
            assert_int_equal(sched_release(c, live[k]), 0);
            live[k] = live[--nlive];
        } else {
            sched_bundle_t b = bundle(c, gpu_shapes[sched_rng_next(&rng) % 9],
                                      sched_rng_next(&rng) % 4 ? NULL : "rack=r1");
            sched_request_t r = {.nbundles = 1,
                                 .bundles = &b,
                                 .domain_key = -1,
                                 .policy = (sched_policy_t)(sched_rng_next(&rng) % 2)};
            sched_result_t out;
            sched_schedule(c, &cfg, &r, &rng, &out);
            h = (h ^ out.status) * 1099511628211ull;
            if (out.status == SCHED_OK) {
                const sched_alloc_t *a = sched__alloc(sched_placement_get(c, out.placement), 0);
                h = (h ^ (uint64_t)a->node ^ a->mask[0] << 8) * 1099511628211ull;
                /* release restores the exact previous state */
                if (s % 7 == 0) {
                    assert_int_equal(sched_release(c, out.placement), 0);
                    assert_int_equal(sched_cluster_digest(c), pre);
                } else {
                    live[nlive++] = out.placement;
                }
            } else {
                assert_int_equal(sched_cluster_digest(c), pre);
                assert_true(out.reason[0] != '\0');
            }
        }
        char msg[200];
        if (sched_cluster_check(c, msg, sizeof(msg)))
            fail_msg("seed %llu step %d: %s", (unsigned long long)seed, s, msg);
    }
    while (nlive)
        assert_int_equal(sched_release(c, live[--nlive]), 0);
    sched_rng_t rng2 = {seed};
    sched_cluster_t *fresh = random_cluster(&rng2, 12);
    assert_int_equal(sched_cluster_digest(c), sched_cluster_digest(fresh));
    sched_cluster_free(fresh);
    sched_cluster_free(c);
    return h;
}

static void test_property_random(void **state)
{
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t a = run_random(seed, 300);
        uint64_t b = run_random(seed, 300);
        assert_int_equal(a, b); /* the same seed gives the same decisions */
    }
}

/* ---- the scan against a reference ----
 * A single-bundle decision passes over nodes by the free-capacity index
 * (c->freelvl) and checks the others in one pass (fit_fast). The
 * reference below is the plain scan: from the cursor, every alive node
 * through sched__fits_ever, sched__fits_now and sched__score, the first
 * sched__sample_limit nodes that fit, the best of them. Both must choose
 * the same node, and agree on RETRY against INFEASIBLE, on clusters big
 * enough to be sampled (over 200 nodes), filled until most nodes are
 * full. */
static int reference_pick(sched_cluster_t *c, const sched_config_t *cfg, const sched_bundle_t *b,
                          int mode, int *ever)
{
    size_t nn = c->nnodes, limit = sched__sample_limit(c, cfg), found = 0;
    size_t start = (c->cursor + (mode == SCORE_SPREAD)) % nn;
    int best = -1, bests = 0;
    *ever = 0;
    for (size_t i = 0; i < nn; i++) {
        int n = (int)((start + i) % nn);
        if (!sched__fits_ever(c, n, &b->req))
            continue;
        (*ever)++;
        if (!sched__fits_now(c, n, &b->req, true))
            continue;
        int s = sched__score(c, cfg, mode, n, &b->req);
        if (best < 0 || s > bests) {
            best = n;
            bests = s;
        }
        if (++found >= limit)
            break;
    }
    return best;
}

static const char *scan_shapes[] = {
    "GPU=1,CPU=16,memory=128Gi", "GPU=2",       "GPU=8",      "GPU=0.5", "GPU=0.25,CPU=1", "CPU=4",
    "CPU=2,memory=8Gi",          "GPU=3,CPU=8", "memory=64Gi"};

static void test_scan_matches_reference(void **state)
{
    for (uint64_t seed = 1; seed <= 6; seed++) {
        sched_rng_t rng = {seed};
        sched_cluster_t *c = sched_cluster_new();
        for (int i = 0; i < 300; i++) {
            char name[16];
            snprintf(name, sizeof(name), "n%d", i);
            int nd = (int)(sched_rng_next(&rng) % 9);
            add(c, (sched_node_spec_t){.name = name,
                                       .cpus = 8 + (int)(sched_rng_next(&rng) % 120),
                                       .memory = (1ull + sched_rng_next(&rng) % 512) << 30,
                                       .resource = nd ? "GPU" : NULL,
                                       .ndev = nd,
                                       .island = nd >= 4 ? nd / 2 : 0,
                                       .numa = 2});
        }
        sched_cluster_finalize(c);
        sched_config_t cfg = {.top_k = 1};
        uint64_t live[4096];
        int nlive = 0, retries = 0, placed = 0;
        for (int step = 0; step < 3000; step++) {
            /* mostly placing, so that the cluster fills and stays full */
            if (nlive && (sched_rng_next(&rng) % 5 == 0 || nlive == 4096)) {
                int k = (int)(sched_rng_next(&rng) % (uint64_t)nlive);
                assert_int_equal(sched_release(c, live[k]), 0);
                live[k] = live[--nlive];
                continue;
            }
            sched_bundle_t b = bundle(c, scan_shapes[sched_rng_next(&rng) % 9], NULL);
            sched_policy_t pol = (sched_policy_t)(sched_rng_next(&rng) % 2);
            int mode = pol == SCHED_SPREAD ? SCORE_SPREAD : SCORE_HYBRID, ever;
            sched_cluster_sync(c);
            int want = reference_pick(c, &cfg, &b, mode, &ever);
            sched_request_t r = {.nbundles = 1, .bundles = &b, .policy = pol, .domain_key = -1};
            sched_result_t out;
            sched_schedule(c, &cfg, &r, NULL, &out);
            if (want < 0) {
                assert_int_equal(out.status, ever ? SCHED_RETRY : SCHED_INFEASIBLE);
                retries += ever > 0;
            } else {
                if (out.status != SCHED_OK || alloc_of(c, &out)->node != want)
                    fail_msg("seed %llu step %d: chose %d (status %d: %s), the plain scan %d",
                             (unsigned long long)seed, step,
                             out.status == SCHED_OK ? alloc_of(c, &out)->node : -1, out.status,
                             out.reason, want);
                live[nlive++] = out.placement;
                placed++;
            }
            char msg[200];
            if (sched_cluster_check(c, msg, sizeof(msg)))
                fail_msg("seed %llu step %d: %s", (unsigned long long)seed, step, msg);
        }
        /* the run reached both: decisions that placed and a full cluster */
        assert_true(placed > 500);
        assert_true(retries > 10);
        sched_cluster_free(c);
    }
}

/* The same comparison where the scan's own copies matter (sched_hot_t,
 * the node-major free-capacity index, the count of held cells): nodes
 * with devices of two resources (GPU and TPU, which the scan must leave
 * to the general checks), capacity held for a waiting gang (so that the
 * scan reads held), and nodes joining after finalize with a resource the
 * view had no row for (the arrays laid out again). */
static void add_mixed(sched_cluster_t *c, const char *name, int ngpu, const char *extra)
{
    cr_node_t *n = hw_node_new();
    char msg[160];
    sched_node_spec_t sp = {.name = name,
                            .cpus = 64,
                            .memory = 256ull << 30,
                            .resource = "GPU",
                            .ndev = ngpu,
                            .numa = 2};
    if (sched_make_node(&sp, n, msg, sizeof(msg)))
        fail_msg("make %s: %s", name, msg);
    for (int i = 0; i < 2; i++) {
        cr_device_t *d = cr_node_add_device(n);
        cr_strlcpy(d->resource, "TPU", sizeof(d->resource));
        cr_strlcpy(d->backend, "sim", sizeof(d->backend));
        d->vendor_index = i;
        d->health = CR_HEALTH_OK;
        snprintf(d->isolation_id, sizeof(d->isolation_id), "t%d", i);
    }
    cr_node_add_resource(n, "TPU", 2 * CR_QTY_ONE);
    if (extra)
        cr_node_add_resource(n, extra, 4 * CR_QTY_ONE);
    if (sched_cluster_add(c, n, msg, sizeof(msg)))
        fail_msg("add %s: %s", name, msg);
    hw_node_free(n);
}

static void test_scan_matches_reference_mixed_held_joined(void **state)
{
    static const char *shapes[] = {"GPU=1,CPU=4", "GPU=2",        "TPU=1",
                                   "TPU=2,CPU=2", "GPU=1,TPU=1",  "CPU=8,memory=16Gi",
                                   "GPU=0.5",     "fpga=1,CPU=1", "GPU=4"};
    for (uint64_t seed = 1; seed <= 4; seed++) {
        sched_rng_t rng = {seed};
        sched_cluster_t *c = sched_cluster_new();
        for (int i = 0; i < 240; i++) {
            char name[16];
            snprintf(name, sizeof(name), "n%d", i);
            int nd = 1 + (int)(sched_rng_next(&rng) % 8);
            if (i % 5 == 0)
                add_mixed(c, name, nd, NULL);
            else
                add(c, (sched_node_spec_t){.name = name,
                                           .cpus = 16 + (int)(sched_rng_next(&rng) % 64),
                                           .memory = (8ull + sched_rng_next(&rng) % 256) << 30,
                                           .resource = "GPU",
                                           .ndev = nd,
                                           .numa = 2});
        }
        sched_cluster_finalize(c);
        for (size_t n = 0; n < c->nnodes; n += 5)
            assert_int_equal(c->hot[n].devres, 0xff); /* two kinds: the general checks */
        sched_queue_t q;
        sched_queue_init(&q, 0);
        sched_config_t cfg = {.top_k = 1};
        uint64_t live[4096];
        int nlive = 0, placed = 0, joined = 0;
        bool saw_held = false;
        for (int step = 0; step < 2500; step++) {
            if (step == 600) {
                /* a gang of 16 whole 8-GPU nodes, which fits the empty
                 * cluster but not this busy one: it waits, and from its
                 * first run on its capacity is held */
                sched_bundle_t g[16];
                for (int k = 0; k < 16; k++)
                    g[k] = bundle(c, "GPU=8", NULL);
                sched_request_t gr = {.nbundles = 16,
                                      .bundles = g,
                                      .strategy = SCHED_STRICT_SPREAD,
                                      .domain_key = -1};
                assert_int_equal(sched_queue_push(&q, 1, 0, 0, &gr), 0);
            }
            if (step >= 600 && step % 50 == 0)
                sched_queue_run(&q, c, &cfg, NULL, step, NULL, NULL);
            if (step == 1200 || step == 1800) {
                /* nodes join with a resource the view has no row for */
                for (int i = 0; i < 30; i++) {
                    char name[16];
                    snprintf(name, sizeof(name), "j%d", joined++);
                    add_mixed(c, name, 4, "fpga");
                }
            }
            saw_held |= c->nheld > 0;
            if (nlive && (sched_rng_next(&rng) % 4 == 0 || nlive == 4096)) {
                int k = (int)(sched_rng_next(&rng) % (uint64_t)nlive);
                assert_int_equal(sched_release(c, live[k]), 0);
                live[k] = live[--nlive];
                continue;
            }
            sched_bundle_t b = bundle(c, shapes[sched_rng_next(&rng) % 9], NULL);
            sched_policy_t pol = (sched_policy_t)(sched_rng_next(&rng) % 2);
            int mode = pol == SCHED_SPREAD ? SCORE_SPREAD : SCORE_HYBRID, ever;
            sched_cluster_sync(c);
            int want = reference_pick(c, &cfg, &b, mode, &ever);
            sched_request_t r = {.nbundles = 1, .bundles = &b, .policy = pol, .domain_key = -1};
            sched_result_t out;
            sched_schedule(c, &cfg, &r, NULL, &out);
            if (want < 0) {
                assert_int_not_equal(out.status, SCHED_OK);
            } else {
                if (out.status != SCHED_OK || alloc_of(c, &out)->node != want)
                    fail_msg("seed %llu step %d: chose %d (status %d: %s), the plain scan %d",
                             (unsigned long long)seed, step,
                             out.status == SCHED_OK ? alloc_of(c, &out)->node : -1, out.status,
                             out.reason, want);
                live[nlive++] = out.placement;
                placed++;
            }
            char msg[200];
            if (sched_cluster_check(c, msg, sizeof(msg)))
                fail_msg("seed %llu step %d: %s", (unsigned long long)seed, step, msg);
        }
        assert_true(placed > 500);
        assert_true(saw_held);
        sched_queue_fini(&q, c);
        assert_int_equal(c->nheld, 0);
        char msg[200];
        if (sched_cluster_check(c, msg, sizeof(msg)))
            fail_msg("seed %llu after the queue: %s", (unsigned long long)seed, msg);
        sched_cluster_free(c);
    }
}

/* With every GPU taken, the index passes over every node; the answer is
 * still RETRY (the nodes could take it later), not INFEASIBLE. */
static void test_full_cluster_is_retry(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    for (int i = 0; i < 250; i++) {
        char name[16];
        snprintf(name, sizeof(name), "g%d", i);
        add(c, (sched_node_spec_t){
                   .name = name, .cpus = 64, .memory = 64ull << 30, .resource = "GPU", .ndev = 2});
    }
    sched_cluster_finalize(c);
    for (int i = 0; i < 500; i++)
        assert_int_equal(one(c, SCHED_HYBRID, "GPU=1", NULL).status, SCHED_OK);
    sched_result_t r = one(c, SCHED_HYBRID, "GPU=1,CPU=1", NULL);
    assert_int_equal(r.status, SCHED_RETRY);
    assert_non_null(strstr(r.reason, "free now"));
    assert_int_equal(one(c, SCHED_SPREAD, "GPU=4", NULL).status, SCHED_INFEASIBLE);
    /* a lost node's levels are its free capacity again once restored */
    uint64_t ids[4];
    assert_int_equal(sched_node_lost(c, 7, ids, 4), 2);
    assert_int_equal(one(c, SCHED_HYBRID, "GPU=1", NULL).status, SCHED_RETRY);
    assert_int_equal(sched_node_restore(c, 7), 0);
    sched_result_t ok = one(c, SCHED_HYBRID, "GPU=2", NULL);
    assert_int_equal(alloc_of(c, &ok)->node, 7);
    sched_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_islands_then_numa),
        cmocka_unit_test(test_fractions_pack),
        cmocka_unit_test(test_device_ids),
        cmocka_unit_test(test_tpu_submesh),
        cmocka_unit_test(test_hybrid_spread),
        cmocka_unit_test(test_affinity_and_selectors),
        cmocka_unit_test(test_selector_without_the_key),
        cmocka_unit_test(test_node_loss),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_property_random),
        cmocka_unit_test(test_scan_matches_reference),
        cmocka_unit_test(test_scan_matches_reference_mixed_held_joined),
        cmocka_unit_test(test_full_cluster_is_retry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
