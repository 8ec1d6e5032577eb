/* The router's HTTP/1.1 request parsing (serve/http.h). RFC 9112: the
 * request line, header fields (no obsolete line folding), the body's
 * framing (Content-Length or chunked; both at once is refused, as a
 * request smuggling attempt), persistence (HTTP/1.1 keeps the connection
 * unless "close", HTTP/1.0 closes it unless "keep-alive"). */
#include "http.h"
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool tchar(unsigned char c)
{
    return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Copies v[0..n) into dst (size), cut; sets *cut when it was. */
static void copy_val(char *dst, size_t size, const char *v, size_t n, bool *cut)
{
    if (n >= size) {
        n = size - 1;
        *cut = true;
    }
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* Whether the comma-separated list v[0..n) has token t (case-insensitive). */
static bool has_token(const char *v, size_t n, const char *t)
{
    size_t tl = strlen(t), i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(v + s, t, tl) == 0)
            return true;
    }
    return false;
}

static long fail(serve_http_req_t *o, unsigned status, const char *msg)
{
    o->err_status = status;
    o->err_msg = msg;
    return -1;
}

/* The end of the line that starts at p (its LF) in buf[..end), NULL none. */
static const char *line_end(const char *p, const char *end)
{
    return memchr(p, '\n', (size_t)(end - p));
}

long serve_http_parse_head(const char *buf, size_t len, serve_http_req_t *o)
{
    memset(o, 0, sizeof(*o));
    o->length = -1;
    size_t lim = len < SERVE_HTTP_HEAD_MAX ? len : SERVE_HTTP_HEAD_MAX;
    const char *p = buf, *end = buf + lim;
    /* the head must end (an empty line) within the limit */
    const char *nl;
    while (p < end && (*p == '\r' || *p == '\n')) {
        if (*p == '\r' && (p + 1 >= end || p[1] != '\n'))
            break;
        p += *p == '\r' ? 2 : 1;
    }
    nl = line_end(p, end);
    if (!nl)
        goto more;
    /* request-line: method SP request-target SP HTTP-version */
    const char *le = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
    const char *sp1 = memchr(p, ' ', (size_t)(le - p));
    if (!sp1 || sp1 == p)
        return fail(o, 400, "the request line is not METHOD PATH HTTP/1.1");
    for (const char *m = p; m < sp1; m++)
        if (!tchar((unsigned char)*m))
            return fail(o, 400, "the request's method is not a token");
    if ((size_t)(sp1 - p) >= sizeof(o->method))
        return fail(o, 501, "unknown method; the router takes GET and POST");
    memcpy(o->method, p, (size_t)(sp1 - p));
    const char *t = sp1 + 1;
    const char *sp2 = memchr(t, ' ', (size_t)(le - t));
    if (!sp2 || sp2 == t)
        return fail(o, 400, "the request line is not METHOD PATH HTTP/1.1");
    for (const char *c = t; c < sp2; c++)
        if ((unsigned char)*c <= ' ' || (unsigned char)*c == 0x7f)
            return fail(o, 400, "the request's target has a control character or space");
    const char *q = memchr(t, '?', (size_t)(sp2 - t));
    size_t pl = (size_t)((q ? q : sp2) - t);
    copy_val(o->path, sizeof(o->path), t, pl, &o->path_long);
    const char *v = sp2 + 1;
    if (le - v != 8 || memcmp(v, "HTTP/", 5) != 0 || !isdigit((unsigned char)v[5]) || v[6] != '.' ||
        !isdigit((unsigned char)v[7]))
        return fail(o, 400, "the request line does not end in HTTP/1.1 or HTTP/1.0");
    if (v[5] != '1')
        return fail(o, 505, "HTTP version not supported; use HTTP/1.1");
    o->minor = v[7] == '0' ? 0 : 1;
    bool conn_close = false, conn_keep = false, te = false;
    unsigned nh = 0;
    p = nl + 1;
    for (;;) {
        nl = line_end(p, end);
        if (!nl)
            goto more;
        le = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        if (le == p)
            break; /* the empty line: the head's end */
        if (++nh > SERVE_HTTP_HEADERS_MAX)
            return fail(o, 431, "too many header fields");
        if (*p == ' ' || *p == '\t')
            return fail(o, 400, "a header field is folded over lines (obsolete); send it on one");
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (!colon || colon == p)
            return fail(o, 400, "a header line has no 'Name:'");
        for (const char *c = p; c < colon; c++)
            if (!tchar((unsigned char)*c))
                return fail(o, 400, "a header field's name is not a token");
        size_t nlen = (size_t)(colon - p);
        const char *val = colon + 1, *ve = le;
        while (val < ve && (*val == ' ' || *val == '\t'))
            val++;
        while (ve > val && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        size_t vl = (size_t)(ve - val);
        for (const char *c = val; c < ve; c++)
            if ((unsigned char)*c < ' ' && *c != '\t')
                return fail(o, 400, "a header field's value has a control character");
#define IS(name) (nlen == sizeof(name) - 1 && strncasecmp(p, name, nlen) == 0)
        if (IS("Content-Length")) {
            if (vl == 0 || vl > 18)
                return fail(o, 400, "Content-Length is not a number of bytes");
            long long n = 0;
            for (size_t i = 0; i < vl; i++) {
                if (!isdigit((unsigned char)val[i]))
                    return fail(o, 400, "Content-Length is not a number of bytes");
                n = n * 10 + (val[i] - '0');
            }
            if (o->length >= 0 && o->length != n)
                return fail(o, 400, "two different Content-Length fields");
            o->length = n;
        } else if (IS("Transfer-Encoding")) {
            /* only "chunked", once, is understood */
            if (te || vl != 7 || strncasecmp(val, "chunked", 7) != 0)
                return fail(o, 501,
                            "Transfer-Encoding other than chunked is not supported; send "
                            "Content-Length or chunked");
            te = true;
        } else if (IS("Connection")) {
            conn_close |= has_token(val, vl, "close");
            conn_keep |= has_token(val, vl, "keep-alive");
        } else if (IS("Expect")) {
            if (vl != 12 || strncasecmp(val, "100-continue", 12) != 0)
                return fail(o, 417, "the router understands only Expect: 100-continue");
            o->expect_continue = true;
        } else if (IS("Content-Type")) {
            copy_val(o->content_type, sizeof(o->content_type), val, vl, &o->long_value);
        } else if (IS("Authorization")) {
            copy_val(o->authorization, sizeof(o->authorization), val, vl, &o->long_value);
        } else if (IS("X-Corral-Admin")) {
            copy_val(o->admin, sizeof(o->admin), val, vl, &o->long_value);
        }
#undef IS
        p = nl + 1;
    }
    if (te && o->length >= 0)
        return fail(o, 400, "both Content-Length and Transfer-Encoding; send one");
    if (te && o->minor == 0)
        return fail(o, 400, "chunked Transfer-Encoding in an HTTP/1.0 request");
    o->chunked = te;
    o->keepalive = o->minor ? !conn_close : conn_keep && !conn_close;
    if (o->minor == 0)
        o->expect_continue = false; /* 100 Continue is HTTP/1.1's */
    return (long)(nl + 1 - buf);
more:
    if (len >= SERVE_HTTP_HEAD_MAX)
        return fail(o, 431, "the request's head (request line and header fields) is over 16 KiB");
    return 0;
}

/* ---- chunked bodies ---- */
enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER, CH_DONE };

