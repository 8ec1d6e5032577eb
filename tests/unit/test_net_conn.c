/* net/conn.c over real sockets on one loop: handshakes that pass and fail,
 * round trips, and peers that misbehave being dropped while a well-behaved
 * peer of the same server carries on. Every test ends with the loop closed
 * cleanly (no handle left behind). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "net/net.h"
#include "net/uring.h"
#include <corral/accel.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static char dir[] = "/tmp/corral-conn-XXXXXX";
static char logpath[600], sockpath[600];
static const uint8_t token[CR_TOKEN_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const uint8_t wrong_token[CR_TOKEN_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

typedef struct side {
    int ready, closed, msgs;
    int close_err;
    Corral__Role role;
    Corral__Envelope__BodyCase body;
    uint64_t reply_to;
    char text[256];
    cr_conn_t *last;
} side_t;

typedef struct world {
    uv_loop_t loop;
    cr_net_t *server, *client;
    side_t sv, cl;
    int nets_done;
    int tcp_port;
} world_t;

static world_t *W;
static void net_done(void *data);

/* ---- the server: answers a few requests like a head would ---- */

static void sv_ready(cr_conn_t *c, void *data)
{
    side_t *s = data;
    s->ready++;
    s->role = cr_conn_role(c);
    s->last = c;
}

static void reply(cr_conn_t *c, const Corral__Envelope *req, Corral__Envelope *ans)
{
    ans->reply_to = req->id;
    assert_int_equal(cr_conn_send(c, ans), 0);
}

/* Sends the next log chunks of a paced stream while little is queued. */
static void send_paced(cr_conn_t *c)
{
    static uint8_t chunk[64 * 1024];
    intptr_t left = (intptr_t)cr_conn_data(c);
    while (left > 0 && cr_conn_queued(c) < 128 * 1024) {
        Corral__LogChunk r = CORRAL__LOG_CHUNK__INIT;
        r.job_id = "paced";
        r.offset = (uint64_t)(64 - left) * sizeof(chunk);
        r.data.data = chunk;
        r.data.len = sizeof(chunk);
        r.eof = left == 1;
        Corral__Envelope a = CORRAL__ENVELOPE__INIT;
        a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
        a.log_chunk = &r;
        assert_int_equal(cr_conn_send(c, &a), 0);
        left--;
    }
    cr_conn_set_data(c, (void *)left);
}

/* A file of RAW_CHUNKS chunks of 64 KiB whose byte at i is raw_byte(i),
 * sent by cr_conn_send_log_file (raw where the peer takes it) while little
 * is queued, the rest from the drain. */
#define RAW_CHUNKS 64
static int raw_fd = -1;
static uint8_t raw_byte(uint64_t i)
{
    return (uint8_t)(i * 7 + i / 65536);
}

static void send_raw_paced(cr_conn_t *c)
{
    intptr_t left = -(intptr_t)cr_conn_data(c);
    while (left > 0 && cr_conn_queued(c) < 128 * 1024) {
        Corral__LogChunk r = CORRAL__LOG_CHUNK__INIT;
        r.job_id = "raw";
        r.offset = (uint64_t)(RAW_CHUNKS - left) * 65536;
        Corral__Envelope a = CORRAL__ENVELOPE__INIT;
        a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
        a.log_chunk = &r;
        size_t copied;
        assert_int_equal(cr_conn_send_log_file(c, &a, raw_fd, r.offset, 65536, true, &copied), 0);
        assert_null(r.data.data); /* left as it was */
        left--;
    }
    cr_conn_set_data(c, (void *)-left);
}

/* The same RAW_CHUNKS chunks from memory by cr_conn_send_log_bytes while
 * under 128 KiB are queued (the test server's bound is 256), the rest
 * from the drain: the first go
 * straight from the buffer, those sent once the socket is full are
 * copied into the queue. The buffer is overwritten after each send:
 * nothing may still point into it. mem_copied: bytes copied into the
 * queue, mem_first_copied: of the first chunk; mem_next: the next chunk
 * (RAW_CHUNKS: none left). */
static uint64_t mem_copied, mem_first_copied, mem_next = RAW_CHUNKS;
static void send_raw_memory(cr_conn_t *c)
{
    static uint8_t buf[65536];
    for (; mem_next < RAW_CHUNKS && cr_conn_queued(c) < 128 * 1024; mem_next++) {
        uint64_t k = mem_next;
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = raw_byte(k * sizeof(buf) + i);
        Corral__LogChunk r = CORRAL__LOG_CHUNK__INIT;
        r.job_id = "raw";
        r.offset = k * sizeof(buf);
        Corral__Envelope a = CORRAL__ENVELOPE__INIT;
        a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
        a.log_chunk = &r;
        size_t copied;
        assert_int_equal(cr_conn_send_log_bytes(c, &a, buf, sizeof(buf), &copied), 0);
        assert_null(r.data.data);
        assert_int_equal(r.raw_len, 0);
        if (k == 0)
            mem_first_copied = copied;
        mem_copied += copied;
        memset(buf, 0xee, sizeof(buf));
    }
}

static void sv_drain(cr_conn_t *c, void *data)
{
    if (mem_next < RAW_CHUNKS) {
        send_raw_memory(c);
        return;
    }
    if ((intptr_t)cr_conn_data(c) > 0)
        send_paced(c);
    else if ((intptr_t)cr_conn_data(c) < 0)
        send_raw_paced(c);
}

static void sv_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    side_t *s = data;
    s->msgs++;
    s->body = e->body_case;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    char buf[256];
    switch (e->body_case) {
    case CORRAL__ENVELOPE__BODY_REGISTER: {
        Corral__Registered r = CORRAL__REGISTERED__INIT;
        r.node_id = "n1";
        r.incarnation = e->register_->incarnation;
        r.heartbeat_ms = 1000;
        a.body_case = CORRAL__ENVELOPE__BODY_REGISTERED;
        a.registered = &r;
        reply(c, e, &a);
        break;
    }
    case CORRAL__ENVELOPE__BODY_HEARTBEAT: {
        /* test_agent_reads_batched's last beats go unanswered: the close
         * right behind them must be seen by reading, not by a failed write */
        if (e->heartbeat->seq >= 20000 && e->heartbeat->seq < 30000)
            break;
        Corral__HeartbeatAck r = CORRAL__HEARTBEAT_ACK__INIT;
        r.seq = e->heartbeat->seq;
        a.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT_ACK;
        a.heartbeat_ack = &r;
        reply(c, e, &a);
        break;
    }
    case CORRAL__ENVELOPE__BODY_JOB_SUBMIT: {
        Corral__JobSubmitted r = CORRAL__JOB_SUBMITTED__INIT;
        snprintf(buf, sizeof(buf), "job-%s-%u", e->job_submit->spec->worker->argv[0],
                 e->job_submit->spec->num_workers);
        r.job_id = buf;
        a.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMITTED;
        a.job_submitted = &r;
        reply(c, e, &a);
        break;
    }
    case CORRAL__ENVELOPE__BODY_PG_REMOVE:
        assert_int_equal(cr_conn_reply_error(c, e->id, CR_ENOENT, "no placement group named %s",
                                             e->pg_remove->name),
                         0);
        break;
    case CORRAL__ENVELOPE__BODY_JOB_LOGS: {
        /* far more output than a peer that never reads can take */
        static uint8_t chunk[64 * 1024];
        Corral__LogChunk r = CORRAL__LOG_CHUNK__INIT;
        r.job_id = e->job_logs->job_id;
        r.data.data = chunk;
        r.data.len = sizeof(chunk);
        a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
        a.log_chunk = &r;
        if (e->job_logs->worker_index == 3) { /* from memory, the rest from the drain */
            mem_next = 0;
            mem_copied = 0;
            send_raw_memory(c);
            break;
        }
        if (e->job_logs->worker_index == 2) { /* from raw_fd, raw where it can */
            cr_conn_set_data(c, (void *)(intptr_t)-RAW_CHUNKS);
            send_raw_paced(c);
            break;
        }
        if (e->job_logs->worker_index == 0) {
            /* paced: a bit at a time, the rest from on_drain */
            cr_conn_set_data(c, (void *)(intptr_t)64);
            send_paced(c);
            break;
        }
        for (int i = 0; i < 64 && cr_conn_is_ready(c); i++) {
            r.offset = (uint64_t)i * sizeof(chunk);
            int err = cr_conn_send(c, &a);
            assert_true(err == 0 || err == -ENOBUFS);
        }
        break;
    }
    case CORRAL__ENVELOPE__BODY_SHUTDOWN: {
        /* closing everything from inside a callback is allowed */
        Corral__Ack ack = CORRAL__ACK__INIT;
        a.body_case = CORRAL__ENVELOPE__BODY_ACK;
        a.ack = &ack;
        reply(c, e, &a);
        cr_net_close(W->server, net_done, NULL);
        break;
    }
    default:
        break;
    }
}

