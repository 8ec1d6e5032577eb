/* Golden tests: every recorded fixture machine, discovered whole (backends
 * and hwloc host part), gives exactly its expected.json; and the hardware
 * spec of the same machine gives the same node description, apart from
 * what marks it simulated. Regenerate with scripts/regen-fixtures.sh after
 * a deliberate change, and review the diff. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture.h"

static const struct machine {
    const char *fixture, *spec;
} machines[] = {
    {"dgx-h100", "dgx-h100"},
    {"pcie-a100", "pcie-a100-nvlink-pairs"},
    {"mi300x-8", "mi300x-8"},
    {"tpu-v6e-4x4-w0", "tpu-v6e-4x4-w0"},
    {"tpu-v6e-4x4-w1", "tpu-v6e-4x4-w1"},
    {"tpu-v6e-4x4-w2", "tpu-v6e-4x4-w2"},
    {"tpu-v6e-4x4-w3", "tpu-v6e-4x4-w3"},
    {"tpu-v5p-2x2x2-w0", "tpu-v5p-2x2x2-w0"},
    {"tpu-v5p-2x2x2-w1", "tpu-v5p-2x2x2-w1"},
    {"trn1-32xlarge", "trn1-32xlarge"},
    {"gaudi2-8", "gaudi2-8"},
    {"intel-max-1100-2", "intel-max-1100-2"},
    {"cpu-only", "cpu-only"},
    {"gb200-tray", "gb200-nvl72/tray-01"},
};

/* Prints where two JSON values first differ, for a readable failure. */
static void print_diff(const char *path, json_t *a, json_t *b)
{
    if (json_equal(a, b))
        return;
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v)
        {
            char p[512];
            snprintf(p, sizeof(p), "%s.%s", path, k);
            json_t *w = json_object_get(b, k);
            if (!w) {
                printf("  %s: only in discovered\n", p);
                return;
            }
            if (!json_equal(v, w)) {
                print_diff(p, v, w);
                return;
            }
        }
        json_object_foreach(b, k, v) if (!json_object_get(a, k))
        {
            printf("  %s.%s: only in expected\n", path, k);
            return;
        }
    }
    if (json_is_array(a) && json_is_array(b)) {
        for (size_t i = 0; i < json_array_size(a) && i < json_array_size(b); i++) {
            if (!json_equal(json_array_get(a, i), json_array_get(b, i))) {
                char p[512];
                snprintf(p, sizeof(p), "%s[%zu]", path, i);
                print_diff(p, json_array_get(a, i), json_array_get(b, i));
                return;
            }
        }
        printf("  %s: %zu elements discovered, %zu expected\n", path, json_array_size(a),
               json_array_size(b));
        return;
    }
    char *sa = json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT);
    char *sb = json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT);
    printf("  %s: discovered %.200s, expected %.200s\n", path, sa, sb);
    free(sa);
    free(sb);
}

static json_t *discover_fixture(const char *machine)
{
    fixture_env_t f;
    fixture_open(&f, machine);
    char path[1200];
    snprintf(path, sizeof(path), "%s/nvml.json", f.dir);
    if (access(path, R_OK) == 0) {
        char lib[1200];
        snprintf(lib, sizeof(lib), "%s/tests/stubs/libnvml_stub.so", CORRAL_BUILD_DIR);
        fixture_setenv(&f, "CORRAL_NVML_LIBRARY", lib);
        fixture_setenv(&f, "CORRAL_NVML_STUB", path);
        setenv("CORRAL_NVML_STUB", path, 1); /* the stand-in library reads it itself */
    }
    hw_options_t o = fixture_options(&f);
    cr_node_t *node = NULL;
    char *msg = NULL;
    int err = hw_discover(&o, &node, &msg);
    if (err)
        printf("%s: %s\n", machine, msg ? msg : cr_strerror(err));
    assert_int_equal(err, 0);
    json_t *j = hw_node_to_json(node);
    hw_node_free(node);
    fixture_close(&f);
    unsetenv("CORRAL_NVML_STUB");
    return j;
}

static void test_fixtures_match_expected(void **state)
{
    int failed = 0;
    for (size_t i = 0; i < CR_ARRAY_SIZE(machines); i++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/tests/fixtures/hw/%s/expected.json", CORRAL_SOURCE_DIR,
                 machines[i].fixture);
        json_error_t je;
        json_t *want = json_load_file(path, 0, &je);
        if (!want) {
            printf("%s: cannot load %s: %s\n", machines[i].fixture, path, je.text);
            failed++;
            continue;
        }
        json_t *got = discover_fixture(machines[i].fixture);
        if (!json_equal(got, want)) {
            printf("%s: discovery differs from expected.json:\n", machines[i].fixture);
            print_diff("", got, want);
            failed++;
        }
        json_decref(got);
        json_decref(want);
    }
    assert_int_equal(failed, 0);
}

static void test_specs_match_fixtures(void **state)
{
    int failed = 0;
    for (size_t i = 0; i < CR_ARRAY_SIZE(machines); i++) {
        char spec[1200];
        snprintf(spec, sizeof(spec), "%s/specs/%s.yaml", CORRAL_SOURCE_DIR, machines[i].spec);
        fixture_env_t f = {0};
        hw_options_t o = {
            .spec_path = spec, .getenv = fixture_getenv, .getenv_ctx = &f, .no_plugins = true};
        cr_node_t *node = NULL;
        char *msg = NULL;
        int err = hw_discover(&o, &node, &msg);
        if (err) {
            printf("%s: %s\n", spec, msg ? msg : cr_strerror(err));
            free(msg);
            failed++;
            continue;
        }
        assert_true(node->simulated);
        assert_string_equal(cr_node_get_label(node, "corral.io/simulated"), "true");
        json_t *sim = hw_node_to_json(node);
        hw_node_free(node);
        /* what marks a node simulated is the only allowed difference */
        json_object_set_new(sim, "simulated", json_false());
        json_object_del(json_object_get(sim, "labels"), "corral.io/simulated");
        json_t *real = discover_fixture(machines[i].fixture);
        if (!json_equal(sim, real)) {
            printf("specs/%s.yaml differs from fixture %s:\n", machines[i].spec,
                   machines[i].fixture);
            print_diff("", sim, real);
            failed++;
        }
        json_decref(sim);
        json_decref(real);
    }
    assert_int_equal(failed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_match_expected),
        cmocka_unit_test(test_specs_match_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
