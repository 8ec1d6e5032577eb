/* The router (docs/serve.md "The router"): an HTTP server in front of the
 * replicas, driven by events: one loop thread per core (at most
 * LOOPS_MAX), each on its own listening socket of the router's port
 * (SO_REUSEPORT: the kernel spreads the clients over the loops), with its
 * client connections and the sockets to the replicas of their requests in
 * one epoll set. No call blocks. Plain HTTP goes through the router's own
 * front end ("the front end" below; serve/http.c parses): a connection
 * reads a request, routes it, and passes the reply through, reading the
 * replica only while the client's socket takes what was read (one piece
 * per connection: backpressure; the kernel's buffers then stop the
 * replica). With TLS each loop runs a microhttpd daemon (GnuTLS) in
 * external epoll mode instead: a request that waits is a suspended
 * microhttpd connection, resumed once the reply's headers came or the
 * router's answer (an error) is known, and its reply callback asks for a
 * piece only once the last one was sent.
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
 * replica's stack of idle descriptors, shared by the loops); the replies'
 * token usage is read as they pass (request.c) for /metrics. What the
 * loops share (models, replicas, pools, counters) is under r->mu; a
 * request and its replica's socket belong to one loop. */
#include "serve.h"
#include "http.h"
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
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
/* event loops: one per core, at most this many */
#define LOOPS_MAX 8
/* how often a loop looks at its waiting requests (deadlines; a queued
 * request tries again: a replica coming back up is not signalled) */
#define TICK_MS 250
/* connecting to a replica */
#define CONNECT_MS 2000
/* freed requests a loop keeps (about 9 KiB each) */
#define SPARE_MAX 64

typedef struct replica {
    char host[64];
    unsigned port;
    serve_replica_state_t st;
    unsigned ongoing;
    uint64_t requests, failures;
    char job[48], node[64];
    /* the pool: a stack, the newest last; each connection stays in the
     * epoll set of the loop that used it last (its events ignored there
     * while no request owns it), so that this loop takes it again
     * without epoll_ctl calls */
    int idle[POOL_CAP];
    int idle_ep[POOL_CAP]; /* that loop's epoll descriptor; -1 none */
    int64_t idle_ms[POOL_CAP];
    unsigned nidle;
} replica_t;

typedef struct rmodel {
    char *id;
    unsigned max_ongoing, max_queued;
    replica_t *reps; /* cap entries */
    size_t nreps, cap;
    unsigned queued;
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

typedef struct req req_t;
typedef struct conn conn_t;

/* One event loop: its thread, its microhttpd daemon and the requests of
 * that daemon's connections that went past their body. */
typedef struct loop {
    serve_router_t *r;
    struct MHD_Daemon *d;
    int ep;   /* epoll: the daemon's epoll descriptor, wake, the replicas' sockets */
    int wake; /* eventfd: a queued request may go now, or the router stops */
    pthread_t th;
    bool started;
    bool resumed; /* a connection was resumed: run the daemon */
    req_t *head, *tail;
    req_t *spare; /* freed requests kept for the next ones (no malloc, no trim) */
    unsigned nspare;
    req_t **owner; /* by descriptor: the request that owns a replica's socket */
    size_t nowner;
    /* the router's own HTTP front end (plain HTTP; d is NULL then) */
    int lfd;       /* the listening socket */
    conn_t *conns; /* the client connections, a list */
    size_t nconns;
    conn_t *kick;     /* connections with something to do (drive) */
    conn_t *dead;     /* closed in this round, freed after it */
    unsigned idle_ms; /* a client connection's inactivity limit */
} loop_t;

/* what an epoll event of a loop is about: these two, else a replica's
 * socket (EV_FD + its descriptor) */
enum { EV_MHD = 0, EV_WAKE = 1, EV_LISTEN = 2, EV_FD = 3 };
/* a client connection's events carry its address with this bit */
#define EV_CONN (1ull << 63)

struct serve_router {
    loop_t loops[LOOPS_MAX];
    size_t nloops;
    loop_t admin; /* with TLS: the admin calls on 127.0.0.1, plain (its own threads) */
    unsigned admin_port;
    pthread_mutex_t mu;
    rmodel_t *models;
    size_t nmodels;
    char **keys; /* NULL-terminated */
    char *admin_token;
    unsigned retry_after, port;
    unsigned keepalive; /* idle connections kept per replica */
    int timeout_ms;
    uint64_t rng;
    uint64_t http_requests, unauthorized;
    uint64_t body_bytes; /* held by all requests now (atomic) */
    int stopping;        /* atomic */
};

/* where a routed request is */
typedef enum qstate {
    Q_BODY = 0, /* its body arriving, not routed yet */
    Q_QUEUED,   /* waiting for a free replica */
    Q_CONNECT,  /* connecting to its replica */
    Q_SEND,     /* sending the request */
    Q_HEADERS,  /* waiting for the reply's headers */
    Q_REPLY,    /* the reply's headers read: its body passes through */
    Q_ANSWER,   /* the router's own answer (an error) to send */
} qstate_t;

struct req {
    serve_router_t *r;
    loop_t *lp; /* NULL on the admin listener */
    struct MHD_Connection *c;
    conn_t *cn;         /* or the front end's connection (then c is NULL) */
    req_t *prev, *next; /* in lp's list, from routing on */
    bool listed, suspended;
    qstate_t st;
    cr_buf_t body;
    bool too_big;
    /* routing */
    const char *url; /* one of the routed paths (a literal) */
    char *ctype;     /* the request's Content-Type; NULL none */
    uint64_t tried;  /* replicas that failed it (a bit per slot, the first 64) */
    int attempt;
    bool queued;  /* counted in its model's queue */
    bool counted; /* in its model's requests */
    double t0;
    int64_t deadline_ms, io_deadline_ms; /* the request's; the wait's now (0 none) */
    /* the request to the replica */
    char host[64];
    bool pooled;   /* its connection came from the pool */
    bool watched;  /* up.fd is in the loop's epoll set, and q its owner */
    cr_buf_t head; /* the request line and headers */
    size_t sent;   /* of head and body */
    bool waiting;  /* the reply callback waits for the replica's data */
    int stall;     /* why the wait ended without data: -ETIMEDOUT, -ECANCELED */
    /* the router's answer */
    unsigned ans_status, ans_retry;
    const char *ans_type, *ans_code;
    char ans_msg[320];
    /* while proxying */
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
    serve_upstream_t up; /* last: its buffer is not cleared for each request */
};

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

/* OpenAI's error shape: {"error": {"message", "type", "param", "code"}}
 * (malloc'ed; NULL out of memory). */
static char *error_json(const char *type, const char *code, const char *msg)
{
    json_t *j = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg, "type", type, "param",
                          "code", code);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *code, const char *msg, unsigned retry_after)
{
    char *s = error_json(type, code, msg);
    enum MHD_Result ret = send_text(c, status, "application/json", s ? s : "{}", retry_after);
    free(s);
    return ret;
}

/* Whether the Authorization header's value h (NULL none) has a key of the
 * router's. */
