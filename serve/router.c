/* The router (docs/serve.md "The router"): an HTTP server on libmicrohttpd
 * in front of the replicas. Each connection has its own thread
 * (MHD_USE_THREAD_PER_CONNECTION), so that a request may wait in its
 * model's queue and read its replica with plain blocking calls, and a
 * stream's backpressure is the kernel's: the reply callback reads the next
 * piece from the replica only once microhttpd has sent the last one.
 *
 * Routing: the request's "model" picks the model; among its ready replicas
 * that have fewer than max_ongoing_requests in flight, two are drawn at
 * random and the one with fewer ongoing requests takes it (power of two
 * choices, Ray Serve's default). With none free the request waits in the
 * model's queue (at most max_queued_requests, then 503 with Retry-After).
 * A replica that refuses the connection or closes it before the first byte
 * of the reply is marked down and the request goes to another. With
 * prefix affinity (affinity.c) the replica holding the prompt's longest
 * prefix takes it while the replicas are balanced.
 *
 * Connections to replicas are kept in a bounded pool per replica (the
 * replica's mutex-guarded stack of idle descriptors); the replies' token
 * usage is read as they pass (request.c) for /metrics. */
#include "serve.h"
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BODY_MAX (16u << 20)
/* what all requests together may hold in memory while they arrive: a
 * client cannot grow the router past it by opening many connections */
#define BODIES_MAX (256ull << 20)
/* a reply piece, and each connection's memory in microhttpd: small, so that
 * a thousand open streams fit in 64 MiB (bench/serve) */
#define PIECE 8192
#define CONN_MEMORY (16u << 10)
/* idle connections to a replica: at most router.upstream_keepalive (up to
 * POOL_CAP) each, closed after POOL_IDLE_MS (llama-server's cpp-httplib
 * closes its side after 5 s) */
#define POOL_CAP 64
#define POOL_IDLE_MS 4000
/* the prefixes a model with prefix affinity remembers (24 bytes each) */
#define AFFINITY_ENTRIES 65536

typedef struct replica {
    char host[64];
    unsigned port;
    serve_replica_state_t st;
    unsigned ongoing;
    uint64_t requests, failures;
    char job[48], node[64];
    int idle[POOL_CAP]; /* the pool: a stack, the newest last */
    int64_t idle_ms[POOL_CAP];
    unsigned nidle;
} replica_t;

typedef struct rmodel {
    char *id;
    unsigned max_ongoing, max_queued;
    replica_t *reps; /* cap entries */
    size_t nreps, cap;
    unsigned queued;
    pthread_cond_t cv;
    uint64_t requests, errors, rejected, retries, ttfb_count;
    uint64_t prompt_tokens, completion_tokens, counted; /* from the replies' usage */
    uint64_t connects, reused, affinity_hits;
    bool prefix_affinity;
    unsigned imbalanced_threshold;
    double match_rate_threshold;
    serve_affinity_t *aff; /* NULL without prefix affinity */
    double ttfb_sum;
    uint64_t ttfb_le[8]; /* cumulative-by-bucket counts for the histogram */
    char note[256];
} rmodel_t;

static const double ttfb_bounds[8] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5, 10};

struct serve_router {
    struct MHD_Daemon *d;
    struct MHD_Daemon *admin_d; /* with TLS: the admin calls on 127.0.0.1, plain */
    unsigned admin_port;
    pthread_mutex_t mu;
    rmodel_t *models;
    size_t nmodels;
    char **keys; /* NULL-terminated */
    char *admin;
    unsigned retry_after, port;
    unsigned keepalive; /* idle connections kept per replica */
    int timeout_ms;
    uint64_t rng;
    uint64_t http_requests, unauthorized;
    uint64_t body_bytes; /* held by all requests now (atomic) */
    volatile int stopping;
};

typedef struct req {
    serve_router_t *r;
    cr_buf_t body;
    bool too_big;
    /* while proxying */
    serve_upstream_t up;
    rmodel_t *m;
    size_t rep;
    unsigned port; /* the replica's when the request went to it */
    bool held;     /* counts in the replica's ongoing */
    bool sse;
    bool ended;
    bool finished; /* the reply was read whole: usage counted, connection pooled */
    serve_usage_t usage;
    /* prefix affinity: the prompt's prefix hashes and its length */
    uint64_t *h;
    size_t nh, prefix_len;
    /* the connection's and, once queued, the reply's: microhttpd may end
     * the connection (completed) before it destroys the reply (reader_free) */
    int refs;
} req_t;

const char *serve_replica_state_name(serve_replica_state_t s)
{
    static const char *const names[] = {"NONE", "STARTING", "READY", "DOWN", "DRAINING"};
    return (unsigned)s < CR_ARRAY_SIZE(names) ? names[s] : "UNKNOWN";
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t next_rand(serve_router_t *r)
{
    /* xorshift64*, under r->mu */
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return r->rng * 2685821657736338717ULL;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 const char *text, unsigned retry_after)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", ctype);
    if (retry_after) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", retry_after);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* OpenAI's error shape: {"error": {"message", "type", "param", "code"}}. */
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *code, const char *msg, unsigned retry_after)
{
    json_t *j = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg, "type", type, "param",
                          "code", code);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    enum MHD_Result ret = send_text(c, status, "application/json", s ? s : "{}", retry_after);
    free(s);
    return ret;
}

