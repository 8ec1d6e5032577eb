/* serve: OpenAI-compatible endpoints in front of replicas of an inference
 * engine (docs/serve.md). Two parts, both free of the control plane's
 * client so that they can be tested and fuzzed alone:
 *   config.c  the deployment file (YAML, Ray Serve LLM's field names)
 *   router.c  the HTTP router: model routing, power of two choices,
 *             per-replica limits, the queue, streaming pass-through, /metrics
 *   upstream.c  the router's HTTP/1.1 client to a replica
 *   http.c    the router's HTTP/1.1 server side: what clients send (http.h)
 * The replicas themselves (jobs on the cluster) are started and watched by
 * the `corral serve` command (cli/serve_cmd.c), which tells the router
 * where each replica listens and whether it is ready. */
#ifndef CORRAL_SERVE_H
#define CORRAL_SERVE_H

#include "base/base.h"
#include <pthread.h>

/* ---- the deployment file (config.c) ---- */
#define SERVE_MAX_MODELS 64
#define SERVE_MAX_REPLICAS 256
#define SERVE_MAX_ARGS 128

typedef struct serve_bundle {
    char *resources; /* "GPU=1,CPU=2", libcorral's resource text */
} serve_bundle_t;

typedef struct serve_model {
    char *model_id;     /* what clients send as "model" (LLMConfig.model_loading_config.model_id) */
    char *model_source; /* substituted for {model_source} (model_loading_config.model_source) */
    char **command;     /* engine argv, NULL-terminated, placeholders kept */
    size_t ncommand;
    char *health;                   /* "/health" */
    char *metrics;                  /* "" none */
    char *accelerator_type;         /* "" none; else a label the replica's nodes must carry */
    char *resources;                /* per replica, "GPU=1,CPU=1" (resources_per_replica) */
    CR_VEC(serve_bundle_t) bundles; /* placement: one worker per bundle; empty: one worker */
    char *strategy;                 /* placement strategy, "PACK" default */
    char *topology;                 /* a TPU topology for a whole slice per replica; "" none */
    unsigned min_replicas, max_replicas, initial_replicas;
    double target_ongoing_requests;
    double upscale_delay_s, downscale_delay_s;
    unsigned max_ongoing_requests; /* per replica */
    unsigned max_queued_requests;  /* per model, in the router */
    double health_check_period_s, health_check_timeout_s;
    /* request_router: power of two choices (default) or prefix affinity,
     * which keeps a prompt prefix on one replica while that replica has
     * at most imbalanced_threshold more ongoing requests than the least
     * busy and at least match_rate_threshold of the prompt matched */
    bool prefix_affinity;
    unsigned imbalanced_threshold;
    double match_rate_threshold;
} serve_model_t;

typedef struct serve_config {
    char *name;
    CR_VEC(serve_model_t) models;
    char *router_host; /* "127.0.0.1" */
    unsigned router_port;
    char *api_key_file; /* "" none */
    double request_timeout_s;
    char *tls_cert_file, *tls_key_file; /* "" none: generated off loopback */
    unsigned upstream_keepalive;        /* idle connections kept per replica; 0: one per request */
} serve_config_t;

/* Parses a deployment file's text (YAML; JSON is YAML). Returns 0 with *out
 * (free with serve_config_free), or a negative code with *errmsg
 * ("FILE:LINE:COL: models[0].replicas.min: what is wrong and what to do"). */
int serve_config_parse(const char *name, const char *data, size_t len, serve_config_t **out,
                       char **errmsg);
int serve_config_load(const char *path, serve_config_t **out, char **errmsg);
void serve_config_free(serve_config_t *c);
/* The model with that id, NULL when none. */
const serve_model_t *serve_config_model(const serve_config_t *c, const char *id);
/* arg with {model_source}, {host}, {port} replaced (malloc'ed). Other
 * braces are kept as written. */
char *serve_subst(const char *arg, const char *model_source, const char *host, const char *port);

/* ---- the router (router.c) ---- */
typedef struct serve_router serve_router_t;

typedef enum serve_replica_state {
    SERVE_REPLICA_NONE = 0, /* no process yet */
    SERVE_REPLICA_STARTING, /* placed, not yet healthy */
    SERVE_REPLICA_READY,
    SERVE_REPLICA_DOWN, /* its process ended or refuses connections */
    SERVE_REPLICA_DRAINING,
} serve_replica_state_t;
const char *serve_replica_state_name(serve_replica_state_t s);

typedef struct serve_router_opts {
    const char *host;            /* NULL: the config's */
    unsigned port;               /* 0: the config's */
    const char *const *api_keys; /* NULL-terminated; NULL or empty: no key needed */
    unsigned retry_after_s;      /* in a 503's Retry-After; 0: 1 */
    const char *admin_token;     /* X-Corral-Admin for /-/status; NULL: none */
    /* HTTPS (libmicrohttpd's GnuTLS) with this certificate (then its
     * chain) and key, PEM; NULL: plain HTTP. With TLS the admin calls and
     * /health are also on a plain listener of 127.0.0.1 (serve_router_admin_port),
     * so that the CLI on this machine needs no TLS client. */
    const char *tls_cert_pem, *tls_key_pem;
} serve_router_opts_t;

