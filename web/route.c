/* The core of the HTTP layer (web.h): a request as strings in, an answer
 * out. Who the caller is (the login cookie, the cluster token or a job
 * credential as a Bearer), the route it asked for, and the parsing of
 * paths, queries and cookies. No sockets: server.c calls it for
 * libmicrohttpd, tests/fuzz/fuzz_web.c with made-up requests. */
#include "web/web_int.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool web_key_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t d = 0; /* no early exit: the time says nothing of where they differ */
    for (size_t i = 0; i < n; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

bool web_is_loopback(const char *host)
{
    return !host || !host[0] || !strcmp(host, "127.0.0.1") || !strcmp(host, "localhost") ||
           !strcmp(host, "::1") || !strncmp(host, "127.", 4);
}

bool web_decode(const char *src, size_t n, char *dst, size_t size, bool plus)
{
    size_t o = 0;
    if (!size)
        return false;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)src[i];
        if (c == '%') {
            if (i + 2 >= n)
                return false;
            int hi = cr_hex_digit(src[i + 1]), lo = cr_hex_digit(src[i + 2]);
            if (hi < 0 || lo < 0)
                return false;
            c = hi * 16 + lo;
            i += 2;
        } else if (c == '+' && plus) {
            c = ' ';
        }
        if (c == 0 || o + 1 >= size)
            return false;
        dst[o++] = (char)c;
    }
    dst[o] = '\0';
    return true;
}

bool web_cookie_get(const char *header, const char *name, char *buf, size_t size)
{
    size_t nl = strlen(name);
    const char *p = header;
    while (p && *p) {
        while (*p == ' ' || *p == '\t' || *p == ';')
            p++;
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > nl && !strncmp(p, name, nl) && p[nl] == '=') {
            const char *v = p + nl + 1;
            size_t vl = len - nl - 1;
            if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') { /* a quoted value */
                v++;
                vl -= 2;
            }
            if (vl + 1 > size)
                return false;
            memcpy(buf, v, vl);
            buf[vl] = '\0';
            return true;
        }
        p = end;
    }
    return false;
}

const char *web_query(const web_in_t *in, const char *name)
{
    for (size_t i = 0; i < in->nquery; i++)
        if (in->query[i].key && !strcmp(in->query[i].key, name))
            return in->query[i].value ? in->query[i].value : "";
    return NULL;
}

int web_query_u32(const web_in_t *in, const char *name, uint32_t def, uint32_t lo, uint32_t hi,
                  uint32_t *out, char *why, size_t size)
{
    const char *s = web_query(in, name);
    if (!s) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (!s[0] || *end || s[0] == '-' || errno || v < lo || v > hi) {
        snprintf(why, size, "query parameter %s: expected an integer %u..%u, got '%.64s'", name, lo,
                 hi, s);
        return CR_EINVAL;
    }
    *out = (uint32_t)v;
    return 0;
}

/* ----------------------------------------------------------- answers */

void web_out_fini(web_out_t *o)
{
    cr_buf_free(&o->body);
    if (o->stream_free && o->stream_ctx)
        o->stream_free(o->stream_ctx);
    o->stream_ctx = NULL;
}

void web_out_json(web_out_t *o, int status, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    o->status = status;
    o->type = "application/json";
    o->body.len = 0;
    if (s) {
        cr_buf_append(&o->body, s, strlen(s));
        cr_buf_append(&o->body, "\n", 1);
    }
    free(s);
    json_decref(j);
}

void web_out_error(web_out_t *o, int status, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    json_t *j = json_object();
    json_object_set_new(j, "error", json_string(why));
    json_object_set_new(j, "status", json_integer(status));
    web_out_json(o, status, j);
}

/* ------------------------------------------------------------ routes */

web_t *web_new(const web_config_t *cfg, char *why, size_t size)
{
    web_t *w = cr_calloc(1, sizeof(*w));
    w->cfg = *cfg;
    w->who = cr_strdup(cfg->who ? cfg->who : "http");
    w->host = cr_strdup(cfg->host && cfg->host[0] ? cfg->host : "127.0.0.1");
    w->cfg.who = w->who;
    w->cfg.host = w->host;
    if (cfg->token) {
        memcpy(w->token, cfg->token, WEB_KEY_LEN);
        w->has_token = true;
    }
    w->cfg.token = NULL;
    if (cfg->tls_cert_pem && cfg->tls_key_pem) {
        w->tls_cert = cr_strdup(cfg->tls_cert_pem);
        w->tls_key = cr_strdup(cfg->tls_key_pem);
    }
    w->cfg.tls_cert_pem = w->cfg.tls_key_pem = NULL;
    if (cfg->login) {
        uint8_t raw[WEB_KEY_LEN];
        int err = cr_random_bytes(raw, sizeof(raw));
        if (err < 0) {
            snprintf(why, size, "cannot draw a login token: %s", cr_strerror(err));
            web_free(w);
            return NULL;
        }
        memcpy(w->login, raw, sizeof(raw));
        cr_hex_encode(raw, sizeof(raw), w->login_hex);
        memset(raw, 0, sizeof(raw));
    }
    return w;
}

