/* sched/: resource strings, quantities, selectors, TPU topologies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "sched/sched.h"
#include <stdio.h>

static void test_syms(void **state)
{
    sched_syms_t s;
    sched_syms_init(&s);
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof(name), "k%d", i);
        assert_int_equal(sched_syms_intern(&s, name, strlen(name)), i);
    }
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof(name), "k%d", i);
        assert_int_equal(sched_syms_find(&s, name, strlen(name)), i);
        assert_string_equal(sched_syms_name(&s, i), name);
    }
    assert_int_equal(sched_syms_find(&s, "k1", 1), -1); /* "k" */
    assert_int_equal(sched_syms_find(&s, "nope", 4), -1);
    sched_syms_fini(&s);
}

static void test_resources_predefined_first(void **state)
{
    sched_syms_t r;
    sched_resources_init(&r);
    assert_int_equal(sched_syms_find(&r, "CPU", 3), SCHED_R_CPU);
    assert_int_equal(sched_syms_find(&r, "memory", 6), SCHED_R_MEMORY);
    assert_int_equal(sched_syms_find(&r, "GPU", 3), SCHED_R_GPU);
    assert_int_equal(sched_syms_find(&r, "TPU", 3), SCHED_R_TPU);
    assert_true(sched_resource_is_unit(SCHED_R_GPU));
    assert_false(sched_resource_is_unit(SCHED_R_CPU));
    sched_syms_fini(&r);
}

static void test_qty(void **state)
{
    int64_t q;
    sched_err_t e;
    assert_int_equal(sched_parse_qty("2", 1, &q, &e), 0);
    assert_int_equal(q, 20000);
    assert_int_equal(sched_parse_qty("0.5", 3, &q, &e), 0);
    assert_int_equal(q, 5000);
    assert_int_equal(sched_parse_qty("0.0001", 6, &q, &e), 0);
    assert_int_equal(q, 1);
    const char *zeros = "0.5000000000000000000000000000000000000000";
    assert_int_equal(sched_parse_qty(zeros, strlen(zeros), &q, &e), 0); /* found by fuzzing */
    assert_int_equal(q, 5000);
    assert_int_equal(sched_parse_qty("1.50000", 7, &q, &e), 0);
    assert_int_equal(q, 15000);
    assert_int_equal(sched_parse_qty("64Gi", 4, &q, &e), 0);
    assert_int_equal(q, 64LL * (1LL << 30) * CR_QTY_ONE);
    assert_int_equal(sched_parse_qty("1.5k", 4, &q, &e), 0);
    assert_int_equal(q, 1500LL * CR_QTY_ONE);
    /* the forms people type for memory: 64GiB is 64Gi, 512MB is 512M */
    assert_int_equal(sched_parse_qty("64GiB", 5, &q, &e), 0);
    assert_int_equal(q, 64LL * (1LL << 30) * CR_QTY_ONE);
    assert_int_equal(sched_parse_qty("3KiB", 4, &q, &e), 0);
    assert_int_equal(q, 3LL * 1024 * CR_QTY_ONE);
    assert_int_equal(sched_parse_qty("2TiB", 4, &q, &e), 0);
    assert_int_equal(q, 2LL * (1LL << 40) * CR_QTY_ONE);
    assert_int_equal(sched_parse_qty("512MB", 5, &q, &e), 0);
    assert_int_equal(q, 512000000LL * CR_QTY_ONE);
    assert_int_equal(sched_parse_qty("8kB", 3, &q, &e), 0);
    assert_int_equal(q, 8000LL * CR_QTY_ONE);
    assert_int_equal(sched_parse_qty("8KB", 3, &q, &e), 0);
    assert_int_equal(q, 8000LL * CR_QTY_ONE);
    assert_int_equal(sched_parse_qty("1GB", 3, &q, &e), 0);
    assert_int_equal(q, 1000000000LL * CR_QTY_ONE);
    assert_int_equal(sched_parse_qty("1Gb", 3, &q, &e), CR_EPARSE); /* bits: not a memory size */
    assert_int_equal(sched_parse_qty("1GiBs", 5, &q, &e), CR_EPARSE);
    /* errors, each at its byte */
    assert_int_equal(sched_parse_qty("-1", 2, &q, &e), CR_EPARSE);
    assert_int_equal(e.pos, 0);
    assert_non_null(strstr(e.msg, "negative"));
    assert_int_equal(sched_parse_qty("nan", 3, &q, &e), CR_EPARSE);
    assert_int_equal(e.pos, 0);
    assert_int_equal(sched_parse_qty("inf", 3, &q, &e), CR_EPARSE);
    assert_int_equal(sched_parse_qty("0.00001", 7, &q, &e), CR_EPARSE);
    assert_int_equal(e.pos, 6);
    assert_int_equal(sched_parse_qty("12x", 3, &q, &e), CR_EPARSE);
    assert_int_equal(e.pos, 2);
    assert_int_equal(sched_parse_qty("1.", 2, &q, &e), CR_EPARSE);
    assert_int_equal(sched_parse_qty("99999999999999999999", 20, &q, &e), CR_EPARSE);
    assert_non_null(strstr(e.msg, "too large"));
    assert_int_equal(sched_parse_qty("900000Ei", 8, &q, &e), CR_EPARSE);
    assert_non_null(strstr(e.msg, "too large"));
    assert_int_equal(sched_parse_qty("", 0, &q, &e), CR_EPARSE);
}

