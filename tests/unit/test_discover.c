/* hw/registry.c and hw/discover.c: component validation, probes that fail,
 * crash or hang, merging, derived labels/resources, --check warnings and
 * isolation errors. Uses made-up components, not the real backends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture.h"
#include <signal.h>
#include <unistd.h>
#include <sys/stat.h>

static const char *const fake_vars[] = {"FAKE_VISIBLE", NULL};

static int probe_two(const cr_hw_env_t *env, cr_node_t *node)
{
    for (int i = 0; i < 2; i++) {
        cr_device_t *d = cr_node_add_device(node);
        cr_strlcpy(d->backend, "fake", sizeof(d->backend));
        cr_strlcpy(d->resource, "FAKE", sizeof(d->resource));
        cr_strlcpy(d->sku, "F1", sizeof(d->sku));
        snprintf(d->isolation_id, sizeof(d->isolation_id), "f%d", i);
        d->memory = 1ull << 30;
    }
    cr_node_add_link(node, 0, 1, CR_LINK_NVLINK, 4, 25.0);
    cr_domain_t *dom = cr_node_add_domain(node, "nvlink-island", "nvlink0");
    cr_domain_add_member(dom, 0);
    cr_domain_add_member(dom, 1);
    cr_node_set_label(node, "fake.io/kind", "two");
    return 0;
}

static int probe_crash(const cr_hw_env_t *env, cr_node_t *node)
{
    cr_node_add_device(node);
    raise(SIGSEGV);
    return 0;
}

static int probe_hang(const cr_hw_env_t *env, cr_node_t *node)
{
    for (;;)
        pause();
    return 0;
}

static int probe_fail(const cr_hw_env_t *env, cr_node_t *node)
{
    cr_node_add_device(node);
    cr_node_warn(node, "fake: /sys/fake/count: expected a number, found 'x'");
    return CR_EPARSE;
}

static int isolate_fake(const cr_hw_env_t *env, const cr_node_t *node, const int *devs,
                        size_t ndevs, cr_envlist_t *out)
{
    cr_buf_t b = {0};
    cr_buf_append(&b, "", 0);
    for (size_t i = 0; i < ndevs; i++)
        cr_buf_printf(&b, "%s%s", i ? "," : "", node->devices.v[devs[i]].isolation_id);
    int err = cr_envlist_set(out, "FAKE_VISIBLE", b.s);
    cr_buf_free(&b);
    return err;
}

#define FAKE(nm, pr, fl)                                                                           \
    {                                                                                              \
        .abi_version = CR_ACCEL_ABI_VERSION, .name = nm, .resource = "FAKE",                       \
        .isolation_vars = fake_vars, .priority = 1, .flags = fl, .probe = pr,                      \
        .isolate = isolate_fake                                                                    \
    }

static const cr_accel_component_t fake_two = FAKE("fake", probe_two, 0);
static const cr_accel_component_t fake_two_isolated =
    FAKE("fake", probe_two, CR_ACCEL_F_PROBE_ISOLATED);
static const cr_accel_component_t fake_crash =
    FAKE("crashy", probe_crash, CR_ACCEL_F_PROBE_ISOLATED);
static const cr_accel_component_t fake_hang = FAKE("hangs", probe_hang, CR_ACCEL_F_PROBE_ISOLATED);
static const cr_accel_component_t fake_fail = FAKE("fails", probe_fail, 0);

static void test_validate(void **state)
{
    char msg[256];
    assert_int_equal(hw_component_validate(&fake_two, msg, sizeof(msg)), 0);
    cr_accel_component_t c = fake_two;
    c.abi_version = 99;
    assert_int_equal(hw_component_validate(&c, msg, sizeof(msg)), CR_EABI);
    assert_non_null(strstr(msg, "ABI version 99"));
    c = fake_two;
    c.isolate = NULL;
    assert_int_equal(hw_component_validate(&c, msg, sizeof(msg)), CR_EINVAL);
    assert_non_null(strstr(msg, "'isolate'"));
    c = fake_two;
    c.probe = NULL;
    assert_int_equal(hw_component_validate(&c, msg, sizeof(msg)), CR_EINVAL);
    assert_non_null(strstr(msg, "'probe'"));
    c = fake_two;
    c.name = "a-name-far-too-long-for-a-backend";
    assert_int_equal(hw_component_validate(&c, msg, sizeof(msg)), CR_EINVAL);
    c = fake_two;
    c.isolation_vars = NULL;
    assert_int_equal(hw_component_validate(&c, msg, sizeof(msg)), CR_EINVAL);
}

static void test_builtins_registered(void **state)
{
    static const char *names[] = {"nvidia", "amd", "intel", "tpu", "neuron", "gaudi", "sim"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(names); i++) {
        const cr_accel_component_t *c = hw_component_find(names[i]);
        assert_non_null(c);
        char msg[256];
        assert_int_equal(hw_component_validate(c, msg, sizeof(msg)), 0);
    }
    const cr_accel_component_t *const *cs;
    size_t n = hw_components(&cs);
    assert_true(n >= CR_ARRAY_SIZE(names));
    for (size_t i = 1; i < n; i++)
        assert_true(cs[i - 1]->priority >= cs[i]->priority);
}

static void same_two(const cr_node_t *n)
{
    assert_int_equal(n->devices.n, 2);
    assert_string_equal(n->devices.v[1].isolation_id, "f1");
    assert_int_equal(n->links.n, 1);
    assert_int_equal(n->links.v[0].count, 4);
    assert_int_equal(n->domains.n, 1);
    assert_int_equal(n->domains.v[0].nmembers, 2);
    assert_string_equal(cr_node_get_label(n, "fake.io/kind"), "two");
}

static void test_probe_in_process_and_isolated(void **state)
{
    cr_hw_env_t env = {.root = "/"};
    cr_node_t *n = NULL;
    char why[256];
    assert_int_equal(hw_probe_component(&fake_two, &env, &n, why, sizeof(why)), 0);
    same_two(n);
    hw_node_free(n);
    /* the isolated probe ships the node back through JSON: same result */
    assert_int_equal(hw_probe_component(&fake_two_isolated, &env, &n, why, sizeof(why)), 0);
    same_two(n);
    hw_node_free(n);
}

