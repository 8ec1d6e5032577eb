/* The owner side of tasks and actors from C (include/corral/tasks.h,
 * docs/actors.md).
 *
 * A corral_tasks_t leases workers from the head (one-worker jobs bound to
 * its own head connection), listens for them on a private Unix socket
 * (and TCP when asked), and sends them calls directly.
 *
 * Threads, and why: libcorral is used from user programs, not from the
 * daemons, so it may run threads of its own. Two do:
 *   - the I/O thread owns the listening sockets and reads every worker
 *     connection (epoll): accepts, handshakes, RETURNs, deaths, idle
 *     workers given back;
 *   - the head thread owns the head connection's use for leases: submits
 *     them, watches the ones that have not connected yet, stops them.
 *     (hlock guards the corral_t, which user threads use too for names.)
 * Everything else (shapes, leases, calls, actors, connections' output) is
 * under one mutex, t->lock. Callers write their frames themselves when
 * the connection has nothing queued (one system call, no thread hop);
 * what does not go at once is left to the I/O thread (EPOLLOUT). Lock
 * order: hlock is never taken with t->lock held. */
#include "net/net.h"
#include "client/tasks_int.h"
#include "worker/frame.h"
#include <corral/corral.h>
#include <corral/tasks.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

extern char **environ;

#define PIPELINE_MAX 16 /* calls in flight on one task worker at most, once at the cap */
#define CAP_MAX 64
/* with more calls than this in flight on a worker, a call is sent with the
 * ones after it rather than at once */
#define BATCH_AFTER 4
/* with more than this many sent and unanswered, the I/O thread is not woken
 * for a call left queued: it sends it after reading the next RETURNs */
#define WAKE_UNTIL 32

/* ---- per-thread error text ---- */
static __thread char errbuf[512];

static int fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
    va_end(ap);
    return rc;
}

const char *corral_tasks_errmsg(void)
{
    return errbuf;
}

/* ---- refs ---- */
#define REF_INLINE 48
struct corral_ref {
    atomic_int refs;
    atomic_int done;
    int err;
    char *errmsg;
    uint8_t *data; /* small: inline; else heap, or a read-only mapping of fd */
    size_t len;
    int fd;
    uint8_t inline_data[REF_INLINE];
};

static corral_ref_t *ref_new(void)
{
    corral_ref_t *r = cr_calloc(1, sizeof(*r));
    atomic_init(&r->refs, 1);
    r->fd = -1;
    return r;
}

static void ref_release(corral_ref_t *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    if (r->fd >= 0) {
        if (r->data)
            munmap(r->data, r->len);
        close(r->fd);
    } else if (r->data != r->inline_data) {
        free(r->data);
    }
    free(r->errmsg);
    free(r);
}

void corral_ref_free(corral_ref_t *r)
{
    ref_release(r);
}

bool corral_ref_is_ready(const corral_ref_t *r)
{
    return atomic_load(&((corral_ref_t *)r)->done);
}

const char *corral_ref_error(const corral_ref_t *r)
{
    return corral_ref_is_ready(r) && r->errmsg ? r->errmsg : "";
}

/* ---- the owner's state ---- */
typedef struct call call_t;
typedef struct lease lease_t;
typedef struct shape shape_t;
typedef struct conn conn_t;

struct call {
    call_t *next;      /* in a queue */
    corral_ref_t *ref; /* the runtime's hold; NULL for a constructor */
    char *name;
    uint8_t *args;
    size_t len;
    corral_ref_t *argref; /* instead of args: a value (held) */
    int retries_left;     /* -1: without end */
    uint64_t id;
    bool ctor;
    bool cancelled; /* in flight, its ref failed by corral_cancel: its RETURN is dropped */
    /* corral_task_submit_args: the refs it waits for (held), its shape,
     * and once they are done the encoded arguments (args points there) */
    corral_ref_t **deps;
    size_t ndeps;
    shape_t *dep_shape;
    uint8_t *argbuf;
    /* its result, kept in its worker (reached over TCP), being fetched into
     * a memfd here: fetch_map (writable) non-NULL while it is */
    uint8_t *fetch_map;
    int fetch_fd;
    uint64_t fetch_oid, fetch_size, fetch_got;
};

typedef struct callq {
    call_t *head, *tail;
    size_t n;
} callq_t;

struct conn {
    int fd;
    bool unix_sock, hello, dead;
    crt_reader_t rd; /* the I/O thread's */
    crt_bytes_t out; /* under t->lock */
    struct fdmark {
        size_t pos;
        int fd;
    } marks[CRT_MAX_FDS];
    unsigned nmarks;
    bool want_out; /* EPOLLOUT armed */
    bool direct;   /* a caller waiting in corral_get reads it (not the I/O thread) */
    bool caller;   /* another process asking where this owner's actors listen */
    bool dirty;    /* out holds frames no one is sending yet: the I/O thread will */
    uint8_t nonce[CRT_NONCE_LEN];
    lease_t *lease;
    conn_t *next; /* t->conns */
};

enum lease_state { L_NEW, L_SUBMITTED, L_CONNECTED, L_DEAD };

struct lease {
    char id[40];
    char *job;
    enum lease_state state;
    shape_t *shape;
    corral_actor_t *actor;
    conn_t *conn;
    /* calls in flight on conn: inflight_put says how */
    call_t **slots;
    size_t nslots, ninflight;
    uint64_t base, next_id;
    int64_t idle_since, connect_by;
    bool stop;       /* stop its job (killed actor, idle, shutdown) */
    bool busy;       /* the head thread uses it with t->lock released */
    int64_t watched; /* when the head thread last asked for its job */
    char *listen;    /* an actor's: the directory its worker listens in for other callers */
    char waddr[80];  /* its worker's TCP address for them (HELLO's "address"); "" none */
    lease_t *next;   /* t->leases */
};

struct shape {
    char *resources, *selector;
    unsigned cap; /* 0: not known yet */
    bool cap_asked;
    unsigned nleases; /* not dead */
    unsigned leasing; /* not connected yet */
    callq_t queue;
    shape_t *next;
};

struct corral_actor {
    corral_tasks_t *t; /* NULL once the owner shut down */
    char *cls, *name;
    uint8_t *args;
    size_t len;
    corral_actor_opts_t o;
    char *resources, *selector;
    lease_t *lease;
    callq_t queue; /* calls waiting for the actor to be up */
    int restarts_left;
    unsigned restarts;
    bool ready, dead;
    char *why_dead;
    /* found by corral_actor_get: another owner's, called over remote_conn's
     * lease (never leased or restarted here); its lease job's id */
    bool remote;
    char *remote_job;
    corral_actor_t *next; /* t->actors */
};

struct corral_tasks {
    corral_tasks_opts_t o;
    corral_t *head;
    pthread_mutex_t hlock; /* head */
    pthread_mutex_t lock;
    pthread_cond_t done;  /* a ref completed */
    pthread_cond_t hwake; /* the head thread has work */
    unsigned waiters;
    bool poked;     /* the eventfd was written and not read yet */
    bool io_signal; /* refs completed on the I/O thread: broadcast once */
    pthread_t io, hthread;
    bool io_started, h_started, closing;
    int ep, evfd, lunix, ltcp;
    char dir[64], sock_path[128], address[256], node[128];
    char ns[129]; /* named actors' namespace: CORRAL_NAMESPACE, else "default" */
    char **argv;
    uint8_t secret[32];
    char secret_hex[65];
    shape_t *shapes;
    lease_t *leases;
    conn_t *conns;
    corral_actor_t *actors;
    unsigned lease_seq;
    callq_t parked; /* calls waiting for their ref arguments */
};

static int64_t now_ms(void)
{
    return cr_mono_ms();
}

/* ---- queues and the in-flight table ---- */
static void q_push(callq_t *q, call_t *c)
{
    c->next = NULL;
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
    q->n++;
}

static void q_push_front(callq_t *q, call_t *c)
{
    c->next = q->head;
    q->head = c;
    if (!q->tail)
        q->tail = c;
    q->n++;
}

static call_t *q_pop(callq_t *q)
{
    call_t *c = q->head;
    if (!c)
        return NULL;
    q->head = c->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    c->next = NULL;
    return c;
}

/* The calls in flight on a lease are a window of its sequential ids,
 * [base, next_id], in a ring indexed by id: put and take are O(1) in
 * order or not (an actor's threads answer out of order). */
static void inflight_put(lease_t *l, call_t *c)
{
    if (!l->ninflight)
        l->base = c->id;
    if (c->id - l->base >= l->nslots) {
        size_t cap = l->nslots ? l->nslots : 16;
        while (c->id - l->base >= cap)
            cap *= 2;
        call_t **ns = cr_calloc(cap, sizeof(*ns));
        for (uint64_t id = l->base; l->nslots && id < c->id; id++)
            ns[id & (cap - 1)] = l->slots[id & (l->nslots - 1)];
        free(l->slots);
        l->slots = ns;
        l->nslots = cap;
    }
    l->slots[c->id & (l->nslots - 1)] = c;
    l->ninflight++;
}

static call_t *inflight_take(lease_t *l, uint64_t id)
{
    if (!l->ninflight || id < l->base || id > l->next_id)
        return NULL;
    size_t m = l->nslots - 1;
    call_t *c = l->slots[id & m];
    if (!c || c->id != id)
        return NULL;
    l->slots[id & m] = NULL;
    if (--l->ninflight)
        while (!l->slots[l->base & m])
            l->base++;
    return c;
}

/* The in-flight calls of l, oldest first; the window is left empty. */
static call_t **inflight_all(lease_t *l, size_t *n)
{
    call_t **v = cr_calloc(l->ninflight + 1, sizeof(*v));
    size_t k = 0;
    for (uint64_t id = l->base; l->ninflight && id <= l->next_id; id++) {
        call_t **slot = &l->slots[id & (l->nslots - 1)];
        if (*slot && (*slot)->id == id) {
            v[k++] = *slot;
            *slot = NULL;
        }
    }
    l->ninflight = 0;
    *n = k;
    return v;
}

/* ---- completing calls ---- */

/* A call of "prefix.name" (prefix NULL: "name") with a copy of len bytes
 * of args, in one allocation: a call costs one malloc besides its ref. */
static call_t *call_new(const char *prefix, const char *name, const void *args, size_t len)
{
    size_t pl = prefix ? strlen(prefix) + 1 : 0, nl = strlen(name);
    call_t *c = cr_malloc(sizeof(*c) + pl + nl + 1 + len);
    memset(c, 0, sizeof(*c));
    c->name = (char *)(c + 1);
    if (prefix) {
        memcpy(c->name, prefix, pl - 1);
        c->name[pl - 1] = '.';
    }
    memcpy(c->name + pl, name, nl + 1);
    if (len) {
        c->args = (uint8_t *)c->name + pl + nl + 1;
        memcpy(c->args, args, len);
        c->len = len;
    }
    return c;
}
static void deps_release(call_t *c)
{
    for (size_t i = 0; i < c->ndeps; i++)
        ref_release(c->deps[i]);
    free(c->deps);
    c->deps = NULL;
    c->ndeps = 0;
}

/* Drops what a fetch of c's result holds (its worker drops the object
 * when its connection ends, or when the fetch ran to the end). */
static void fetch_reset(call_t *c)
{
    if (!c->fetch_map)
        return;
    munmap(c->fetch_map, c->fetch_size);
    close(c->fetch_fd);
    c->fetch_map = NULL;
    c->fetch_got = c->fetch_size = 0;
}

static void call_free(call_t *c)
{
    fetch_reset(c);
    ref_release(c->ref);
    ref_release(c->argref);
    deps_release(c);
    free(c->argbuf);
    free(c); /* its name and args live in the same allocation */
}

/* Under t->lock. */
static void ref_finish(corral_tasks_t *t, corral_ref_t *r, int err, const char *msg)
{
    if (!r || atomic_load(&r->done))
        return;
    r->err = err;
    if (err)
        r->errmsg = cr_strdup(msg ? msg : cr_strerror(err));
    atomic_store(&r->done, 1);
    /* the I/O thread completes refs in batches (a read's worth of
     * RETURNs): it wakes waiters once per batch, not once per ref */
    if (t->io_started && pthread_equal(pthread_self(), t->io))
        t->io_signal = true;
    else if (t->waiters)
        pthread_cond_broadcast(&t->done);
}

static void call_fail(corral_tasks_t *t, call_t *c, int err, const char *msg)
{
    ref_finish(t, c->ref, err, msg);
    call_free(c);
}

