/* The deployment file of `corral serve` (docs/serve.md "The file"): YAML
 * checked against the schema below, its errors placed at FILE:LINE:COL by
 * hw/spec.c's loader (hw_yaml_check_buffer), the way hardware specs are.
 * Field names are Ray Serve LLM's (LLMConfig, AutoscalingConfig) where they
 * mean the same; docs/serve.md has the mapping. */
#include "serve.h"
#include "hw/hw.h"
#include <math.h>
#include <stdio.h>

#define CFG_MAX_BYTES (1u << 20)

__attribute__((format(printf, 3, 4))) static int bad(hw_json_error_t *je, const char *path,
                                                     const char *fmt, ...)
{
    snprintf(je->path, sizeof(je->path), "%s", path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(je->msg, sizeof(je->msg), fmt, ap);
    va_end(ap);
    return CR_ESCHEMA;
}

static void join(char *dst, size_t size, const char *at, const char *key)
{
    /* a path is at most a few keys deep: one cut short still names the place */
    if (snprintf(dst, size, "%s%s%s", at, at[0] ? "." : "", key) < 0)
        dst[0] = '\0';
}

/* Every key of obj must be one of fields (a NULL-ended list). */
static int only(const json_t *obj, const char *at, const char *const *fields, hw_json_error_t *je)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        bool ok = false;
        for (size_t i = 0; fields[i]; i++)
            ok |= strcmp(key, fields[i]) == 0;
        if (!ok) {
            char list[512] = "", path[256];
            for (size_t i = 0; fields[i]; i++)
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
                         fields[i]);
            join(path, sizeof(path), at, key);
            return bad(je, path, "unknown field '%s'; expected one of: %s", key, list);
        }
    }
    return 0;
}

static int get_str(const json_t *obj, const char *at, const char *key, const char *def, char **out,
                   hw_json_error_t *je)
{
    const json_t *v = json_object_get(obj, key);
    char path[256];
    join(path, sizeof(path), at, key);
    if (!v) {
        if (!def)
            return bad(je, at, "missing '%s:'", key);
        *out = cr_strdup(def);
        return 0;
    }
    if (!json_is_string(v))
        return bad(je, path, "expected text, found %s", hw_json_kind(v));
    if (strlen(json_string_value(v)) != json_string_length(v))
        return bad(je, path, "text holds a NUL byte");
    *out = cr_strdup(json_string_value(v));
    return 0;
}