static bool authorized(serve_router_t *r, struct MHD_Connection *c)
{
    if (!r->keys || !r->keys[0])
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    bool ok = false;
    for (size_t i = 0; r->keys[i]; i++) {
        /* the same time whichever key, whatever prefix matches */
        size_t a = strlen(h), b = strlen(r->keys[i]);
        unsigned diff = (unsigned)(a != b);
        for (size_t k = 0; k < b; k++)
            diff |= (unsigned char)(k < a ? h[k] : 0) ^ (unsigned char)r->keys[i][k];
        ok |= diff == 0;
    }
    return ok;
}

static bool can_take(const rmodel_t *m, size_t i, uint64_t tried)
{
    const replica_t *x = &m->reps[i];
    return x->st == SERVE_REPLICA_READY && x->ongoing < m->max_ongoing &&
           !(i < 64 && (tried >> i) & 1);
}

typedef struct usable_ctx {
    const rmodel_t *m;
    uint64_t tried;
} usable_ctx_t;

static bool usable(size_t rep, void *arg)
{
    usable_ctx_t *u = arg;
    return rep < u->m->nreps && can_take(u->m, rep, u->tried);
}

/* Prefix affinity (SGLang's cache-aware router, Ray Serve LLM's
 * PrefixCacheAffinityRouter): while the free replicas are balanced (the
 * busiest within imbalanced_threshold of the least busy), the replica
 * holding the longest prefix of the prompt takes it when at least
 * match_rate_threshold of the prompt matched, else the one holding the
 * fewest prefixes (the most room in its cache); unbalanced, power of two
 * choices. The prompt's prefixes are then remembered for the replica
 * chosen. -2: no choice made here. Under r->mu. */
static long pick_affinity(rmodel_t *m, const req_t *q, uint64_t tried, const size_t *cand, size_t n)
{
    unsigned lo = UINT32_MAX, hi = 0;
    for (size_t k = 0; k < n; k++) {
        unsigned o = m->reps[cand[k]].ongoing;
        lo = o < lo ? o : lo;
        hi = o > hi ? o : hi;
    }
    if (hi - lo > m->imbalanced_threshold)
        return -2;
    usable_ctx_t u = {m, tried};
    size_t blocks = 0;
    long a = serve_affinity_match(m->aff, q->h, q->nh, &blocks, usable, &u);
    size_t matched = blocks * SERVE_AFFINITY_BLOCK;
    if (matched > q->prefix_len)
        matched = q->prefix_len;
    if (a >= 0 && (double)matched >= m->match_rate_threshold * (double)q->prefix_len) {
        m->affinity_hits++;
        return a;
    }
    size_t best = cand[0];
    for (size_t k = 1; k < n; k++) {
        size_t hb = serve_affinity_held(m->aff, best), hk = serve_affinity_held(m->aff, cand[k]);
        if (hk < hb || (hk == hb && m->reps[cand[k]].ongoing < m->reps[best].ongoing))
            best = cand[k];
    }
    return (long)best;
}

/* Power of two choices among model m's free ready replicas not in tried
 * (a bit per slot, the first 64), or prefix affinity where the model has
 * it and the request a prompt. Under r->mu. */
static long pick(serve_router_t *r, rmodel_t *m, const req_t *q, uint64_t tried)
{
    size_t cand[SERVE_MAX_REPLICAS], n = 0;
    for (size_t i = 0; i < m->nreps; i++)
        if (can_take(m, i, tried))
            cand[n++] = i;
    if (n == 0)
        return -1;
    long got = -2;
    if (m->aff && q->nh)
        got = pick_affinity(m, q, tried, cand, n);
    if (got == -2 && n == 1)
        got = (long)cand[0];
    if (got == -2) {
        size_t a = next_rand(r) % n, b = next_rand(r) % (n - 1);
        if (b >= a)
            b++;
        got = (long)(m->reps[cand[a]].ongoing <= m->reps[cand[b]].ongoing ? cand[a] : cand[b]);
    }
    if (m->aff && q->nh) {
        usable_ctx_t u = {m, tried};
        serve_affinity_insert(m->aff, q->h, q->nh, (size_t)got, usable, &u);
    }
    return got;
}

/* ---- the pool of idle connections to each replica (under r->mu) ---- */

static void pool_drain(replica_t *x)
{
    while (x->nidle)
        close(x->idle[--x->nidle]);
}

/* A pooled connection to x, the newest first; -1 none. The caller checks
 * that it is still open. */
static int pool_take(replica_t *x)
{
    int64_t now = cr_mono_ms();
    while (x->nidle) {
        x->nidle--;
        if (now - x->idle_ms[x->nidle] < POOL_IDLE_MS)
            return x->idle[x->nidle];
        close(x->idle[x->nidle]);
    }
    return -1;
}

/* Whether a pooled connection is still usable: nothing to read (no EOF,
 * no stray bytes) and no error. */
static bool conn_alive(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) == 0;
}

static bool any_ready(rmodel_t *m, uint64_t tried)
{
    for (size_t i = 0; i < m->nreps; i++)
        if (m->reps[i].st == SERVE_REPLICA_READY && !(i < 64 && (tried >> i) & 1))
            return true;
    return false;
}