static void sv_close(cr_conn_t *c, int err, void *data)
{
    side_t *s = data;
    s->closed++;
    s->close_err = err;
}

/* ---- the client: records what came back ---- */

static uint64_t raw_got;          /* bytes of the "raw" stream received in order */
static uint64_t raw_got_at_error; /* raw_got when the last Error arrived */

static void cl_ready(cr_conn_t *c, void *data)
{
    side_t *s = data;
    s->ready++;
    s->role = cr_conn_role(c);
}

static void cl_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    side_t *s = data;
    s->msgs++;
    s->body = e->body_case;
    s->reply_to = e->reply_to;
    s->text[0] = '\0';
    if (e->body_case == CORRAL__ENVELOPE__BODY_JOB_SUBMITTED)
        snprintf(s->text, sizeof(s->text), "%s", e->job_submitted->job_id);
    else if (e->body_case == CORRAL__ENVELOPE__BODY_REGISTERED)
        snprintf(s->text, sizeof(s->text), "%s/%llu", e->registered->node_id,
                 (unsigned long long)e->registered->incarnation);
    else if (e->body_case == CORRAL__ENVELOPE__BODY_HEARTBEAT_ACK)
        snprintf(s->text, sizeof(s->text), "ack %llu", (unsigned long long)e->heartbeat_ack->seq);
    else if (e->body_case == CORRAL__ENVELOPE__BODY_ERROR) {
        snprintf(s->text, sizeof(s->text), "%d %s", e->error->code, e->error->message);
        raw_got_at_error = raw_got;
    } else if (e->body_case == CORRAL__ENVELOPE__BODY_LOG_CHUNK &&
               strcmp(e->log_chunk->job_id, "raw") == 0) {
        /* in order, whole, each byte where the file has it */
        const Corral__LogChunk *l = e->log_chunk;
        assert_int_equal(l->offset, raw_got);
        assert_int_equal(l->raw_len, 0);
        for (size_t i = 0; i < l->data.len; i++)
            if (l->data.data[i] != raw_byte(l->offset + i))
                fail_msg("byte %llu of the raw stream is wrong",
                         (unsigned long long)(l->offset + i));
        raw_got += l->data.len;
    }
}

static void cl_close(cr_conn_t *c, int err, void *data)
{
    side_t *s = data;
    s->closed++;
    s->close_err = err;
}

static const cr_net_callbacks_t sv_cb = {
    .on_ready = sv_ready, .on_message = sv_message, .on_close = sv_close, .on_drain = sv_drain};
static const cr_net_callbacks_t cl_cb = {
    .on_ready = cl_ready, .on_message = cl_message, .on_close = cl_close};

/* ---- helpers ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs the loop until cond holds; fails the test after 3 s. */
#define RUN_UNTIL(cond)                                                                            \
    do {                                                                                           \
        double deadline_ = now_s() + 3;                                                            \
        while (!(cond) && now_s() < deadline_) {                                                   \
            uv_run(&W->loop, UV_RUN_NOWAIT);                                                       \
            if (!(cond))                                                                           \
                usleep(200);                                                                       \
        }                                                                                          \
        if (!(cond))                                                                               \
            fail_msg("timed out waiting for %s", #cond);                                           \
    } while (0)

static char *read_log(void)
{
    char *s;
    size_t n;
    assert_int_equal(cr_read_file_alloc(NULL, logpath, &s, &n), 0);
    return s;
}

static bool log_has(const char *what)
{
    char *s = read_log();
    bool has = strstr(s, what) != NULL;
    free(s);
    return has;
}

/* Whether the log names raw peer n of the Unix listener, with this
 * process's pid and uid from the kernel, next to what it did wrong. */
static bool peer_logged(int n, const char *what)
{
    char want[1024];
    snprintf(want, sizeof(want), "%s#%d (pid %ld, uid %ld): %s", sockpath, n, (long)getpid(),
             (long)getuid(), what);
    return log_has(want);
}

static void net_done(void *data)
{
    W->nets_done++;
}

static int setup(void **state)
{
    W = cr_calloc(1, sizeof(*W));
    if (uv_loop_init(&W->loop))
        return -1;
    snprintf(logpath, sizeof(logpath), "%s/log", dir);
    snprintf(sockpath, sizeof(sockpath), "%s/head.sock", dir);
    cr_log_set_level(CR_LOG_WARN);
    cr_log_set_file(logpath);
    if (truncate(logpath, 0))
        return -1;
    cr_net_config_t cfg = {
        .token = token, .name = "head", .handshake_timeout_ms = 300, .max_write_queue = 256 * 1024};
    W->server = cr_net_new(&W->loop, &cfg, &sv_cb, &W->sv);
    cr_net_config_t ccfg = {.token = token, .name = "test-client"};
    W->client = cr_net_new(&W->loop, &ccfg, &cl_cb, &W->cl);
    if (cr_net_listen_unix(W->server, sockpath) || access(sockpath, F_OK))
        return -1;
    return cr_net_listen_tcp(W->server, NULL, 0, &W->tcp_port);
}

/* Closes both nets and checks that the loop holds nothing afterwards. */
static int teardown(void **state)
{
    int nets = 1;
    cr_net_close(W->client, net_done, NULL);
    if (W->server) {
        cr_net_close(W->server, net_done, NULL);
        nets++;
    }
    RUN_UNTIL(W->nets_done == nets);
    int r = uv_loop_close(&W->loop);
    cr_log_set_file(NULL);
    free(W);
    W = NULL;
    /* the listener removed its socket file */
    assert_int_equal(access(sockpath, F_OK), -1);
    return r;
}

static int group_setup(void **state)
{
    return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd);
}

static void send_ok(cr_conn_t *c, Corral__Envelope *e)
{
    assert_int_equal(cr_conn_send(c, e), 0);
}

static void submit(cr_conn_t *c, uint64_t id, const char *cmd, uint32_t n)
{
    char *argv[] = {(char *)cmd};
    Corral__WorkerSpec w = CORRAL__WORKER_SPEC__INIT;
    w.n_argv = 1;
    w.argv = argv;
    Corral__JobSpec spec = CORRAL__JOB_SPEC__INIT;
    spec.worker = &w;
    spec.num_workers = n;
    Corral__JobSubmit js = CORRAL__JOB_SUBMIT__INIT;
    js.spec = &spec;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = id;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMIT;
    e.job_submit = &js;
    send_ok(c, &e);
}

