/* libFuzzer target for what the router reads of a client's request
 * (serve/request.c) and the prefix affinity it feeds (serve/affinity.c):
 * any bytes as a request body parse or are refused with a code; a parsed
 * one has a non-empty model and a bounded prompt, whose prefix hashes go
 * into a small affinity table and come back to the replica they went to.
 * serve_request_parse_model, which builds no JSON, gives the same code,
 * model and stream flag. Never crash, leak or hang. */
#include "serve/serve.h"

static bool any(size_t rep, void *arg)
{
    CR_UNUSED(rep);
    CR_UNUSED(arg);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    serve_request_t q, k;
    int err = serve_request_parse((const char *)data, size, &q);
    /* the quick look at the model agrees with jansson's parse */
    int kerr = serve_request_parse_model((const char *)data, size, &k);
    if (kerr != err || k.prefix ||
        (!err && (strcmp(k.model, q.model) != 0 || k.stream != q.stream)))
        __builtin_trap();
    serve_request_free(&k);
    if (err) {
        if ((err != SERVE_REQ_INVALID_JSON && err != SERVE_REQ_NO_MODEL) || q.model || q.prefix)
            __builtin_trap();
        return 0;
    }
    if (!q.model || !q.model[0] || q.prefix_len > SERVE_PREFIX_MAX || (q.prefix_len && !q.prefix))
        __builtin_trap();
    uint64_t h[SERVE_AFFINITY_BLOCKS];
    size_t n = serve_affinity_hashes(q.prefix, q.prefix_len, h, SERVE_AFFINITY_BLOCKS);
    size_t want = (q.prefix_len + SERVE_AFFINITY_BLOCK - 1) / SERVE_AFFINITY_BLOCK;
    if (n != (want < SERVE_AFFINITY_BLOCKS ? want : SERVE_AFFINITY_BLOCKS))
        __builtin_trap();
    /* a table smaller than the prompt: eviction runs */
    serve_affinity_t *a = serve_affinity_new(64, 4);
    size_t rep = size % 4, blocks = 0;
    serve_affinity_insert(a, h, n, rep, any, NULL);
    long got = serve_affinity_match(a, h, n, &blocks, any, NULL);
    if (n && (got != (long)rep || blocks == 0 || blocks > n))
        __builtin_trap();
    if (!n && got != -1)
        __builtin_trap();
    serve_affinity_forget(a, rep);
    if (serve_affinity_held(a, rep) != 0 || serve_affinity_match(a, h, n, &blocks, any, NULL) != -1)
        __builtin_trap();
    serve_affinity_free(a);
    serve_request_free(&q);
    return 0;
}
