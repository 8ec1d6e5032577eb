/* Connections on one libuv loop. A listener accepts Unix-socket or TCP
 * peers; an outgoing connection dials one. Either way bytes go through
 * the frame decoder, each frame is unpacked and validated, the handshake
 * consumes the first ones, and after it every envelope goes to on_message.
 * Anything malformed closes that one connection with one log line naming
 * the peer; the loop and every other connection carry on.
 *
 * Ownership: the net owns its listeners and connections. Each embeds libuv
 * handles and is freed from the close callback of its last handle, never
 * earlier; the net itself is freed when its last child is. */
#include "net/net.h"
#include "net/tls.h"
#include "net/uring.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* one read takes up to this much: a stream of 256 KiB output messages
 * then mostly arrives whole in one read, handed on without the frame
 * decoder's copy (the buffer is one per net, touched only as far as used) */
#define READ_BUF (1024 * 1024)
/* a client's reads start at this much of it, and double (up to READ_BUF)
 * after CLIENT_GROW reads that each filled the window: every page of the
 * buffer a read first touches is a page fault (about 10 µs each on the VM
 * of issue 18), and a client is mostly a short-lived command: `corral run`
 * of 1 MiB of output into a file read it into all 256 pages of the
 * buffer, 2.5 ms of its 6 ms of CPU. A long stream grows the window after
 * 1 MiB, where the faults are nothing beside it (a stream into a pipe
 * goes by splice anyway: raw_splice) */
#define CLIENT_READ (64 * 1024)
#define CLIENT_GROW 16
#define DEFAULT_HS_TIMEOUT_MS 5000
#define DEFAULT_MAX_QUEUE (64u << 20)
#define LINGER_MS 1000 /* how long a Refused may take to leave before we close */
/* batched reads (cr_net_config_t.batch_ms): a read this large or larger
 * is bulk, read at once; events taken from the batch's set per call */
#define BATCH_BULK (16 * 1024)
#define BATCH_EVENTS 256
#define BATCH_SLICE (READ_BUF / BATCH_EVENTS) /* each one's part of the read buffer */

typedef union stream_u {
    uv_handle_t h;
    uv_stream_t s;
    uv_pipe_t pipe;
    uv_tcp_t tcp;
} stream_u;

typedef struct cr_listener {
    stream_u u; /* first: the handle's address is the listener's */
    cr_net_t *net;
    struct cr_listener *next, **pprev;
    char *unix_path; /* removed on close */
    bool is_unix;
    bool tls; /* every connection accepted speaks TLS (docs/protocol.md "TLS") */
    unsigned accepted;
} cr_listener_t;

/* Where a held frame lies in cr_conn.held, and the request it answers
 * (0: none), for cr_net_flush_failed. */
typedef struct held_frame {
    size_t off, len;
    uint64_t reply_to;
} held_frame_t;

struct cr_conn {
    stream_u u;
    uv_timer_t timer; /* handshake deadline, then linger after a refusal */
    uv_connect_t connect_req;
    uv_getaddrinfo_t gai; /* resolving a host name; counts as a handle */
    cr_net_t *net;
    cr_conn_t *next, **pprev;
    int open_handles; /* freed when this drops to 0 */
    bool is_unix, server, ready, closing, announced, linger, resolving;
    int close_err;
    char peer[128];
    char peer_key[64]; /* the peer for the cap before the handshake: its IP, or uid:N */
    /* the handshake's state (688 bytes), until it is done: then what the
     * connection keeps of it is in kept and it is freed (issue 18) */
    cr_hs_t *hs;
    struct {
        Corral__Role role; /* the peer's (a server's), or ours (a client's) */
        uint32_t features, peer_features;
        uint64_t max_frame; /* a client's: the head's limit (Welcome) */
        bool done, job;
        cr_job_scope_t scope; /* a job credential's (job) */
    } kept;
    cr_frame_dec_t dec;
    size_t queued;
    uint64_t last_id;
    void *data;
    cr_buf_t held; /* frames sent while the net is held (cr_net_hold) */
    CR_VEC(held_frame_t) held_frames;
    /* in the net's list of connections with held frames (hpprev NULL: not) */
    cr_conn_t *hnext, **hpprev;
    /* a detached connection (tests): no socket, no net; sends go to sink */
    bool detached;
    void (*sink)(void *arg, const Corral__Envelope *e);
    void *sink_arg;
    /* TLS (a TCP connection of a TLS listener, or to a head with a pinned
     * certificate or a CA): frames go through it once tls_up */
    cr_tls_t *tls;
    bool tls_up;
    bool rx_any; /* a byte has been received: the first says TLS or not */
    char *why;   /* why the handshake (TLS or corral's) failed, for on_close: NULL, or
                    malloc'ed when it did (not 320 bytes in every connection, issue 18) */
    /* a LogChunk whose raw_len bytes follow its frame (docs/protocol.md
     * "Raw log chunks"): its header, handed on with each piece as data,
     * and how many bytes are still to come */
    Corral__Envelope *raw_env;
    uint64_t raw_left;
    /* cr_conn_set_raw_fd: where a raw chunk's bytes may go instead of
     * on_message; raw_out the current chunk's (-1 none) */
    int (*raw_pick)(void *arg, const Corral__LogChunk *ch);
    void *raw_pick_arg;
    int raw_out;
    bool raw_spliced; /* raw_splice moved a chunk's rest whole: raw_splice_more */
    bool sendfile;    /* cr_conn_set_sendfile: raw chunks' bytes by sendfile(2) */
    bool batched;     /* read in batches: in the batch's epoll set, not libuv's reading */
};

/* The connections read in batches: an epoll set of their sockets apart
 * from the loop's, itself watched by the loop. When it is readable, every
 * ready connection is read in one turn and the set is left unwatched for
 * batch_ms; a turn then reads what came meanwhile, and the set is watched
 * again after a pause in which nothing came. Under a steady stream of
 * beats the head wakes once per batch_ms, not once per beat. */
typedef struct batch {
    uv_poll_t poll;   /* the set's descriptor, while not pausing */
    uv_timer_t timer; /* the pause */
    cr_net_t *net;
    int epfd;
    int open_handles; /* freed when this drops to 0 */
    size_t conns;     /* in the set */
    uint64_t turns;   /* batches read */
    bool pausing;     /* the loop does not watch the set (batch_watch) */
    bool watch_failed;
    cr_uring_t *ring;    /* the ready connections' receives in one call; NULL: a read(2) each */
    uint64_t ring_recvs; /* receives done through it */
} batch_t;

struct cr_net {
    uv_loop_t *loop;
    uint8_t token[CR_TOKEN_LEN];
    char *name;
    size_t max_frame, max_queue;
    uint32_t hs_timeout_ms, accept_roles;
    uint32_t max_unauth, max_unauth_per_peer;
    uint64_t unauth_refused; /* connections closed at accept for the caps */
    bool job;                /* connecting with a job credential (token is it) */
    uint32_t features;       /* announced in the handshake (CR_FEATURES, $CORRAL_FEATURES) */
    uint8_t *scratch;        /* cr_conn_send_log_file's reads, reused */
    size_t scratch_cap;
    cr_job_scope_t scope;
    cr_net_callbacks_t cb;
    void *data;
    cr_listener_t *listeners;
    cr_conn_t *conns;
    size_t live;        /* listeners and connections not yet freed */
    int hold;           /* cr_net_hold depth: frames wait in each conn's held */
    cr_conn_t *holding; /* the connections with held frames, for cr_net_flush */
    bool closing;
    void (*done)(void *);
    void *done_data;
    const cr_tls_ops_t *tls; /* the shim, loaded when a context was made */
    cr_tls_ctx_t *tls_server, *tls_client;
    uint32_t batch_ms;   /* cr_net_config_t.batch_ms */
    batch_t *batch;      /* made with the first connection read in batches */
    char rbuf[READ_BUF]; /* one loop, one read at a time: shared */
    size_t rwin;         /* how much of it a client's read takes (CLIENT_READ) */
    unsigned rwin_full;  /* reads that filled rwin since it last grew */
    char pbuf[16384];    /* TLS: one record's plaintext at a time, also shared */
};

/* Raw log chunks' bytes in this process (cr_net_raw_stats): one loop per
 * process, or the head's and its in-process agent's on the same one. */
static cr_raw_stats_t raw_stats;

static void batch_leave(cr_conn_t *c);

void cr_net_raw_stats(cr_raw_stats_t *out)
{
    *out = raw_stats;
}

typedef struct write_req {
    uv_write_t req;
    cr_conn_t *c;
    size_t len; /* the frames' bytes it carries, counted in queued */
    uint8_t *bytes;
} write_req_t;

/* Why the handshake failed (cr_conn_why); a later reason replaces an
 * earlier one, as before. */
