/* The router's HTTP/1.1 client to a replica: a request on a new
 * connection or on one kept from an earlier request (the router's pool,
 * router.c), the reply's headers read whole (bounded), its body
 * handed out as it comes, de-chunked, so that a stream passes through
 * piece by piece. Two ways to wait: with a timeout in milliseconds the
 * calls block (poll; the CLI's and health checks' use), with 0 they never
 * block and say -EAGAIN where the socket has nothing yet, keeping where
 * they were (the router's event loops, router.c). */
#include "serve.h"
#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEADERS_MAX 8192

static int wait_fd(int fd, short ev, int timeout_ms)
{
    if (timeout_ms == 0)
        return -EAGAIN; /* the caller's event loop waits */
    struct pollfd p = {.fd = fd, .events = ev};
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n > 0)
            return 0;
        if (n == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

static void upstream_init(serve_upstream_t *u, int fd)
{
    memset(u, 0, offsetof(serve_upstream_t, buf)); /* buf (last) needs no zeros */
    u->fd = fd;
    u->content_length = -1;
    u->chunk_left = -1;
}

void serve_upstream_attach(serve_upstream_t *u, int fd)
{
    upstream_init(u, fd);
}

bool serve_upstream_reusable(const serve_upstream_t *u)
{
    return u->fd >= 0 && u->keepalive && u->reusable && u->done && !u->failed && u->off == u->len;
}

int serve_upstream_connect(serve_upstream_t *u, const char *host, unsigned port, int timeout_ms)
{
    int err = serve_upstream_connect_start(u, host, port);
    if (err == -EINPROGRESS)
        err = serve_upstream_connect_end(u, wait_fd(u->fd, POLLOUT, timeout_ms));
    return err;
}

int serve_upstream_connect_end(serve_upstream_t *u, int err)
{
    int so = 0;
    socklen_t sl = sizeof(so);
    if (!err && getsockopt(u->fd, SOL_SOCKET, SO_ERROR, &so, &sl) == 0 && so)
        err = -so;
    if (err)
        serve_upstream_close(u);
    return err;
}

int serve_upstream_connect_start(serve_upstream_t *u, const char *host, unsigned port)
{
    upstream_init(u, -1);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    if (getaddrinfo(host, ps, &hints, &ai) != 0 || !ai)
        return -EHOSTUNREACH;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int err = fd < 0 ? -errno : 0;
    if (!err && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
        err = -errno;
    freeaddrinfo(ai);
    if (err && err != -EINPROGRESS) {
        if (fd >= 0)
            close(fd);
        return err;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    u->fd = fd;
    return err;
}

static int send_all(int fd, const char *p, size_t n, int timeout_ms)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            int err = wait_fd(fd, POLLOUT, timeout_ms);
            if (err)
                return err;
            continue;
        }
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads more into u->buf after what is held; 0 bytes at EOF. */
static ssize_t fill(serve_upstream_t *u, int timeout_ms)
{
    if (u->off > 0 && u->off == u->len)
        u->off = u->len = 0;
    if (u->len == sizeof(u->buf)) {
        memmove(u->buf, u->buf + u->off, u->len - u->off);
        u->len -= u->off;
        u->off = 0;
        if (u->len == sizeof(u->buf))
            return -E2BIG;
    }
    for (;;) {
        ssize_t r = recv(u->fd, u->buf + u->len, sizeof(u->buf) - u->len, 0);
        if (r >= 0) {
            u->len += (size_t)r;
            return r;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        /* about to wait for more: acknowledge what came at once (Linux
         * sends the delayed ACK now, and clears the flag again later): an
         * engine that writes a stream's small events with Nagle on
         * (cpp-httplib, Python's http.server) waits for our ACK before its
         * next one, and on a kept-alive connection the kernel would delay
         * it 40 ms. A reply read whole in one go needs none. */
        int one = 1;
        setsockopt(u->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
        int err = wait_fd(u->fd, POLLIN, timeout_ms);
        if (err)
            return err;
    }
}

static bool header_is(const char *line, size_t n, const char *name, const char **val)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return false;
    const char *v = line + k + 1;
    while (v < line + n && (*v == ' ' || *v == '\t'))
        v++;
    *val = v;
    return true;
}

/* A Connection header's value holds the token "close" (any case). */
static bool says_close(const char *v, size_t n)
{
    for (size_t i = 0; i + 5 <= n; i++)
        if (strncasecmp(v + i, "close", 5) == 0)
            return true;
    return false;
}

int serve_upstream_head(const serve_upstream_t *u, const char *method, const char *path,
                        const char *host, const char *content_type, const char *extra, size_t len,
                        char *dst, size_t size)
{
    int n = snprintf(dst, size,
                     "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: %s\r\nAccept: */*\r\n"
                     "%s%s%s%sContent-Length: %zu\r\n\r\n",
                     method, path, host, u->keepalive ? "keep-alive" : "close",
                     content_type ? "Content-Type: " : "", content_type ? content_type : "",
                     content_type ? "\r\n" : "", extra ? extra : "", len);
    return n < 0 || (size_t)n >= size ? CR_EINVAL : n;
}

int serve_upstream_request(serve_upstream_t *u, const char *method, const char *path,
                           const char *host, const char *content_type, const char *extra,
                           const char *body, size_t len, int timeout_ms)
{
    char head[1024];
    int n =
        serve_upstream_head(u, method, path, host, content_type, extra, len, head, sizeof(head));
    if (n < 0)
        return n;
    int err = send_all(u->fd, head, (size_t)n, timeout_ms);
    if (!err && len)
        err = send_all(u->fd, body, len, timeout_ms);
    if (err)
        return -EPIPE; /* nothing came back: another replica may take it */
    return serve_upstream_read_headers(u, timeout_ms);
}

/* "HTTP/D.D SSS" (then a space and a reason, or the line's end) in the
 * first line of p[0..n): the whole status line and nothing past it, each
 * field exactly as RFC 9112 writes it (sscanf's %d skipped any whitespace,
 * the line's end included, and read on into the body, which need not be
 * there yet on a non-blocking read). 0, or -1 if it is not one. */
static int status_line(const char *p, size_t n, int *major, int *minor, int *status)
{
    const char *nl = memchr(p, '\n', n);
    size_t ln = nl ? (size_t)(nl - p) : n;
    if (ln && p[ln - 1] == '\r')
        ln--;
    if (ln < 12 || memcmp(p, "HTTP/", 5) != 0 || !isdigit((unsigned char)p[5]) || p[6] != '.' ||
        !isdigit((unsigned char)p[7]) || p[8] != ' ' || !isdigit((unsigned char)p[9]) ||
        !isdigit((unsigned char)p[10]) || !isdigit((unsigned char)p[11]) ||
        (ln > 12 && p[12] != ' '))
        return -1;
    *major = p[5] - '0';
    *minor = p[7] - '0';
    *status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    return *status >= 100 && *status <= 599 ? 0 : -1;
}

int serve_upstream_read_headers(serve_upstream_t *u, int timeout_ms)
{
    /* the status line and headers (what came so far is looked at again
     * whole: they are at most HEADERS_MAX) */
    char *end = u->len ? memmem(u->buf, u->len, "\r\n\r\n", 4) : NULL;
    while (!end) {
        if (u->len >= HEADERS_MAX)
            return CR_EPARSE;
        ssize_t r = fill(u, timeout_ms);
        if (r == -EAGAIN)
            return -EAGAIN;
        if (r == 0 || r == -ECONNRESET || r == -EPIPE)
            return u->len ? CR_EPARSE : -EPIPE;
        if (r < 0)
            return r == -E2BIG ? CR_EPARSE : (int)r;
        end = memmem(u->buf, u->len, "\r\n\r\n", 4);
    }
    size_t hlen = (size_t)(end - u->buf) + 4;
    int major, minor, status;
    if (status_line(u->buf, (size_t)(end - u->buf), &major, &minor, &status) < 0)
        return CR_EPARSE;
    u->status = status;
    /* HTTP/1.1 keeps the connection unless a side says close */
    u->reusable = major == 1 && minor >= 1;
    for (char *line = memchr(u->buf, '\n', hlen); line && line < end;) {
        line++;
        char *nl = memchr(line, '\n', (size_t)(end + 2 - line));
        if (!nl)
            break;
        size_t ln = (size_t)(nl - line);
        if (ln && line[ln - 1] == '\r')
            ln--;
        const char *v;
        if (header_is(line, ln, "Content-Type", &v))
            snprintf(u->content_type, sizeof(u->content_type), "%.*s", (int)(line + ln - v), v);
        else if (header_is(line, ln, "Transfer-Encoding", &v))
            u->chunked = strncasecmp(v, "chunked", 7) == 0;
        else if (header_is(line, ln, "Content-Length", &v)) {
            /* digits to the line's end and nothing else (strtoll skipped
             * whitespace, the line's end included, and read on) */
            const char *q = v, *qe = line + ln;
            while (qe > q && (qe[-1] == ' ' || qe[-1] == '\t'))
                qe--;
            long long cl = 0;
            if (q == qe)
                return CR_EPARSE;
            for (; q < qe; q++) {
                if (!isdigit((unsigned char)*q) || cl > (LLONG_MAX - 9) / 10)
                    return CR_EPARSE;
                cl = cl * 10 + (*q - '0');
            }
            u->content_length = cl;
        } else if (header_is(line, ln, "Connection", &v) && says_close(v, (size_t)(line + ln - v)))
            u->reusable = false;
        line = nl;
    }
    if (u->chunked)
        u->content_length = -1;
    if (!u->chunked && u->content_length < 0)
        u->reusable = false; /* the body ends when the connection does */
    if (status < 200)
        u->reusable = false; /* an interim reply: not read past */
    u->off = hlen;
    if (u->content_length == 0 || status == 204 || status == 304)
        u->done = true;
    return 0;
}

/* The longest line of a chunked body taken, its CR included: the same
 * bound whether the line came whole or in pieces (a longer one found
 * whole was taken while the same bytes in pieces were refused). */
#define CHUNK_LINE_MAX 256

/* The next line of a chunked body (a size line or a trailer), without its
 * CRLF: its length, or <0. */
static ssize_t take_line(serve_upstream_t *u, char *dst, size_t size, int timeout_ms)
{
    for (;;) {
        char *nl = memchr(u->buf + u->off, '\n', u->len - u->off);
        if (nl) {
            size_t n = (size_t)(nl - (u->buf + u->off));
            size_t keep = n && nl[-1] == '\r' ? n - 1 : n;
            if (n > CHUNK_LINE_MAX || keep >= size)
                return CR_EPARSE;
            memcpy(dst, u->buf + u->off, keep);
            dst[keep] = '\0';
            u->off += n + 1;
            return (ssize_t)keep;
        }
        if (u->len - u->off > CHUNK_LINE_MAX)
            return CR_EPARSE;
        ssize_t r = fill(u, timeout_ms);
        if (r <= 0)
            return r == 0 ? -ECONNRESET : r; /* -EAGAIN: nothing consumed */
    }
}

ssize_t serve_upstream_read(serve_upstream_t *u, char *dst, size_t size, int timeout_ms)
{
    while (!u->done && !u->failed) {
        if (u->chunked && u->chunk_left <= 0) {
            /* each step keeps its place, so that -EAGAIN resumes it */
            char line[300];
            if (u->chunk_left == 0) { /* the CRLF after a chunk's data */
                ssize_t r = take_line(u, line, sizeof(line), timeout_ms);
                if (r == -EAGAIN)
                    return -EAGAIN;
                if (r != 0) {
                    u->failed = true;
                    break;
                }
                u->chunk_left = -1;
            }
            if (!u->trailers) {
                ssize_t r = take_line(u, line, sizeof(line), timeout_ms);
                if (r == -EAGAIN)
                    return -EAGAIN;
                char *e;
                long long n = r > 0 ? strtoll(line, &e, 16) : -1;
                if (r <= 0 || n < 0 || e == line) {
                    u->failed = true;
                    break;
                }
                if (n > 0) {
                    u->chunk_left = n;
                    continue;
                }
                u->trailers = true;
            }
            /* the trailers, to the empty line that ends the reply; a
             * connection whose end did not come is not used again */
            bool end = false;
            while (!end && u->ntrailers < 64) {
                ssize_t t = take_line(u, line, sizeof(line), timeout_ms);
                if (t == -EAGAIN)
                    return -EAGAIN;
                if (t < 0)
                    break;
                u->ntrailers++;
                end = t == 0;
            }
            if (!end)
                u->reusable = false;
            u->done = true;
            break;
        }
        size_t have = u->len - u->off;
        if (have == 0) {
            ssize_t r = fill(u, timeout_ms);
            if (r == -EAGAIN)
                return -EAGAIN;
            if (r == 0) {
                /* EOF ends a body without length or chunks; else it is a break */
                if (!u->chunked && u->content_length < 0)
                    u->done = true;
                else
                    u->failed = true;
                break;
            }
            if (r < 0) {
                u->failed = true;
                return r == -ETIMEDOUT ? r : 0;
            }
            continue;
        }
        size_t n = have < size ? have : size;
        if (u->chunked && (long long)n > u->chunk_left)
            n = (size_t)u->chunk_left;
        if (!u->chunked && u->content_length >= 0 && (long long)n > u->content_length - u->got)
            n = (size_t)(u->content_length - u->got);
        memcpy(dst, u->buf + u->off, n);
        u->off += n;
        u->got += (long long)n;
        if (u->chunked)
            u->chunk_left -= (long long)n;
        if (!u->chunked && u->content_length >= 0 && u->got >= u->content_length)
            u->done = true;
        return (ssize_t)n;
    }
    return 0;
}

void serve_upstream_close(serve_upstream_t *u)
{
    if (u->fd >= 0)
        close(u->fd);
    u->fd = -1;
}

bool serve_upstream_healthy(const char *host, unsigned port, const char *path, int timeout_ms)
{
    serve_upstream_t *u = cr_malloc(sizeof(*u));
    bool ok = serve_upstream_connect(u, host, port, timeout_ms) == 0 &&
              serve_upstream_request(u, "GET", path, host, NULL, NULL, NULL, 0, timeout_ms) == 0 &&
              u->status == 200;
    serve_upstream_close(u);
    free(u);
    return ok;
}