static void test_probe_crash_is_contained(void **state)
{
    cr_hw_env_t env = {.root = "/"};
    cr_node_t *n = (cr_node_t *)0x1;
    char why[256];
    assert_int_equal(hw_probe_component(&fake_crash, &env, &n, why, sizeof(why)), CR_ECRASH);
    assert_null(n);
    assert_non_null(strstr(why, "crashed"));
    assert_non_null(strstr(why, "signal 11"));
}

static const char *short_timeout(void *ctx, const char *name)
{
    return strcmp(name, "CORRAL_PROBE_TIMEOUT_MS") == 0 ? "300" : NULL;
}

static void test_probe_hang_is_killed(void **state)
{
    cr_hw_env_t env = {.root = "/", .getenv = short_timeout};
    cr_node_t *n = NULL;
    char why[256];
    assert_int_equal(hw_probe_component(&fake_hang, &env, &n, why, sizeof(why)), CR_ECRASH);
    assert_null(n);
    assert_non_null(strstr(why, "did not finish in 300 ms"));
}

static void test_probe_failure_says_why(void **state)
{
    cr_hw_env_t env = {.root = "/"};
    cr_node_t *n = NULL;
    char why[256];
    assert_int_equal(hw_probe_component(&fake_fail, &env, &n, why, sizeof(why)), CR_EPARSE);
    assert_null(n);
    assert_non_null(strstr(why, "/sys/fake/count"));
}

