/* net/frame.c: the length-prefixed codec fed arbitrary chunks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "net/net.h"

/* Appends one frame carrying len bytes of value v to a stream. */
static size_t put_frame(uint8_t *out, size_t len, uint8_t v)
{
    assert_int_equal(cr_frame_hdr(out, len, 0), 0);
    memset(out + CR_FRAME_HDR, v, len);
    return CR_FRAME_HDR + len;
}

/* Feeds stream in chunks of the given sizes (cycled) and records the
 * frames it yields: their lengths and first bytes. */
typedef struct got {
    size_t n, len[16];
    uint8_t first[16];
    int err;
} got_t;

static void feed_chunks(cr_frame_dec_t *d, const uint8_t *s, size_t n, const size_t *chunks,
                        size_t nchunks, got_t *g)
{
    memset(g, 0, sizeof(*g));
    size_t pos = 0, k = 0;
    while (pos < n) {
        size_t c = chunks[k++ % nchunks];
        if (c > n - pos)
            c = n - pos;
        const uint8_t *p = s + pos;
        size_t left = c;
        while (left) {
            size_t used;
            const uint8_t *f;
            size_t fl;
            int r = cr_frame_dec_feed(d, p, left, &used, &f, &fl);
            assert_true(used <= left);
            if (r < 0) {
                g->err = r;
                return;
            }
            if (r == 1) {
                assert_true(g->n < 16);
                /* the whole payload is the frame's value */
                for (size_t i = 0; i < fl; i++)
                    assert_int_equal(f[i], f[0]);
                g->len[g->n] = fl;
                g->first[g->n++] = f[0];
            } else {
                assert_int_equal(used, left);
            }
            p += used;
            left -= used;
        }
        pos += c;
    }
}

static void test_split_at_every_byte(void **state)
{
    uint8_t s[4096];
    size_t n = 0;
    n += put_frame(s + n, 1, 0xa1);
    n += put_frame(s + n, 300, 0xb2);
    n += put_frame(s + n, 7, 0xc3);
    for (size_t split = 1; split < n; split++) {
        cr_frame_dec_t d;
        cr_frame_dec_init(&d, 0);
        size_t chunks[2] = {split, n};
        got_t g;
        feed_chunks(&d, s, n, chunks, 2, &g);
        assert_int_equal(g.err, 0);
        assert_int_equal(g.n, 3);
        assert_int_equal(g.len[0], 1);
        assert_int_equal(g.len[1], 300);
        assert_int_equal(g.len[2], 7);
        assert_int_equal(g.first[1], 0xb2);
        assert_int_equal(g.first[2], 0xc3);
        cr_frame_dec_fini(&d);
    }
    /* one byte at a time, and odd chunk sizes */
    size_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {2, 300, 1}, {4, 4, 4}};
    for (size_t i = 0; i < CR_ARRAY_SIZE(sizes); i++) {
        cr_frame_dec_t d;
        cr_frame_dec_init(&d, 0);
        got_t g;
        feed_chunks(&d, s, n, sizes[i], 3, &g);
        assert_int_equal(g.n, 3);
        assert_int_equal(g.first[0], 0xa1);
        cr_frame_dec_fini(&d);
    }
}

static void test_several_frames_in_one_chunk(void **state)
{
    uint8_t s[512];
    size_t n = 0;
    for (int i = 0; i < 10; i++)
        n += put_frame(s + n, (size_t)i + 1, (uint8_t)i);
    cr_frame_dec_t d;
    cr_frame_dec_init(&d, 0);
    size_t all[1] = {n};
    got_t g;
    feed_chunks(&d, s, n, all, 1, &g);
    assert_int_equal(g.n, 10);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(g.len[i], (size_t)i + 1);
        assert_int_equal(g.first[i], i);
    }
    /* a whole frame in one chunk comes out without a copy */
    size_t used, fl;
    const uint8_t *f;
    assert_int_equal(cr_frame_dec_feed(&d, s, n, &used, &f, &fl), 1);
    assert_ptr_equal(f, s + CR_FRAME_HDR);
    assert_int_equal(used, CR_FRAME_HDR + 1);
    cr_frame_dec_fini(&d);
}

static void test_limits(void **state)
{
    char why[160];
    cr_frame_dec_t d;
    uint8_t s[64];
    size_t used, fl;
    const uint8_t *f;

    /* zero length: an error, sticky */
    cr_frame_dec_init(&d, 0);
    memset(s, 0, 8);
    assert_int_equal(cr_frame_dec_feed(&d, s, 8, &used, &f, &fl), CR_EPARSE);
    assert_int_equal(used, 4);
    assert_non_null(strstr(cr_frame_dec_why(&d, why, sizeof(why)), "length 0"));
    s[3] = 1;
    assert_int_equal(cr_frame_dec_feed(&d, s, 5, &used, &f, &fl), CR_EPARSE);
    assert_int_equal(used, 0);
    cr_frame_dec_fini(&d);

    /* exactly at the limit passes, one above fails before any payload */
    cr_frame_dec_init(&d, 16);
    size_t n = put_frame(s, 16, 0x55);
    assert_int_equal(cr_frame_dec_feed(&d, s, n, &used, &f, &fl), 1);
    assert_int_equal(fl, 16);
    s[3] = 17;
    assert_int_equal(cr_frame_dec_feed(&d, s, 4, &used, &f, &fl), CR_E2BIG);
    assert_string_equal(cr_frame_dec_why(&d, why, sizeof(why)),
                        "frame of 17 bytes exceeds the limit of 16");
    cr_frame_dec_fini(&d);

    /* the default limit is 16 MiB; "GET " as a length is far above it */
    cr_frame_dec_init(&d, 0);
    assert_int_equal(d.max, 16u << 20);
    assert_int_equal(
        cr_frame_dec_feed(&d, (const uint8_t *)"GET / HTTP/1.1\r\n", 16, &used, &f, &fl), CR_E2BIG);
    cr_frame_dec_fini(&d);

    /* the encoder refuses what the decoder would */
    uint8_t hdr[4];
    assert_int_equal(cr_frame_hdr(hdr, 0, 0), CR_EINVAL);
    assert_int_equal(cr_frame_hdr(hdr, 17, 16), CR_E2BIG);
    assert_int_equal(cr_frame_hdr(hdr, 0x01020304, 0x10000000), 0);
    assert_memory_equal(hdr, "\x01\x02\x03\x04", 4);
}

