/* serve/config.c: the deployment file of `corral serve` (docs/serve.md):
 * the example parses into what the router and the replica manager
 * use; every mistake is placed at FILE:LINE:COL and names the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include "serve/serve.h"

static const char example[] =
    "name: chat\n"
    "models:\n"
    "  - model_id: tiny-chat            # what clients send as \"model\"\n"
    "    model_source: /models/tiny.gguf\n"
    "    engine:\n"
    "      command: [llama-server, -m, \"{model_source}\", --host, \"{host}\", --port, \"{port}\", "
    "-np, \"4\", --metrics]\n"
    "      health: /health\n"
    "      metrics: /metrics\n"
    "    accelerator_type: TPU-V6E\n"
    "    resources_per_replica: {TPU: 4}\n"
    "    replicas: {min: 1, max: 4}\n"
    "    autoscaling: {target_ongoing_requests: 2, upscale_delay_s: 30, downscale_delay_s: 600}\n"
    "    max_ongoing_requests: 8\n"
    "    max_queued_requests: 256\n"
    "router: {host: 127.0.0.1, port: 8000}\n";

static void test_example(void **state)
{
    serve_config_t *c = NULL;
    char *msg = NULL;
    assert_int_equal(serve_config_parse("llm.yaml", example, strlen(example), &c, &msg), 0);
    assert_null(msg);
    assert_string_equal(c->name, "chat");
    assert_int_equal(c->models.n, 1);
    const serve_model_t *m = serve_config_model(c, "tiny-chat");
    assert_non_null(m);
    assert_null(serve_config_model(c, "other"));
    assert_string_equal(m->model_source, "/models/tiny.gguf");
    assert_int_equal(m->ncommand, 10);
    assert_string_equal(m->command[0], "llama-server");
    assert_string_equal(m->command[2], "{model_source}");
    assert_null(m->command[10]);
    assert_string_equal(m->health, "/health");
    assert_string_equal(m->metrics, "/metrics");
    assert_string_equal(m->accelerator_type, "TPU-V6E");
    assert_string_equal(m->resources, "TPU=4");
    assert_int_equal(m->min_replicas, 1);
    assert_int_equal(m->max_replicas, 4);
    assert_int_equal(m->initial_replicas, 1);
    assert_true(m->target_ongoing_requests == 2);
    assert_true(m->upscale_delay_s == 30 && m->downscale_delay_s == 600);
    assert_int_equal(m->max_ongoing_requests, 8);
    assert_int_equal(m->max_queued_requests, 256);
    assert_string_equal(c->router_host, "127.0.0.1");
    assert_int_equal(c->router_port, 8000);
    char *s = serve_subst("x{model_source}:{host}:{port}{other}", "/m", "10.0.0.1", "41000");
    assert_string_equal(s, "x/m:10.0.0.1:41000{other}");
    free(s);
    serve_config_free(c);
}

/* text with one change; the error must start with want */
static void expect_error(const char *from, const char *to, const char *want)
{
    char buf[4096];
    const char *at = strstr(example, from);
    assert_non_null(at);
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - example), example, to, at + strlen(from));
    serve_config_t *c = NULL;
    char *msg = NULL;
    int err = serve_config_parse("llm.yaml", buf, strlen(buf), &c, &msg);
    if (err == 0 || !msg || strncmp(msg, want, strlen(want)) != 0)
        fail_msg("'%s' -> '%s': got %d '%s', want '%s...'", from, to, err, msg ? msg : "", want);
    assert_null(c);
    free(msg);
}

static void test_errors(void **state)
{
    expect_error("max_ongoing_requests: 8", "max_ongoing_requests: 0",
                 "llm.yaml:13:27: models[0].max_ongoing_requests: expected 1 to 100000");
    expect_error("max_ongoing_requests: 8", "max_ongoing_request: 8",
                 "llm.yaml:13:5: models[0].max_ongoing_request: unknown field");
    expect_error("{min: 1, max: 4}", "{min: 3, max: 2}",
                 "llm.yaml:11:15: models[0].replicas: max (2)");
    expect_error("{TPU: 4}", "{TPU: -1}",
                 "llm.yaml:10:34: models[0].resources_per_replica.TPU: "
                 "expected a positive amount");
    expect_error("\"{port}\"", "\"8080\"",
                 "llm.yaml:6:16: models[0].engine.command: no word holds {port}");
    expect_error("port: 8000", "port: 70000", "llm.yaml:15:33: router.port: expected 0 to 65535");
    expect_error("name: chat\n", "", "llm.yaml:1:1: missing 'name:'");
    expect_error("model_id: tiny-chat", "model_id: [a]",
                 "llm.yaml:3:15: models[0].model_id: expected text");
    expect_error("max_queued_requests: 256\n",
                 "max_queued_requests: 256\n    request_router: {policy: nearest}\n",
                 "llm.yaml:15:30: models[0].request_router.policy: unknown policy 'nearest'");
    expect_error("max_queued_requests: 256\n",
                 "max_queued_requests: 256\n    request_router: {match_rate_threshold: 2}\n",
                 "llm.yaml:15:44: models[0].request_router.match_rate_threshold: expected 0 to 1");
    expect_error("port: 8000}", "port: 8000, upstream_keepalive: -1}",
                 "llm.yaml:15:59: router.upstream_keepalive: expected 0 to 64");
    expect_error("upscale_delay_s: 30", "upscale_delay_s: x",
                 "llm.yaml:12:64: models[0].autoscaling.upscale_delay_s: expected a number");
    expect_error("      health: /health\n", "      health: health\n",
                 "llm.yaml:7:15: models[0].engine.health: expected a path");
}