static void test_merge_renumbers(void **state)
{
    cr_hw_env_t env = {.root = "/"};
    cr_node_t *node = hw_node_new(), *a, *b;
    char why[256];
    assert_int_equal(hw_probe_component(&fake_two, &env, &a, why, sizeof(why)), 0);
    assert_int_equal(hw_probe_component(&fake_two, &env, &b, why, sizeof(why)), 0);
    b->devices.v[1].parent = 0;
    hw_node_merge(node, a);
    hw_node_merge(node, b);
    hw_node_free(a);
    hw_node_free(b);
    assert_int_equal(node->devices.n, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(node->devices.v[i].index, i);
    assert_int_equal(node->devices.v[3].parent, 2);
    assert_int_equal(node->links.n, 2);
    assert_int_equal(node->links.v[1].a, 2);
    assert_int_equal(node->links.v[1].b, 3);
    assert_int_equal(node->domains.v[1].members[0], 2);
    assert_int_equal(node->domains.v[1].members[1], 3);
    assert_non_null(hw_node_find_link(node, 3, 2));
    assert_null(hw_node_find_link(node, 1, 2));
    hw_node_free(node);
}

static void test_links_validated(void **state)
{
    cr_node_t *n = hw_node_new();
    cr_node_add_device(n);
    cr_node_add_device(n);
    assert_int_equal(cr_node_add_link(n, 0, 0, CR_LINK_NVLINK, 1, 0), CR_EINVAL);
    assert_int_equal(cr_node_add_link(n, 0, 2, CR_LINK_NVLINK, 1, 0), CR_EINVAL);
    assert_int_equal(cr_node_add_link(n, 0, 1, CR_LINK_KIND_COUNT, 1, 0), CR_EINVAL);
    assert_int_equal(cr_node_add_link(n, 1, 0, CR_LINK_XGMI, 1, 0), 0);
    assert_int_equal(n->links.v[0].a, 0);
    hw_node_free(n);
}

static void test_discover_empty_root(void **state)
{
    char dir[] = "/tmp/corral-empty-XXXXXX";
    assert_non_null(mkdtemp(dir));
    fixture_env_t f = {0};
    fixture_setenv(&f, "CORRAL_NODE_ID", "n1");
    hw_options_t o = {.root = dir,
                      .getenv = fixture_getenv,
                      .getenv_ctx = &f,
                      .no_host = true,
                      .no_plugins = true};
    cr_node_t *node = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &node, &msg), 0);
    assert_null(msg);
    assert_int_equal(node->devices.n, 0);
    assert_string_equal(node->id, "n1");
    assert_string_equal(cr_node_get_label(node, "corral.io/node-id"), "n1");
    assert_null(cr_node_get_label(node, "corral.io/accelerator-type"));
    /* isolation with no device on a node without accelerators sets nothing */
    cr_envlist_t env = {0};
    assert_int_equal(hw_isolate(&o, node, NULL, 0, &env, &msg), 0);
    assert_int_equal(env.vars.n, 0);
    int bad = 0;
    assert_int_equal(hw_isolate(&o, node, &bad, 1, &env, &msg), CR_ENODEV);
    assert_non_null(strstr(msg, "no accelerators"));
    free(msg);
    hw_node_free(node);
    fixture_close(&f);
    rmdir(dir);
}

static volatile sig_atomic_t children;
static void count_child(int sig)
{
    children++;
}

static void write_under(const char *root, const char *rel, const char *text)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        mkdir(p, 0755);
        *s = '/';
    }
    if (text) {
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
    } else {
        mkdir(p, 0755);
    }
}

/* The nvidia backend's presence check (issue 18): a root with no driver,
 * no NVIDIA PCI function and no CORRAL_NVML_LIBRARY has nothing to probe,
 * so the registry forks no child for its isolated probe (no SIGCHLD) and
 * returns an empty node; each of the three signs is enough to probe. */
