/* hw/spec.c and the sim backend: YAML and JSON specs load to the same node,
 * scalars and sizes read as a person means them, and every error names the
 * file, line and column to fix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture.h"
#include <sys/stat.h>

#define SPECS CORRAL_SOURCE_DIR "/tests/fixtures/specs/"

static char *node_dump(const cr_node_t *n)
{
    json_t *j = hw_node_to_json(n);
    char *s = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(j);
    return s;
}

static cr_node_t *load_ok(const char *path)
{
    cr_node_t *n = hw_node_new();
    char *msg = NULL;
    int err = hw_spec_load(path, n, &msg);
    if (err)
        fail_msg("%s: %s", path, msg ? msg : "(no message)");
    assert_null(msg);
    return n;
}

/* Loads a buffer expected to fail; returns the message (caller frees). */
static char *load_buf_err(const char *name, const char *text)
{
    cr_node_t *n = hw_node_new();
    char *msg = NULL;
    int err = hw_spec_load_buffer(name, text, strlen(text), n, &msg);
    hw_node_free(n);
    assert_true(err < 0);
    assert_non_null(msg);
    return msg;
}

static cr_node_t *load_buf_ok(const char *text)
{
    cr_node_t *n = hw_node_new();
    char *msg = NULL;
    int err = hw_spec_load_buffer("t.yaml", text, strlen(text), n, &msg);
    if (err)
        fail_msg("%s", msg ? msg : "(no message)");
    return n;
}

static void test_yaml_and_json_same_node(void **state)
{
    cr_node_t *y = load_ok(SPECS "good.yaml"), *j = load_ok(SPECS "good.json");
    char *ys = node_dump(y), *js = node_dump(j);
    assert_string_equal(ys, js);
    /* and the node is the one written down, not merely the same garbage */
    assert_string_equal(y->id, "sim-h100-01");
    assert_int_equal(y->devices.n, 3);
    assert_string_equal(y->devices.v[1].uuid, "GPU-00000000-0000-0000-0000-000000000001");
    assert_string_equal(y->devices.v[1].sku, "H100"); /* from the merge key */
    assert_int_equal(y->devices.v[1].numa, 1);
    assert_int_equal(y->devices.v[0].memory, 81559ull << 20);
    assert_int_equal(y->devices.v[0].pci_vendor, 0x10de);
    assert_int_equal(y->devices.v[0].pci_device, 0x2330);
    assert_string_equal(y->devices.v[0].compute_capability, "9.0");
    assert_string_equal(y->devices.v[0].isolation_id, "0");
    assert_int_equal(y->devices.v[0].health, CR_HEALTH_OK);
    assert_int_equal(y->devices.v[2].memory, 1610612736ull);
    assert_int_equal(y->devices.v[2].numa, -1);
    assert_int_equal(y->numa.n, 2);
    assert_int_equal(y->numa.v[1].id, 1);
    assert_int_equal(y->numa.v[1].memory, 1ull << 40);
    assert_int_equal(y->memory, 2ull << 40);
    assert_int_equal(y->links.n, 1);
    assert_int_equal(y->links.v[0].count, 18);
    assert_int_equal(y->links.v[0].kind, CR_LINK_NVLINK);
    assert_int_equal(y->domains.n, 1);
    assert_int_equal(y->domains.v[0].nmembers, 2);
    assert_int_equal(y->nics.n, 2);
    assert_true(y->nics.v[0].rdma);
    assert_int_equal(y->nics.v[1].numa, 0);
    assert_string_equal(y->addresses.v[1], "fd00::5");
    assert_string_equal(cr_node_get_label(y, "corral.io/rack"), "r12");
    assert_int_equal(y->resources.n, 4);
    assert_string_equal(y->resources.v[3].name, "widget");
    assert_int_equal(y->resources.v[3].amount, CR_QTY_ONE / 2);
    assert_int_equal(y->resources.v[1].amount, (int64_t)(2ll << 40) * CR_QTY_ONE);
    assert_false(y->simulated); /* the loader describes; the sim backend marks */
    free(ys);
    free(js);
    hw_node_free(y);
    hw_node_free(j);
}

