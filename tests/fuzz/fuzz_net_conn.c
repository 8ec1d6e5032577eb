/* Fuzz a listening server through a real Unix socket: each input is one
 * peer's bytes, sent before or (first byte odd) after a correct handshake,
 * then the peer stops writing. Whatever the bytes, the server must answer
 * or close that connection and stay up; a well-behaved peer connected for
 * the whole run must still get its answers. Run under ASan, this covers
 * the read path, validation, the sender rules and every close path. */
#undef NDEBUG
#include "net/net.h"
#include <assert.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static uv_loop_t loop;
static cr_net_t *server, *client;
static cr_conn_t *good;
static int good_answers;
static char path[108];
static const uint8_t token[CR_TOKEN_LEN] = {42};

static void sv_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    if (!e->id)
        return;
    Corral__Ack ack = CORRAL__ACK__INIT;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.reply_to = e->id;
    a.body_case = CORRAL__ENVELOPE__BODY_ACK;
    a.ack = &ack;
    int err = cr_conn_send(c, &a);
    assert(err == 0 || err == -ENOBUFS || err == -ENOTCONN);
}

static void cl_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    good_answers++;
}

static void cl_close(cr_conn_t *c, int err, void *data)
{
    /* the good client is never dropped */
    assert(!"the well-behaved client was disconnected");
}

static void run_until(bool (*cond)(void))
{
    for (int i = 0; i < 20000 && !cond(); i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        if (!cond())
            poll(NULL, 0, 0);
    }
    assert(cond());
}

static bool good_ready(void)
{
    return cr_conn_is_ready(good);
}

static void remove_socket(void)
{
    unlink(path);
}

static void setup(void)
{
    uv_loop_init(&loop);
    cr_log_set_level(CR_LOG_ERROR); /* the fuzzer makes every warning happen */
    snprintf(path, sizeof(path), "/tmp/corral-fuzz-conn-%d.sock", (int)getpid());
    cr_net_config_t cfg = {.token = token, .name = "fuzz-head", .max_frame = 1 << 16};
    cr_net_callbacks_t scb = {.on_message = sv_message};
    server = cr_net_new(&loop, &cfg, &scb, NULL);
    assert(cr_net_listen_unix(server, path) == 0);
    atexit(remove_socket);
    cr_net_callbacks_t ccb = {.on_message = cl_message, .on_close = cl_close};
    client = cr_net_new(&loop, &cfg, &ccb, NULL);
    assert(cr_net_connect(client, path, CORRAL__ROLE__ROLE_CLIENT, &good) == 0);
    run_until(good_ready);
}

/* Reads one frame from the raw peer, pumping the loop; NULL at EOF. */
static Corral__Envelope *raw_recv(int fd, cr_frame_dec_t *d)
{
    uint8_t b;
    for (int i = 0; i < 100000; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN))
            return NULL;
        if (n < 0)
            continue;
        size_t used, fl;
        const uint8_t *f;
        if (cr_frame_dec_feed(d, &b, 1, &used, &f, &fl) == 1)
            return cr_msg_unpack(f, fl, (char[200]){0}, 200);
    }
    assert(!"the server neither answered nor closed");
    return NULL;
}

/* Writes what the server takes, pumping its loop; false if it closed. */
static bool raw_write(int fd, const uint8_t *p, size_t n)
{
    for (int i = 0; n && i < 200000; i++) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN)
            return false;
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        }
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    assert(n == 0);
    return true;
}

static void raw_send(int fd, const Corral__Envelope *e)
{
    uint8_t *buf;
    size_t len;
    assert(cr_msg_pack(e, 0, &buf, &len) == 0);
    assert(raw_write(fd, buf, len));
    free(buf);
}

static bool raw_handshake(int fd, Corral__Role role)
{
    uint8_t nonce[CR_NONCE_LEN] = {1};
    cr_hs_t *hs = cr_malloc(sizeof(*hs));
    cr_hs_init_client(hs, token, nonce, role, "fuzz");
    cr_hs_start(hs);
    raw_send(fd, &hs->out);
    cr_frame_dec_t d;
    cr_frame_dec_init(&d, 0);
    for (int i = 0; i < 2 && hs->state != CR_HS_FAILED; i++) {
        Corral__Envelope *e = raw_recv(fd, &d);
        assert(e);
        cr_hs_step(hs, e);
        cr_msg_free(e);
        if (hs->has_out)
            raw_send(fd, &hs->out);
    }
    bool ok = hs->state == CR_HS_DONE;
    cr_frame_dec_fini(&d);
    free(hs);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!server)
        setup();
    if (size < 1)
        return 0;
    uint8_t ctl = data[0];
    data++;
    size--;

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    assert(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    if (ctl & 1)
        assert(raw_handshake(fd, (ctl & 2) ? CORRAL__ROLE__ROLE_AGENT : CORRAL__ROLE__ROLE_CLIENT));
    /* the server may close mid-write: that is fine */
    raw_write(fd, data, size);
    shutdown(fd, SHUT_WR);
    /* drain until the server closes its side */
    char buf[4096];
    for (int i = 0;; i++) {
        assert(i < 200000);
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN))
            break;
    }
    close(fd);

    /* the well-behaved client is still served */
    int before = good_answers;
    Corral__StatusRequest sr = CORRAL__STATUS_REQUEST__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = cr_conn_next_id(good);
    e.body_case = CORRAL__ENVELOPE__BODY_STATUS_REQUEST;
    e.status_request = &sr;
    assert(cr_conn_send(good, &e) == 0);
    for (int i = 0; i < 200000 && good_answers == before; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert(good_answers == before + 1);
    return 0;
}
