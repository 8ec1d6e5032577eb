/* What the router reads of the bodies that pass through it
 * (docs/serve.md "The router"): of a client's request, its "model", its
 * "stream" flag and the text of its prompt (for prefix affinity); of a
 * replica's reply, the engine's token counts ("usage", in the JSON reply
 * or in a stream's events, the last one that carries it). Both are fed by
 * outsiders, so both are bounded and fuzzed (tests/fuzz/fuzz_serve_request.c,
 * fuzz_serve_usage.c). */
#include "serve.h"
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

/* the bytes of a JSON reply kept to parse it whole; past them only its
 * last USAGE_TAIL bytes are kept, where OpenAI-style replies put "usage"
 * (what each request holds stays small however long the reply) */
#define USAGE_BODY_MAX (64u << 10)
#define USAGE_TAIL 4096
/* one event line of a stream (a longer one carries text, not usage) */
#define USAGE_LINE_MAX (64u << 10)

static void prefix_add(cr_buf_t *b, const char *s, size_t n)
{
    if (b->len >= SERVE_PREFIX_MAX)
        return;
    if (n > SERVE_PREFIX_MAX - b->len)
        n = SERVE_PREFIX_MAX - b->len;
    cr_buf_append(b, s, n);
}

/* A message's content: a string, or OpenAI's array of parts whose "text"
 * parts are what the engine sees first. */
static void content_add(cr_buf_t *b, json_t *content)
{
    if (json_is_string(content)) {
        prefix_add(b, json_string_value(content), json_string_length(content));
        return;
    }
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        json_t *t = json_object_get(part, "text");
        if (json_is_string(t))
            prefix_add(b, json_string_value(t), json_string_length(t));
        else
            prefix_add(b, "\x01", 1); /* an image or other part: a mark, not nothing */
    }
}

int serve_request_parse(const char *body, size_t len, serve_request_t *out)
{
    memset(out, 0, sizeof(*out));
    json_error_t je;
    json_t *j = json_loadb(body ? body : "", len, 0, &je);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        return SERVE_REQ_INVALID_JSON;
    }
    json_t *model = json_object_get(j, "model");
    if (!json_is_string(model) || json_string_length(model) == 0 ||
        strlen(json_string_value(model)) != json_string_length(model)) {
        json_decref(j);
        return SERVE_REQ_NO_MODEL;
    }
    out->model = cr_strdup(json_string_value(model));
    out->stream = json_is_true(json_object_get(j, "stream"));
    cr_buf_t b = {0};
    json_t *msgs = json_object_get(j, "messages"), *prompt = json_object_get(j, "prompt");
    if (json_is_array(msgs)) {
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m)
        {
            json_t *role = json_object_get(m, "role");
            if (json_is_string(role))
                prefix_add(&b, json_string_value(role), json_string_length(role));
            prefix_add(&b, "\n", 1);
            content_add(&b, json_object_get(m, "content"));
            prefix_add(&b, "\n", 1);
            if (b.len >= SERVE_PREFIX_MAX)
                break;
        }
    } else if (json_is_string(prompt)) {
        prefix_add(&b, json_string_value(prompt), json_string_length(prompt));
    } else if (json_is_array(prompt) && json_is_string(json_array_get(prompt, 0))) {
        /* a batch: its first prompt */
        json_t *p0 = json_array_get(prompt, 0);
        prefix_add(&b, json_string_value(p0), json_string_length(p0));
    }
    out->prefix = b.s;
    out->prefix_len = b.len;
    json_decref(j);
    return 0;
}

void serve_request_free(serve_request_t *q)
{
    free(q->model);
    free(q->prefix);
    memset(q, 0, sizeof(*q));
}

void serve_usage_init(serve_usage_t *u, bool sse)
{
    memset(u, 0, sizeof(*u));
    u->sse = sse;
    u->prompt = u->completion = -1;
}

/* the counts of j's "usage", when it has them */
static void usage_from(serve_usage_t *u, json_t *j)
{
    json_t *us = json_object_get(j, "usage");
    json_t *p = json_object_get(us, "prompt_tokens"), *c = json_object_get(us, "completion_tokens");
    if (json_is_integer(p) && json_integer_value(p) >= 0) {
        u->prompt = json_integer_value(p);
        /* embeddings have no completion */
        u->completion =
            json_is_integer(c) && json_integer_value(c) >= 0 ? json_integer_value(c) : 0;
    }
}

/* usage of one JSON object, when it has one with counts */
static int usage_quick(serve_usage_t *u, const char *s, size_t n);