static void test_sizes(void **state)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } cases[] = {
        {"memory: 80Gi", 80ull << 30}, {"memory: 512MiB", 512ull << 20},
        {"memory: 1.5Ti", 3ull << 39}, {"memory: 2T", 2000000000000ull},
        {"memory: 1024", 1024},        {"memory: \"4096\"", 4096},
        {"memory: 0x100000", 1048576}, {"memory: 64 GiB", 64ull << 30},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(cases); i++) {
        cr_node_t *n = load_buf_ok(cases[i].text);
        if (n->memory != cases[i].bytes)
            fail_msg("'%s' gave %llu bytes", cases[i].text, (unsigned long long)n->memory);
        hw_node_free(n);
    }
}

/* Plain scalars are typed by YAML's core schema; quoted ones stay text. */
static void test_scalars(void **state)
{
    cr_node_t *n = load_buf_ok("labels: {a: \"8\", b: '~', c: !!str 12, d: \"true\"}\n"
                               "simulated: true\n"
                               "cpu: {sockets: +2, cores: 0o10}\n");
    assert_string_equal(cr_node_get_label(n, "a"), "8");
    assert_string_equal(cr_node_get_label(n, "b"), "~");
    assert_string_equal(cr_node_get_label(n, "c"), "12");
    assert_string_equal(cr_node_get_label(n, "d"), "true");
    assert_true(n->simulated);
    assert_int_equal(n->cpu.sockets, 2);
    assert_int_equal(n->cpu.cores, 8);
    hw_node_free(n);
    /* single-quoted scalars: '' is a quote, line breaks fold (decoded by
     * spec.c itself: libfyaml 0.7.12 leaks on many '') */
    n = load_buf_ok("labels:\n"
                    "  a: 'it''s'\n"
                    "  b: ''''''''''''''''''''' x'\n"
                    "  c: 'x \n     y'\n"
                    "  d: 'x\n\n\n    y '\n"
                    "  e: ''\n"
                    "  f: '  lead'\n");
    assert_string_equal(cr_node_get_label(n, "a"), "it's");
    assert_string_equal(cr_node_get_label(n, "b"), "'''''''''' x");
    assert_string_equal(cr_node_get_label(n, "c"), "x y");
    assert_string_equal(cr_node_get_label(n, "d"), "x\n\ny ");
    assert_string_equal(cr_node_get_label(n, "e"), "");
    assert_string_equal(cr_node_get_label(n, "f"), "  lead");
    hw_node_free(n);
    /* 1e1 is a float: not a whole number */
    char *m = load_buf_err("t.yaml", "cpu: {threads: 1e1}\n");
    assert_string_equal(m, "t.yaml:1:16: cpu.threads: expected a whole number of at least 0");
    free(m);
    /* null (an empty value) is not a string */
    m = load_buf_err("t.yaml", "id:\nhostname: h\n");
    assert_string_equal(m, "t.yaml:1:1: id: expected a string of at most 63 characters");
    free(m);
    /* too large for 64 bits is still a number, out of range */
    m = load_buf_err("t.yaml", "memory: 99999999999999999999999\n");
    assert_non_null(strstr(m, "t.yaml:1:9: memory: expected a whole number"));
    free(m);
}

