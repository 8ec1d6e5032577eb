/* The C worker loop (include/corral/tasks.h "the worker", docs/actors.md):
 * what runs inside a leased worker process. It connects back to its owner
 * (CORRAL_TASK_OWNER), says HELLO with its lease id, then serves CALLs:
 * a function by name, "Class" to construct the actor, "Class.method" to
 * call it. One thread reads frames, runs each call and queues its
 * RETURN; replies go out together once no whole frame is left to read,
 * so a burst of calls costs a few system calls, not two per call. An actor
 * with max_concurrency > 1 (CORRAL_TASK_MAX_CONCURRENCY) runs its calls
 * on that many threads instead, each writing its own RETURN. */
#include "worker/frame.h"
#include "worker/worker.h"
#include "net/net.h"
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct corral_result {
    uint8_t *data; /* heap (inline) or a writable memfd mapping */
    size_t len;
    int fd; /* the memfd, -1 none */
    char *err;
    bool may_memfd; /* a large value may be a memfd (sent with the RETURN, or kept) */
};

typedef struct fn_entry {
    char *name;
    corral_fn_t fn;
} fn_entry_t;
typedef struct class_entry {
    char *name;
    corral_ctor_t ctor;
    const corral_method_def_t *methods;
    corral_dtor_t dtor;
} class_entry_t;

static CR_VEC(fn_entry_t) fns;
static CR_VEC(class_entry_t) classes;

/* CANCELs noted ahead of their calls at most (more: those calls run, and
 * the owner drops their results, having failed their refs already) */
#define CANCELS_MAX 1024
/* a call that ran this long or more: the socket is read (without waiting)
 * for CANCELs before the next buffered call runs */
#define CANCEL_POLL_NS 1000000

static struct {
    int sock;
    bool unix_sock;
    crt_bytes_t out;
    pthread_mutex_t wlock; /* out and the socket's writing side (threads) */
    class_entry_t *cls;    /* the actor's class, once constructed */
    void *state;
    /* max_concurrency > 1 */
    unsigned nthreads;
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    struct job *qhead, *qtail;
    bool quit;
    int broken; /* a write failed */
    /* ids of CALLs whose CANCEL is in the reader's buffer while they wait
     * there to run (seen by cancel_scan ahead of them) */
    uint64_t cancels[CANCELS_MAX];
    unsigned ncancels;
    /* slots for running the actor's methods: max_concurrency (1 when not
     * asked), shared by the owner's calls and other callers' */
    sem_t run;
    bool run_init;
    atomic_bool exiting;
    /* other callers of the actor (docs/actors.md "Named actors from C") */
    char listen_dir[108], listen_path[112];
    int lfd, ltcp;
    char tcp_addr[80]; /* "tcp:HOST:PORT" where ltcp listens; "" none */
    bool callers_tried;
    atomic_uint ncallers;
} W = {.lfd = -1,
       .ltcp = -1,
       .sock = -1,
       .wlock = PTHREAD_MUTEX_INITIALIZER,
       .qlock = PTHREAD_MUTEX_INITIALIZER,
       .qcond = PTHREAD_COND_INITIALIZER};

struct job {
    struct job *next;
    uint64_t id;
    uint8_t *payload;
    size_t len;
    int fd;
};

static bool name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n && n <= CORRAL_TASK_NAME_MAX;
}

static bool name_taken(const char *name)
{
    for (size_t i = 0; i < fns.n; i++)
        if (!strcmp(fns.v[i].name, name))
            return true;
    for (size_t i = 0; i < classes.n; i++)
        if (!strcmp(classes.v[i].name, name))
            return true;
    return false;
}

int corral_worker_register_fn(const char *name, corral_fn_t fn)
{
    if (!name_ok(name) || !fn || strchr(name, '.'))
        return CR_EINVAL;
    if (name_taken(name))
        return CR_EEXIST;
    fn_entry_t *e = CR_VEC_PUSH(&fns);
    e->name = cr_strdup(name);
    e->fn = fn;
    return 0;
}

int corral_worker_register_class(const char *name, corral_ctor_t ctor,
                                 const corral_method_def_t *methods, corral_dtor_t dtor)
{
    if (!name_ok(name) || !ctor || !methods || strchr(name, '.'))
        return CR_EINVAL;
    for (const corral_method_def_t *m = methods; m->name; m++)
        if (!m->fn || !name_ok(m->name) ||
            strlen(name) + 1 + strlen(m->name) > CORRAL_TASK_NAME_MAX)
            return CR_EINVAL;
    if (name_taken(name))
        return CR_EEXIST;
    class_entry_t *e = CR_VEC_PUSH(&classes);
    e->name = cr_strdup(name);
    e->ctor = ctor;
    e->methods = methods;
    e->dtor = dtor;
    return 0;
}

bool corral_worker_is_leased(void)
{
    const char *l = getenv("CORRAL_TASK_LEASE");
    return l && *l;
}

/* ---- results ---- */

static void result_clear(corral_result_t *r)
{
    if (r->fd >= 0) {
        if (r->data)
            munmap(r->data, r->len);
        close(r->fd);
    } else {
        free(r->data);
    }
    r->data = NULL;
    r->len = 0;
    r->fd = -1;
}

void *corral_result_alloc(corral_result_t *res, size_t len)
{
    result_clear(res);
    if (len > CORRAL_TASK_MAX_OBJECT)
        return NULL;
    if (res->may_memfd && len >= CORRAL_TASK_INLINE_MAX) {
        void *m;
        int fd = crt_memfd_new(len, &m);
        if (fd < 0)
            return NULL;
        res->fd = fd;
        res->data = m;
        res->len = len;
        return m;
    }
    if (len + 13 > CRT_MAX_FRAME)
        return NULL;
    res->data = malloc(len ? len : 1);
    if (!res->data)
        return NULL;
    res->len = len;
    return res->data;
}