/* A well-behaved client: connect and wait until both sides are ready. */
static cr_conn_t *good_client(const char *address, Corral__Role role)
{
    cr_conn_t *c = NULL;
    int sv0 = W->sv.ready, cl0 = W->cl.ready;
    assert_int_equal(cr_net_connect(W->client, address, role, &c), 0);
    assert_non_null(c);
    assert_int_equal(cr_conn_send(c, &(Corral__Envelope)CORRAL__ENVELOPE__INIT), -ENOTCONN);
    RUN_UNTIL(W->cl.ready == cl0 + 1 && W->sv.ready == sv0 + 1);
    assert_true(cr_conn_is_ready(c));
    return c;
}

/* One request and its answer through a good client. */
static void check_alive(cr_conn_t *c, uint64_t id)
{
    int m0 = W->cl.msgs;
    submit(c, id, "alive", (uint32_t)id);
    RUN_UNTIL(W->cl.msgs == m0 + 1);
    assert_int_equal(W->cl.reply_to, id);
    char want[64];
    snprintf(want, sizeof(want), "job-alive-%u", (unsigned)id);
    assert_string_equal(W->cl.text, want);
}

/* ---- raw peers: plain sockets the test drives byte by byte ---- */

static int raw_connect_to(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    assert_true(strlen(path) < sizeof(a.sun_path));
    memcpy(a.sun_path, path, strlen(path) + 1);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static int raw_connect(void)
{
    return raw_connect_to(sockpath);
}

static void raw_write(int fd, const void *p, size_t n)
{
    assert_int_equal(write(fd, p, n), (ssize_t)n);
}

static void raw_send(int fd, const Corral__Envelope *e)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(cr_msg_pack(e, 0, &buf, &len), 0);
    raw_write(fd, buf, len);
    free(buf);
}

/* Pumps the loop until one frame arrives on fd; NULL at end of stream. */
static Corral__Envelope *raw_recv(int fd, cr_frame_dec_t *d)
{
    double deadline = now_s() + 3;
    uint8_t b;
    while (now_s() < deadline) {
        uv_run(&W->loop, UV_RUN_NOWAIT);
        ssize_t n = read(fd, &b, 1);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return NULL;
        if (n < 0) {
            usleep(200);
            continue;
        }
        size_t used, fl;
        const uint8_t *f;
        int r = cr_frame_dec_feed(d, &b, 1, &used, &f, &fl);
        assert_true(r >= 0);
        if (r == 1) {
            char why[200];
            Corral__Envelope *e = cr_msg_unpack(f, fl, why, sizeof(why));
            if (!e)
                fail_msg("the server sent a bad message: %s", why);
            return e;
        }
    }
    fail_msg("no frame from the server within 3 s");
    return NULL;
}

/* Pumps the loop until the server closes fd. */
/* An authenticated peer that sent what the server cannot take gets an
 * Error that says so (issue 12) before the close. */
static void raw_expect_error(int fd, cr_frame_dec_t *d, const char *says)
{
    Corral__Envelope *r = raw_recv(fd, d);
    for (int i = 0; r && r->body_case != CORRAL__ENVELOPE__BODY_ERROR && i < 4; i++) {
        cr_msg_free(r); /* answers to what went before it (a heartbeat's ack) */
        r = raw_recv(fd, d);
    }
    assert_non_null(r);
    assert_int_equal(r->body_case, CORRAL__ENVELOPE__BODY_ERROR);
    assert_int_equal(r->error->code, CR_EPARSE);
    if (!strstr(r->error->message, says))
        fail_msg("error '%s' does not say '%s'", r->error->message, says);
    assert_non_null(strstr(r->error->message, "the connection is closed"));
    cr_msg_free(r);
}

static void raw_expect_eof(int fd)
{
    double deadline = now_s() + 3;
    char b[256];
    while (now_s() < deadline) {
        uv_run(&W->loop, UV_RUN_NOWAIT);
        ssize_t n = read(fd, b, sizeof(b));
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            close(fd);
            return;
        }
        usleep(200);
    }
    fail_msg("the server kept a misbehaving connection open");
}

/* Sends the Hello of a client holding the right token and takes the
 * server's Challenge: what is left to send is the Proof, in hs->out. */
static cr_hs_t *raw_hello(int fd, cr_frame_dec_t *d, Corral__Role role)
{
    uint8_t nonce[CR_NONCE_LEN] = {9, 9, 9};
    cr_hs_t *hs = cr_malloc(sizeof(*hs));
    cr_hs_init_client(hs, token, nonce, role, "raw");
    cr_hs_start(hs);
    raw_send(fd, &hs->out);
    Corral__Envelope *e = raw_recv(fd, d);
    assert_non_null(e);
    assert_int_equal(e->body_case, CORRAL__ENVELOPE__BODY_CHALLENGE);
    int r = cr_hs_step(hs, e);
    cr_msg_free(e);
    assert_true(r >= 0);
    assert_true(hs->has_out);
    assert_int_equal(hs->out.body_case, CORRAL__ENVELOPE__BODY_PROOF);
    return hs;
}

/* Completes the handshake as a client holding tok, by hand. */
static void raw_handshake(int fd, cr_frame_dec_t *d, Corral__Role role)
{
    cr_hs_t *hs = raw_hello(fd, d, role);
    raw_send(fd, &hs->out);
    Corral__Envelope *e = raw_recv(fd, d);
    assert_non_null(e);
    assert_true(cr_hs_step(hs, e) >= 0);
    cr_msg_free(e);
    assert_int_equal(hs->state, CR_HS_DONE);
    free(hs);
}

/* ---- the tests ---- */

/* The TCP connections of this process to or from port (both ends of
 * each, the listener left out), each checked to write without Nagle's
 * wait (conn_start): how many there were. */
static int tcp_nodelay_checked(int port)
{
    int n = 0;
    for (int fd = 3; fd < 1024; fd++) {
        struct sockaddr_in me, peer;
        socklen_t ml = sizeof(me), pl = sizeof(peer);
        if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0 || me.sin_family != AF_INET ||
            getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
            continue;
        if (ntohs(me.sin_port) != port && ntohs(peer.sin_port) != port)
            continue;
        int on = 0;
        socklen_t ol = sizeof(on);
        assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &ol), 0);
        assert_int_equal(on, 1);
        n++;
    }
    return n;
}