static int get_num(const json_t *obj, const char *at, const char *key, double def, double lo,
                   double hi, bool integer, double *out, hw_json_error_t *je)
{
    const json_t *v = json_object_get(obj, key);
    char path[256];
    join(path, sizeof(path), at, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return bad(je, path, "expected a number, found %s", hw_json_kind(v));
    double d = json_number_value(v);
    if (integer && (!json_is_integer(v) || d != floor(d)))
        return bad(je, path, "expected a whole number, found %.10g", d);
    if (!(d >= lo && d <= hi))
        return bad(je, path, "expected %.10g to %.10g, found %.10g", lo, hi, d);
    *out = d;
    return 0;
}

static int get_uint(const json_t *obj, const char *at, const char *key, unsigned def, unsigned lo,
                    unsigned hi, unsigned *out, hw_json_error_t *je)
{
    double d;
    int err = get_num(obj, at, key, def, lo, hi, true, &d, je);
    if (!err)
        *out = (unsigned)d;
    return err;
}

static int want_map(const json_t *v, const char *path, const char *what, hw_json_error_t *je)
{
    if (!json_is_object(v))
        return bad(je, path, "expected a mapping (%s), found %s", what, hw_json_kind(v));
    return 0;
}

/* {GPU: 1, CPU: 2} to "GPU=1,CPU=2" */
static int resources_text(const json_t *v, const char *path, char **out, hw_json_error_t *je)
{
    int err = want_map(v, path, "resource: amount, such as {GPU: 1}", je);
    if (err)
        return err;
    if (json_object_size(v) == 0)
        return bad(je, path, "asks for nothing; give at least one resource, such as {CPU: 1}");
    cr_buf_t b = {0};
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x)
    {
        char p[256];
        join(p, sizeof(p), path, key);
        bool name_ok = key[0] != '\0' && strlen(key) < 32;
        for (const char *c = key; *c; c++)
            name_ok &= (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                       (*c >= '0' && *c <= '9') || *c == '_' || *c == '-' || *c == '.' || *c == '/';
        if (!name_ok) {
            cr_buf_free(&b);
            return bad(je, p,
                       "a resource name is letters, digits, '_', '-', '.', '/' (at most 31)");
        }
        if (json_is_string(x) && strcmp(key, "memory") == 0) {
            uint64_t bytes;
            if (hw_parse_size(json_string_value(x), &bytes) != 0) {
                cr_buf_free(&b);
                return bad(je, p, "expected a size such as 8Gi, found '%s'", json_string_value(x));
            }
            cr_buf_printf(&b, "%s%s=%llu", b.len ? "," : "", key, (unsigned long long)bytes);
            continue;
        }
        if (!json_is_number(x) || !(json_number_value(x) > 0) || json_number_value(x) > 1e6) {
            cr_buf_free(&b);
            return bad(je, p, "expected a positive amount, found %s",
                       json_is_number(x) ? "a number out of range" : hw_json_kind(x));
        }
        cr_buf_printf(&b, "%s%s=%g", b.len ? "," : "", key, json_number_value(x));
    }
    *out = b.s;
    return 0;
}

static const char *const top_fields[] = {"name", "models", "router", NULL};
static const char *const router_fields[] = {"host",
                                            "port",
                                            "api_key_file",
                                            "request_timeout_s",
                                            "upstream_keepalive",
                                            "tls_cert_file",
                                            "tls_key_file",
                                            NULL};
static const char *const model_fields[] = {"model_id",
                                           "model_source",
                                           "engine",
                                           "accelerator_type",
                                           "resources_per_replica",
                                           "placement",
                                           "replicas",
                                           "autoscaling",
                                           "max_ongoing_requests",
                                           "max_queued_requests",
                                           "health_check_period_s",
                                           "health_check_timeout_s",
                                           "request_router",
                                           NULL};
static const char *const request_router_fields[] = {"policy", "imbalanced_threshold",
                                                    "match_rate_threshold", NULL};
static const char *const engine_fields[] = {"command", "health", "metrics", NULL};
static const char *const replicas_fields[] = {"min", "max", "initial", NULL};
static const char *const autoscaling_fields[] = {"target_ongoing_requests", "upscale_delay_s",
                                                 "downscale_delay_s", NULL};
static const char *const placement_fields[] = {"bundles", "strategy", "topology", NULL};

static bool id_ok(const char *s)
{
    if (!s[0] || strlen(s) > 128)
        return false;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f || *s == '"' || *s == '\\')
            return false;
    return true;
}