int corral_result_set(corral_result_t *res, const void *data, size_t len)
{
    void *p = corral_result_alloc(res, len);
    if (!p)
        return CR_E2BIG;
    if (len)
        memcpy(p, data, len);
    return 0;
}

int corral_result_error(corral_result_t *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    free(res->err);
    res->err = s;
    return CR_ETASKFAILED;
}

/* ---- running a call ---- */

static const corral_method_def_t *find_method(const class_entry_t *c, const char *m, size_t n)
{
    for (const corral_method_def_t *d = c->methods; d->name; d++)
        if (strlen(d->name) == n && !memcmp(d->name, m, n))
            return d;
    return NULL;
}

/* Runs the call and appends its RETURN to out, or (a memfd value) sets
 * *fd_out with a RETURN that must go out with it. */
/* ---- the worker's object store: large results a TCP peer fetches ---- */

/* Results kept for fetching at most (more: the call fails, saying so). */
#define OBJS_MAX 16
static struct {
    pthread_mutex_t lock;
    uint64_t next;
    struct wobj {
        uint64_t oid;
        int fd;
        void *map; /* read-only */
        size_t len;
    } v[OBJS_MAX];
    unsigned n;
} O = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Keeps the sealed memfd fd (len bytes) for fetching: 0 with *oid (fd is
 * the store's now), or an error (the caller keeps fd). */
static int obj_keep(int fd, uint64_t *oid)
{
    void *map;
    size_t n;
    int rc = crt_memfd_map(fd, &map, &n);
    if (rc)
        return rc;
    pthread_mutex_lock(&O.lock);
    if (O.n == OBJS_MAX) {
        pthread_mutex_unlock(&O.lock);
        if (map)
            munmap(map, n);
        return CR_EAGAIN;
    }
    *oid = ++O.next;
    O.v[O.n++] = (struct wobj){*oid, fd, map, n};
    pthread_mutex_unlock(&O.lock);
    return 0;
}

static void obj_drop_at(unsigned i)
{
    if (O.v[i].map)
        munmap(O.v[i].map, O.v[i].len);
    close(O.v[i].fd);
    O.v[i] = O.v[--O.n];
}

/* FETCH: appends its RETURN to out (a chunk of a kept object, or why not). */
static void fetch_answer(crt_bytes_t *out, uint64_t id, const uint8_t *p, size_t n)
{
    uint64_t oid, off;
    uint32_t len;
    char why[128];
    if (crt_fetch_parse(p, n, &oid, &off, &len)) {
        snprintf(why, sizeof(why), "a malformed FETCH (%zu bytes)", n);
        goto fail;
    }
    pthread_mutex_lock(&O.lock);
    for (unsigned i = 0; i < O.n; i++) {
        if (O.v[i].oid != oid)
            continue;
        if (!len) {
            obj_drop_at(i);
            pthread_mutex_unlock(&O.lock);
            crt_return_add(out, id, 0, CRT_OK, NULL, 0);
            return;
        }
        if (off > O.v[i].len || len > O.v[i].len - off) {
            pthread_mutex_unlock(&O.lock);
            snprintf(why, sizeof(why), "a FETCH past object %llu's %zu bytes",
                     (unsigned long long)oid, O.v[i].len);
            goto fail;
        }
        crt_return_add(out, id, 0, CRT_OK, (const uint8_t *)O.v[i].map + off, len);
        if (off + len == O.v[i].len)
            obj_drop_at(i);
        pthread_mutex_unlock(&O.lock);
        return;
    }
    pthread_mutex_unlock(&O.lock);
    snprintf(why, sizeof(why), "no object %llu here (fetched already, or never kept)",
             (unsigned long long)oid);
fail:
    crt_return_add(out, id, 0, CRT_SYS_ERROR, why, strlen(why));
}

/* may_fd: the connection is a Unix socket (a memfd result goes with the
 * RETURN); else a large result stays in the object store to be fetched. */
static void run_call(uint64_t id, const uint8_t *payload, size_t plen, int argfd, crt_bytes_t *out,
                     int *fd_out, bool may_fd)
{
    const char *name;
    size_t nl;
    const uint8_t *args;
    size_t alen;
    char why[CORRAL_TASK_NAME_MAX + 128];
    void *map = NULL;
    size_t maplen = 0;
    corral_result_t res = {.fd = -1, .may_memfd = true};
    *fd_out = -1;
    if (crt_call_parse(payload, plen, &name, &nl, &args, &alen)) {
        snprintf(why, sizeof(why), "a malformed CALL (its name)");
        goto sys_error;
    }
    if (argfd >= 0) {
        if (alen || crt_memfd_map(argfd, &map, &maplen)) {
            snprintf(why, sizeof(why), "a CALL whose arguments' memfd could not be mapped");
            goto sys_error;
        }
        args = map;
        alen = maplen;
    }
    int rc;
    const char *dot = memchr(name, '.', nl);
    if (!dot) {
        fn_entry_t *f = NULL;
        for (size_t i = 0; i < fns.n && !f; i++)
            if (strlen(fns.v[i].name) == nl && !memcmp(fns.v[i].name, name, nl))
                f = &fns.v[i];
        class_entry_t *c = NULL;
        for (size_t i = 0; i < classes.n && !f && !c; i++)
            if (strlen(classes.v[i].name) == nl && !memcmp(classes.v[i].name, name, nl))
                c = &classes.v[i];
        if (f) {
            rc = f->fn(args, alen, &res);
        } else if (c) {
            if (W.cls) {
                snprintf(why, sizeof(why), "the actor was constructed already (as %s)",
                         W.cls->name);
                goto sys_error;
            }
            void *st = NULL;
            rc = c->ctor(args, alen, &st, &res);
            if (!rc) {
                W.cls = c;
                W.state = st;
            }
        } else {
            snprintf(why, sizeof(why), "no function or class %.*s is registered in this worker",
                     (int)nl, name);
            goto sys_error;
        }
    } else {
        size_t cl = (size_t)(dot - name);
        if (!W.cls || strlen(W.cls->name) != cl || memcmp(W.cls->name, name, cl)) {
            snprintf(why, sizeof(why), "this worker holds no actor of class %.*s", (int)cl, name);
            goto sys_error;
        }
        const corral_method_def_t *m = find_method(W.cls, dot + 1, nl - cl - 1);
        if (!m) {
            snprintf(why, sizeof(why), "class %s has no method %.*s", W.cls->name,
                     (int)(nl - cl - 1), dot + 1);
            goto sys_error;
        }
        rc = m->fn(W.state, args, alen, &res);
    }
    if (rc) {
        const char *e = res.err;
        char dflt[CORRAL_TASK_NAME_MAX + 64];
        if (!e) {
            snprintf(dflt, sizeof(dflt), "%.*s returned %d", (int)nl, name, rc);
            e = dflt;
        }
        crt_return_add(out, id, 0, CRT_APP_ERROR, e, strlen(e));
    } else if (res.fd >= 0) {
        munmap(res.data, res.len);
        res.data = NULL;
        if (crt_memfd_seal(res.fd)) {
            snprintf(why, sizeof(why), "sealing the result's memfd failed");
            goto sys_error;
        }
        uint64_t oid;
        if (may_fd) {
            crt_return_add(out, id, CRT_FLAG_FD, CRT_OK, NULL, 0);
            *fd_out = res.fd;
            res.fd = -1;
        } else if (obj_keep(res.fd, &oid) == 0) {
            uint8_t ref[16];
            for (int i = 0; i < 8; i++) {
                ref[i] = (uint8_t)((uint64_t)res.len >> (56 - 8 * i));
                ref[8 + i] = (uint8_t)(oid >> (56 - 8 * i));
            }
            crt_return_add(out, id, CRT_FLAG_OBJ, CRT_OK, ref, sizeof(ref));
            res.fd = -1;
        } else {
            snprintf(why, sizeof(why),
                     "the worker holds %d results not fetched yet (or could not map this one)",
                     OBJS_MAX);
            goto sys_error;
        }
    } else {
        crt_return_add(out, id, 0, CRT_OK, res.data, res.len);
    }
    goto out;
sys_error:
    crt_return_add(out, id, 0, CRT_SYS_ERROR, why, strlen(why));
out:
    if (map)
        munmap(map, maplen);
    result_clear(&res);
    free(res.err);
}

/* ---- connecting ---- */

static int peer_is_me(int sock)
{
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
        return -errno;
    return cred.uid == geteuid() ? 0 : CR_EACCES;
}

/* Reads one frame of at most CRT_HELLO_MAX (blocking) before HELLO is done. */
static int read_small(int sock, crt_reader_t *r, crt_hdr_t *h, const uint8_t **p)
{
    for (;;) {
        int fd;
        int rc = crt_reader_next(r, h, p, &fd);
        if (fd >= 0)
            close(fd);
        if (rc)
            return rc < 0 ? rc : 0;
        ssize_t n = crt_reader_fill(r, sock, false);
        if (n == 0)
            return CR_EIO;
        if (n < 0)
            return (int)n;
    }
}

static int dial(const char *owner, bool *unix_out, char *why, size_t wsize)
{
    char *copy = cr_strdup(owner), *save = NULL, *unix_path = NULL, *tcp = NULL;
    for (char *part = strtok_r(copy, ";", &save); part; part = strtok_r(NULL, ";", &save)) {
        if (cr_str_has_prefix(part, "unix:"))
            unix_path = part + 5;
        else if (cr_str_has_prefix(part, "tcp:"))
            tcp = part + 4;
    }
    int sock = -1;
    struct stat st;
    /* the Unix socket when its path is here (the owner's private
     * directory: this same machine, whatever the nodes are named) */
    if (unix_path && stat(unix_path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(unix_path) >= sizeof(sa.sun_path)) {
            snprintf(why, wsize, "the owner's socket path is too long");
            goto out;
        }
        strcpy(sa.sun_path, unix_path);
        sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            snprintf(why, wsize, "connecting to the owner at %s: %s", unix_path, strerror(errno));
            goto fail;
        }
        if (peer_is_me(sock)) {
            snprintf(why, wsize, "the process at %s runs as another user", unix_path);
            goto fail;
        }
        *unix_out = true;
        goto out;
    }
    if (!tcp) {
        snprintf(why, wsize,
                 "CORRAL_TASK_OWNER (%s) names no socket on this host and no TCP "
                 "address",
                 owner);
        goto out;
    }
    char *colon = strrchr(tcp, ':');
    if (!colon) {
        snprintf(why, wsize, "CORRAL_TASK_OWNER's tcp address %s has no port", tcp);
        goto out;
    }
    *colon = 0;
    char *host = tcp;
    if (host[0] == '[' && colon[-1] == ']') {
        host++;
        colon[-1] = 0;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(host, colon + 1, &hints, &ai);
    if (gai) {
        snprintf(why, wsize, "the owner's address %s: %s", host, gai_strerror(gai));
        goto out;
    }
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        sock = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (sock >= 0 && connect(sock, a->ai_addr, a->ai_addrlen) == 0)
            break;
        snprintf(why, wsize, "connecting to the owner at %s:%s: %s", host, colon + 1,
                 strerror(errno));
        if (sock >= 0)
            close(sock);
        sock = -1;
    }
    freeaddrinfo(ai);
    if (sock >= 0) {
        int one = 1;
        setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        *unix_out = false;
    }
    goto out;
fail:
    if (sock >= 0)
        close(sock);
    sock = -1;
out:
    free(copy);
    return sock;
}