/* ---- sending ---- */
static void conn_events(corral_tasks_t *t, conn_t *c)
{
    struct epoll_event ev = {.events = (c->direct ? 0 : EPOLLIN) | (c->want_out ? EPOLLOUT : 0),
                             .data.ptr = c};
    epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void conn_arm(corral_tasks_t *t, conn_t *c, bool out)
{
    if (c->want_out == out || c->dead)
        return;
    c->want_out = out;
    conn_events(t, c);
}

/* Writes what c->out holds without blocking; under t->lock. 0 (all sent,
 * or the rest left to EPOLLOUT) or -errno (the connection is broken). */
static int conn_flush(corral_tasks_t *t, conn_t *c)
{
    crt_bytes_t *b = &c->out;
    while (b->off < b->len) {
        size_t end = b->len;
        int fd = -1;
        if (c->nmarks) {
            if (c->marks[0].pos == b->off) {
                fd = c->marks[0].fd;
                end = c->nmarks > 1 ? c->marks[1].pos : b->len;
            } else {
                end = c->marks[0].pos;
            }
        }
        ssize_t n = crt_send(c->fd, b->p + b->off, end - b->off, fd, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                conn_arm(t, c, true);
                return 0;
            }
            return -errno;
        }
        if (fd >= 0) {
            close(fd);
            memmove(c->marks, c->marks + 1, --c->nmarks * sizeof(c->marks[0]));
        }
        b->off += (size_t)n;
    }
    b->off = b->len = 0;
    conn_arm(t, c, false);
    return 0;
}

/* Appends call c to l's connection and sends it; under t->lock. */
static int send_call(corral_tasks_t *t, lease_t *l, call_t *c)
{
    conn_t *cn = l->conn;
    fetch_reset(c); /* sent again (a retry): a fetch begun for it is over */
    c->id = ++l->next_id;
    const void *args = c->args;
    size_t len = c->len;
    int fd = -1;
    if (c->argref) {
        if (c->argref->fd >= 0 && cn->unix_sock && cn->nmarks < CRT_MAX_FDS) {
            fd = fcntl(c->argref->fd, F_DUPFD_CLOEXEC, 0);
            if (fd < 0)
                return -errno;
            len = 0;
        } else {
            args = c->argref->data;
            len = c->argref->len;
        }
    }
    bool was_empty = cn->out.len == cn->out.off;
    size_t pos = cn->out.len;
    int rc = crt_call_add(&cn->out, c->id, fd >= 0 ? CRT_FLAG_FD : 0, c->name, args, len);
    if (rc) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    if (fd >= 0)
        cn->marks[cn->nmarks++] = (struct fdmark){pos, fd};
    inflight_put(l, c);
    if (!was_empty || cn->dirty)
        return 0;
    if (l->ninflight <= BATCH_AFTER || !t->io_started) {
        conn_flush(t, cn); /* a broken connection shows as its end on the I/O thread */
        return 0;
    }
    /* the worker has calls to run already: leave this one to go with the
     * next ones in one write (by the I/O thread, or a caller that waits) */
    cn->dirty = true;
    /* with many answers to come, the I/O thread sends these when it reads
     * the next ones (more go in one write); else it is woken for them */
    if (l->ninflight - 1 <= WAKE_UNTIL && !t->poked) {
        t->poked = true;
        uint64_t one = 1;
        if (write(t->evfd, &one, sizeof(one)) < 0)
            cr_debug("tasks: eventfd: %s", strerror(errno));
    }
    return 0;
}

/* Sends what callers left queued; under t->lock. */
static void flush_dirty(corral_tasks_t *t)
{
    for (conn_t *c = t->conns; c; c = c->next)
        if (c->dirty) {
            c->dirty = false;
            if (!c->dead)
                conn_flush(t, c);
        }
}

/* ---- leasing ---- */
static void head_wake(corral_tasks_t *t)
{
    pthread_cond_signal(&t->hwake);
}

static lease_t *lease_new(corral_tasks_t *t, shape_t *s, corral_actor_t *a)
{
    lease_t *l = cr_calloc(1, sizeof(*l));
    uint8_t rnd[6];
    cr_random_bytes(rnd, sizeof(rnd));
    char hex[13];
    cr_hex_encode(rnd, sizeof(rnd), hex);
    snprintf(l->id, sizeof(l->id), "L%u-%s", ++t->lease_seq, hex);
    l->shape = s;
    l->actor = a;
    l->state = L_NEW;
    if (a) {
        /* made by the worker itself (mkdir 0700, which fails when anything
         * is there); never by this process */
        const char *tmp = getenv("TMPDIR");
        uint8_t r2[8];
        char h2[17];
        cr_random_bytes(r2, sizeof(r2));
        cr_hex_encode(r2, sizeof(r2), h2);
        l->listen =
            cr_asprintf("%s/corral-actor-%s",
                        tmp && *tmp && strlen(tmp) < 48 && tmp[0] == '/' ? tmp : "/tmp", h2);
    }
    l->next = t->leases;
    t->leases = l;
    if (s) {
        s->nleases++;
        s->leasing++;
    }
    head_wake(t);
    return l;
}

static void dispatch(corral_tasks_t *t, shape_t *s);

/* Leases more workers of s while calls wait for them; under t->lock. */
static void maybe_lease(corral_tasks_t *t, shape_t *s)
{
    unsigned cap = s->cap ? s->cap : 1;
    if (t->o.max_workers && cap > t->o.max_workers)
        cap = t->o.max_workers;
    if (!s->cap_asked) {
        s->cap_asked = true;
        head_wake(t);
    }
    while (s->queue.n > s->leasing && s->nleases < cap && !t->closing)
        lease_new(t, s, NULL);
}

static void dispatch(corral_tasks_t *t, shape_t *s)
{
    while (s->queue.n) {
        lease_t *best = NULL;
        for (lease_t *l = t->leases; l; l = l->next)
            if (l->shape == s && l->state == L_CONNECTED &&
                (!best || l->ninflight < best->ninflight))
                best = l;
        unsigned cap = s->cap ? s->cap : 1;
        if (t->o.max_workers && cap > t->o.max_workers)
            cap = t->o.max_workers;
        /* an idle worker; or, with no more to lease, the least busy one */
        if (!best || (best->ninflight && (s->nleases < cap || best->ninflight >= PIPELINE_MAX)))
            break;
        call_t *c = q_pop(&s->queue);
        int rc = send_call(t, best, c);
        if (rc)
            call_fail(t, c, rc, rc == CR_E2BIG ? "the arguments do not fit a frame" : NULL);
    }
    maybe_lease(t, s);
}

/* A call whose ref arguments are all done: its arguments encoded (or it
 * fails with a failed one's code); 0 when it may go to its shape. */
static int args_resolve(corral_tasks_t *t, call_t *c)
{
    size_t n = c->ndeps + 1;
    const void **p = cr_calloc(n, sizeof(*p));
    size_t *len = cr_calloc(n, sizeof(*len));
    int rc = 0;
    p[0] = c->args;
    len[0] = c->len;
    size_t bad = 0; /* 1 + the index of the first failed ref, 0 none */
    for (size_t i = 0; i < c->ndeps && !bad; i++) {
        p[i + 1] = c->deps[i]->data;
        len[i + 1] = c->deps[i]->len;
        if (c->deps[i]->err)
            bad = i + 1;
    }
    if (bad) {
        corral_ref_t *d = c->deps[bad - 1];
        char *m = cr_asprintf("ref argument %zu failed: %s", bad,
                              d->errmsg ? d->errmsg : cr_strerror(d->err));
        rc = d->err;
        call_fail(t, c, rc, m); /* frees c (and its hold on d) */
        free(m);
    }
    if (!rc && 12 + 2 + strlen(c->name) + crt_args_size(len, n) > CRT_MAX_FRAME) {
        call_fail(t, c, CR_E2BIG,
                  "its arguments and ref arguments do not fit a frame together: pass one large "
                  "value alone with corral_task_submit_ref");
        rc = CR_E2BIG;
    }
    if (!rc) {
        crt_bytes_t b = {0};
        crt_args_add(&b, p, len, n);
        c->argbuf = b.p;
        c->args = b.p;
        c->len = b.len;
        deps_release(c);
    }
    free(p);
    free(len);
    return rc;
}

/* Sends on the parked calls whose ref arguments are all done; under
 * t->lock, where no queue is being walked. */
static void resolve_parked(corral_tasks_t *t)
{
    if (!t->parked.n)
        return;
    callq_t keep = {0};
    call_t *c;
    while ((c = q_pop(&t->parked))) {
        bool ready = true;
        for (size_t i = 0; i < c->ndeps && ready; i++)
            ready = atomic_load(&c->deps[i]->done);
        if (!ready) {
            q_push(&keep, c);
            continue;
        }
        shape_t *s = c->dep_shape;
        if (args_resolve(t, c) == 0) {
            q_push(&s->queue, c);
            dispatch(t, s);
        }
    }
    t->parked = keep;
}

static void actor_dead(corral_tasks_t *t, corral_actor_t *a, int err, const char *why);

static void actor_send_queue(corral_tasks_t *t, corral_actor_t *a)
{
    lease_t *l = a->lease;
    call_t *c;
    while (l && l->state == L_CONNECTED && (c = q_pop(&a->queue))) {
        int rc = send_call(t, l, c);
        if (rc)
            call_fail(t, c, rc, rc == CR_E2BIG ? "the arguments do not fit a frame" : NULL);
    }
}

static void conn_close(corral_tasks_t *t, conn_t *c)
{
    if (c->dead)
        return;
    c->dead = true;
    epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
    shutdown(c->fd, SHUT_RDWR);
}

/* An actor worker's directory for other callers, once it is gone (its
 * worker, killed, could not): only when it is a directory of this user's,
 * not a link, and then only the socket "s" in it. */
static void listen_dir_remove(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return;
    char *s = cr_asprintf("%s/s", dir);
    unlink(s);
    free(s);
    rmdir(dir);
}

/* The lease's worker is gone (its connection ended, or it never came);
 * under t->lock. why: what to tell the calls that fail. */
static void lease_lost(corral_tasks_t *t, lease_t *l, int err, const char *why)
{
    if (l->state == L_DEAD)
        return;
    bool connected = l->state == L_CONNECTED;
    l->state = L_DEAD;
    if (l->conn) {
        conn_close(t, l->conn);
        l->conn->lease = NULL;
        l->conn = NULL;
    }
    size_t n;
    call_t **v = inflight_all(l, &n);
    if (l->shape) {
        shape_t *s = l->shape;
        s->nleases--;
        if (!connected)
            s->leasing--;
        /* retry what ran there, oldest first at the front */
        for (size_t i = n; i-- > 0;) {
            call_t *c = v[i];
            if (c->cancelled) {
                call_free(c); /* never retried: its ref failed already */
            } else if (c->retries_left && !t->closing) {
                if (c->retries_left > 0)
                    c->retries_left--;
                q_push_front(&s->queue, c);
            } else {
                call_fail(t, c, CR_EWORKERDIED, why);
            }
        }
        if (!connected && !s->nleases && s->queue.n &&
            (err == CR_EINFEASIBLE || err == CR_EINVAL)) {
            call_t *c;
            while ((c = q_pop(&s->queue)))
                call_fail(t, c, err, why);
        } else if (!connected && !s->nleases && !s->leasing && s->queue.n) {
            /* no worker of the shape came at all: fail the waiting calls
             * rather than lease for ever */
            call_t *c;
            while ((c = q_pop(&s->queue)))
                call_fail(t, c, err ? err : CR_EWORKERDIED, why);
        }
        dispatch(t, s);
    } else if (l->actor) {
        corral_actor_t *a = l->actor;
        if (l->listen)
            listen_dir_remove(l->listen);
        if (a->lease == l)
            a->lease = NULL;
        bool restart = !a->dead && !t->closing && connected && a->restarts_left != 0;
        for (size_t i = n; i-- > 0;) {
            call_t *c = v[i];
            if (c->ctor || c->cancelled) {
                call_free(c);
                continue;
            }
            if (restart && c->retries_left) {
                if (c->retries_left > 0)
                    c->retries_left--;
                q_push_front(&a->queue, c);
            } else {
                char *m = cr_asprintf("actor %s%s%s: %s", a->cls, a->name ? " " : "",
                                      a->name ? a->name : "", why);
                call_fail(t, c, CR_EACTORDIED, m);
                free(m);
            }
        }
        if (restart) {
            if (a->restarts_left > 0)
                a->restarts_left--;
            a->restarts++;
            a->ready = false;
            a->lease = lease_new(t, NULL, a);
        } else if (!a->dead) {
            actor_dead(t, a, err, why);
        }
    }
    free(v);
}

static void actor_dead(corral_tasks_t *t, corral_actor_t *a, int err, const char *why)
{
    if (!a->dead) {
        a->dead = true;
        free(a->why_dead);
        a->why_dead = cr_asprintf("actor %s%s%s is dead: %s", a->cls, a->name ? " " : "",
                                  a->name ? a->name : "", why);
    }
    call_t *c;
    while ((c = q_pop(&a->queue)))
        call_fail(t, c, CR_EACTORDIED, a->why_dead);
    if (a->lease) {
        lease_t *l = a->lease;
        a->lease = NULL;
        l->stop = true;
        head_wake(t);
        lease_lost(t, l, CR_EACTORDIED, a->why_dead);
    }
}

