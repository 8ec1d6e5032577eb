/* sched/: nodes that join a cluster view in use (sched_cluster_add after
 * sched_cluster_finalize) and nodes that rejoin with a new description
 * (sched_cluster_replace while lost). Property tests with a fixed seed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "sched/sched.h"
#include "hw/hw.h"
#include <stdio.h>

static cr_node_t *make(sched_node_spec_t sp)
{
    cr_node_t *n = hw_node_new();
    char msg[160];
    if (sched_make_node(&sp, n, msg, sizeof(msg)))
        fail_msg("make %s: %s", sp.name, msg);
    return n;
}

static void add(sched_cluster_t *c, sched_node_spec_t sp)
{
    cr_node_t *n = make(sp);
    char msg[160];
    if (sched_cluster_add(c, n, msg, sizeof(msg)))
        fail_msg("add %s: %s", sp.name, msg);
    hw_node_free(n);
}

static void gpu(sched_cluster_t *c, const char *name, int ndev, const char *labels)
{
    add(c, (sched_node_spec_t){.name = name,
                               .cpus = 32,
                               .memory = 256ull << 30,
                               .resource = "GPU",
                               .ndev = ndev,
                               .island = ndev,
                               .labels = labels});
}

static void check(sched_cluster_t *c)
{
    char msg[200];
    if (sched_cluster_check(c, msg, sizeof(msg)))
        fail_msg("invariant: %s", msg);
}

static sched_bundle_t bundle(sched_cluster_t *c, const char *res, const char *sel)
{
    sched_bundle_t b;
    memset(&b, 0, sizeof(b));
    sched_err_t e;
    assert_int_equal(sched_parse_resources(&c->res, res, &b.req, &e), 0);
    if (sel)
        assert_int_equal(sched_parse_selector(&c->labels, sel, &b.sel, &e), 0);
    return b;
}

static sched_result_t one(sched_cluster_t *c, const char *res, const char *sel)
{
    sched_bundle_t b = bundle(c, res, sel);
    sched_request_t r = {.nbundles = 1, .bundles = &b, .policy = SCHED_HYBRID, .domain_key = -1};
    sched_result_t out;
    sched_config_t cfg = {.top_k = 1};
    sched_rng_t rng = {1};
    sched_schedule(c, &cfg, &r, &rng, &out);
    check(c);
    return out;
}

static sched_result_t group(sched_cluster_t *c, sched_strategy_t st, int n, const char *res,
                            const char *domain)
{
    sched_bundle_t b[16];
    for (int i = 0; i < n; i++)
        b[i] = bundle(c, res, NULL);
    sched_request_t r = {.nbundles = (uint32_t)n,
                         .bundles = b,
                         .strategy = st,
                         .domain_key =
                             domain ? sched_syms_intern(&c->labels, domain, strlen(domain)) : -1};
    sched_result_t out;
    sched_config_t cfg = {.top_k = 1};
    uint64_t before = sched_cluster_digest(c);
    sched_schedule(c, &cfg, &r, NULL, &out);
    if (out.status != SCHED_OK)
        assert_int_equal(sched_cluster_digest(c), before);
    check(c);
    return out;
}

static int node_of(sched_cluster_t *c, uint64_t id, uint32_t b)
{
    const sched_placement_t *p = sched_placement_get(c, id);
    assert_non_null(p);
    return sched__alloc(p, b)->node;
}

/* Joined nodes are alive and free; nothing placed before moves. */
static void test_join_after_finalize(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    gpu(c, "a", 8, NULL);
    gpu(c, "b", 8, NULL);
    assert_int_equal(sched_cluster_finalize(c), 0);
    sched_result_t r1 = one(c, "GPU=8", NULL);
    sched_result_t r2 = one(c, "GPU=3,CPU=4", NULL);
    assert_int_equal(r1.status, SCHED_OK);
    assert_int_equal(r2.status, SCHED_OK);
    /* three nodes of 8 GPUs: there are two */
    sched_result_t g = group(c, SCHED_STRICT_SPREAD, 3, "GPU=8", NULL);
    assert_int_equal(g.status, SCHED_INFEASIBLE);

    size_t cells = (size_t)c->nres * c->nnodes;
    int64_t av[64], tot[64];
    assert_true(cells <= 64);
    memcpy(av, c->avail, cells * sizeof(int64_t));
    memcpy(tot, c->total, cells * sizeof(int64_t));
    int32_t df[16];
    memcpy(df, c->devfree, 16 * sizeof(int32_t));
    uint64_t fm0 = c->freemask[0], fm1 = c->freemask[1];
    sched_sum_t sa = c->sumavail[SCHED_R_GPU];
    size_t old = c->nnodes;
    int nres = c->nres;

    gpu(c, "c", 8, NULL);
    gpu(c, "d", 8, NULL);
    gpu(c, "e", 8, NULL);
    char msg[160];
    cr_node_t *dup = make((sched_node_spec_t){.name = "a", .cpus = 1});
    assert_int_equal(sched_cluster_add(c, dup, msg, sizeof(msg)), CR_EEXIST);
    assert_string_equal(msg, "node a added twice");
    hw_node_free(dup);
    assert_int_equal(sched_cluster_nodes(c), 5);
    assert_int_equal(sched_cluster_find_node(c, "d"), 3);
    sched_cluster_sync(c);
    assert_int_equal(c->nnodes, 5);
    assert_int_equal(c->nres, nres);
    /* the old nodes' cells, device state and the placements are untouched */
    for (int r = 0; r < nres; r++)
        for (size_t n = 0; n < old; n++) {
            assert_int_equal(c->avail[(size_t)r * c->nnodes + n], av[(size_t)r * old + n]);
            assert_int_equal(c->total[(size_t)r * c->nnodes + n], tot[(size_t)r * old + n]);
        }
    assert_memory_equal(c->devfree, df, sizeof(df));
    assert_int_equal(c->freemask[0], fm0);
    assert_int_equal(c->freemask[1], fm1);
    assert_true(c->sumavail[SCHED_R_GPU] == sa + 24 * CR_QTY_ONE);
    assert_non_null(sched_placement_get(c, r1.placement));
    assert_non_null(sched_placement_get(c, r2.placement));
    for (int n = 2; n < 5; n++) {
        assert_true(c->alive[n]);
        assert_int_equal(c->freemask[n], 0xff);
    }
    check(c);
    /* now the gang fits, on the new nodes */
    g = group(c, SCHED_STRICT_SPREAD, 3, "GPU=8", NULL);
    assert_int_equal(g.status, SCHED_OK);
    for (uint32_t b = 0; b < 3; b++)
        assert_true(node_of(c, g.placement, b) >= 2);
    /* a joined node is found by its label, lost and restored like any */
    sched_result_t s = one(c, "CPU=1", "corral.io/node-id=e");
    assert_int_equal(s.status, SCHED_OK);
    assert_int_equal(node_of(c, s.placement, 0), 4);
    gpu(c, "f", 2, NULL);
    uint64_t ids[4];
    assert_int_equal(sched_node_lost(c, 5, ids, 4), 0);
    assert_false(c->alive[5]);
    assert_int_equal(sched_node_restore(c, 5), 0);
    check(c);
    assert_int_equal(sched_release(c, r1.placement), 0);
    assert_int_equal(sched_release(c, r2.placement), 0);
    assert_int_equal(sched_release(c, g.placement), 0);
    assert_int_equal(sched_release(c, s.placement), 0);

    /* the same nodes added before finalize give the same state */
    sched_cluster_t *f = sched_cluster_new();
    const char *names[] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; i++)
        gpu(f, names[i], 8, NULL);
    gpu(f, "f", 2, NULL);
    sched_cluster_finalize(f);
    assert_int_equal(sched_cluster_digest(c), sched_cluster_digest(f));
    assert_int_equal(sched_cluster_memory(c) > 0, 1);
    sched_cluster_free(f);
    sched_cluster_free(c);
}

