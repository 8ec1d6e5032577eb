/* sched/: the queue (priority then age) and gang holding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "sched/sched.h"
#include "hw/hw.h"
#include <stdio.h>

static sched_cluster_t *cluster(int nodes)
{
    sched_cluster_t *c = sched_cluster_new();
    for (int i = 0; i < nodes; i++) {
        char name[16], msg[160];
        snprintf(name, sizeof(name), "n%d", i);
        cr_node_t *n = hw_node_new();
        sched_node_spec_t sp = {.name = name, .cpus = 32, .resource = "GPU", .ndev = 8};
        assert_int_equal(sched_make_node(&sp, n, msg, sizeof(msg)), 0);
        assert_int_equal(sched_cluster_add(c, n, msg, sizeof(msg)), 0);
        hw_node_free(n);
    }
    sched_cluster_finalize(c);
    return c;
}

typedef struct seen {
    uint64_t keys[4096];
    uint64_t placements[4096];
    int status[4096];
    int n;
} seen_t;

static void on_result(void *ctx, uint64_t key, const sched_result_t *res)
{
    seen_t *s = ctx;
    s->keys[s->n] = key;
    s->status[s->n] = res->status;
    s->placements[s->n] = res->placement;
    s->n++;
}

static void test_priority_then_age(void **state)
{
    sched_cluster_t *c = cluster(1);
    sched_queue_t q;
    sched_queue_init(&q, 1000);
    sched_bundle_t b = {0};
    sched_err_t e;
    sched_parse_resources(&c->res, "GPU=4", &b.req, &e);
    sched_request_t r = {.nbundles = 1, .bundles = &b, .domain_key = -1};
    sched_queue_push(&q, 1, 0, 0, &r);
    sched_queue_push(&q, 2, 5, 1, &r);
    sched_queue_push(&q, 3, 0, 2, &r);
    sched_queue_push(&q, 4, 5, 3, &r);
    seen_t s = {0};
    assert_int_equal(sched_queue_run(&q, c, NULL, NULL, 4, on_result, &s), 2);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.keys[0], 2);
    assert_int_equal(s.keys[1], 4);
    assert_int_equal(sched_queue_len(&q), 2);
    assert_int_equal(sched_release(c, s.placements[0]), 0);
    assert_int_equal(sched_queue_run(&q, c, NULL, NULL, 5, on_result, &s), 1);
    assert_int_equal(s.keys[2], 1); /* the older of the two priority-0 requests */
    /* an infeasible request leaves the queue with its reason */
    sched_parse_resources(&c->res, "GPU=16", &b.req, &e);
    sched_queue_push(&q, 9, 0, 5, &r);
    sched_queue_run(&q, c, NULL, NULL, 6, on_result, &s);
    assert_int_equal(s.keys[3], 9);
    assert_int_equal(s.status[3], SCHED_INFEASIBLE);
    assert_int_equal(sched_queue_len(&q), 1);
    sched_queue_fini(&q, c);
    sched_cluster_free(c);
}

/* A gang of two whole nodes waits behind a stream of one-GPU jobs. Each
 * tick the oldest small job finishes and a new one arrives. Returns the
 * tick at which the gang was placed, or -1. */
static int gang_vs_stream(int64_t hold_after)
{
    sched_cluster_t *c = cluster(2);
    sched_queue_t q;
    sched_queue_init(&q, hold_after);
    sched_err_t e;
    sched_bundle_t small, big[2];
    memset(&small, 0, sizeof(small));
    memset(big, 0, sizeof(big));
    sched_parse_resources(&c->res, "GPU=1", &small.req, &e);
    sched_parse_resources(&c->res, "GPU=8", &big[0].req, &e);
    big[1] = big[0];
    sched_request_t rs = {.nbundles = 1, .bundles = &small, .domain_key = -1};
    sched_request_t rg = {
        .nbundles = 2, .bundles = big, .strategy = SCHED_STRICT_SPREAD, .domain_key = -1};
    /* 12 running small jobs */
    uint64_t running[64];
    int head = 0, tail = 0;
    for (int i = 0; i < 12; i++) {
        sched_result_t out;
        sched_schedule(c, NULL, &rs, NULL, &out);
        assert_int_equal(out.status, SCHED_OK);
        running[tail++ % 64] = out.placement;
    }
    sched_queue_push(&q, 1000, 0, 0, &rg);
    int placed_at = -1;
    uint64_t key = 1;
    for (int t = 1; t <= 60 && placed_at < 0; t++) {
        if (head < tail)
            assert_int_equal(sched_release(c, running[head++ % 64]), 0);
        sched_queue_push(&q, key++, 0, t, &rs);
        seen_t s = {0};
        sched_queue_run(&q, c, NULL, NULL, t, on_result, &s);
        for (int i = 0; i < s.n; i++) {
            if (s.keys[i] == 1000)
                placed_at = t;
            else if (s.status[i] == SCHED_OK)
                running[tail++ % 64] = s.placements[i];
        }
        char msg[200];
        if (sched_cluster_check(c, msg, sizeof(msg)))
            fail_msg("t=%d: %s", t, msg);
    }
    sched_queue_fini(&q, c);
    /* the holds are gone with the queue */
    for (size_t i = 0; i < (size_t)c->nres * c->nnodes; i++)
        assert_int_equal(c->held[i], 0);
    sched_cluster_free(c);
    return placed_at;
}

static void test_gang_not_starved(void **state)
{
    assert_int_equal(gang_vs_stream(1000000), -1); /* without holding: starves */
    int t = gang_vs_stream(5);
    assert_true(t > 5 && t <= 20); /* held from t=5, placed once 12 ended */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priority_then_age),
        cmocka_unit_test(test_gang_not_starved),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