/* ---- the I/O thread ---- */
static void conn_free(conn_t *c)
{
    crt_reader_fini(&c->rd);
    crt_bytes_free(&c->out);
    for (unsigned i = 0; i < c->nmarks; i++)
        close(c->marks[i].fd);
    close(c->fd);
    free(c);
}

static void accept_one(corral_tasks_t *t, int lfd, bool unix_sock)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    if (unix_sock) {
        struct ucred cred;
        socklen_t cl = sizeof(cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.uid != geteuid()) {
            cr_warn("tasks: refused a connection from uid %d (not this user)", (int)cred.uid);
            close(fd);
            return;
        }
    } else {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    conn_t *c = cr_calloc(1, sizeof(*c));
    c->fd = fd;
    c->unix_sock = unix_sock;
    crt_reader_init(&c->rd, CRT_HELLO_MAX);
    pthread_mutex_lock(&t->lock);
    c->next = t->conns;
    t->conns = c;
    if (!unix_sock) {
        cr_random_bytes(c->nonce, sizeof(c->nonce));
        crt_frame_add(&c->out, CRT_CHALLENGE, 0, 0, c->nonce, sizeof(c->nonce), NULL, 0);
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &ev);
    if (!unix_sock)
        conn_flush(t, c);
    pthread_mutex_unlock(&t->lock);
}

/* HELLO on c; under t->lock. 0, or an error: close c. */
static int on_hello(corral_tasks_t *t, conn_t *c, const uint8_t *p, size_t n)
{
    crt_hello_t h;
    char why[160];
    if (crt_hello_parse(p, n, &h, why, sizeof(why))) {
        cr_warn("tasks: closing a connection: %s", why);
        return CR_EPARSE;
    }
    int rc = CR_EACCES;
    uint8_t cnonce[CRT_NONCE_LEN];
    char wmac[65] = "";
    if (!c->unix_sock && !crt_mac_ok(t->secret, sizeof(t->secret), c->nonce, h.mac)) {
        cr_warn("tasks: closing a TCP connection whose HELLO has a wrong mac");
        goto out;
    }
    if (!c->unix_sock) {
        /* the peer's own challenge: WELCOME proves the secret back */
        if (crt_nonce_parse(h.nonce, cnonce)) {
            cr_warn("tasks: closing a TCP connection whose HELLO has no \"nonce\" of 64 hex "
                    "digits (a worker of an older corral cannot check its owner)");
            goto out;
        }
        crt_welcome_mac_hex(t->secret, sizeof(t->secret), c->nonce, cnonce, wmac);
    }
    if (!strcmp(h.role, "caller")) {
        /* another process that looks an actor up (corral_actor_get) */
        c->hello = true;
        c->caller = true;
        char *w = cr_asprintf("{\"pid\":%d,\"runtime\":\"c\"%s%s%s}", (int)getpid(),
                              *wmac ? ",\"mac\":\"" : "", wmac, *wmac ? "\"" : "");
        crt_frame_add(&c->out, CRT_WELCOME, 0, 0, w, strlen(w), NULL, 0);
        free(w);
        conn_flush(t, c);
        rc = 0;
        goto out;
    }
    lease_t *l = NULL;
    for (lease_t *x = t->leases; x && h.lease; x = x->next)
        if (!strcmp(x->id, h.lease))
            l = x;
    if (!l || strcmp(h.role, "worker") || (l->state != L_NEW && l->state != L_SUBMITTED) ||
        (!l->shape && !l->actor)) {
        cr_warn("tasks: closing a connection: HELLO names no lease waiting for its worker (%s)",
                h.lease ? h.lease : "none");
        goto out;
    }
    c->hello = true;
    c->rd.max = CRT_MAX_FRAME;
    c->lease = l;
    l->conn = c;
    l->waddr[0] = 0;
    /* an actor's worker says where it takes callers over TCP */
    if (h.address && l->actor && cr_str_has_prefix(h.address, "tcp:") &&
        strlen(h.address) < sizeof(l->waddr) &&
        strspn(h.address + 4, "0123456789.:") == strlen(h.address + 4))
        cr_strlcpy(l->waddr, h.address, sizeof(l->waddr));
    l->state = L_CONNECTED;
    l->idle_since = now_ms();
    char *w = cr_asprintf("{\"pid\":%d,\"runtime\":\"c\"%s%s%s}", (int)getpid(),
                          *wmac ? ",\"mac\":\"" : "", wmac, *wmac ? "\"" : "");
    crt_frame_add(&c->out, CRT_WELCOME, 0, 0, w, strlen(w), NULL, 0);
    free(w);
    if (l->shape) {
        l->shape->leasing--;
        dispatch(t, l->shape);
    } else if (l->actor) {
        corral_actor_t *a = l->actor;
        call_t *k = call_new(NULL, a->cls, a->args, a->len);
        k->ctor = true;
        send_call(t, l, k);
        actor_send_queue(t, a);
    }
    conn_flush(t, c);
    rc = 0;
out:
    crt_hello_free(&h);
    return rc;
}

/* Asks k's worker for the next chunk of k's kept result; under t->lock. */
static void fetch_next(corral_tasks_t *t, lease_t *l, call_t *k)
{
    uint64_t left = k->fetch_size - k->fetch_got;
    uint32_t n = left > CRT_FETCH_CHUNK ? CRT_FETCH_CHUNK : (uint32_t)left;
    k->id = ++l->next_id;
    inflight_put(l, k);
    crt_fetch_add(&l->conn->out, k->id, k->fetch_oid, k->fetch_got, n);
    conn_flush(t, l->conn);
}

/* A RETURN of k that is a chunk of its kept result (k->fetch_map), or
 * says the result was kept (CRT_FLAG_OBJ): 1 when it was handled here
 * (k is given back to the lease or finished), 0 when on_return goes on. */
static int on_fetch_return(corral_tasks_t *t, lease_t *l, call_t *k, const crt_hdr_t *h, uint8_t st,
                           const uint8_t *v, size_t vn)
{
    corral_ref_t *r = k->ref;
    char why[200];
    if (!k->fetch_map) {
        if (st != CRT_OK || !(h->flags & CRT_FLAG_OBJ) || !r)
            return 0;
        uint64_t size = 0, oid = 0;
        if (vn != 16) {
            snprintf(why, sizeof(why), "a kept result's RETURN of %zu bytes (not 16)", vn);
            goto fail;
        }
        for (int i = 0; i < 8; i++) {
            size = size << 8 | v[i];
            oid = oid << 8 | v[8 + i];
        }
        if (size < 1 || size > CORRAL_TASK_MAX_OBJECT) {
            snprintf(why, sizeof(why), "a kept result of %llu bytes (1 to %zu)",
                     (unsigned long long)size, (size_t)CORRAL_TASK_MAX_OBJECT);
            goto fail;
        }
        void *map;
        int fd = crt_memfd_new(size, &map);
        if (fd < 0) {
            snprintf(why, sizeof(why), "no memfd of %llu bytes for the result: %s",
                     (unsigned long long)size, cr_strerror(fd));
            goto fail;
        }
        k->fetch_fd = fd;
        k->fetch_map = map;
        k->fetch_size = size;
        k->fetch_got = 0;
        k->fetch_oid = oid;
        fetch_next(t, l, k);
        return 1;
    }
    uint64_t want = k->fetch_size - k->fetch_got;
    if (want > CRT_FETCH_CHUNK)
        want = CRT_FETCH_CHUNK;
    if (st != CRT_OK || vn != want) {
        snprintf(why, sizeof(why), "fetching the result from its worker: %.*s",
                 st != CRT_OK ? (int)(vn > 120 ? 120 : vn) : 20,
                 st != CRT_OK ? (const char *)v : "a chunk of the wrong size");
        goto fail;
    }
    memcpy(k->fetch_map + k->fetch_got, v, vn);
    k->fetch_got += vn;
    if (k->fetch_got < k->fetch_size) {
        fetch_next(t, l, k);
        return 1;
    }
    /* whole: sealed, and mapped read-only for the ref */
    munmap(k->fetch_map, k->fetch_size);
    k->fetch_map = NULL;
    int fd = k->fetch_fd;
    void *map;
    size_t mn;
    int rc = crt_memfd_seal(fd);
    if (!rc)
        rc = crt_memfd_map(fd, &map, &mn);
    if (rc) {
        close(fd);
        snprintf(why, sizeof(why), "the fetched result's memfd could not be sealed or mapped");
        goto fail;
    }
    if (atomic_load(&r->done)) {
        munmap(map, mn);
        close(fd);
    } else {
        r->fd = fd;
        r->data = map;
        r->len = mn;
        ref_finish(t, r, 0, NULL);
    }
    goto done;
fail:
    fetch_reset(k);
    ref_finish(t, r, CR_EPARSE, why);
done:
    call_free(k);
    if (!l->ninflight)
        l->idle_since = now_ms();
    if (l->shape)
        dispatch(t, l->shape);
    return 1;
}

static void on_return(corral_tasks_t *t, conn_t *c, const crt_hdr_t *h, const uint8_t *p, int fd)
{
    lease_t *l = c->lease;
    call_t *k = l ? inflight_take(l, h->id) : NULL;
    if (!k) {
        if (fd >= 0)
            close(fd);
        return; /* a call failed meanwhile (its actor killed) */
    }
    uint8_t st;
    const uint8_t *v;
    size_t vn;
    corral_actor_t *a = l->actor;
    if (crt_return_parse(p, h->len, &st, &v, &vn)) {
        if (fd >= 0)
            close(fd);
        call_fail(t, k, CR_EPARSE, "a malformed RETURN");
        return;
    }
    if (k->cancelled) {
        /* corral_cancel failed its ref already: what came is dropped (and
         * a kept result with it, in its worker) */
        if (fd >= 0)
            close(fd);
        uint64_t oid = 0;
        if (k->fetch_map)
            oid = k->fetch_oid;
        else if (st == CRT_OK && (h->flags & CRT_FLAG_OBJ) && vn == 16)
            for (int i = 0; i < 8; i++)
                oid = oid << 8 | v[8 + i];
        if (oid) {
            crt_fetch_add(&c->out, ++l->next_id, oid, 0, 0);
            conn_flush(t, c);
        }
        call_free(k);
        if (!l->ninflight)
            l->idle_since = now_ms();
        if (l->shape)
            dispatch(t, l->shape);
        return;
    }
    if (k->ctor) {
        if (st == CRT_OK && (h->flags & CRT_FLAG_OBJ) && vn == 16) {
            /* a large constructor result, kept in the worker: dropped */
            uint64_t oid = 0;
            for (int i = 0; i < 8; i++)
                oid = oid << 8 | v[8 + i];
            crt_fetch_add(&c->out, ++l->next_id, oid, 0, 0);
            conn_flush(t, c);
        }
        if (st == CRT_OK) {
            a->ready = true;
        } else {
            char *m = cr_asprintf("its constructor failed: %.*s", (int)vn, v);
            actor_dead(t, a, CR_EACTORDIED, m);
            free(m);
        }
        if (fd >= 0)
            close(fd);
        call_free(k);
        return;
    }
    if (fd < 0 && on_fetch_return(t, l, k, h, st, v, vn))
        return;
    corral_ref_t *r = k->ref;
    if (atomic_load(&r->done)) {
        if (fd >= 0) /* failed meanwhile (cancelled): nothing fills it now */
            close(fd);
    } else if (st == CRT_OK) {
        if (fd >= 0) {
            void *map;
            size_t mn;
            int rc = crt_memfd_map(fd, &map, &mn);
            if (rc) {
                close(fd);
                call_fail(t, k, rc, "the result's memfd could not be mapped");
                return;
            }
            r->fd = fd;
            r->data = map;
            r->len = mn;
        } else {
            r->data = vn <= REF_INLINE ? r->inline_data : cr_malloc(vn);
            memcpy(r->data, v, vn);
            r->len = vn;
        }
        ref_finish(t, r, 0, NULL);
    } else {
        if (fd >= 0)
            close(fd);
        char *m = cr_strndup((const char *)v, vn);
        if (a && a->dead)
            ref_finish(t, r, CR_EACTORDIED, a->why_dead);
        else
            ref_finish(t, r, st == CRT_APP_ERROR ? CR_ETASKFAILED : CR_ENOENT, m);
        free(m);
    }
    call_free(k);
    if (!l->ninflight)
        l->idle_since = now_ms();
    if (l->shape)
        dispatch(t, l->shape);
}

/* Reads what c has; under t->lock (released around nothing: reads do not
 * block). */