/* A view finalized empty takes every node by joining. */
static void test_join_into_empty(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    assert_int_equal(sched_cluster_finalize(c), 0);
    assert_int_equal(one(c, "GPU=1", NULL).status, SCHED_INFEASIBLE);
    gpu(c, "a", 4, "zone=z1");
    sched_result_t r = one(c, "GPU=4", "zone=z1");
    assert_int_equal(r.status, SCHED_OK);
    assert_int_equal(one(c, "GPU=1", "zone=z1").status, SCHED_RETRY);
    assert_int_equal(one(c, "GPU=1", "zone=z2").status, SCHED_INFEASIBLE);
    gpu(c, "b", 4, "zone=z2");
    assert_int_equal(one(c, "GPU=1", "zone=z2").status, SCHED_OK);
    sched_cluster_free(c);
}

/* Fixed-seed property test: nodes join in batches between random
 * decisions, releases and losses. A twin that brings its arrays up to
 * date after every join (not lazily) must make the same decisions; no
 * node is ever over-committed; decisions use joined nodes; and once all
 * is released the view equals one built with every node up front. */
#define PNODES 96

static void pspec(int i, char *name, size_t nsz, char *labels, size_t lsz, sched_node_spec_t *sp)
{
    snprintf(name, nsz, "p%d", i);
    snprintf(labels, lsz, "rack=r%d,kind=k%d", i % 6, i % 3);
    memset(sp, 0, sizeof(*sp));
    sp->name = name;
    sp->labels = labels;
    sp->cpus = 16 + 16 * (i % 3);
    sp->memory = (uint64_t)(64 + 64 * (i % 4)) << 30;
    if (i % 5 != 4) {
        sp->resource = "GPU";
        sp->ndev = i % 2 ? 8 : 4;
        sp->island = sp->ndev;
        sp->numa = 2;
    }
}

