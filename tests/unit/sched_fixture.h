/* Test helpers for placing one bundle on a cluster view: parse, schedule
 * (hybrid, top 1, a fixed seed), check the view's invariants. They assert
 * with cmocka, so include this after <cmocka.h>. Header-only. */
#ifndef CORRAL_TEST_SCHED_FIXTURE_H
#define CORRAL_TEST_SCHED_FIXTURE_H

#include "sched/sched.h"

/* A finalized cluster view of one node. */
static inline sched_cluster_t *sched_fixture_cluster(const cr_node_t *n)
{
    sched_cluster_t *c = sched_cluster_new();
    char msg[200];
    if (sched_cluster_add(c, n, msg, sizeof(msg)))
        fail_msg("sched_cluster_add: %s", msg);
    assert_int_equal(sched_cluster_finalize(c), 0);
    return c;
}

static inline sched_result_t sched_fixture_place(sched_cluster_t *c, const char *res)
{
    sched_bundle_t b;
    memset(&b, 0, sizeof(b));
    sched_err_t e;
    if (sched_parse_resources(&c->res, res, &b.req, &e))
        fail_msg("resources '%s': %s", res, e.msg);
    sched_request_t r = {.nbundles = 1, .bundles = &b, .policy = SCHED_HYBRID, .domain_key = -1};
    sched_config_t cfg = {.top_k = 1};
    sched_rng_t rng = {1};
    sched_result_t out;
    sched_schedule(c, &cfg, &r, &rng, &out);
    char msg[200];
    if (sched_cluster_check(c, msg, sizeof(msg)))
        fail_msg("invariant after %s: %s", res, msg);
    return out;
}

/* The devices (node indices, ascending) a placement of one bundle gave;
 * fails the test when it was not placed. */
static inline size_t sched_fixture_devices(sched_cluster_t *c, const sched_result_t *r, int *ids,
                                           size_t max)
{
    if (r->status != SCHED_OK)
        fail_msg("status %d: %s", r->status, r->reason);
    const sched_placement_t *p = sched_placement_get(c, r->placement);
    assert_non_null(p);
    return sched_alloc_devices(c, sched__alloc(p, 0), ids, max);
}

#endif