/* Each bad fixture fails with exactly this message start. */
static void test_error_positions(void **state)
{
    static const struct {
        const char *file;
        const char *want; /* after "<dir>/": FILE:LINE:COL: and the start of the message */
    } cases[] = {
        {"bad-size.yaml", "bad-size.yaml:7:13: devices[1].memory: expected a size such as 80Gi, "
                          "512MiB or a number of bytes, found 'lots'"},
        {"bad-unknown-field.yaml",
         "bad-unknown-field.yaml:4:5: nics[0].sped_mbps: unknown field 'sped_mbps'; expected one "
         "of: name, pci, pci_path, numa, speed_mbps, rdma, rdma_device"},
        {"bad-syntax.yaml", "bad-syntax.yaml:5:1: YAML syntax error: "},
        {"bad-syntax.json", "bad-syntax.json:3:19: JSON syntax error: "},
        {"bad-duplicate.yaml", "bad-duplicate.yaml:4:1: duplicate key 'hostname' (first written "
                               "at line 2, column 1)"},
        {"bad-link.yaml", "bad-link.yaml:6:5: links[1]: a and b must be two different device "
                          "indices below 2"},
        {"bad-link-kind.yaml", "bad-link-kind.yaml:7:11: links[0].kind: expected a link kind: "
                               "one of nvlink, nvswitch,"},
        {"bad-domain-member.yaml", "bad-domain-member.yaml:6:18: domains[0].members[1]: expected "
                                   "a device index below 1"},
        {"bad-domain-nokind.yaml", "bad-domain-nokind.yaml:4:5: domains[0]: a domain needs a "
                                   "kind"},
        {"bad-type.json", "bad-type.json:3:48: cpu.cores: expected a whole number"},
        {"bad-label.yaml", "bad-label.yaml:2:24: labels.corral.io/gpu.count: a label value must "
                           "be a string"},
        {"bad-alias.yaml", "bad-alias.yaml:2:5: alias *gpu names no anchor (&gpu) written "
                           "before it"},
        {"bad-root.yaml", "bad-root.yaml:1:1: a hardware spec must be a mapping of node fields"},
        {"bad-two-docs.yaml", "bad-two-docs.yaml:2:1: a spec holds one node: a second document"},
        {"bad-cpulist.yaml", "bad-cpulist.yaml:4:13: cpu.numa_nodes[1].cpus: malformed cpulist "
                             "'4-x' at offset 2"},
        {"bad-capability.yaml", "bad-capability.yaml:3:25: devices[0].compute_capability: "
                                "expected a string, found a number; write it in quotes: \"9.0\""},
        {"bad-merge.yaml", "bad-merge.yaml:2:9: a merge key (<<) takes a mapping or a list of "
                           "mappings"},
        {"empty.yaml", "empty.yaml:1:1: the spec is empty; expected a mapping of node fields"},
        {"comment-only.yaml", "comment-only.yaml:1:1: the spec is empty"},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(cases); i++) {
        char path[1024];
        snprintf(path, sizeof(path), SPECS "%s", cases[i].file);
        cr_node_t *n = hw_node_new();
        char *msg = NULL;
        int err = hw_spec_load(path, n, &msg);
        hw_node_free(n);
        if (err >= 0 || !msg)
            fail_msg("%s loaded, but it is bad", cases[i].file);
        const char *rel = msg;
        if (cr_str_has_prefix(msg, SPECS))
            rel = msg + strlen(SPECS);
        if (strncmp(rel, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("%s:\n  got  '%s'\n  want '%s...'", cases[i].file, rel, cases[i].want);
        free(msg);
    }
}

static void test_buffer_errors(void **state)
{
    char *m = load_buf_err("x.yaml", "a: [1,\n");
    assert_true(cr_str_has_prefix(m, "x.yaml:2:1: YAML syntax error: "));
    free(m);
    m = load_buf_err("x.yaml", "42\n");
    assert_string_equal(m, "x.yaml:1:1: a hardware spec must be a mapping of node fields (id, "
                           "hostname, cpu, memory, devices, ...), found a number");
    free(m);
    m = load_buf_err("x.yaml", "---\n...\n");
    assert_true(cr_str_has_prefix(m, "x.yaml:1:1: the spec is empty"));
    free(m);
    m = load_buf_err("x.yaml", "id: a\n{b: 1}: 2\n");
    assert_true(cr_str_has_prefix(m, "x.yaml:2:1: a key must be a plain string, not a mapping"));
    free(m);
    m = load_buf_err("x.yaml", "a: &x [1]\nb: {*x : 1}\n");
    assert_true(cr_str_has_prefix(m, "x.yaml:2:5: an alias (*x) cannot be a key"));
    free(m);
    /* an anchor refers to something written before: no cycles */
    m = load_buf_err("x.yaml", "a: &x [*x]\n");
    assert_true(cr_str_has_prefix(m, "x.yaml:1:8: alias *x names no anchor"));
    free(m);
    /* deep nesting stops early, with the place it went too deep */
    cr_buf_t b = {0};
    cr_buf_printf(&b, "a: ");
    for (int i = 0; i < 200; i++)
        cr_buf_printf(&b, "[");
    m = load_buf_err("x.yaml", b.s);
    assert_true(cr_str_has_prefix(m, "x.yaml:1:67: nested deeper than 64 levels"));
    free(m);
    cr_buf_free(&b);
    /* too large, refused before parsing */
    size_t big = (8u << 20) + 1;
    char *data = cr_malloc(big);
    memset(data, ' ', big);
    cr_node_t *n = hw_node_new();
    assert_int_equal(hw_spec_load_buffer("big.yaml", data, big, n, &m), CR_E2BIG);
    assert_true(cr_str_has_prefix(m, "big.yaml: 8388609 bytes is too large"));
    free(m);
    hw_node_free(n);
    free(data);
    /* not UTF-8: refused before libfyaml sees it (0.7.12 looped forever on
     * this one, found by fuzz_spec) */
    m = load_buf_err("x.yaml", "% b\xed");
    assert_string_equal(m, "x.yaml:1:4: not UTF-8 text (byte 0xed); a spec is a YAML or JSON "
                           "text file");
    free(m);
    m = load_buf_err("x.yaml", "id: n\nhostname: \xc3\xa9\xc0\x80\n");
    assert_true(cr_str_has_prefix(m, "x.yaml:2:12: not UTF-8 text (byte 0xc0)"));
    free(m);
    m = load_buf_err("x.yaml", "id: n\x01\n");
    assert_string_equal(m, "x.yaml:1:6: control character 0x01; a spec may hold tabs and line "
                           "breaks, but no other control characters");
    free(m);
    m = load_buf_err("x.yaml", "id: \"a\\0b\"\n");
    assert_string_equal(m, "x.yaml:1:5: a value must not contain a NUL character");
    free(m);
    /* the error pointer may be NULL */
    n = hw_node_new();
    assert_int_equal(hw_spec_load_buffer("x.yaml", "- 1", 3, n, NULL), CR_EPARSE);
    hw_node_free(n);
}

static void test_file_errors(void **state)
{
    cr_node_t *n = hw_node_new();
    char *m = NULL;
    assert_int_equal(hw_spec_load("/nonexistent/spec.yaml", n, &m), -ENOENT);
    assert_string_equal(m, "cannot read /nonexistent/spec.yaml: No such file or directory");
    free(m);
    assert_int_equal(hw_spec_load(SPECS, n, &m), -EISDIR);
    assert_true(strstr(m, ": Is a directory") != NULL);
    free(m);
    hw_node_free(n);
}

/* Every key a merge brought in is still found at its place in the file. */
static void test_merge_positions(void **state)
{
    char *m = load_buf_err("x.yaml", "base: &b\n"
                                     "  memory: lots\n"
                                     "devices:\n"
                                     "  - <<: *b\n");
    /* "base" is no node field: that is the first error */
    assert_true(cr_str_has_prefix(m, "x.yaml:1:1: base: unknown field 'base'"));
    free(m);
    m = load_buf_err("x.yaml", "devices:\n"
                               "  - &g {backend: nvidia, memory: lots}\n");
    assert_true(cr_str_has_prefix(m, "x.yaml:2:34: devices[0].memory"));
    free(m);
    m = load_buf_err("x.yaml", "devices:\n"
                               "  - &g {backend: nvidia}\n"
                               "  - <<: {memory: lots}\n"
                               "    sku: X\n");
    assert_true(cr_str_has_prefix(m, "x.yaml:3:18: devices[1].memory"));
    free(m);
}

static const char *spec_getenv(void *ctx, const char *name)
{
    CR_UNUSED(ctx);
    CR_UNUSED(name);
    return NULL;
}

/* The sim backend through hw_discover: a simulated node, or the loader's
 * message as the reason. */
static void test_sim_backend(void **state)
{
    hw_options_t o = {.spec_path = SPECS "good.yaml", .getenv = spec_getenv, .no_plugins = true};
    cr_node_t *n = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &n, &msg), 0);
    assert_null(msg);
    assert_true(n->simulated);
    assert_string_equal(cr_node_get_label(n, "corral.io/simulated"), "true");
    assert_string_equal(cr_node_get_label(n, "corral.io/node-id"), "sim-h100-01");
    assert_string_equal(n->devices.v[2].backend, "sim");
    assert_string_equal(n->devices.v[0].backend, "nvidia");

    /* the sim component isolates its own devices by isolation id */
    cr_envlist_t env = {0};
    int dev = 2;
    assert_int_equal(hw_backend_sim.isolate(NULL, n, &dev, 1, &env), 0);
    assert_string_equal(cr_envlist_get(&env, "CORRAL_VISIBLE_DEVICES"), "w0");
    cr_envlist_free(&env);
    /* no devices: the variable is set, and empty */
    assert_int_equal(hw_backend_sim.isolate(NULL, n, NULL, 0, &env), 0);
    assert_string_equal(cr_envlist_get(&env, "CORRAL_VISIBLE_DEVICES"), "");
    cr_envlist_free(&env);
    hw_node_free(n);

    o.spec_path = SPECS "bad-size.yaml";
    assert_true(hw_discover(&o, &n, &msg) < 0);
    assert_null(n);
    assert_non_null(strstr(msg, "bad-size.yaml:7:13: devices[1].memory: expected a size"));
    free(msg);
    o.spec_path = SPECS "missing.yaml";
    assert_int_equal(hw_discover(&o, &n, &msg), -ENOENT);
    assert_string_equal(msg, "cannot read " SPECS "missing.yaml: No such file or directory");
    free(msg);
}