static void set_why(cr_conn_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_why(cr_conn_t *c, const char *fmt, ...)
{
    if (c->why)
        free(c->why);
    va_list ap;
    va_start(ap, fmt);
    char buf[320];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    c->why = cr_strdup(buf);
}

static void held_unlink(cr_conn_t *c)
{
    if (!c->hpprev)
        return;
    *c->hpprev = c->hnext;
    if (c->hnext)
        c->hnext->hpprev = c->hpprev;
    c->hnext = NULL;
    c->hpprev = NULL;
}

static void net_maybe_free(cr_net_t *n)
{
    if (!n->closing || n->live)
        return;
    void (*done)(void *) = n->done;
    void *done_data = n->done_data;
    cr_wipe(n->token, sizeof(n->token));
    if (n->tls) {
        n->tls->ctx_free(n->tls_server);
        n->tls->ctx_free(n->tls_client);
    }
    free(n->name);
    free(n->scratch);
    free(n);
    if (done)
        done(done_data);
}

/* The TLS contexts the config asks for, with the shim loaded for them. */
static int tls_setup(cr_net_t *n, const cr_net_config_t *cfg)
{
    bool server = cfg->tls_cert_pem || cfg->tls_key_pem;
    bool client = cfg->tls_pin || cfg->tls_ca_pem;
    if (!server && !client)
        return 0;
    char why[1024];
    if (server && (!cfg->tls_cert_pem || !cfg->tls_key_pem)) {
        cr_warn("net: TLS needs both a certificate and its key");
        return CR_EINVAL;
    }
    if (!(n->tls = cr_tls_load(why, sizeof(why)))) {
        cr_warn("%s", why);
        return CR_ENOENT;
    }
    if (server && !(n->tls_server = n->tls->server_ctx(cfg->tls_cert_pem, strlen(cfg->tls_cert_pem),
                                                       cfg->tls_key_pem, strlen(cfg->tls_key_pem),
                                                       why, sizeof(why)))) {
        cr_warn("TLS: %s", why);
        return CR_EINVAL;
    }
    if (client && !(n->tls_client = n->tls->client_ctx(
                        cfg->tls_pin, cfg->tls_ca_pem,
                        cfg->tls_ca_pem ? strlen(cfg->tls_ca_pem) : 0, why, sizeof(why)))) {
        cr_warn("TLS: %s", why);
        n->tls->ctx_free(n->tls_server);
        return CR_EINVAL;
    }
    return 0;
}

cr_net_t *cr_net_new(uv_loop_t *loop, const cr_net_config_t *cfg, const cr_net_callbacks_t *cb,
                     void *data)
{
    if (!loop || !cfg || !cfg->token || !cb) {
        cr_warn("net: a loop, a token and callbacks are required");
        return NULL;
    }
    cr_net_t *n = cr_calloc(1, sizeof(*n));
    n->loop = loop;
    n->rwin = CLIENT_READ;
    memcpy(n->token, cfg->token, CR_TOKEN_LEN);
    if (cfg->job) {
        n->job = true;
        n->scope = *cfg->job;
    }
    n->name = cr_strdup(cfg->name ? cfg->name : "");
    n->features = CR_FEATURES;
    const char *fe = getenv("CORRAL_FEATURES");
    int64_t fv;
    if (fe && *fe && cr_parse_i64(fe, 0, &fv) == 0 && fv >= 0)
        n->features = (uint32_t)fv & CR_FEATURES;
    n->max_frame = cfg->max_frame ? cfg->max_frame : CR_FRAME_MAX_DEFAULT;
    n->max_queue = cfg->max_write_queue ? cfg->max_write_queue : DEFAULT_MAX_QUEUE;
    n->hs_timeout_ms =
        cfg->handshake_timeout_ms ? cfg->handshake_timeout_ms : DEFAULT_HS_TIMEOUT_MS;
    n->max_unauth = cfg->max_unauth ? cfg->max_unauth : CR_UNAUTH_MAX_DEFAULT;
    n->max_unauth_per_peer =
        cfg->max_unauth_per_peer ? cfg->max_unauth_per_peer : CR_UNAUTH_PER_PEER_DEFAULT;
    n->accept_roles = cfg->accept_roles
                          ? cfg->accept_roles
                          : (1u << CORRAL__ROLE__ROLE_CLIENT) | (1u << CORRAL__ROLE__ROLE_AGENT);
    n->cb = *cb;
    n->data = data;
    n->batch_ms = cfg->batch_ms;
    if (tls_setup(n, cfg) < 0) {
        cr_wipe(n->token, sizeof(n->token));
        free(n->name);
        free(n);
        return NULL;
    }
    return n;
}

/* ---------------------------------------------------------------- closing */

/* Forgets a raw LogChunk being received: its data points into the read
 * buffer, not into memory of the message's own. */
static void raw_end(cr_conn_t *c)
{
    c->raw_out = -1;
    if (!c->raw_env)
        return;
    c->raw_env->log_chunk->data.data = NULL;
    c->raw_env->log_chunk->data.len = 0;
    cr_msg_free(c->raw_env);
    c->raw_env = NULL;
    c->raw_left = 0;
}

/* Drops one of the things that keep c alive (its two handles, a name
 * lookup in flight); the last one frees it. */
static void conn_release(cr_conn_t *c)
{
    if (--c->open_handles > 0)
        return;
    cr_net_t *n = c->net;
    *c->pprev = c->next;
    if (c->next)
        c->next->pprev = c->pprev;
    held_unlink(c);
    if (c->announced && n->cb.on_close)
        n->cb.on_close(c, c->close_err, n->data);
    if (c->tls)
        n->tls->conn_free(c->tls);
    raw_end(c);
    cr_frame_dec_fini(&c->dec);
    free(c->why);
    if (c->hs) {
        cr_wipe(c->hs, sizeof(*c->hs));
        free(c->hs);
    }
    cr_buf_free(&c->held);
    CR_VEC_FREE(&c->held_frames);
    free(c);
    n->live--;
    net_maybe_free(n);
}

static void conn_handle_closed(uv_handle_t *h)
{
    conn_release(h->data);
}

/* Plaintext and ciphertext go through the memory BIOs this much at a time:
 * a memory BIO keeps the largest size it ever held, so a 16 MiB frame or a
 * 1 MiB read passed whole would leave each connection holding that much
 * for good; in pieces, each BIO stays within two records' worth. */
#define TLS_PIECE (32 * 1024)

/* Encrypts len bytes of frames into a new malloc'ed buffer (*out, *olen),
 * after whatever TLS had waiting to be sent. 0 or CR_EIO (said). */
static int tls_encrypt(cr_conn_t *c, const uint8_t *p, size_t len, uint8_t **out, size_t *olen)
{
    const cr_tls_ops_t *t = c->net->tls;
    /* TLS 1.3 adds 22 bytes to a record of at most 16 KiB: room for more */
    size_t cap = t->pending(c->tls) + len + (len / 16384 + 2) * 64, have = 0;
    uint8_t *buf = cr_malloc(cap);
    char why[256];
    for (;;) {
        size_t n = t->pending(c->tls);
        if (have + n > cap) {
            cap = have + n + TLS_PIECE;
            buf = cr_realloc(buf, cap);
        }
        have += t->take(c->tls, buf + have, n);
        if (!len)
            break;
        size_t piece = len < TLS_PIECE ? len : TLS_PIECE;
        if (t->write(c->tls, p, piece, why, sizeof(why)) < 0) {
            cr_warn("%s: %s", c->peer, why);
            free(buf);
            return CR_EIO;
        }
        p += piece;
        len -= piece;
    }
    *out = buf;
    *olen = have;
    return 0;
}

/* A last write before the close, as far as the kernel takes it now. */
static void try_write_now(cr_conn_t *c, const uint8_t *bytes, size_t len)
{
    if (!c->tls) {
        uv_buf_t b = uv_buf_init((char *)bytes, (unsigned)len);
        uv_try_write(&c->u.s, &b, 1);
        return;
    }
    uint8_t *out;
    size_t n;
    if (!c->tls_up || tls_encrypt(c, bytes, len, &out, &n) < 0)
        return;
    uv_buf_t b = uv_buf_init((char *)out, (unsigned)n);
    uv_try_write(&c->u.s, &b, 1);
    free(out);
}

void cr_conn_close(cr_conn_t *c, int err)
{
    if (c->closing)
        return;
    if (c->held.len) { /* what was said before the close still goes, as far as it can now */
        if (!c->resolving && !uv_is_closing(&c->u.h))
            try_write_now(c, (const uint8_t *)c->held.s, c->held.len);
        c->queued -= c->held.len;
        cr_buf_free(&c->held);
        c->held = (cr_buf_t){0};
        c->held_frames.n = 0;
    }
    c->closing = true;
    c->close_err = err;
    c->ready = false;
    batch_leave(c); /* out of the set before the socket closes (a forked child may hold it) */
    if (c->detached)
        return; /* cr_conn_free_detached frees it */
    if (c->resolving)
        uv_cancel((uv_req_t *)&c->gai); /* its callback still runs, and releases */
    uv_close(&c->u.h, conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
}

static void batch_closed(uv_handle_t *h)
{
    batch_t *b = h->data;
    if (--b->open_handles > 0)
        return;
    cr_net_t *n = b->net;
    close(b->epfd);
    cr_uring_free(b->ring);
    free(b);
    n->live--;
    net_maybe_free(n);
}

static void listener_closed(uv_handle_t *h)
{
    cr_listener_t *l = h->data;
    cr_net_t *n = l->net;
    if (l->unix_path)
        unlink(l->unix_path);
    free(l->unix_path);
    free(l);
    n->live--;
    net_maybe_free(n);
}

void cr_net_close(cr_net_t *n, void (*done)(void *data), void *data)
{
    if (n->closing)
        return;
    n->closing = true;
    n->done = done;
    n->done_data = data;
    for (cr_listener_t *l = n->listeners; l; l = l->next)
        uv_close(&l->u.h, listener_closed);
    n->listeners = NULL;
    for (cr_conn_t *c = n->conns; c; c = c->next)
        cr_conn_close(c, 0);
    if (n->batch) {
        uv_close((uv_handle_t *)&n->batch->poll, batch_closed);
        uv_close((uv_handle_t *)&n->batch->timer, batch_closed);
        n->batch = NULL;
    }
    net_maybe_free(n);
}

/* ----------------------------------------------------------------- writes */

static void write_done(uv_write_t *req, int status)
{
    write_req_t *w = (write_req_t *)req;
    cr_conn_t *c = w->c;
    size_t w_len = w->len;
    c->queued -= w->len;
    free(w->bytes);
    free(w);
    if (status < 0 && status != UV_ECANCELED && !c->closing) {
        cr_warn("%s: write failed: %s; closing the connection", c->peer, uv_strerror(status));
        cr_conn_close(c, status);
        return;
    }
    if (c->linger && c->queued == 0)
        cr_conn_close(c, c->close_err);
    else if (c->queued == 0 && w_len && c->ready && !c->closing && c->net->cb.on_drain)
        c->net->cb.on_drain(c, c->net->data);
}

/* Starts writing w's frames (w->bytes, w->len, owned by w): as they are,
 * or encrypted (w->bytes then holds the ciphertext; w->len still counts
 * the frames' bytes for queued). */
static int start_write(cr_conn_t *c, write_req_t *w)
{
    size_t wlen = w->len;
    if (c->tls) {
        uint8_t *out;
        if (!c->tls_up) /* nothing of ours goes before the head is known */
            return -ENOTCONN;
        if (tls_encrypt(c, w->bytes, w->len, &out, &wlen) < 0)
            return CR_EIO;
        free(w->bytes);
        w->bytes = out;
    }
    uv_buf_t buf = uv_buf_init((char *)w->bytes, (unsigned)wlen);
    return uv_write(&w->req, &c->u.s, &buf, 1, write_done);
}

/* Writes what TLS itself has to send (handshake flights, alerts): no
 * frames, nothing counted in queued. */
static int tls_flush(cr_conn_t *c)
{
    size_t n = c->net->tls->pending(c->tls);
    if (!n || c->closing)
        return 0;
    write_req_t *w = cr_malloc(sizeof(*w));
    w->c = c;
    w->len = 0;
    w->bytes = cr_malloc(n);
    n = c->net->tls->take(c->tls, w->bytes, n);
    uv_buf_t buf = uv_buf_init((char *)w->bytes, (unsigned)n);
    int err = uv_write(&w->req, &c->u.s, &buf, 1, write_done);
    if (err < 0) {
        free(w->bytes);
        free(w);
        cr_warn("%s: write failed: %s; closing the connection", c->peer, uv_strerror(err));
        cr_conn_close(c, err);
    }
    return err;
}

static void flush_conn(cr_conn_t *c)
{
    if (!c->held.len || c->closing)
        return;
    write_req_t *w = cr_malloc(sizeof(*w));
    w->c = c;
    w->len = c->held.len;
    w->bytes = (uint8_t *)c->held.s; /* the buffer goes with the request */
    c->held = (cr_buf_t){0};
    c->held_frames.n = 0;
    int err = start_write(c, w);
    if (err < 0) {
        c->queued -= w->len;
        free(w->bytes);
        free(w);
        cr_warn("%s: write failed: %s; closing the connection", c->peer, uv_strerror(err));
        cr_conn_close(c, err);
    }
}

void cr_net_hold(cr_net_t *n)
{
    n->hold++;
}

/* Only the connections that have frames held are visited: a head with
 * 10,000 agents flushes every turn of its loop. */
void cr_net_flush(cr_net_t *n)
{
    if (n->hold > 0 && --n->hold > 0)
        return;
    while (n->holding) {
        cr_conn_t *c = n->holding;
        held_unlink(c);
        flush_conn(c);
    }
}

/* c's held answers replaced by Error{code, msg}; its other frames kept. */
static void fail_answers(cr_conn_t *c, int code, const char *msg)
{
    cr_buf_t out = {0};
    size_t kept = 0;
    for (size_t i = 0; i < c->held_frames.n; i++) {
        held_frame_t f = c->held_frames.v[i];
        size_t off = out.len;
        if (!f.reply_to) {
            cr_buf_append(&out, c->held.s + f.off, f.len);
        } else {
            Corral__Error err = CORRAL__ERROR__INIT;
            err.code = code;
            err.message = (char *)msg;
            Corral__Envelope e = CORRAL__ENVELOPE__INIT;
            e.reply_to = f.reply_to;
            e.body_case = CORRAL__ENVELOPE__BODY_ERROR;
            e.error = &err;
            uint8_t *b;
            size_t len;
            if (cr_msg_pack(&e, 0, &b, &len) < 0)
                continue;
            cr_buf_append(&out, (const char *)b, len);
            free(b);
        }
        c->held_frames.v[kept++] = (held_frame_t){off, out.len - off, f.reply_to};
    }
    c->held_frames.n = kept;
    c->queued = c->queued - c->held.len + out.len;
    cr_buf_free(&c->held);
    c->held = out;
}

void cr_net_flush_failed(cr_net_t *n, int code, const char *msg)
{
    for (cr_conn_t *c = n->holding; c; c = c->hnext)
        fail_answers(c, code, msg);
    cr_net_flush(n);
}

static int queue_frame(cr_conn_t *c, write_req_t *w, uint64_t reply_to, bool output);

static int send_env_as(cr_conn_t *c, const Corral__Envelope *e, bool output);

/* Queues one envelope, handshake or not. */
static int send_env(cr_conn_t *c, const Corral__Envelope *e)
{
    return send_env_as(c, e, false);
}

/* output: job output, which queue_frame may write at once while the net
 * is held. */
static int send_env_as(cr_conn_t *c, const Corral__Envelope *e, bool output)
{
    if (c->closing)
        return -ENOTCONN;
    write_req_t *w = cr_malloc(sizeof(*w));
    /* a server announces its limit; sending above it would only get us
     * closed, so it fails here instead */
    size_t max = c->net->max_frame;
    if (!c->server && c->kept.max_frame && c->kept.max_frame < max)
        max = (size_t)c->kept.max_frame;
    int err = cr_msg_pack(e, max, &w->bytes, &w->len);
    if (err) {
        free(w);
        return err;
    }
    return queue_frame(c, w, e->reply_to, output);
}

/* Queues w's bytes (w->bytes, w->len: whole frames, taken): held while
 * the net is (cr_net_hold), else written. Job output (output) is held only
 * behind frames already held for c, to keep their order: it acknowledges
 * nothing a commit could undo, and holding it copied every byte a second
 * time into the held buffer, the head's largest cost for a remote
 * worker's followers (docs/benchmarks.md "Job output"). 0 or an error
 * (the connection is then closed). */
static int queue_frame(cr_conn_t *c, write_req_t *w, uint64_t reply_to, bool output)
{
    int err;
    if (c->net->hold && c->ready && !(output && !c->held.len)) { /* written at cr_net_flush */
        if (!c->hpprev) {
            c->hnext = c->net->holding;
            if (c->hnext)
                c->hnext->hpprev = &c->hnext;
            c->net->holding = c;
            c->hpprev = &c->net->holding;
        }
        *CR_VEC_PUSH(&c->held_frames) = (held_frame_t){c->held.len, w->len, reply_to};
        cr_buf_append(&c->held, (const char *)w->bytes, w->len);
        c->queued += w->len;
        free(w->bytes);
        free(w);
        return 0;
    }
    w->c = c;
    if ((err = start_write(c, w)) < 0) {
        free(w->bytes);
        free(w);
        cr_warn("%s: write failed: %s; closing the connection", c->peer, uv_strerror(err));
        cr_conn_close(c, err);
        return err;
    }
    c->queued += w->len;
    /* what the kernel took does not count, only what libuv still holds */
    size_t held = uv_stream_get_write_queue_size(&c->u.s);
    if (held > c->net->max_queue) {
        cr_warn("%s: %zu bytes wait to be written, above the limit of %zu; the peer reads too "
                "slowly, closing the connection",
                c->peer, held, c->net->max_queue);
        cr_conn_close(c, -ENOBUFS);
        return -ENOBUFS;
    }
    return 0;
}

static unsigned role_bit(Corral__Role r)
{
    return r == CORRAL__ROLE__ROLE_AGENT ? CR_FROM_AGENT : CR_FROM_CLIENT;
}

/* A detached connection's send: packed as for the wire, unpacked again as
 * a peer would, handed to the sink. A message that does not decode is a
 * bug of the sender, which only tests reach: abort loudly. */
static int send_detached(cr_conn_t *c, const Corral__Envelope *e)
{
    uint8_t *buf;
    size_t len;
    int err = cr_msg_pack(e, 0, &buf, &len);
    if (err)
        return err;
    char why[300];
    Corral__Envelope *back =
        cr_msg_unpack(buf + CR_FRAME_HDR, len - CR_FRAME_HDR, why, sizeof(why));
    free(buf);
    if (!back) {
        cr_error("%s: the %s sent does not decode: %s", c->peer, cr_msg_name(e->body_case), why);
        abort();
    }
    if (c->sink)
        c->sink(c->sink_arg, back);
    cr_msg_free(back);
    return 0;
}

static bool is_handshake_body(Corral__Envelope__BodyCase b)
{
    return b >= CORRAL__ENVELOPE__BODY_HELLO && b <= CORRAL__ENVELOPE__BODY_REFUSED;
}

/* Whether e may go to c: the peer would close us for it otherwise, so
 * better to say so here, to the code that built the message. */
static int check_send(cr_conn_t *c, const Corral__Envelope *e)
{
    if (!c->ready || c->closing)
        return -ENOTCONN;
    char why[300] = "";
    if (cr_msg_validate(e, why, sizeof(why)) < 0 || is_handshake_body(e->body_case) ||
        !(cr_msg_senders(e->body_case) & (c->server ? CR_FROM_HEAD : role_bit(c->kept.role)))) {
        cr_warn("%s: not sending an invalid %s: %s", c->peer, cr_msg_name(e->body_case),
                why[0] ? why : "not ours to send");
        return CR_EINVAL;
    }
    return 0;
}

int cr_conn_send(cr_conn_t *c, const Corral__Envelope *e)
{
    int err = check_send(c, e);
    if (err < 0)
        return err;
    if (c->detached)
        return send_detached(c, e);
    return send_env(c, e);
}

int cr_conn_send_output(cr_conn_t *c, const Corral__Envelope *e)
{
    int err = check_send(c, e);
    if (err < 0)
        return err;
    if (c->detached)
        return send_detached(c, e);
    return send_env_as(c, e, true);
}

/* A scratch buffer of n bytes for reads from a file (the net's, reused). */
static uint8_t *scratch(cr_net_t *n, size_t len)
{
    if (len > n->scratch_cap) {
        free(n->scratch);
        n->scratch = cr_malloc(len);
        n->scratch_cap = len;
    }
    return n->scratch;
}

/* len bytes of fd from off into buf; a file cut short (never the case for
 * the output files, which only grow) reads as zeros past its end, so a
 * length already announced is kept. */
static void read_full(int fd, uint8_t *buf, size_t len, uint64_t off)
{
    size_t have = 0;
    while (have < len) {
        ssize_t r = pread(fd, buf + have, len - have, (off_t)(off + have));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    memset(buf + have, 0, len - have);
}

void cr_conn_set_raw_fd(cr_conn_t *c, int (*pick)(void *arg, const Corral__LogChunk *ch), void *arg)
{
    c->raw_pick = pick;
    c->raw_pick_arg = arg;
}

bool cr_conn_can_send_raw(const cr_conn_t *c)
{
    return c->ready && !c->closing && !c->linger && !c->detached &&
           (c->kept.features & c->kept.peer_features & CORRAL__FEATURE__FEATURE_RAW_LOG);
}

void cr_conn_set_sendfile(cr_conn_t *c, bool on)
{
    c->sendfile = on;
}

bool cr_conn_can_sendfile(const cr_conn_t *c)
{
    return c->sendfile && cr_conn_can_send_raw(c) && !c->tls;
}

/* Whether bytes written to c's socket now go out after everything sent
 * before them: nothing waits in libuv's queue or among the turn's held
 * frames, and nothing is to be encrypted. Job output is all that goes
 * this way, and output is not held behind the turn's commit while no
 * frame of c is (queue_frame), so a held net does not stop it. */
static bool can_write_now(cr_conn_t *c)
{
    return cr_conn_can_sendfile(c) && !c->held.len && uv_stream_get_write_queue_size(&c->u.s) == 0;
}

/* The kernel's way, while nothing is queued: the header frame written,
 * then as much of the file as the socket takes now by sendfile(2), its
 * page-cache pages by reference, never copied in this process. Returns
 * the file's bytes sent (0 when the header did not go whole: *hsent says
 * how much of it did), or an error (the connection is then closed). */
static ssize_t send_direct(cr_conn_t *c, const uint8_t *hdr, size_t hlen, size_t *hsent, int fd,
                           uint64_t off, size_t len)
{
    uv_os_fd_t sfd;
    *hsent = 0;
    if (uv_fileno(&c->u.h, &sfd) < 0)
        return 0;
    /* MSG_MORE: the header waits for the file's bytes into one segment
     * (the socket sends without Nagle's wait, conn_start) */
    ssize_t w;
    do
        w = send(sfd, hdr, hlen, MSG_MORE | MSG_DONTWAIT | MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        int err = -errno;
        cr_warn("%s: write failed: %s; closing the connection", c->peer, strerror(-err));
        cr_conn_close(c, err);
        return err;
    }
    *hsent = w > 0 ? (size_t)w : 0;
    size_t sent = 0;
    while (*hsent == hlen && sent < len) {
        off_t o = (off_t)(off + sent);
        ssize_t r = sendfile(sfd, fd, &o, len - sent);
        if (r > 0) {
            sent += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno != EAGAIN) {
            int err = -errno;
            cr_warn("%s: write failed: %s; closing the connection", c->peer, strerror(-err));
            cr_conn_close(c, err);
            return err;
        }
        break; /* the socket is full, or the file short (read_full pads the rest) */
    }
    return (ssize_t)sent;
}

/* The header frame of a raw log chunk of len bytes, checked and packed
 * as any frame is, into a new write request. */
static int raw_header(cr_conn_t *c, Corral__Envelope *e, size_t len, write_req_t **out)
{
    e->log_chunk->raw_len = len;
    int err = check_send(c, e);
    write_req_t *w = NULL;
    if (err == 0) {
        w = cr_malloc(sizeof(*w));
        err = cr_msg_pack(e, c->net->max_frame, &w->bytes, &w->len);
        if (err < 0) {
            free(w);
            w = NULL;
        }
    }
    e->log_chunk->raw_len = 0;
    *out = w;
    return err;
}

/* The raw way: the header frame, then the file's bytes. On a connection
 * set to (cr_conn_set_sendfile: an agent's to the head) and while nothing
 * is queued, they go by sendfile as far as the socket takes them; the
 * rest (all of it otherwise) is read straight after the header into one
 * buffer and queued as a frame is (held, encrypted under TLS), so the
 * bytes are copied once here and never packed or unpacked. */
static int send_raw(cr_conn_t *c, Corral__Envelope *e, int fd, uint64_t off, size_t len,
                    size_t *copied)
{
    write_req_t *w;
    int err = raw_header(c, e, len, &w);
    if (err < 0)
        return err;
    size_t hsent = 0, sent = 0;
    if (can_write_now(c)) {
        ssize_t r = send_direct(c, w->bytes, w->len, &hsent, fd, off, len);
        if (r < 0) {
            free(w->bytes);
            free(w);
            return (int)r;
        }
        sent = (size_t)r;
        raw_stats.sent += sent;
        raw_stats.sent_kernel += sent;
    }
    size_t rest = len - sent;
    *copied = rest;
    if (hsent == w->len && !rest) {
        free(w->bytes);
        free(w);
        return 0;
    }
    /* what the socket did not take waits in the queue, as any frame would */
    size_t hrest = w->len - hsent;
    memmove(w->bytes, w->bytes + hsent, hrest);
    w->bytes = cr_realloc(w->bytes, hrest + rest);
    read_full(fd, w->bytes + hrest, rest, off + sent);
    w->len = hrest + rest;
    raw_stats.sent += rest;
    return queue_frame(c, w, hsent ? 0 : e->reply_to, true);
}

int cr_conn_send_log_bytes(cr_conn_t *c, Corral__Envelope *e, const uint8_t *data, size_t len,
                           size_t *copied)
{
    *copied = len;
    if (e->body_case != CORRAL__ENVELOPE__BODY_LOG_CHUNK || !e->log_chunk || !len ||
        e->log_chunk->data.len || e->log_chunk->eof || !cr_conn_can_send_raw(c))
        return CR_EINVAL;
    write_req_t *w;
    int err = raw_header(c, e, len, &w);
    if (err < 0)
        return err;
    /* straight from data while nothing waits before it: the header and
     * the bytes in one writev, as far as the socket takes them now */
    size_t done = 0, hlen = w->len;
    if (!c->tls && !c->held.len && uv_stream_get_write_queue_size(&c->u.s) == 0) {
        uv_buf_t b[2] = {uv_buf_init((char *)w->bytes, (unsigned)hlen),
                         uv_buf_init((char *)data, (unsigned)len)};
        int r = uv_try_write(&c->u.s, b, 2);
        if (r < 0 && r != UV_EAGAIN) {
            free(w->bytes);
            free(w);
            cr_warn("%s: write failed: %s; closing the connection", c->peer, uv_strerror(r));
            cr_conn_close(c, r);
            return r;
        }
        done = r > 0 ? (size_t)r : 0;
    }
    raw_stats.sent += len;
    if (done == hlen + len) {
        *copied = 0;
        free(w->bytes);
        free(w);
        return 0;
    }
    /* the rest waits in the queue, as any frame would */
    size_t hrest = done < hlen ? hlen - done : 0, drest = done > hlen ? hlen + len - done : len;
    memmove(w->bytes, w->bytes + (hlen - hrest), hrest);
    w->bytes = cr_realloc(w->bytes, hrest + drest);
    memcpy(w->bytes + hrest, data + (len - drest), drest);
    w->len = hrest + drest;
    *copied = drest;
    return queue_frame(c, w, done ? 0 : e->reply_to, true);
}

int cr_conn_send_log_file(cr_conn_t *c, Corral__Envelope *e, int fd, uint64_t off, size_t len,
                          bool raw, size_t *copied)
{
    *copied = len;
    if (e->body_case != CORRAL__ENVELOPE__BODY_LOG_CHUNK || !e->log_chunk || !len ||
        e->log_chunk->data.len || e->log_chunk->eof)
        return CR_EINVAL;
    if (raw && cr_conn_can_send_raw(c))
        return send_raw(c, e, fd, off, len, copied);
    /* the framing every peer takes: the bytes inside the message */
    uint8_t *buf = scratch(c->net, len);
    read_full(fd, buf, len, off);
    e->log_chunk->data.data = buf;
    e->log_chunk->data.len = len;
    int err = cr_conn_send_output(c, e);
    e->log_chunk->data.data = NULL;
    e->log_chunk->data.len = 0;
    return err;
}

/* Sends the handshake's Refused (if any), stops reading and closes once it
 * is written or LINGER_MS passed. */
static void close_after_send(cr_conn_t *c, int err);

static void linger_expired(uv_timer_t *t)
{
    cr_conn_t *c = t->data;
    cr_conn_close(c, c->close_err);
}

static void close_after_send(cr_conn_t *c, int err)
{
    if (c->closing)
        return;
    uv_read_stop(&c->u.s);
    c->close_err = err;
    if (c->queued == 0) {
        cr_conn_close(c, err);
        return;
    }
    c->linger = true;
    uv_timer_start(&c->timer, linger_expired, LINGER_MS, 0);
}

/* ------------------------------------------------------------------ reads */

static void handshake_step(cr_conn_t *c, const Corral__Envelope *e)
{
    cr_hs_t *hs = c->hs;
    int r = cr_hs_step(hs, e);
    if (hs->has_out)
        send_env(c, &hs->out);
    if (c->closing)
        return;
    if (r < 0) {
        if (c->server)
            cr_warn("refused %s (%s%s%s): %s", c->peer, cr_role_name(hs->role),
                    hs->peer_name[0] ? " " : "", hs->peer_name, hs->why);
        else
            cr_warn("%s: %s", c->peer, hs->why);
        set_why(c, "%s", hs->why);
        close_after_send(c, r);
        return;
    }
    if (r == CR_HS_OK) {
        uv_timer_stop(&c->timer);
        c->dec.max = c->net->max_frame; /* proved: the full limit from the next frame on */
        c->ready = true;
        c->announced = true;
        cr_debug("%s: connected (%s)", c->peer, hs->peer_name);
        c->kept.role = c->server ? hs->role : c->kept.role;
        c->kept.features = hs->features;
        c->kept.peer_features = hs->peer_features;
        c->kept.max_frame = c->server ? 0 : hs->max_frame;
        c->kept.job = hs->job;
        c->kept.scope = hs->scope;
        c->kept.done = true;
        cr_wipe(hs, sizeof(*hs));
        free(hs);
        c->hs = NULL;
        if (c->net->cb.on_ready)
            c->net->cb.on_ready(c, c->net->data);
    }
}

/* An authenticated peer that sent something this server cannot take
 * gets an Error saying what, before the close (issue 12: not a bare
 * EOF); a peer that has not proved itself gets nothing. */
static void refuse_message(cr_conn_t *c, uint64_t reply_to, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse_message(cr_conn_t *c, uint64_t reply_to, const char *fmt, ...)
{
    if (!c->server || !c->ready || c->closing || c->linger)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cr_conn_reply_error(c, reply_to, CR_EPARSE, "%s; the connection is closed", msg);
}

/* A LogChunk announced raw_len bytes after its frame: they are handed on
 * as they arrive (raw_piece), straight from the read buffer, each piece
 * as that chunk's data from its offset on. Takes e. Nothing is buffered,
 * so the bound is only the frame limit's, which a sender cannot pass. */
static bool raw_start(cr_conn_t *c, Corral__Envelope *e)
{
    uint64_t n = e->log_chunk->raw_len;
    const char *why = NULL;
    if (!(c->kept.features & CORRAL__FEATURE__FEATURE_RAW_LOG))
        why = "a raw log chunk, which this side did not announce (FEATURE_RAW_LOG)";
    else if (n > c->dec.max)
        why = "a raw log chunk above the frame limit";
    if (why) {
        cr_warn("%s: sent %s; closing the connection", c->peer, why);
        refuse_message(c, e->id, "%s", why);
        close_after_send(c, CR_EPARSE);
        cr_msg_free(e);
        return false;
    }
    e->log_chunk->raw_len = 0; /* each piece reads as a chunk of its own */
    c->raw_env = e;
    c->raw_left = n;
    c->raw_out = c->raw_pick ? c->raw_pick(c->raw_pick_arg, e->log_chunk) : -1;
    if (c->raw_out >= 0 && e->log_chunk->dropped && c->net->cb.on_message)
        c->net->cb.on_message(c, e, c->net->data); /* the gap is told, with no data */
    return !c->closing && !c->linger;
}

/* Bytes of a raw chunk that go to raw_out: written whole (a blocking
 * descriptor, as stdout is); false when it failed (said, and then the
 * bytes go to on_message as any). */
static bool raw_write_out(cr_conn_t *c, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(c->raw_out, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* The rest of a raw chunk that goes to a pipe: moved from the socket by
 * splice(2), never read into this process, as long as it keeps coming (a
 * sender that stalls mid-chunk leaves the rest to the loop's reads). */
static void raw_splice(cr_conn_t *c)
{
    uv_os_fd_t sfd;
    if (c->raw_out < 0 || !c->raw_left || c->closing || uv_fileno(&c->u.h, &sfd) < 0)
        return;
    while (c->raw_left) {
        ssize_t r = splice(sfd, NULL, c->raw_out, NULL, (size_t)c->raw_left, SPLICE_F_MOVE);
        if (r > 0) {
            c->raw_left -= (uint64_t)r;
            c->raw_env->log_chunk->offset += (uint64_t)r;
            raw_stats.received += (uint64_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN) {
            struct pollfd pf = {.fd = sfd, .events = POLLIN};
            if (poll(&pf, 1, 50) > 0 && !(pf.revents & (POLLERR | POLLHUP)))
                continue;
        }
        return; /* EOF, an error, or a pause: the loop's read says which */
    }
    raw_end(c); /* the chunk is done */
    c->raw_spliced = true;
}

static bool feed_plain(cr_conn_t *c, const uint8_t *p, size_t left);

/* After a raw chunk's rest went to its descriptor by splice: the frames
 * that follow are taken from the socket exactly, each peeked and then
 * read to its end and no further, so that the bytes of the next raw
 * chunk stay in the socket for splice rather than being read into the
 * read buffer with its header and written out again (two copies and a
 * write per chunk: most of a client's time). Goes on while each frame
 * starts a raw chunk that splice then moves whole; anything else (a frame
 * not yet whole in the socket, a larger one, a message for on_message, a
 * sender that stalls) is left to the loop's reads. Plaintext only: the
 * caller's read buffer is used up, and no frame is half decoded. */
static void raw_splice_more(cr_conn_t *c)
{
    uint8_t b[256]; /* a raw chunk's header frame is far smaller */
    uv_os_fd_t sfd;
    while (c->raw_spliced && !c->raw_left && !c->closing && !c->linger &&
           uv_fileno(&c->u.h, &sfd) == 0) {
        c->raw_spliced = false;
        ssize_t n = recv(sfd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && errno == EAGAIN) { /* the sender is a step behind: as raw_splice waits */
            struct pollfd pf = {.fd = sfd, .events = POLLIN};
            if (poll(&pf, 1, 50) > 0 && !(pf.revents & (POLLERR | POLLHUP)))
                n = recv(sfd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
        }
        if (n < CR_FRAME_HDR)
            return;
        size_t len = CR_FRAME_HDR +
                     ((size_t)b[0] << 24 | (size_t)b[1] << 16 | (size_t)b[2] << 8 | (size_t)b[3]);
        if (len > (size_t)n)
            return;
        ssize_t r;
        do
            r = recv(sfd, b, len, MSG_DONTWAIT);
        while (r < 0 && errno == EINTR);
        if (r <= 0 || !feed_plain(c, b, (size_t)r))
            return;    /* (r < len cannot be: the bytes were there; the decoder keeps any part) */
        raw_splice(c); /* the chunk that frame started, if one to a descriptor */
    }
}

/* n bytes of the raw LogChunk being received. */
static void raw_piece(cr_conn_t *c, const uint8_t *p, size_t n)
{
    if (c->raw_out >= 0) {
        if (raw_write_out(c, p, n)) {
            c->raw_left -= n;
            raw_stats.received += n;
            c->raw_env->log_chunk->offset += n;
            c->raw_env->log_chunk->dropped = 0;
            if (!c->raw_left)
                raw_end(c);
            return;
        }
        cr_warn("%s: writing output to descriptor %d: %s; handed on instead", c->peer, c->raw_out,
                strerror(errno));
        c->raw_out = -1;
    }
    Corral__Envelope *e = c->raw_env;
    Corral__LogChunk *ch = e->log_chunk;
    c->raw_left -= n;
    raw_stats.received += n;
    bool last = c->raw_left == 0;
    if (last)
        c->raw_env = NULL;
    ch->data.data = (uint8_t *)p;
    ch->data.len = n;
    if (c->net->cb.on_message)
        c->net->cb.on_message(c, e, c->net->data);
    ch->data.data = NULL;
    ch->data.len = 0;
    ch->offset += n;
    ch->dropped = 0; /* said with the first piece */
    ch->worker_log_max = 0;
    if (last)
        cr_msg_free(e);
}

/* Hands one frame on; false when the connection is going away. */
static bool handle_frame(cr_conn_t *c, const uint8_t *frame, size_t len)
{
    char why[300];
    /* the plain heartbeat, most of what an agent sends, decoded on the
     * stack (cr_msg_beat_decode); everything else by protobuf-c */
    cr_msg_beat_t beat;
    bool fast = c->ready && cr_msg_beat_decode(frame, len, &beat);
    Corral__Envelope *e = fast ? &beat.env : cr_msg_unpack(frame, len, why, sizeof(why));
    if (!e) {
        cr_warn("%s: malformed message: %s; closing the connection", c->peer, why);
        refuse_message(c, 0, "malformed message: %s", why);
        close_after_send(c, CR_EPARSE);
        return false;
    }
    if (!c->ready) {
        handshake_step(c, e);
    } else {
        unsigned from = c->server ? role_bit(c->kept.role) : CR_FROM_HEAD;
        if (is_handshake_body(e->body_case) || !(cr_msg_senders(e->body_case) & from)) {
            cr_warn("%s: sent %s, which this side does not take from it; closing the "
                    "connection",
                    c->peer, cr_msg_name(e->body_case));
            refuse_message(c, e->id, "%s is not a message a %s sends here",
                           cr_msg_name(e->body_case), cr_role_name(c->kept.role));
            close_after_send(c, CR_EPARSE);
        } else if (e->body_case == CORRAL__ENVELOPE__BODY_LOG_CHUNK && e->log_chunk->raw_len) {
            return raw_start(c, e);
        } else if (c->net->cb.on_message) {
            c->net->cb.on_message(c, e, c->net->data);
        }
    }
    if (!fast)
        cr_msg_free(e);
    return !c->closing && !c->linger;
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    cr_conn_t *c = h->data;
    cr_net_t *n = c->net;
    *buf = uv_buf_init(n->rbuf, c->server ? sizeof(n->rbuf) : n->rwin);
}

/* Frames from plaintext bytes; false when the connection is going away. */
static bool feed_plain(cr_conn_t *c, const uint8_t *p, size_t left)
{
    while (left && !c->closing && !c->linger) {
        if (c->raw_left) {
            size_t take = left < c->raw_left ? left : (size_t)c->raw_left;
            raw_piece(c, p, take);
            p += take;
            left -= take;
            if (!left && c->raw_left && !c->tls)
                raw_splice(c); /* the rest straight from the socket */
            continue;
        }
        size_t used;
        const uint8_t *frame;
        size_t flen;
        int r = cr_frame_dec_feed(&c->dec, p, left, &used, &frame, &flen);
        p += used;
        left -= used;
        if (r < 0) {
            char why[160];
            cr_warn("%s: bad frame: %s; closing the connection", c->peer,
                    cr_frame_dec_why(&c->dec, why, sizeof(why)));
            refuse_message(c, 0, "bad frame: %s", why);
            close_after_send(c, r);
            return false;
        }
        if (r == 1 && !handle_frame(c, frame, flen))
            return false;
    }
    return !c->closing && !c->linger;
}

/* The TLS handshake is done: a client now says Hello. */
static void tls_ready(cr_conn_t *c)
{
    c->tls_up = true;
    cr_debug("%s: %s", c->peer, c->net->tls->version(c->tls));
    if (!c->server) {
        cr_hs_start(c->hs);
        send_env(c, &c->hs->out);
    }
}

static bool tls_input_piece(cr_conn_t *c, const uint8_t *p, size_t n);

/* Ciphertext received, TLS_PIECE at a time: the handshake advanced, then
 * every whole record's plaintext through the frame decoder. Nothing is kept back: the memory
 * BIO holds at most an unfinished record after this. */
static void tls_input(cr_conn_t *c, const uint8_t *p, size_t n)
{
    while (n && !c->closing && !c->linger) {
        size_t piece = n < TLS_PIECE ? n : TLS_PIECE;
        if (!tls_input_piece(c, p, piece))
            return;
        p += piece;
        n -= piece;
    }
    if (!c->closing)
        tls_flush(c);
}

/* One piece of ciphertext; false when the connection is going away. */
static bool tls_input_piece(cr_conn_t *c, const uint8_t *p, size_t n)
{
    const cr_tls_ops_t *t = c->net->tls;
    char why[512];
    if (t->feed(c->tls, p, n) < 0) {
        cr_warn("%s: TLS: out of memory; closing the connection", c->peer);
        cr_conn_close(c, CR_ENOMEM);
        return false;
    }
    if (!c->tls_up) {
        int r = t->handshake(c->tls, why, sizeof(why));
        tls_flush(c); /* our next flight, or the alert that ends it */
        if (c->closing)
            return false;
        if (r == CR_TLS_ERR) {
            cr_warn("%s: %s; closing the connection", c->peer, why);
            set_why(c, "%.310s", why);
            cr_conn_close(c, -EPROTO);
            return false;
        }
        if (r == CR_TLS_WANT)
            return true;
        tls_ready(c);
        if (c->closing)
            return false;
    }
    for (;;) {
        long r = t->read(c->tls, c->net->pbuf, sizeof(c->net->pbuf), why, sizeof(why));
        if (r == CR_TLS_WANT)
            break;
        if (r == CR_TLS_EOF) { /* the peer's close_notify: as an orderly end of the stream */
            cr_conn_close(c, c->ready ? 0 : -ECONNRESET);
            return false;
        }
        if (r < 0) {
            cr_warn("%s: %s; closing the connection", c->peer, why);
            cr_conn_close(c, CR_EIO);
            return false;
        }
        if (!feed_plain(c, (const uint8_t *)c->net->pbuf, (size_t)r))
            return false;
    }
    return true;
}

/* A TLS listener got something that is not a TLS record: a plain corral
 * peer gets a plain Refused saying what to do, and the close. */
static void refuse_plain(cr_conn_t *c)
{
    c->net->tls->conn_free(c->tls);
    c->tls = NULL;
    cr_warn("refused %s: a plain (non-TLS) client on a TLS port; it must pin the head's "
            "certificate (--tls-fingerprint) or trust its CA (--tls-ca)",
            c->peer);
    Corral__Refused r = CORRAL__REFUSED__INIT;
    r.reason = CORRAL__REFUSE_REASON__REFUSE_AUTH; /* TLS proves the head: it is the auth */
    r.message =
        "this head takes TLS only: pin its certificate (--tls-fingerprint or "
        "CORRAL_TLS_FINGERPRINT, printed by corral start --head) or trust its CA (--tls-ca)";
    r.protocol_version = CR_PROTOCOL_VERSION;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_REFUSED;
    e.refused = &r;
    send_env(c, &e);
    close_after_send(c, CR_EACCES);
}

/* TLS records start with their content type: 22 for a handshake. A frame
 * of corral starts with the high byte of its length, 0 before the
 * handshake (CR_FRAME_MAX_HANDSHAKE). */
#define TLS_HANDSHAKE_RECORD 0x16

static void batch_policy(cr_conn_t *c, ssize_t nread);

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    cr_conn_t *c = s->data;
    if (nread < 0) {
        if (nread != UV_EOF)
            cr_warn("%s: read failed: %s; closing the connection", c->peer,
                    uv_strerror((int)nread));
        else if (c->tls && !c->tls_up && !c->server) {
            set_why(c, "the head closed the connection in the TLS handshake: does it listen with "
                       "TLS? (a head on a loopback address does not, unless started with --tls)");
            cr_warn("%s: %s", c->peer, c->why);
        } else if (!c->ready) /* probes and health checks do this: not worth a warning */
            cr_info("%s: closed during the handshake", c->peer);
        cr_conn_close(c, nread == UV_EOF ? (c->ready ? 0 : -ECONNRESET) : (int)nread);
        return;
    }
    const uint8_t *p = (const uint8_t *)buf->base;
    size_t left = (size_t)nread;
    if (!left)
        return;
    cr_net_t *n = c->net;
    if (!c->server && left == n->rwin && n->rwin < sizeof(n->rbuf) &&
        ++n->rwin_full >= CLIENT_GROW) { /* bulk: a larger window (alloc_cb) */
        n->rwin *= 2;
        n->rwin_full = 0;
    }
    if (!c->rx_any && c->server && !c->is_unix) {
        c->rx_any = true;
        if (c->tls && p[0] != TLS_HANDSHAKE_RECORD) {
            refuse_plain(c);
            return;
        }
        if (!c->tls && p[0] == TLS_HANDSHAKE_RECORD) {
            cr_warn("%s: a TLS client on a port without TLS (a head on a loopback address "
                    "listens without TLS unless started with --tls); closing the connection",
                    c->peer);
            cr_conn_close(c, CR_EPARSE);
            return;
        }
    }
    if (c->tls) {
        tls_input(c, p, left);
    } else if (feed_plain(c, p, left)) {
        raw_splice_more(c);
    }
    c->raw_spliced = false;
    batch_policy(c, nread);
}

/* ------------------------------------------------------- batched reads */

/* One read of a connection in the batch, handed to read_cb as libuv's
 * would be (read_cb's batch_policy may take it out of the batch). One is
 * enough: a read that fills the buffer is bulk, which leaves the batch and
 * libuv reads the rest. */
static ssize_t batch_read(cr_conn_t *c)
{
    uv_os_fd_t fd;
    if (uv_fileno(&c->u.h, &fd) < 0)
        return -EBADF;
    ssize_t r;
    do
        r = read(fd, c->net->rbuf, sizeof(c->net->rbuf));
    while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return -EAGAIN;
    uv_buf_t buf = uv_buf_init(c->net->rbuf, sizeof(c->net->rbuf));
    read_cb(&c->u.s, r > 0 ? r : r == 0 ? UV_EOF : -errno, &buf);
    return r;
}

static bool batch_readable(const cr_conn_t *c)
{
    return c->batched && !c->closing && !c->linger;
}

/* The k ready connections' receives in one io_uring call, each into its
 * slice of the read buffer, then each handed to read_cb in turn. One that
 * filled its slice may have more: it leaves the batch, and libuv reads
 * the rest (with the whole buffer) as it does a bulk sender's. False when
 * the ring failed (it is then dropped and nothing was received). */
static bool batch_recv_ring(batch_t *b, cr_conn_t **cs, unsigned k)
{
    int fds[BATCH_EVENTS], res[BATCH_EVENTS];
    uint8_t *base = (uint8_t *)b->net->rbuf;
    for (unsigned i = 0; i < k; i++) {
        uv_os_fd_t fd;
        fds[i] = uv_fileno(&cs[i]->u.h, &fd) == 0 ? fd : -1;
    }
    int err = cr_uring_recv_all(b->ring, k, fds, base, BATCH_SLICE, res);
    if (err < 0) {
        cr_warn("net: io_uring receive failed (%s); reading each connection by itself from now "
                "on",
                strerror(-err));
        cr_uring_free(b->ring);
        b->ring = NULL;
        return false;
    }
    b->ring_recvs += k;
    for (unsigned i = 0; i < k; i++) {
        cr_conn_t *c = cs[i];
        if (res[i] == -EAGAIN || res[i] == -EWOULDBLOCK || !batch_readable(c))
            continue; /* (a connection an earlier one closed: its bytes go with it) */
        uv_buf_t buf = uv_buf_init((char *)base + i * BATCH_SLICE, BATCH_SLICE);
        read_cb(&c->u.s, res[i] > 0 ? res[i] : res[i] == 0 ? UV_EOF : res[i], &buf);
        if (res[i] == (int)BATCH_SLICE && batch_readable(c))
            batch_leave(c);
    }
    return true;
}

/* Reads every connection of the batch that has something; how many. A
 * connection closed or taken out of the batch by an earlier one's message
 * in the same call is skipped (its memory lives until its close callbacks,
 * which run after this turn's callbacks). */
static size_t batch_drain(batch_t *b)
{
    struct epoll_event ev[BATCH_EVENTS];
    cr_conn_t *cs[BATCH_EVENTS];
    bool ends[BATCH_EVENTS];
    size_t done = 0;
    int k;
    do {
        do
            k = epoll_wait(b->epfd, ev, BATCH_EVENTS, 0);
        while (k < 0 && errno == EINTR);
        unsigned m = 0;
        for (int i = 0; i < k; i++) {
            cr_conn_t *c = ev[i].data.ptr;
            if (!batch_readable(c))
                continue;
            ends[m] = ev[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
            cs[m++] = c;
        }
        done += m;
        if (!(m > 1 && b->ring && batch_recv_ring(b, cs, m)))
            for (unsigned i = 0; i < m; i++)
                if (batch_readable(cs[i]))
                    batch_read(cs[i]);
        /* the peer closed (or failed) in the same edge as its last bytes:
         * no edge comes after, so read on to the end of the stream now */
        for (unsigned i = 0; i < m; i++)
            while (ends[i] && batch_readable(cs[i]) && batch_read(cs[i]) > 0)
                ;
    } while (k == BATCH_EVENTS && b->net->batch);
    b->turns++;
    return done;
}

static void batch_ready(uv_poll_t *p, int status, int events);

/* Whether the loop's epoll set reports the batch's set readable. Not
 * uv_poll_stop and uv_poll_start: libuv adds the descriptor to its set
 * again on each start, and adding an epoll set to another makes the
 * kernel walk every item of the inner one looking for loops (about 0.36 ms
 * at 10,000 connections). A modification is not checked so; libuv leaves
 * the registration of a started watcher as it is, and removes it when the
 * handle closes. */
static void batch_watch(batch_t *b, bool on)
{
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.fd = b->epfd};
    b->pausing = !on;
    if (epoll_ctl(uv_backend_fd(b->net->loop), EPOLL_CTL_MOD, b->epfd, &ev) == 0)
        return;
    if (!on) {
        b->watch_failed = true; /* then the set wakes the loop in the pause too, harmlessly */
    } else {                    /* libuv's registration is gone: have it add the set again */
        uv_poll_stop(&b->poll);
        uv_poll_start(&b->poll, UV_READABLE, batch_ready);
    }
}

/* The pause is over: what came meanwhile is read, and the set watched
 * again once a pause brought nothing. */
static void batch_pause_end(uv_timer_t *t)
{
    batch_t *b = t->data;
    if (batch_drain(b) && b->net->batch == b)
        uv_timer_start(&b->timer, batch_pause_end, b->net->batch_ms, 0);
    else if (b->net->batch == b)
        batch_watch(b, true);
}

/* A connection in the set has something: read them all now, then pause. */
static void batch_ready(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    batch_t *b = p->data;
    if (b->pausing && !b->watch_failed)
        return;
    batch_drain(b);
    if (b->net->batch != b || b->pausing)
        return; /* the net closed meanwhile */
    batch_watch(b, false);
    uv_timer_start(&b->timer, batch_pause_end, b->net->batch_ms, 0);
}

/* The net's batch, made on first use; NULL (said) when it cannot be. */
static batch_t *batch_get(cr_net_t *n)
{
    if (n->batch)
        return n->batch;
    int fd = epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) {
        cr_warn("net: cannot make an epoll set for batched reads (%s); reading every "
                "connection at once",
                strerror(errno));
        n->batch_ms = 0;
        return NULL;
    }
    batch_t *b = cr_calloc(1, sizeof(*b));
    if (uv_poll_init(n->loop, &b->poll, fd) < 0) {
        cr_warn("net: cannot watch the epoll set for batched reads; reading every connection "
                "at once");
        close(fd);
        free(b);
        n->batch_ms = 0;
        return NULL;
    }
    uv_timer_init(n->loop, &b->timer);
    b->ring = cr_uring_new(BATCH_EVENTS);
    if (!b->ring)
        cr_info("net: no io_uring (%s): the batch's connections are read one system call each",
                strerror(errno));
    b->poll.data = b->timer.data = b;
    b->net = n;
    b->epfd = fd;
    b->open_handles = 2;
    /* neither keeps the loop running: the connections' handles do */
    uv_unref((uv_handle_t *)&b->poll);
    uv_unref((uv_handle_t *)&b->timer);
    uv_poll_start(&b->poll, UV_READABLE, batch_ready);
    n->live++;
    n->batch = b;
    return b;
}

/* c is read in batches from now on; as before when that fails. */
static void batch_join(cr_conn_t *c)
{
    batch_t *b = batch_get(c->net);
    uv_os_fd_t fd;
    if (!b || uv_fileno(&c->u.h, &fd) < 0)
        return;
    /* edge-triggered: a read shorter than the buffer emptied the socket
     * (as libuv takes it too), and whatever comes after is a new edge; a
     * level-triggered item would be polled again by the next drain */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
    if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        return;
    uv_read_stop(&c->u.s);
    c->batched = true;
    b->conns++;
    /* its beats come whole: no copy buffer kept (a Register split over
     * the batch's 4 KiB slices left one of the node description's size) */
    cr_frame_dec_trim(&c->dec);
}

/* c is read at once again (bulk, or closing). */
static void batch_leave(cr_conn_t *c)
{
    if (!c->batched)
        return;
    batch_t *b = c->net->batch;
    uv_os_fd_t fd;
    c->batched = false;
    if (!b)
        return;
    b->conns--;
    if (uv_fileno(&c->u.h, &fd) == 0)
        epoll_ctl(b->epfd, EPOLL_CTL_DEL, fd, NULL);
    if (!c->closing && !c->linger) /* a lingering one reads nothing more (close_after_send) */
        uv_read_start(&c->u.s, alloc_cb, read_cb);
}

/* After each read of a connection: an agent's connection that reads
 * little joins the batch, one that reads bulk (or is amid a raw chunk,
 * which splice moves at the socket's pace) leaves it. */
static void batch_policy(cr_conn_t *c, ssize_t nread)
{
    if (!c->net->batch_ms || c->closing || c->linger || !c->ready)
        return;
    bool small = nread < BATCH_BULK && !c->raw_left;
    if (c->batched && !small)
        batch_leave(c);
    else if (c->batched)
        cr_frame_dec_trim(&c->dec); /* a frame split over two reads: its copy not kept */
    else if (!c->batched && small && c->server && c->kept.role == CORRAL__ROLE__ROLE_AGENT &&
             !c->net->closing)
        batch_join(c);
}

void cr_net_batch_stats(const cr_net_t *n, size_t *conns, uint64_t *batches, uint64_t *ring_recvs)
{
    *conns = n->batch ? n->batch->conns : 0;
    *batches = n->batch ? n->batch->turns : 0;
    *ring_recvs = n->batch ? n->batch->ring_recvs : 0;
}

static void handshake_expired(uv_timer_t *t)
{
    cr_conn_t *c = t->data;
    cr_warn("%s: handshake not finished within %u ms; closing the connection", c->peer,
            c->net->hs_timeout_ms);
    cr_conn_close(c, -ETIMEDOUT);
}

/* A new connection object with its two handles initialized and linked in. */
static cr_conn_t *conn_new(cr_net_t *n, bool is_unix, bool server)
{
    cr_conn_t *c = cr_calloc(1, sizeof(*c));
    c->hs = cr_calloc(1, sizeof(*c->hs));
    c->net = n;
    c->is_unix = is_unix;
    c->server = server;
    int err = is_unix ? uv_pipe_init(n->loop, &c->u.pipe, 0) : uv_tcp_init(n->loop, &c->u.tcp);
    if (err) {
        free(c->hs);
        free(c);
        return NULL;
    }
    uv_timer_init(n->loop, &c->timer);
    c->u.h.data = c;
    c->timer.data = c;
    c->open_handles = 2;
    c->raw_out = -1;
    cr_frame_dec_init(&c->dec, CR_FRAME_MAX_HANDSHAKE); /* until the handshake is done */
    c->next = n->conns;
    if (c->next)
        c->next->pprev = &c->next;
    c->pprev = &n->conns;
    n->conns = c;
    n->live++;
    return c;
}

/* The handshake deadline: from accept on a server, from the connect call
 * on a client (a peer that never answers the SYN counts too). */
static void start_deadline(cr_conn_t *c)
{
    uv_timer_start(&c->timer, handshake_expired, c->net->hs_timeout_ms, 0);
}

/* A connection reads from here on. Over TCP without Nagle's wait: every
 * write is a whole message (or the rest of one), and a small one held
 * until the peer acknowledges the last meets the peer's delayed
 * acknowledgement, 40 ms here (an agent's worker exit right after its
 * start waited so, in every remote job). */
static int conn_start(cr_conn_t *c)
{
    if (!c->is_unix)
        uv_tcp_nodelay(&c->u.tcp, 1);
    return uv_read_start(&c->u.s, alloc_cb, read_cb);
}

/* ---------------------------------------------------------------- servers */

static void describe_tcp_peer(cr_conn_t *c)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getpeername(&c->u.tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            uv_ip4_name(a, ip, sizeof(ip));
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            uv_ip6_name(a, ip, sizeof(ip));
            port = ntohs(a->sin6_port);
        }
    }
    snprintf(c->peer, sizeof(c->peer), "%s%s%s:%d", ss.ss_family == AF_INET6 ? "[" : "", ip,
             ss.ss_family == AF_INET6 ? "]" : "", port);
    snprintf(c->peer_key, sizeof(c->peer_key), "%s", ip);
}

/* A Unix peer by socket and the process behind it, which the kernel vouches
 * for: "unix:/run/corral/head.sock#3 (pid 4242, uid 1000)". */
static void describe_unix_peer(cr_conn_t *c, const cr_listener_t *l)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;
    if (uv_fileno(&c->u.h, &fd) == 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        snprintf(c->peer, sizeof(c->peer), "unix:%s#%u (pid %ld, uid %ld)", l->unix_path,
                 l->accepted, (long)cred.pid, (long)cred.uid);
        snprintf(c->peer_key, sizeof(c->peer_key), "uid:%ld", (long)cred.uid);
    } else {
        snprintf(c->peer, sizeof(c->peer), "unix:%s#%u", l->unix_path, l->accepted);
        snprintf(c->peer_key, sizeof(c->peer_key), "unix");
    }
}

/* Whether one more connection that has not proved the token fits under
 * the caps, in all and from c's peer. Counted on every accept: the
 * connections are few before the handshake, and a held one is ready. */
static bool unauth_fits(const cr_net_t *n, const cr_conn_t *c)
{
    uint32_t all = 0, peer = 0;
    for (const cr_conn_t *o = n->conns; o; o = o->next) {
        if (o == c || !o->server || o->ready || o->closing)
            continue;
        all++;
        if (strcmp(o->peer_key, c->peer_key) == 0)
            peer++;
    }
    return all < n->max_unauth && peer < n->max_unauth_per_peer;
}

static void on_connection(uv_stream_t *server, int status)
{
    cr_listener_t *l = server->data;
    cr_net_t *n = l->net;
    if (status < 0) {
        cr_warn("accept failed: %s", uv_strerror(status));
        return;
    }
    cr_conn_t *c = conn_new(n, l->is_unix, true);
    if (!c)
        return;
    int err = uv_accept(server, &c->u.s);
    if (err) {
        cr_warn("accept failed: %s", uv_strerror(err));
        cr_conn_close(c, err);
        return;
    }
    l->accepted++;
    if (l->is_unix)
        describe_unix_peer(c, l);
    else
        describe_tcp_peer(c);
    if (!unauth_fits(n, c)) {
        /* said once per power of two, not once per connection: a flood
         * must not fill the log (docs/protocol.md "Limits") */
        uint64_t k = ++n->unauth_refused;
        if ((k & (k - 1)) == 0)
            cr_warn("%s: closed at accept: too many connections still in the handshake (%u in "
                    "all, %u per peer; %llu closed so far)",
                    c->peer, n->max_unauth, n->max_unauth_per_peer,
                    (unsigned long long)n->unauth_refused);
        cr_conn_close(c, -ECONNREFUSED);
        return;
    }
    uint8_t nonce[CR_NONCE_LEN];
    if (cr_random_bytes(nonce, sizeof(nonce)) < 0) {
        cr_error("%s: no random bytes for the challenge; closing the connection", c->peer);
        cr_conn_close(c, CR_EIO);
        return;
    }
    cr_hs_init_server(c->hs, n->token, nonce, n->accept_roles, n->name, n->max_frame);
    c->hs->features = n->features;
    if (l->tls && !(c->tls = n->tls->conn_new(n->tls_server, true, NULL))) {
        cr_warn("%s: TLS: out of memory; closing the connection", c->peer);
        cr_conn_close(c, CR_ENOMEM);
        return;
    }
    if ((err = conn_start(c)) < 0) {
        cr_conn_close(c, err);
        return;
    }
    start_deadline(c);
}

static cr_listener_t *listener_new(cr_net_t *n, bool is_unix)
{
    cr_listener_t *l = cr_calloc(1, sizeof(*l));
    l->net = n;
    l->is_unix = is_unix;
    int err = is_unix ? uv_pipe_init(n->loop, &l->u.pipe, 0) : uv_tcp_init(n->loop, &l->u.tcp);
    if (err) {
        free(l);
        return NULL;
    }
    l->u.h.data = l;
    l->next = n->listeners;
    if (l->next)
        l->next->pprev = &l->next;
    l->pprev = &n->listeners;
    n->listeners = l;
    n->live++;
    return l;
}

/* Unlinks a listener that failed to start and closes it. */
static void listener_abandon(cr_listener_t *l)
{
    *l->pprev = l->next;
    if (l->next)
        l->next->pprev = l->pprev;
    uv_close(&l->u.h, listener_closed);
}

int cr_net_listen_unix(cr_net_t *n, const char *path)
{
    if (n->closing)
        return -ESHUTDOWN;
    struct stat st;
    /* a socket left by a previous daemon is replaced; anything else is not ours */
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            cr_warn("%s exists and is not a socket; remove it or choose another path", path);
            return -EEXIST;
        }
        unlink(path);
    }
    cr_listener_t *l = listener_new(n, true);
    if (!l)
        return CR_ENOMEM;
    int err;
    if ((err = uv_pipe_bind(&l->u.pipe, path)) < 0) {
        cr_warn("cannot bind the Unix socket %s: %s", path, uv_strerror(err));
        goto out_abandon;
    }
    l->unix_path = cr_strdup(path);
    /* before listen(): nobody can connect yet, so nobody slips in before
     * the mode is set */
    if (chmod(path, 0600) < 0) {
        err = -errno;
        cr_warn("cannot chmod the Unix socket %s: %s", path, strerror(errno));
        goto out_abandon;
    }
    if ((err = uv_listen(&l->u.s, 128, on_connection)) < 0) {
        cr_warn("cannot listen on %s: %s", path, uv_strerror(err));
        goto out_abandon;
    }
    return 0;
out_abandon:
    listener_abandon(l);
    return err;
}

/* Parses a numeric IPv4 or IPv6 address ("localhost" is 127.0.0.1). */
static int parse_ip(const char *host, int port, struct sockaddr_storage *ss)
{
    if (strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
        return 0;
    if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    return CR_EINVAL;
}

int cr_net_listen_tcp(cr_net_t *n, const char *host, int port, int *bound)
{
    return cr_net_listen_tcp_tls(n, host, port, bound, false);
}

int cr_net_listen_tcp_tls(cr_net_t *n, const char *host, int port, int *bound, bool tls)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (tls && !n->tls_server) {
        cr_warn("cannot listen with TLS: the transport was set up without a certificate");
        return CR_EINVAL;
    }
    if (!host)
        host = "127.0.0.1";
    struct sockaddr_storage ss;
    if (port < 0 || port > 65535 || parse_ip(host, port, &ss) < 0) {
        cr_warn("cannot listen on %s:%d: expected a numeric IP address and a port 0-65535", host,
                port);
        return CR_EINVAL;
    }
    cr_listener_t *l = listener_new(n, false);
    if (!l)
        return CR_ENOMEM;
    l->tls = tls;
    int err;
    if ((err = uv_tcp_bind(&l->u.tcp, (struct sockaddr *)&ss, 0)) < 0 ||
        (err = uv_listen(&l->u.s, 511, on_connection)) < 0) {
        cr_warn("cannot listen on %s:%d: %s", host, port, uv_strerror(err));
        goto out_abandon;
    }
    if (bound) {
        struct sockaddr_storage me;
        int len = sizeof(me);
        if ((err = uv_tcp_getsockname(&l->u.tcp, (struct sockaddr *)&me, &len)) < 0)
            goto out_abandon;
        *bound = ntohs(me.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&me)->sin6_port
                                                : ((struct sockaddr_in *)&me)->sin_port);
    }
    return 0;
out_abandon:
    listener_abandon(l);
    return err;
}

/* ---------------------------------------------------------------- clients */

static void connected(uv_connect_t *req, int status)
{
    cr_conn_t *c = req->data;
    if (c->closing)
        return;
    if (status < 0) {
        cr_warn("cannot connect to %s: %s", c->peer, uv_strerror(status));
        cr_conn_close(c, status);
        return;
    }
    int err = conn_start(c);
    if (err) {
        cr_conn_close(c, err);
        return;
    }
    if (c->tls) { /* the ClientHello; our Hello once the head is known */
        char why[512];
        int r = c->net->tls->handshake(c->tls, why, sizeof(why));
        tls_flush(c);
        if (r == CR_TLS_ERR && !c->closing) {
            cr_warn("%s: %s", c->peer, why);
            set_why(c, "%.310s", why);
            cr_conn_close(c, -EPROTO);
        }
        return;
    }
    cr_hs_start(c->hs);
    send_env(c, &c->hs->out);
}

/* libuv's resolver errors (UV_EAI_*) sit in the range corral keeps for its
 * own codes; a failed lookup is reported as an unreachable host. */
static int lookup_err(int err)
{
    return err <= -3000 && err > -3100 ? -EHOSTUNREACH : err;
}

/* A host name was looked up: connect to its first IPv4 address (heads
 * listen on IPv4 by default), else its first address. */
static void resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    cr_conn_t *c = req->data;
    c->resolving = false;
    if (!c->closing) {
        const struct addrinfo *pick = NULL;
        for (const struct addrinfo *a = res; a && !pick; a = a->ai_next)
            if (a->ai_family == AF_INET)
                pick = a;
        if (!pick)
            pick = res;
        int err = status;
        if (!err && !pick)
            err = UV_EAI_NONAME;
        if (!err)
            err = uv_tcp_connect(&c->connect_req, &c->u.tcp, pick->ai_addr, connected);
        if (err) {
            cr_warn("cannot connect to %s: %s", c->peer, uv_strerror(err));
            cr_conn_close(c, lookup_err(err));
        }
    }
    uv_freeaddrinfo(res);
    conn_release(c);
}