static void test_resource_strings(void **state)
{
    sched_syms_t r;
    sched_resources_init(&r);
    sched_resreq_t q;
    sched_err_t e;
    assert_int_equal(sched_parse_resources(&r, "GPU=2,CPU=8,memory=64Gi", &q, &e), 0);
    assert_int_equal(q.n, 3);
    assert_int_equal(q.id[0], SCHED_R_GPU);
    assert_int_equal(q.qty[0], 2 * CR_QTY_ONE);
    assert_int_equal(q.id[2], SCHED_R_MEMORY);
    cr_buf_t b = {0};
    sched_format_resources(&r, &q, &b);
    assert_string_equal(b.s, "GPU=2,CPU=8,memory=64Gi");
    cr_buf_free(&b);
    assert_int_equal(sched_parse_resources(&r, " GPU = 0.25 , my_res=3", &q, &e), 0);
    assert_int_equal(q.qty[0], 2500);
    assert_int_equal(q.id[1], SCHED_R_PREDEFINED); /* custom, interned after the predefined */
    assert_int_equal(sched_parse_resources(&r, "", &q, &e), 0);
    assert_int_equal(q.n, 0);
    assert_int_equal(sched_parse_resources(&r, "memory=64GiB", &q, &e), 0);
    assert_int_equal(q.qty[0], 64LL * (1LL << 30) * CR_QTY_ONE);
    assert_null(sched_resource_suggest("GPU", 3));
    assert_null(sched_resource_suggest("gpus", 4));
    assert_string_equal(sched_resource_suggest("Tpu", 3), "TPU");

    static const struct {
        const char *in;
        int pos;
        const char *msg;
    } bad[] = {
        {"GPU=1.5", 4, "whole number"},
        {"GPU=-1", 4, "negative"},
        {"GPU=nan", 4, "expected a number"},
        {"TPU=3", 4, "1, 2, 4 or 8"},
        {"TPU=0.5", 4, "1, 2, 4 or 8"},
        {"GPU=2,GPU=1", 6, "twice"},
        {"GPU", 3, "expected '='"},
        {"GPU=2,", 6, "after ','"},
        {"=2", 0, "resource name"},
        {"GPU=2;CPU=1", 5, "unexpected ';'"},
        {"CPU=1e9", 5, "unexpected 'e'"},
        {"GPU=128", 4, "devices on one node"},
        {"memory=99999999999999Ti", 7, "too large"},
        /* a predefined name in another case: the right one suggested */
        {"gpu=1", 0, "unknown resource 'gpu': did you mean GPU?"},
        {"CPU=1,Memory=1Gi", 6, "did you mean memory?"},
        {"NEURON_CORES=1", 0, "did you mean neuron_cores?"},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        int rc = sched_parse_resources(&r, bad[i].in, &q, &e);
        if (rc != CR_EPARSE || e.pos != bad[i].pos || !strstr(e.msg, bad[i].msg))
            fail_msg("'%s': rc %d pos %d msg '%s'", bad[i].in, rc, e.pos, e.msg);
    }
    sched_syms_fini(&r);
}