void web_route_add(web_t *w, const web_route_t *r)
{
    *CR_VEC_PUSH(&w->routes) = *r;
}

const char *web_login_token(const web_t *w)
{
    return w->login_hex;
}

/* Whether path matches pattern, its {} segments (and a "*" rest)
 * decoded into rq->args; *bad set when a segment does not decode. */
static bool match(const char *pattern, const char *path, web_req_t *rq, bool *bad)
{
    const char *p = pattern, *s = path;
    rq->nargs = 0;
    while (*p && *s) {
        if (p[0] == '*' && !p[1]) { /* the rest, whatever it is */
            if (rq->nargs == WEB_MAX_ARGS ||
                !web_decode(s, strlen(s), rq->args[rq->nargs], sizeof(rq->args[0]), false)) {
                *bad = true;
                return false;
            }
            rq->nargs++;
            return true;
        }
        if (p[0] == '{' && p[1] == '}') {
            size_t n = strcspn(s, "/");
            if (n == 0)
                return false;
            if (rq->nargs == WEB_MAX_ARGS ||
                !web_decode(s, n, rq->args[rq->nargs], sizeof(rq->args[0]), false)) {
                *bad = true;
                return false;
            }
            rq->nargs++;
            p += 2;
            s += n;
            continue;
        }
        if (*p != *s)
            return false;
        p++;
        s++;
    }
    if (p[0] == '*' && !p[1] && !*s && rq->nargs < WEB_MAX_ARGS) {
        rq->args[rq->nargs++][0] = '\0';
        return true;
    }
    return !*p && !*s;
}

/* Who the request proves to be; *wrong set when it offered something
 * that is not good (a wrong token, an unknown cookie). */
static web_who_t authenticate(web_t *w, const web_in_t *in, web_req_t *rq, bool *wrong)
{
    const char *a = in->authorization;
    *wrong = false;
    if (a) {
        if (strncasecmp(a, "Bearer ", 7) != 0) {
            *wrong = true;
            return WEB_WHO_NONE;
        }
        a += 7;
        while (*a == ' ')
            a++;
        size_t n = strlen(a);
        while (n && (a[n - 1] == ' ' || a[n - 1] == '\r' || a[n - 1] == '\n'))
            n--;
        uint8_t key[WEB_KEY_LEN];
        if (w->has_token && n == 2 * WEB_KEY_LEN && cr_hex_decode(a, n, key)) {
            bool ok = web_key_equal(key, w->token, WEB_KEY_LEN);
            memset(key, 0, sizeof(key));
            if (ok)
                return WEB_WHO_CLUSTER;
        }
        char text[256];
        if (w->cfg.job_bearer && n < sizeof(text)) {
            memcpy(text, a, n);
            text[n] = '\0';
            if (w->cfg.job_bearer(w->cfg.job_ctx, text, rq->job_id, sizeof(rq->job_id)))
                return WEB_WHO_JOB;
        }
        *wrong = true;
        return WEB_WHO_NONE;
    }
    char hex[2 * WEB_KEY_LEN + 1];
    if (w->cfg.login && in->cookie && web_cookie_get(in->cookie, WEB_COOKIE, hex, sizeof(hex))) {
        uint8_t key[WEB_KEY_LEN];
        if (strlen(hex) == 2 * WEB_KEY_LEN && cr_hex_decode(hex, 2 * WEB_KEY_LEN, key) &&
            web_key_equal(key, w->login, WEB_KEY_LEN))
            return WEB_WHO_SESSION;
        *wrong = true;
    }
    return WEB_WHO_NONE;
}

/* GET ...?token=LOGIN: the cookie, and the same URL without the token
 * (so that it stays out of the history and of Referer headers). */