static void test_nvidia_absent_forks_nothing(void **state)
{
    char dir[] = "/tmp/corral-nonv-XXXXXX";
    assert_non_null(mkdtemp(dir));
    /* a PCI function of another vendor */
    write_under(dir, "sys/bus/pci/devices/0000:03:00.0/vendor", "0x8086\n");
    fixture_env_t f = {0};
    cr_hw_env_t env = {.root = dir, .getenv = fixture_getenv, .getenv_ctx = &f};
    assert_false(hw_nvidia_present(&env));
    struct sigaction sa = {.sa_handler = count_child}, old;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGCHLD, &sa, &old), 0);
    children = 0;
    cr_node_t *n = NULL;
    char why[256];
    assert_int_equal(hw_probe_component(&hw_backend_nvidia, &env, &n, why, sizeof(why)), 0);
    assert_non_null(n);
    assert_int_equal(n->devices.n, 0);
    hw_node_free(n);
    assert_int_equal(children, 0);
    /* an isolated probe does fork (the counter can count) */
    assert_int_equal(hw_probe_component(&fake_two_isolated, &env, &n, why, sizeof(why)), 0);
    hw_node_free(n);
    assert_true(children > 0);
    sigaction(SIGCHLD, &old, NULL);

    fixture_setenv(&f, "CORRAL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
    assert_true(hw_nvidia_present(&env));
    fixture_close(&f);
    f = (fixture_env_t){0};
    env.getenv_ctx = &f;
    write_under(dir, "sys/bus/pci/devices/0000:04:00.0/vendor", "0x10de\n");
    assert_true(hw_nvidia_present(&env));
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s/sys", dir);
    assert_int_equal(system(cmd), 0);
    assert_false(hw_nvidia_present(&env));
    write_under(dir, "proc/driver/nvidia", NULL);
    assert_true(hw_nvidia_present(&env));
    snprintf(cmd, sizeof(cmd), "rm -rf %s/proc", dir);
    assert_int_equal(system(cmd), 0);
    write_under(dir, "dev/nvidiactl", "");
    assert_true(hw_nvidia_present(&env));
    fixture_close(&f);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_discover_bad_root(void **state)
{
    hw_options_t o = {.root = "/nonexistent/corral-root", .no_host = true, .no_plugins = true};
    cr_node_t *node = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &node, &msg), CR_ENOENT);
    assert_null(node);
    assert_non_null(strstr(msg, "CORRAL_SYSFS_ROOT"));
    free(msg);
}