static int model_check(const json_t *m, const char *at, serve_model_t *o, hw_json_error_t *je)
{
    char p[256], q[256];
    int err = want_map(m, at, "model_id, model_source, engine, ...", je);
    if (!err)
        err = only(m, at, model_fields, je);
    if (!err)
        err = get_str(m, at, "model_id", NULL, &o->model_id, je);
    if (err)
        return err;
    join(p, sizeof(p), at, "model_id");
    if (!id_ok(o->model_id))
        return bad(je, p, "a model_id is 1 to 128 printable characters without spaces or quotes");
    if ((err = get_str(m, at, "model_source", "", &o->model_source, je)))
        return err;
    /* the engine */
    join(p, sizeof(p), at, "engine");
    const json_t *e = json_object_get(m, "engine");
    if (!e)
        return bad(je, at, "missing 'engine:' (its command, with {model_source}, {host}, {port})");
    if ((err = want_map(e, p, "command, health, metrics", je)) ||
        (err = only(e, p, engine_fields, je)))
        return err;
    const json_t *cmd = json_object_get(e, "command");
    join(q, sizeof(q), p, "command");
    if (!cmd)
        return bad(je, p, "missing 'command:', a list such as [llama-server, --port, \"{port}\"]");
    if (!json_is_array(cmd) || json_array_size(cmd) == 0)
        return bad(je, q, "expected a non-empty list of words, found %s", hw_json_kind(cmd));
    if (json_array_size(cmd) > SERVE_MAX_ARGS)
        return bad(je, q, "%zu words; at most %d", json_array_size(cmd), SERVE_MAX_ARGS);
    o->command = cr_calloc(json_array_size(cmd) + 1, sizeof(char *));
    bool has_port = false;
    size_t i;
    const json_t *w;
    json_array_foreach(cmd, i, w)
    {
        char r[280];
        snprintf(r, sizeof(r), "%s[%zu]", q, i);
        if (json_is_integer(w)) {
            o->command[o->ncommand++] = cr_asprintf("%lld", (long long)json_integer_value(w));
            continue;
        }
        if (!json_is_string(w) || strlen(json_string_value(w)) != json_string_length(w))
            return bad(je, r, "expected a word (text), found %s", hw_json_kind(w));
        o->command[o->ncommand++] = cr_strdup(json_string_value(w));
        has_port |= strstr(json_string_value(w), "{port}") != NULL;
    }
    if (!o->command[0][0])
        return bad(je, q, "the command's first word is empty");
    if (!has_port)
        return bad(je, q,
                   "no word holds {port}: the engine must listen on the port corral gives it");
    if ((err = get_str(e, p, "health", "/health", &o->health, je)) ||
        (err = get_str(e, p, "metrics", "", &o->metrics, je)))
        return err;
    join(q, sizeof(q), p, "health");
    if (o->health[0] != '/' || !id_ok(o->health))
        return bad(je, q, "expected a path such as /health");
    if (o->metrics[0] && (o->metrics[0] != '/' || !id_ok(o->metrics)))
        return bad(je, p, "metrics: expected a path such as /metrics");
    if ((err = get_str(m, at, "accelerator_type", "", &o->accelerator_type, je)))
        return err;
    if (strcmp(o->accelerator_type, "none") == 0)
        o->accelerator_type[0] = '\0';
    join(p, sizeof(p), at, "accelerator_type");
    if (o->accelerator_type[0] && !id_ok(o->accelerator_type))
        return bad(je, p, "expected a type such as H100 or TPU-V6E");
    /* what a replica takes */
    const json_t *res = json_object_get(m, "resources_per_replica");
    const json_t *pl = json_object_get(m, "placement");
    join(p, sizeof(p), at, "resources_per_replica");
    if (res && pl)
        return bad(je, p, "give resources_per_replica or placement, not both");
    if (res) {
        if ((err = resources_text(res, p, &o->resources, je)))
            return err;
    } else if (!pl) {
        o->resources = cr_strdup("CPU=1");
    }
    o->strategy = cr_strdup("PACK");
    o->topology = cr_strdup("");
    if (pl) {
        join(p, sizeof(p), at, "placement");
        if ((err = want_map(pl, p, "bundles, strategy, topology", je)) ||
            (err = only(pl, p, placement_fields, je)))
            return err;
        const json_t *bs = json_object_get(pl, "bundles");
        join(q, sizeof(q), p, "bundles");
        if (!bs)
            return bad(je, p, "missing 'bundles:', a list of resource mappings");
        if (!json_is_array(bs) || json_array_size(bs) == 0 || json_array_size(bs) > 64)
            return bad(je, q, "expected a list of 1 to 64 resource mappings, found %s",
                       hw_json_kind(bs));
        json_array_foreach(bs, i, w)
        {
            char r[280];
            snprintf(r, sizeof(r), "%s[%zu]", q, i);
            serve_bundle_t *b = CR_VEC_PUSH(&o->bundles);
            if ((err = resources_text(w, r, &b->resources, je)))
                return err;
            /* one worker per bundle of one job: a gang's workers ask alike */
            if (i > 0 && strcmp(b->resources, o->bundles.v[0].resources) != 0)
                return bad(je, r,
                           "every bundle of a replica must ask for the same resources "
                           "(%s, as bundles[0]); different bundles are not done yet",
                           o->bundles.v[0].resources);
        }
        o->resources = cr_strdup(o->bundles.v[0].resources);
        free(o->strategy);
        o->strategy = NULL;
        if ((err = get_str(pl, p, "strategy", "PACK", &o->strategy, je)))
            return err;
        static const char *const strategies[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};
        bool ok = false;
        for (size_t k = 0; k < CR_ARRAY_SIZE(strategies); k++)
            ok |= strcmp(o->strategy, strategies[k]) == 0;
        join(q, sizeof(q), p, "strategy");
        if (!ok)
            return bad(je, q, "expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD, found '%s'",
                       o->strategy);
        free(o->topology);
        o->topology = NULL;
        if ((err = get_str(pl, p, "topology", "", &o->topology, je)))
            return err;
    }
    /* how many */
    o->min_replicas = o->max_replicas = o->initial_replicas = 1;
    const json_t *rep = json_object_get(m, "replicas");
    join(p, sizeof(p), at, "replicas");
    if (json_is_integer(rep)) {
        if ((err = get_uint(m, at, "replicas", 1, 1, SERVE_MAX_REPLICAS, &o->min_replicas, je)))
            return err;
        o->max_replicas = o->initial_replicas = o->min_replicas;
    } else if (rep) {
        if ((err = want_map(rep, p, "min, max, initial; or a number", je)) ||
            (err = only(rep, p, replicas_fields, je)) ||
            (err = get_uint(rep, p, "min", 1, 0, SERVE_MAX_REPLICAS, &o->min_replicas, je)) ||
            (err = get_uint(rep, p, "max", o->min_replicas > 1 ? o->min_replicas : 1, 1,
                            SERVE_MAX_REPLICAS, &o->max_replicas, je)) ||
            (err = get_uint(rep, p, "initial", o->min_replicas, 0, SERVE_MAX_REPLICAS,
                            &o->initial_replicas, je)))
            return err;
        if (o->max_replicas < o->min_replicas)
            return bad(je, p, "max (%u) is below min (%u)", o->max_replicas, o->min_replicas);
        if (o->initial_replicas < o->min_replicas || o->initial_replicas > o->max_replicas) {
            join(q, sizeof(q), p, "initial");
            return bad(je, q, "initial (%u) must be within min..max (%u..%u)", o->initial_replicas,
                       o->min_replicas, o->max_replicas);
        }
    }
    const json_t *as = json_object_get(m, "autoscaling");
    join(p, sizeof(p), at, "autoscaling");
    o->target_ongoing_requests = 2;
    o->upscale_delay_s = 30;
    o->downscale_delay_s = 600;
    if (as &&
        ((err =
              want_map(as, p, "target_ongoing_requests, upscale_delay_s, downscale_delay_s", je)) ||
         (err = only(as, p, autoscaling_fields, je)) ||
         (err = get_num(as, p, "target_ongoing_requests", 2, 0.01, 1e6, false,
                        &o->target_ongoing_requests, je)) ||
         (err = get_num(as, p, "upscale_delay_s", 30, 0, 86400, false, &o->upscale_delay_s, je)) ||
         (err = get_num(as, p, "downscale_delay_s", 600, 0, 86400, false, &o->downscale_delay_s,
                        je))))
        return err;
    if ((err =
             get_uint(m, at, "max_ongoing_requests", 8, 1, 100000, &o->max_ongoing_requests, je)) ||
        (err = get_uint(m, at, "max_queued_requests", 256, 0, 1000000, &o->max_queued_requests,
                        je)) ||
        (err = get_num(m, at, "health_check_period_s", 1, 0.05, 3600, false,
                       &o->health_check_period_s, je)) ||
        (err = get_num(m, at, "health_check_timeout_s", 5, 0.05, 3600, false,
                       &o->health_check_timeout_s, je)))
        return err;
    /* Ray Serve's request_router_config: which router, and its knobs */
    const json_t *rr = json_object_get(m, "request_router");
    join(p, sizeof(p), at, "request_router");
    o->prefix_affinity = false;
    o->imbalanced_threshold = 4;
    o->match_rate_threshold = 0.1;
    if (rr) {
        char *policy = NULL;
        if ((err = want_map(rr, p, "policy, imbalanced_threshold, match_rate_threshold", je)) ||
            (err = only(rr, p, request_router_fields, je)) ||
            (err = get_str(rr, p, "policy", "power_of_two", &policy, je)))
            return err;
        join(q, sizeof(q), p, "policy");
        if (strcmp(policy, "prefix_affinity") == 0)
            o->prefix_affinity = true;
        else if (strcmp(policy, "power_of_two") != 0)
            err =
                bad(je, q, "unknown policy '%s'; expected power_of_two or prefix_affinity", policy);
        free(policy);
        if (err ||
            (err = get_uint(rr, p, "imbalanced_threshold", 4, 0, 100000, &o->imbalanced_threshold,
                            je)) ||
            (err = get_num(rr, p, "match_rate_threshold", 0.1, 0, 1, false,
                           &o->match_rate_threshold, je)))
            return err;
    }
    return 0;
}