/* Starts listening. Returns 0 with *out or a negative code with *errmsg. The
 * router keeps a copy of what it needs of cfg. */
int serve_router_start(const serve_config_t *cfg, const serve_router_opts_t *o,
                       serve_router_t **out, char **errmsg);
/* Stops the loops (a waiting request gets 503, a stream its error event),
 * joins their threads, frees. */
void serve_router_stop(serve_router_t *r);
/* The port it listens on (the config's, or the one the kernel chose for 0). */
unsigned serve_router_port(const serve_router_t *r);
/* Where the admin calls are answered on 127.0.0.1: the router's own port
 * without TLS. */
unsigned serve_router_admin_port(const serve_router_t *r);
/* Replica slot i of model m: where it listens and what state it is in. A
 * new endpoint (host or port differ) resets the replica's counters. */
/* host NULL keeps the endpoint; job and node (NULL: kept) are for status. */
void serve_router_set_replica(serve_router_t *r, size_t m, size_t i, const char *host,
                              unsigned port, serve_replica_state_t st, const char *job,
                              const char *node);
serve_replica_state_t serve_router_replica_state(serve_router_t *r, size_t m, size_t i);
/* Requests being served by the replica now. */
unsigned serve_router_replica_ongoing(serve_router_t *r, size_t m, size_t i);
/* Requests waiting in model m's queue. */
unsigned serve_router_queued(serve_router_t *r, size_t m);
/* Number of replica slots model m has (grows with set_replica). */
size_t serve_router_nreplicas(serve_router_t *r, size_t m);
/* Status as JSON text (malloc'ed): models, replicas, load, queue. */
char *serve_router_status(serve_router_t *r);
/* The router's own problem list for `serve status` (pending reasons):
 * set by the replica manager. */
void serve_router_set_note(serve_router_t *r, size_t m, const char *note);

/* ---- what the router reads of bodies (request.c) ---- */
/* the prompt text kept for prefix affinity */
#define SERVE_PREFIX_MAX (16u << 10)
enum { SERVE_REQ_INVALID_JSON = -1, SERVE_REQ_NO_MODEL = -2 };
typedef struct serve_request {
    char *model;       /* a non-empty string without NUL */
    bool stream;       /* "stream": true */
    char *prefix;      /* the prompt's text: each chat message's role and
                        * content, or the completion's prompt; NULL none */
    size_t prefix_len; /* at most SERVE_PREFIX_MAX */
} serve_request_t;
/* A client's request body: 0 with *out (serve_request_free), or
 * SERVE_REQ_INVALID_JSON (not a JSON object) or SERVE_REQ_NO_MODEL. */
int serve_request_parse(const char *body, size_t len, serve_request_t *out);
/* serve_request_parse without the prompt (prefix NULL): the model and the
 * stream flag by one pass over the body that builds no JSON (jansson's way
 * where a key or the model has an escape); the same codes, the same model,
 * for any bytes (fuzz_serve_request.c checks). */
int serve_request_parse_model(const char *body, size_t len, serve_request_t *out);
void serve_request_free(serve_request_t *q);

/* The engine's token counts in a reply, fed piece by piece as it passes:
 * a JSON reply's "usage" (parsed whole up to 64 KiB; past that, found in
 * its last 4 KiB), or in a stream (sse) the last event that has one
 * (OpenAI's final chunk with stream_options.include_usage; llama-server's
 * last chunk). What it keeps per reply is bounded (64 KiB). */
typedef struct serve_usage {
    bool sse, overflow;
    cr_buf_t buf;                 /* the reply, or a stream's current line */
    long long prompt, completion; /* -1: none seen */
} serve_usage_t;
void serve_usage_init(serve_usage_t *u, bool sse);
void serve_usage_feed(serve_usage_t *u, const char *p, size_t n);
void serve_usage_end(serve_usage_t *u);
void serve_usage_fini(serve_usage_t *u);

/* ---- prefix affinity (affinity.c): which replica saw a prompt prefix ----
 * Prompts are cut in blocks of SERVE_AFFINITY_BLOCK bytes; each prefix of
 * whole blocks is hashed (a chain, so prefix k's hash covers blocks 0..k)
 * and remembered in a bounded table with the replica it went to, least
 * recently used first out. A pure structure: no lock, no clock. */
