/* Fuzz a TLS listener (net/conn.c over net/tls.h) through a real TCP
 * socket: each input is one peer's bytes (a TLS ClientHello mutated, a
 * plain frame, garbage), then the peer stops writing. Whatever the bytes,
 * the server must close that connection or keep waiting within its
 * deadline, never crash or grow; a pinned TLS client connected for the
 * whole run must still get its answers. The first byte chooses: odd also
 * parses the rest as a fingerprint (cr_tls_fp_parse). */
#undef NDEBUG
#include "net/net.h"
#include "net/tls.h"
#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static uv_loop_t loop;
static cr_net_t *server, *client;
static cr_conn_t *good;
static int good_answers, port;
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
    assert(!"the well-behaved TLS client was disconnected");
}

static void setup(void)
{
    uv_loop_init(&loop);
    cr_log_set_level(CR_LOG_ERROR); /* the fuzzer makes every warning happen */
    char why[512];
    const cr_tls_ops_t *t = cr_tls_load(why, sizeof(why));
    if (!t) {
        fprintf(stderr, "%s\n", why);
        abort();
    }
    char *cert, *key;
    uint8_t fp[CR_TLS_FP_LEN];
    assert(t->selfsigned("fuzz head", &cert, &key, why, sizeof(why)) == 0);
    assert(t->fingerprint(cert, strlen(cert), fp, why, sizeof(why)) == 0);
    cr_net_config_t cfg = {.token = token,
                           .name = "fuzz-head",
                           .max_frame = 1 << 16,
                           .handshake_timeout_ms = 60000,
                           .tls_cert_pem = cert,
                           .tls_key_pem = key};
    cr_net_callbacks_t scb = {.on_message = sv_message};
    server = cr_net_new(&loop, &cfg, &scb, NULL);
    free(cert);
    free(key);
    assert(server && cr_net_listen_tcp_tls(server, NULL, 0, &port, true) == 0);
    cr_net_config_t ccfg = {.token = token, .name = "fuzz-client", .tls_pin = fp};
    cr_net_callbacks_t ccb = {.on_message = cl_message, .on_close = cl_close};
    client = cr_net_new(&loop, &ccfg, &ccb, NULL);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    assert(cr_net_connect(client, addr, CORRAL__ROLE__ROLE_CLIENT, &good) == 0);
    for (int i = 0; i < 200000 && !cr_conn_is_ready(good); i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        poll(NULL, 0, 0);
    }
    assert(cr_conn_is_ready(good));
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
    if (ctl & 1) {
        char s[200];
        size_t n = size < sizeof(s) - 1 ? size : sizeof(s) - 1;
        memcpy(s, data, n);
        s[n] = '\0';
        uint8_t fp[CR_TLS_FP_LEN];
        if (cr_tls_fp_parse(s, fp) == 0) { /* what parses formats back to the same bytes */
            char text[96];
            uint8_t back[CR_TLS_FP_LEN];
            cr_tls_fp_format(fp, text, sizeof(text));
            assert(cr_tls_fp_parse(text, back) == 0 && memcmp(fp, back, sizeof(fp)) == 0);
        }
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* from a source address of its own each time, round the 127.1/16 block:
     * the server closes first, and its TIME_WAIT pairs would use up one
     * address's ports after some ten thousand inputs */
    static uint32_t seq;
    seq++;
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(0x7f010000u | (seq & 0xffff) | (seq & 0xffff ? 0 : 1));
    int one = 1; /* the port picked at connect, per destination */
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    assert(bind(fd, (struct sockaddr *)&src, sizeof(src)) == 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int cr = connect(fd, (struct sockaddr *)&a, sizeof(a));
    if (cr < 0 && errno == EINTR) { /* libFuzzer's timer; the connect goes on */
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        while (poll(&pfd, 1, 1000) < 0 && errno == EINTR)
            ;
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        cr = soerr ? -1 : 0;
        errno = soerr;
    }
    if (cr < 0) {
        /* the machine is out of ports (other processes share them): not
         * the code under test's doing */
        if (errno != EADDRNOTAVAIL && errno != EADDRINUSE)
            fprintf(stderr, "connect: %s\n", strerror(errno));
        assert(errno == EADDRNOTAVAIL || errno == EADDRINUSE);
        close(fd);
        return 0;
    }
    for (size_t off = 0; off < size;) { /* the server may close mid-write: that is fine */
        ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN)
            break;
        if (w > 0)
            off += (size_t)w;
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    shutdown(fd, SHUT_WR);
    /* the server ends it: at our EOF at the latest */
    char buf[4096];
    for (int i = 0;; i++) {
        assert(i < 200000);
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN))
            break;
    }
    close(fd);

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