static void test_round_trip(void **state)
{
    char tcp[64];
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", W->tcp_port);
    cr_conn_t *agent = good_client(sockpath, CORRAL__ROLE__ROLE_AGENT);
    assert_int_equal(W->sv.role, CORRAL__ROLE__ROLE_AGENT);
    assert_int_equal(W->cl.role, CORRAL__ROLE__ROLE_HEAD);
    assert_non_null(strstr(cr_conn_peer(W->sv.last), "unix:"));
    cr_conn_t *client = good_client(tcp, CORRAL__ROLE__ROLE_CLIENT);
    assert_int_equal(W->sv.role, CORRAL__ROLE__ROLE_CLIENT);
    assert_non_null(strstr(cr_conn_peer(W->sv.last), "127.0.0.1:"));
    /* a small message is not held for the peer's delayed acknowledgement
     * (40 ms: an agent's worker exit waited so behind its start) */
    assert_int_equal(tcp_nodelay_checked(W->tcp_port), 2);
    /* a host name, looked up without blocking (localhost is in /etc/hosts) */
    char named[64];
    snprintf(named, sizeof(named), "localhost:%d", W->tcp_port);
    cr_conn_t *by_name = good_client(named, CORRAL__ROLE__ROLE_CLIENT);
    assert_string_equal(cr_conn_peer(by_name), named);
    check_alive(by_name, 50);
    /* closed while its lookup is still in flight: released all the same */
    cr_conn_t *early;
    int closed0 = W->cl.closed;
    assert_int_equal(cr_net_connect(W->client, named, CORRAL__ROLE__ROLE_CLIENT, &early), 0);
    cr_conn_close(early, 0);
    RUN_UNTIL(W->cl.closed == closed0 + 1);
    W->cl.msgs = 0;
    W->cl.closed = 0;

    /* agent: register, then a heartbeat */
    Corral__Register reg = CORRAL__REGISTER__INIT;
    reg.node_json = "{\"schema\": \"corral.node/v1\"}";
    reg.incarnation = 7;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 1;
    e.body_case = CORRAL__ENVELOPE__BODY_REGISTER;
    e.register_ = &reg;
    send_ok(agent, &e);
    RUN_UNTIL(W->cl.msgs == 1);
    assert_int_equal(W->cl.body, CORRAL__ENVELOPE__BODY_REGISTERED);
    assert_int_equal(W->cl.reply_to, 1);
    assert_string_equal(W->cl.text, "n1/7");

    Corral__Quantity q = CORRAL__QUANTITY__INIT, *free_[] = {&q};
    q.name = "GPU";
    q.amount = 8 * CR_QTY_ONE;
    Corral__Heartbeat hb = CORRAL__HEARTBEAT__INIT;
    hb.node_id = "n1";
    hb.seq = 12345678901ull;
    hb.n_free = 1;
    hb.free = free_;
    e.id = 2;
    e.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    send_ok(agent, &e);
    RUN_UNTIL(W->cl.msgs == 2);
    assert_string_equal(W->cl.text, "ack 12345678901");

    /* client over TCP: a job, and a request answered with an error */
    submit(client, 3, "train", 8);
    RUN_UNTIL(W->cl.msgs == 3);
    assert_int_equal(W->cl.reply_to, 3);
    assert_string_equal(W->cl.text, "job-train-8");
    Corral__PgRemove rm = CORRAL__PG_REMOVE__INIT;
    rm.name = "slice-a";
    assert_int_equal(cr_conn_next_id(client), 1);
    assert_int_equal(cr_conn_next_id(client), 2);
    e.id = 4;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_REMOVE;
    e.pg_remove = &rm;
    send_ok(client, &e);
    RUN_UNTIL(W->cl.msgs == 4);
    assert_int_equal(W->cl.body, CORRAL__ENVELOPE__BODY_ERROR);
    assert_string_equal(W->cl.text, "-2 no placement group named slice-a");

    /* many requests queued at once arrive in order */
    for (uint64_t i = 0; i < 200; i++)
        submit(client, 100 + i, "burst", (uint32_t)i);
    RUN_UNTIL(W->cl.msgs == 204);
    assert_int_equal(W->cl.reply_to, 299);
    assert_string_equal(W->cl.text, "job-burst-199");

    /* an orderly close reaches the other side with no error */
    cr_conn_close(agent, 0);
    RUN_UNTIL(W->cl.closed == 1 && W->sv.closed == 1);
    assert_int_equal(W->sv.close_err, 0);
    assert_int_equal(W->cl.close_err, 0);
    assert_false(log_has("warning"));
}

static void test_wrong_token(void **state)
{
    cr_net_config_t cfg = {.token = wrong_token, .name = "intruder"};
    side_t bad = {0};
    cr_net_t *n = cr_net_new(&W->loop, &cfg, &cl_cb, &bad);
    cr_conn_t *c;
    assert_int_equal(cr_net_connect(n, sockpath, CORRAL__ROLE__ROLE_AGENT, &c), 0);
    RUN_UNTIL(bad.closed == 1);
    assert_int_equal(bad.close_err, CR_EACCES);
    assert_int_equal(bad.ready, 0);
    assert_int_equal(W->sv.ready, 0);
    /* the server logged whom it refused and why; the client heard why */
    char *log = read_log();
    assert_non_null(strstr(log, "refused unix:"));
    assert_non_null(strstr(log, "(agent intruder): wrong cluster token"));
    assert_non_null(strstr(log, "refused by the server: wrong cluster token"));
    free(log);
    cr_net_close(n, net_done, NULL);
    RUN_UNTIL(W->nets_done == 1);
    W->nets_done = 0;
    /* the right token still gets in */
    cr_conn_t *g = good_client(sockpath, CORRAL__ROLE__ROLE_CLIENT);
    check_alive(g, 5);
}

static void test_wrong_version(void **state)
{
    int fd = raw_connect();
    uint8_t nonce[CR_NONCE_LEN] = {0};
    Corral__Hello h = CORRAL__HELLO__INIT;
    h.protocol_version = CR_PROTOCOL_VERSION + 1;
    h.role = CORRAL__ROLE__ROLE_CLIENT;
    h.nonce.data = nonce;
    h.nonce.len = sizeof(nonce);
    h.name = "future";
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_HELLO;
    e.hello = &h;
    raw_send(fd, &e);
    cr_frame_dec_t d;
    cr_frame_dec_init(&d, 0);
    Corral__Envelope *r = raw_recv(fd, &d);
    assert_non_null(r);
    assert_int_equal(r->body_case, CORRAL__ENVELOPE__BODY_REFUSED);
    assert_int_equal(r->refused->reason, CORRAL__REFUSE_REASON__REFUSE_VERSION);
    assert_int_equal(r->refused->protocol_version, CR_PROTOCOL_VERSION);
    assert_non_null(strstr(r->refused->message, "protocol version 2, this server speaks 1"));
    cr_msg_free(r);
    raw_expect_eof(fd);
    cr_frame_dec_fini(&d);
    assert_true(log_has("(client future): protocol version 2"));
}

/* Peers that send garbage before or after the handshake are dropped, each
 * with one log line naming it, while a good client keeps working. */