#define SERVE_AFFINITY_BLOCK 64
#define SERVE_AFFINITY_BLOCKS 256 /* the blocks of a prompt looked at */
typedef struct serve_affinity serve_affinity_t;
serve_affinity_t *serve_affinity_new(size_t entries, size_t nreplicas);
void serve_affinity_free(serve_affinity_t *a);
/* The prefix hashes of text: n of them (at most max) in h. */
size_t serve_affinity_hashes(const char *text, size_t len, uint64_t *h, size_t max);
/* The replica that holds the longest prefix among h[0..n), with how many
 * blocks matched (*blocks); -1 when none. usable(rep, arg) says which
 * replicas may take it. */
long serve_affinity_match(serve_affinity_t *a, const uint64_t *h, size_t n, size_t *blocks,
                          bool (*usable)(size_t rep, void *arg), void *arg);
/* Records that the prefixes h[0..n) went to rep (kept where a usable
 * replica already holds one). */
void serve_affinity_insert(serve_affinity_t *a, const uint64_t *h, size_t n, size_t rep,
                           bool (*usable)(size_t rep, void *arg), void *arg);
/* Forgets replica rep (it died, drained or moved). */
void serve_affinity_forget(serve_affinity_t *a, size_t rep);
/* How many prefixes replica rep holds. */
size_t serve_affinity_held(const serve_affinity_t *a, size_t rep);

/* ---- the upstream client (upstream.c) ---- */
typedef struct serve_upstream {
    int fd;
    int status;               /* HTTP status */
    char content_type[128];   /* "" none */
    bool chunked;             /* Transfer-Encoding: chunked */
    long long content_length; /* -1 unknown (until close) */
    /* what was read past the headers, not yet handed out: buf[off, len) */
    size_t off, len;
    /* chunked decoding */
    long long chunk_left; /* bytes left of the current chunk; -1 at a size line */
    bool trailers;        /* past the last chunk, reading the trailers */
    unsigned ntrailers;
    bool done;      /* the body ended as HTTP says */
    bool failed;    /* the connection broke before the body ended */
    long long got;  /* body bytes handed out */
    bool keepalive; /* set before a request: ask the replica to keep the connection */
    bool reusable;  /* the reply allows another request on this connection */
    char buf[8192]; /* last: not cleared for each request */
} serve_upstream_t;

/* Each call that takes timeout_ms blocks up to it (poll), or with 0 never
 * blocks: -EAGAIN when the socket has nothing yet, and the next call goes
 * on where this one stopped (the router's event loops wait on u->fd). */
/* Connects to host:port within timeout_ms. 0 or -errno. */
int serve_upstream_connect(serve_upstream_t *u, const char *host, unsigned port, int timeout_ms);
/* Starts connecting without blocking: 0 connected, -EINPROGRESS (u->fd
 * set: wait until writable, then serve_upstream_connect_end), or -errno. */
int serve_upstream_connect_start(serve_upstream_t *u, const char *host, unsigned port);
/* Ends a connect that started with -EINPROGRESS: err is the wait's
 * (0: writable); 0 connected, or -errno with the socket closed. */
int serve_upstream_connect_end(serve_upstream_t *u, int err);
/* The request's head (request line and headers, as serve_upstream_request
 * sends them) for a body of len bytes into dst: its length, or CR_EINVAL
 * when it does not fit size. */
int serve_upstream_head(const serve_upstream_t *u, const char *method, const char *path,
                        const char *host, const char *content_type, const char *extra, size_t len,
                        char *dst, size_t size);
/* Reads the reply's status line and headers after a request was sent: 0,
 * -EAGAIN (timeout_ms 0), -EPIPE when the connection ended with nothing
 * (the request may go to another replica), CR_EPARSE (not HTTP), -errno. */
int serve_upstream_read_headers(serve_upstream_t *u, int timeout_ms);
/* Takes fd, a connection kept from an earlier request (its own now). */
void serve_upstream_attach(serve_upstream_t *u, int fd);
/* Whether the connection may carry another request: the reply was read to
 * its end as HTTP/1.1 framed it, nothing more came, and neither side said
 * Connection: close. */
bool serve_upstream_reusable(const serve_upstream_t *u);
/* Sends the request (extra: more header lines, each ending in CRLF, or
 * NULL; Connection: keep-alive when u->keepalive, else close) and reads
 * the status line and headers. 0, or -EPIPE
 * when nothing came back (the request may go to another replica), or
 * CR_EPARSE for a reply that is not HTTP. */
int serve_upstream_request(serve_upstream_t *u, const char *method, const char *path,
                           const char *host, const char *content_type, const char *extra,
                           const char *body, size_t len, int timeout_ms);
/* Reads up to size bytes of the body (de-chunked): >0 bytes, 0 at its end
 * (u->done, or u->failed when the replica went away first), -EAGAIN
 * (timeout_ms 0), -ETIMEDOUT. */
ssize_t serve_upstream_read(serve_upstream_t *u, char *dst, size_t size, int timeout_ms);
void serve_upstream_close(serve_upstream_t *u);
/* A GET of path answered 200 within timeout_ms. */
bool serve_upstream_healthy(const char *host, unsigned port, const char *path, int timeout_ms);

#endif
