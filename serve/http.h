/* serve/http.c: the router's HTTP/1.1 server side, parsing what a client
 * sends (docs/serve.md "The router"). Pure functions over bytes: no
 * socket, no lock, no clock, so that they can be fuzzed alone
 * (tests/fuzz/fuzz_serve_http.c). Everything an outsider can grow is
 * bounded: the request head by SERVE_HTTP_HEAD_MAX, a chunk-size line and
 * the trailers by SERVE_HTTP_LINE_MAX. */
#ifndef CORRAL_SERVE_HTTP_H
#define CORRAL_SERVE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_HTTP_HEAD_MAX (16u << 10)
#define SERVE_HTTP_LINE_MAX 4096u
#define SERVE_HTTP_HEADERS_MAX 100u

/* A request's head, what the router needs of it (copied out, cut to the
 * sizes here; a value longer than its field sets `long_value`). */
typedef struct serve_http_req {
    char method[16];
    char path[256];   /* the target up to '?' (the query is dropped) */
    bool path_long;   /* the target was longer than path */
    int minor;        /* HTTP/1.minor: 0 or 1 */
    bool keepalive;   /* the connection may carry another request */
    bool chunked;     /* Transfer-Encoding: chunked */
    long long length; /* Content-Length; -1 none */
    bool expect_continue;
    char content_type[128];
    char authorization[512];
    char admin[128]; /* X-Corral-Admin */
    bool long_value; /* one of the three above was cut */
    /* on an error: the status to answer with and why (a literal) */
    unsigned err_status;
    const char *err_msg;
} serve_http_req_t;

/* Parses the request head at the start of buf[0..len): its length (the
 * body starts there) with *out filled, 0 when the head has not come whole
 * yet (more bytes are needed, and len is under SERVE_HTTP_HEAD_MAX), or -1
 * with out->err_status (400, 413 too large a body is not decided here, 431
 * a head over SERVE_HTTP_HEAD_MAX, 417, 501, 505) and out->err_msg. Empty
 * lines before the request line (RFC 9112 2.2) are skipped as part of the
 * head. */
long serve_http_parse_head(const char *buf, size_t len, serve_http_req_t *out);

/* A chunked request body, decoded as it comes. */
typedef struct serve_http_chunked {
    int state;
    uint64_t left;   /* bytes left in the current chunk */
    unsigned line;   /* bytes of the current size line or trailer section */
    bool digits;     /* the size line had a hex digit */
    bool done;       /* the last chunk and the trailers came */
    const char *err; /* why the body is refused (a literal); NULL none */
} serve_http_chunked_t;

void serve_http_chunked_init(serve_http_chunked_t *c);
/* Decodes in[0..n): the data bytes are moved to the front of dst's room
 * (data[*ndata...) grows, at most room bytes in all: copies in place are
 * fine, dst may be in), returns the bytes of in consumed; stops at the
 * body's end (c->done) or when room is full. -1 on a malformed body
 * (c->err). */
long serve_http_chunked_feed(serve_http_chunked_t *c, const char *in, size_t n, char *data,
                             size_t room, size_t *ndata);

/* The reason phrase of a status code ("OK", "Not Found"; "" unknown). */
const char *serve_http_reason(unsigned status);

#endif