static bool key_ok(serve_router_t *r, const char *h)
{
    if (!r->keys || !r->keys[0])
        return true;
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

static bool authorized(serve_router_t *r, struct MHD_Connection *c)
{
    return key_ok(r, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"));
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
        close(x->idle[--x->nidle]); /* closing takes it out of its epoll set */
}

/* A pooled connection to x for the loop of epoll set ep, the newest of
 * that loop's first, else the newest; -1 none. *in_ep: whether it is in
 * ep's set already (else it is in none). A connection idle for longer
 * than POOL_CHECK_MS is checked first (the replica may have closed it);
 * a fresher one that was closed fails its send or its read with nothing
 * back, and the request goes on a new connection (attempt_failed). */
#define POOL_CHECK_MS 200
static int pool_take(replica_t *x, int ep, bool *in_ep)
{
    int64_t now = cr_mono_ms();
    while (x->nidle) {
        unsigned k = x->nidle - 1;
        for (unsigned j = x->nidle; j-- > 0 && x->idle_ep[k] != ep;)
            if (x->idle_ep[j] == ep)
                k = j;
        int fd = x->idle[k], fep = x->idle_ep[k];
        int64_t idle = now - x->idle_ms[k];
        x->nidle--;
        memmove(&x->idle[k], &x->idle[k + 1], (x->nidle - k) * sizeof(x->idle[0]));
        memmove(&x->idle_ep[k], &x->idle_ep[k + 1], (x->nidle - k) * sizeof(x->idle_ep[0]));
        memmove(&x->idle_ms[k], &x->idle_ms[k + 1], (x->nidle - k) * sizeof(x->idle_ms[0]));
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
        if (idle >= POOL_IDLE_MS || (idle >= POOL_CHECK_MS && poll(&p, 1, 0) != 0)) {
            close(fd); /* too old, or closed by the replica while idle */
            continue;
        }
        if (fep >= 0 && fep != ep)
            epoll_ctl(fep, EPOLL_CTL_DEL, fd, NULL); /* another loop's */
        *in_ep = fep == ep;
        return fd;
    }
    return -1;
}

static bool any_ready(rmodel_t *m, uint64_t tried)
{
    for (size_t i = 0; i < m->nreps; i++)
        if (m->reps[i].st == SERVE_REPLICA_READY && !(i < 64 && (tried >> i) & 1))
            return true;
    return false;
}

static void wake_loops(serve_router_t *r)
{
    uint64_t one = 1;
    for (size_t i = 0; i < r->nloops; i++)
        if (r->loops[i].wake >= 0 && write(r->loops[i].wake, &one, sizeof(one)) < 0) {
            /* full (it holds 2^64-2): the loop is woken already */
        }
}

static void release(req_t *q)
{
    serve_router_t *r = q->r;
    if (!q->held)
        return;
    pthread_mutex_lock(&r->mu);
    if (q->rep < q->m->nreps && q->m->reps[q->rep].ongoing > 0)
        q->m->reps[q->rep].ongoing--;
    bool waiters = q->m->queued > 0;
    pthread_mutex_unlock(&r->mu);
    q->held = false;
    if (waiters)
        wake_loops(r);
}

/* ---- a request's socket to its replica, in its loop's epoll set ---- */

/* The replica's sockets are in their loop's epoll set edge-triggered for
 * both directions from their first use to their close (pooled ones stay
 * there with no owner: their events are ignored), so that a request on a
 * kept connection costs no epoll_ctl. Edge-triggered is enough because a
 * request waits only after the socket said EAGAIN, after its connect
 * started, or after it sent its request (the reply is new data). */
static void own(req_t *q)
{
    loop_t *lp = q->lp;
    int fd = q->up.fd;
    if ((size_t)fd >= lp->nowner) {
        size_t n = lp->nowner ? lp->nowner : 256;
        while (n <= (size_t)fd)
            n *= 2;
        lp->owner = cr_realloc(lp->owner, n * sizeof(*lp->owner));
        memset(lp->owner + lp->nowner, 0, (n - lp->nowner) * sizeof(*lp->owner));
        lp->nowner = n;
    }
    lp->owner[fd] = q;
    if (q->watched)
        return;
    struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                            .data.u64 = EV_FD + (uint64_t)fd};
    if (epoll_ctl(lp->ep, EPOLL_CTL_ADD, fd, &e) == 0)
        q->watched = true;
}

/* The request lets go of its socket (to close it or to pool it). */
static void disown(req_t *q)
{
    if (q->up.fd >= 0 && (size_t)q->up.fd < q->lp->nowner && q->lp->owner[q->up.fd] == q)
        q->lp->owner[q->up.fd] = NULL;
}

/* Closing takes the socket out of the epoll set. */
static void unwatch(req_t *q)
{
    disown(q);
    q->watched = false;
}

static void up_close(req_t *q)
{
    unwatch(q);
    serve_upstream_close(&q->up);
}

static void kick(conn_t *cn);

static void resume(req_t *q)
{
    if (q->cn) {
        kick(q->cn); /* the front end's connection goes on in its loop's round */
        return;
    }
    if (!q->suspended)
        return;
    q->suspended = false;
    q->lp->resumed = true;
    MHD_resume_connection(q->c);
}

/* The router answers q itself (an OpenAI-shaped error): now when the
 * handler runs, else when its connection is resumed. */
static void answer(req_t *q, unsigned status, const char *type, const char *code, unsigned retry,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void answer(req_t *q, unsigned status, const char *type, const char *code, unsigned retry,
                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->ans_msg, sizeof(q->ans_msg), fmt, ap);
    va_end(ap);
    q->st = Q_ANSWER;
    q->ans_status = status;
    q->ans_type = type;
    q->ans_code = code;
    q->ans_retry = retry;
    q->io_deadline_ms = 0;
    resume(q);
}

/* The reply was read whole: its token counts go to the model's, and its
 * connection back to the replica's pool when the replica is the same and
 * still takes requests. */
static void finish(req_t *q)
{
    if (q->finished || !q->up.done || q->up.failed)
        return;
    q->finished = true;
    bool waiters = false;
    serve_usage_end(&q->usage);
    serve_router_t *r = q->r;
    bool reuse = r->keepalive && serve_upstream_reusable(&q->up);
    if (reuse)
        disown(q);
    pthread_mutex_lock(&r->mu);
    if (q->held) {
        /* the replica's slot is free now (release() without its own lock) */
        if (q->rep < q->m->nreps && q->m->reps[q->rep].ongoing > 0)
            q->m->reps[q->rep].ongoing--;
        q->held = false;
        waiters = q->m->queued > 0;
    }
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
            x->idle_ep[x->nidle] = q->watched ? q->lp->ep : -1;
            x->idle_ms[x->nidle++] = cr_mono_ms();
            q->up.fd = -1;
            q->watched = false;
        }
    }
    pthread_mutex_unlock(&r->mu);
    up_close(q);
    if (waiters)
        wake_loops(r);
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    CR_UNUSED(pos);
    req_t *q = cls;
    if (q->ended)
        return MHD_CONTENT_READER_END_OF_STREAM;
    ssize_t n = q->stall ? q->stall : serve_upstream_read(&q->up, buf, max, 0);
    if (n == -EAGAIN) {
        /* nothing yet: the loop resumes the connection when the replica
         * sends more (or the request's timeout passes) */
        q->waiting = true;
        q->io_deadline_ms = cr_mono_ms() + q->r->timeout_ms;
        MHD_suspend_connection(q->c);
        q->suspended = true;
        return 0;
    }
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
    /* the replica went away (or stalled) mid-reply, or the router stops */
    pthread_mutex_lock(&q->r->mu);
    q->m->errors++;
    if (q->rep < q->m->nreps && n != -ECANCELED) {
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
                         n == -ETIMEDOUT   ? "no data within the request timeout"
                         : n == -ECANCELED ? "the router stops"
                                           : "it ended");
        if (k > 0 && (size_t)k < max)
            return k;
    }
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void list_del(req_t *q)
{
    if (!q->listed)
        return;
    if (q->prev)
        q->prev->next = q->next;
    else
        q->lp->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        q->lp->tail = q->prev;
    q->prev = q->next = NULL;
    q->listed = false;
}

static void list_add(req_t *q)
{
    if (q->listed)
        return;
    q->prev = q->lp->tail;
    q->next = NULL;
    if (q->lp->tail)
        q->lp->tail->next = q;
    else
        q->lp->head = q;
    q->lp->tail = q;
    q->listed = true;
}

/* Leaves the model's queue. */
static void dequeue(req_t *q)
{
    if (!q->queued)
        return;
    pthread_mutex_lock(&q->r->mu);
    q->m->queued--;
    pthread_mutex_unlock(&q->r->mu);
    q->queued = false;
}

static void req_unref(req_t *q)
{
    if (--q->refs > 0)
        return;
    if (q->lp) {
        list_del(q);
        up_close(q);
    }
    release(q);
    dequeue(q);
    __atomic_sub_fetch(&q->r->body_bytes, q->body.len, __ATOMIC_RELAXED);
    cr_buf_free(&q->body);
    cr_buf_free(&q->head);
    serve_usage_fini(&q->usage);
    free(q->ctype);
    free(q->h);
    if (q->lp && q->lp->nspare < SPARE_MAX) {
        q->next = q->lp->spare;
        q->lp->spare = q;
        q->lp->nspare++;
        return;
    }
    free(q);
}

/* A new request of loop lp (a spare one when it has one). */
static req_t *req_new(loop_t *lp)
{
    req_t *q;
    if (lp->ep >= 0 && lp->spare) { /* not the admin listener's threads */
        q = lp->spare;
        lp->spare = q->next;
        lp->nspare--;
    } else {
        q = cr_malloc(sizeof(*q));
    }
    memset(q, 0, offsetof(req_t, up));
    serve_upstream_attach(&q->up, -1);
    q->r = lp->r;
    q->lp = lp->ep >= 0 ? lp : NULL;
    q->refs = 1;
    return q;
}

static void reader_free(void *cls)
{
    req_t *q = cls;
    finish(q);
    up_close(q);
    release(q);
    req_unref(q);
}

/* ---- a request's way to a replica: route, connect, send, the reply's
 * headers; each step goes as far as it can without blocking, and the
 * loop calls the next when the socket is ready ---- */

static void route(req_t *q);