static void usage_take(serve_usage_t *u, const char *s, size_t n)
{
    if (usage_quick(u, s, n))
        return;
    json_t *j = json_loadb(s, n, 0, NULL);
    usage_from(u, j);
    json_decref(j);
}

static void sse_line(serve_usage_t *u, const char *s, size_t n)
{
    if (n && s[n - 1] == '\r')
        n--;
    if (n < 5 || memcmp(s, "data:", 5) != 0)
        return;
    s += 5;
    n -= 5;
    /* a cheap look first: most events carry no usage */
    if (!memmem(s, n, "\"usage\"", 7))
        return;
    usage_take(u, s, n);
}

/* The "usage" object of a long reply, from its last USAGE_TAIL bytes:
 * the last "usage" key there (with its quotes unescaped it cannot be
 * inside a string) followed by an object. */
static void usage_tail(serve_usage_t *u)
{
    size_t len = u->buf.len < USAGE_TAIL ? u->buf.len : USAGE_TAIL;
    const char *w = u->buf.s + u->buf.len - len, *at = NULL;
    for (const char *x = w; (x = memmem(x, (size_t)(w + len - x), "\"usage\"", 7)); x++)
        at = x;
    if (!at)
        return;
    const char *v = at + 7, *end = w + len;
    while (v < end && (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n'))
        v++;
    if (v == end || *v != ':')
        return;
    /* {"usage": VALUE ...: the first whole object (what follows the value,
     * the reply's other keys and closing braces, is not read) */
    cr_buf_t b = {0};
    cr_buf_append(&b, "{", 1);
    cr_buf_append(&b, at, (size_t)(end - at));
    json_t *j = json_loadb(b.s, b.len, JSON_DISABLE_EOF_CHECK, NULL);
    cr_buf_free(&b);
    usage_from(u, j);
    json_decref(j);
}

void serve_usage_feed(serve_usage_t *u, const char *p, size_t n)
{
    if (!u->sse) {
        if (!u->overflow && u->buf.len + n > USAGE_BODY_MAX)
            u->overflow = true;
        cr_buf_append(&u->buf, p, n);
        if (u->overflow && u->buf.len > 2 * USAGE_TAIL) {
            memmove(u->buf.s, u->buf.s + u->buf.len - USAGE_TAIL, USAGE_TAIL);
            u->buf.len = USAGE_TAIL;
        }
        return;
    }
    while (n) {
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) : n;
        if (u->overflow) {
            /* the rest of a line too long to keep */
        } else if (u->buf.len + k > USAGE_LINE_MAX) {
            u->overflow = true;
        } else if (nl && u->buf.len == 0) {
            sse_line(u, p, k); /* a whole line in this piece: no copy */
        } else {
            cr_buf_append(&u->buf, p, k);
            if (nl)
                sse_line(u, u->buf.s, u->buf.len);
        }
        if (!nl)
            break;
        u->buf.len = 0;
        u->overflow = false;
        p += k + 1;
        n -= k + 1;
    }
}

void serve_usage_end(serve_usage_t *u)
{
    if (u->sse) {
        if (!u->overflow && u->buf.len)
            sse_line(u, u->buf.s, u->buf.len);
    } else if (u->overflow) {
        usage_tail(u);
    } else if (u->buf.len && memmem(u->buf.s, u->buf.len, "\"usage\"", 7)) {
        usage_take(u, u->buf.s, u->buf.len);
    }
    u->buf.len = 0;
}

void serve_usage_fini(serve_usage_t *u)
{
    cr_buf_free(&u->buf);
}

/* ---- the quick look: a request's model without building its JSON ----
 * One pass over the body that checks it is JSON as jansson reads it
 * (RFC 8259, UTF-8 checked, no \u0000, surrogates paired, integers within
 * 64 bits, reals finite, at most 2048 levels deep, an object at the top)
 * and notes the top-level "model" and "stream" (the last of each, as
 * jansson keeps). A key or model with an escape takes jansson's way. */
#define QUICK_DEPTH_MAX 2048

typedef struct quick {
    const unsigned char *p, *end;
    bool escaped; /* the last string had a backslash */
} quick_t;

static void quick_ws(quick_t *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int hex4(const unsigned char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            d = (c | 0x20) - 'a' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A string at s->p (its opening quote): true with its bytes between the
 * quotes in [*a, *b). */
static bool quick_string(quick_t *s, const unsigned char **a, const unsigned char **b)
{
    const unsigned char *p = s->p + 1, *end = s->end;
    s->escaped = false;
    *a = p;
    while (p < end) {
        unsigned c = *p;
        if (c == '"') {
            *b = p;
            s->p = p + 1;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c == '\\') {
            s->escaped = true;
            if (end - p < 2)
                return false;
            c = p[1];
            if (c == 'u') {
                if (end - p < 6)
                    return false;
                int v = hex4(p + 2);
                if (v <= 0) /* not hex, or \u0000 */
                    return false;
                p += 6;
                if (v >= 0xDC00 && v <= 0xDFFF)
                    return false; /* a low surrogate alone */
                if (v >= 0xD800 && v <= 0xDBFF) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
                        return false;
                    int w = hex4(p + 2);
                    if (w < 0xDC00 || w > 0xDFFF)
                        return false;
                    p += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", (int)c) || c == 0)
                return false;
            p += 2;
            continue;
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        /* UTF-8: no overlong forms, no surrogates, at most U+10FFFF */
        size_t n;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if ((size_t)(end - p) < n)
            return false;
        for (size_t i = 1; i < n; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        p += n;
    }
    return false;
}

static bool quick_number(quick_t *s)
{
    const unsigned char *p = s->p, *end = s->end, *start = p;
    bool real = false;
    if (p < end && *p == '-')
        p++;
    if (p >= end || !(*p >= '0' && *p <= '9'))
        return false;
    if (*p == '0')
        p++;
    else
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    if (p < end && *p == '.') {
        real = true;
        p++;
        if (p >= end || !(*p >= '0' && *p <= '9'))
            return false;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        real = true;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !(*p >= '0' && *p <= '9'))
            return false;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    size_t n = (size_t)(p - start);
    char tmp[64];
    if (n >= sizeof(tmp))
        return false; /* a number that long: jansson's way decides */
    memcpy(tmp, start, n);
    tmp[n] = '\0';
    errno = 0;
    if (real) {
        double d = strtod(tmp, NULL);
        if (errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL))
            return false;
    } else {
        strtoll(tmp, NULL, 10);
        if (errno == ERANGE)
            return false;
    }
    s->p = p;
    return true;
}

static bool quick_lit(quick_t *s, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0)
        return false;
    s->p += n;
    return true;
}

/* A value at s->p (after white space) of nesting depth; for a top-level
 * key's value (top) *is_true says whether it is true. */
static bool quick_value(quick_t *s, int depth, const unsigned char **sa, const unsigned char **sb,
                        bool *is_true)
{
    if (s->p >= s->end)
        return false;
    *is_true = false;
    *sa = *sb = NULL;
    switch (*s->p) {
    case '"':
        return quick_string(s, sa, sb);
    case 't':
        *is_true = true;
        return quick_lit(s, "true");
    case 'f':
        return quick_lit(s, "false");
    case 'n':
        return quick_lit(s, "null");
    case '{':
    case '[': {
        bool obj = *s->p == '{';
        if (depth >= QUICK_DEPTH_MAX)
            return false;
        s->p++;
        quick_ws(s);
        if (s->p < s->end && *s->p == (obj ? '}' : ']')) {
            s->p++;
            return true;
        }
        for (;;) {
            const unsigned char *a, *b;
            bool t;
            quick_ws(s);
            if (obj) {
                if (s->p >= s->end || *s->p != '"' || !quick_string(s, &a, &b))
                    return false;
                quick_ws(s);
                if (s->p >= s->end || *s->p != ':')
                    return false;
                s->p++;
                quick_ws(s);
            }
            if (!quick_value(s, depth + 1, &a, &b, &t))
                return false;
            quick_ws(s);
            if (s->p < s->end && *s->p == ',') {
                s->p++;
                continue;
            }
            if (s->p < s->end && *s->p == (obj ? '}' : ']')) {
                s->p++;
                return true;
            }
            return false;
        }
    }
    default:
        return quick_number(s);
    }
}

/* A top-level key's value as the quick look found it: its text [a, b)
 * (a string's with its quotes), whether a string value had an escape. */
typedef struct qfield {
    const char *key;
    const unsigned char *a, *b;
    bool seen, esc;
} qfield_t;

/* 1: body[0..len) is a JSON object as jansson reads it, with the values
 * of the last of its top-level keys named in f; -1: it is not an object
 * (or not JSON); 0: not decided here (a key with an escape, or what the
 * quick look does not take): jansson's way. */
static int quick_fields(const char *body, size_t len, qfield_t *f, size_t nf)
{
    quick_t s = {(const unsigned char *)body, (const unsigned char *)body + len, false};
    for (size_t i = 0; i < nf; i++)
        f[i].seen = false;
    quick_ws(&s);
    if (s.p >= s.end || *s.p != '{')
        return -1;
    s.p++;
    quick_ws(&s);
    bool empty = s.p < s.end && *s.p == '}';
    if (empty)
        s.p++;
    while (!empty) {
        const unsigned char *ka, *kb, *va, *vb;
        bool t;
        quick_ws(&s);
        if (s.p >= s.end || *s.p != '"' || !quick_string(&s, &ka, &kb))
            return 0;
        if (s.escaped)
            return 0; /* a key with an escape may be one of f */
        quick_ws(&s);
        if (s.p >= s.end || *s.p != ':')
            return 0;
        s.p++;
        quick_ws(&s);
        const unsigned char *start = s.p;
        if (!quick_value(&s, 1, &va, &vb, &t))
            return 0;
        size_t kl = (size_t)(kb - ka);
        for (size_t i = 0; i < nf; i++)
            if (strlen(f[i].key) == kl && memcmp(ka, f[i].key, kl) == 0) {
                f[i].seen = true;
                f[i].a = start;
                f[i].b = s.p;
                f[i].esc = *start == '"' && s.escaped;
            }
        quick_ws(&s);
        if (s.p < s.end && *s.p == ',') {
            s.p++;
            continue;
        }
        if (s.p < s.end && *s.p == '}') {
            s.p++;
            break;
        }
        return 0;
    }
    quick_ws(&s);
    return s.p == s.end ? 1 : 0;
}

/* 1: the quick look decided (0 or a code in *ret), 0: jansson's way. */
static int quick_parse(const char *body, size_t len, serve_request_t *out, int *ret)
{
    qfield_t f[2] = {{.key = "model"}, {.key = "stream"}};
    int k = quick_fields(body, len, f, 2);
    if (k < 0) {
        *ret = SERVE_REQ_INVALID_JSON; /* not an object, or not JSON */
        return 1;
    }
    if (k == 0 || (f[0].seen && f[0].esc))
        return 0;
    if (!f[0].seen || *f[0].a != '"' || f[0].b - f[0].a < 3) {
        *ret = SERVE_REQ_NO_MODEL;
        return 1;
    }
    size_t n = (size_t)(f[0].b - f[0].a) - 2;
    out->model = cr_malloc(n + 1);
    memcpy(out->model, f[0].a + 1, n);
    out->model[n] = '\0';
    out->stream = f[1].seen && f[1].b - f[1].a == 4 && memcmp(f[1].a, "true", 4) == 0;
    *ret = 0;
    return 1;
}

/* An integer value's text [a, b) as jansson reads one: true with *v. */
static bool quick_int(const unsigned char *a, const unsigned char *b, long long *v)
{
    if (a == b || (*a != '-' && !(*a >= '0' && *a <= '9')))
        return false;
    for (const unsigned char *x = a; x < b; x++)
        if (*x == '.' || *x == 'e' || *x == 'E')
            return false;
    char tmp[32];
    size_t n = (size_t)(b - a);
    if (n >= sizeof(tmp))
        return false;
    memcpy(tmp, a, n);
    tmp[n] = '\0';
    *v = strtoll(tmp, NULL, 10);
    return true;
}

/* usage_from for the reply s[0..n) without building its JSON: 1 decided,
 * 0 jansson's way. */
static int usage_quick(serve_usage_t *u, const char *s, size_t n)
{
    qfield_t us = {.key = "usage"};
    int k = quick_fields(s, n, &us, 1);
    if (k < 0)
        return 1; /* not an object: no usage */
    if (k == 0)
        return 0;
    if (!us.seen || *us.a != '{')
        return 1;
    qfield_t f[2] = {{.key = "prompt_tokens"}, {.key = "completion_tokens"}};
    if (quick_fields((const char *)us.a, (size_t)(us.b - us.a), f, 2) != 1)
        return 0;
    long long p, c;
    if (f[0].seen && quick_int(f[0].a, f[0].b, &p) && p >= 0) {
        u->prompt = p;
        u->completion = f[1].seen && quick_int(f[1].a, f[1].b, &c) && c >= 0 ? c : 0;
    }
    return 1;
}

int serve_request_parse_model(const char *body, size_t len, serve_request_t *out)
{
    memset(out, 0, sizeof(*out));
    int ret;
    if (body && quick_parse(body, len, out, &ret))
        return ret;
    ret = serve_request_parse(body, len, out);
    if (ret == 0) {
        free(out->prefix);
        out->prefix = NULL;
        out->prefix_len = 0;
    }
    return ret;
}