static void test_garbage_closes_only_that_connection(void **state)
{
    cr_conn_t *good = good_client(sockpath, CORRAL__ROLE__ROLE_CLIENT);
    check_alive(good, 1);
    cr_frame_dec_t d;

    /* 1. not our protocol at all: "GET " read as a length is too big */
    int fd = raw_connect();
    raw_write(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
    raw_expect_eof(fd);
    assert_true(peer_logged(2, "bad frame: frame of 1195725856 bytes exceeds the limit"));
    check_alive(good, 2);

    /* 2. a frame whose payload is not an Envelope, before the handshake */
    fd = raw_connect();
    raw_write(fd, "\x00\x00\x00\x03\xff\xff\xff", 7);
    raw_expect_eof(fd);
    assert_true(peer_logged(3, "malformed message: not a protobuf Envelope"));
    check_alive(good, 3);

    /* 3. a zero-length frame */
    fd = raw_connect();
    raw_write(fd, "\x00\x00\x00\x00", 4);
    raw_expect_eof(fd);
    assert_true(peer_logged(4, "bad frame: frame length 0"));

    /* 4. after a correct handshake: a frame that does not decode */
    fd = raw_connect();
    cr_frame_dec_init(&d, 0);
    raw_handshake(fd, &d, CORRAL__ROLE__ROLE_CLIENT);
    raw_write(fd, "\x00\x00\x00\x02\x0a\xff", 6);
    raw_expect_error(fd, &d, "malformed message");
    raw_expect_eof(fd);
    cr_frame_dec_fini(&d);
    assert_true(peer_logged(5, "malformed message"));
    check_alive(good, 4);

    /* 5. after the handshake: a message a client may not send */
    fd = raw_connect();
    cr_frame_dec_init(&d, 0);
    raw_handshake(fd, &d, CORRAL__ROLE__ROLE_CLIENT);
    Corral__Commit cm = CORRAL__COMMIT__INIT;
    cm.txn_id = "t1";
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_COMMIT;
    e.commit = &cm;
    e.id = 41;
    raw_send(fd, &e);
    Corral__Envelope *er = raw_recv(fd, &d); /* the Error answers that message */
    assert_non_null(er);
    assert_int_equal(er->body_case, CORRAL__ENVELOPE__BODY_ERROR);
    assert_int_equal(er->reply_to, 41);
    assert_non_null(strstr(er->error->message, "commit is not a message a client sends here"));
    cr_msg_free(er);
    e.id = 0;
    raw_expect_eof(fd);
    cr_frame_dec_fini(&d);
    assert_true(peer_logged(6, "sent commit, which this side does not take from it"));

    /* 6. after the handshake: a valid envelope that fails validation,
     * preceded by a good one in the same write */
    fd = raw_connect();
    cr_frame_dec_init(&d, 0);
    raw_handshake(fd, &d, CORRAL__ROLE__ROLE_AGENT);
    int msgs = W->sv.msgs;
    Corral__Heartbeat hb = CORRAL__HEARTBEAT__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    raw_send(fd, &e);
    Corral__Register reg = CORRAL__REGISTER__INIT; /* no node_json */
    e.body_case = CORRAL__ENVELOPE__BODY_REGISTER;
    e.register_ = &reg;
    raw_send(fd, &e);
    raw_expect_error(fd, &d, "register: node_json is empty");
    raw_expect_eof(fd);
    cr_frame_dec_fini(&d);
    assert_int_equal(W->sv.msgs, msgs + 1);
    assert_int_equal(W->sv.body, CORRAL__ENVELOPE__BODY_HEARTBEAT);
    assert_true(peer_logged(7, "malformed message: register: node_json is empty"));

    /* 7. a second hello after the handshake */
    fd = raw_connect();
    cr_frame_dec_init(&d, 0);
    raw_handshake(fd, &d, CORRAL__ROLE__ROLE_CLIENT);
    uint8_t nonce[CR_NONCE_LEN] = {0};
    Corral__Hello h = CORRAL__HELLO__INIT;
    h.protocol_version = CR_PROTOCOL_VERSION;
    h.role = CORRAL__ROLE__ROLE_CLIENT;
    h.nonce.data = nonce;
    h.nonce.len = sizeof(nonce);
    e.body_case = CORRAL__ENVELOPE__BODY_HELLO;
    e.hello = &h;
    raw_send(fd, &e);
    raw_expect_error(fd, &d, "hello is not a message a client sends here");
    raw_expect_eof(fd);
    cr_frame_dec_fini(&d);
    assert_true(peer_logged(8, "sent hello, which this side does not take from it"));

    /* 8. pins the sender check (net/conn.c handle_frame): a client may
     * not send what only an agent sends, such as a node's heartbeat */
    fd = raw_connect();
    cr_frame_dec_init(&d, 0);
    raw_handshake(fd, &d, CORRAL__ROLE__ROLE_CLIENT);
    msgs = W->sv.msgs;
    e.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    raw_send(fd, &e);
    raw_expect_error(fd, &d, "heartbeat is not a message a client sends here");
    raw_expect_eof(fd);
    cr_frame_dec_fini(&d);
    assert_int_equal(W->sv.msgs, msgs);
    assert_true(peer_logged(9, "sent heartbeat, which this side does not take from it"));

    /* the five that finished the handshake were announced, and closed
     * as malformed; the three that did not never reached the application */
    assert_int_equal(W->sv.ready, 6);
    assert_int_equal(W->sv.closed, 5);
    assert_int_equal(W->sv.close_err, CR_EPARSE);
    check_alive(good, 5);

    /* 9. after the handshake: a frame over the limit, said with the limit
     * (before it, case 1, nothing is said) */
    fd = raw_connect();
    cr_frame_dec_init(&d, 0);
    raw_handshake(fd, &d, CORRAL__ROLE__ROLE_CLIENT);
    raw_write(fd, "\x7f\xff\xff\xff", 4);
    raw_expect_error(fd, &d, "bad frame: frame of 2147483647 bytes exceeds the limit");
    raw_expect_eof(fd);
    cr_frame_dec_fini(&d);
    check_alive(good, 6);
}

static void test_silent_peer_times_out(void **state)
{
    cr_conn_t *good = good_client(sockpath, CORRAL__ROLE__ROLE_CLIENT);
    int fd = raw_connect();
    double t0 = now_s();
    raw_expect_eof(fd);
    assert_true(now_s() - t0 < 2);
    assert_true(log_has("handshake not finished within 300 ms"));
    /* the good client, idle just as long, is not touched */
    check_alive(good, 9);
}

static void test_errors_and_limits(void **state)
{
    /* malformed addresses fail at once, without callbacks */
    int closed = W->cl.closed;
    assert_int_equal(cr_net_connect(W->client, "nohost", CORRAL__ROLE__ROLE_CLIENT, NULL),
                     CR_EINVAL);
    assert_int_equal(cr_net_connect(W->client, "bad_host!:80", CORRAL__ROLE__ROLE_CLIENT, NULL),
                     CR_EINVAL);
    assert_int_equal(cr_net_connect(W->client, "[::1]:x", CORRAL__ROLE__ROLE_CLIENT, NULL),
                     CR_EINVAL);
    assert_int_equal(cr_net_connect(W->client, "127.0.0.1:0", CORRAL__ROLE__ROLE_CLIENT, NULL),
                     CR_EINVAL);
    assert_int_equal(cr_net_connect(W->client, sockpath, CORRAL__ROLE__ROLE_HEAD, NULL), CR_EINVAL);
    assert_int_equal(cr_net_listen_tcp(W->server, "not-an-ip", 0, NULL), CR_EINVAL);

    /* nobody listening: on_close says so */
    char missing[700];
    snprintf(missing, sizeof(missing), "unix:%s/none.sock", dir);
    assert_int_equal(cr_net_connect(W->client, missing, CORRAL__ROLE__ROLE_CLIENT, NULL), 0);
    RUN_UNTIL(W->cl.closed == closed + 1);
    assert_int_equal(W->cl.close_err, -ENOENT);

    /* a listener path taken by a regular file is not replaced */
    char plain[700];
    snprintf(plain, sizeof(plain), "%s/file", dir);
    FILE *fp = fopen(plain, "w");
    fclose(fp);
    assert_int_equal(cr_net_listen_unix(W->server, plain), -EEXIST);
    assert_int_equal(access(plain, F_OK), 0);

    /* a message above the frame limit is refused by the sender: five
     * arguments of 4 MiB (the most one string may hold) */
    cr_conn_t *good = good_client(sockpath, CORRAL__ROLE__ROLE_CLIENT);
    size_t big = 4u << 20;
    char *arg = cr_malloc(big + 1);
    memset(arg, 'x', big);
    arg[big] = '\0';
    char *argv[] = {arg, arg, arg, arg, arg};
    Corral__WorkerSpec w = CORRAL__WORKER_SPEC__INIT;
    w.n_argv = 5;
    w.argv = argv;
    Corral__JobSpec spec = CORRAL__JOB_SPEC__INIT;
    spec.worker = &w;
    Corral__JobSubmit js = CORRAL__JOB_SUBMIT__INIT;
    js.spec = &spec;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMIT;
    e.job_submit = &js;
    assert_int_equal(cr_conn_send(good, &e), CR_E2BIG);
    /* one string above 4 MiB, a message this side may not send, a body
     * case without its message: invalid, refused before the wire */
    w.n_argv = 1;
    free(arg);
    arg = cr_malloc(big + 2);
    memset(arg, 'x', big + 1);
    arg[big + 1] = '\0';
    argv[0] = arg;
    assert_int_equal(cr_conn_send(good, &e), CR_EINVAL);
    assert_true(log_has("not sending an invalid job_submit: job_submit.spec.worker: argv: string "
                        "longer than 4194304 bytes"));
    free(arg);
    Corral__Registered rd = CORRAL__REGISTERED__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_REGISTERED;
    e.registered = &rd;
    assert_int_equal(cr_conn_send(good, &e), CR_EINVAL);
    e.body_case = CORRAL__ENVELOPE__BODY_ACK;
    e.ack = NULL;
    assert_int_equal(cr_conn_send(good, &e), CR_EINVAL);
    assert_true(log_has("ack: the body case is set but its message is missing"));
    assert_true(cr_conn_is_ready(good));

    /* closing the server drops its clients with an orderly close */
    int cl_closed = W->cl.closed;
    cr_net_close(W->server, net_done, NULL);
    RUN_UNTIL(W->cl.closed == cl_closed + 1 && W->nets_done == 1);
    assert_int_equal(W->cl.close_err, 0);
    /* a closing net takes no new listeners; teardown gets a fresh one */
    W->server = cr_net_new(&W->loop, &(cr_net_config_t){.token = token}, &sv_cb, &W->sv);
    W->nets_done = 0;
}

/* A peer that asks for much and never reads is cut off once the limit of
 * bytes waiting for it is passed; a good client is not. */
static void test_slow_reader(void **state)
{
    cr_conn_t *good = good_client(sockpath, CORRAL__ROLE__ROLE_CLIENT);
    int fd = raw_connect();
    cr_frame_dec_t d;
    cr_frame_dec_init(&d, 0);
    raw_handshake(fd, &d, CORRAL__ROLE__ROLE_CLIENT);
    int closed = W->sv.closed;
    Corral__JobLogs jl = CORRAL__JOB_LOGS__INIT;
    jl.job_id = "j1";
    jl.worker_index = -1;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 1;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_LOGS;
    e.job_logs = &jl;
    raw_send(fd, &e);
    RUN_UNTIL(W->sv.closed == closed + 1);
    assert_int_equal(W->sv.close_err, -ENOBUFS);
    assert_true(log_has("above the limit of 262144; the peer reads too slowly"));
    close(fd);
    cr_frame_dec_fini(&d);
    check_alive(good, 3);

    /* a paced stream of 4 MiB reaches a good client without a cut */
    int msgs = W->cl.msgs;
    jl.worker_index = 0;
    assert_int_equal(cr_conn_send(good, &e), 0);
    RUN_UNTIL(W->cl.msgs == msgs + 64);
    assert_int_equal(W->cl.body, CORRAL__ENVELOPE__BODY_LOG_CHUNK);
    check_alive(good, 4);
}

/* The server closes itself from inside on_message: the answer still goes
 * out first, the client hears an orderly close, nothing is used after it
 * is freed (ASan runs this too). */
static void test_close_from_callback(void **state)
{
    cr_conn_t *good = good_client(sockpath, CORRAL__ROLE__ROLE_CLIENT);
    int closed = W->cl.closed, msgs = W->cl.msgs;
    Corral__Shutdown sd = CORRAL__SHUTDOWN__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 77;
    e.body_case = CORRAL__ENVELOPE__BODY_SHUTDOWN;
    e.shutdown = &sd;
    assert_int_equal(cr_conn_send(good, &e), 0);
    RUN_UNTIL(W->nets_done == 1 && W->cl.closed == closed + 1);
    W->server = NULL;
    W->nets_done = 0;
    assert_int_equal(W->cl.close_err, 0);
    /* the ack may or may not beat the close; if it came, it answers 77 */
    if (W->cl.msgs > msgs) {
        assert_int_equal(W->cl.body, CORRAL__ENVELOPE__BODY_ACK);
        assert_int_equal(W->cl.reply_to, 77);
    }
    assert_int_equal(access(sockpath, F_OK), -1);
}

/* A second server, taking frames of 1 KiB at most, on dir/small.sock. */
static cr_net_t *small_server(side_t *small, char *path, size_t size)
{
    snprintf(path, size, "%s/small.sock", dir);
    cr_net_t *n =
        cr_net_new(&W->loop, &(cr_net_config_t){.token = token, .max_frame = 1024}, &sv_cb, small);
    assert_int_equal(cr_net_listen_unix(n, path), 0);
    return n;
}

static void small_server_close(cr_net_t *n)
{
    cr_net_close(n, net_done, NULL);
    RUN_UNTIL(W->nets_done == 1);
    W->nets_done = 0;
}

/* A Register whose node description is 1999 bytes of x: above 1 KiB. */
typedef struct big_register {
    char json[2000];
    Corral__Register reg;
    Corral__Envelope e;
} big_register_t;

static Corral__Envelope *big_register(big_register_t *b)
{
    memset(b->json, 'x', sizeof(b->json) - 1);
    b->json[sizeof(b->json) - 1] = '\0';
    b->reg = (Corral__Register)CORRAL__REGISTER__INIT;
    b->reg.node_json = b->json;
    b->e = (Corral__Envelope)CORRAL__ENVELOPE__INIT;
    b->e.body_case = CORRAL__ENVELOPE__BODY_REGISTER;
    b->e.register_ = &b->reg;
    return &b->e;
}

/* A plain heartbeat from an agent's connection. */
static void send_beat(cr_conn_t *c, uint64_t seq)
{
    Corral__Heartbeat hb = CORRAL__HEARTBEAT__INIT;
    hb.node_id = "n1";
    hb.seq = seq;
    hb.free_same = true;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = seq;
    e.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    send_ok(c, &e);
}

/* A server with batched reads (cr_net_config_t.batch_ms, the head's):
 * agents' connections join the batch after a small read and every beat
 * is still answered, in order, through the batch's io_uring receives when
 * several are ready at once; a bulk message takes its connection out and
 * arrives whole; a client's connection is never batched; a peer's close
 * is seen from inside the batch. */
static void test_agent_reads_batched(void **state)
{
    side_t bs = {0};
    cr_net_t *n =
        cr_net_new(&W->loop, &(cr_net_config_t){.token = token, .batch_ms = 1}, &sv_cb, &bs);
    int port = 0;
    assert_int_equal(cr_net_listen_tcp(n, NULL, 0, &port), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    enum { AGENTS = 8, ROUNDS = 20 };
    cr_conn_t *ag[AGENTS];
    for (int i = 0; i < AGENTS; i++) {
        assert_int_equal(cr_net_connect(W->client, addr, CORRAL__ROLE__ROLE_AGENT, &ag[i]), 0);
        RUN_UNTIL(W->cl.ready == i + 1 && bs.ready == i + 1);
    }
    cr_conn_t *cl = NULL;
    assert_int_equal(cr_net_connect(W->client, addr, CORRAL__ROLE__ROLE_CLIENT, &cl), 0);
    RUN_UNTIL(W->cl.ready == AGENTS + 1 && bs.ready == AGENTS + 1);

    size_t conns;
    uint64_t batches, ring;
    /* rounds of one beat from every agent at once: each round's beats
     * wait in the sockets together, so a batch reads several */
    int want = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < AGENTS; i++)
            send_beat(ag[i], (uint64_t)(r * AGENTS + i + 1));
        want += AGENTS;
        RUN_UNTIL(bs.msgs == want && W->cl.msgs == want);
        assert_int_equal(W->cl.body, CORRAL__ENVELOPE__BODY_HEARTBEAT_ACK);
    }
    cr_net_batch_stats(n, &conns, &batches, &ring);
    assert_int_equal(conns, AGENTS);
    assert_true(batches > 0);
    cr_uring_t *u = cr_uring_new(4);
    if (u) /* where the kernel has io_uring, the batches used it */
        assert_true(ring > 0);
    else
        print_message("no io_uring here (%s): the batch read one connection at a time\n",
                      strerror(errno));
    cr_uring_free(u);

    /* a client's requests are answered at once, its connection never batched */
    check_alive(cl, 5);
    cr_net_batch_stats(n, &conns, &batches, &ring);
    assert_int_equal(conns, AGENTS);

    /* bulk: a 200 KiB Register leaves the batch and arrives whole; the
     * next beats still come, and the connection joins again */
    static char json[200 * 1024];
    memset(json, 'x', sizeof(json) - 1);
    Corral__Register reg = CORRAL__REGISTER__INIT;
    reg.node_json = json;
    reg.incarnation = 42;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 9999;
    e.body_case = CORRAL__ENVELOPE__BODY_REGISTER;
    e.register_ = &reg;
    int sv0 = bs.msgs, cl0 = W->cl.msgs;
    send_ok(ag[0], &e);
    send_beat(ag[0], 10000);
    RUN_UNTIL(bs.msgs == sv0 + 2 && W->cl.msgs == cl0 + 2);
    assert_int_equal(W->cl.body, CORRAL__ENVELOPE__BODY_HEARTBEAT_ACK);
    assert_int_equal(W->cl.reply_to, 10000);
    send_beat(ag[0], 10001);
    RUN_UNTIL(bs.msgs == sv0 + 3 && W->cl.msgs == cl0 + 3);
    assert_int_equal(W->cl.reply_to, 10001);
    cr_net_batch_stats(n, &conns, &batches, &ring);
    assert_int_equal(conns, AGENTS);

    /* agents that go away are seen from the batch: closed, not errors;
     * half of them close right behind a last beat, its bytes and the end
     * of the stream in one edge of the edge-triggered set */
    sv0 = bs.msgs;
    for (int i = 0; i < AGENTS; i++) {
        if (i % 2 == 0)
            send_beat(ag[i], (uint64_t)(20000 + i));
        cr_conn_close(ag[i], 0);
    }
    RUN_UNTIL(bs.closed == AGENTS);
    assert_int_equal(bs.msgs, sv0 + AGENTS / 2);
    assert_int_equal(bs.close_err, 0);
    cr_net_batch_stats(n, &conns, &batches, &ring);
    assert_int_equal(conns, 0);

    cr_net_close(n, net_done, NULL);
    RUN_UNTIL(W->nets_done == 1);
    W->nets_done = 0;
}

