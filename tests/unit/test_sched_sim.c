/* corral sim end to end: the built binary on the shipped mixed cluster and
 * trace; the counts add up, the reasons are the expected ones, and the
 * same trace gives the same simulated outcome twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "base/base.h"
#include <jansson.h>
#include <stdio.h>

static json_t *run(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s/corral' sim %s", CORRAL_BUILD_DIR, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    json_error_t err;
    json_t *j = json_loadf(p, 0, &err);
    int st = pclose(p);
    if (!j)
        fail_msg("%s: not JSON: %s", cmd, err.text);
    assert_int_equal(st, 0);
    return j;
}

static json_int_t geti(json_t *j, const char *k)
{
    json_t *v = json_object_get(j, k);
    if (!json_is_integer(v))
        fail_msg("no integer '%s'", k);
    return json_integer_value(v);
}

static void test_mixed(void **state)
{
    const char *args = "--cluster '" CORRAL_SOURCE_DIR "/examples/clusters/mixed.yaml' "
                       "--workload '" CORRAL_SOURCE_DIR "/examples/traces/mixed.yaml' --json";
    json_t *a = run(args), *b = run(args);
    assert_int_equal(geti(a, "nodes"), 52);
    assert_int_equal(geti(a, "placed") + geti(a, "infeasible") + geti(a, "pending_at_end"),
                     geti(a, "requests"));
    assert_int_equal(geti(a, "infeasible"), 3); /* 2 x GPU=16 and one impossible selector */
    json_t *rs = json_object_get(a, "infeasible_reasons");
    assert_int_equal(json_array_size(rs), 2);
    assert_string_equal(json_string_value(json_array_get(rs, 0)),
                        "no node has GPU=16 in total: the largest, h100-0, has GPU=8");
    assert_true(geti(a, "decisions") > 0);
    json_t *gw = json_object_get(a, "gang_wait_s");
    assert_true(json_integer_value(json_object_get(gw, "count")) > 0);
    /* simulated outcomes do not depend on the clock */
    assert_int_equal(geti(a, "placed"), geti(b, "placed"));
    assert_int_equal(geti(a, "decisions"), geti(b, "decisions"));
    assert_true(json_equal(json_object_get(a, "gang_wait_s"), json_object_get(b, "gang_wait_s")));
    assert_true(json_equal(json_object_get(a, "utilization"), json_object_get(b, "utilization")));
    json_t *gpu = json_object_get(json_object_get(a, "utilization"), "GPU");
    assert_true(json_array_size(gpu) == 50);
    json_decref(a);
    json_decref(b);
}

static void test_bad_files(void **state)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s/corral' sim --cluster /nonexistent.yaml --workload x.yaml 2>&1",
             CORRAL_BUILD_DIR);
    FILE *p = popen(cmd, "r");
    char line[512] = "";
    assert_non_null(fgets(line, sizeof(line), p));
    assert_int_equal(WEXITSTATUS(pclose(p)), 1);
    assert_string_equal(line, "corral sim: /nonexistent.yaml: cannot read the file\n");
    snprintf(cmd, sizeof(cmd), "'%s/corral' sim --cluster x.yaml >/dev/null 2>&1",
             CORRAL_BUILD_DIR);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