/* The worker's side of the handshake (docs/actors.md "Wire"). Over TCP
 * both sides prove CORRAL_TASK_SECRET: the owner's CHALLENGE is answered
 * by HELLO's mac, and this worker's own nonce (HELLO's "nonce") must come
 * back MACed in WELCOME before any CALL is taken: whatever answers at the
 * owner's address without the secret is refused, not served. */
static int handshake(int sock, bool unix_sock, crt_reader_t *r, char *why, size_t wsize)
{
    const char *lease = getenv("CORRAL_TASK_LEASE");
    const char *node = getenv("CORRAL_NODE_ID");
    const char *owner = getenv("CORRAL_TASK_OWNER");
    char mac[65] = "", cnonce_hex[2 * CRT_NONCE_LEN + 1] = "";
    uint8_t key[32], snonce[CRT_NONCE_LEN], cnonce[CRT_NONCE_LEN];
    crt_hdr_t h;
    const uint8_t *p;
    int rc;
    if (!unix_sock) {
        const char *sec = getenv("CORRAL_TASK_SECRET");
        if (!sec || strlen(sec) != 64 || !cr_hex_decode(sec, 64, key)) {
            snprintf(why, wsize, "CORRAL_TASK_SECRET is not 64 hex digits");
            return CR_EINVAL;
        }
        rc = read_small(sock, r, &h, &p);
        if (rc || h.kind != CRT_CHALLENGE || h.len != CRT_NONCE_LEN) {
            snprintf(why, wsize, "the owner did not send a CHALLENGE");
            cr_wipe(key, sizeof(key));
            return rc ? rc : CR_EPARSE;
        }
        memcpy(snonce, p, CRT_NONCE_LEN);
        crt_mac_hex(key, sizeof(key), snonce, mac);
        if ((rc = cr_random_bytes(cnonce, sizeof(cnonce))) < 0) {
            snprintf(why, wsize, "no random bytes for the nonce: %s", cr_strerror(rc));
            cr_wipe(key, sizeof(key));
            return rc;
        }
        cr_hex_encode(cnonce, sizeof(cnonce), cnonce_hex);
    }
    char *hello =
        cr_asprintf("{\"role\":\"worker\",\"pid\":%d,\"runtime\":\"c\",\"lease\":\"%s\","
                    "\"node\":\"%s\"%s%s%s%s%s%s%s%s%s}",
                    (int)getpid(), lease, node ? node : "", *W.tcp_addr ? ",\"address\":\"" : "",
                    W.tcp_addr, *W.tcp_addr ? "\"" : "", *mac ? ",\"mac\":\"" : "", mac,
                    *mac ? "\"" : "", *mac ? ",\"nonce\":\"" : "", cnonce_hex, *mac ? "\"" : "");
    rc = crt_send_frame(sock, CRT_HELLO, hello, strlen(hello));
    free(hello);
    if (rc) {
        snprintf(why, wsize, "sending HELLO: %s", cr_strerror(rc));
        goto out;
    }
    rc = read_small(sock, r, &h, &p);
    if (rc || h.kind != CRT_WELCOME) {
        snprintf(why, wsize, "the owner refused the HELLO (lease %s)", lease);
        rc = rc ? rc : CR_EACCES;
        goto out;
    }
    if (!unix_sock) {
        char wwhy[160];
        rc = crt_welcome_check(p, h.len, key, sizeof(key), snonce, cnonce, wwhy, sizeof(wwhy));
        if (rc == CR_EPARSE)
            snprintf(why, wsize, "the owner at %s sent %s: refusing it", owner, wwhy);
        else if (rc)
            snprintf(why, wsize,
                     "the process at %s did not prove CORRAL_TASK_SECRET (%s): it is not this "
                     "worker's owner; refusing it, running none of its calls",
                     owner, wwhy);
        if (rc)
            goto out;
    }
    rc = 0;
out:
    cr_wipe(key, sizeof(key));
    return rc;
}

