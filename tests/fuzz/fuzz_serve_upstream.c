/* libFuzzer target for the router's reading of a replica's reply
 * (serve/upstream.c): any bytes as the replica's answer (status line,
 * headers, chunked or sized body) must come out as a status and a body
 * no longer than what was sent, or a failure; never crash or hang. And the
 * router's way (timeout 0, never blocking), fed the same bytes in pieces
 * with -EAGAIN between them, must give the same status and body as a
 * blocking read of them whole: each call resumes where the last stopped. */
#include "serve/serve.h"
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct got {
    int err, status;
    bool done, failed;
    size_t total;
    char body[65536];
} got_t;

static int pair(int sv[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    int big = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    return 0;
}

static serve_upstream_t *upstream(int fd)
{
    serve_upstream_t *u = calloc(1, sizeof(*u));
    u->fd = fd;
    u->content_length = -1;
    u->chunk_left = -1;
    return u;
}

static void take(serve_upstream_t *u, got_t *g, ssize_t n, const char *buf)
{
    if (n > 0 && g->total + (size_t)n <= sizeof(g->body))
        memcpy(g->body + g->total, buf, (size_t)n);
    if (n > 0)
        g->total += (size_t)n;
    g->done = u->done;
    g->failed = u->failed;
}

/* All of data at once, reads blocking. */
static void whole(const uint8_t *data, size_t size, got_t *g)
{
    int sv[2];
    if (pair(sv) != 0)
        return;
    if (size && write(sv[1], data, size) != (ssize_t)size)
        __builtin_trap();
    shutdown(sv[1], SHUT_WR);
    serve_upstream_t *u = upstream(sv[0]);
    g->err = serve_upstream_request(u, "POST", "/v1/completions", "h", "application/json", NULL,
                                    "{}", 2, 1000);
    if (!g->err) {
        g->status = u->status;
        if (u->status < 100 || u->status > 599)
            __builtin_trap();
        char buf[4096];
        ssize_t n;
        while ((n = serve_upstream_read(u, buf, sizeof(buf), 1000)) > 0)
            take(u, g, n, buf);
        take(u, g, 0, buf);
        if (g->total > size)
            __builtin_trap();
    }
    serve_upstream_close(u);
    free(u);
    close(sv[1]);
}

/* data in pieces (their sizes drawn from the data), reads never blocking. */
static void pieces(const uint8_t *data, size_t size, got_t *g)
{
    int sv[2];
    if (pair(sv) != 0)
        return;
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    serve_upstream_t *u = upstream(sv[0]);
    bool headers = false, end = false;
    size_t off = 0, k = 0;
    char buf[4096];
    g->err = -EAGAIN;
    while (!end) {
        if (off < size) {
            size_t n = 1 + data[k++ % size] % 97;
            if (n > size - off)
                n = size - off;
            if (write(sv[1], data + off, n) != (ssize_t)n)
                __builtin_trap();
            off += n;
        }
        if (off == size)
            shutdown(sv[1], SHUT_WR);
        for (;;) {
            if (!headers) {
                g->err = serve_upstream_read_headers(u, 0);
                if (g->err == -EAGAIN)
                    break;
                if (g->err) {
                    end = true;
                    break;
                }
                headers = true;
                g->status = u->status;
            }
            ssize_t n = serve_upstream_read(u, buf, sizeof(buf), 0);
            if (n == -EAGAIN)
                break;
            take(u, g, n, buf);
            if (n <= 0) {
                end = true;
                break;
            }
        }
        if (off == size && !end && g->err == -EAGAIN && !headers)
            __builtin_trap(); /* all sent and shut: no call may wait for more */
        if (off == size && !end && headers)
            __builtin_trap();
    }
    serve_upstream_close(u);
    free(u);
    close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 60000) /* what one socket buffer holds: no writer thread needed */
        return 0;
    static got_t a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    whole(data, size, &a);
    pieces(data, size, &b);
    /* the request's bytes are not in data: the blocking client's send
     * cannot fail on a socketpair, so both read the same reply */
    if (a.err != b.err || a.status != b.status || a.total != b.total || a.done != b.done ||
        a.failed != b.failed ||
        memcmp(a.body, b.body, a.total < sizeof(a.body) ? a.total : sizeof(a.body)) != 0)
        __builtin_trap();
    return 0;
}