/* A client never sends above the frame limit its server announced. */
static void test_server_frame_limit(void **state)
{
    char path[700];
    side_t small = {0};
    cr_net_t *n = small_server(&small, path, sizeof(path));
    cr_conn_t *c;
    int ready = W->cl.ready;
    assert_int_equal(cr_net_connect(W->client, path, CORRAL__ROLE__ROLE_AGENT, &c), 0);
    RUN_UNTIL(W->cl.ready == ready + 1 && small.ready == 1);
    big_register_t b;
    Corral__Envelope *e = big_register(&b);
    assert_int_equal(cr_conn_send(c, e), CR_E2BIG);
    b.json[500] = '\0';
    int msgs = W->cl.msgs;
    assert_int_equal(cr_conn_send(c, e), 0);
    RUN_UNTIL(W->cl.msgs == msgs + 1);
    assert_int_equal(W->cl.body, CORRAL__ENVELOPE__BODY_REGISTERED);
    small_server_close(n);
}

/* Pins the proof check comparing all CR_PROOF_LEN bytes (net/auth.c
 * cr_auth_check): a client whose proof is right in its first 8 bytes (a
 * pointer's size) and wrong after them is refused on a real connection,
 * and the server never calls it ready. */
static void test_partial_proof_refused(void **state)
{
    static const size_t wrong_from[] = {8, CR_PROOF_LEN - 1};
    for (size_t i = 0; i < CR_ARRAY_SIZE(wrong_from); i++) {
        int fd = raw_connect();
        cr_frame_dec_t d;
        cr_frame_dec_init(&d, 0);
        cr_hs_t *hs = raw_hello(fd, &d, CORRAL__ROLE__ROLE_CLIENT);
        assert_ptr_equal(hs->out.proof->hmac.data, hs->out_bytes);
        hs->out_bytes[wrong_from[i]] ^= 0x5a;
        raw_send(fd, &hs->out);
        free(hs);
        Corral__Envelope *r = raw_recv(fd, &d);
        assert_non_null(r);
        assert_int_equal(r->body_case, CORRAL__ENVELOPE__BODY_REFUSED);
        assert_int_equal(r->refused->reason, CORRAL__REFUSE_REASON__REFUSE_AUTH);
        cr_msg_free(r);
        raw_expect_eof(fd);
        cr_frame_dec_fini(&d);
    }
    assert_int_equal(W->sv.ready, 0);
    assert_true(log_has("(client raw): wrong cluster token"));
    /* the whole proof still gets in */
    int fd = raw_connect();
    cr_frame_dec_t d;
    cr_frame_dec_init(&d, 0);
    raw_handshake(fd, &d, CORRAL__ROLE__ROLE_CLIENT);
    RUN_UNTIL(W->sv.ready == 1);
    close(fd);
    cr_frame_dec_fini(&d);
}