int cr_net_connect(cr_net_t *n, const char *address, Corral__Role role, cr_conn_t **out)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (role != CORRAL__ROLE__ROLE_CLIENT && role != CORRAL__ROLE__ROLE_AGENT)
        return CR_EINVAL;
    const char *path = NULL;
    if (cr_str_has_prefix(address, "unix:"))
        path = address + 5;
    else if (address[0] == '/' || address[0] == '.')
        path = address;
    struct sockaddr_storage ss;
    char host[256];
    int64_t port = 0;
    bool resolve = false;
    if (!path) {
        /* host:port, [v6]:port */
        const char *colon = strrchr(address, ':'), *h = address;
        size_t hl = colon ? (size_t)(colon - address) : 0;
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
            h++;
            hl -= 2;
        }
        if (!colon || hl == 0 || hl >= sizeof(host) || cr_parse_i64(colon + 1, 10, &port) < 0 ||
            port <= 0 || port > 65535) {
            cr_warn("cannot connect to \"%s\": expected unix:/path or host:port", address);
            return CR_EINVAL;
        }
        memcpy(host, h, hl);
        host[hl] = '\0';
        if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&ss) != 0 &&
            uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&ss) != 0) {
            if (strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") !=
                hl) {
                cr_warn("cannot connect to \"%s\": \"%s\" is neither an IP address nor a host "
                        "name",
                        address, host);
                return CR_EINVAL;
            }
            resolve = true;
        }
    }
    cr_conn_t *c = conn_new(n, path != NULL, false);
    if (!c)
        return CR_ENOMEM;
    snprintf(c->peer, sizeof(c->peer), "%s%s", path ? "unix:" : "", path ? path : address);
    uint8_t nonce[CR_NONCE_LEN];
    if (cr_random_bytes(nonce, sizeof(nonce)) < 0) {
        cr_conn_close(c, CR_EIO);
        return CR_EIO;
    }
    cr_hs_init_client(c->hs, n->token, nonce, role, n->name);
    c->hs->features = n->features;
    c->kept.role = role;
    if (!path && n->tls_client && !(c->tls = n->tls->conn_new(n->tls_client, false, host))) {
        cr_conn_close(c, CR_ENOMEM);
        return CR_ENOMEM;
    }
    c->hs->job = n->job;
    c->hs->scope = n->scope;
    c->announced = true; /* the caller holds it: on_close is owed */
    c->connect_req.data = c;
    if (path) {
        uv_pipe_connect(&c->connect_req, &c->u.pipe, path, connected);
    } else if (resolve) {
        char service[8];
        snprintf(service, sizeof(service), "%d", (int)port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        c->gai.data = c;
        int err = uv_getaddrinfo(n->loop, &c->gai, resolved, host, service, &hints);
        if (err) {
            c->announced = false;
            cr_warn("cannot look up %s: %s", host, uv_strerror(err));
            cr_conn_close(c, lookup_err(err));
            return lookup_err(err);
        }
        c->resolving = true;
        c->open_handles++;
    } else {
        int err = uv_tcp_connect(&c->connect_req, &c->u.tcp, (struct sockaddr *)&ss, connected);
        if (err) {
            /* a function that fails never calls its callback */
            c->announced = false;
            cr_warn("cannot connect to %s: %s", c->peer, uv_strerror(err));
            cr_conn_close(c, err);
            return err;
        }
    }
    start_deadline(c);
    if (out)
        *out = c;
    return 0;
}

