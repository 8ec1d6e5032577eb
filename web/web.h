/* web/: corral's HTTP layer (DESIGN.md "Layers", web/README.md): a
 * libmicrohttpd server driven by the caller's libuv loop, its routes and
 * access rules, and the writers of what it serves (Prometheus text,
 * device telemetry). It reads no daemon state itself: the head
 * (head/web.c) and the agent (agent/metrics.c) register routes whose
 * handlers read their own state, on their own loop, so nothing here needs
 * a lock.
 *
 * The core (web_dispatch) is pure: a request as strings in, an answer out.
 * The server (server.c) turns libmicrohttpd's callbacks into that and
 * back; the fuzz target (tests/fuzz/fuzz_web.c) calls it directly. */
#ifndef CORRAL_WEB_WEB_H
#define CORRAL_WEB_WEB_H

#include "base/base.h"
#include "hw/hw.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#define WEB_DEFAULT_PORT 8265 /* Ray's dashboard port */
#define WEB_KEY_LEN 32        /* bytes of the cluster token and of a login token */
#define WEB_MAX_ARGS 4        /* {} segments of a route */
#define WEB_MAX_QUERY 16      /* query parameters kept; the rest is ignored */
#define WEB_MAX_PATH 1024     /* a longer path is answered 414 */
#define WEB_ID_MAX 64         /* a job id a job credential is scoped to */
#define WEB_COOKIE "corral_session"
/* How often an agent may send its devices' telemetry to the head, and how
 * often the head samples every device's latest reading into its history
 * (head/telemetry.h). */
#define WEB_TELEMETRY_PERIOD_MS 5000

typedef struct web web_t;

/* Who a request proved to be. */
typedef enum web_who {
    WEB_WHO_NONE,    /* nothing (only WEB_PUBLIC routes) */
    WEB_WHO_CLUSTER, /* the cluster token as a Bearer */
    WEB_WHO_SESSION, /* the login cookie (a browser) */
    WEB_WHO_JOB,     /* a job credential: its own job only */
} web_who_t;

typedef struct web_kv {
    const char *key, *value;
} web_kv_t;

/* One request, as strings: what the server read off the connection. */
typedef struct web_in {
    const char *method;
    const char *path;          /* without the query, %-encoded as sent */
    const char *authorization; /* the header, NULL when absent */
    const char *cookie;        /* the Cookie header, NULL when absent */
    web_kv_t query[WEB_MAX_QUERY];
    size_t nquery;
} web_in_t;

typedef struct web_req {
    const web_in_t *in;
    char args[WEB_MAX_ARGS][256]; /* the {} segments, %-decoded */
    size_t nargs;
    web_who_t who;
    char job_id[WEB_ID_MAX + 1]; /* WEB_WHO_JOB: the job it may read */
} web_req_t;

/* A stream's next bytes into buf (at most size): how many, 0 for none
 * now (asked again later), -1 at its end. */
typedef ssize_t (*web_stream_fn)(void *ctx, char *buf, size_t size);

typedef struct web_out {
    int status;
    const char *type;  /* Content-Type; static */
    const char *cache; /* Cache-Control; static; NULL: no-store */
    cr_buf_t body;
    char location[WEB_MAX_PATH + 8]; /* a redirect's */
    char cookie[160];                /* a Set-Cookie to send */
    web_stream_fn stream;            /* set: the body is this stream */
    void *stream_ctx;
    void (*stream_free)(void *ctx);
} web_out_t;