static void padd(sched_cluster_t *c, int i)
{
    char name[16], labels[48];
    sched_node_spec_t sp;
    pspec(i, name, sizeof(name), labels, sizeof(labels), &sp);
    add(c, sp);
}

static const char *preq[] = {"GPU=1",
                             "GPU=2,CPU=4",
                             "GPU=4",
                             "GPU=8",
                             "CPU=8,memory=32Gi",
                             "GPU=0.5",
                             "GPU=3,CPU=2,memory=16Gi",
                             "CPU=40"};
static const char *psel[] = {NULL, "rack=r1", "kind in (k0,k2)", "rack!=r3", NULL};

static void test_property_joins(void **state)
{
    sched_cluster_t *a = sched_cluster_new(), *b = sched_cluster_new();
    int joined = 8;
    for (int i = 0; i < joined; i++) {
        padd(a, i);
        padd(b, i);
    }
    sched_cluster_finalize(a);
    sched_cluster_finalize(b);
    sched_rng_t rng = {20261202}, ra = {7}, rb = {7};
    sched_config_t cfg = {.top_k = 2};
    uint64_t live[4096];
    size_t nlive = 0, on_joined = 0, gangs = 0;
    bool lost[PNODES] = {false};
    for (int step = 0; step < 3000; step++) {
        uint64_t x = sched_rng_next(&rng);
        int op = (int)(x % 100);
        if (op < 6 && joined < PNODES) {
            int k = 1 + (int)(x >> 8) % 7;
            for (int i = 0; i < k && joined < PNODES; i++, joined++) {
                padd(a, joined);
                padd(b, joined);
                sched_cluster_sync(b);
            }
        } else if (op < 55) {
            sched_bundle_t bd = bundle(a, preq[(x >> 8) % CR_ARRAY_SIZE(preq)],
                                       psel[(x >> 16) % CR_ARRAY_SIZE(psel)]);
            sched_request_t r = {
                .nbundles = 1, .bundles = &bd, .policy = SCHED_HYBRID, .domain_key = -1};
            sched_result_t oa, ob;
            sched_schedule(a, &cfg, &r, &ra, &oa);
            sched_schedule(b, &cfg, &r, &rb, &ob);
            assert_int_equal(oa.status, ob.status);
            assert_int_equal(oa.placement, ob.placement);
            if (oa.status == SCHED_OK && nlive < CR_ARRAY_SIZE(live)) {
                live[nlive++] = oa.placement;
                on_joined += node_of(a, oa.placement, 0) >= 8;
            }
        } else if (op < 70) {
            /* a gang: k nodes of the same big shape, perhaps in one rack */
            int k = 2 + (int)(x >> 8) % 4;
            sched_bundle_t bd[8];
            for (int i = 0; i < k; i++)
                bd[i] = bundle(a, (x >> 12) & 1 ? "GPU=4" : "GPU=8", NULL);
            sched_request_t r = {.nbundles = (uint32_t)k,
                                 .bundles = bd,
                                 .strategy = (x >> 13) & 1 ? SCHED_STRICT_SPREAD : SCHED_PACK,
                                 .domain_key =
                                     (x >> 14) & 1 ? sched_syms_intern(&a->labels, "rack", 4) : -1};
            sched_result_t oa, ob;
            sched_schedule(a, &cfg, &r, &ra, &oa);
            sched_schedule(b, &cfg, &r, &rb, &ob);
            assert_int_equal(oa.status, ob.status);
            assert_int_equal(oa.placement, ob.placement);
            if (oa.status == SCHED_OK && nlive < CR_ARRAY_SIZE(live)) {
                live[nlive++] = oa.placement;
                gangs++;
            }
        } else if (op < 95) {
            if (!nlive)
                continue;
            size_t i = (size_t)(x >> 8) % nlive;
            assert_int_equal(sched_release(a, live[i]), 0);
            assert_int_equal(sched_release(b, live[i]), 0);
            live[i] = live[--nlive];
        } else {
            int n = (int)((x >> 8) % (uint64_t)joined);
            if (lost[n]) {
                assert_int_equal(sched_node_restore(a, n), 0);
                assert_int_equal(sched_node_restore(b, n), 0);
                lost[n] = false;
            } else {
                uint64_t ia[4096], ib[4096];
                size_t ka = sched_node_lost(a, n, ia, 4096);
                size_t kb = sched_node_lost(b, n, ib, 4096);
                assert_int_equal(ka, kb);
                for (size_t i = 0; i < ka; i++) {
                    assert_int_equal(ia[i], ib[i]);
                    for (size_t j = 0; j < nlive; j++)
                        if (live[j] == ia[i]) {
                            live[j] = live[--nlive];
                            break;
                        }
                }
                lost[n] = true;
            }
        }
        if (step % 50 == 0 || joined == PNODES) {
            assert_int_equal(sched_cluster_digest(a), sched_cluster_digest(b));
            check(a);
            /* no over-commit, counted from the placements themselves */
            int64_t used[PNODES] = {0};
            for (size_t i = 0; i < nlive; i++) {
                const sched_placement_t *p = sched_placement_get(a, live[i]);
                assert_non_null(p);
                for (uint32_t k = 0; k < p->nallocs; k++) {
                    const sched_alloc_t *al = sched__alloc(p, k);
                    for (int q = 0; q < al->req.n; q++)
                        if (al->req.id[q] == SCHED_R_GPU)
                            used[al->node] += al->req.qty[q];
                }
            }
            for (int n = 0; n < joined; n++) {
                char nm[16], lb[48];
                sched_node_spec_t sp;
                pspec(n, nm, sizeof(nm), lb, sizeof(lb), &sp);
                assert_true(used[n] <= (int64_t)sp.ndev * CR_QTY_ONE);
            }
        }
    }
    assert_int_equal(joined, PNODES);
    assert_true(on_joined > 0);
    assert_true(gangs > 0);
    for (size_t i = 0; i < nlive; i++)
        assert_int_equal(sched_release(a, live[i]), 0);
    for (int n = 0; n < PNODES; n++)
        if (lost[n])
            assert_int_equal(sched_node_restore(a, n), 0);
    check(a);
    sched_cluster_t *f = sched_cluster_new();
    for (int i = 0; i < PNODES; i++)
        padd(f, i);
    sched_cluster_finalize(f);
    assert_int_equal(sched_cluster_digest(a), sched_cluster_digest(f));
    assert_int_equal(a->nlindex, f->nlindex);
    for (size_t i = 0; i < f->nlindex; i++) {
        assert_int_equal(a->lindex[i].key, f->lindex[i].key);
        assert_int_equal(a->lindex[i].val, f->lindex[i].val);
        assert_int_equal(a->lindex[i].n, f->lindex[i].n);
        assert_memory_equal(&a->lindex_nodes[a->lindex[i].off], &f->lindex_nodes[f->lindex[i].off],
                            f->lindex[i].n * sizeof(int32_t));
    }
    sched_cluster_free(f);
    sched_cluster_free(a);
    sched_cluster_free(b);
}