/* A caller's CALL; under t->lock: CRT_ACTOR_ADDRESS_CALL with an actor's
 * DIR is answered with its worker's TCP address; anything else with a
 * RETURN status 2 saying why. 0, or an error: close c. */
static int on_caller_call(corral_tasks_t *t, conn_t *c, const crt_hdr_t *h, const uint8_t *p)
{
    const char *name;
    size_t nl, alen;
    const uint8_t *args;
    char why[200];
    if (crt_call_parse(p, h->len, &name, &nl, &args, &alen))
        return CR_EPARSE;
    const char *addr = NULL;
    if (nl != strlen(CRT_ACTOR_ADDRESS_CALL) || memcmp(name, CRT_ACTOR_ADDRESS_CALL, nl)) {
        snprintf(why, sizeof(why), "an owner answers callers %s only", CRT_ACTOR_ADDRESS_CALL);
    } else {
        for (lease_t *l = t->leases; l && !addr; l = l->next)
            if (l->actor && l->listen && l->state == L_CONNECTED && *l->waddr &&
                strlen(l->listen) == alen && !memcmp(l->listen, args, alen))
                addr = l->waddr;
        snprintf(why, sizeof(why), "no live actor of this owner listens at %.*s over TCP",
                 (int)(alen > 120 ? 120 : alen), (const char *)args);
    }
    if (addr)
        crt_return_add(&c->out, h->id, 0, CRT_OK, addr, strlen(addr));
    else
        crt_return_add(&c->out, h->id, 0, CRT_SYS_ERROR, why, strlen(why));
    /* a caller that does not read its answers is closed, not buffered for */
    if (c->out.len - c->out.off > (1u << 20))
        return CR_E2BIG;
    return conn_flush(t, c);
}

static void conn_readable(corral_tasks_t *t, conn_t *c)
{
    char why[200] = "";
    for (int rounds = 0; rounds < 16 && !c->dead; rounds++) {
        ssize_t n = crt_reader_fill(&c->rd, c->fd, c->unix_sock);
        if (n == -EAGAIN)
            break;
        if (n <= 0) {
            snprintf(why, sizeof(why), "its worker's connection ended%s%s",
                     n < 0 ? ": " : " (the process exited or was killed)",
                     n < 0 ? cr_strerror((int)n) : "");
            goto lost;
        }
        crt_hdr_t h;
        const uint8_t *p;
        int fd, rc;
        while ((rc = crt_reader_next(&c->rd, &h, &p, &fd)) == 1) {
            if (!c->hello) {
                if (fd >= 0)
                    close(fd);
                if (h.kind != CRT_HELLO || on_hello(t, c, p, h.len)) {
                    if (h.kind != CRT_HELLO)
                        cr_warn("tasks: closing a connection whose first frame is %s, not HELLO",
                                crt_kind_name(h.kind));
                    conn_close(t, c);
                    return;
                }
                continue;
            }
            if (c->caller) {
                if (fd >= 0)
                    close(fd);
                if (h.kind != CRT_CALL || on_caller_call(t, c, &h, p)) {
                    if (h.kind != CRT_BYE)
                        cr_warn("tasks: closing a caller's connection: a %s frame",
                                crt_kind_name(h.kind));
                    conn_close(t, c);
                    return;
                }
                continue;
            }
            if (h.kind == CRT_RETURN) {
                on_return(t, c, &h, p, fd);
                if (c->dead)
                    return;
                continue;
            }
            if (fd >= 0)
                close(fd);
            if (h.kind == CRT_BYE) {
                snprintf(why, sizeof(why), "its worker said BYE");
                goto lost;
            }
            snprintf(why, sizeof(why), "its worker sent a %s frame", crt_kind_name(h.kind));
            cr_warn("tasks: closing a connection: %s", why);
            goto lost;
        }
        if (rc < 0) {
            snprintf(why, sizeof(why), "its worker sent a bad frame (%s)", cr_strerror(rc));
            cr_warn("tasks: closing a connection: %s", why);
            goto lost;
        }
    }
    return;
lost:
    if (c->lease) {
        char *m = cr_asprintf("%s (job %s)", why, c->lease->job ? c->lease->job : "?");
        lease_lost(t, c->lease, CR_EWORKERDIED, m);
        free(m);
    }
    conn_close(t, c);
}

static void reap(corral_tasks_t *t)
{
    int64_t now = now_ms();
    unsigned idle = t->o.idle_timeout_ms ? t->o.idle_timeout_ms : 10000;
    for (lease_t *l = t->leases; l; l = l->next)
        if (l->shape && l->state == L_CONNECTED && !l->ninflight && !l->shape->queue.n &&
            now - l->idle_since > idle) {
            crt_frame_add(&l->conn->out, CRT_BYE, 0, 0, NULL, 0, NULL, 0);
            conn_flush(t, l->conn);
            lease_lost(t, l, 0, "given back idle");
        }
    /* leases that are over: free them (not one the head thread holds, nor
     * one whose job is still to be stopped) */
    for (lease_t **pl = &t->leases; *pl;) {
        lease_t *l = *pl;
        if (l->state == L_DEAD && !l->busy && !(l->stop && l->job) && !l->conn) {
            *pl = l->next;
            free(l->job);
            free(l->slots);
            free(l->listen);
            free(l);
        } else {
            pl = &l->next;
        }
    }
    /* connections closed: free them */
    for (conn_t **pc = &t->conns; *pc;) {
        conn_t *c = *pc;
        if (c->dead && !c->direct) {
            *pc = c->next;
            conn_free(c);
        } else {
            pc = &c->next;
        }
    }
}

/* Under the lock: callers waiting in get/wait look again when this turn
 * finished something (io_signal). */
static void wake_waiters(corral_tasks_t *t)
{
    if (t->io_signal) {
        t->io_signal = false;
        if (t->waiters)
            pthread_cond_broadcast(&t->done);
    }
}

static void *io_main(void *arg)
{
    corral_tasks_t *t = arg;
    struct epoll_event evs[64];
    int64_t last = now_ms();
    for (;;) {
        int n = epoll_wait(t->ep, evs, 64, 250);
        pthread_mutex_lock(&t->lock);
        if (t->closing) {
            pthread_mutex_unlock(&t->lock);
            break;
        }
        pthread_mutex_unlock(&t->lock);
        for (int i = 0; i < n; i++) {
            void *ptr = evs[i].data.ptr;
            if (ptr == &t->lunix) {
                accept_one(t, t->lunix, true);
                continue;
            }
            if (ptr == &t->ltcp) {
                accept_one(t, t->ltcp, false);
                continue;
            }
            if (ptr == &t->evfd) {
                uint64_t v;
                pthread_mutex_lock(&t->lock);
                if (read(t->evfd, &v, sizeof(v)) < 0)
                    cr_debug("tasks: eventfd: %s", strerror(errno));
                t->poked = false;
                flush_dirty(t);
                pthread_mutex_unlock(&t->lock);
                continue;
            }
            conn_t *c = ptr;
            pthread_mutex_lock(&t->lock);
            if (!c->dead && (evs[i].events & EPOLLOUT) && conn_flush(t, c) < 0) {
                if (c->lease)
                    lease_lost(t, c->lease, CR_EWORKERDIED, "writing to its worker failed");
                conn_close(t, c);
            }
            if (!c->dead && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
                conn_readable(t, c);
                resolve_parked(t);
                flush_dirty(t);
            }
            wake_waiters(t);
            pthread_mutex_unlock(&t->lock);
        }
        if (now_ms() - last >= 250) {
            last = now_ms();
            pthread_mutex_lock(&t->lock);
            reap(t);
            resolve_parked(t);
            wake_waiters(t);
            pthread_mutex_unlock(&t->lock);
        }
    }
    return NULL;
}

/* ---- the head thread ---- */
static char **lease_env(corral_tasks_t *t, lease_t *l)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = cr_calloc(n + 8, sizeof(*env));
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!cr_str_has_prefix(environ[i], "CORRAL_TASK_"))
            env[k++] = cr_strdup(environ[i]);
    env[k++] = cr_asprintf("CORRAL_TASK_OWNER=%s", t->address);
    env[k++] = cr_asprintf("CORRAL_TASK_OWNER_NODE=%s", t->node);
    env[k++] = cr_asprintf("CORRAL_TASK_LEASE=%s", l->id);
    env[k++] = cr_asprintf("CORRAL_TASK_SECRET=%s", t->secret_hex);
    env[k++] = cr_strdup("CORRAL_TASK_RUNTIME=c");
    if (l->listen)
        env[k++] = cr_asprintf("CORRAL_TASK_LISTEN=%s", l->listen);
    if (l->actor && l->actor->o.max_concurrency > 1)
        env[k++] = cr_asprintf("CORRAL_TASK_MAX_CONCURRENCY=%u", l->actor->o.max_concurrency);
    return env;
}

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* How many workers of the shape the alive nodes' totals hold (at most
 * CAP_MAX); 1 when that cannot be told. hlock held. */
static unsigned shape_cap(corral_tasks_t *t, const char *resources)
{
    corral_node_t *nodes = NULL;
    size_t nn = 0;
    if (corral_node_list(t->head, &nodes, &nn) < 0) /* a job credential may not list them */
        return t->o.max_workers ? (t->o.max_workers > CAP_MAX ? CAP_MAX : t->o.max_workers) : 1;
    char *want = cr_strdup(resources && *resources ? resources : "CPU=1");
    unsigned total = 0;
    for (size_t i = 0; i < nn; i++) {
        if (strcmp(nodes[i].state, "ALIVE"))
            continue;
        double k = -1;
        char *copy = cr_strdup(want), *save = NULL;
        for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(item, '=');
            if (!eq)
                continue;
            *eq = 0;
            double q = atof(eq + 1);
            if (q <= 0 || !strcmp(item, "memory"))
                continue;
            double have = 0;
            for (size_t j = 0; j < nodes[i].nres; j++)
                if (!strcmp(nodes[i].res[j].name, item))
                    have = nodes[i].res[j].total;
            double kk = (double)(long)(have / q + 1e-9);
            k = k < 0 || kk < k ? kk : k;
        }
        free(copy);
        total += k < 0 ? CAP_MAX : (unsigned)k;
    }
    free(want);
    corral_node_list_free(nodes, nn);
    return total < 1 ? 1 : total > CAP_MAX ? CAP_MAX : total;
}

static void head_submit(corral_tasks_t *t, lease_t *l, char **argv, char **env, char *name,
                        char *res, char *sel)
{
    corral_job_spec_t spec = {
        .name = name,
        .argv = (const char *const *)argv,
        .env = (const char *const *)env,
        .resources = res,
        .selector = sel,
        .num_workers = 1,
        .env_whole = 1,
        .bound = 1,
    };
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)))
        spec.cwd = cwd;
    char *job = NULL;
    pthread_mutex_lock(&t->hlock);
    int rc = corral_submit(t->head, &spec, &job);
    char *msg = rc < 0 ? cr_strdup(corral_errmsg(t->head)) : NULL;
    pthread_mutex_unlock(&t->hlock);
    pthread_mutex_lock(&t->lock);
    if (rc < 0) {
        char *m = cr_asprintf("no worker for %s: %s", res ? res : "CPU=1",
                              msg && *msg ? msg : cr_strerror(rc));
        lease_lost(t, l, rc, m);
        free(m);
    } else {
        l->job = job;
        if (l->state == L_NEW)
            l->state = L_SUBMITTED;
        unsigned lt = t->o.lease_timeout_ms ? t->o.lease_timeout_ms : 60000;
        l->connect_by = now_ms() + lt;
    }
    l->busy = false;
    free(msg);
    pthread_mutex_unlock(&t->lock);
}

