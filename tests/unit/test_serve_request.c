/* serve/request.c and serve/affinity.c: what the router reads of a
 * client's request (model, stream, the prompt's text) and of a replica's
 * reply (the engine's token counts, whole or in a stream's last chunk),
 * and the prefix table behind prefix affinity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include "serve/serve.h"

static void test_request(void **state)
{
    (void)state;
    serve_request_t q;
    const char *chat = "{\"model\":\"tiny\",\"stream\":true,\"messages\":[{\"role\":\"system\","
                       "\"content\":\"be brief\"},{\"role\":\"user\",\"content\":[{\"type\":"
                       "\"text\",\"text\":\"hi\"},{\"type\":\"image_url\"}]}]}";
    assert_int_equal(serve_request_parse(chat, strlen(chat), &q), 0);
    assert_string_equal(q.model, "tiny");
    assert_true(q.stream);
    assert_int_equal(q.prefix_len, strlen("system\nbe brief\nuser\nhi\x01\n"));
    assert_memory_equal(q.prefix, "system\nbe brief\nuser\nhi\x01\n", q.prefix_len);
    serve_request_free(&q);

    const char *comp = "{\"model\":\"m\",\"prompt\":[\"first\",\"second\"],\"stream\":1}";
    assert_int_equal(serve_request_parse(comp, strlen(comp), &q), 0);
    assert_false(q.stream); /* only true is true */
    assert_int_equal(q.prefix_len, 5);
    assert_memory_equal(q.prefix, "first", 5);
    serve_request_free(&q);

    const char *emb = "{\"model\":\"m\",\"input\":\"x\"}";
    assert_int_equal(serve_request_parse(emb, strlen(emb), &q), 0);
    assert_null(q.prefix);
    assert_int_equal(q.prefix_len, 0);
    serve_request_free(&q);

    /* a prompt past the bound is cut there */
    size_t big = SERVE_PREFIX_MAX * 2;
    char *long_req = malloc(big + 64);
    int n = snprintf(long_req, 64, "{\"model\":\"m\",\"prompt\":\"");
    memset(long_req + n, 'a', big);
    strcpy(long_req + n + big, "\"}");
    assert_int_equal(serve_request_parse(long_req, strlen(long_req), &q), 0);
    assert_int_equal(q.prefix_len, SERVE_PREFIX_MAX);
    serve_request_free(&q);
    free(long_req);

    assert_int_equal(serve_request_parse("[1]", 3, &q), SERVE_REQ_INVALID_JSON);
    assert_int_equal(serve_request_parse("", 0, &q), SERVE_REQ_INVALID_JSON);
    assert_int_equal(serve_request_parse("{\"model\":5}", 11, &q), SERVE_REQ_NO_MODEL);
    assert_int_equal(serve_request_parse("{\"model\":\"\"}", 12, &q), SERVE_REQ_NO_MODEL);
    assert_null(q.model);
}

static void usage_of(const char *reply, bool sse, size_t piece, long long *p, long long *c)
{
    serve_usage_t u;
    serve_usage_init(&u, sse);
    size_t len = strlen(reply);
    for (size_t off = 0; off < len; off += piece)
        serve_usage_feed(&u, reply + off, len - off < piece ? len - off : piece);
    serve_usage_end(&u);
    *p = u.prompt;
    *c = u.completion;
    serve_usage_fini(&u);
}

static void test_usage(void **state)
{
    (void)state;
    long long p, c;
    const char *json =
        "{\"id\":\"x\",\"choices\":[{\"text\":\"\\\"usage\\\"\"}],"
        "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,\"total_tokens\":19}}";
    for (size_t piece = 1; piece <= strlen(json); piece += 7) {
        usage_of(json, false, piece, &p, &c);
        assert_int_equal(p, 12);
        assert_int_equal(c, 7);
    }
    /* embeddings: prompt tokens only */
    usage_of("{\"usage\":{\"prompt_tokens\":3,\"total_tokens\":3}}", false, 100, &p, &c);
    assert_int_equal(p, 3);
    assert_int_equal(c, 0);
    usage_of("{\"choices\":[]}", false, 100, &p, &c);
    assert_int_equal(p, -1);
    assert_int_equal(c, -1);
    /* a reply past what is parsed whole: usage from its tail */
    size_t big = 200 << 10;
    char *lr = malloc(big + 200);
    int n = snprintf(lr, 64, "{\"choices\":[{\"text\":\"");
    memset(lr + n, 'a', big);
    strcpy(lr + n + big, "\"}],\"usage\": {\"prompt_tokens\":8,\"completion_tokens\":90000},"
                         "\"id\":\"x\"}");
    for (size_t piece = 4000; piece <= 9000; piece += 5000) {
        usage_of(lr, false, piece, &p, &c);
        assert_int_equal(p, 8);
        assert_int_equal(c, 90000);
    }
    free(lr);
    /* a stream: the last event with usage, whatever the pieces */
    const char *sse =
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}"
        "\r\n\r\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}"
        "\n\ndata: [DONE]\n\n";
    for (size_t piece = 1; piece <= strlen(sse); piece += 3) {
        usage_of(sse, true, piece, &p, &c);
        assert_int_equal(p, 5);
        assert_int_equal(c, 9);
    }
    usage_of("data: {\"choices\":[]}\n\ndata: [DONE]\n\n", true, 5, &p, &c);
    assert_int_equal(p, -1);
    /* a stream's last event without its newline still counts */
    usage_of("data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}", true, 4, &p, &c);
    assert_int_equal(p, 1);
}