/* -------------------------------------------------------------- accessors */

size_t cr_net_max_frame(const cr_net_t *n)
{
    return n->max_frame;
}

const char *cr_conn_peer(const cr_conn_t *c)
{
    return c->peer;
}

const char *cr_conn_why(const cr_conn_t *c)
{
    return c->why ? c->why : "";
}

const char *cr_conn_tls(const cr_conn_t *c)
{
    return c->tls && c->tls_up ? c->net->tls->version(c->tls) : NULL;
}

static int ip_of(const cr_conn_t *c, bool peer, char *buf, size_t size)
{
    if (c->is_unix)
        return -ENOTSUP;
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    int err = peer ? uv_tcp_getpeername(&c->u.tcp, (struct sockaddr *)&ss, &len)
                   : uv_tcp_getsockname(&c->u.tcp, (struct sockaddr *)&ss, &len);
    if (err < 0)
        return err;
    if (ss.ss_family == AF_INET)
        return uv_ip4_name((struct sockaddr_in *)&ss, buf, size);
    if (ss.ss_family == AF_INET6)
        return uv_ip6_name((struct sockaddr_in6 *)&ss, buf, size);
    return -EAFNOSUPPORT;
}

int cr_conn_peer_ip(const cr_conn_t *c, char *buf, size_t size)
{
    return ip_of(c, true, buf, size);
}