static void release(req_t *q)
{
    serve_router_t *r = q->r;
    if (!q->held)
        return;
    pthread_mutex_lock(&r->mu);
    if (q->rep < q->m->nreps && q->m->reps[q->rep].ongoing > 0)
        q->m->reps[q->rep].ongoing--;
    pthread_cond_signal(&q->m->cv);
    pthread_mutex_unlock(&r->mu);
    q->held = false;
}

/* The reply was read whole: its token counts go to the model's, and its
 * connection back to the replica's pool when the replica is the same and
 * still takes requests. */
static void finish(req_t *q)
{
    if (q->finished || !q->up.done || q->up.failed)
        return;
    q->finished = true;
    serve_usage_end(&q->usage);
    serve_router_t *r = q->r;
    bool reuse = r->keepalive && serve_upstream_reusable(&q->up);
    pthread_mutex_lock(&r->mu);
    if (q->usage.prompt >= 0) {
        q->m->prompt_tokens += (uint64_t)q->usage.prompt;
        q->m->completion_tokens += (uint64_t)q->usage.completion;
        q->m->counted++;
    }
    if (reuse && q->rep < q->m->nreps) {
        replica_t *x = &q->m->reps[q->rep];
        if (x->st == SERVE_REPLICA_READY && x->port == q->port && x->nidle < r->keepalive &&
            x->nidle < POOL_CAP) {
            x->idle[x->nidle] = q->up.fd;
            x->idle_ms[x->nidle++] = cr_mono_ms();
            q->up.fd = -1;
        }
    }
    pthread_mutex_unlock(&r->mu);
    serve_upstream_close(&q->up);
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    CR_UNUSED(pos);
    req_t *q = cls;
    if (q->ended)
        return MHD_CONTENT_READER_END_OF_STREAM;
    ssize_t n = serve_upstream_read(&q->up, buf, max, q->r->timeout_ms);
    if (n > 0) {
        serve_usage_feed(&q->usage, buf, (size_t)n);
        if (q->up.done)
            finish(q); /* a sized reply: microhttpd may not ask again */
        return n;
    }
    q->ended = true;
    if (q->up.done) {
        finish(q);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* the replica went away (or stalled) mid-reply */
    pthread_mutex_lock(&q->r->mu);
    q->m->errors++;
    if (q->rep < q->m->nreps) {
        q->m->reps[q->rep].failures++;
        if (q->m->reps[q->rep].st == SERVE_REPLICA_READY) {
            q->m->reps[q->rep].st = SERVE_REPLICA_DOWN; /* the manager checks it again */
            pool_drain(&q->m->reps[q->rep]);
        }
    }
    pthread_mutex_unlock(&q->r->mu);
    if (q->sse) {
        int k = snprintf(buf, max,
                         "data: {\"error\":{\"message\":\"the replica serving this stream went "
                         "away (%s); retry the request\",\"type\":\"server_error\",\"param\":null,"
                         "\"code\":\"replica_lost\"}}\n\n",
                         n == -ETIMEDOUT ? "no data within the request timeout" : "it ended");
        if (k > 0 && (size_t)k < max)
            return k;
    }
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void req_unref(req_t *q)
{
    if (__atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    serve_upstream_close(&q->up);
    release(q);
    __atomic_sub_fetch(&q->r->body_bytes, q->body.len, __ATOMIC_RELAXED);
    cr_buf_free(&q->body);
    serve_usage_fini(&q->usage);
    free(q->h);
    free(q);
}

static void reader_free(void *cls)
{
    req_t *q = cls;
    finish(q);
    serve_upstream_close(&q->up);
    release(q);
    req_unref(q);
}

/* Sends the request to a replica of model m and queues the reply. */
/* Sends q's request body on its connected upstream (kept alive or not)
 * within what is left until deadline. */
static int post_upstream(req_t *q, bool keepalive, const char *url, const char *host,
                         const char *ctype, double deadline)
{
    q->up.keepalive = keepalive;
    return serve_upstream_request(&q->up, "POST", url, host, ctype ? ctype : "application/json",
                                  NULL, q->body.s, q->body.len, (int)((deadline - now_s()) * 1000));
}

static enum MHD_Result proxy(serve_router_t *r, struct MHD_Connection *c, req_t *q, rmodel_t *m,
                             const char *url)
{
    double t0 = now_s(), deadline = t0 + r->timeout_ms / 1000.0;
    uint64_t tried = 0;
    const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    pthread_mutex_lock(&r->mu);
    m->requests++;
    for (int attempt = 0;; attempt++) {
        long i = pick(r, m, q, tried);
        if (i < 0) {
            if (m->queued >= m->max_queued) {
                m->rejected++;
                pthread_mutex_unlock(&r->mu);
                char msg[256];
                snprintf(msg, sizeof(msg),
                         "model '%s' is at capacity: every replica has max_ongoing_requests and "
                         "%u requests wait; retry later",
                         m->id, m->queued);
                return send_error(c, 503, "server_error", "overloaded", msg, r->retry_after);
            }
            if (tried && !any_ready(m, tried) && any_ready(m, 0)) {
                /* the replicas left were all tried: start over with them */
                tried = 0;
                continue;
            }
            m->queued++;
            while ((i = pick(r, m, q, tried)) < 0 && !r->stopping) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                double left = deadline - now_s();
                if (left <= 0)
                    break;
                if (left > 0.25)
                    left = 0.25; /* a tried replica coming back is not signalled */
                ts.tv_sec += (time_t)left;
                ts.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&m->cv, &r->mu, &ts);
                if (tried && !any_ready(m, tried))
                    tried = 0;
            }
            m->queued--;
            if (i < 0) {
                m->errors++;
                pthread_mutex_unlock(&r->mu);
                char msg[256];
                snprintf(msg, sizeof(msg),
                         "no replica of model '%s' became free within the request timeout; "
                         "`corral serve status` says why",
                         m->id);
                return send_error(c, 503, "server_error", "no_replica", msg, r->retry_after);
            }
        }
        replica_t *x = &m->reps[i];
        x->ongoing++;
        x->requests++;
        char host[64];
        unsigned port = x->port;
        snprintf(host, sizeof(host), "%s", x->host);
        int fd;
        while ((fd = pool_take(x)) >= 0 && !conn_alive(fd))
            close(fd); /* closed by the replica while idle */
        if (fd < 0)
            m->connects++;
        else
            m->reused++;
        pthread_mutex_unlock(&r->mu);
        q->m = m;
        q->rep = (size_t)i;
        q->port = port;
        q->held = true;
        int err = 0;
        if (fd >= 0)
            serve_upstream_attach(&q->up, fd);
        else
            err = serve_upstream_connect(&q->up, host, port, 2000);
        if (!err)
            err = post_upstream(q, r->keepalive > 0, url, host, ctype, deadline);
        if (err == -EPIPE && fd >= 0) {
            /* the replica closed the idle connection as we sent: the
             * request never reached it, so a new connection, not a failure */
            serve_upstream_close(&q->up);
            __atomic_add_fetch(&m->connects, 1, __ATOMIC_RELAXED);
            err = serve_upstream_connect(&q->up, host, port, 2000);
            if (!err)
                err = post_upstream(q, r->keepalive > 0, url, host, ctype, deadline);
        }
        if (!err) {
            double ttfb = now_s() - t0;
            pthread_mutex_lock(&r->mu);
            m->ttfb_count++;
            m->ttfb_sum += ttfb;
            for (size_t b = 0; b < CR_ARRAY_SIZE(ttfb_bounds); b++)
                if (ttfb <= ttfb_bounds[b])
                    m->ttfb_le[b]++;
            if (q->up.status >= 500)
                m->errors++;
            pthread_mutex_unlock(&r->mu);
            break;
        }
        serve_upstream_close(&q->up);
        release(q);
        pthread_mutex_lock(&r->mu);
        bool before_first_byte = err != CR_EPARSE && err != -ETIMEDOUT;
        if (i < (long)m->nreps) {
            m->reps[i].failures++;
            if (before_first_byte && m->reps[i].st == SERVE_REPLICA_READY &&
                m->reps[i].port == port) {
                m->reps[i].st = SERVE_REPLICA_DOWN;
                pool_drain(&m->reps[i]);
            }
        }
        if (!before_first_byte || attempt >= 8 || now_s() >= deadline) {
            m->errors++;
            pthread_mutex_unlock(&r->mu);
            char msg[256];
            snprintf(msg, sizeof(msg), "the replica of model '%s' failed the request (%s)", m->id,
                     err == CR_EPARSE ? "its reply is not HTTP" : strerror(-err));
            return send_error(c, 502, "server_error", "bad_gateway", msg, 0);
        }
        m->retries++;
        if (i < 64)
            tried |= 1ull << i;
    }
    q->sse = strncasecmp(q->up.content_type, "text/event-stream", 17) == 0;
    serve_usage_init(&q->usage, q->sse);
    __atomic_add_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
    struct MHD_Response *resp = MHD_create_response_from_callback(
        q->up.content_length >= 0 ? (uint64_t)q->up.content_length : MHD_SIZE_UNKNOWN, PIECE,
        reader, q, reader_free);
    if (!resp) {
        reader_free(q);
        return MHD_NO;
    }
    if (q->up.content_type[0])
        MHD_add_response_header(resp, "Content-Type", q->up.content_type);
    if (q->sse) {
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    }
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)q->up.status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result models_list(serve_router_t *r, struct MHD_Connection *c)
{
    json_t *data = json_array();
    for (size_t i = 0; i < r->nmodels; i++)
        json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", r->models[i].id, "object",
                                              "model", "created", 0, "owned_by", "corral"));
    json_t *j = json_pack("{s:s,s:o}", "object", "list", "data", data);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    enum MHD_Result ret = send_text(c, 200, "application/json", s, 0);
    free(s);
    return ret;
}