static void host(sched_cluster_t *c, const char *slice, int w)
{
    char name[48];
    snprintf(name, sizeof(name), "%s-w%d", slice, w);
    add(c, (sched_node_spec_t){.name = name,
                               .cpus = 180,
                               .resource = "TPU",
                               .ndev = 4,
                               .slice = slice,
                               .topology = "4x4",
                               .accel_type = "v6e-16",
                               .worker_id = w,
                               .worker_count = 4});
}

static sched_result_t tpu(sched_cluster_t *c)
{
    sched_request_t r = {.domain_key = -1};
    r.tpu.on = true;
    r.tpu.gen = sched_syms_intern(&c->labels, "v6e", 3);
    sched_err_t e;
    assert_int_equal(sched_parse_tpu_topology("4x4", &r.tpu.topo, &e), 0);
    r.tpu.chips_per_host = 4;
    r.tpu.nslices = 1;
    sched_parse_resources(&c->res, "CPU=8", &r.tpu.extra, &e);
    sched_result_t out;
    sched_schedule(c, NULL, &r, NULL, &out);
    check(c);
    return out;
}

/* A TPU slice whose hosts join one by one: before its first host the
 * slice is unknown (INFEASIBLE); once a host has joined the slice is
 * known by its size, and a slice group waits (RETRY) until the last host
 * is there. */
