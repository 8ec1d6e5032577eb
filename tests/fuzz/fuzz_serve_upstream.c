/* libFuzzer target for the router's reading of a replica's reply
 * (serve/upstream.c): any bytes as the replica's answer (status line,
 * headers, chunked or sized body) must come out as a status and a body
 * no longer than what was sent, or a failure; never crash or hang. */
#include "serve/serve.h"
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 60000) /* what one socket buffer holds: no writer thread needed */
        return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return 0;
    int big = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    if (size && write(sv[1], data, size) != (ssize_t)size) {
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    shutdown(sv[1], SHUT_WR);
    serve_upstream_t *u = calloc(1, sizeof(*u));
    u->fd = sv[0];
    u->content_length = -1;
    u->chunk_left = -1;
    int err = serve_upstream_request(u, "POST", "/v1/completions", "h", "application/json", NULL,
                                     "{}", 2, 1000);
    if (!err) {
        if (u->status < 100 || u->status > 599)
            __builtin_trap();
        char buf[4096];
        size_t total = 0;
        ssize_t n;
        while ((n = serve_upstream_read(u, buf, sizeof(buf), 1000)) > 0)
            total += (size_t)n;
        if (total > size)
            __builtin_trap();
    }
    serve_upstream_close(u);
    free(u);
    close(sv[1]);
    return 0;
}
