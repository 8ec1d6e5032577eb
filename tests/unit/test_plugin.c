/* External backends (hw/registry.c) with the example plugin
 * (examples/accel_example.c): the good one is loaded from
 * CORRAL_PLUGIN_PATH and probed like a built-in one; the broken variants
 * are refused with the reason; missing entries are skipped.
 *
 * hw_plugins_load runs once per process, so each loader case runs in its
 * own child process; refusal reasons are also checked in process through
 * hw_component_validate on dlopen'ed symbols. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture.h"
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define EXAMPLES CORRAL_BUILD_DIR "/examples"
#define GOOD EXAMPLES "/libcorral_accel_example.so"
#define BADABI EXAMPLES "/libcorral_accel_example_badabi.so"
#define NOISOLATE EXAMPLES "/libcorral_accel_example_noisolate.so"
#define NOSYM EXAMPLES "/libcorral_accel_example_nosym.so"

/* ---- a temporary machine tree with example NPUs ---- */

static void put(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void make_tree(char *root)
{
    assert_non_null(mkdtemp(root));
    /* npu10 sorts after npu2: numbers, not names */
    put(root, "/sys/class/example_npu/npu0/uuid", "NPU-aaaa\n");
    put(root, "/sys/class/example_npu/npu0/memory", "17179869184\n");
    put(root, "/sys/class/example_npu/npu0/numa_node", "0\n");
    put(root, "/sys/class/example_npu/npu0/utilization", "37\n");
    put(root, "/sys/class/example_npu/npu10/uuid", "NPU-cccc\n");
    put(root, "/sys/class/example_npu/npu10/memory", "34359738368\n");
    put(root, "/sys/class/example_npu/npu10/numa_node", "1\n");
    put(root, "/sys/class/example_npu/npu2/uuid", "NPU-bbbb\n");
    put(root, "/sys/class/example_npu/npu2/memory", "17179869184\n");
    /* a broken one: skipped with a warning naming the file */
    put(root, "/sys/class/example_npu/npu3/uuid", "NPU-dddd\n");
    put(root, "/sys/class/example_npu/npu3/memory", "lots\n");
}

static void rm_tree(const char *root)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

static char *slurp(const char *path)
{
    char *s = NULL;
    size_t n;
    if (cr_read_file_alloc("/", path, &s, &n) != 0)
        return cr_strdup("");
    return s;
}

/* ---- in process: the ABI check on each variant's exported struct ---- */

static void test_validate_variants(void **state)
{
    static const struct {
        const char *path;
        int err;
        const char *msg;
    } cases[] = {
        {GOOD, 0, ""},
        {BADABI, CR_EABI,
         "ABI version 4, but this corral speaks version 3; rebuild it against "
         "this corral's <corral/accel.h>"},
        {NOISOLATE, CR_EINVAL, "required member 'isolate' is missing"},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(cases); i++) {
        void *h = dlopen(cases[i].path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            fail_msg("%s: %s (build the examples first)", cases[i].path, dlerror());
        const cr_accel_component_t *c = dlsym(h, CR_ACCEL_COMPONENT_SYMBOL);
        assert_non_null(c);
        char msg[256] = "";
        assert_int_equal(hw_component_validate(c, msg, sizeof(msg)), cases[i].err);
        assert_string_equal(msg, cases[i].msg);
        dlclose(h);
    }
    void *h = dlopen(NOSYM, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    assert_null(dlsym(h, CR_ACCEL_COMPONENT_SYMBOL));
    dlclose(h);

    /* and the checks that need no plugin */
    cr_accel_component_t c = hw_backend_sim;
    char msg[256];
    c.probe = NULL;
    assert_int_equal(hw_component_validate(&c, msg, sizeof(msg)), CR_EINVAL);
    assert_string_equal(msg, "required member 'probe' is missing");
    c = hw_backend_sim;
    c.name = "a-name-far-too-long";
    assert_int_equal(hw_component_validate(&c, msg, sizeof(msg)), CR_EINVAL);
    assert_string_equal(msg, "name 'a-name-far-too-long' is longer than 15 characters");
}

/* ---- in a child: hw_plugins_load with a plugin path ---- */

typedef struct loader_case {
    const char *plugin_path;
    const char *root;
    const char *log;
} loader_case_t;

/* Codes the child exits with: 0 all good, else which check failed. */
enum {
    CHILD_OK = 0,
    CHILD_NO_GOOD = 10,
    CHILD_BAD_LOADED,
    CHILD_DISCOVER,
    CHILD_DEVICES,
    CHILD_ISOLATE,
    CHILD_TELEMETRY,
    CHILD_GOOD_LOADED
};

static int child_full(const loader_case_t *lc)
{
    fixture_env_t f;
    memset(&f, 0, sizeof(f));
    fixture_setenv(&f, "CORRAL_PLUGIN_PATH", lc->plugin_path);
    hw_options_t o = {
        .root = lc->root, .getenv = fixture_getenv, .getenv_ctx = &f, .no_host = true};
    cr_node_t *n = NULL;
    char *msg = NULL;
    if (hw_discover(&o, &n, &msg) != 0)
        return CHILD_DISCOVER;
    const cr_accel_component_t *c = hw_component_find("examplenpu");
    if (!c)
        return CHILD_NO_GOOD;
    if (hw_component_find("npu_badabi") || hw_component_find("npu_noisolate") ||
        hw_component_find("npu_nosym"))
        return CHILD_BAD_LOADED;
    /* npu0, npu2, npu10 in number order; npu3 skipped */
    if (n->devices.n != 3 || strcmp(n->devices.v[0].uuid, "NPU-aaaa") != 0 ||
        strcmp(n->devices.v[1].uuid, "NPU-bbbb") != 0 ||
        strcmp(n->devices.v[2].uuid, "NPU-cccc") != 0 || n->devices.v[2].vendor_index != 10 ||
        n->devices.v[2].memory != 34359738368ull || n->devices.v[2].numa != 1 ||
        n->devices.v[1].numa != -1 || strcmp(n->devices.v[0].backend, "examplenpu") != 0)
        return CHILD_DEVICES;
    bool warned = false, res = false;
    for (size_t i = 0; i < n->warnings.n; i++)
        warned |= strstr(n->warnings.v[i], "/sys/class/example_npu/npu3/memory: expected a number "
                                           "of bytes, found 'lots'") != NULL;
    for (size_t i = 0; i < n->resources.n; i++)
        res |= strcmp(n->resources.v[i].name, "NPU") == 0 &&
               n->resources.v[i].amount == 3 * CR_QTY_ONE;
    if (!warned || !res ||
        strcmp(cr_node_get_label(n, "corral.io/accelerator-type") ?: "", "EXAMPLE-N1") != 0)
        return CHILD_DEVICES;
    int devs[] = {2, 0};
    cr_envlist_t env = {0};
    if (hw_isolate(&o, n, devs, 2, &env, &msg) != 0 ||
        strcmp(cr_envlist_get(&env, "EXAMPLE_VISIBLE_NPUS") ?: "", "10,0") != 0)
        return CHILD_ISOLATE;
    cr_envlist_free(&env);
    cr_hw_env_t he = {.root = lc->root, .getenv = fixture_getenv, .getenv_ctx = &f};
    cr_telemetry_t t;
    if (!c->telemetry || c->telemetry(&he, n, 0, &t) != 0 || t.utilization_pct != 37 ||
        c->telemetry(&he, n, 1, &t) != 0 || t.utilization_pct != -1)
        return CHILD_TELEMETRY;
    hw_node_free(n);
    fixture_close(&f);
    return CHILD_OK;
}

static int child_refused(const loader_case_t *lc)
{
    fixture_env_t f;
    memset(&f, 0, sizeof(f));
    fixture_setenv(&f, "CORRAL_PLUGIN_PATH", lc->plugin_path);
    cr_hw_env_t env = {.root = "/", .getenv = fixture_getenv, .getenv_ctx = &f};
    hw_plugins_load(&env);
    int rc = CHILD_OK;
    if (hw_component_find("examplenpu"))
        rc = CHILD_GOOD_LOADED;
    if (hw_component_find("npu_badabi") || hw_component_find("npu_noisolate") ||
        hw_component_find("npu_nosym"))
        rc = CHILD_BAD_LOADED;
    /* the built-ins are all still there */
    if (!hw_component_find("sim") || !hw_component_find("nvidia"))
        rc = CHILD_NO_GOOD;
    fixture_close(&f);
    return rc;
}

static int run_child(int (*fn)(const loader_case_t *), const loader_case_t *lc)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        cr_log_set_level(CR_LOG_WARN);
        cr_log_set_file(lc->log);
        int rc = fn(lc);
        cr_log_set_file(NULL);
        _exit(rc);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* The good plugin loads and discovers its NPUs; the broken ones in the same
 * directory are refused with their reasons; a missing entry is skipped. */
static void test_load_directory(void **state)
{
    char root[] = "/tmp/corral-npu-XXXXXX";
    make_tree(root);
    char log[1100];
    snprintf(log, sizeof(log), "%s.log", root);
    loader_case_t lc = {.plugin_path = "/nonexistent/plugins:" EXAMPLES, .root = root, .log = log};
    assert_int_equal(run_child(child_full, &lc), CHILD_OK);
    char *text = slurp(log);
    static const char *const want[] = {
        "CORRAL_PLUGIN_PATH entry /nonexistent/plugins does not exist; skipped",
        "backend from " BADABI " refused: ABI version 4, but this corral speaks version 3",
        "backend from " NOISOLATE " refused: required member 'isolate' is missing",
        "backend plugin " NOSYM " refused: it exports no 'corral_accel_component' symbol",
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(want); i++)
        if (!strstr(text, want[i]))
            fail_msg("log lacks '%s'; it holds:\n%s", want[i], text);
    assert_null(strstr(text, "libcorral_accel_example.so refused"));
    free(text);
    unlink(log);
    rm_tree(root);
}

/* Single files on the path: each refused one alone leaves only built-ins;
 * a file that is no shared object is reported and skipped. */
static void test_load_files(void **state)
{
    char dir[] = "/tmp/corral-plug-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char junk[256], log[256], path[1024];
    snprintf(junk, sizeof(junk), "%s/junk.so", dir);
    put(dir, "/junk.so", "not an ELF file\n");
    put(dir, "/README", "ignored: not a .so\n");
    snprintf(log, sizeof(log), "%s/log", dir);
    snprintf(path, sizeof(path), BADABI ":" NOISOLATE ":" NOSYM ":%s", dir);
    loader_case_t lc = {.plugin_path = path, .root = "/", .log = log};
    assert_int_equal(run_child(child_refused, &lc), CHILD_OK);
    char *text = slurp(log);
    assert_non_null(strstr(text, "refused: ABI version 4"));
    assert_non_null(strstr(text, "refused: required member 'isolate' is missing"));
    assert_non_null(strstr(text, "refused: it exports no 'corral_accel_component' symbol"));
    char want[512];
    snprintf(want, sizeof(want), "backend plugin %s not loaded: ", junk);
    if (!strstr(text, want))
        fail_msg("log lacks '%s'; it holds:\n%s", want, text);
    assert_null(strstr(text, "README"));
    free(text);
    unlink(log);
    rm_tree(dir);

    /* the good file alone is loaded, and twice on the path is refused once */
    char log2[] = "/tmp/corral-plug-log-XXXXXX";
    int fd = mkstemp(log2);
    assert_true(fd >= 0);
    close(fd);
    loader_case_t twice = {.plugin_path = GOOD ":" GOOD, .root = "/", .log = log2};
    assert_int_equal(run_child(child_refused, &twice), CHILD_GOOD_LOADED);
    text = slurp(log2);
    assert_non_null(strstr(text, "backend 'examplenpu' from " GOOD
                                 " refused: a backend of that name is already loaded"));
    free(text);
    unlink(log2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_variants),
        cmocka_unit_test(test_load_directory),
        cmocka_unit_test(test_load_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