static void test_tpu_slice_joins(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    gpu(c, "g0", 8, NULL);
    sched_cluster_finalize(c);
    sched_result_t r = tpu(c);
    assert_int_equal(r.status, SCHED_INFEASIBLE);
    assert_string_equal(r.reason, "no slice of topology 4x4 (v6e) with 4 hosts of 4 chips in the "
                                  "cluster");
    int order[] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++) {
        host(c, "s", order[i]);
        r = tpu(c);
        if (i < 3) {
            assert_int_equal(r.status, SCHED_RETRY);
            char want[128];
            snprintf(want, sizeof(want),
                     "no free slice of topology 4x4 (v6e): slice s has %d "
                     "of 4 hosts free",
                     i + 1);
            assert_string_equal(r.reason, want);
        }
    }
    assert_int_equal(r.status, SCHED_OK);
    for (uint32_t b = 0; b < 4; b++) {
        int n = node_of(c, r.placement, b);
        char want[16];
        snprintf(want, sizeof(want), "s-w%u", b);
        assert_string_equal(sched_node_name(c, n), want);
    }
    /* the slice labels of joined hosts select */
    assert_int_equal(sched_release(c, r.placement), 0);
    sched_result_t s =
        one(c, "TPU=4", "corral.io/tpu-slice-name=s,corral.io/tpu-slice-worker-id=1");
    assert_int_equal(s.status, SCHED_OK);
    assert_string_equal(sched_node_name(c, node_of(c, s.placement, 0)), "s-w1");
    /* a second host claiming worker 1 is refused, the view unchanged */
    char msg[160];
    cr_node_t *bad = make((sched_node_spec_t){.name = "intruder",
                                              .cpus = 4,
                                              .resource = "TPU",
                                              .ndev = 4,
                                              .slice = "s",
                                              .topology = "4x4",
                                              .accel_type = "v6e-16",
                                              .worker_id = 1,
                                              .worker_count = 4});
    uint64_t d = sched_cluster_digest(c);
    assert_int_equal(sched_cluster_add(c, bad, msg, sizeof(msg)), CR_EINVAL);
    assert_string_equal(msg, "TPU slice s: two hosts claim worker 1");
    assert_int_equal(sched_cluster_nodes(c), 5);
    assert_int_equal(sched_cluster_find_node(c, "intruder"), -1);
    assert_int_equal(sched_cluster_digest(c), d);
    hw_node_free(bad);
    sched_cluster_free(c);
}