static void test_request_router(void **state)
{
    (void)state;
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s",
             "name: c\nmodels:\n  - model_id: m\n    engine: {command: [e, \"{port}\"]}\n"
             "    request_router: {policy: prefix_affinity, imbalanced_threshold: 2}\n"
             "router: {upstream_keepalive: 0}\n");
    serve_config_t *c = NULL;
    char *msg = NULL;
    assert_int_equal(serve_config_parse("x.yaml", buf, strlen(buf), &c, &msg), 0);
    assert_true(c->models.v[0].prefix_affinity);
    assert_int_equal(c->models.v[0].imbalanced_threshold, 2);
    assert_true(c->models.v[0].match_rate_threshold == 0.1);
    assert_int_equal(c->upstream_keepalive, 0);
    serve_config_free(c);
    /* the defaults: power of two choices, 16 kept connections per replica */
    snprintf(buf, sizeof(buf), "%s",
             "name: c\nmodels:\n  - model_id: m\n    engine: {command: [e, \"{port}\"]}\n");
    assert_int_equal(serve_config_parse("x.yaml", buf, strlen(buf), &c, &msg), 0);
    assert_false(c->models.v[0].prefix_affinity);
    assert_int_equal(c->upstream_keepalive, 16);
    serve_config_free(c);
}

static void test_defaults_and_placement(void **state)
{
    const char *y = "name: x\n"
                    "models:\n"
                    "  - model_id: a\n"
                    "    engine: {command: [srv, \"{port}\"]}\n"
                    "  - model_id: b\n"
                    "    engine: {command: [srv, --port, \"{port}\"]}\n"
                    "    placement: {bundles: [{TPU: 4}, {TPU: 4}], strategy: STRICT_SPREAD, "
                    "topology: 4x4}\n"
                    "    replicas: {min: 0, max: 2}\n";
    serve_config_t *c = NULL;
    char *msg = NULL;
    assert_int_equal(serve_config_parse("x.yaml", y, strlen(y), &c, &msg), 0);
    const serve_model_t *a = &c->models.v[0], *b = &c->models.v[1];
    assert_string_equal(a->resources, "CPU=1");
    assert_string_equal(a->health, "/health");
    assert_int_equal(a->min_replicas, 1);
    assert_int_equal(a->max_ongoing_requests, 8);
    assert_string_equal(c->router_host, "127.0.0.1");
    assert_int_equal(c->router_port, 8000);
    assert_int_equal(b->bundles.n, 2);
    assert_string_equal(b->strategy, "STRICT_SPREAD");
    assert_string_equal(b->topology, "4x4");
    assert_int_equal(b->min_replicas, 0);
    assert_int_equal(b->initial_replicas, 0);
    serve_config_free(c);
    const char *mixed =
        "name: x\nmodels:\n  - model_id: a\n    engine: {command: [s, \"{port}\"]}\n"
        "    placement: {bundles: [{GPU: 1}, {GPU: 2}]}\n";
    assert_int_not_equal(serve_config_parse("m.yaml", mixed, strlen(mixed), &c, &msg), 0);
    assert_non_null(strstr(msg, "m.yaml:5:37: models[0].placement.bundles[1]: every bundle"));
    free(msg);
    const char *dup = "name: x\nmodels:\n  - {model_id: a, engine: {command: [s, \"{port}\"]}}\n"
                      "  - {model_id: a, engine: {command: [s, \"{port}\"]}}\n";
    assert_int_not_equal(serve_config_parse("d.yaml", dup, strlen(dup), &c, &msg), 0);
    assert_non_null(strstr(msg, "models[1].model_id: model_id 'a' is also models[0]'s"));
    free(msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_defaults_and_placement),
        cmocka_unit_test(test_request_router),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
