/* What the router reads of the bodies that pass through it
 * (docs/serve.md "The router"): of a client's request, its "model", its
 * "stream" flag and the text of its prompt (for prefix affinity); of a
 * replica's reply, the engine's token counts ("usage", in the JSON reply
 * or in a stream's events, the last one that carries it). Both are fed by
 * outsiders, so both are bounded and fuzzed (tests/fuzz/fuzz_serve_request.c,
 * fuzz_serve_usage.c). */
#include "serve.h"
#include <jansson.h>

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
static void usage_take(serve_usage_t *u, const char *s, size_t n)
{
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