/* ---- serving ---- */

/* A slot to run a call in (methods of the actor from its owner and from
 * other callers share max_concurrency of them). */
static void run_begin(void)
{
    if (W.run_init)
        while (sem_wait(&W.run) < 0 && errno == EINTR)
            ;
}

static void run_end(void)
{
    if (W.run_init)
        sem_post(&W.run);
}

static void callers_start(void);

/* Sends out (and fd with it); under W.wlock when threads run. */
static int flush(crt_bytes_t *out, int fd)
{
    int rc = crt_write_all(W.sock, out, fd);
    if (fd >= 0)
        close(fd);
    if (rc)
        W.broken = rc;
    return rc;
}

static void *pool_thread(void *arg)
{
    crt_bytes_t out = {0};
    for (;;) {
        pthread_mutex_lock(&W.qlock);
        while (!W.qhead && !W.quit)
            pthread_cond_wait(&W.qcond, &W.qlock);
        struct job *j = W.qhead;
        if (!j) {
            pthread_mutex_unlock(&W.qlock);
            break;
        }
        W.qhead = j->next;
        if (!W.qhead)
            W.qtail = NULL;
        pthread_mutex_unlock(&W.qlock);
        int fd;
        run_begin();
        run_call(j->id, j->payload, j->len, j->fd, &out, &fd, W.unix_sock);
        run_end();
        if (j->fd >= 0)
            close(j->fd);
        pthread_mutex_lock(&W.wlock);
        flush(&out, fd);
        pthread_mutex_unlock(&W.wlock);
        free(j->payload);
        free(j);
    }
    crt_bytes_free(&out);
    return NULL;
}

/* ---- cancelling (docs/actors.md "From C": CANCEL) ---- */

static void cancel_note(uint64_t id)
{
    for (unsigned i = 0; i < W.ncancels; i++)
        if (W.cancels[i] == id)
            return;
    if (W.ncancels < CANCELS_MAX)
        W.cancels[W.ncancels++] = id;
}

static bool cancel_take(uint64_t id)
{
    for (unsigned i = 0; i < W.ncancels; i++)
        if (W.cancels[i] == id) {
            W.cancels[i] = W.cancels[--W.ncancels];
            return true;
        }
    return false;
}

/* Notes the CANCELs among the whole frames in r's buffer past *scanned
 * (bytes from r->in.off already looked at), so that a call cancelled
 * while it waits there is answered without running. */