/* Sends what is left of the request: 0 all, -EAGAIN, -EPIPE. */
static int send_more(req_t *q)
{
    size_t hl = q->head.len, total = hl + q->body.len;
    while (q->sent < total) {
        struct iovec iov[2];
        int n = 0;
        if (q->sent < hl)
            iov[n++] = (struct iovec){q->head.s + q->sent, hl - q->sent};
        size_t bo = q->sent > hl ? q->sent - hl : 0;
        if (q->body.len > bo)
            iov[n++] = (struct iovec){q->body.s + bo, q->body.len - bo};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(q->up.fd, &mh, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return errno == EAGAIN ? -EAGAIN : -EPIPE; /* a break: nothing came back */
        q->sent += (size_t)w;
    }
    return 0;
}

/* On a connected socket: sends the request as far as the socket takes it. */
static int start_send(req_t *q)
{
    q->up.keepalive = q->r->keepalive > 0;
    char head[1024];
    int n = serve_upstream_head(&q->up, "POST", q->url, q->host,
                                q->ctype ? q->ctype : "application/json", NULL, q->body.len, head,
                                sizeof(head));
    if (n < 0)
        return n;
    q->head.len = 0;
    cr_buf_append(&q->head, head, (size_t)n);
    q->sent = 0;
    q->io_deadline_ms = q->deadline_ms;
    int err = send_more(q);
    q->st = err == -EAGAIN ? Q_SEND : Q_HEADERS;
    return err == -EAGAIN ? 0 : err;
}

/* Starts the request on fd (a pooled connection to the replica) or, with
 * fd -1, on a new connection: 0 under way, or this attempt's error. */
static int begin(req_t *q, int fd, bool in_ep)
{
    q->pooled = fd >= 0;
    if (fd >= 0) {
        serve_upstream_attach(&q->up, fd);
        q->watched = in_ep;
        own(q);
        return start_send(q);
    }
    int err = serve_upstream_connect_start(&q->up, q->host, q->port);
    if (err == -EINPROGRESS) {
        q->st = Q_CONNECT;
        int64_t t = cr_mono_ms() + CONNECT_MS;
        q->io_deadline_ms = t < q->deadline_ms ? t : q->deadline_ms;
        own(q);
        return 0;
    }
    if (err)
        return err;
    own(q);
    return start_send(q);
}

/* This attempt failed with err: a kept connection that the replica had
 * closed is replaced by a new one; else the replica is marked down
 * (before the reply's first byte) and another takes the request, or the
 * client gets 502. */
static void attempt_failed(req_t *q, int err)
{
    serve_router_t *r = q->r;
    rmodel_t *m = q->m;
    if (err == -EPIPE && q->pooled) {
        /* the replica closed the idle connection as we sent: the request
         * never reached it, so a new connection, not a failure */
        up_close(q);
        pthread_mutex_lock(&r->mu);
        m->connects++;
        pthread_mutex_unlock(&r->mu);
        err = begin(q, -1, false);
        if (!err)
            return;
    }
    up_close(q);
    release(q);
    pthread_mutex_lock(&r->mu);
    bool before_first_byte = err != CR_EPARSE && err != -ETIMEDOUT;
    size_t i = q->rep;
    if (i < m->nreps) {
        m->reps[i].failures++;
        if (before_first_byte && m->reps[i].st == SERVE_REPLICA_READY &&
            m->reps[i].port == q->port) {
            m->reps[i].st = SERVE_REPLICA_DOWN;
            pool_drain(&m->reps[i]);
        }
    }
    if (!before_first_byte || q->attempt >= 8 || cr_mono_ms() >= q->deadline_ms) {
        m->errors++;
        pthread_mutex_unlock(&r->mu);
        answer(q, 502, "server_error", "bad_gateway", 0,
               "the replica of model '%.200s' failed the request (%s)", m->id,
               err == CR_EPARSE ? "its reply is not HTTP" : strerror(-err));
        return;
    }
    m->retries++;
    if (i < 64)
        q->tried |= 1ull << i;
    pthread_mutex_unlock(&r->mu);
    q->attempt++;
    route(q);
}

/* Sends q to a free replica of its model (power of two choices or prefix
 * affinity), or queues it (waking, the loop calls this again), or
 * answers 503 when the queue is full. */
static void route(req_t *q)
{
    serve_router_t *r = q->r;
    rmodel_t *m = q->m;
    long i;
    pthread_mutex_lock(&r->mu);
    if (!q->counted) {
        m->requests++;
        q->counted = true;
    }
    for (;;) {
        if (q->queued && q->tried && !any_ready(m, q->tried))
            q->tried = 0; /* the replicas left were all tried: start over with them */
        i = pick(r, m, q, q->tried);
        if (i >= 0)
            break;
        if (q->queued) {
            pthread_mutex_unlock(&r->mu);
            return;
        }
        if (m->queued >= m->max_queued) {
            m->rejected++;
            unsigned n = m->queued;
            pthread_mutex_unlock(&r->mu);
            answer(q, 503, "server_error", "overloaded", r->retry_after,
                   "model '%.200s' is at capacity: every replica has max_ongoing_requests and "
                   "%u requests wait; retry later",
                   m->id, n);
            return;
        }
        if (q->tried && !any_ready(m, q->tried) && any_ready(m, 0)) {
            q->tried = 0;
            continue;
        }
        m->queued++;
        q->queued = true;
        q->st = Q_QUEUED;
        q->io_deadline_ms = 0;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (q->queued) {
        m->queued--;
        q->queued = false;
    }
    replica_t *x = &m->reps[i];
    x->ongoing++;
    x->requests++;
    snprintf(q->host, sizeof(q->host), "%s", x->host);
    q->port = x->port;
    bool in_ep = false;
    int fd = pool_take(x, q->lp->ep, &in_ep);
    if (fd < 0)
        m->connects++;
    else
        m->reused++;
    pthread_mutex_unlock(&r->mu);
    q->rep = (size_t)i;
    q->held = true;
    int err = begin(q, fd, in_ep);
    if (err)
        attempt_failed(q, err);
}

/* The reply's headers came: the handler queues the reply. */
static void got_headers(req_t *q)
{
    double ttfb = now_s() - q->t0;
    rmodel_t *m = q->m;
    pthread_mutex_lock(&q->r->mu);
    m->ttfb_count++;
    m->ttfb_sum += ttfb;
    for (size_t b = 0; b < CR_ARRAY_SIZE(ttfb_bounds); b++)
        if (ttfb <= ttfb_bounds[b])
            m->ttfb_le[b]++;
    if (q->up.status >= 500)
        m->errors++;
    pthread_mutex_unlock(&q->r->mu);
    q->st = Q_REPLY;
    q->io_deadline_ms = 0;
    resume(q);
}

/* The replica's socket is ready (or broke). */
static void on_upstream(req_t *q, uint32_t ev)
{
    int err;
    switch (q->st) {
    case Q_CONNECT:
        unwatch(q); /* connect_end closes it on failure (out of the set) */
        err = serve_upstream_connect_end(&q->up, 0);
        if (err) {
            attempt_failed(q, err);
            return;
        }
        q->watched = true;
        own(q);
        if ((err = start_send(q)))
            attempt_failed(q, err);
        return;
    case Q_SEND:
        err = send_more(q);
        if (err && err != -EAGAIN)
            attempt_failed(q, err);
        else if (!err)
            q->st = Q_HEADERS;
        return;
    case Q_HEADERS:
        err = serve_upstream_read_headers(&q->up, 0);
        if (err == -EAGAIN)
            return;
        if (err)
            attempt_failed(q, err);
        else
            got_headers(q);
        return;
    case Q_REPLY:
        if (q->waiting) {
            q->waiting = false;
            q->io_deadline_ms = 0;
            resume(q); /* the reply callback reads it */
        }
        return;
    default:
        CR_UNUSED(ev);
        return;
    }
}

/* A loop's look at its requests: deadlines passed, and queued requests
 * trying again (all of them: woken, or every tick). */
static void tick(loop_t *lp, bool queued_only)
{
    int64_t now = cr_mono_ms();
    for (req_t *q = lp->head, *next; q; q = next) {
        next = q->next;
        switch (q->st) {
        case Q_QUEUED:
            if (!queued_only && now >= q->deadline_ms) {
                dequeue(q);
                pthread_mutex_lock(&lp->r->mu);
                q->m->errors++;
                pthread_mutex_unlock(&lp->r->mu);
                answer(q, 503, "server_error", "no_replica", lp->r->retry_after,
                       "no replica of model '%.200s' became free within the request timeout; "
                       "`corral serve status` says why",
                       q->m->id);
            } else {
                route(q);
            }
            break;
        case Q_CONNECT:
        case Q_SEND:
        case Q_HEADERS:
            if (!queued_only && q->io_deadline_ms && now >= q->io_deadline_ms)
                attempt_failed(q, -ETIMEDOUT);
            break;
        case Q_REPLY:
            if (!queued_only && q->waiting && now >= q->io_deadline_ms) {
                q->waiting = false;
                q->stall = -ETIMEDOUT;
                resume(q);
            }
            break;
        default:
            break;
        }
    }
}

/* The router stops: every request of the loop ends (resumed, so that
 * microhttpd may close its connection). */
static void abort_all(loop_t *lp)
{
    for (req_t *q = lp->head; q; q = q->next) {
        switch (q->st) {
        case Q_QUEUED:
        case Q_CONNECT:
        case Q_SEND:
        case Q_HEADERS:
            up_close(q);
            release(q);
            dequeue(q);
            answer(q, 503, "server_error", "stopping", 1, "the router is stopping; retry");
            break;
        case Q_REPLY:
            if (q->waiting) {
                q->waiting = false;
                q->stall = -ECANCELED;
                resume(q);
            }
            break;
        default:
            break;
        }
    }
}

/* ---- the front end: the router's own HTTP/1.1 server side on the loops
 * (plain HTTP; with TLS microhttpd still serves, above) ----
 *
 * Each loop accepts on its own listening socket and drives its client
 * connections in the same epoll set as its replicas' sockets, each
 * edge-triggered for both directions from accept to close (no epoll_ctl
 * per request). A connection reads a request (serve/http.c parses it),
 * routes it as microhttpd's handler did, and passes the reply through:
 * the replica is read only while the client's socket took all that was
 * read before (one piece, OUT_CAP bytes, per connection: backpressure).
 * A read that fills less than its room took all the socket had, so the
 * next read waits for the next event (no read that only says EAGAIN).
 * Pipelined requests are answered in order: the next is parsed once the
 * reply before it is sent. What changes a connection's state from outside
 * its own events (a reply's headers, the router's answer, a replica's
 * data) kicks it: the loop drives it after the events of that round. */

#define OUT_CAP (PIECE + 1024)
#define IN_MIN 4096      /* the room a read of a client has at least */
#define CONN_LIMIT 8192  /* client connections per loop */
#define LINGER_MS 2000   /* reading what a refused client still sends */
#define ROUNDS_MAX 4     /* kick rounds per epoll_wait (fairness) */
#define PIPELINED_MAX 32 /* requests of one connection per drive */

typedef enum cphase {
    C_HEAD = 0, /* reading a request's head */
    C_BODY,     /* reading its body */
    C_WAIT,     /* routed: waiting for the reply's headers or an answer */
    C_REPLY,    /* sending the reply */
    C_LINGER,   /* answered and shut down for writing: reading to the end */
} cphase_t;

struct conn {
    loop_t *lp;
    int fd;
    conn_t *prev, *next; /* lp->conns */
    conn_t *knext;       /* lp->kick or lp->dead */
    bool kicked, dead;
    cphase_t ph;
    bool readable; /* the last read filled its room: more may wait */
    int64_t last_ms;
    /* what was read, not yet parsed: in[in_off, in_len) */
    char *in;
    size_t in_off, in_len, in_cap;
    size_t hscan; /* the first hscan bytes from in_off hold no head's end */
    serve_http_req_t h;
    serve_http_chunked_t ch;
    req_t *q;         /* the request from its head on */
    bool keep;        /* the connection carries another request after this one */
    bool linger;      /* after this reply: shut down and read to the end */
    bool chunked_out; /* the reply's body goes chunked */
    bool ended;       /* the reply's last byte is in obuf (or it ends broken) */
    bool broken;      /* close after what is in obuf: the reply could not end right */
    char *xbuf;       /* the router's answer's body when it does not fit obuf */
    size_t xlen, xoff;
    size_t olen, ooff; /* obuf[ooff, olen) to send */
    char obuf[OUT_CAP];
};

static char *models_json(serve_router_t *r);
static void metrics_text(serve_router_t *r, cr_buf_t *b);

static void kick(conn_t *cn)
{
    if (cn->kicked || cn->dead)
        return;
    cn->kicked = true;
    cn->knext = cn->lp->kick;
    cn->lp->kick = cn;
}

static bool pending(const conn_t *cn)
{
    return cn->ooff < cn->olen || cn->xoff < cn->xlen;
}

/* The request ends: what it holds goes (its reply's connection back to
 * the pool when read whole). */
static void req_end(conn_t *cn)
{
    req_t *q = cn->q;
    if (!q)
        return;
    cn->q = NULL;
    finish(q);
    up_close(q);
    release(q);
    q->cn = NULL;
    req_unref(q);
}

static void conn_close(conn_t *cn)
{
    if (cn->dead)
        return;
    loop_t *lp = cn->lp;
    req_end(cn);
    /* out of the epoll set before the close: a copy of the descriptor (a
     * child's between fork and exec) would keep it there, with events
     * naming this connection after it is freed */
    epoll_ctl(lp->ep, EPOLL_CTL_DEL, cn->fd, NULL);
    close(cn->fd);
    if (cn->prev)
        cn->prev->next = cn->next;
    else
        lp->conns = cn->next;
    if (cn->next)
        cn->next->prev = cn->prev;
    lp->nconns--;
    cn->dead = true;
    free(cn->in);
    free(cn->xbuf);
    cn->in = cn->xbuf = NULL;
    if (!cn->kicked) { /* a kicked one is freed when its round takes it off */
        cn->knext = lp->dead;
        lp->dead = cn;
    }
}

/* Sends what obuf and xbuf hold: 0 all, -EAGAIN, or -EPIPE (the client
 * went away). */
static int flush(conn_t *cn)
{
    while (pending(cn)) {
        struct iovec iov[2];
        int n = 0;
        if (cn->ooff < cn->olen)
            iov[n++] = (struct iovec){cn->obuf + cn->ooff, cn->olen - cn->ooff};
        if (cn->xoff < cn->xlen)
            iov[n++] = (struct iovec){cn->xbuf + cn->xoff, cn->xlen - cn->xoff};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(cn->fd, &mh, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return errno == EAGAIN ? -EAGAIN : -EPIPE;
        cn->last_ms = cr_mono_ms();
        size_t a = cn->olen - cn->ooff, k = (size_t)w;
        cn->ooff += k < a ? k : a;
        if (k > a)
            cn->xoff += k - a;
    }
    cn->ooff = cn->olen = 0;
    free(cn->xbuf);
    cn->xbuf = NULL;
    cn->xoff = cn->xlen = 0;
    return 0;
}

/* Starts a reply's head in obuf (the status line and the headers the
 * router always sends, not the empty line). */
static void head_start(conn_t *cn, unsigned status)
{
    cn->olen = cn->ooff = 0;
    int k = snprintf(cn->obuf, OUT_CAP, "HTTP/1.1 %u %s\r\n", status, serve_http_reason(status));
    cn->olen = k > 0 ? (size_t)k : 0;
}

static void head_add(conn_t *cn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void head_add(conn_t *cn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(cn->obuf + cn->olen, OUT_CAP - cn->olen, fmt, ap);
    va_end(ap);
    if (k > 0 && (size_t)k < OUT_CAP - cn->olen)
        cn->olen += (size_t)k;
}

/* The connection's header and the empty line. */
static void head_end(conn_t *cn)
{
    if (!cn->keep)
        head_add(cn, "Connection: close\r\n");
    else if (cn->h.minor == 0)
        head_add(cn, "Connection: keep-alive\r\n");
    head_add(cn, "\r\n");
}

/* The router's own reply: body (len bytes, copied) whole. */
static void respond(conn_t *cn, unsigned status, const char *ctype, const char *body, size_t len,
                    unsigned retry_after)
{
    head_start(cn, status);
    head_add(cn, "Content-Type: %s\r\nContent-Length: %zu\r\n", ctype, len);
    if (retry_after)
        head_add(cn, "Retry-After: %u\r\n", retry_after);
    head_end(cn);
    if (len <= OUT_CAP - cn->olen) {
        memcpy(cn->obuf + cn->olen, body, len);
        cn->olen += len;
    } else {
        cn->xbuf = cr_malloc(len);
        memcpy(cn->xbuf, body, len);
        cn->xlen = len;
        cn->xoff = 0;
    }
    cn->ended = true;
    cn->ph = C_REPLY;
}

/* A JSON body made for the answer (s, malloc'ed, taken; NULL: "{}"). */
static void respond_json(conn_t *cn, unsigned status, char *s, unsigned retry_after)
{
    respond(cn, status, "application/json", s ? s : "{}", s ? strlen(s) : 2, retry_after);
    free(s);
}

static void respond_error(conn_t *cn, unsigned status, const char *type, const char *code,
                          const char *msg, unsigned retry_after)
{
    respond_json(cn, status, error_json(type, code, msg), retry_after);
}

/* A request refused before its body was read: answered, then the
 * connection ends (what the client still sends is read and dropped for a
 * while, so that the answer is not lost to a reset). */
static void refuse(conn_t *cn, unsigned status, const char *code, const char *msg)
{
    cn->keep = false;
    cn->linger = true;
    respond_error(cn, status, "invalid_request_error", code, msg, 0);
}

/* The reply's headers came (q->st Q_REPLY): its head in obuf. */
static void reply_head(conn_t *cn)
{
    req_t *q = cn->q;
    serve_upstream_t *u = &q->up;
    q->sse = strncasecmp(u->content_type, "text/event-stream", 17) == 0;
    serve_usage_init(&q->usage, q->sse);
    head_start(cn, (unsigned)u->status);
    if (u->content_type[0])
        head_add(cn, "Content-Type: %s\r\n", u->content_type);
    cn->chunked_out = false;
    if (!u->chunked && u->content_length >= 0)
        head_add(cn, "Content-Length: %lld\r\n", u->content_length);
    else if (cn->h.minor >= 1) {
        head_add(cn, "Transfer-Encoding: chunked\r\n");
        cn->chunked_out = true;
    } else {
        cn->keep = false; /* HTTP/1.0: the body ends with the connection */
    }
    if (q->sse)
        head_add(cn, "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
    head_end(cn);
    cn->ended = false;
    cn->ph = C_REPLY;
}

/* The body's end: the last chunk when chunked. */
static void body_end(conn_t *cn)
{
    if (cn->chunked_out) {
        memcpy(cn->obuf + cn->olen, "0\r\n\r\n", 5);
        cn->olen += 5;
    }
    cn->ended = true;
}

/* The replica went away (or stalled) mid-reply, or the router stops: as
 * reader() for microhttpd. A stream gets an error event and its end; any
 * other reply is cut (the connection closes, the client sees a short
 * body). */
static void reply_broken(conn_t *cn, ssize_t n)
{
    req_t *q = cn->q;
    pthread_mutex_lock(&q->r->mu);
    q->m->errors++;
    if (q->rep < q->m->nreps && n != -ECANCELED) {
        q->m->reps[q->rep].failures++;
        if (q->m->reps[q->rep].st == SERVE_REPLICA_READY) {
            q->m->reps[q->rep].st = SERVE_REPLICA_DOWN;
            pool_drain(&q->m->reps[q->rep]);
        }
    }
    pthread_mutex_unlock(&q->r->mu);
    if (q->sse) {
        char ev[400];
        int k = snprintf(ev, sizeof(ev),
                         "data: {\"error\":{\"message\":\"the replica serving this stream went "
                         "away (%s); retry the request\",\"type\":\"server_error\",\"param\":null,"
                         "\"code\":\"replica_lost\"}}\n\n",
                         n == -ETIMEDOUT   ? "no data within the request timeout"
                         : n == -ECANCELED ? "the router stops"
                                           : "it ended");
        if (k > 0 && (size_t)k + 24 <= OUT_CAP - cn->olen) {
            if (cn->chunked_out)
                head_add(cn, "%x\r\n", (unsigned)k);
            memcpy(cn->obuf + cn->olen, ev, (size_t)k);
            cn->olen += (size_t)k;
            if (cn->chunked_out)
                head_add(cn, "\r\n");
            if (cn->chunked_out) {
                body_end(cn);
                cn->keep = false; /* the replica's connection state is unknown: start afresh */
                return;
            }
        }
    }
    cn->ended = true;
    cn->broken = true;
}

/* Reads the replica's reply into obuf as far as it has room, without
 * blocking: sets q->waiting at EAGAIN, cn->ended at the body's end. */
static void fill(conn_t *cn)
{
    req_t *q = cn->q;
    for (;;) {
        size_t hdr = cn->chunked_out ? 10 : 0; /* "%zx\r\n" of at most 8 KiB */
        if (OUT_CAP - cn->olen < hdr + 512)
            return; /* full enough: send it first */
        char *at = cn->obuf + cn->olen + hdr;
        size_t room = OUT_CAP - cn->olen - hdr - 2 - 5 - 400; /* CRLF, last chunk, an error */
        ssize_t n = q->stall ? q->stall : serve_upstream_read(&q->up, at, room, 0);
        if (n > 0) {
            serve_usage_feed(&q->usage, at, (size_t)n);
            if (hdr) {
                char h[16];
                int k = snprintf(h, sizeof(h), "%zx\r\n", (size_t)n);
                memmove(cn->obuf + cn->olen + k, at, (size_t)n);
                memcpy(cn->obuf + cn->olen, h, (size_t)k);
                cn->olen += (size_t)k + (size_t)n;
                memcpy(cn->obuf + cn->olen, "\r\n", 2);
                cn->olen += 2;
            } else {
                cn->olen += (size_t)n;
            }
            if (q->up.done) {
                finish(q);
                body_end(cn);
                return;
            }
            continue;
        }
        if (n == -EAGAIN) {
            q->waiting = true;
            q->io_deadline_ms = cr_mono_ms() + q->r->timeout_ms;
            return;
        }
        if (q->up.done) {
            finish(q);
            body_end(cn);
            return;
        }
        reply_broken(cn, n);
        return;
    }
}

/* The reply goes out. true: it was sent whole (the request ended), false:
 * it waits (the client's socket, the replica's data) or the connection
 * closed. */
static bool pump(conn_t *cn)
{
    for (;;) {
        /* what the replica has goes with what waits (one send: the head
         * with a reply that came whole) */
        if (cn->q && !cn->ended && !cn->q->waiting)
            fill(cn);
        if (pending(cn)) {
            int err = flush(cn);
            if (err == -EAGAIN)
                return false;
            if (err) {
                conn_close(cn);
                return false;
            }
        }
        if (cn->ended) {
            bool keep = cn->keep && !cn->broken;
            req_end(cn);
            if (cn->broken || (!keep && !cn->linger)) {
                conn_close(cn);
                return false;
            }
            if (!keep) { /* linger: drive reads what came */
                shutdown(cn->fd, SHUT_WR);
                cn->ph = C_LINGER;
                cn->last_ms = cr_mono_ms();
                cn->readable = true;
                return true;
            }
            cn->ph = C_HEAD;
            cn->ended = cn->chunked_out = false;
            return true;
        }
        if (!cn->q || cn->q->waiting)
            return false;
    }
}

/* Reads from the client into in: >0, 0 at its end, -EAGAIN, -errno. */
static ssize_t conn_read(conn_t *cn)
{
    if (cn->in_off == cn->in_len)
        cn->in_off = cn->in_len = cn->hscan = 0;
    if (cn->in_cap - cn->in_len < IN_MIN && cn->in_off > 0) {
        memmove(cn->in, cn->in + cn->in_off, cn->in_len - cn->in_off);
        cn->in_len -= cn->in_off;
        cn->in_off = 0;
    }
    if (cn->in_cap - cn->in_len < IN_MIN) {
        /* bounded: a head is at most SERVE_HTTP_HEAD_MAX, a body leaves in as it comes */
        cn->in_cap = cn->in_len + IN_MIN;
        cn->in = cr_realloc(cn->in, cn->in_cap);
    }
    size_t room = cn->in_cap - cn->in_len;
    for (;;) {
        ssize_t n = recv(cn->fd, cn->in + cn->in_len, room, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            if (errno == EAGAIN)
                cn->readable = false;
            return errno == EAGAIN ? -EAGAIN : -errno;
        }
        cn->readable = (size_t)n == room;
        cn->in_len += (size_t)n;
        cn->last_ms = cr_mono_ms();
        return n;
    }
}

static void dispatch(conn_t *cn);

/* A request's head was parsed into cn->h. */
static void start_request(conn_t *cn)
{
    serve_http_req_t *h = &cn->h;
    cn->hscan = 0;
    cn->keep = h->keepalive;
    cn->linger = cn->broken = cn->ended = cn->chunked_out = false;
    cn->q = req_new(cn->lp);
    cn->q->cn = cn;
    if (h->length > (long long)BODY_MAX) {
        char msg[160];
        snprintf(msg, sizeof(msg), "the request body is over %u bytes", BODY_MAX);
        refuse(cn, 413, "request_too_large", msg);
        return;
    }
    bool body = h->chunked || h->length > 0;
    if (body && h->expect_continue && cn->in_off == cn->in_len) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (send(cn->fd, cont, sizeof(cont) - 1, MSG_NOSIGNAL) < 0) {
            /* the client sends its body anyway after a while (RFC 9110 10.1.1) */
        }
    }
    if (h->chunked)
        serve_http_chunked_init(&cn->ch);
    cn->ph = body ? C_BODY : C_WAIT;
    if (!body)
        dispatch(cn);
}

/* Moves the body bytes that came into q->body: true once it is whole. */
static bool take_body(conn_t *cn)
{
    req_t *q = cn->q;
    serve_router_t *r = cn->lp->r;
    char *p = cn->in + cn->in_off;
    size_t avail = cn->in_len - cn->in_off, got;
    bool whole;
    if (cn->h.chunked) {
        size_t nd = 0;
        long used = serve_http_chunked_feed(&cn->ch, p, avail, p, avail, &nd);
        if (used < 0) {
            char msg[200];
            snprintf(msg, sizeof(msg), "the chunked request body is malformed: %s", cn->ch.err);
            refuse(cn, 400, "invalid_body", msg);
            return false;
        }
        cn->in_off += (size_t)used;
        got = nd;
        whole = cn->ch.done;
    } else {
        size_t need = (size_t)cn->h.length - q->body.len;
        got = avail < need ? avail : need;
        cn->in_off += got;
        whole = got == need;
    }
    if (got) {
        if (q->body.len + got > BODY_MAX ||
            __atomic_add_fetch(&r->body_bytes, got, __ATOMIC_RELAXED) > BODIES_MAX) {
            if (q->body.len + got <= BODY_MAX)
                __atomic_sub_fetch(&r->body_bytes, got, __ATOMIC_RELAXED);
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "the request body is over %u bytes (or the router holds too many large "
                     "requests now)",
                     BODY_MAX);
            refuse(cn, 413, "request_too_large", msg);
            return false;
        }
        cr_buf_append(&q->body, p, got);
    }
    return whole;
}

/* Whether in[in_off, in_len) has a head's end (an empty line), or is
 * too long for one (the parser says so). */
static bool head_came(conn_t *cn)
{
    size_t from = cn->hscan > 3 ? cn->hscan - 3 : 0;
    const char *p = cn->in + cn->in_off + from, *end = cn->in + cn->in_len;
    while ((p = memchr(p, '\n', (size_t)(end - p)))) {
        const char *q = p + 1;
        if (q < end && *q == '\r')
            q++;
        if (q < end && *q == '\n')
            return true;
        p++;
    }
    cn->hscan = cn->in_len - cn->in_off;
    /* a head's leading empty lines are skipped by the parser; one that
     * starts with them, or one too long, goes to it */
    return cn->in_len - cn->in_off >= SERVE_HTTP_HEAD_MAX || cn->in[cn->in_off] == '\r' ||
           cn->in[cn->in_off] == '\n';
}

/* Reads and parses what the client sends while a request's head or body
 * is due. true: the connection's phase moved on, false: it waits. */
static bool take_input(conn_t *cn)
{
    for (;;) {
        if (cn->in_len > cn->in_off) {
            if (cn->ph == C_HEAD && !head_came(cn)) {
                /* parsed only once its end came: a head sent a byte at a
                 * time costs a look at each new byte, not a parse */
            } else if (cn->ph == C_HEAD) {
                long k =
                    serve_http_parse_head(cn->in + cn->in_off, cn->in_len - cn->in_off, &cn->h);
                if (k < 0) {
                    cn->q = NULL;
                    cn->h.minor = 1;
                    refuse(cn, cn->h.err_status, "bad_request", cn->h.err_msg);
                    return true;
                }
                if (k > 0) {
                    cn->in_off += (size_t)k;
                    start_request(cn);
                    continue;
                }
            } else if (cn->ph == C_BODY) {
                if (take_body(cn)) {
                    cn->ph = C_WAIT;
                    dispatch(cn);
                }
                if (cn->ph != C_BODY)
                    return true;
            } else {
                return true;
            }
        } else if (cn->ph != C_HEAD && cn->ph != C_BODY) {
            return true;
        }
        if (!cn->readable)
            return false;
        ssize_t n = conn_read(cn);
        if (n == -EAGAIN)
            return false;
        if (n <= 0) {
            /* the client closed (or broke) its side before a request was whole */
            conn_close(cn);
            return false;
        }
    }
}

/* With prefix affinity, the request's prompt prefix hashed into q (rq,
 * read without the prompt, is read again with it); rq is freed. */
static void take_prefix(req_t *q, const rmodel_t *m, serve_request_t *rq)
{
    if (m->aff) { /* the prompt too */
        serve_request_free(rq);
        if (serve_request_parse(q->body.s, q->body.len, rq) != 0)
            memset(rq, 0, sizeof(*rq));
    }
    if (m->aff && rq->prefix_len) {
        q->h = cr_malloc(SERVE_AFFINITY_BLOCKS * sizeof(*q->h));
        q->nh = serve_affinity_hashes(rq->prefix, rq->prefix_len, q->h, SERVE_AFFINITY_BLOCKS);
        q->prefix_len = rq->prefix_len;
    }
    serve_request_free(rq);
}

/* What a routed request's head and body ask: handle() for the front end. */
static void dispatch(conn_t *cn)
{
    serve_router_t *r = cn->lp->r;
    serve_http_req_t *h = &cn->h;
    req_t *q = cn->q;
    const char *url = h->path;
    __atomic_add_fetch(&r->http_requests, 1, __ATOMIC_RELAXED);
    bool get = strcmp(h->method, "GET") == 0, post = strcmp(h->method, "POST") == 0;
    if (strcmp(url, "/health") == 0 && get) {
        respond(cn, 200, "text/plain", "ok\n", 3, 0);
        return;
    }
    if (strncmp(url, "/-/", 3) == 0) {
        if (!r->admin_token || h->long_value || strcmp(h->admin, r->admin_token) != 0) {
            respond_error(cn, 403, "permission_error", "forbidden",
                          "the router's admin calls need its admin token", 0);
            return;
        }
        if (strcmp(url, "/-/status") == 0 && get) {
            respond_json(cn, 200, serve_router_status(r), 0);
            return;
        }
        respond_error(cn, 404, "invalid_request_error", "not_found", "no such admin call", 0);
        return;
    }
    if (!key_ok(r, h->authorization[0] && !h->long_value ? h->authorization : NULL)) {
        pthread_mutex_lock(&r->mu);
        r->unauthorized++;
        pthread_mutex_unlock(&r->mu);
        respond_error(cn, 401, "invalid_request_error", "invalid_api_key",
                      "missing or wrong API key: send 'Authorization: Bearer KEY' with a key "
                      "of the router's --api-key-file",
                      0);
        return;
    }
    if (strcmp(url, "/metrics") == 0 && get) {
        cr_buf_t b = {0};
        metrics_text(r, &b);
        respond(cn, 200, "text/plain; version=0.0.4", b.s ? b.s : "", b.len, 0);
        cr_buf_free(&b);
        return;
    }
    if (strcmp(url, "/v1/models") == 0 && get) {
        respond_json(cn, 200, models_json(r), 0);
        return;
    }
    static const char *const routes[] = {"/v1/chat/completions", "/v1/completions",
                                         "/v1/embeddings"};
    const char *routed = NULL;
    for (size_t i = 0; i < CR_ARRAY_SIZE(routes) && !routed; i++)
        if (!h->path_long && strcmp(url, routes[i]) == 0)
            routed = routes[i];
    if (!routed) {
        respond_error(cn, 404, "invalid_request_error", "unknown_url",
                      "unknown path; the router serves /v1/models, /v1/chat/completions, "
                      "/v1/completions, /v1/embeddings and /metrics",
                      0);
        return;
    }
    if (!post) {
        respond_error(cn, 405, "invalid_request_error", "method_not_allowed",
                      "use POST for this path", 0);
        return;
    }
    serve_request_t rq;
    int perr = serve_request_parse_model(q->body.s, q->body.len, &rq);
    if (perr == SERVE_REQ_INVALID_JSON) {
        respond_error(cn, 400, "invalid_request_error", "invalid_json",
                      "the request body is not a JSON object", 0);
        return;
    }
    if (perr) {
        respond_error(cn, 400, "invalid_request_error", "missing_model",
                      "the request has no \"model\"; GET /v1/models lists them", 0);
        return;
    }
    rmodel_t *m = NULL;
    for (size_t i = 0; i < r->nmodels && !m; i++)
        if (strcmp(r->models[i].id, rq.model) == 0)
            m = &r->models[i];
    if (!m) {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "The model '%.200s' does not exist here; GET /v1/models lists the models this "
                 "router serves",
                 rq.model);
        serve_request_free(&rq);
        respond_error(cn, 404, "invalid_request_error", "model_not_found", msg, 0);
        return;
    }
    take_prefix(q, m, &rq);
    q->ctype = h->content_type[0] ? cr_strdup(h->content_type) : NULL;
    q->url = routed;
    q->m = m;
    q->t0 = now_s();
    q->deadline_ms = cr_mono_ms() + r->timeout_ms;
    q->counted = false;
    cn->ph = C_WAIT;
    list_add(q);
    route(q); /* its answer or reply kicks the connection */
}

/* Everything the connection can do now, until it waits. */
static void drive(conn_t *cn)
{
    unsigned served = 0;
    while (!cn->dead) {
        switch (cn->ph) {
        case C_HEAD:
            if (served >= PIPELINED_MAX && cn->in_len > cn->in_off) {
                kick(cn); /* the next round: others go first */
                return;
            }
            /* fall through */
        case C_BODY:
            if (!take_input(cn))
                return;
            break;
        case C_WAIT: {
            req_t *q = cn->q;
            if (q->st == Q_ANSWER) {
                respond_error(cn, q->ans_status, q->ans_type, q->ans_code, q->ans_msg,
                              q->ans_retry);
            } else if (q->st == Q_REPLY) {
                reply_head(cn);
            } else {
                return;
            }
            break;
        }
        case C_REPLY:
            if (!pump(cn))
                return;
            served++;
            break;
        case C_LINGER: {
            char sink[4096];
            ssize_t n;
            while ((n = recv(cn->fd, sink, sizeof(sink), 0)) > 0) {
            }
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                conn_close(cn);
            return;
        }
        }
    }
}

static void on_conn(conn_t *cn, uint32_t ev)
{
    if (cn->dead)
        return;
    if (ev & EPOLLERR) {
        conn_close(cn);
        return;
    }
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
        cn->readable = true;
    /* reading is due in these phases; the others read after their reply */
    bool go = cn->ph == C_HEAD || cn->ph == C_BODY || cn->ph == C_LINGER;
    if ((ev & EPOLLOUT) && pending(cn))
        go = true;
    if ((ev & EPOLLHUP) && (cn->ph == C_WAIT || cn->ph == C_REPLY)) {
        conn_close(cn); /* both directions gone: no one to answer */
        return;
    }
    if (go)
        drive(cn);
}

static void on_listen(loop_t *lp)
{
    for (int k = 0; k < 64; k++) {
        int fd = accept4(lp->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return; /* EAGAIN, or out of descriptors: the next round tries again */
        }
        if (lp->nconns >= CONN_LIMIT) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conn_t *cn = cr_calloc(1, sizeof(*cn));
        cn->lp = lp;
        cn->fd = fd;
        cn->last_ms = cr_mono_ms();
        struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                .data.u64 = EV_CONN | (uint64_t)(uintptr_t)cn};
        if (epoll_ctl(lp->ep, EPOLL_CTL_ADD, fd, &e) != 0) {
            close(fd);
            free(cn);
            continue;
        }
        cn->next = lp->conns;
        if (lp->conns)
            lp->conns->prev = cn;
        lp->conns = cn;
        lp->nconns++;
    }
}

/* The kicked connections, a few rounds (what is kicked again in the last
 * waits for the next epoll_wait), then the closed ones are freed. */
static void run_kicked(loop_t *lp)
{
    for (int round = 0; round < ROUNDS_MAX && lp->kick; round++) {
        conn_t *list = lp->kick;
        lp->kick = NULL;
        while (list) {
            conn_t *cn = list;
            list = cn->knext;
            cn->kicked = false;
            if (cn->dead) {
                cn->knext = lp->dead;
                lp->dead = cn;
            } else {
                drive(cn);
            }
        }
    }
    if (lp->kick)
        return; /* freed once no list holds them */
    while (lp->dead) {
        conn_t *cn = lp->dead;
        lp->dead = cn->knext;
        free(cn);
    }
}

/* Client connections idle (or stuck sending or receiving) past the limit
 * end, as microhttpd's connection timeout did; a lingering one after
 * LINGER_MS. */
static void conns_tick(loop_t *lp, int64_t now)
{
    for (conn_t *cn = lp->conns, *next; cn; cn = next) {
        next = cn->next;
        int64_t idle = now - cn->last_ms;
        bool stuck = cn->ph == C_HEAD || cn->ph == C_BODY || (cn->ph == C_REPLY && pending(cn));
        if ((cn->ph == C_LINGER && idle >= LINGER_MS) || (stuck && idle >= lp->idle_ms))
            conn_close(cn);
    }
}

static void *loop_run(void *arg)
{
    loop_t *lp = arg;
    serve_router_t *r = lp->r;
    int64_t next_tick = cr_mono_ms() + TICK_MS;
    struct epoll_event ev[64];
    while (!__atomic_load_n(&r->stopping, __ATOMIC_ACQUIRE)) {
        int64_t now = cr_mono_ms();
        int wait = next_tick > now ? (int)(next_tick - now) : 0;
        MHD_UNSIGNED_LONG_LONG mt;
        if (lp->d && MHD_get_timeout(lp->d, &mt) == MHD_YES && mt < (MHD_UNSIGNED_LONG_LONG)wait)
            wait = (int)mt;
        if (lp->kick)
            wait = 0; /* connections left from the last round */
        int n = epoll_wait(lp->ep, ev, (int)CR_ARRAY_SIZE(ev), wait);
        bool run = n == 0, woken = false;
        /* a request freed while these events are handled (its client's
         * connection closed) was disowned first, and a closed connection
         * is freed only after the round (run_kicked): each event finds
         * its request or connection live, or none */
        for (int k = 0; k < n; k++) {
            if (ev[k].data.u64 & EV_CONN) {
                on_conn((conn_t *)(uintptr_t)(ev[k].data.u64 & ~EV_CONN), ev[k].events);
            } else if (ev[k].data.u64 == EV_LISTEN) {
                on_listen(lp);
            } else if (ev[k].data.u64 == EV_MHD) {
                run = true;
            } else if (ev[k].data.u64 == EV_WAKE) {
                uint64_t v;
                if (read(lp->wake, &v, sizeof(v)) < 0) {
                    /* nothing to read: another event woke it already */
                }
                woken = true;
            } else {
                uint64_t fd = ev[k].data.u64 - EV_FD;
                req_t *q = fd < lp->nowner ? lp->owner[fd] : NULL;
                if (q) /* else a pooled connection: the next user sees what it says */
                    on_upstream(q, ev[k].events);
            }
        }
        now = cr_mono_ms();
        if (now >= next_tick) {
            tick(lp, false);
            conns_tick(lp, now);
            next_tick = now + TICK_MS;
            run = true;
        } else if (woken) {
            tick(lp, true);
        }
        run_kicked(lp);
        if (lp->d && (run || lp->resumed)) {
            lp->resumed = false;
            MHD_run(lp->d);
        }
    }
    abort_all(lp);
    run_kicked(lp); /* the answers that fit the sockets now */
    for (conn_t *cn = lp->kick, *next; cn; cn = next) {
        next = cn->knext;
        cn->kicked = false;
        if (cn->dead) {
            cn->knext = lp->dead;
            lp->dead = cn;
        }
    }
    lp->kick = NULL;
    while (lp->conns)
        conn_close(lp->conns);
    run_kicked(lp); /* frees them */
    if (lp->d)
        MHD_run(lp->d);
    return NULL;
}

/* Handles a routed request whose body came: its model, the queue, a
 * replica. Answers at once (an error), or suspends the connection until
 * the loop has the reply's headers or an answer. */
static enum MHD_Result proxy(serve_router_t *r, struct MHD_Connection *c, req_t *q, rmodel_t *m,
                             const char *url)
{
    const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    q->ctype = ctype ? cr_strdup(ctype) : NULL;
    q->url = url;
    q->m = m;
    q->c = c;
    q->t0 = now_s();
    q->deadline_ms = cr_mono_ms() + r->timeout_ms;
    q->counted = false;
    list_add(q);
    route(q);
    if (q->st == Q_ANSWER)
        return send_error(c, q->ans_status, q->ans_type, q->ans_code, q->ans_msg, q->ans_retry);
    MHD_suspend_connection(c);
    q->suspended = true;
    return MHD_YES;
}

/* The connection was resumed with the reply's headers: the reply, its
 * body read by reader() as microhttpd sends it. */
static enum MHD_Result reply(req_t *q)
{
    q->sse = strncasecmp(q->up.content_type, "text/event-stream", 17) == 0;
    serve_usage_init(&q->usage, q->sse);
    serve_upstream_t *u = &q->up;
    if (!u->chunked && u->content_length >= 0 &&
        (long long)(u->len - u->off) >= u->content_length) {
        /* the whole body came with the headers (most JSON replies): one
         * buffer, sent with the headers at once, and the connection back
         * in the pool before the client has it */
        size_t n = (size_t)u->content_length, got = 0;
        char *body = cr_malloc(n + 1);
        ssize_t k;
        while (got < n && (k = serve_upstream_read(u, body + got, n - got, 0)) > 0)
            got += (size_t)k;
        serve_usage_feed(&q->usage, body, got);
        finish(q);
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(got, body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            free(body);
            return MHD_NO;
        }
        if (u->content_type[0])
            MHD_add_response_header(resp, "Content-Type", u->content_type);
        enum MHD_Result ret = MHD_queue_response(q->c, (unsigned)u->status, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    q->refs++;
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
    enum MHD_Result ret = MHD_queue_response(q->c, (unsigned)q->up.status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static char *models_json(serve_router_t *r)
{
    json_t *data = json_array();
    for (size_t i = 0; i < r->nmodels; i++)
        json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", r->models[i].id, "object",
                                              "model", "created", 0, "owned_by", "corral"));
    json_t *j = json_pack("{s:s,s:o}", "object", "list", "data", data);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static enum MHD_Result models_list(serve_router_t *r, struct MHD_Connection *c)
{
    char *s = models_json(r);
    enum MHD_Result ret = send_text(c, 200, "application/json", s ? s : "{}", 0);
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
                  (unsigned long long)__atomic_load_n(&r->http_requests, __ATOMIC_RELAXED),
                  (unsigned long long)r->unauthorized);
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
    loop_t *lp = cls;
    serve_router_t *r = lp->r;
    req_t *q = *req_cls;
    if (!q) {
        *req_cls = req_new(lp);
        return MHD_YES;
    }
    if (q->st != Q_BODY) {
        /* resumed: the reply's headers came, or the router answers */
        if (q->st == Q_REPLY)
            return reply(q);
        if (q->st == Q_ANSWER)
            return send_error(c, q->ans_status, q->ans_type, q->ans_code, q->ans_msg, q->ans_retry);
        MHD_suspend_connection(c); /* still waiting */
        q->suspended = true;
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
    __atomic_add_fetch(&r->http_requests, 1, __ATOMIC_RELAXED);
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/health") == 0 && get)
        return send_text(c, 200, "text/plain", "ok\n", 0);
    if (strncmp(url, "/-/", 3) == 0) {
        const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Corral-Admin");
        if (!r->admin_token || !tok || strcmp(tok, r->admin_token) != 0)
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
    static const char *const routes[] = {"/v1/chat/completions", "/v1/completions",
                                         "/v1/embeddings"};
    const char *routed = NULL;
    for (size_t i = 0; i < CR_ARRAY_SIZE(routes) && !routed; i++)
        if (strcmp(url, routes[i]) == 0)
            routed = routes[i];
    if (!routed || !q->lp)
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
    int perr = serve_request_parse_model(q->body.s, q->body.len, &rq);
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
    take_prefix(q, m, &rq);
    return proxy(r, c, q, m, routed);
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

/* A listening socket on ss; each loop has its own on the same port
 * (SO_REUSEPORT, which Linux allows only to the same user). */
static int listen_on(const struct sockaddr_storage *ss, socklen_t len)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, 1024) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

/* One loop on listening socket fd (taken: closed on failure): the front
 * end's, or with TLS its microhttpd daemon's. */
static int loop_init(loop_t *lp, serve_router_t *r, int fd, unsigned timeout_s,
                     struct MHD_OptionItem *tlsopt, bool tls)
{
    lp->r = r;
    lp->ep = epoll_create1(EPOLL_CLOEXEC);
    lp->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    lp->idle_ms = timeout_s * 1000u;
    if (lp->ep < 0 || lp->wake < 0) {
        close(fd);
        return -errno;
    }
    if (!tls) {
        lp->lfd = fd;
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = EV_LISTEN};
        struct epoll_event w = {.events = EPOLLIN, .data.u64 = EV_WAKE};
        if (epoll_ctl(lp->ep, EPOLL_CTL_ADD, fd, &e) != 0 ||
            epoll_ctl(lp->ep, EPOLL_CTL_ADD, lp->wake, &w) != 0)
            return -errno;
        return 0;
    }
    lp->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO |
                                 MHD_USE_ERROR_LOG | (tls ? MHD_USE_TLS : 0),
                             0, NULL, NULL, handle, lp, MHD_OPTION_LISTEN_SOCKET, fd,
                             MHD_OPTION_NOTIFY_COMPLETED, completed, lp,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
                             MHD_OPTION_CONNECTION_LIMIT, 8192u, MHD_OPTION_CONNECTION_TIMEOUT,
                             timeout_s, MHD_OPTION_ARRAY, tlsopt, MHD_OPTION_END);
    const union MHD_DaemonInfo *di =
        lp->d ? MHD_get_daemon_info(lp->d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    if (!di) {
        if (!lp->d)
            close(fd);
        return -EINVAL;
    }
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = EV_MHD};
    struct epoll_event w = {.events = EPOLLIN, .data.u64 = EV_WAKE};
    if (epoll_ctl(lp->ep, EPOLL_CTL_ADD, di->epoll_fd, &e) != 0 ||
        epoll_ctl(lp->ep, EPOLL_CTL_ADD, lp->wake, &w) != 0)
        return -errno;
    return 0;
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
    socklen_t sslen;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        sslen = sizeof(*s4);
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        sslen = sizeof(*s6);
    } else {
        *errmsg = cr_asprintf("router host '%s' is not an IP address (give one, such as "
                              "127.0.0.1)",
                              host);
        return CR_EINVAL;
    }
    serve_router_t *r = cr_calloc(1, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    for (size_t i = 0; i < LOOPS_MAX; i++)
        r->loops[i].ep = r->loops[i].wake = r->loops[i].lfd = -1;
    r->admin.ep = r->admin.wake = r->admin.lfd = -1;
    r->admin.r = r;
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
    }
    size_t nk = 0;
    while (o && o->api_keys && o->api_keys[nk])
        nk++;
    r->keys = cr_calloc(nk + 1, sizeof(char *));
    for (size_t i = 0; i < nk; i++)
        r->keys[i] = cr_strdup(o->api_keys[i]);
    r->admin_token = o && o->admin_token ? cr_strdup(o->admin_token) : NULL;
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
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    r->nloops = ncpu < 1 ? 1 : ncpu > LOOPS_MAX ? LOOPS_MAX : (size_t)ncpu;
    unsigned timeout_s = (unsigned)(cfg->request_timeout_s + 5);
    for (size_t i = 0; i < r->nloops; i++) {
        int fd = listen_on(&ss, sslen);
        if (fd < 0) {
            *errmsg = cr_asprintf("cannot listen on %s:%u (%s); is another router or program "
                                  "there? Change router.port in the file",
                                  host, port, strerror(-fd));
            serve_router_stop(r);
            return -EADDRINUSE;
        }
        if (i == 0) {
            /* the kernel's port for 0: the other loops' sockets take it too */
            struct sockaddr_storage got;
            socklen_t gl = sizeof(got);
            getsockname(fd, (struct sockaddr *)&got, &gl);
            uint16_t p = got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                                   : ((struct sockaddr_in *)&got)->sin_port;
            r->port = ntohs(p);
            if (ss.ss_family == AF_INET6)
                s6->sin6_port = p;
            else
                s4->sin_port = p;
        }
        if (loop_init(&r->loops[i], r, fd, timeout_s, tlsopt, tls) != 0) {
            if (tls)
                *errmsg = cr_asprintf("cannot listen with TLS on %s:%u: the certificate or key "
                                      "was refused (PEM, the key matching the certificate?)",
                                      host, port);
            else
                *errmsg = cr_asprintf("cannot serve on %s:%u: microhttpd did not start (%s)", host,
                                      port, strerror(errno ? errno : EINVAL));
            serve_router_stop(r);
            return CR_EINVAL;
        }
    }
    r->admin_port = r->port;
    if (tls) {
        struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        r->admin.d = MHD_start_daemon(
            MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                MHD_USE_ERROR_LOG,
            0, NULL, NULL, handle_admin, &r->admin, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&lo,
            MHD_OPTION_NOTIFY_COMPLETED, completed, &r->admin, MHD_OPTION_THREAD_STACK_SIZE,
            (size_t)(256u << 10), MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_CONNECTION_TIMEOUT,
            30u, MHD_OPTION_END);
        const union MHD_DaemonInfo *di =
            r->admin.d ? MHD_get_daemon_info(r->admin.d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
        if (!di) {
            *errmsg = cr_strdup("cannot listen on 127.0.0.1 for the router's admin calls");
            serve_router_stop(r);
            return -EADDRINUSE;
        }
        r->admin_port = di->port;
    }
    for (size_t i = 0; i < r->nloops; i++) {
        if (pthread_create(&r->loops[i].th, NULL, loop_run, &r->loops[i]) != 0) {
            *errmsg = cr_strdup("cannot start the router's threads (out of memory?)");
            serve_router_stop(r);
            return -EAGAIN;
        }
        r->loops[i].started = true;
    }
    *out = r;
    return 0;
}

void serve_router_stop(serve_router_t *r)
{
    if (!r)
        return;
    __atomic_store_n(&r->stopping, 1, __ATOMIC_RELEASE);
    wake_loops(r);
    for (size_t i = 0; i < r->nloops; i++) {
        loop_t *lp = &r->loops[i];
        if (lp->started)
            pthread_join(lp->th, NULL);
        if (lp->d)
            MHD_stop_daemon(lp->d);
        if (lp->ep >= 0)
            close(lp->ep);
        if (lp->wake >= 0)
            close(lp->wake);
        if (lp->lfd >= 0)
            close(lp->lfd);
        while (lp->spare) {
            req_t *q = lp->spare;
            lp->spare = q->next;
            free(q);
        }
        free(lp->owner);
    }
    if (r->admin.d)
        MHD_stop_daemon(r->admin.d);
    for (size_t i = 0; i < r->nmodels; i++) {
        for (size_t k = 0; k < r->models[i].cap; k++)
            pool_drain(&r->models[i].reps[k]);
        serve_affinity_free(r->models[i].aff);
        free(r->models[i].id);
        free(r->models[i].reps);
    }
    free(r->models);
    for (size_t i = 0; r->keys && r->keys[i]; i++)
        free(r->keys[i]);
    free(r->keys);
    free(r->admin_token);
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
    bool waiters = md->queued > 0;
    pthread_mutex_unlock(&r->mu);
    if (waiters)
        wake_loops(r); /* a replica that became ready takes the queued requests */
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