static void metrics_text(serve_router_t *r, cr_buf_t *b)
{
    pthread_mutex_lock(&r->mu);
    cr_buf_printf(b,
                  "# HELP corral_serve_http_requests_total HTTP requests the router took.\n"
                  "# TYPE corral_serve_http_requests_total counter\n"
                  "corral_serve_http_requests_total %llu\n"
                  "# HELP corral_serve_unauthorized_total Requests refused for a missing or "
                  "wrong API key.\n"
                  "# TYPE corral_serve_unauthorized_total counter\n"
                  "corral_serve_unauthorized_total %llu\n",
                  (unsigned long long)r->http_requests, (unsigned long long)r->unauthorized);
    /* per model: name, help, value */
    static const char *const counters[][2] = {
        {"requests", "Requests routed to the model."},
        {"errors", "Requests that failed (no replica, a replica's 5xx or its loss)."},
        {"rejected", "Requests refused with 503 because the queue was full."},
        {"retries", "Requests sent again to another replica before their first byte."},
        {"prompt_tokens", "Prompt tokens of the replies, from the engine's usage."},
        {"completion_tokens", "Completion tokens of the replies, from the engine's usage."},
        {"usage_replies", "Replies whose engine reported usage (counted in the token totals)."},
        {"upstream_connections", "New connections the router opened to replicas."},
        {"upstream_reused", "Requests sent on a kept-alive connection to a replica."},
        {"prefix_hits", "Requests that went to the replica holding their prompt's prefix."},
    };
    for (size_t k = 0; k < CR_ARRAY_SIZE(counters); k++) {
        cr_buf_printf(b, "# HELP corral_serve_%s_total %s\n# TYPE corral_serve_%s_total counter\n",
                      counters[k][0], counters[k][1], counters[k][0]);
        for (size_t i = 0; i < r->nmodels; i++) {
            rmodel_t *m = &r->models[i];
            uint64_t v[] = {
                m->requests,          m->errors,  m->rejected, m->retries, m->prompt_tokens,
                m->completion_tokens, m->counted, m->connects, m->reused,  m->affinity_hits};
            cr_buf_printf(b, "corral_serve_%s_total{model=\"%s\"} %llu\n", counters[k][0], m->id,
                          (unsigned long long)v[k]);
        }
    }
    cr_buf_printf(b, "# HELP corral_serve_queued_requests Requests waiting for a free replica.\n"
                     "# TYPE corral_serve_queued_requests gauge\n");
    for (size_t i = 0; i < r->nmodels; i++)
        cr_buf_printf(b, "corral_serve_queued_requests{model=\"%s\"} %u\n", r->models[i].id,
                      r->models[i].queued);
    cr_buf_printf(b, "# HELP corral_serve_ttfb_seconds Time to the reply's headers.\n"
                     "# TYPE corral_serve_ttfb_seconds histogram\n");
    for (size_t i = 0; i < r->nmodels; i++) {
        rmodel_t *m = &r->models[i];
        for (size_t k = 0; k < CR_ARRAY_SIZE(ttfb_bounds); k++)
            cr_buf_printf(b, "corral_serve_ttfb_seconds_bucket{model=\"%s\",le=\"%g\"} %llu\n",
                          m->id, ttfb_bounds[k], (unsigned long long)m->ttfb_le[k]);
        cr_buf_printf(b,
                      "corral_serve_ttfb_seconds_bucket{model=\"%s\",le=\"+Inf\"} %llu\n"
                      "corral_serve_ttfb_seconds_sum{model=\"%s\"} %.6f\n"
                      "corral_serve_ttfb_seconds_count{model=\"%s\"} %llu\n",
                      m->id, (unsigned long long)m->ttfb_count, m->id, m->ttfb_sum, m->id,
                      (unsigned long long)m->ttfb_count);
    }
    cr_buf_printf(b, "# HELP corral_serve_replica_ongoing_requests Requests a replica serves now.\n"
                     "# TYPE corral_serve_replica_ongoing_requests gauge\n");
    for (size_t i = 0; i < r->nmodels; i++)
        for (size_t k = 0; k < r->models[i].nreps; k++)
            cr_buf_printf(b,
                          "corral_serve_replica_ongoing_requests{model=\"%s\",replica=\"%zu\","
                          "state=\"%s\"} %u\n",
                          r->models[i].id, k, serve_replica_state_name(r->models[i].reps[k].st),
                          r->models[i].reps[k].ongoing);
    cr_buf_printf(b, "# HELP corral_serve_replica_requests_total Requests sent to a replica.\n"
                     "# TYPE corral_serve_replica_requests_total counter\n");
    for (size_t i = 0; i < r->nmodels; i++)
        for (size_t k = 0; k < r->models[i].nreps; k++)
            cr_buf_printf(
                b, "corral_serve_replica_requests_total{model=\"%s\",replica=\"%zu\"} %llu\n",
                r->models[i].id, k, (unsigned long long)r->models[i].reps[k].requests);
    cr_buf_printf(b, "# HELP corral_serve_replica_idle_connections Kept-alive connections to a "
                     "replica, idle now.\n"
                     "# TYPE corral_serve_replica_idle_connections gauge\n");
    for (size_t i = 0; i < r->nmodels; i++)
        for (size_t k = 0; k < r->models[i].nreps; k++)
            cr_buf_printf(
                b, "corral_serve_replica_idle_connections{model=\"%s\",replica=\"%zu\"} %u\n",
                r->models[i].id, k, r->models[i].reps[k].nidle);
    pthread_mutex_unlock(&r->mu);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **req_cls)
{
    CR_UNUSED(version);
    serve_router_t *r = cls;
    req_t *q = *req_cls;
    if (!q) {
        q = cr_calloc(1, sizeof(*q));
        q->r = r;
        q->up.fd = -1;
        q->refs = 1;
        *req_cls = q;
        return MHD_YES;
    }
    if (*upload_size) {
        if (q->too_big || q->body.len + *upload_size > BODY_MAX ||
            __atomic_add_fetch(&r->body_bytes, *upload_size, __ATOMIC_RELAXED) > BODIES_MAX) {
            if (!q->too_big && q->body.len + *upload_size <= BODY_MAX)
                __atomic_sub_fetch(&r->body_bytes, *upload_size, __ATOMIC_RELAXED);
            q->too_big = true;
        } else {
            cr_buf_append(&q->body, upload, *upload_size);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&r->mu);
    r->http_requests++;
    pthread_mutex_unlock(&r->mu);
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/health") == 0 && get)
        return send_text(c, 200, "text/plain", "ok\n", 0);
    if (strncmp(url, "/-/", 3) == 0) {
        const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Corral-Admin");
        if (!r->admin || !tok || strcmp(tok, r->admin) != 0)
            return send_error(c, 403, "permission_error", "forbidden",
                              "the router's admin calls need its admin token", 0);
        if (strcmp(url, "/-/status") == 0 && get) {
            char *s = serve_router_status(r);
            enum MHD_Result ret = send_text(c, 200, "application/json", s, 0);
            free(s);
            return ret;
        }
        return send_error(c, 404, "invalid_request_error", "not_found", "no such admin call", 0);
    }
    if (!authorized(r, c)) {
        pthread_mutex_lock(&r->mu);
        r->unauthorized++;
        pthread_mutex_unlock(&r->mu);
        return send_error(c, 401, "invalid_request_error", "invalid_api_key",
                          "missing or wrong API key: send 'Authorization: Bearer KEY' with a key "
                          "of the router's --api-key-file",
                          0);
    }
    if (strcmp(url, "/metrics") == 0 && get) {
        cr_buf_t b = {0};
        metrics_text(r, &b);
        enum MHD_Result ret = send_text(c, 200, "text/plain; version=0.0.4", b.s ? b.s : "", 0);
        cr_buf_free(&b);
        return ret;
    }
    if (strcmp(url, "/v1/models") == 0 && get)
        return models_list(r, c);
    bool routed = strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/v1/completions") == 0 ||
                  strcmp(url, "/v1/embeddings") == 0;
    if (!routed)
        return send_error(c, 404, "invalid_request_error", "unknown_url",
                          "unknown path; the router serves /v1/models, /v1/chat/completions, "
                          "/v1/completions, /v1/embeddings and /metrics",
                          0);
    if (!post)
        return send_error(c, 405, "invalid_request_error", "method_not_allowed",
                          "use POST for this path", 0);
    if (q->too_big) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "the request body is over %u bytes (or the router holds too "
                 "many large requests now)",
                 BODY_MAX);
        return send_error(c, 413, "invalid_request_error", "request_too_large", msg, 0);
    }
    serve_request_t rq;
    int perr = serve_request_parse(q->body.s, q->body.len, &rq);
    if (perr == SERVE_REQ_INVALID_JSON)
        return send_error(c, 400, "invalid_request_error", "invalid_json",
                          "the request body is not a JSON object", 0);
    if (perr)
        return send_error(c, 400, "invalid_request_error", "missing_model",
                          "the request has no \"model\"; GET /v1/models lists them", 0);
    const char *model = rq.model;
    rmodel_t *m = NULL;
    for (size_t i = 0; i < r->nmodels && !m; i++)
        if (strcmp(r->models[i].id, model) == 0)
            m = &r->models[i];
    if (!m) {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "The model '%.200s' does not exist here; GET /v1/models lists the models this "
                 "router serves",
                 model);
        serve_request_free(&rq);
        return send_error(c, 404, "invalid_request_error", "model_not_found", msg, 0);
    }
    if (m->aff && rq.prefix_len) {
        q->h = cr_malloc(SERVE_AFFINITY_BLOCKS * sizeof(*q->h));
        q->nh = serve_affinity_hashes(rq.prefix, rq.prefix_len, q->h, SERVE_AFFINITY_BLOCKS);
        q->prefix_len = rq.prefix_len;
    }
    serve_request_free(&rq);
    return proxy(r, c, q, m, url);
}