void web_out_fini(web_out_t *o);
/* A JSON body (j taken); an error as {"error": why} with status. */
void web_out_json(web_out_t *o, int status, json_t *j);
void web_out_error(web_out_t *o, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef void (*web_handler_fn)(void *ctx, const web_req_t *rq, web_out_t *out);

#define WEB_PUBLIC 0x1u /* served without authentication (/healthz) */
#define WEB_JOB 0x2u    /* a job credential may call it: the handler scopes it to rq->job_id */

/* pattern: a path whose segments are literal or "{}" (one segment,
 * captured into rq->args), or ending in "*" (any rest, captured). */
typedef struct web_route {
    const char *method;
    const char *pattern;
    unsigned flags;
    web_handler_fn fn;
    void *ctx;
} web_route_t;

typedef struct web_config {
    uv_loop_t *loop;      /* the loop it runs on; NULL: web_dispatch only */
    const char *who;      /* in messages: "dashboard", "metrics" */
    const char *host;     /* listen address; NULL: 127.0.0.1 */
    uint16_t port;        /* 0: any free one */
    const uint8_t *token; /* the cluster token, WEB_KEY_LEN bytes, copied; NULL: none */
    bool login;           /* a login token for browsers (the head's dashboard) */
    /* A Bearer that is not the cluster token: true when it is a job
     * credential, with the job it may read in job_id. NULL: none is. */
    bool (*job_bearer)(void *ctx, const char *text, char *job_id, size_t size);
    void *job_ctx;
    /* HTTPS (docs/api.md "TLS"): the certificate (then its chain) and key,
     * PEM, copied; NULL: plain HTTP, which only a loopback host may serve.
     * With them the login cookie is Secure. */
    const char *tls_cert_pem, *tls_key_pem;
} web_config_t;

/* A server with no routes and no socket yet (the fuzz target stops
 * there); NULL with why. */
web_t *web_new(const web_config_t *cfg, char *why, size_t size);
/* Routes are matched in the order added; r is copied. */
void web_route_add(web_t *w, const web_route_t *r);
/* Listens on the configured host and port, on the loop, over TLS when the
 * config has a certificate: 0, or a negative error with why (a host off
 * loopback without a certificate is refused: it serves only HTTPS there,
 * web/README.md). */
int web_listen(web_t *w, char *why, size_t size);
int web_port(const web_t *w);
/* The login token, 64 hex digits ("" without cfg.login). */
const char *web_login_token(const web_t *w);
/* Stops listening, ends streams, frees (NULL is fine). Safe before the
 * loop's end: the handles close through the loop. */
void web_free(web_t *w);

/* The core: authenticates in, finds its route and runs it into out. */
void web_dispatch(web_t *w, const web_in_t *in, web_out_t *out);

/* ---- the dashboard's files (assets.c; the table is generated at build
 * time by web/embed.cmake from web/ui/ and vendored npm packages) ---- */
typedef struct web_asset {
    const char *name; /* as under /static/, e.g. "app.js" */
    const char *type; /* Content-Type */
    const unsigned char *bytes;
    size_t len;
} web_asset_t;

extern const web_asset_t web_assets[]; /* ends with a NULL name */
/* The asset called name, NULL when there is none. */
const web_asset_t *web_asset_find(const char *name);

/* ---- parsing (route.c; pure, fuzzed) ---- */
/* %-decodes src[0..n) into dst (size bytes, '\0'-ended); false on a bad
 * escape, a NUL, or no room. plus: '+' is a space (a query). */
bool web_decode(const char *src, size_t n, char *dst, size_t size, bool plus);
/* The value of cookie name in a Cookie header into buf; false when absent. */
bool web_cookie_get(const char *header, const char *name, char *buf, size_t size);
const char *web_query(const web_in_t *in, const char *name);
/* A query parameter as an unsigned integer in [lo, hi], def when absent:
 * 0, or CR_EINVAL with why. */
int web_query_u32(const web_in_t *in, const char *name, uint32_t def, uint32_t lo, uint32_t hi,
                  uint32_t *out, char *why, size_t size);
/* Constant-time equality of n bytes. */
bool web_key_equal(const uint8_t *a, const uint8_t *b, size_t n);
bool web_is_loopback(const char *host);

/* ---- Prometheus text format (prom.c) ---- */
/* # HELP and # TYPE of a family (type: gauge, counter, histogram). */
void web_prom_family(cr_buf_t *b, const char *name, const char *type, const char *help);
/* name{labels} value, labels as "k", "v" pairs (nl of them), the values
 * escaped as the format says. */
void web_prom_sample(cr_buf_t *b, const char *name, const char *const *labels, size_t nl,
                     double value);

/* ---- device telemetry (devices.c) ---- */
/* Who holds device dev of the node: false when none (job_id, worker_id
 * borrowed). */
typedef bool (*web_holder_fn)(void *ctx, int dev, const char **job_id, const char **worker_id);
/* The node's per-device metrics (docs/metrics.md) from each backend's
 * telemetry op, appended to b. */
void web_device_metrics(cr_buf_t *b, const cr_node_t *node, const hw_options_t *hwo,
                        web_holder_fn holder, void *ctx);
/* One device's reading: read now by its backend's telemetry op (a
 * simulated node's from who holds it), or one its agent sent. */
typedef struct web_reading {
    bool available; /* false: why says so */
    char why[128];
    cr_telemetry_t t;
    int64_t age_ms; /* how long ago it was read; -1 now */
} web_reading_t;
/* Reads device i of node now (held: a worker holds it). */
void web_device_read(const cr_node_t *node, const hw_options_t *hwo, int i, bool held,
                     web_reading_t *r);
/* The "telemetry" object of a reading (docs/api.md). */
json_t *web_reading_json(const web_reading_t *r, bool simulated);
/* The node's devices as JSON, each with "telemetry": from given (one
 * reading per device) or, given NULL, read now; null with
 * "telemetry_source" saying why when there is none. */
json_t *web_devices_json(const cr_node_t *node, const hw_options_t *hwo, const web_reading_t *given,
                         web_holder_fn holder, void *ctx);

#endif