static void test_selectors(void **state)
{
    sched_syms_t l;
    sched_syms_init(&l);
    sched_selector_t s;
    sched_err_t e;
    assert_int_equal(sched_parse_selector(&l,
                                          "zone=a, gpu in (H100,H200),!spot,rack,tier notin "
                                          "(x),env!=dev, k exists",
                                          &s, &e),
                     0);
    assert_int_equal(s.n, 7);
    assert_int_equal(s.t[0].op, SCHED_OP_EQ);
    assert_int_equal(s.t[1].op, SCHED_OP_IN);
    assert_int_equal(s.t[1].nvals, 2);
    assert_int_equal(s.t[2].op, SCHED_OP_NOTEXISTS);
    assert_int_equal(s.t[3].op, SCHED_OP_EXISTS);
    assert_int_equal(s.t[4].op, SCHED_OP_NOTIN);
    assert_int_equal(s.t[5].op, SCHED_OP_NE);
    assert_int_equal(s.t[6].op, SCHED_OP_EXISTS);
    cr_buf_t b = {0};
    sched_format_selector(&l, &s, &b);
    assert_string_equal(b.s, "zone=a,gpu in (H100,H200),!spot,rack,tier notin (x),env!=dev,k");
    cr_buf_free(&b);
    static const struct {
        const char *in;
        int pos;
        const char *msg;
    } bad[] = {
        {"zone=", 5, "expected a label value at the end"},
        {"zone in a", 8, "expected '('"},
        {"zone in (a,b", 12, "expected ',' or ')'"},
        {"zone=a b", 7, "expected ','"},
        {"=a", 0, "expected a label key"},
        {"a=1,a=2", 4, "never match"},
        {"a,!a", 2, "never match"},
        {"a in (x,y),a notin (x,y)", 11, "never match"},
        {"a=1,a!=1", 4, "never match"},
        {"a==1", -1, NULL},
        {"a in (1,2),a=2", -1, NULL},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        int rc = sched_parse_selector(&l, bad[i].in, &s, &e);
        if (!bad[i].msg) {
            if (rc)
                fail_msg("'%s' should parse: %s", bad[i].in, e.msg);
            continue;
        }
        if (rc != CR_EPARSE || e.pos != bad[i].pos || !strstr(e.msg, bad[i].msg))
            fail_msg("'%s': rc %d pos %d msg '%s'", bad[i].in, rc, e.pos, e.msg);
    }
    sched_syms_fini(&l);
}

static void test_tpu_topology(void **state)
{
    sched_tpu_topo_t t;
    sched_err_t e;
    assert_int_equal(sched_parse_tpu_topology("4x4", &t, &e), 0);
    assert_int_equal(t.chips, 16);
    assert_int_equal(t.ndims, 2);
    assert_int_equal(sched_parse_tpu_topology("2x2x4", &t, &e), 0);
    assert_int_equal(t.chips, 16);
    assert_int_equal(t.dims[2], 4);
    assert_int_equal(sched_parse_tpu_topology("4", &t, &e), CR_EPARSE);
    assert_int_equal(sched_parse_tpu_topology("4x", &t, &e), CR_EPARSE);
    assert_int_equal(e.pos, 2);
    assert_int_equal(sched_parse_tpu_topology("4x0", &t, &e), CR_EPARSE);
    assert_int_equal(sched_parse_tpu_topology("4*4", &t, &e), CR_EPARSE);
    assert_int_equal(e.pos, 1);
    assert_int_equal(sched_parse_tpu_topology("2x2x2x2", &t, &e), CR_EPARSE);
    assert_int_equal(sched_parse_tpu_topology("999x2", &t, &e), CR_EPARSE);
    assert_int_equal(sched_parse_tpu_topology("256x256x256", &t, &e), CR_EPARSE);
    int dx, dy;
    assert_true(sched_tpu_submesh(8, &dx, &dy));
    assert_int_equal(dx * dy, 8);
    assert_false(sched_tpu_submesh(3, &dx, &dy));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syms),      cmocka_unit_test(test_resources_predefined_first),
        cmocka_unit_test(test_qty),       cmocka_unit_test(test_resource_strings),
        cmocka_unit_test(test_selectors), cmocka_unit_test(test_tpu_topology),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