static void cancel_scan(crt_reader_t *r, size_t *scanned)
{
    for (;;) {
        size_t at = r->in.off + *scanned;
        crt_hdr_t h;
        if (r->in.len - at < CRT_HDR || crt_hdr_parse(r->in.p + at, r->max, &h))
            return;
        if (r->in.len - at - CRT_HDR < h.len)
            return;
        uint64_t id;
        if (h.kind == CRT_CANCEL && !crt_cancel_parse(r->in.p + at + CRT_HDR, h.len, &id))
            cancel_note(id);
        *scanned += CRT_HDR + h.len;
    }
}

static void cancelled_return(crt_bytes_t *out, uint64_t id)
{
    crt_return_add(out, id, 0, CRT_SYS_ERROR, CRT_CANCELLED_TEXT, strlen(CRT_CANCELLED_TEXT));
}

/* max_concurrency > 1: a CANCEL of a call still queued for the threads
 * takes it out and answers it. */
static void cancel_queued_job(uint64_t id)
{
    struct job *found = NULL;
    pthread_mutex_lock(&W.qlock);
    for (struct job **pj = &W.qhead, *prev = NULL; *pj; prev = *pj, pj = &(*pj)->next)
        if ((*pj)->id == id) {
            found = *pj;
            *pj = found->next;
            if (W.qtail == found)
                W.qtail = prev;
            break;
        }
    pthread_mutex_unlock(&W.qlock);
    if (!found)
        return;
    pthread_mutex_lock(&W.wlock);
    cancelled_return(&W.out, id);
    flush(&W.out, -1);
    pthread_mutex_unlock(&W.wlock);
    if (found->fd >= 0)
        close(found->fd);
    free(found->payload);
    free(found);
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* What a frame from an owner or a caller asks, sorted the same way for
 * both: the descriptor of any frame but a CALL is closed here, a CANCEL's
 * id is parsed into *cancel_id, and a bad CANCEL or a kind neither may
 * send is said on stderr (from names the peer: "the owner", "a caller"). */
typedef enum frame_ask { ASK_CALL, ASK_FETCH, ASK_CANCEL, ASK_BYE, ASK_BAD } frame_ask_t;

static frame_ask_t frame_sort(const crt_hdr_t *h, const uint8_t *p, int fd, const char *from,
                              uint64_t *cancel_id)
{
    if (h->kind == CRT_CALL)
        return ASK_CALL;
    if (fd >= 0)
        close(fd);
    switch (h->kind) {
    case CRT_BYE:
        return ASK_BYE;
    case CRT_FETCH:
        return ASK_FETCH;
    case CRT_CANCEL:
        if (!crt_cancel_parse(p, h->len, cancel_id))
            return ASK_CANCEL;
        fprintf(stderr, "corral worker: a CANCEL of %u bytes (not 8) from %s: closing\n", h->len,
                from);
        return ASK_BAD;
    default:
        fprintf(stderr, "corral worker: a %s frame from %s: closing\n", crt_kind_name(h->kind),
                from);
        return ASK_BAD;
    }
}

static int serve(crt_reader_t *r)
{
    pthread_t *threads = NULL;
    unsigned nthreads = 0;
    const char *mc = getenv("CORRAL_TASK_MAX_CONCURRENCY");
    if (mc && atoi(mc) > 1) {
        nthreads = (unsigned)atoi(mc) > 1024 ? 1024 : (unsigned)atoi(mc);
        threads = cr_calloc(nthreads, sizeof(*threads));
        for (unsigned i = 0; i < nthreads; i++)
            if (pthread_create(&threads[i], NULL, pool_thread, NULL)) {
                nthreads = i;
                break;
            }
    }
    int status = 0;
    if (!W.run_init) {
        sem_init(&W.run, 0, nthreads ? nthreads : 1);
        W.run_init = true;
    }
    r->max = CRT_MAX_FRAME;
    size_t scanned = 0;    /* of the buffer, from r->in.off: looked at by cancel_scan */
    bool ran_long = false; /* a call ran CANCEL_POLL_NS or more since the last read */
    cancel_scan(r, &scanned);
    for (;;) {
        crt_hdr_t h;
        const uint8_t *p;
        int fd;
        if (ran_long && r->in.len > r->in.off) {
            /* calls wait in the buffer behind one that took a while: read
             * what came meanwhile (a CANCEL of one of them) first */
            ran_long = false;
            ssize_t n = crt_reader_fill_flags(r, W.sock, W.unix_sock, MSG_DONTWAIT);
            if (n == 0)
                break; /* the owner went away */
            if (n < 0 && n != -EAGAIN) {
                fprintf(stderr, "corral worker: reading from the owner: %s: closing\n",
                        cr_strerror((int)n));
                status = n == -ECONNRESET ? 0 : 1;
                break;
            }
            cancel_scan(r, &scanned);
        }
        size_t before = r->in.off;
        int rc = crt_reader_next(r, &h, &p, &fd);
        if (rc == 1) {
            size_t used = r->in.off - before;
            scanned = scanned > used ? scanned - used : 0;
        }
        if (rc < 0) {
            fprintf(stderr, "corral worker: a bad frame from the owner (%s): closing\n",
                    cr_strerror(rc));
            status = 1;
            break;
        }
        if (rc == 0) {
            /* nothing whole left: send what was answered, then read more */
            if (!nthreads && W.out.len && flush(&W.out, -1))
                break;
            ran_long = false;
            ssize_t n = crt_reader_fill(r, W.sock, W.unix_sock);
            if (n == 0)
                break; /* the owner went away: this worker's work is done */
            if (n < 0 && n != -EAGAIN) {
                if (n != -ECONNRESET)
                    status = 1;
                break;
            }
            cancel_scan(r, &scanned);
            continue;
        }
        uint64_t id;
        frame_ask_t ask = frame_sort(&h, p, fd, "the owner", &id);
        if (ask == ASK_BYE)
            break;
        if (ask == ASK_BAD) {
            status = 1;
            break;
        }
        if (ask == ASK_CANCEL) {
            /* its call ran already (or is running: it is not interrupted,
             * the owner drops its result) unless threads still queue it */
            cancel_take(id);
            if (nthreads)
                cancel_queued_job(id);
            continue;
        }
        if (ask == ASK_FETCH) {
            if (nthreads)
                pthread_mutex_lock(&W.wlock);
            fetch_answer(&W.out, h.id, p, h.len);
            rc = nthreads || W.out.len > CRT_FETCH_CHUNK ? flush(&W.out, -1) : 0;
            if (nthreads)
                pthread_mutex_unlock(&W.wlock);
            if (rc)
                break;
            continue;
        }
        if (W.ncancels && cancel_take(h.id)) {
            /* cancelled while it waited: answered, never run */
            if (fd >= 0)
                close(fd);
            if (nthreads)
                pthread_mutex_lock(&W.wlock);
            cancelled_return(&W.out, h.id);
            rc = nthreads ? flush(&W.out, -1) : 0;
            if (nthreads)
                pthread_mutex_unlock(&W.wlock);
            if (rc)
                break;
            continue;
        }
        if (nthreads && W.cls) {
            struct job *j = cr_calloc(1, sizeof(*j));
            j->id = h.id;
            j->payload = cr_malloc(h.len ? h.len : 1);
            memcpy(j->payload, p, h.len);
            j->len = h.len;
            j->fd = fd;
            pthread_mutex_lock(&W.qlock);
            if (W.qtail)
                W.qtail->next = j;
            else
                W.qhead = j;
            W.qtail = j;
            pthread_cond_signal(&W.qcond);
            pthread_mutex_unlock(&W.qlock);
            if (W.broken)
                break;
            continue;
        }
        /* one thread; or the constructor, before any method may run */
        int rfd;
        int64_t t0 = mono_ns();
        run_begin();
        run_call(h.id, p, h.len, fd, &W.out, &rfd, W.unix_sock);
        run_end();
        if (W.cls && !W.callers_tried)
            callers_start(); /* constructed: other callers may come now */
        if (mono_ns() - t0 >= CANCEL_POLL_NS)
            ran_long = true;
        if (fd >= 0)
            close(fd);
        if (nthreads) {
            pthread_mutex_lock(&W.wlock);
            rc = flush(&W.out, rfd);
            pthread_mutex_unlock(&W.wlock);
            if (rc)
                break;
        } else if (rfd >= 0 && flush(&W.out, rfd)) {
            break;
        }
    }
    if (nthreads) {
        pthread_mutex_lock(&W.qlock);
        W.quit = true;
        pthread_cond_broadcast(&W.qcond);
        pthread_mutex_unlock(&W.qlock);
        for (unsigned i = 0; i < nthreads; i++)
            pthread_join(threads[i], NULL);
        free(threads);
    }
    return status;
}

/* ---- other callers of the actor (docs/actors.md "Named actors from C") ---- */

/* Callers served at once, at most (one thread each); more are refused. */
#define CALLERS_MAX 64
/* A caller must say HELLO within this long. */
#define CALLER_HELLO_MS 10000

/* Serves one caller's stream on sock after its HELLO was read from r
 * (or, fuzzed, r holds the whole stream): each CALL in turn, so one
 * caller's calls run in the order it made them. A caller may call the
 * actor's methods only ("Class.method"), never a function or the
 * constructor. Returns at BYE, the stream's end, or a bad frame. */
static int caller_serve(int sock, bool unix_sock, crt_reader_t *r)
{
    crt_bytes_t out = {0};
    int status = 0;
    r->max = CRT_MAX_FRAME;
    for (;;) {
        crt_hdr_t h;
        const uint8_t *p;
        int fd;
        int rc = crt_reader_next(r, &h, &p, &fd);
        if (rc < 0) {
            fprintf(stderr, "corral worker: a bad frame from a caller (%s): closing it\n",
                    cr_strerror(rc));
            status = 1;
            break;
        }
        if (rc == 0) {
            ssize_t n = crt_reader_fill(r, sock, unix_sock);
            if (n <= 0)
                break;
            continue;
        }
        uint64_t id;
        frame_ask_t ask = frame_sort(&h, p, fd, "a caller", &id);
        if (ask == ASK_BYE)
            break;
        if (ask == ASK_BAD) {
            status = 1;
            break;
        }
        if (ask == ASK_CANCEL)
            continue; /* calls from a caller run one by one, in its order, as
                       * they are read: none waits here to be cancelled */
        if (ask == ASK_FETCH) {
            fetch_answer(&out, h.id, p, h.len);
            rc = crt_write_all(sock, &out, -1);
            out.len = out.off = 0;
            if (rc)
                break;
            continue;
        }
        const char *name;
        size_t nl, alen;
        const uint8_t *args;
        int rfd = -1;
        if (crt_call_parse(p, h.len, &name, &nl, &args, &alen) || !memchr(name, '.', nl)) {
            static const char why[] = "a caller may call only the actor's methods (Class.method)";
            crt_return_add(&out, h.id, 0, CRT_SYS_ERROR, why, strlen(why));
        } else {
            run_begin();
            if (atomic_load(&W.exiting)) {
                static const char why[] = "the actor is exiting";
                crt_return_add(&out, h.id, 0, CRT_SYS_ERROR, why, strlen(why));
            } else {
                run_call(h.id, p, h.len, fd, &out, &rfd, unix_sock);
            }
            run_end();
        }
        if (fd >= 0)
            close(fd);
        rc = crt_write_all(sock, &out, rfd);
        if (rfd >= 0)
            close(rfd);
        out.len = out.off = 0;
        if (rc)
            break;
    }
    crt_bytes_free(&out);
    return status;
}

static void *caller_thread(void *arg)
{
    intptr_t v = (intptr_t)arg;
    int sock = (int)(v >> 1);
    bool tcp = v & 1;
    crt_reader_t r;
    crt_reader_init(&r, CRT_HELLO_MAX);
    struct timeval tv = {CALLER_HELLO_MS / 1000, 0};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    crt_hdr_t h;
    const uint8_t *p;
    crt_hello_t hello;
    char why[160] = "", wmac[65] = "";
    uint8_t key[32], snonce[CRT_NONCE_LEN], cnonce[CRT_NONCE_LEN];
    int rc = 0;
    if (tcp) {
        /* the owner's secret, proven both ways as with the owner */
        const char *sec = getenv("CORRAL_TASK_SECRET");
        if (!sec || strlen(sec) != 64 || !cr_hex_decode(sec, 64, key) ||
            cr_random_bytes(snonce, sizeof(snonce)) < 0)
            goto out;
        rc = crt_send_frame(sock, CRT_CHALLENGE, snonce, sizeof(snonce));
        if (rc)
            goto out;
    }
    rc = read_small(sock, &r, &h, &p);
    if (rc || h.kind != CRT_HELLO) {
        fprintf(stderr, "corral worker: a caller did not say HELLO first: closing it\n");
        goto out;
    }
    if (crt_hello_parse(p, h.len, &hello, why, sizeof(why))) {
        fprintf(stderr, "corral worker: a caller's HELLO: %s: closing it\n", why);
        goto out;
    }
    bool caller = !strcmp(hello.role, "caller");
    bool mac_ok = !tcp || crt_mac_ok(key, sizeof(key), snonce, hello.mac);
    bool nonce_ok = !tcp || crt_nonce_parse(hello.nonce, cnonce) == 0;
    crt_hello_free(&hello);
    if (!mac_ok || !nonce_ok) {
        fprintf(stderr, "corral worker: a TCP caller's HELLO has a %s: closing it\n",
                mac_ok ? "missing or bad \"nonce\"" : "wrong mac (it does not hold the secret)");
        goto out;
    }
    if (tcp)
        crt_welcome_mac_hex(key, sizeof(key), snonce, cnonce, wmac);
    if (!caller) {
        fprintf(stderr, "corral worker: a HELLO on the actor's socket whose role is not "
                        "\"caller\": closing it\n");
        goto out;
    }
    tv.tv_sec = 0;
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char *w = cr_asprintf("{\"pid\":%d,\"runtime\":\"c\"%s%s%s}", (int)getpid(),
                          *wmac ? ",\"mac\":\"" : "", wmac, *wmac ? "\"" : "");
    rc = crt_send_frame(sock, CRT_WELCOME, w, strlen(w));
    free(w);
    if (!rc)
        caller_serve(sock, !tcp, &r);
out:
    cr_wipe(key, sizeof(key));
    crt_reader_fini(&r);
    close(sock);
    atomic_fetch_sub(&W.ncallers, 1);
    return NULL;
}

static void *accept_thread(void *arg)
{
    bool tcp = arg != NULL;
    for (;;) {
        int fd = accept4(tcp ? W.ltcp : W.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            return NULL;
        }
        if (tcp) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        } else if (peer_is_me(fd)) {
            fprintf(stderr, "corral worker: refused a caller that runs as another user\n");
            close(fd);
            continue;
        }
        if (atomic_fetch_add(&W.ncallers, 1) >= CALLERS_MAX) {
            atomic_fetch_sub(&W.ncallers, 1);
            fprintf(stderr, "corral worker: %d callers already: refused one more\n", CALLERS_MAX);
            close(fd);
            continue;
        }
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, caller_thread, (void *)(((intptr_t)fd << 1) | tcp))) {
            atomic_fetch_sub(&W.ncallers, 1);
            close(fd);
        }
        pthread_attr_destroy(&at);
    }
}