static void model_fini(serve_model_t *m)
{
    free(m->model_id);
    free(m->model_source);
    for (size_t i = 0; m->command && m->command[i]; i++)
        free(m->command[i]);
    free(m->command);
    free(m->health);
    free(m->metrics);
    free(m->accelerator_type);
    free(m->resources);
    for (size_t i = 0; i < m->bundles.n; i++)
        free(m->bundles.v[i].resources);
    CR_VEC_FREE(&m->bundles);
    free(m->strategy);
    free(m->topology);
}

void serve_config_free(serve_config_t *c)
{
    if (!c)
        return;
    free(c->name);
    for (size_t i = 0; i < c->models.n; i++)
        model_fini(&c->models.v[i]);
    CR_VEC_FREE(&c->models);
    free(c->router_host);
    free(c->api_key_file);
    free(c->tls_cert_file);
    free(c->tls_key_file);
    free(c);
}

static int config_check(const json_t *root, void *ctx, hw_json_error_t *je)
{
    serve_config_t *c = ctx;
    if (!root || json_is_null(root))
        return bad(je, "", "the file is empty; expected name:, models: and router:");
    int err = want_map(root, "", "name, models, router", je);
    if (!err)
        err = only(root, "", top_fields, je);
    if (!err)
        err = get_str(root, "", "name", NULL, &c->name, je);
    if (err)
        return err;
    if (!id_ok(c->name) || strlen(c->name) > 48 || strchr(c->name, '/'))
        return bad(je, "name",
                   "a deployment's name is 1 to 48 printable characters without "
                   "spaces, quotes or '/'");
    const json_t *ms = json_object_get(root, "models");
    if (!ms)
        return bad(je, "", "missing 'models:', a list of models to serve");
    if (!json_is_array(ms) || json_array_size(ms) == 0 || json_array_size(ms) > SERVE_MAX_MODELS)
        return bad(je, "models", "expected a list of 1 to %d models, found %s", SERVE_MAX_MODELS,
                   hw_json_kind(ms));
    size_t i;
    const json_t *m;
    json_array_foreach(ms, i, m)
    {
        char at[64];
        snprintf(at, sizeof(at), "models[%zu]", i);
        serve_model_t *o = CR_VEC_PUSH(&c->models);
        if ((err = model_check(m, at, o, je)))
            return err;
        for (size_t k = 0; k < i; k++)
            if (strcmp(c->models.v[k].model_id, o->model_id) == 0) {
                snprintf(at, sizeof(at), "models[%zu].model_id", i);
                return bad(je, at, "model_id '%s' is also models[%zu]'s; each must be unique",
                           o->model_id, k);
            }
    }
    const json_t *r = json_object_get(root, "router");
    double port = 8000;
    if (r && ((err = want_map(r, "router", "host, port, api_key_file", je)) ||
              (err = only(r, "router", router_fields, je))))
        return err;
    if (!r)
        r = json_object(); /* defaults */
    else
        json_incref((json_t *)r);
    err = get_str(r, "router", "host", "127.0.0.1", &c->router_host, je);
    if (!err)
        err = get_num(r, "router", "port", 8000, 0, 65535, true, &port, je);
    if (!err)
        err = get_str(r, "router", "api_key_file", "", &c->api_key_file, je);
    if (!err)
        err = get_num(r, "router", "request_timeout_s", 600, 1, 86400, false, &c->request_timeout_s,
                      je);
    if (!err)
        err = get_uint(r, "router", "upstream_keepalive", 16, 0, 64, &c->upstream_keepalive, je);
    if (!err)
        err = get_str(r, "router", "tls_cert_file", "", &c->tls_cert_file, je);
    if (!err)
        err = get_str(r, "router", "tls_key_file", "", &c->tls_key_file, je);
    if (!err && !c->tls_cert_file[0] != !c->tls_key_file[0])
        err = bad(je, c->tls_cert_file[0] ? "router.tls_cert_file" : "router.tls_key_file",
                  "give both tls_cert_file and tls_key_file (PEM), or neither");
    json_decref((json_t *)r);
    c->router_port = (unsigned)port;
    return err;
}