/* A spec with only sim devices isolates through hw_isolate end to end; a
 * device without an isolation id is named by its index. */
static void test_sim_isolate(void **state)
{
    char dir[] = "/tmp/corral-spec-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof(path), "%s/npu.yaml", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("id: npu-box\ndevices:\n  - {resource: NPU, isolation_id: a}\n  - {resource: NPU}\n"
          "  - {resource: NPU, isolation_id: c}\n",
          fp);
    fclose(fp);
    hw_options_t o = {.spec_path = path, .getenv = spec_getenv, .no_plugins = true};
    cr_node_t *n = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &n, &msg), 0);
    assert_int_equal(n->resources.n, 1);
    assert_string_equal(n->resources.v[0].name, "NPU");
    assert_int_equal(n->resources.v[0].amount, 3 * CR_QTY_ONE);
    int devs[] = {2, 1};
    cr_envlist_t env = {0};
    assert_int_equal(hw_isolate(&o, n, devs, 2, &env, &msg), 0);
    assert_string_equal(cr_envlist_get(&env, "CORRAL_VISIBLE_DEVICES"), "c,1");
    cr_envlist_free(&env);
    hw_node_free(n);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_yaml_and_json_same_node),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_error_positions),
        cmocka_unit_test(test_buffer_errors),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_merge_positions),
        cmocka_unit_test(test_sim_backend),
        cmocka_unit_test(test_sim_isolate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