static void *head_main(void *arg)
{
    corral_tasks_t *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->closing) {
        /* one piece of work at a time, the lock released around the head */
        lease_t *sub = NULL, *stop = NULL, *watch = NULL;
        shape_t *capq = NULL;
        for (shape_t *s = t->shapes; s && !capq; s = s->next)
            if (s->cap_asked && !s->cap)
                capq = s;
        for (lease_t *l = t->leases; l; l = l->next) {
            if (l->state == L_NEW && !sub && !l->stop)
                sub = l;
            if (l->stop && l->job && !stop)
                stop = l;
        }
        if (capq) {
            char *res = cr_strdup(capq->resources ? capq->resources : "");
            pthread_mutex_unlock(&t->lock);
            pthread_mutex_lock(&t->hlock);
            unsigned cap = shape_cap(t, res);
            pthread_mutex_unlock(&t->hlock);
            free(res);
            pthread_mutex_lock(&t->lock);
            capq->cap = cap;
            dispatch(t, capq);
            continue;
        }
        if (sub) {
            char **env = lease_env(t, sub);
            char *name, *res, *sel;
            char **argv = NULL;
            if (sub->shape) {
                name =
                    cr_asprintf("task:%s", sub->shape->resources ? sub->shape->resources : "CPU=1");
                res = sub->shape->resources ? cr_strdup(sub->shape->resources) : NULL;
                sel = sub->shape->selector ? cr_strdup(sub->shape->selector) : NULL;
            } else {
                corral_actor_t *a = sub->actor;
                name = a->name ? cr_asprintf("actor:%s/%s", t->ns, a->name)
                               : cr_asprintf("actor:%s", a->cls);
                /* its class and where it listens for other callers, for
                 * corral_actor_get to read back from the job's command */
                size_t n = 0;
                while (t->argv[n])
                    n++;
                argv = cr_calloc(n + 5, sizeof(char *));
                memcpy(argv, t->argv, n * sizeof(char *));
                argv[n] = CRT_ACTOR_ARG;
                argv[n + 1] = cr_strdup(a->cls);
                argv[n + 2] = cr_strdup(sub->listen);
                argv[n + 3] = cr_strdup(t->address);
                res = a->resources ? cr_strdup(a->resources) : NULL;
                sel = a->selector ? cr_strdup(a->selector) : NULL;
            }
            sub->state = L_SUBMITTED; /* its HELLO may come before the head answers */
            sub->busy = true;
            pthread_mutex_unlock(&t->lock);
            head_submit(t, sub, argv ? argv : t->argv, env, name, res, sel);
            if (argv) { /* its first strings are t's */
                size_t n = 0;
                while (argv[n])
                    n++;
                free(argv[n - 1]);
                free(argv[n - 2]);
                free(argv[n - 3]);
                free(argv);
            }
            strv_free(env);
            free(name);
            free(res);
            free(sel);
            pthread_mutex_lock(&t->lock);
            continue;
        }
        if (stop) {
            char *job = stop->job;
            stop->job = NULL; /* stopped once */
            pthread_mutex_unlock(&t->lock);
            pthread_mutex_lock(&t->hlock);
            corral_stop(t->head, job, 0);
            pthread_mutex_unlock(&t->hlock);
            free(job);
            pthread_mutex_lock(&t->lock);
            continue;
        }
        /* leases not connected yet: did their job end, or take too long? */
        int64_t now = now_ms();
        for (lease_t *l = t->leases; l; l = l->next)
            if (l->state == L_SUBMITTED && l->job && (!watch || l->watched < watch->watched))
                watch = l;
        if (watch) {
            watch->watched = now;
            char *job = cr_strdup(watch->job);
            pthread_mutex_unlock(&t->lock);
            corral_job_t st;
            memset(&st, 0, sizeof(st));
            pthread_mutex_lock(&t->hlock);
            int rc = corral_job_status(t->head, job, &st);
            pthread_mutex_unlock(&t->hlock);
            pthread_mutex_lock(&t->lock);
            for (lease_t *l = t->leases; l; l = l->next) {
                if (l->state != L_SUBMITTED || !l->job || strcmp(l->job, job))
                    continue;
                if (rc == 0 && corral_job_state_is_final(st.state)) {
                    const char *r =
                        st.nworkers && *st.workers[0].reason ? st.workers[0].reason : st.reason;
                    char *m = cr_asprintf("the leased worker (job %s) ended before it "
                                          "connected: %s",
                                          job, r && *r ? r : corral_job_state_name(st.state));
                    lease_lost(t, l, CR_EWORKERDIED, m);
                    free(m);
                } else if (rc == 0 && st.state == CORRAL_JOB_RUNNING && now > l->connect_by) {
                    char *m = cr_asprintf("the leased worker (job %s) runs but did not "
                                          "connect in time",
                                          job);
                    l->stop = true;
                    lease_lost(t, l, CR_EWORKERDIED, m);
                    free(m);
                }
            }
            if (rc == 0)
                corral_job_free(&st);
            free(job);
            if (t->closing)
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&t->hwake, &t->lock, &ts);
            continue;
        }
        pthread_cond_wait(&t->hwake, &t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* ---- init and shutdown ---- */
static int listen_unix(corral_tasks_t *t, char *why, size_t wsize)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(t->dir, sizeof(t->dir), "%s/corral-tasks-XXXXXX",
             tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
    if (!mkdtemp(t->dir)) {
        snprintf(why, wsize, "mkdtemp %s: %s", t->dir, strerror(errno));
        t->dir[0] = 0;
        return -errno;
    }
    snprintf(t->sock_path, sizeof(t->sock_path), "%s/owner.sock", t->dir);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_strlcpy(sa.sun_path, t->sock_path, sizeof(sa.sun_path));
    t->lunix = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (t->lunix < 0 || bind(t->lunix, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(t->lunix, 128) < 0) {
        snprintf(why, wsize, "listening on %s: %s", t->sock_path, strerror(errno));
        return -errno;
    }
    return 0;
}

static int listen_tcp(corral_tasks_t *t, char *port_out, size_t psize, char *why, size_t wsize)
{
    const char *host = t->o.tcp_host ? t->o.tcp_host : "127.0.0.1";
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(why, wsize, "tcp_host %s is not an IPv4 address", host);
        return CR_EINVAL;
    }
    t->ltcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    socklen_t sl = sizeof(sa);
    if (t->ltcp < 0 || bind(t->ltcp, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(t->ltcp, 128) < 0 || getsockname(t->ltcp, (struct sockaddr *)&sa, &sl) < 0) {
        snprintf(why, wsize, "listening on %s: %s", host, strerror(errno));
        return -errno;
    }
    snprintf(port_out, psize, "%s:%u", host, ntohs(sa.sin_port));
    return 0;
}

int corral_tasks_init(const corral_tasks_opts_t *opts, corral_tasks_t **out, char **errmsg)
{
    static const corral_tasks_opts_t dflt;
    corral_tasks_t *t = cr_calloc(1, sizeof(*t));
    char why[512] = "";
    int rc;
    t->o = opts ? *opts : dflt;
    if (t->o.tcp_only)
        t->o.tcp = 1;
    t->lunix = t->ltcp = t->ep = t->evfd = -1;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->hlock, NULL);
    pthread_cond_init(&t->done, NULL);
    pthread_cond_init(&t->hwake, NULL);
    char *cerr = NULL;
    rc = corral_connect(t->o.address, t->o.token_path, &t->head, &cerr);
    if (rc < 0) {
        snprintf(why, sizeof(why), "connecting to the head: %s", cerr ? cerr : cr_strerror(rc));
        free(cerr);
        goto fail;
    }
    if (t->o.worker_argv) {
        size_t n = 0;
        while (t->o.worker_argv[n])
            n++;
        if (!n) {
            rc = CR_EINVAL;
            snprintf(why, sizeof(why), "worker_argv is empty");
            goto fail;
        }
        t->argv = cr_calloc(n + 1, sizeof(char *));
        for (size_t i = 0; i < n; i++)
            t->argv[i] = cr_strdup(t->o.worker_argv[i]);
    } else {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0) {
            rc = -errno;
            snprintf(why, sizeof(why), "finding this program (/proc/self/exe): %s",
                     strerror(errno));
            goto fail;
        }
        self[n] = 0;
        t->argv = cr_calloc(2, sizeof(char *));
        t->argv[0] = cr_strdup(self);
    }
    const char *sec = getenv("CORRAL_TASK_SECRET");
    if (sec && !getenv("CORRAL_TASK_LEASE")) {
        /* a driver given the secret (shared with another driver of the
         * job, to call each other's actors over TCP) */
        if (strlen(sec) != 64 || !cr_hex_decode(sec, 64, t->secret)) {
            rc = CR_EINVAL;
            snprintf(why, sizeof(why), "CORRAL_TASK_SECRET is not 64 hex digits");
            goto fail;
        }
    } else if ((rc = cr_random_bytes(t->secret, sizeof(t->secret))) < 0) {
        snprintf(why, sizeof(why), "getrandom: %s", cr_strerror(rc));
        goto fail;
    }
    cr_hex_encode(t->secret, sizeof(t->secret), t->secret_hex);
    const char *ns = getenv("CORRAL_NAMESPACE");
    if (ns && *ns && (strlen(ns) > 128 || strpbrk(ns, " \t\n:/"))) {
        rc = CR_EINVAL;
        snprintf(why, sizeof(why),
                 "CORRAL_NAMESPACE \"%.140s\": at most 128 bytes, no blanks, ':' or '/'", ns);
        goto fail;
    }
    cr_strlcpy(t->ns, ns && *ns ? ns : "default", sizeof(t->ns));
    const char *node = getenv("CORRAL_NODE_ID");
    cr_strlcpy(t->node, node ? node : "", sizeof(t->node));
    if ((rc = listen_unix(t, why, sizeof(why))))
        goto fail;
    char tcp[96] = "";
    if (t->o.tcp && (rc = listen_tcp(t, tcp, sizeof(tcp), why, sizeof(why))))
        goto fail;
    if (t->o.tcp_only)
        snprintf(t->address, sizeof(t->address), "tcp:%s", tcp);
    else if (t->o.tcp)
        snprintf(t->address, sizeof(t->address), "unix:%s;tcp:%s", t->sock_path, tcp);
    else
        snprintf(t->address, sizeof(t->address), "unix:%s", t->sock_path);
    t->ep = epoll_create1(EPOLL_CLOEXEC);
    t->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (t->ep < 0 || t->evfd < 0) {
        rc = -errno;
        snprintf(why, sizeof(why), "epoll: %s", strerror(errno));
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &t->lunix};
    epoll_ctl(t->ep, EPOLL_CTL_ADD, t->lunix, &ev);
    ev.data.ptr = &t->evfd;
    epoll_ctl(t->ep, EPOLL_CTL_ADD, t->evfd, &ev);
    if (t->ltcp >= 0) {
        ev.data.ptr = &t->ltcp;
        epoll_ctl(t->ep, EPOLL_CTL_ADD, t->ltcp, &ev);
    }
    if (pthread_create(&t->io, NULL, io_main, t)) {
        rc = CR_EAGAIN;
        snprintf(why, sizeof(why), "starting the I/O thread failed");
        goto fail;
    }
    t->io_started = true;
    if (pthread_create(&t->hthread, NULL, head_main, t)) {
        rc = CR_EAGAIN;
        snprintf(why, sizeof(why), "starting the head thread failed");
        goto fail;
    }
    t->h_started = true;
    *out = t;
    return 0;
fail:
    if (errmsg)
        *errmsg = cr_strdup(why);
    fail(rc, "%s", why);
    corral_tasks_shutdown(t);
    return rc;
}

const char *corral_tasks_address(const corral_tasks_t *t)
{
    return t->address;
}

void corral_tasks_shutdown(corral_tasks_t *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->closing = true;
    pthread_cond_broadcast(&t->hwake);
    pthread_mutex_unlock(&t->lock);
    if (t->evfd >= 0) {
        uint64_t one = 1;
        if (write(t->evfd, &one, sizeof(one)) < 0)
            cr_debug("tasks: eventfd: %s", strerror(errno));
    }
    if (t->io_started)
        pthread_join(t->io, NULL);
    if (t->h_started)
        pthread_join(t->hthread, NULL);
    pthread_mutex_lock(&t->lock);
    for (lease_t *l = t->leases; l; l = l->next)
        lease_lost(t, l, CR_EWORKERDIED, "the owner shut down");
    for (shape_t *s = t->shapes; s; s = s->next) {
        call_t *c;
        while ((c = q_pop(&s->queue)))
            call_fail(t, c, CR_EWORKERDIED, "the owner shut down");
    }
    call_t *pc;
    while ((pc = q_pop(&t->parked)))
        call_fail(t, pc, CR_EWORKERDIED, "the owner shut down");
    for (corral_actor_t *a = t->actors, *next; a; a = next) {
        next = a->next;
        actor_dead(t, a, CR_EACTORDIED, "the owner shut down");
        a->t = NULL;
    }
    pthread_mutex_unlock(&t->lock);
    /* the leases are bound to this connection: the head stops them now */
    corral_disconnect(t->head);
    for (conn_t *c = t->conns, *next; c; c = next) {
        next = c->next;
        conn_free(c);
    }
    for (lease_t *l = t->leases, *next; l; l = next) {
        next = l->next;
        free(l->job);
        free(l->slots);
        free(l->listen);
        free(l);
    }
    for (shape_t *s = t->shapes, *next; s; s = next) {
        next = s->next;
        free(s->resources);
        free(s->selector);
        free(s);
    }
    if (t->lunix >= 0)
        close(t->lunix);
    if (t->ltcp >= 0)
        close(t->ltcp);
    if (t->ep >= 0)
        close(t->ep);
    if (t->evfd >= 0)
        close(t->evfd);
    if (t->sock_path[0])
        unlink(t->sock_path);
    if (t->dir[0])
        rmdir(t->dir);
    strv_free(t->argv);
    cr_wipe(t->secret, sizeof(t->secret));
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->hlock);
    pthread_cond_destroy(&t->done);
    pthread_cond_destroy(&t->hwake);
    free(t);
}