/* A rack whose nodes join one by one: a group confined to one rack is
 * INFEASIBLE until the rack has enough nodes (the scheduler cannot know
 * the rack will grow), then OK, on that rack. */
static void test_domain_joins(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    gpu(c, "x0", 8, "rack=r0");
    sched_cluster_finalize(c);
    for (int i = 0; i < 4; i++) {
        sched_result_t g = group(c, SCHED_STRICT_SPREAD, 4, "GPU=8", "rack");
        assert_int_equal(g.status, SCHED_INFEASIBLE);
        char name[16];
        snprintf(name, sizeof(name), "r1-%d", i);
        gpu(c, name, 8, "rack=r1");
    }
    sched_result_t g = group(c, SCHED_STRICT_SPREAD, 4, "GPU=8", "rack");
    assert_int_equal(g.status, SCHED_OK);
    int rack = sched_syms_find(&c->labels, "rack", 4);
    int r1 = sched_syms_find(&c->labels, "r1", 2);
    for (uint32_t b = 0; b < 4; b++)
        assert_int_equal(sched_node_label(c, node_of(c, g.placement, b), rack), r1);
    sched_cluster_free(c);
}

/* A node rejoins with other devices and labels: refused while it is in
 * use, taken while it is lost, in force once restored. */
static void test_replace(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    gpu(c, "a", 8, "gen=h100");
    gpu(c, "b", 8, "gen=h100");
    sched_cluster_finalize(c);
    sched_result_t r = one(c, "GPU=2", "corral.io/node-id=a");
    assert_int_equal(r.status, SCHED_OK);
    cr_node_t *nd = make((sched_node_spec_t){
        .name = "a", .cpus = 64, .resource = "GPU", .ndev = 4, .island = 4, .labels = "gen=h200"});
    cr_resource_t *lic = CR_VEC_PUSH(&nd->resources);
    snprintf(lic->name, sizeof(lic->name), "my.io/licence");
    lic->amount = 2 * CR_QTY_ONE;
    char msg[160];
    uint64_t d = sched_cluster_digest(c);
    assert_int_equal(sched_cluster_replace(c, 0, nd, msg, sizeof(msg)), CR_EAGAIN);
    assert_string_equal(msg, "node a is in use; mark it lost (sched_node_lost) before replacing "
                             "its description");
    assert_int_equal(sched_cluster_replace(c, 7, nd, msg, sizeof(msg)), CR_EINVAL);
    assert_int_equal(sched_cluster_digest(c), d);
    /* a joined node not yet taken in is alive too */
    gpu(c, "late", 2, NULL);
    cr_node_t *ld = make((sched_node_spec_t){.name = "late", .cpus = 1});
    assert_int_equal(sched_cluster_replace(c, 2, ld, msg, sizeof(msg)), CR_EAGAIN);
    hw_node_free(ld);

    uint64_t ids[4];
    assert_int_equal(sched_node_lost(c, 0, ids, 4), 1);
    assert_int_equal(ids[0], r.placement);
    /* the description must be the node's own */
    assert_int_equal(sched_cluster_replace(c, 1, nd, msg, sizeof(msg)), CR_EAGAIN);
    cr_node_t *other = make((sched_node_spec_t){.name = "zz", .cpus = 1});
    uint64_t ids2[4];
    assert_int_equal(sched_node_lost(c, 1, ids2, 4), 0);
    assert_int_equal(sched_cluster_replace(c, 1, other, msg, sizeof(msg)), CR_EINVAL);
    assert_string_equal(msg, "node b cannot take the description of node zz");
    assert_int_equal(sched_node_restore(c, 1), 0);
    hw_node_free(other);

    assert_int_equal(sched_cluster_replace(c, 0, nd, msg, sizeof(msg)), 0);
    hw_node_free(nd);
    check(c);
    /* still lost */
    assert_int_not_equal(one(c, "GPU=1", "gen=h200").status, SCHED_OK);
    assert_int_equal(sched_node_restore(c, 0), 0);
    check(c);
    assert_int_equal(one(c, "GPU=5", "gen=h200").status, SCHED_INFEASIBLE);
    sched_result_t h = one(c, "GPU=4,my.io/licence=2", "gen=h200");
    assert_int_equal(h.status, SCHED_OK);
    assert_int_equal(node_of(c, h.placement, 0), 0);
    int out[8];
    assert_int_equal(
        sched_alloc_devices(c, sched__alloc(sched_placement_get(c, h.placement), 0), out, 8), 4);
    /* its old label is gone: only b is gen=h100 */
    sched_result_t o = one(c, "GPU=1", "gen=h100,corral.io/node-id=a");
    assert_int_equal(o.status, SCHED_INFEASIBLE);
    assert_true(c->sumtotal[SCHED_R_GPU] == (4 + 8 + 2) * CR_QTY_ONE);
    assert_int_equal(sched_release(c, h.placement), 0);

    /* many rejoins: what replaced nodes leave behind is reclaimed */
    for (int i = 0; i < 400; i++) {
        assert_int_equal(sched_node_lost(c, 0, ids, 4), 0);
        cr_node_t *v = make((sched_node_spec_t){.name = "a",
                                                .cpus = 64,
                                                .resource = "GPU",
                                                .ndev = 1 + i % 8,
                                                .labels = "gen=h200,x=1"});
        assert_int_equal(sched_cluster_replace(c, 0, v, msg, sizeof(msg)), 0);
        hw_node_free(v);
        assert_int_equal(sched_node_restore(c, 0), 0);
        sched_result_t q = one(c, "GPU=1", "x=1");
        assert_int_equal(q.status, SCHED_OK);
        assert_int_equal(sched_release(c, q.placement), 0);
    }
    /* without reclaiming: 1,206 labels and 1,818 devices */
    assert_true(c->lab.n < 1100);
    assert_true(c->dev.n < 1000);
    check(c);
    sched_cluster_free(c);
}