int cr_conn_local_ip(const cr_conn_t *c, char *buf, size_t size)
{
    return ip_of(c, false, buf, size);
}

Corral__Role cr_conn_role(const cr_conn_t *c)
{
    return !c->server ? CORRAL__ROLE__ROLE_HEAD : c->hs ? c->hs->role : c->kept.role;
}

bool cr_conn_is_ready(const cr_conn_t *c)
{
    return c->ready && !c->closing;
}

const cr_job_scope_t *cr_conn_job_scope(const cr_conn_t *c)
{
    return c->server && c->kept.done && c->kept.job ? &c->kept.scope : NULL;
}

void cr_net_job_credential(const cr_net_t *n, const cr_job_scope_t *s, uint8_t out[CR_TOKEN_LEN])
{
    cr_job_credential(n->token, s, out);
}

void cr_conn_set_data(cr_conn_t *c, void *data)
{
    c->data = data;
}

void *cr_conn_data(const cr_conn_t *c)
{
    return c->data;
}

uint64_t cr_conn_next_id(cr_conn_t *c)
{
    return ++c->last_id;
}

int cr_conn_reply_error(cr_conn_t *c, uint64_t reply_to, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    Corral__Error err = CORRAL__ERROR__INIT;
    err.code = code < 0 ? code : CR_EINVAL;
    err.message = msg;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.reply_to = reply_to;
    e.body_case = CORRAL__ENVELOPE__BODY_ERROR;
    e.error = &err;
    return cr_conn_send(c, &e);
}

cr_conn_t *cr_conn_new_detached(Corral__Role role,
                                void (*sink)(void *arg, const Corral__Envelope *e), void *arg)
{
    static unsigned seq;
    cr_conn_t *c = cr_calloc(1, sizeof(*c));
    c->detached = true;
    c->raw_out = -1;
    c->server = true; /* our side serves the peer: sends are the head's */
    c->ready = true;
    c->announced = true;
    c->kept.role = role;
    c->kept.done = true;
    c->sink = sink;
    c->sink_arg = arg;
    snprintf(c->peer, sizeof(c->peer), "detached:%s#%u", cr_role_name(role), ++seq);
    return c;
}

void cr_conn_free_detached(cr_conn_t *c)
{
    if (c && c->detached)
        free(c);
}

size_t cr_conn_queued(const cr_conn_t *c)
{
    return c->queued;
}

int cr_conn_set_send_buffer(cr_conn_t *c, int bytes)
{
    if (c->detached || c->closing || c->resolving)
        return 0;
    int have = 0;
    int err = uv_send_buffer_size(&c->u.h, &have);
    if (err == 0 && have >= bytes)
        return 0;
    return uv_send_buffer_size(&c->u.h, &bytes);
}