/* ---- submitting ---- */
static int check_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (!n || n > CORRAL_TASK_NAME_MAX)
        return fail(CR_EINVAL, "a function name must be 1 to %d bytes", CORRAL_TASK_NAME_MAX);
    return 0;
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static const char *norm(const char *s)
{
    return s && *s ? s : NULL;
}

static int submit(corral_tasks_t *t, const char *fn, const void *args, size_t len,
                  corral_ref_t *argref, corral_ref_t *const *deps, size_t ndeps,
                  const corral_task_opts_t *opts, corral_ref_t **out)
{
    int rc = check_name(fn);
    if (rc)
        return rc;
    if (!argref &&
        12 + 2 + strlen(fn) + len + (ndeps ? CRT_ARGS_HDR + CRT_ARG_HDR : 0) > CRT_MAX_FRAME)
        return fail(CR_E2BIG,
                    "%zu bytes of arguments do not fit a frame (at most %u): put them "
                    "(corral_put) and submit the ref",
                    len, CRT_MAX_FRAME);
    const char *res = norm(opts ? opts->resources : NULL);
    const char *sel = norm(opts ? opts->selector : NULL);
    if (res) {
        for (const char *p = res; *p; p++)
            if (!(*p == '=' || *p == ',' || *p == '.' || *p == '_' || *p == '-' || *p == '/' ||
                  (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
                return fail(CR_EINVAL,
                            "resources \"%s\": a '%c' where NAME=AMOUNT[,...] was "
                            "expected",
                            res, *p);
        if (!strchr(res, '='))
            return fail(CR_EINVAL, "resources \"%s\" are not NAME=AMOUNT[,...]", res);
    }
    call_t *c = call_new(NULL, fn, argref ? NULL : args, argref ? 0 : len);
    if (argref) {
        atomic_fetch_add(&argref->refs, 1);
        c->argref = argref;
    }
    if (ndeps) {
        c->deps = cr_calloc(ndeps, sizeof(*c->deps));
        for (size_t i = 0; i < ndeps; i++) {
            atomic_fetch_add(&deps[i]->refs, 1);
            c->deps[i] = deps[i];
        }
        c->ndeps = ndeps;
    }
    c->retries_left = opts ? opts->max_retries : CORRAL_TASK_DEFAULT_RETRIES;
    if (c->retries_left < -1)
        c->retries_left = -1;
    corral_ref_t *r = ref_new();
    atomic_store(&r->refs, 2); /* the caller's and the call's */
    c->ref = r;
    pthread_mutex_lock(&t->lock);
    if (t->closing) {
        pthread_mutex_unlock(&t->lock);
        call_free(c);
        ref_release(r);
        return fail(CR_EINVAL, "the owner is shutting down");
    }
    shape_t *s = t->shapes;
    while (s && !(str_eq(s->resources, res) && str_eq(s->selector, sel)))
        s = s->next;
    if (!s) {
        s = cr_calloc(1, sizeof(*s));
        s->resources = res ? cr_strdup(res) : NULL;
        s->selector = sel ? cr_strdup(sel) : NULL;
        s->next = t->shapes;
        t->shapes = s;
    }
    if (ndeps) {
        c->dep_shape = s;
        q_push(&t->parked, c);
        resolve_parked(t);
    } else {
        q_push(&s->queue, c);
        dispatch(t, s);
    }
    pthread_mutex_unlock(&t->lock);
    *out = r;
    return 0;
}

int corral_task_submit(corral_tasks_t *t, const char *fn, const void *args, size_t len,
                       const corral_task_opts_t *opts, corral_ref_t **out)
{
    return submit(t, fn, args, len, NULL, NULL, 0, opts, out);
}

int corral_task_submit_ref(corral_tasks_t *t, const char *fn, corral_ref_t *arg,
                           const corral_task_opts_t *opts, corral_ref_t **out)
{
    int rc = corral_get(t, arg, -1, NULL, NULL);
    if (rc)
        return fail(rc, "the argument failed: %s", corral_ref_error(arg));
    return submit(t, fn, NULL, 0, arg, NULL, 0, opts, out);
}

int corral_task_submit_args(corral_tasks_t *t, const char *fn, const void *args, size_t len,
                            corral_ref_t *const *refs, size_t nrefs, const corral_task_opts_t *opts,
                            corral_ref_t **out)
{
    if (!refs || !nrefs || nrefs > CORRAL_TASK_MAX_ARG_REFS)
        return fail(CR_EINVAL, "ref arguments: 1 to %d refs", CORRAL_TASK_MAX_ARG_REFS);
    for (size_t i = 0; i < nrefs; i++)
        if (!refs[i])
            return fail(CR_EINVAL, "ref argument %zu is NULL", i + 1);
    return submit(t, fn, args, len, NULL, refs, nrefs, opts, out);
}

int corral_put(corral_tasks_t *t, const void *data, size_t len, corral_ref_t **out)
{
    corral_ref_t *r = ref_new();
    if (len >= CORRAL_TASK_INLINE_MAX) {
        void *map;
        int fd = crt_memfd_from(data, len, &map);
        if (fd < 0) {
            ref_release(r);
            return fail(fd, "a memfd of %zu bytes: %s", len, cr_strerror(fd));
        }
        r->fd = fd;
        r->data = map;
    } else {
        r->data = cr_malloc(len ? len : 1);
        if (len)
            memcpy(r->data, data, len);
    }
    r->len = len;
    atomic_store(&r->done, 1);
    *out = r;
    return 0;
}

/* ---- waiting ---- */
static void deadline_ts(int timeout_ms, struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += timeout_ms / 1000;
    ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* The connection of the worker running r's call, when that worker has
 * few calls in flight (a synchronous caller's) and no one else reads it
 * directly; under t->lock. */
static conn_t *direct_conn(corral_tasks_t *t, const corral_ref_t *r)
{
    for (lease_t *l = t->leases; l; l = l->next) {
        if (l->state != L_CONNECTED || !l->ninflight || l->ninflight > BATCH_AFTER || !l->conn ||
            l->conn->dead || l->conn->direct)
            continue;
        for (uint64_t id = l->base; id <= l->next_id; id++) {
            call_t *k = l->slots[id & (l->nslots - 1)];
            if (k && k->id == id && k->ref == r)
                return l->conn;
        }
    }
    return NULL;
}

/* A synchronous call's fast path (Python's Core.read_direct): the thread
 * that waits for r reads its worker's connection itself for up to
 * DIRECT_MS, so the RETURN is not first read by the I/O thread, which then
 * wakes this one (a thread hop per call: what made a C actor call cost
 * twice a socket round trip). Then, or when r is done, the connection goes
 * back to the I/O thread. Under t->lock (released while it polls). */
#define DIRECT_MS 2
static void direct_wait(corral_tasks_t *t, conn_t *c, corral_ref_t *r, int timeout_ms)
{
    c->direct = true;
    conn_events(t, c);
    int64_t end = now_ms() + (timeout_ms > 0 && timeout_ms < DIRECT_MS ? timeout_ms : DIRECT_MS);
    while (!atomic_load(&r->done) && !c->dead) {
        int64_t left = end - now_ms();
        if (left < 0)
            break;
        pthread_mutex_unlock(&t->lock);
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int n = poll(&p, 1, (int)left + 1);
        pthread_mutex_lock(&t->lock);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && !c->dead) {
            conn_readable(t, c);
            resolve_parked(t);
            flush_dirty(t);
        }
    }
    c->direct = false;
    if (!c->dead)
        conn_events(t, c);
}

int corral_get(corral_tasks_t *t, corral_ref_t *r, int timeout_ms, const void **data, size_t *len)
{
    if (!atomic_load(&r->done)) {
        if (!timeout_ms)
            return fail(CR_EAGAIN, "the ref is not ready");
        struct timespec ts;
        if (timeout_ms > 0)
            deadline_ts(timeout_ms, &ts);
        pthread_mutex_lock(&t->lock);
        flush_dirty(t);
        conn_t *dc = t->io_started && !atomic_load(&r->done) ? direct_conn(t, r) : NULL;
        if (dc)
            direct_wait(t, dc, r, timeout_ms);
        t->waiters++;
        int w = 0;
        while (!atomic_load(&r->done) && w != ETIMEDOUT)
            w = timeout_ms > 0 ? pthread_cond_timedwait(&t->done, &t->lock, &ts)
                               : pthread_cond_wait(&t->done, &t->lock);
        t->waiters--;
        pthread_mutex_unlock(&t->lock);
        if (!atomic_load(&r->done))
            return fail(CR_EAGAIN, "the ref was not ready within %d ms", timeout_ms);
    }
    if (r->err)
        return fail(r->err, "%s", r->errmsg ? r->errmsg : cr_strerror(r->err));
    if (data)
        *data = r->data;
    if (len)
        *len = r->len;
    return 0;
}

int corral_refs_wait(corral_tasks_t *t, corral_ref_t *const *refs, size_t n, size_t num_ready,
                     int timeout_ms, unsigned char *ready)
{
    if (num_ready > n)
        return fail(CR_EINVAL, "num_ready %zu is more than the %zu refs", num_ready, n);
    struct timespec ts;
    if (timeout_ms > 0)
        deadline_ts(timeout_ms, &ts);
    pthread_mutex_lock(&t->lock);
    flush_dirty(t);
    t->waiters++;
    size_t k;
    for (;;) {
        k = 0;
        for (size_t i = 0; i < n; i++) {
            int d = atomic_load(&refs[i]->done);
            k += d;
            if (ready)
                ready[i] = (unsigned char)d;
        }
        if (k >= num_ready || !timeout_ms)
            break;
        int w = timeout_ms > 0 ? pthread_cond_timedwait(&t->done, &t->lock, &ts)
                               : pthread_cond_wait(&t->done, &t->lock);
        if (w == ETIMEDOUT)
            timeout_ms = 0; /* one last look */
    }
    t->waiters--;
    pthread_mutex_unlock(&t->lock);
    return k >= num_ready ? 0 : fail(CR_EAGAIN, "%zu of %zu refs ready", k, n);
}

/* ---- actors ---- */
/* Whether a live job of the head is named job_name: 1 (with its id in
 * *job_id, malloc'ed, when job_id is not NULL), 0, or a negative code. */
static int name_taken_on_head(corral_tasks_t *t, const char *job_name, char **job_id)
{
    static const corral_job_state_t live[] = {CORRAL_JOB_PENDING, CORRAL_JOB_PLACING,
                                              CORRAL_JOB_RUNNING};
    int taken = 0;
    corral_page_t page = {0};
    char *token = NULL;
    pthread_mutex_lock(&t->hlock);
    do {
        corral_job_t *jobs = NULL;
        size_t n = 0;
        page.continue_token = token;
        page.next_token = NULL;
        int rc = corral_job_list_page(t->head, live, CR_ARRAY_SIZE(live), &page, &jobs, &n);
        free(token);
        token = NULL;
        if (rc < 0) {
            taken = rc;
            break;
        }
        for (size_t i = 0; i < n && !taken; i++)
            if (jobs[i].name && !strcmp(jobs[i].name, job_name)) {
                taken = 1;
                if (job_id)
                    *job_id = cr_strdup(jobs[i].job_id);
            }
        corral_job_list_free(jobs, n);
        token = page.next_token;
    } while (token && !taken);
    free(token);
    pthread_mutex_unlock(&t->hlock);
    return taken;
}

int corral_actor_create(corral_tasks_t *t, const char *cls, const void *args, size_t len,
                        const corral_actor_opts_t *opts, corral_actor_t **out)
{
    static const corral_actor_opts_t dflt;
    int rc = check_name(cls);
    if (rc)
        return rc;
    if (strchr(cls, '.'))
        return fail(CR_EINVAL, "a class name has no '.'");
    if (12 + 2 + strlen(cls) + len > CRT_MAX_FRAME)
        return fail(CR_E2BIG, "%zu bytes of constructor arguments do not fit a frame", len);
    const corral_actor_opts_t *o = opts ? opts : &dflt;
    const char *name = norm(o->name);
    if (name) {
        if (strlen(name) > 128 || strpbrk(name, " \t\n:/"))
            return fail(CR_EINVAL, "actor name \"%s\": at most 128 bytes, no blanks, ':' or '/'",
                        name);
        pthread_mutex_lock(&t->lock);
        for (corral_actor_t *a = t->actors; a; a = a->next)
            if (!a->dead && !a->remote && a->name && !strcmp(a->name, name)) {
                pthread_mutex_unlock(&t->lock);
                return fail(CR_EEXIST, "an actor named %s is alive in this program", name);
            }
        pthread_mutex_unlock(&t->lock);
        char *jn = cr_asprintf("actor:%s/%s", t->ns, name);
        int taken = name_taken_on_head(t, jn, NULL);
        free(jn);
        if (taken < 0)
            return fail(taken, "listing the head's jobs: %s", cr_strerror(taken));
        if (taken)
            return fail(CR_EEXIST,
                        "an actor named %s runs already in namespace %s (job actor:%s/%s)", name,
                        t->ns, t->ns, name);
    }
    corral_actor_t *a = cr_calloc(1, sizeof(*a));
    a->t = t;
    a->o = *o;
    a->cls = cr_strdup(cls);
    a->name = name ? cr_strdup(name) : NULL;
    a->resources = norm(o->resources) ? cr_strdup(o->resources) : NULL;
    a->selector = norm(o->selector) ? cr_strdup(o->selector) : NULL;
    a->o.resources = a->o.selector = a->o.name = NULL;
    if (len) {
        a->args = cr_malloc(len);
        memcpy(a->args, args, len);
        a->len = len;
    }
    a->restarts_left = o->max_restarts < -1 ? -1 : o->max_restarts;
    pthread_mutex_lock(&t->lock);
    if (t->closing) {
        pthread_mutex_unlock(&t->lock);
        a->t = NULL; /* never listed: its fields only */
        corral_actor_free(a);
        return fail(CR_EINVAL, "the owner is shutting down");
    }
    a->next = t->actors;
    t->actors = a;
    a->lease = lease_new(t, NULL, a);
    pthread_mutex_unlock(&t->lock);
    *out = a;
    return 0;
}

/* ---- named actors of other owners (docs/actors.md "Named actors from C") ---- */

/* Reads the next frame of at most r's limit on a blocking socket (with a
 * receive timeout): 1 with *h and *p, or a negative code. */
static int read_frame(int sock, bool unix_sock, crt_reader_t *r, crt_hdr_t *h, const uint8_t **p)
{
    int rc, fd = -1;
    while ((rc = crt_reader_next(r, h, p, &fd)) == 0) {
        ssize_t n = crt_reader_fill(r, sock, unix_sock);
        if (n <= 0)
            return n == 0 ? CR_EIO : (int)n;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* A caller's side of the handshake on a connected blocking socket (as a
 * worker's with its owner, docs/actors.md "Wire"): over TCP the peer's
 * CHALLENGE is answered with the secret's MAC, and its WELCOME must prove
 * the secret back (this process's nonce). 0, or a negative code with why.
 * Nothing may follow WELCOME before this caller's first request. */
static int caller_handshake(corral_tasks_t *t, int sock, bool tcp, const char *where, char *why,
                            size_t wsize)
{
    struct timeval tv = {10, 0};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    crt_reader_t r;
    crt_reader_init(&r, CRT_HELLO_MAX);
    crt_hdr_t h;
    const uint8_t *p;
    uint8_t snonce[CRT_NONCE_LEN], cnonce[CRT_NONCE_LEN];
    char mac[65] = "", nhex[2 * CRT_NONCE_LEN + 1] = "";
    int rc;
    if (tcp) {
        rc = read_frame(sock, false, &r, &h, &p);
        if (rc != 1 || h.kind != CRT_CHALLENGE || h.len != CRT_NONCE_LEN) {
            snprintf(why, wsize, "%s did not send a CHALLENGE", where);
            rc = rc < 0 ? rc : CR_EPARSE;
            goto out;
        }
        memcpy(snonce, p, CRT_NONCE_LEN);
        crt_mac_hex(t->secret, sizeof(t->secret), snonce, mac);
        cr_random_bytes(cnonce, sizeof(cnonce));
        cr_hex_encode(cnonce, sizeof(cnonce), nhex);
    }
    char *hello =
        cr_asprintf("{\"role\":\"caller\",\"pid\":%d,\"runtime\":\"c\","
                    "\"address\":\"%s\",\"node\":\"%s\"%s%s%s%s%s%s}",
                    (int)getpid(), t->address, t->node, *mac ? ",\"mac\":\"" : "", mac,
                    *mac ? "\"" : "", *mac ? ",\"nonce\":\"" : "", nhex, *mac ? "\"" : "");
    rc = crt_send_frame(sock, CRT_HELLO, hello, strlen(hello));
    free(hello);
    if (rc) {
        snprintf(why, wsize, "sending HELLO to %s: %s", where, cr_strerror(rc));
        goto out;
    }
    rc = read_frame(sock, !tcp, &r, &h, &p);
    if (rc != 1 || h.kind != CRT_WELCOME || r.in.len != r.in.off) {
        snprintf(why, wsize, "%s did not welcome this caller (%s)", where,
                 cr_strerror(rc < 0 ? rc : CR_EPARSE));
        rc = rc < 0 ? rc : CR_EPARSE;
        goto out;
    }
    rc = 0;
    if (tcp) {
        char wwhy[160];
        rc = crt_welcome_check(p, h.len, t->secret, sizeof(t->secret), snonce, cnonce, wwhy,
                               sizeof(wwhy));
        if (rc == CR_EPARSE)
            snprintf(why, wsize, "%s sent %s", where, wwhy);
        else if (rc)
            snprintf(why, wsize,
                     "the process at %s did not prove CORRAL_TASK_SECRET (%s): refusing it", where,
                     wwhy);
    }
out:
    crt_reader_fini(&r);
    return rc;
}

/* Connects to "tcp:HOST:PORT" (blocking): the socket or a negative code. */
static int tcp_connect(const char *addr, char *why, size_t wsize)
{
    char host[64];
    const char *hp = addr + 4, *colon = strrchr(hp, ':');
    if (!cr_str_has_prefix(addr, "tcp:") || !colon || (size_t)(colon - hp) >= sizeof(host)) {
        snprintf(why, wsize, "%.100s is not a tcp:HOST:PORT address", addr);
        return CR_EINVAL;
    }
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(why, wsize, "%.100s is not an IPv4 address and port", addr);
        return CR_EINVAL;
    }
    int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        snprintf(why, wsize, "connecting to %.100s: %s", addr, strerror(e));
        if (sock >= 0)
            close(sock);
        return -e;
    }
    int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return sock;
}

/* Asks the actor's owner (its address owner, "unix:...;tcp:...") over TCP
 * where the actor of directory dir takes callers: its worker's TCP
 * address in out, or a negative code with why. */
static int ask_owner(corral_tasks_t *t, const char *owner, const char *dir, char *out, size_t osize,
                     char *why, size_t wsize)
{
    const char *tcp = strstr(owner, "tcp:");
    if (!tcp) {
        snprintf(why, wsize, "its owner (%.100s) does not listen on TCP", owner);
        return CR_ENOENT;
    }
    char addr[96];
    snprintf(addr, sizeof(addr), "%.*s", (int)strcspn(tcp, ";"), tcp);
    int sock = tcp_connect(addr, why, wsize);
    if (sock < 0)
        return sock;
    char where[128];
    snprintf(where, sizeof(where), "its owner at %s", addr);
    int rc = caller_handshake(t, sock, true, where, why, wsize);
    if (!rc) {
        crt_bytes_t b = {0};
        crt_call_add(&b, 1, 0, CRT_ACTOR_ADDRESS_CALL, dir, strlen(dir));
        rc = crt_write_all(sock, &b, -1);
        crt_bytes_free(&b);
        crt_reader_t r;
        crt_reader_init(&r, CRT_HELLO_MAX);
        crt_hdr_t h;
        const uint8_t *p, *v;
        uint8_t st;
        size_t vn;
        if (!rc)
            rc = read_frame(sock, false, &r, &h, &p);
        if (rc == 1 && (h.kind != CRT_RETURN || crt_return_parse(p, h.len, &st, &v, &vn)))
            rc = CR_EPARSE;
        if (rc != 1) {
            snprintf(why, wsize, "%s did not answer (%s)", where, cr_strerror(rc < 0 ? rc : 0));
            rc = rc < 0 ? rc : CR_EPARSE;
        } else if (st != CRT_OK || vn >= osize || vn < 5 || memcmp(v, "tcp:", 4)) {
            snprintf(why, wsize, "%s: %.*s", where, (int)(vn > 200 ? 200 : vn), (const char *)v);
            rc = CR_ENOENT;
        } else {
            memcpy(out, v, vn);
            out[vn] = 0;
            rc = 0;
        }
        crt_reader_fini(&r);
    }
    close(sock);
    return rc;
}

/* Connects to the actor and handshakes as a caller (blocking, at most 10
 * s a step): the socket with *unix_out, or a negative code with why. On
 * this host (unless the owner is tcp_only) its socket DIR/s: the
 * directory must be this user's (not a link, mode 0700) and the process at
 * the socket run as this user (SO_PEERCRED). Else TCP: its owner tells
 * where, and both sides prove CORRAL_TASK_SECRET. */
static int actor_dial(corral_tasks_t *t, const char *dir, const char *owner, bool *unix_out,
                      char *why, size_t wsize)
{
    struct stat st;
    if (t->o.tcp_only || lstat(dir, &st) < 0) {
        char addr[96];
        int rc = ask_owner(t, owner, dir, addr, sizeof(addr), why, wsize);
        if (rc < 0)
            return rc;
        int sock = tcp_connect(addr, why, wsize);
        if (sock < 0)
            return sock;
        char where[128];
        snprintf(where, sizeof(where), "the actor at %s", addr);
        if ((rc = caller_handshake(t, sock, true, where, why, wsize))) {
            close(sock);
            return rc;
        }
        *unix_out = false;
        return sock;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        snprintf(why, wsize, "%s is not a directory of this user's of mode 0700: refusing it", dir);
        return CR_EACCES;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", dir);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        snprintf(why, wsize, "connecting to %s: %s", sa.sun_path, strerror(e));
        if (sock >= 0)
            close(sock);
        return -e;
    }
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.uid != geteuid()) {
        snprintf(why, wsize, "the process at %s runs as another user: refusing it", sa.sun_path);
        close(sock);
        return CR_EACCES;
    }
    char where[160];
    snprintf(where, sizeof(where), "the actor at %s", sa.sun_path);
    int rc = caller_handshake(t, sock, false, where, why, wsize);
    if (rc) {
        close(sock);
        return rc;
    }
    *unix_out = true;
    return sock;
}

int corral_actor_get(corral_tasks_t *t, const char *name, corral_actor_t **out)
{
    if (!t || !name || !out)
        return fail(CR_EINVAL, "corral_actor_get: t, name and out are required");
    if (!*name || strlen(name) > 128 || strpbrk(name, " \t\n:/"))
        return fail(CR_EINVAL, "actor name \"%.140s\": 1 to 128 bytes, no blanks, ':' or '/'",
                    name);
    char *jn = cr_asprintf("actor:%s/%s", t->ns, name);
    char *job = NULL;
    int rc = name_taken_on_head(t, jn, &job);
    free(jn);
    if (rc < 0)
        return fail(rc, "looking for actor %s: listing the head's jobs: %s", name, cr_strerror(rc));
    if (!rc)
        return fail(CR_ENOENT,
                    "no actor named %s in namespace %s (no live job actor:%s/%s on the head): "
                    "create it with corral_actor_create and opts.name, or check the name and "
                    "CORRAL_NAMESPACE",
                    name, t->ns, t->ns, name);
    corral_job_t st;
    memset(&st, 0, sizeof(st));
    char cls[CORRAL_TASK_NAME_MAX + 1], dir[CRT_LISTEN_DIR_MAX + 1], owner[CRT_OWNER_ADDR_MAX + 1];
    pthread_mutex_lock(&t->hlock);
    rc = corral_job_status(t->head, job, &st);
    pthread_mutex_unlock(&t->hlock);
    if (rc < 0) {
        fail(rc, "looking for actor %s: the status of job %s: %s", name, job, cr_strerror(rc));
        free(job);
        return rc;
    }
    rc = crt_actor_cmd_parse(st.command, cls, dir, owner);
    corral_job_free(&st);
    if (rc) {
        fail(CR_EPARSE,
             "actor %s (job %s) is not a C actor of this version (its command does not end "
             "with %s CLASS DIR OWNER)",
             name, job, CRT_ACTOR_ARG);
        free(job);
        return CR_EPARSE;
    }
    /* its worker listens once its constructor has run: wait up to 10 s */
    char why[400] = "";
    int sock = -1;
    bool unix_sock = true;
    for (int i = 0; i < 200; i++) {
        sock = actor_dial(t, dir, owner, &unix_sock, why, sizeof(why));
        if (sock >= 0 || (sock != -ENOENT && sock != -ECONNREFUSED && sock != CR_ENOENT))
            break;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (sock < 0) {
        fail(sock, "actor %s (job %s) cannot be reached: %s", name, job, why);
        free(job);
        return sock;
    }
    /* from here the I/O thread's (and a waiting caller's) conn_readable
     * reads it until EAGAIN, under t->lock: the handshake's blocking
     * socket, with its 10 s timeouts, made that last read wait for the
     * next answer, or 10 s, with the lock held (each looked-up actor's
     * last answer cost 10 s, and under load the calls behind it stalled) */
    int fl = fcntl(sock, F_GETFL);
    struct timeval none = {0, 0};
    if (fl < 0 || fcntl(sock, F_SETFL, fl | O_NONBLOCK) < 0 ||
        setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none)) < 0 ||
        setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none)) < 0) {
        int e = -errno;
        close(sock);
        fail(e, "actor %s (job %s): its connection: %s", name, job, cr_strerror(e));
        free(job);
        return e;
    }
    corral_actor_t *a = cr_calloc(1, sizeof(*a));
    a->t = t;
    a->cls = cr_strdup(cls);
    a->name = cr_strdup(name);
    a->remote = true;
    a->remote_job = job;
    a->ready = true;
    conn_t *c = cr_calloc(1, sizeof(*c));
    c->fd = sock;
    c->unix_sock = unix_sock;
    c->hello = true;
    crt_reader_init(&c->rd, CRT_MAX_FRAME);
    lease_t *l = cr_calloc(1, sizeof(*l));
    pthread_mutex_lock(&t->lock);
    if (t->closing) {
        pthread_mutex_unlock(&t->lock);
        conn_free(c);
        free(l);
        a->t = NULL;
        corral_actor_free(a);
        return fail(CR_EINVAL, "the owner is shutting down");
    }
    snprintf(l->id, sizeof(l->id), "R%u", ++t->lease_seq);
    l->state = L_CONNECTED;
    l->actor = a;
    l->conn = c;
    l->idle_since = now_ms();
    l->next = t->leases;
    t->leases = l;
    c->lease = l;
    c->next = t->conns;
    t->conns = c;
    a->lease = l;
    a->next = t->actors;
    t->actors = a;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(t->ep, EPOLL_CTL_ADD, c->fd, &ev);
    pthread_mutex_unlock(&t->lock);
    *out = a;
    return 0;
}

int corral_actor_call(corral_tasks_t *t, corral_actor_t *a, const char *method, const void *args,
                      size_t len, corral_ref_t **out)
{
    size_t ml = method ? strlen(method) : 0;
    if (!ml || strchr(method, '.') || strlen(a->cls) + 1 + ml > CORRAL_TASK_NAME_MAX)
        return fail(CR_EINVAL, "a method name must be 1 to %zu bytes without '.'",
                    CORRAL_TASK_NAME_MAX - strlen(a->cls) - 1);
    if (12 + 2 + strlen(a->cls) + 1 + ml + len > CRT_MAX_FRAME)
        return fail(CR_E2BIG, "%zu bytes of arguments do not fit a frame", len);
    call_t *c = call_new(a->cls, method, args, len);
    c->retries_left = a->o.max_task_retries < -1 ? -1 : a->o.max_task_retries;
    corral_ref_t *r = ref_new();
    atomic_store(&r->refs, 2);
    c->ref = r;
    pthread_mutex_lock(&t->lock);
    if (a->dead) {
        call_fail(t, c, CR_EACTORDIED, a->why_dead);
    } else if (a->lease && a->lease->state == L_CONNECTED && !a->queue.n) {
        int rc = send_call(t, a->lease, c);
        if (rc)
            call_fail(t, c, rc, NULL);
    } else {
        q_push(&a->queue, c);
    }
    pthread_mutex_unlock(&t->lock);
    *out = r;
    return 0;
}

/* ---- cancelling ---- */

/* Takes the call of r out of q: it, or NULL. */
static call_t *q_take_ref(callq_t *q, const corral_ref_t *r)
{
    for (call_t **pc = &q->head, *prev = NULL; *pc; prev = *pc, pc = &(*pc)->next)
        if ((*pc)->ref == r) {
            call_t *c = *pc;
            *pc = c->next;
            if (q->tail == c)
                q->tail = prev;
            q->n--;
            c->next = NULL;
            return c;
        }
    return NULL;
}

int corral_cancel(corral_tasks_t *t, corral_ref_t *r)
{
    if (!t || !r)
        return fail(CR_EINVAL, "corral_cancel: no owner or no ref");
    static const char why[] = "cancelled (corral_cancel)";
    pthread_mutex_lock(&t->lock);
    if (atomic_load(&r->done)) {
        pthread_mutex_unlock(&t->lock);
        return 0; /* done already: it keeps its value or its failure */
    }
    call_t *c = q_take_ref(&t->parked, r);
    for (shape_t *s = t->shapes; s && !c; s = s->next)
        c = q_take_ref(&s->queue, r);
    for (corral_actor_t *a = t->actors; a && !c; a = a->next)
        c = q_take_ref(&a->queue, r);
    if (c) {
        /* not sent yet: it never runs */
        call_fail(t, c, CR_ECANCELLED, why);
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    for (lease_t *l = t->leases; l && !c; l = l->next) {
        if (!l->ninflight || l->state != L_CONNECTED)
            continue;
        for (uint64_t id = l->base; id <= l->next_id && !c; id++) {
            call_t *k = l->slots[id & (l->nslots - 1)];
            if (k && k->id == id && k->ref == r) {
                c = k;
                /* sent: the worker answers it without running it if it
                 * still waits there, else lets it finish; either way its
                 * RETURN is dropped */
                c->cancelled = true;
                conn_t *cn = l->conn;
                bool was_empty = cn->out.len == cn->out.off;
                crt_cancel_add(&cn->out, c->id);
                if (was_empty && !cn->dirty)
                    conn_flush(t, cn);
            }
        }
    }
    /* in flight or not (the head thread's retry between two leases):
     * the ref fails now, and nothing fills it later */
    ref_finish(t, r, CR_ECANCELLED, why);
    pthread_mutex_unlock(&t->lock);
    return 0;
}

int corral_actor_kill(corral_tasks_t *t, corral_actor_t *a)
{
    pthread_mutex_lock(&t->lock);
    if (a->remote && a->remote_job && a->lease && !a->lease->job) {
        /* another owner's actor: its lease job is stopped through the head
         * (the head thread does it once the lease is dead) */
        a->lease->job = a->remote_job;
        a->remote_job = NULL;
    }
    actor_dead(t, a, CR_EACTORDIED, "killed by corral_actor_kill");
    pthread_mutex_unlock(&t->lock);
    return 0;
}

unsigned corral_actor_restarts(const corral_actor_t *a)
{
    corral_tasks_t *t = a->t;
    if (!t)
        return a->restarts;
    pthread_mutex_lock(&t->lock);
    unsigned n = a->restarts;
    pthread_mutex_unlock(&t->lock);
    return n;
}

const char *corral_actor_job(corral_actor_t *a, char *buf, size_t size)
{
    corral_tasks_t *t = a->t;
    if (size)
        buf[0] = 0;
    if (!t)
        return buf;
    pthread_mutex_lock(&t->lock);
    if (a->lease && a->lease->job)
        cr_strlcpy(buf, a->lease->job, size);
    pthread_mutex_unlock(&t->lock);
    return buf;
}

void corral_actor_free(corral_actor_t *a)
{
    if (!a)
        return;
    corral_tasks_t *t = a->t;
    if (t) {
        pthread_mutex_lock(&t->lock);
        actor_dead(t, a, CR_EACTORDIED, "its handle was freed");
        for (corral_actor_t **pa = &t->actors; *pa; pa = &(*pa)->next)
            if (*pa == a) {
                *pa = a->next;
                break;
            }
        /* leases may still name it until they are gone */
        for (lease_t *l = t->leases; l; l = l->next)
            if (l->actor == a)
                l->actor = NULL;
        pthread_mutex_unlock(&t->lock);
    }
    free(a->cls);
    free(a->name);
    free(a->args);
    free(a->resources);
    free(a->selector);
    free(a->why_dead);
    free(a->remote_job);
    free(a);
}

/* ---- the fuzz target's way in (client/tasks_int.h) ---- */
int crt_owner_feed(const uint8_t *data, size_t size, unsigned flags)
{
    bool actor = flags & CRT_FEED_ACTOR, tcp = flags & CRT_FEED_TCP;
    crt_bytes_t pre = {0};
    corral_tasks_t *t = cr_calloc(1, sizeof(*t));
    t->lunix = t->ltcp = t->evfd = -1;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->hlock, NULL);
    pthread_cond_init(&t->done, NULL);
    pthread_cond_init(&t->hwake, NULL);
    t->ep = epoll_create1(EPOLL_CLOEXEC);
    int sv[2];
    if (t->ep < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        corral_tasks_shutdown(t);
        return -errno;
    }
    corral_ref_t *refs[2] = {NULL, NULL};
    corral_actor_t *a = NULL;
    pthread_mutex_lock(&t->lock);
    lease_t *l = cr_calloc(1, sizeof(*l));
    cr_strlcpy(l->id, "L1", sizeof(l->id));
    l->state = L_SUBMITTED;
    l->job = cr_strdup("1");
    t->leases = l;
    if (actor) {
        a = cr_calloc(1, sizeof(*a));
        a->t = t;
        a->cls = cr_strdup("C");
        a->restarts_left = 1;
        a->lease = l;
        l->actor = a;
        l->listen = cr_strdup("/d"); /* what a caller asks for (on_caller_call) */
        t->actors = a;
    } else {
        shape_t *s = cr_calloc(1, sizeof(*s));
        s->cap = 1;
        s->cap_asked = true;
        s->nleases = s->leasing = 1;
        t->shapes = s;
        l->shape = s;
    }
    for (int i = 0; i < 2; i++) {
        call_t *c = call_new(actor ? "C" : NULL, "m", "args", 4);
        refs[i] = ref_new();
        atomic_store(&refs[i]->refs, 2);
        c->ref = refs[i];
        c->retries_left = 1;
        q_push(actor ? &l->actor->queue : &l->shape->queue, c);
    }
    conn_t *c = cr_calloc(1, sizeof(*c));
    c->fd = sv[0];
    c->unix_sock = !tcp;
    if (tcp) {
        memset(t->secret, 0x11, sizeof(t->secret));
        memset(c->nonce, 0x22, sizeof(c->nonce));
        if ((flags & CRT_FEED_GOOD_MAC) && size >= 2 * CRT_NONCE_LEN) {
            char mac[65], nonce[2 * CRT_NONCE_LEN + 1];
            crt_mac_hex(t->secret, sizeof(t->secret), c->nonce, mac);
            memcpy(nonce, data, 2 * CRT_NONCE_LEN);
            nonce[2 * CRT_NONCE_LEN] = 0;
            json_t *o = json_pack("{s:s,s:s,s:s,s:s%}", "role", "worker", "lease", "L1", "mac", mac,
                                  "nonce", nonce, (size_t)2 * CRT_NONCE_LEN);
            char *hello = o ? json_dumps(o, JSON_COMPACT) : NULL;
            json_decref(o);
            if (hello)
                crt_frame_add(&pre, CRT_HELLO, 0, 0, hello, strlen(hello), NULL, 0);
            free(hello);
            data += 2 * CRT_NONCE_LEN;
            size -= 2 * CRT_NONCE_LEN;
        }
    }
    crt_reader_init(&c->rd, CRT_HELLO_MAX);
    t->conns = c;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(t->ep, EPOLL_CTL_ADD, c->fd, &ev);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    pthread_mutex_unlock(&t->lock);
    if (pre.len) {
        /* the harness's own HELLO first (small: the socket takes it whole) */
        if (send(sv[1], pre.p, pre.len, MSG_NOSIGNAL) == (ssize_t)pre.len) {
            pthread_mutex_lock(&t->lock);
            conn_readable(t, c);
            pthread_mutex_unlock(&t->lock);
        }
        crt_bytes_free(&pre);
    }
    size_t off = 0;
    while (off < size) {
        /* what the socket takes now, then the owner reads it (a blocking
         * send of more than the socket holds would wait for ever) */
        ssize_t n = send(sv[1], data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            break;
        if (n > 0)
            off += (size_t)n;
        pthread_mutex_lock(&t->lock);
        bool dead = c->dead;
        if (!dead)
            conn_readable(t, c);
        pthread_mutex_unlock(&t->lock);
        if (dead)
            break;
    }
    close(sv[1]);
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < 64 && !c->dead; i++)
        conn_readable(t, c);
    pthread_mutex_unlock(&t->lock);
    corral_tasks_shutdown(t);
    corral_actor_free(a);
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        if (!atomic_load(&refs[i]->done))
            rc = CR_EIO; /* a call left pending: a bug */
        ref_release(refs[i]);
    }
    return rc;
}
