/* libFuzzer target for the router's reading of token counts in a
 * replica's reply (serve/request.c serve_usage_*): the first byte says
 * whether it is a stream and where the reply is cut into pieces; the rest
 * is the reply. The counts found must not depend on where the pieces were
 * cut, and are never negative unless none was found. */
#include "serve/serve.h"

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
    return 0;
}