/* An actor whose owner listens on TCP listens there too, at
 * CORRAL_TASK_HOST (else 127.0.0.1), for callers on other hosts: it says
 * where in HELLO's "address", and takes them once constructed. */
static void tcp_listen(void)
{
    const char *host = getenv("CORRAL_TASK_HOST");
    host = host && *host ? host : "127.0.0.1";
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    if (strlen(host) > 45 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "corral worker: CORRAL_TASK_HOST %s is not an IPv4 address\n", host);
        return;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        fprintf(stderr, "corral worker: listening on %s: %s\n", host, strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    W.ltcp = fd;
    snprintf(W.tcp_addr, sizeof(W.tcp_addr), "tcp:%s:%u", host, ntohs(sa.sin_port));
}

/* Once the actor is constructed: listens for other callers on a Unix
 * socket in CORRAL_TASK_LISTEN, a directory this process makes itself
 * (mkdir 0700 fails when anything is there already), as the owner named
 * it in the lease job's command for callers to find. */
static void callers_start(void)
{
    W.callers_tried = true;
    if (W.ltcp >= 0) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, accept_thread, (void *)1)) {
            close(W.ltcp);
            W.ltcp = -1;
        }
        pthread_attr_destroy(&at);
    }
    const char *dir = getenv("CORRAL_TASK_LISTEN");
    if (!dir || !*dir)
        return;
    if (dir[0] != '/' || strlen(dir) + 2 >= sizeof(W.listen_dir)) {
        fprintf(stderr,
                "corral worker: CORRAL_TASK_LISTEN (%s) is not an absolute path of at "
                "most %zu bytes: other callers cannot reach this actor\n",
                dir, sizeof(W.listen_dir) - 3);
        return;
    }
    if (mkdir(dir, 0700) < 0) {
        fprintf(stderr, "corral worker: making %s: %s: other callers cannot reach this actor\n",
                dir, strerror(errno));
        return;
    }
    cr_strlcpy(W.listen_dir, dir, sizeof(W.listen_dir));
    snprintf(W.listen_path, sizeof(W.listen_path), "%s/s", dir);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_strlcpy(sa.sun_path, W.listen_path, sizeof(sa.sun_path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
        fprintf(stderr, "corral worker: listening at %s: %s\n", W.listen_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    W.lfd = fd;
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, accept_thread, NULL)) {
        close(W.lfd);
        W.lfd = -1;
    }
    pthread_attr_destroy(&at);
}