/* A large frame trickling in grows the buffer with the data (a length
 * alone reserves nothing); the next big frame reuses the buffer, the next
 * small one lets it go. */
/* cr_frame_dec_trim: a 9 KiB frame split over reads leaves no buffer once
 * trimmed, and a half-received one keeps its bytes. */
static void test_trim(void **state)
{
    cr_frame_dec_t d;
    cr_frame_dec_init(&d, 0);
    static uint8_t msg[4 + 9000];
    assert_int_equal(cr_frame_hdr(msg, 9000, 0), 0);
    for (size_t i = 4; i < sizeof(msg); i++)
        msg[i] = (uint8_t)i;
    size_t used, fl;
    const uint8_t *f;
    assert_int_equal(cr_frame_dec_feed(&d, msg, 4096, &used, &f, &fl), 0);
    assert_true(d.cap >= 4092);
    cr_frame_dec_trim(&d); /* half a frame: kept */
    assert_non_null(d.buf);
    assert_int_equal(cr_frame_dec_feed(&d, msg + 4096, sizeof(msg) - 4096, &used, &f, &fl), 1);
    assert_int_equal(fl, 9000);
    assert_memory_equal(f, msg + 4, 9000);
    assert_non_null(d.buf); /* kept as the decoder keeps a frame under 64 KiB */
    cr_frame_dec_trim(&d);
    assert_null(d.buf);
    assert_int_equal(d.cap, 0);
    /* and the next frame still decodes, whole or split */
    assert_int_equal(cr_frame_dec_feed(&d, msg, 100, &used, &f, &fl), 0);
    assert_int_equal(cr_frame_dec_feed(&d, msg + 100, sizeof(msg) - 100, &used, &f, &fl), 1);
    assert_memory_equal(f, msg + 4, 9000);
    cr_frame_dec_trim(&d);
    assert_int_equal(cr_frame_dec_feed(&d, msg, sizeof(msg), &used, &f, &fl), 1);
    assert_memory_equal(f, msg + 4, 9000);
    assert_null(d.buf); /* whole in one chunk: never copied */
    cr_frame_dec_fini(&d);
}

static void test_big_frame_memory(void **state)
{
    cr_frame_dec_t d;
    cr_frame_dec_init(&d, 0);
    size_t len = 1u << 20;
    uint8_t hdr[4];
    assert_int_equal(cr_frame_hdr(hdr, len, 0), 0);
    size_t used, fl;
    const uint8_t *f;
    assert_int_equal(cr_frame_dec_feed(&d, hdr, 4, &used, &f, &fl), 0);
    assert_int_equal(d.cap, 0);
    uint8_t chunk[1000];
    memset(chunk, 7, sizeof(chunk));
    assert_int_equal(cr_frame_dec_feed(&d, chunk, sizeof(chunk), &used, &f, &fl), 0);
    assert_true(d.cap < 4096);
    size_t got = sizeof(chunk);
    int r = 0;
    while (got < len) {
        size_t c = len - got < sizeof(chunk) ? len - got : sizeof(chunk);
        r = cr_frame_dec_feed(&d, chunk, c, &used, &f, &fl);
        assert_int_equal(used, c);
        got += c;
    }
    assert_int_equal(r, 1);
    assert_int_equal(fl, len);
    assert_int_equal(f[len - 1], 7);
    /* a big frame next reuses the buffer (a stream of them: one buffer) */
    const uint8_t *big = d.buf;
    assert_int_equal(cr_frame_dec_feed(&d, hdr, 4, &used, &f, &fl), 0);
    assert_ptr_equal(d.buf, big);
    got = 0;
    while (got < len) {
        size_t c = len - got < sizeof(chunk) ? len - got : sizeof(chunk);
        r = cr_frame_dec_feed(&d, chunk, c, &used, &f, &fl);
        got += c;
    }
    assert_int_equal(r, 1);
    assert_ptr_equal(f, big);
    /* the header of a small frame lets the big buffer go */
    uint8_t small[4];
    assert_int_equal(cr_frame_hdr(small, 10, 0), 0);
    assert_int_equal(cr_frame_dec_feed(&d, small, 2, &used, &f, &fl), 0);
    assert_non_null(d.buf); /* not knowing yet */
    assert_int_equal(cr_frame_dec_feed(&d, small + 2, 2, &used, &f, &fl), 0);
    assert_null(d.buf);
    cr_frame_dec_fini(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_at_every_byte),
        cmocka_unit_test(test_several_frames_in_one_chunk),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_trim),
        cmocka_unit_test(test_big_frame_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