/* A TPU host rejoins: its worker is freed for the new description, and a
 * refused description leaves the old claim in place. */
static void test_replace_tpu(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    for (int w = 0; w < 4; w++)
        host(c, "s", w);
    sched_cluster_finalize(c);
    uint64_t ids[4];
    assert_int_equal(sched_node_lost(c, 3, ids, 4), 0);
    assert_int_equal(tpu(c).status, SCHED_RETRY);
    char msg[160];
    cr_node_t *bad = make((sched_node_spec_t){.name = "s-w3",
                                              .cpus = 180,
                                              .resource = "TPU",
                                              .ndev = 4,
                                              .slice = "s",
                                              .topology = "4x4",
                                              .accel_type = "v6e-16",
                                              .worker_id = 0,
                                              .worker_count = 4});
    assert_int_equal(sched_cluster_replace(c, 3, bad, msg, sizeof(msg)), CR_EINVAL);
    assert_string_equal(msg, "TPU slice s: two hosts claim worker 0");
    assert_int_equal(c->slices.v[0].worker_node[3], 3);
    hw_node_free(bad);
    cr_node_t *good = make((sched_node_spec_t){.name = "s-w3",
                                               .cpus = 200,
                                               .resource = "TPU",
                                               .ndev = 4,
                                               .slice = "s",
                                               .topology = "4x4",
                                               .accel_type = "v6e-16",
                                               .worker_id = 3,
                                               .worker_count = 4});
    assert_int_equal(sched_cluster_replace(c, 3, good, msg, sizeof(msg)), 0);
    hw_node_free(good);
    assert_int_equal(sched_node_restore(c, 3), 0);
    sched_result_t r = tpu(c);
    assert_int_equal(r.status, SCHED_OK);
    assert_int_equal(node_of(c, r.placement, 3), 3);
    sched_cluster_free(c);
}

