/* libFuzzer target for the router's HTTP/1.1 request parsing
 * (serve/http.c): any bytes as what a client sends. A head parses (its
 * length within the input, the same head again from exactly those bytes,
 * "more" from one byte fewer) or is refused with a status and a message;
 * a chunked body after it decodes the same whole and fed one byte at a
 * time, within its room. Never crash, leak, hang or read past the input. */
#include "serve/http.h"
#include <stdlib.h>
#include <string.h>

static void check_fields(const serve_http_req_t *h)
{
    if (!memchr(h->method, 0, sizeof(h->method)) || !memchr(h->path, 0, sizeof(h->path)) ||
        !memchr(h->content_type, 0, sizeof(h->content_type)) ||
        !memchr(h->authorization, 0, sizeof(h->authorization)) ||
        !memchr(h->admin, 0, sizeof(h->admin)))
        __builtin_trap();
    if (h->minor != 0 && h->minor != 1)
        __builtin_trap();
    if (h->chunked && h->length >= 0)
        __builtin_trap();
}

/* Decodes in[0..n) in pieces of step bytes (0: whole) into out (room):
 * the bytes consumed, or -1. */
static long decode(const char *in, size_t n, size_t step, char *out, size_t room, size_t *nd,
                   bool *done)
{
    serve_http_chunked_t c;
    serve_http_chunked_init(&c);
    size_t i = 0;
    *nd = 0;
    while (i < n && !c.done) {
        size_t k = step && n - i > step ? step : n - i;
        size_t before = *nd;
        long used = serve_http_chunked_feed(&c, in + i, k, out, room, nd);
        if (used < 0) {
            if (!c.err)
                __builtin_trap();
            return -1;
        }
        if ((size_t)used > k || *nd > room || *nd - before > (size_t)used)
            __builtin_trap();
        i += (size_t)used;
        if (used == 0 && *nd == room)
            break; /* full */
        if (used == 0 && !c.done)
            __builtin_trap(); /* no progress with room left */
    }
    *done = c.done;
    return (long)i;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    serve_http_req_t h;
    long k = serve_http_parse_head(buf, size, &h);
    if (k < 0) {
        if (!h.err_msg || !h.err_msg[0] || h.err_status < 400 || h.err_status > 505)
            __builtin_trap();
        return 0;
    }
    if (k == 0) {
        if (size >= SERVE_HTTP_HEAD_MAX)
            __builtin_trap();
        return 0;
    }
    if ((size_t)k > size || (size_t)k > SERVE_HTTP_HEAD_MAX)
        __builtin_trap();
    check_fields(&h);
    serve_http_req_t again;
    if (serve_http_parse_head(buf, (size_t)k, &again) != k || memcmp(&again, &h, sizeof(h)) != 0)
        __builtin_trap();
    if (serve_http_parse_head(buf, (size_t)k - 1, &again) != 0)
        __builtin_trap();
    if (!h.chunked)
        return 0;
    const char *body = buf + k;
    size_t n = size - (size_t)k, room = n + 1;
    char *a = malloc(room), *b = malloc(room);
    size_t na, nb;
    bool da, db;
    long ua = decode(body, n, 0, a, room, &na, &da);
    long ub = decode(body, n, 1, b, room, &nb, &db);
    if (ua != ub || (ua >= 0 && (na != nb || da != db || memcmp(a, b, na) != 0)))
        __builtin_trap();
    /* in place, as the router decodes */
    char *c = malloc(n + 1);
    memcpy(c, body, n);
    size_t nc = 0;
    serve_http_chunked_t ch;
    serve_http_chunked_init(&ch);
    long uc = serve_http_chunked_feed(&ch, c, n, c, n, &nc);
    if (ua >= 0 && (uc != ua || nc != na || memcmp(c, a, nc) != 0))
        __builtin_trap();
    free(a);
    free(b);
    free(c);
    return 0;
}