static bool all(size_t rep, void *arg)
{
    (void)rep;
    (void)arg;
    return true;
}

static bool not_one(size_t rep, void *arg)
{
    (void)arg;
    return rep != 1;
}

static void test_affinity(void **state)
{
    (void)state;
    char a[1000], b[1000];
    memset(a, 'x', sizeof(a));
    memcpy(b, a, sizeof(b));
    b[700] = 'y'; /* b shares a's first 700 bytes: 10 whole blocks */
    uint64_t ha[SERVE_AFFINITY_BLOCKS], hb[SERVE_AFFINITY_BLOCKS];
    size_t na = serve_affinity_hashes(a, sizeof(a), ha, SERVE_AFFINITY_BLOCKS);
    size_t nb = serve_affinity_hashes(b, sizeof(b), hb, SERVE_AFFINITY_BLOCKS);
    assert_int_equal(na, 16); /* 15 whole blocks and a short one */
    assert_int_equal(nb, 16);
    assert_memory_equal(ha, hb, 10 * sizeof(uint64_t));
    assert_true(ha[10] != hb[10]);
    /* a prompt that is a's first 640 bytes: the same 10 hashes */
    uint64_t hc[SERVE_AFFINITY_BLOCKS];
    assert_int_equal(serve_affinity_hashes(a, 640, hc, SERVE_AFFINITY_BLOCKS), 10);
    assert_memory_equal(ha, hc, 10 * sizeof(uint64_t));
    /* a short last block differs from a whole one of the same bytes */
    assert_true(serve_affinity_hashes(a, 700, hc, SERVE_AFFINITY_BLOCKS) == 11 && hc[10] != ha[10]);

    serve_affinity_t *t = serve_affinity_new(1024, 4);
    size_t blocks;
    assert_int_equal(serve_affinity_match(t, ha, na, &blocks, all, NULL), -1);
    serve_affinity_insert(t, ha, na, 2, all, NULL);
    assert_int_equal(serve_affinity_held(t, 2), 16);
    assert_int_equal(serve_affinity_match(t, hb, nb, &blocks, all, NULL), 2);
    assert_int_equal(blocks, 10);
    /* b went to replica 1: its own blocks are 1's, the shared ones stay 2's */
    serve_affinity_insert(t, hb, nb, 1, all, NULL);
    assert_int_equal(serve_affinity_held(t, 1), 6);
    assert_int_equal(serve_affinity_match(t, hb, nb, &blocks, all, NULL), 1);
    assert_int_equal(blocks, 16);
    /* 1 cannot take it: the longest prefix another holds */
    assert_int_equal(serve_affinity_match(t, hb, nb, &blocks, not_one, NULL), 2);
    assert_int_equal(blocks, 10);
    serve_affinity_forget(t, 2);
    assert_int_equal(serve_affinity_held(t, 2), 0);
    assert_int_equal(serve_affinity_match(t, ha, na, &blocks, all, NULL), -1);
    assert_int_equal(serve_affinity_match(t, hb, nb, &blocks, all, NULL), 1);
    serve_affinity_free(t);

    /* bounded: a table of 64 entries keeps the newest prompts */
    t = serve_affinity_new(64, 4);
    char p[200];
    uint64_t h[4];
    for (int i = 0; i < 1000; i++) {
        snprintf(p, sizeof(p), "prompt %d", i);
        size_t n = serve_affinity_hashes(p, strlen(p), h, 4);
        serve_affinity_insert(t, h, n, (size_t)i % 4, all, NULL);
    }
    size_t held = 0;
    for (size_t r = 0; r < 4; r++)
        held += serve_affinity_held(t, r);
    assert_int_equal(held, 64);
    size_t n = serve_affinity_hashes("prompt 999", 10, h, 4);
    assert_int_equal(serve_affinity_match(t, h, n, &blocks, all, NULL), 3);
    serve_affinity_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_affinity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