void serve_http_chunked_init(serve_http_chunked_t *c)
{
    memset(c, 0, sizeof(*c));
    c->state = CH_SIZE;
}

static long chunk_fail(serve_http_chunked_t *c, const char *why)
{
    c->err = why;
    return -1;
}

long serve_http_chunked_feed(serve_http_chunked_t *c, const char *in, size_t n, char *data,
                             size_t room, size_t *ndata)
{
    size_t i = 0;
    while (i < n && c->state != CH_DONE) {
        unsigned char ch = (unsigned char)in[i];
        switch (c->state) {
        case CH_SIZE:
            if (isxdigit(ch)) {
                if (c->left >> 56)
                    return chunk_fail(c, "a chunk's size is too large");
                c->left =
                    c->left * 16 + (uint64_t)(isdigit(ch) ? ch - '0' : (ch | 0x20) - 'a' + 10);
                c->digits = true;
            } else if (!c->digits) {
                return chunk_fail(c, "a chunk's size line has no hex size");
            } else if (ch == ';' || ch == ' ' || ch == '\t') {
                c->state = CH_EXT;
            } else if (ch == '\r') {
                c->state = CH_SIZE_LF;
            } else if (ch == '\n') {
                goto size_done;
            } else {
                return chunk_fail(c, "a chunk's size line is not hex digits");
            }
            if (++c->line > SERVE_HTTP_LINE_MAX)
                return chunk_fail(c, "a chunk's size line is too long");
            i++;
            break;
        case CH_EXT: /* chunk extensions: ignored, bounded */
            if (ch == '\n')
                goto size_done;
            if (++c->line > SERVE_HTTP_LINE_MAX)
                return chunk_fail(c, "a chunk's size line is too long");
            if (ch == '\r')
                c->state = CH_SIZE_LF;
            i++;
            break;
        case CH_SIZE_LF:
            if (ch != '\n')
                return chunk_fail(c, "a chunk's size line does not end in CRLF");
        size_done:
            i++;
            c->line = 0;
            c->digits = false;
            c->state = c->left ? CH_DATA : CH_TRAILER;
            break;
        case CH_DATA: {
            size_t take = n - i;
            if (take > c->left)
                take = (size_t)c->left;
            if (take > room - *ndata)
                take = room - *ndata;
            if (take == 0)
                return (long)i; /* room is full */
            memmove(data + *ndata, in + i, take);
            *ndata += take;
            c->left -= take;
            i += take;
            if (!c->left)
                c->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
            if (ch == '\n') {
                c->state = CH_SIZE;
            } else if (ch == '\r') {
                c->state = CH_DATA_LF;
            } else {
                return chunk_fail(c, "a chunk's data is longer than its size");
            }
            i++;
            break;
        case CH_DATA_LF:
            if (ch != '\n')
                return chunk_fail(c, "a chunk's data does not end in CRLF");
            c->state = CH_SIZE;
            i++;
            break;
        case CH_TRAILER:
            /* trailer fields, ignored, up to an empty line; c->digits: the
             * current line has a byte other than CR */
            if (++c->line > SERVE_HTTP_LINE_MAX)
                return chunk_fail(c, "the chunked body's trailer fields are too long");
            if (ch == '\n') {
                if (!c->digits)
                    c->state = CH_DONE;
                c->digits = false;
            } else if (ch != '\r') {
                c->digits = true;
            }
            i++;
            break;
        }
    }
    c->done = c->state == CH_DONE;
    return (long)i;
}

const char *serve_http_reason(unsigned status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 417:
        return "Expectation Failed";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "";
    }
}