/* Pins the connection's decoder taking the net's frame limit (net/conn.c
 * conn_new: cr_frame_dec_init(&c->dec, n->max_frame)): a server
 * configured for 1 KiB frames closes a peer that sends it a 2 KiB frame
 * after a good handshake, and says why, rather than taking it under the
 * 16 MiB default. */
static void test_frame_over_the_limit_refused(void **state)
{
    char path[700];
    side_t small = {0};
    cr_net_t *n = small_server(&small, path, sizeof(path));
    int fd = raw_connect_to(path);
    cr_frame_dec_t d;
    cr_frame_dec_init(&d, 0);
    raw_handshake(fd, &d, CORRAL__ROLE__ROLE_AGENT);
    RUN_UNTIL(small.ready == 1);
    big_register_t b;
    raw_send(fd, big_register(&b)); /* packed under the default limit: this side does not check */
    raw_expect_eof(fd);
    assert_int_equal(small.msgs, 0);
    assert_true(log_has("exceeds the limit of 1024"));
    cr_frame_dec_fini(&d);
    small_server_close(n);
}

/* Log chunks from a file (cr_conn_send_log_file): to a peer that takes
 * raw chunks, headers with raw_len and the bytes after each; the client
 * gets every byte in order, as chunks (each piece from its offset), then
 * still answers. With
 * CORRAL_FEATURES=0 on either side (an older peer) all are framed. */