int serve_config_parse(const char *name, const char *data, size_t len, serve_config_t **out,
                       char **errmsg)
{
    *out = NULL;
    if (len > CFG_MAX_BYTES) {
        *errmsg = cr_asprintf("%s:1:1: the file is %zu bytes; a deployment file holds at most %u",
                              name, len, CFG_MAX_BYTES);
        return CR_EINVAL;
    }
    serve_config_t *c = cr_calloc(1, sizeof(*c));
    int err = hw_yaml_check_buffer(name, "deployment file", data, len, config_check, c, errmsg);
    if (err) {
        serve_config_free(c);
        return err;
    }
    *out = c;
    return 0;
}

int serve_config_load(const char *path, serve_config_t **out, char **errmsg)
{
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) {
        *errmsg = cr_asprintf("%s: %s", path, strerror(errno));
        return -errno;
    }
    cr_buf_t b = {0};
    char tmp[8192];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0 && b.len <= CFG_MAX_BYTES)
        cr_buf_append(&b, tmp, n);
    fclose(f);
    int err = serve_config_parse(path, b.s ? b.s : "", b.len, out, errmsg);
    cr_buf_free(&b);
    return err;
}

const serve_model_t *serve_config_model(const serve_config_t *c, const char *id)
{
    for (size_t i = 0; i < c->models.n; i++)
        if (strcmp(c->models.v[i].model_id, id) == 0)
            return &c->models.v[i];
    return NULL;
}

char *serve_subst(const char *arg, const char *model_source, const char *host, const char *port)
{
    static const char *const keys[] = {"{model_source}", "{host}", "{port}"};
    const char *vals[] = {model_source, host, port};
    cr_buf_t b = {0};
    cr_buf_append(&b, "", 0);
    for (const char *s = arg; *s;) {
        bool hit = false;
        for (size_t k = 0; k < 3 && !hit; k++)
            if (strncmp(s, keys[k], strlen(keys[k])) == 0) {
                cr_buf_append(&b, vals[k], strlen(vals[k]));
                s += strlen(keys[k]);
                hit = true;
            }
        if (!hit)
            cr_buf_append(&b, s++, 1);
    }
    return b.s;
}
