/* sched/: cluster and trace files for corral sim: the shipped examples
 * load, templates expand, and every error names its place. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "sched/sched.h"
#include <stdio.h>

static void test_examples_load(void **state)
{
    char *err = NULL;
    sched_cluster_t *c;
    assert_int_equal(
        sched_cluster_load(CORRAL_SOURCE_DIR "/examples/clusters/mixed.yaml", NULL, 0, &c, &err),
        0);
    assert_int_equal(c->nnodes, 52);
    int n = sched_cluster_find_node(c, "h100-9");
    assert_true(n >= 0);
    int rack = sched_syms_find(&c->labels, "corral.io/rack", 14);
    assert_string_equal(sched_syms_name(&c->labels, sched_node_label(c, n, rack)), "rack-1");
    assert_int_equal(c->slices.n, 2 + 4 + 1);
    int w2 = sched_cluster_find_node(c, "v6e-s1-w2");
    assert_int_equal(c->slices.v[1].worker_node[2], w2);
    assert_int_equal(c->sumtotal[SCHED_R_GPU], (16 * 8 + 8 * 4 + 4 * 8) * CR_QTY_ONE);
    sched_trace_t tr;
    assert_int_equal(sched_trace_load("no/such/trace.yaml", NULL, 0, c, &tr, &err),
                     CR_EPARSE); /* a relative path that is not there */
    assert_string_equal(err, "no/such/trace.yaml: cannot read the file");
    free(err);
    err = NULL;
    assert_int_equal(
        sched_trace_load(CORRAL_SOURCE_DIR "/examples/traces/mixed.yaml", NULL, 0, c, &tr, &err),
        0);
    assert_int_equal(tr.seed, 42);
    assert_true(tr.streams.n >= 8);
    assert_true(tr.streams.v[3].req.nbundles == 4);
    assert_int_equal(tr.streams.v[3].req.strategy, SCHED_STRICT_SPREAD);
    assert_true(tr.streams.v[5].req.tpu.on);
    sched_trace_fini(&tr);
    sched_cluster_free(c);

    assert_int_equal(sched_cluster_load(CORRAL_SOURCE_DIR "/examples/clusters/fleet-10k.yaml", NULL,
                                        0, &c, &err),
                     0);
    assert_int_equal(c->nnodes, 10000 + 256 * 4);
    assert_int_equal(c->sumtotal[SCHED_R_GPU], 80000 * CR_QTY_ONE);
    assert_int_equal(c->sumtotal[SCHED_R_TPU], 4096 * CR_QTY_ONE);
    /* the budget: under 4 KiB a node */
    assert_true(sched_cluster_memory(c) / c->nnodes < 4096);
    assert_int_equal(sched_trace_load(CORRAL_SOURCE_DIR "/examples/traces/fleet-10k.yaml", NULL, 0,
                                      c, &tr, &err),
                     0);
    sched_trace_fini(&tr);
    sched_cluster_free(c);
}

static void expect_cluster_error(const char *yaml, const char *want)
{
    char *err = NULL;
    sched_cluster_t *c = NULL;
    int rc = sched_cluster_load("c.yaml", yaml, strlen(yaml), &c, &err);
    if (rc == 0 || !err || !strstr(err, want))
        fail_msg("%s\n  rc %d, error '%s', wanted '%s'", yaml, rc, err ? err : "(none)", want);
    assert_null(c);
    free(err);
}

static void test_cluster_errors(void **state)
{
    expect_cluster_error("nodes: [ {count: 2", "c.yaml:2:1: missing comma in flow mapping");
    expect_cluster_error("nodes: 3", "c.yaml:1:8: /nodes: nodes: expected a list");
    expect_cluster_error("nodes:\n  - {template: nope}", "c.yaml:2:16: /nodes/0/template: no "
                                                         "template named 'nope'");
    expect_cluster_error("nodes:\n  - {count: -1}", "c.yaml:2:13: /nodes/0/count: expected a "
                                                    "whole number from 1 to 1000000");
    expect_cluster_error("nodes:\n  - {count: 2, memory: 1.5.5}", "memory: ");
    expect_cluster_error("nodes:\n  - {cpus: nan}", "expected a whole number");
    expect_cluster_error("nodes:\n  - {devices: 8, island: 3, resource: GPU}", "island of 3");
    expect_cluster_error("nodes:\n  - {name: \"n-{x}\", count: 2}", "unknown variable");
    expect_cluster_error("nodes:\n  - {name: \"n\", count: 2}", "node n added twice");
    expect_cluster_error("nodes:\n  - {topology: 4x4}", "topology given without slices");
    expect_cluster_error("nodes:\n  - {slices: 1, topology: 4x4, devices: 3, resource: TPU}",
                         "not a whole number of 3-chip hosts");
    expect_cluster_error("nodes:\n  - {colour: red}", "unknown field 'colour'");
    expect_cluster_error("nodes: []", "the cluster has no nodes");
    expect_cluster_error("", "c.yaml");
}

static void expect_trace_error(const char *yaml, const char *want)
{
    char *err = NULL;
    sched_cluster_t *c = NULL;
    const char *cl = "nodes: [{count: 2, cpus: 8, resource: GPU, devices: 4}]";
    assert_int_equal(sched_cluster_load("c.yaml", cl, strlen(cl), &c, &err), 0);
    sched_trace_t tr;
    int rc = sched_trace_load("t.yaml", yaml, strlen(yaml), c, &tr, &err);
    if (rc == 0 || !err || !strstr(err, want))
        fail_msg("%s\n  rc %d, error '%s', wanted '%s'", yaml, rc, err ? err : "(none)", want);
    free(err);
    sched_cluster_free(c);
}

static void test_trace_errors(void **state)
{
    expect_trace_error("requests:\n  - {resources: \"GPU=1.5\"}",
                       "t.yaml:2:22: /requests/0/resources: resources 'GPU=1.5': GPU above 1 "
                       "must be a whole number");
    expect_trace_error("requests:\n  - {resources: \"GPU=1\", selector: \"a=1,a=2\"}",
                       "never match");
    expect_trace_error("requests:\n  - {group: {bundles: 0, resources: \"GPU=1\"}}",
                       "at least one bundle");
    expect_trace_error("requests:\n  - {group: {bundles: 2, strategy: TIGHT}}", "strategy:");
    expect_trace_error("requests:\n  - {tpu: {topology: 4x4, chips_per_host: 3}}", "1, 2, 4 or 8");
    expect_trace_error("requests:\n  - {tpu: {chips_per_host: 4}}", "a topology is required");
    expect_trace_error("requests:\n  - {resources: \"GPU=1\", duration: \"9..3\"}", "duration");
    expect_trace_error("requests:\n  - {resources: \"GPU=1\", at: -4}", "from 0 to");
    expect_trace_error("requests:\n  - {resources: \"GPU=1\", group: {bundles: 1}}",
                       "exactly one of");
    expect_trace_error("requests:\n  - {count: 3}", "exactly one of");
    expect_trace_error("requests: 1", "expected a list");
    expect_trace_error("seed: x\nrequests: []", "/seed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples_load),
        cmocka_unit_test(test_cluster_errors),
        cmocka_unit_test(test_trace_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