/* At exit: no caller runs a method any more (every slot taken), and the
 * socket and its directory are gone. */
static void callers_stop(unsigned slots)
{
    atomic_store(&W.exiting, true);
    if (W.listen_path[0]) {
        unlink(W.listen_path);
        rmdir(W.listen_dir);
    }
    if (W.lfd >= 0)
        shutdown(W.lfd, SHUT_RDWR);
    if (W.ltcp >= 0)
        shutdown(W.ltcp, SHUT_RDWR);
    for (unsigned i = 0; W.run_init && i < slots; i++)
        run_begin();
}

int corral_worker_main(void)
{
    const char *owner = getenv("CORRAL_TASK_OWNER");
    char why[512] = "";
    if (!corral_worker_is_leased() || !owner) {
        fprintf(stderr, "corral worker: CORRAL_TASK_LEASE and CORRAL_TASK_OWNER are not set: "
                        "this program is started as a worker by its owner (corral_tasks_init)\n");
        return 1;
    }
    bool unix_sock = false;
    int sock = dial(owner, &unix_sock, why, sizeof(why));
    if (sock < 0) {
        fprintf(stderr, "corral worker: %s\n", why);
        return 1;
    }
    W.sock = sock;
    W.unix_sock = unix_sock;
    if (getenv("CORRAL_TASK_LISTEN") && strstr(owner, "tcp:"))
        tcp_listen();
    crt_reader_t r;
    crt_reader_init(&r, CRT_HELLO_MAX);
    int status = 1;
    if (handshake(sock, unix_sock, &r, why, sizeof(why)))
        fprintf(stderr, "corral worker: %s\n", why);
    else
        status = serve(&r);
    const char *mc = getenv("CORRAL_TASK_MAX_CONCURRENCY");
    callers_stop(mc && atoi(mc) > 1 ? (atoi(mc) > 1024 ? 1024u : (unsigned)atoi(mc)) : 1u);
    if (W.cls && W.cls->dtor)
        W.cls->dtor(W.state);
    crt_reader_fini(&r);
    crt_bytes_free(&W.out);
    close(sock);
    W.sock = -1;
    return status;
}

