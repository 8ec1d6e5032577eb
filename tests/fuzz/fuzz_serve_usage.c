/* libFuzzer target for the router's reading of token counts in a
 * replica's reply (serve/request.c serve_usage_*): the first byte says
 * whether it is a stream and where the reply is cut into pieces; the rest
 * is the reply. The counts found must not depend on where the pieces were
 * cut, and are never negative unless none was found. For a JSON reply
 * (not a stream) read whole, they are jansson's reading of its "usage"
 * (the router reads them without building the JSON). */
#include "serve/serve.h"
#include <jansson.h>

/* the counts as jansson reads them from a whole reply */
static void by_jansson(const uint8_t *p, size_t n, long long *pr, long long *co)
{
    *pr = *co = -1;
    if (!memmem(p, n, "\"usage\"", 7))
        return;
    json_t *j = json_loadb((const char *)p, n, 0, NULL);
    json_t *us = json_object_get(j, "usage");
    json_t *a = json_object_get(us, "prompt_tokens"), *b = json_object_get(us, "completion_tokens");
    if (json_is_integer(a) && json_integer_value(a) >= 0) {
        *pr = json_integer_value(a);
        *co = json_is_integer(b) && json_integer_value(b) >= 0 ? json_integer_value(b) : 0;
    }
    json_decref(j);
}

static void run(const uint8_t *p, size_t n, bool sse, size_t cut, long long *pr, long long *co)
{
    serve_usage_t u;
    serve_usage_init(&u, sse);
    for (size_t off = 0; off < n;) {
        size_t k = cut && n - off > cut ? cut : n - off;
        serve_usage_feed(&u, (const char *)p + off, k);
        off += k;
    }
    serve_usage_end(&u);
    *pr = u.prompt;
    *co = u.completion;
    serve_usage_fini(&u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool sse = data[0] & 1;
    size_t cut = data[0] >> 1;
    long long p1, c1, p2, c2;
    run(data + 1, size - 1, sse, 0, &p1, &c1);
    run(data + 1, size - 1, sse, cut, &p2, &c2);
    if (p1 != p2 || c1 != c2)
        __builtin_trap();
    if ((p1 < 0) != (c1 < 0) || p1 < -1 || c1 < -1)
        __builtin_trap();
    if (!sse && size - 1 <= (64u << 10)) {
        long long pj, cj;
        by_jansson(data + 1, size - 1, &pj, &cj);
        if (pj != p1 || cj != c1)
            __builtin_trap();
    }
    return 0;
}