/* raw_fd: a file of RAW_CHUNKS chunks of raw_byte. */
static void raw_file(void)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/raw.out", dir);
    raw_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(raw_fd >= 0);
    static uint8_t buf[65536];
    for (uint64_t k = 0; k < RAW_CHUNKS; k++) {
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = raw_byte(k * sizeof(buf) + i);
        assert_int_equal(write(raw_fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    }
}

/* The output file written, then a client net (*net) named name and its
 * connection to the server, ready, with client_features in its HELLO
 * (NULL: the default). */
static cr_conn_t *raw_client(const char *client_features, const char *name, cr_net_t **net)
{
    raw_file();
    if (client_features)
        setenv("CORRAL_FEATURES", client_features, 1);
    *net = cr_net_new(&W->loop, &(cr_net_config_t){.token = token, .name = name}, &cl_cb, &W->cl);
    unsetenv("CORRAL_FEATURES");
    cr_conn_t *c = NULL;
    int ready = W->cl.ready;
    assert_int_equal(cr_net_connect(*net, sockpath, CORRAL__ROLE__ROLE_CLIENT, &c), 0);
    RUN_UNTIL(W->cl.ready == ready + 1);
    return c;
}

/* raw_client's connection still answers; its net closed, the file too. */
static void raw_client_done(cr_conn_t *good, cr_net_t *cn)
{
    check_alive(good, 5);
    cr_net_close(cn, net_done, NULL);
    RUN_UNTIL(W->nets_done == 1);
    W->nets_done = 0;
    close(raw_fd);
    raw_fd = -1;
}

/* Asks the server for worker index's logs of job j2 (the server's
 * on_message answers with RAW_CHUNKS chunks) and runs until all came. */
static void ask_logs(cr_conn_t *good, uint32_t index)
{
    raw_got = 0;
    Corral__JobLogs jl = CORRAL__JOB_LOGS__INIT;
    jl.job_id = "j2";
    jl.worker_index = index;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 1;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_LOGS;
    e.job_logs = &jl;
    assert_int_equal(cr_conn_send(good, &e), 0);
    RUN_UNTIL(raw_got == RAW_CHUNKS * 65536ull);
}

static void raw_stream(const char *client_features, bool want_raw)
{
    cr_net_t *cn;
    cr_conn_t *good = raw_client(client_features, "raw-client", &cn);
    cr_raw_stats_t s0, s1;
    cr_net_raw_stats(&s0);
    ask_logs(good, 2);
    cr_net_raw_stats(&s1);
    uint64_t sent = s1.sent - s0.sent;
    if (want_raw) {
        assert_int_equal(sent, RAW_CHUNKS * 65536ull);
        assert_int_equal(s1.received - s0.received, sent);
    } else {
        assert_int_equal(sent, 0);
        assert_int_equal(s1.received, s0.received);
    }
    raw_client_done(good, cn);
}

static void test_raw_log_chunks(void **state)
{
    raw_stream(NULL, true);
}

static void test_raw_log_chunks_old_client(void **state)
{
    raw_stream("0", false);
}

/* Raw chunks from memory (cr_conn_send_log_bytes, the head's relay):
 * every byte arrives in order though the sender's buffer is overwritten
 * after each send; the first chunk went straight to the socket, later ones
 * waited in the queue. */
static void test_raw_log_bytes(void **state)
{
    cr_net_t *cn;
    cr_conn_t *good = raw_client(NULL, "mem-client", &cn);
    ask_logs(good, 3);
    assert_int_equal(mem_first_copied, 0);
    assert_true(mem_copied > 0 && mem_copied < RAW_CHUNKS * 65536ull);
    raw_client_done(good, cn);
}

static void send_job_logs(cr_conn_t *c, uint64_t id)
{
    Corral__JobLogs jl = CORRAL__JOB_LOGS__INIT;
    jl.job_id = "j2";
    jl.worker_index = 2; /* the server answers from raw_fd */
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = id;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_LOGS;
    e.job_logs = &jl;
    assert_int_equal(cr_conn_send(c, &e), 0);
}

/* Job output while the server's net is held (cr_net_hold: the head holds
 * each turn's answers until its commit): it is written at once to a
 * connection that has nothing held, never copied into the held buffer;
 * behind an answer held before it, it waits and goes after it, in
 * order, at cr_net_flush. Raw (cr_conn_send_log_file) and framed
 * (cr_conn_send_output, an older client). */
static void output_not_held(const char *client_features)
{
    cr_net_t *cn;
    cr_conn_t *good = raw_client(client_features, "held-client", &cn);

    cr_net_hold(W->server);
    raw_got = 0;
    send_job_logs(good, 1);
    RUN_UNTIL(raw_got == RAW_CHUNKS * 65536ull); /* all of it, the net still held */

    /* an answer held first: the output after it waits, then follows it */
    raw_got = 0;
    raw_got_at_error = UINT64_MAX;
    int msgs = W->sv.msgs;
    Corral__PgRemove rm = CORRAL__PG_REMOVE__INIT;
    rm.name = "held";
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 2;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_REMOVE;
    e.pg_remove = &rm;
    assert_int_equal(cr_conn_send(good, &e), 0);
    send_job_logs(good, 3);
    RUN_UNTIL(W->sv.msgs == msgs + 2);
    for (int i = 0; i < 20; i++) /* nothing can arrive: all of it is held */
        uv_run(&W->loop, UV_RUN_NOWAIT);
    assert_int_equal(raw_got, 0);
    assert_int_equal(raw_got_at_error, UINT64_MAX);
    cr_net_flush(W->server);
    RUN_UNTIL(raw_got == RAW_CHUNKS * 65536ull);
    assert_int_equal(raw_got_at_error, 0); /* the answer came first */

    raw_client_done(good, cn);
}

static void test_output_not_held(void **state)
{
    output_not_held(NULL);
}

static void test_output_not_held_framed(void **state)
{
    output_not_held("0");
}

/* A raw chunk the receiver did not announce, or longer than its frame
 * limit, closes that connection with words; nothing of it is handed on. */
static void test_raw_log_chunk_refused(void **state)
{
    for (int k = 0; k < 2; k++) {
        char path[700];
        side_t small = {0};
        if (k == 0)
            setenv("CORRAL_FEATURES", "0", 1);
        cr_net_t *n = small_server(&small, path, sizeof(path));
        unsetenv("CORRAL_FEATURES");
        int fd = raw_connect_to(path);
        cr_frame_dec_t d;
        cr_frame_dec_init(&d, 0);
        raw_handshake(fd, &d, CORRAL__ROLE__ROLE_AGENT);
        RUN_UNTIL(small.ready == 1);
        Corral__LogChunk l = CORRAL__LOG_CHUNK__INIT;
        l.job_id = "j";
        l.raw_len = k == 0 ? 16 : 2048; /* the small server takes 1 KiB frames */
        Corral__Envelope e = CORRAL__ENVELOPE__INIT;
        e.id = 7;
        e.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
        e.log_chunk = &l;
        raw_send(fd, &e);
        raw_expect_error(fd, &d, k == 0 ? "did not announce" : "above the frame limit");
        raw_expect_eof(fd);
        assert_int_equal(small.msgs, 0);
        close(fd);
        cr_frame_dec_fini(&d);
        small_server_close(n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_closes_only_that_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_peer_times_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors_and_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slow_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_frame_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partial_proof_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frame_over_the_limit_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_log_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_log_chunks_old_client, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_log_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_log_chunk_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_not_held, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_not_held_framed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_agent_reads_batched, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