/* A cordoned node (its agent is not connected) takes nothing new, single
 * bundles, groups or node affinity, while what it holds stays and is
 * given back; requests only it could take wait (RETRY, saying why)
 * rather than being refused; uncordoned, it takes work again. */
static void test_cordon(void **state)
{
    sched_cluster_t *c = sched_cluster_new();
    gpu(c, "a", 8, "zone=z1");
    gpu(c, "b", 8, "zone=z2");
    sched_cluster_finalize(c);
    sched_result_t held = one(c, "GPU=2", "corral.io/node-id=b");
    assert_int_equal(held.status, SCHED_OK);
    int64_t sum = c->sumavail[SCHED_R_GPU];
    assert_int_equal(sched_node_cordon(c, 1, true), 0);
    assert_int_equal(c->alive[1], SCHED_CORDONED);
    assert_true(c->sumavail[SCHED_R_GPU] == sum); /* still counted */
    check(c);
    /* nothing new on b: eight single GPUs all go to a, the ninth waits */
    uint64_t ids[8];
    for (int i = 0; i < 8; i++) {
        sched_result_t r = one(c, "GPU=1", NULL);
        assert_int_equal(r.status, SCHED_OK);
        assert_int_equal(node_of(c, r.placement, 0), 0);
        ids[i] = r.placement;
    }
    sched_result_t w = one(c, "GPU=1", NULL);
    assert_int_equal(w.status, SCHED_RETRY);
    w = one(c, "GPU=1", "corral.io/node-id=b");
    assert_int_equal(w.status, SCHED_RETRY);
    assert_non_null(strstr(w.reason, "b, is cordoned: its agent is not connected"));
    assert_int_equal(group(c, SCHED_STRICT_SPREAD, 2, "GPU=1", NULL).status, SCHED_RETRY);
    assert_int_equal(group(c, SCHED_PACK, 2, "GPU=1", "zone").status, SCHED_RETRY);
    /* node affinity to it: waits, and says so */
    sched_bundle_t b = bundle(c, "GPU=1", NULL);
    sched_request_t r = {.nbundles = 1,
                         .bundles = &b,
                         .policy = SCHED_NODE_AFFINITY,
                         .affinity_node = 1,
                         .domain_key = -1};
    sched_config_t cfg = {.top_k = 1};
    sched_rng_t rng = {1};
    sched_schedule(c, &cfg, &r, &rng, &w);
    assert_int_equal(w.status, SCHED_RETRY);
    assert_non_null(strstr(w.reason, "cordoned"));
    /* what it held is given back */
    assert_int_equal(sched_release(c, held.placement), 0);
    check(c);
    for (int i = 0; i < 8; i++)
        assert_int_equal(sched_release(c, ids[i]), 0);
    /* open again: it takes work; a lost node cannot be cordoned, and
     * comes back open */
    assert_int_equal(sched_node_cordon(c, 1, false), 0);
    held = one(c, "GPU=8", "corral.io/node-id=b");
    assert_int_equal(held.status, SCHED_OK);
    assert_int_equal(sched_release(c, held.placement), 0);
    assert_int_equal(sched_node_cordon(c, 1, true), 0);
    assert_int_equal(sched_node_lost(c, 1, NULL, 0), 0);
    assert_int_equal(sched_node_cordon(c, 1, true), CR_EINVAL);
    assert_int_equal(sched_node_cordon(c, 7, true), CR_EINVAL);
    assert_int_equal(sched_node_restore(c, 1), 0);
    assert_int_equal(c->alive[1], SCHED_ALIVE);
    check(c);
    sched_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_after_finalize), cmocka_unit_test(test_join_into_empty),
        cmocka_unit_test(test_property_joins),      cmocka_unit_test(test_tpu_slice_joins),
        cmocka_unit_test(test_domain_joins),        cmocka_unit_test(test_replace),
        cmocka_unit_test(test_replace_tpu),         cmocka_unit_test(test_cordon),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