static void write_file(const char *dir, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    for (char *p = path + strlen(dir) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_platform(void **state)
{
    char dir[] = "/tmp/corral-plat-XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_file(dir, "sys/class/dmi/id/sys_vendor", "Amazon EC2\n");
    write_file(dir, "sys/class/dmi/id/product_name", "trn1.32xlarge\n");
    fixture_env_t f = {0};
    fixture_setenv(&f, "CORRAL_ZONE", "us-east-1a");
    fixture_setenv(&f, "CORRAL_MARKET", "spot");
    hw_options_t o = {.root = dir,
                      .getenv = fixture_getenv,
                      .getenv_ctx = &f,
                      .no_host = true,
                      .no_plugins = true};
    cr_node_t *node = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &node, &msg), 0);
    assert_string_equal(node->platform.provider, "aws");
    assert_string_equal(node->platform.instance_type, "trn1.32xlarge");
    assert_string_equal(node->platform.region, "us-east-1");
    assert_string_equal(cr_node_get_label(node, "corral.io/provider"), "aws");
    assert_string_equal(cr_node_get_label(node, "corral.io/zone"), "us-east-1a");
    assert_string_equal(cr_node_get_label(node, "corral.io/market"), "spot");
    assert_string_equal(cr_node_get_label(node, "corral.io/instance-type"), "trn1.32xlarge");
    hw_node_free(node);
    fixture_close(&f);
    /* a machine that says nothing gets no provider */
    cr_node_t *bare = hw_node_new();
    cr_hw_env_t env = {.root = "/nonexistent", .getenv = fixture_getenv, .getenv_ctx = &f};
    hw_platform_probe(&env, bare);
    assert_string_equal(bare->platform.provider, "");
    hw_node_free(bare);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* --check: an isolation variable in corral's own environment, MIG on and
 * unhealthy devices each become one warning line */
static void test_check_warnings(void **state)
{
    char spec[1200];
    snprintf(spec, sizeof(spec), "%s/specs/dgx-h100.yaml", CORRAL_SOURCE_DIR);
    fixture_env_t f = {0};
    hw_options_t o = {
        .spec_path = spec, .getenv = fixture_getenv, .getenv_ctx = &f, .no_plugins = true};
    cr_node_t *node = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &node, &msg), 0);
    assert_int_equal(node->warnings.n, 0);
    hw_node_free(node);
    fixture_setenv(&f, "CUDA_VISIBLE_DEVICES", "3");
    assert_int_equal(hw_discover(&o, &node, &msg), 0);
    assert_int_equal(node->warnings.n, 1);
    assert_non_null(strstr(node->warnings.v[0], "CUDA_VISIBLE_DEVICES=3 is set in corral's own"));
    hw_node_free(node);
    fixture_close(&f);

    /* the same node with MIG on one GPU and another unhealthy */
    cr_node_t *n = hw_node_new();
    for (int i = 0; i < 3; i++) {
        cr_device_t *d = cr_node_add_device(n);
        cr_strlcpy(d->backend, "nvidia", sizeof(d->backend));
        cr_strlcpy(d->resource, "GPU", sizeof(d->resource));
        cr_strlcpy(d->sku, "H100", sizeof(d->sku));
        d->health = CR_HEALTH_OK;
    }
    n->devices.v[0].mig_enabled = true;
    n->devices.v[2].parent = 0;
    cr_strlcpy(n->devices.v[2].mig_profile, "1g.10gb", sizeof(n->devices.v[2].mig_profile));
    n->devices.v[1].health = CR_HEALTH_UNHEALTHY;
    cr_strlcpy(n->devices.v[1].health_reason, "uncorrected ECC errors",
               sizeof(n->devices.v[1].health_reason));
    json_t *j = hw_node_to_json(n);
    hw_node_free(n);
    char path[] = "/tmp/corral-check-XXXXXX.json";
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(j, path, 0), 0);
    json_decref(j);
    o.spec_path = path;
    assert_int_equal(hw_discover(&o, &node, &msg), 0);
    unlink(path);
    assert_int_equal(node->warnings.n, 2);
    assert_non_null(strstr(node->warnings.v[0], "device 0 (H100) has MIG mode on"));
    assert_non_null(strstr(node->warnings.v[1], "device 1 (H100) is unhealthy: uncorrected ECC"));
    /* the MIG parent and the unhealthy GPU are not schedulable: one GPU */
    for (size_t i = 0; i < node->resources.n; i++)
        if (strcmp(node->resources.v[i].name, "GPU") == 0)
            assert_int_equal(node->resources.v[i].amount, 1 * CR_QTY_ONE);
    hw_node_free(node);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_builtins_registered),
        cmocka_unit_test(test_probe_in_process_and_isolated),
        cmocka_unit_test(test_probe_crash_is_contained),
        cmocka_unit_test(test_probe_hang_is_killed),
        cmocka_unit_test(test_probe_failure_says_why),
        cmocka_unit_test(test_merge_renumbers),
        cmocka_unit_test(test_links_validated),
        cmocka_unit_test(test_discover_empty_root),
        cmocka_unit_test(test_discover_bad_root),
        cmocka_unit_test(test_nvidia_absent_forks_nothing),
        cmocka_unit_test(test_platform),
        cmocka_unit_test(test_check_warnings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