int crt_worker_run_call(const uint8_t *payload, size_t len, crt_bytes_t *out)
{
    int fd;
    run_call(1, payload, len, -1, out, &fd, true);
    if (fd >= 0)
        close(fd);
    return 0;
}

/* the fuzz target's other end: drains and checks the RETURNs */
static void *feed_drain(void *arg)
{
    int fd = *(int *)arg;
    crt_reader_t r;
    crt_reader_init(&r, CRT_MAX_FRAME);
    intptr_t bad = 0;
    for (;;) {
        crt_hdr_t h;
        const uint8_t *p;
        int rfd, rc;
        while ((rc = crt_reader_next(&r, &h, &p, &rfd)) == 1) {
            uint8_t st;
            const uint8_t *v;
            size_t vn;
            if (rfd >= 0)
                close(rfd);
            if (h.kind != CRT_RETURN || crt_return_parse(p, h.len, &st, &v, &vn))
                bad = 1;
        }
        if (rc < 0)
            bad = 1;
        if (crt_reader_fill(&r, fd, true) <= 0)
            break;
    }
    crt_reader_fini(&r);
    return (void *)bad;
}

/* The fuzz feeders' socket pair: sv[0] is the worker's, sv[1] drained by
 * a thread (feed_drain) so that replies never block; at most 1 MiB fed. */
static int feed_open(size_t size, int sv[2], pthread_t *th)
{
    if (size > (1u << 20) || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return CR_EINVAL;
    if (pthread_create(th, NULL, feed_drain, &sv[1])) {
        close(sv[0]);
        close(sv[1]);
        return CR_EIO;
    }
    return 0;
}

/* Ends the pair: CR_EPARSE if the drain saw a malformed reply. */
static int feed_close(int sv[2], pthread_t th)
{
    shutdown(sv[0], SHUT_RDWR);
    void *bad = NULL;
    pthread_join(th, &bad);
    close(sv[0]);
    close(sv[1]);
    return bad ? CR_EPARSE : 0;
}

int crt_worker_feed(const uint8_t *data, size_t size)
{
    int sv[2];
    pthread_t th;
    int rc = feed_open(size, sv, &th);
    if (rc)
        return rc;
    /* the stream is in the reader's buffer already: the socket only ends */
    shutdown(sv[1], SHUT_WR);
    W.sock = sv[0];
    W.unix_sock = !(size & 1); /* odd sizes: as TCP (large results kept) */
    W.ncancels = 0;
    W.broken = 0;
    crt_reader_t r;
    crt_reader_init(&r, CRT_HELLO_MAX);
    crt_bytes_add(&r.in, data, size);
    serve(&r);
    crt_reader_fini(&r);
    if (W.out.len)
        flush(&W.out, -1);
    crt_bytes_free(&W.out);
    if (W.cls && W.cls->dtor)
        W.cls->dtor(W.state);
    W.cls = NULL;
    W.state = NULL;
    W.sock = -1;
    return feed_close(sv, th);
}

int crt_worker_caller_feed(const uint8_t *data, size_t size)
{
    int sv[2];
    pthread_t th;
    int rc = feed_open(size, sv, &th);
    if (rc)
        return rc;
    shutdown(sv[1], SHUT_WR);
    crt_reader_t r;
    crt_reader_init(&r, CRT_HELLO_MAX);
    crt_bytes_add(&r.in, data, size);
    caller_serve(sv[0], !(size & 1), &r); /* odd sizes: as TCP (large results kept) */
    crt_reader_fini(&r);
    return feed_close(sv, th);
}