/* The plain loopback listener of a TLS router: the admin calls and
 * /health only. */
static enum MHD_Result handle_admin(void *cls, struct MHD_Connection *c, const char *url,
                                    const char *method, const char *version, const char *upload,
                                    size_t *upload_size, void **req_cls)
{
    if (strncmp(url, "/-/", 3) != 0 && strcmp(url, "/health") != 0)
        return send_error(c, 404, "invalid_request_error", "unknown_url",
                          "this is the router's admin listener; the models are served over TLS", 0);
    return handle(cls, c, url, method, version, upload, upload_size, req_cls);
}

static void completed(void *cls, struct MHD_Connection *c, void **req_cls,
                      enum MHD_RequestTerminationCode toe)
{
    CR_UNUSED(cls);
    CR_UNUSED(c);
    CR_UNUSED(toe);
    req_t *q = *req_cls;
    if (!q)
        return;
    *req_cls = NULL;
    req_unref(q);
}

int serve_router_start(const serve_config_t *cfg, const serve_router_opts_t *o,
                       serve_router_t **out, char **errmsg)
{
    *out = NULL;
    const char *host = o && o->host ? o->host : cfg->router_host;
    unsigned port = o && o->port ? o->port : cfg->router_port;
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    /* poll(), not select(): a thousand streams hold two thousand descriptors,
     * past select's FD_SETSIZE */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        *errmsg = cr_asprintf("router host '%s' is not an IP address (give one, such as "
                              "127.0.0.1)",
                              host);
        return CR_EINVAL;
    }
    serve_router_t *r = cr_calloc(1, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->nmodels = cfg->models.n;
    r->models = cr_calloc(r->nmodels, sizeof(*r->models));
    for (size_t i = 0; i < r->nmodels; i++) {
        const serve_model_t *sm = &cfg->models.v[i];
        rmodel_t *m = &r->models[i];
        m->id = cr_strdup(sm->model_id);
        m->max_ongoing = sm->max_ongoing_requests;
        m->max_queued = sm->max_queued_requests;
        m->cap =
            sm->max_replicas + 1 > SERVE_MAX_REPLICAS ? SERVE_MAX_REPLICAS : sm->max_replicas + 1;
        m->reps = cr_calloc(m->cap, sizeof(*m->reps));
        m->prefix_affinity = sm->prefix_affinity;
        m->imbalanced_threshold = sm->imbalanced_threshold;
        m->match_rate_threshold = sm->match_rate_threshold;
        if (sm->prefix_affinity)
            m->aff = serve_affinity_new(AFFINITY_ENTRIES, m->cap);
        pthread_cond_init(&m->cv, NULL);
    }
    size_t nk = 0;
    while (o && o->api_keys && o->api_keys[nk])
        nk++;
    r->keys = cr_calloc(nk + 1, sizeof(char *));
    for (size_t i = 0; i < nk; i++)
        r->keys[i] = cr_strdup(o->api_keys[i]);
    r->admin = o && o->admin_token ? cr_strdup(o->admin_token) : NULL;
    r->retry_after = o && o->retry_after_s ? o->retry_after_s : 1;
    r->keepalive = cfg->upstream_keepalive < POOL_CAP ? cfg->upstream_keepalive : POOL_CAP;
    r->timeout_ms = (int)(cfg->request_timeout_s * 1000);
    r->rng = ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)r ^ 0x9e3779b97f4a7c15ULL;
    bool tls = o && o->tls_cert_pem && o->tls_key_pem;
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        *errmsg = cr_strdup("this libmicrohttpd has no TLS (HTTPS) support; install Debian's "
                            "libmicrohttpd12 (built with GnuTLS) or listen on 127.0.0.1");
        serve_router_stop(r);
        return CR_EINVAL;
    }
    /* TLS adds its key and certificate to the same options */
    struct MHD_OptionItem tlsopt[] = {
        {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, tls ? (void *)o->tls_key_pem : NULL},
        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, tls ? (void *)o->tls_cert_pem : NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    r->d = MHD_start_daemon(
        flags | (tls ? MHD_USE_TLS : 0), (uint16_t)port, NULL, NULL, handle, r,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, completed, r,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)(256u << 10), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)CONN_MEMORY, MHD_OPTION_CONNECTION_LIMIT, 8192u, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(cfg->request_timeout_s + 5), MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
        MHD_OPTION_ARRAY, tlsopt, MHD_OPTION_END);
    if (!r->d && tls) {
        *errmsg = cr_asprintf("cannot listen with TLS on %s:%u: the certificate or key was "
                              "refused (PEM, the key matching the certificate?) or the address "
                              "is taken (%s)",
                              host, port, strerror(errno ? errno : EINVAL));
        serve_router_stop(r);
        return CR_EINVAL;
    }
    if (!r->d) {
        *errmsg = cr_asprintf("cannot listen on %s:%u (%s); is another router or program there? "
                              "Change router.port in the file",
                              host, port, strerror(errno ? errno : EADDRINUSE));
        serve_router_stop(r);
        return -EADDRINUSE;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(r->d, MHD_DAEMON_INFO_BIND_PORT);
    r->port = di ? di->port : port;
    r->admin_port = r->port;
    if (tls) {
        struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        r->admin_d = MHD_start_daemon(
            MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                MHD_USE_ERROR_LOG,
            0, NULL, NULL, handle_admin, r, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&lo,
            MHD_OPTION_NOTIFY_COMPLETED, completed, r, MHD_OPTION_THREAD_STACK_SIZE,
            (size_t)(256u << 10), MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_CONNECTION_TIMEOUT,
            30u, MHD_OPTION_END);
        di = r->admin_d ? MHD_get_daemon_info(r->admin_d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
        if (!di) {
            *errmsg = cr_strdup("cannot listen on 127.0.0.1 for the router's admin calls");
            serve_router_stop(r);
            return -EADDRINUSE;
        }
        r->admin_port = di->port;
    }
    *out = r;
    return 0;
}

void serve_router_stop(serve_router_t *r)
{
    if (!r)
        return;
    r->stopping = 1;
    if (r->d) {
        pthread_mutex_lock(&r->mu);
        for (size_t i = 0; i < r->nmodels; i++)
            pthread_cond_broadcast(&r->models[i].cv);
        pthread_mutex_unlock(&r->mu);
        MHD_stop_daemon(r->d);
    }
    if (r->admin_d)
        MHD_stop_daemon(r->admin_d);
    for (size_t i = 0; i < r->nmodels; i++) {
        for (size_t k = 0; k < r->models[i].cap; k++)
            pool_drain(&r->models[i].reps[k]);
        serve_affinity_free(r->models[i].aff);
        free(r->models[i].id);
        free(r->models[i].reps);
        pthread_cond_destroy(&r->models[i].cv);
    }
    free(r->models);
    for (size_t i = 0; r->keys && r->keys[i]; i++)
        free(r->keys[i]);
    free(r->keys);
    free(r->admin);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

unsigned serve_router_port(const serve_router_t *r)
{
    return r->port;
}

unsigned serve_router_admin_port(const serve_router_t *r)
{
    return r->admin_port;
}

void serve_router_set_replica(serve_router_t *r, size_t m, size_t i, const char *host,
                              unsigned port, serve_replica_state_t st, const char *job,
                              const char *node)
{
    if (m >= r->nmodels || i >= r->models[m].cap)
        return;
    pthread_mutex_lock(&r->mu);
    rmodel_t *md = &r->models[m];
    while (md->nreps <= i)
        md->nreps++;
    replica_t *x = &md->reps[i];
    bool moved = host && (strcmp(x->host, host) != 0 || x->port != port);
    if (moved) {
        snprintf(x->host, sizeof(x->host), "%s", host);
        x->port = port;
        x->failures = 0;
    }
    if (moved || st != SERVE_REPLICA_READY) {
        /* another process, or none that takes requests: its connections
         * and what its cache held are gone */
        pool_drain(x);
        if (md->aff && (moved || st == SERVE_REPLICA_DOWN || st == SERVE_REPLICA_NONE))
            serve_affinity_forget(md->aff, i);
    }
    if (job)
        snprintf(x->job, sizeof(x->job), "%s", job);
    if (node)
        snprintf(x->node, sizeof(x->node), "%s", node);
    x->st = st;
    pthread_cond_broadcast(&md->cv);
    pthread_mutex_unlock(&r->mu);
}

serve_replica_state_t serve_router_replica_state(serve_router_t *r, size_t m, size_t i)
{
    pthread_mutex_lock(&r->mu);
    serve_replica_state_t st =
        m < r->nmodels && i < r->models[m].nreps ? r->models[m].reps[i].st : SERVE_REPLICA_NONE;
    pthread_mutex_unlock(&r->mu);
    return st;
}

unsigned serve_router_replica_ongoing(serve_router_t *r, size_t m, size_t i)
{
    pthread_mutex_lock(&r->mu);
    unsigned n = m < r->nmodels && i < r->models[m].nreps ? r->models[m].reps[i].ongoing : 0;
    pthread_mutex_unlock(&r->mu);
    return n;
}

unsigned serve_router_queued(serve_router_t *r, size_t m)
{
    pthread_mutex_lock(&r->mu);
    unsigned n = m < r->nmodels ? r->models[m].queued : 0;
    pthread_mutex_unlock(&r->mu);
    return n;
}

size_t serve_router_nreplicas(serve_router_t *r, size_t m)
{
    pthread_mutex_lock(&r->mu);
    size_t n = m < r->nmodels ? r->models[m].nreps : 0;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void serve_router_set_note(serve_router_t *r, size_t m, const char *note)
{
    if (m >= r->nmodels)
        return;
    pthread_mutex_lock(&r->mu);
    snprintf(r->models[m].note, sizeof(r->models[m].note), "%s", note ? note : "");
    pthread_mutex_unlock(&r->mu);
}

char *serve_router_status(serve_router_t *r)
{
    json_t *models = json_array();
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->nmodels; i++) {
        rmodel_t *m = &r->models[i];
        json_t *reps = json_array();
        for (size_t k = 0; k < m->nreps; k++) {
            replica_t *x = &m->reps[k];
            json_array_append_new(
                reps,
                json_pack("{s:i,s:s,s:s,s:i,s:i,s:I,s:I,s:s,s:s}", "replica", (int)k, "state",
                          serve_replica_state_name(x->st), "host", x->host, "port", (int)x->port,
                          "ongoing", (int)x->ongoing, "requests", (json_int_t)x->requests,
                          "failures", (json_int_t)x->failures, "job", x->job, "node", x->node));
        }
        json_array_append_new(
            models,
            json_pack("{s:s,s:i,s:I,s:I,s:I,s:s,s:o}", "model_id", m->id, "queued", (int)m->queued,
                      "requests", (json_int_t)m->requests, "errors", (json_int_t)m->errors,
                      "rejected", (json_int_t)m->rejected, "note", m->note, "replicas", reps));
    }
    pthread_mutex_unlock(&r->mu);
    json_t *j = json_pack("{s:i,s:o}", "port", (int)r->port, "models", models);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}