static bool login(web_t *w, const web_in_t *in, web_out_t *out)
{
    const char *t = web_query(in, "token");
    if (!t || !w->cfg.login)
        return false;
    uint8_t key[WEB_KEY_LEN];
    if (strlen(t) != 2 * WEB_KEY_LEN || !cr_hex_decode(t, 2 * WEB_KEY_LEN, key) ||
        !web_key_equal(key, w->login, WEB_KEY_LEN)) {
        web_out_error(out, 401,
                      "the login token is wrong (a head that restarted has a new one: "
                      "'corral dashboard' prints the URL)");
        return true;
    }
    /* over HTTPS it is Secure: a browser never sends it in plain text */
    snprintf(out->cookie, sizeof(out->cookie), "%s=%s; Path=/; HttpOnly; SameSite=Strict%s",
             WEB_COOKIE, w->login_hex, w->tls_cert ? "; Secure" : "");
    cr_buf_t loc = {0};
    cr_buf_append(&loc, in->path, strlen(in->path));
    char sep = '?';
    for (size_t i = 0; i < in->nquery; i++) { /* the others stay, re-encoded */
        if (!in->query[i].key || !strcmp(in->query[i].key, "token"))
            continue;
        cr_buf_printf(&loc, "%c", sep);
        sep = '&';
        for (const char *k = in->query[i].key; *k; k++)
            cr_buf_printf(&loc, isalnum((unsigned char)*k) || strchr("-._~", *k) ? "%c" : "%%%02X",
                          (unsigned char)*k);
        cr_buf_append(&loc, "=", 1);
        for (const char *v = in->query[i].value ? in->query[i].value : ""; *v; v++)
            cr_buf_printf(&loc, isalnum((unsigned char)*v) || strchr("-._~", *v) ? "%c" : "%%%02X",
                          (unsigned char)*v);
    }
    if (loc.len < sizeof(out->location))
        snprintf(out->location, sizeof(out->location), "%s", loc.s);
    else
        snprintf(out->location, sizeof(out->location), "%s", "/");
    cr_buf_free(&loc);
    out->status = 303;
    out->type = "text/plain";
    cr_buf_printf(&out->body, "logged in; go to %s\n", out->location);
    return true;
}

void web_dispatch(web_t *w, const web_in_t *in, web_out_t *out)
{
    web_req_t rq;
    memset(&rq, 0, sizeof(rq));
    rq.in = in;
    out->status = 500;
    if (!in->method || !in->path || in->path[0] != '/') {
        web_out_error(out, 400, "a request needs a method and a path starting with '/'");
        return;
    }
    if (strlen(in->path) > WEB_MAX_PATH) {
        web_out_error(out, 414, "the path is longer than %d bytes", WEB_MAX_PATH);
        return;
    }
    if (!strcmp(in->method, "GET") && login(w, in, out))
        return;
    bool wrong;
    rq.who = authenticate(w, in, &rq, &wrong);
    const web_route_t *hit = NULL;
    bool method_differs = false, bad = false;
    for (size_t i = 0; i < w->routes.n && !hit; i++) {
        const web_route_t *r = &w->routes.v[i];
        if (!match(r->pattern, in->path, &rq, &bad))
            continue;
        if (strcmp(r->method, in->method) != 0 &&
            !(strcmp(in->method, "HEAD") == 0 && strcmp(r->method, "GET") == 0)) {
            method_differs = true;
            continue;
        }
        hit = r;
    }
    if (!(hit && (hit->flags & WEB_PUBLIC)) && rq.who == WEB_WHO_NONE) {
        if (wrong)
            web_out_error(out, 401,
                          "the credential is wrong: send 'Authorization: Bearer' with the "
                          "cluster token (64 hex digits, the session's token file) or a job's "
                          "CORRAL_JOB_TOKEN, or open the URL 'corral dashboard' prints");
        else
            web_out_error(out, 401,
                          "authentication required: send 'Authorization: Bearer' with the "
                          "cluster token or a job's CORRAL_JOB_TOKEN, or open the URL "
                          "'corral dashboard' prints");
        return;
    }
    if (!hit) {
        if (bad)
            web_out_error(out, 400, "a path segment is not valid %%-encoding");
        else if (method_differs)
            web_out_error(out, 405, "%s is not allowed on %.200s", in->method, in->path);
        else
            web_out_error(out, 404,
                          "no such resource: %.200s (the API is under /api/v1/, "
                          "docs/api.md)",
                          in->path);
        return;
    }
    if (rq.who == WEB_WHO_JOB && !(hit->flags & WEB_JOB)) {
        web_out_error(out, 403, "a job credential may read only its own job (%s)", rq.job_id);
        return;
    }
    out->status = 200;
    out->type = "application/json";
    hit->fn(hit->ctx, &rq, out);
}
