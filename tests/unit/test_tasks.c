/* worker/frame.c and worker/worker.c: the task protocol's codec (frames,
 * the C encoding of CALL and RETURN, HELLO, the HMAC), its reader on a
 * real socket pair with descriptors, memfd objects, and the worker's
 * answers to calls it cannot run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "worker/frame.h"
#include "worker/worker.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_hdr(void **state)
{
    uint8_t p[CRT_HDR];
    crt_hdr_t h;
    crt_hdr_put(p, CRT_CALL, CRT_FLAG_FD, 0x0102030405060708ull, 100);
    assert_int_equal(crt_hdr_parse(p, CRT_MAX_FRAME, &h), 0);
    assert_int_equal(h.kind, CRT_CALL);
    assert_int_equal(h.flags, CRT_FLAG_FD);
    assert_true(h.id == 0x0102030405060708ull);
    assert_int_equal(h.len, 100);
    /* over the limit: the limit counts the 12 bytes after the length */
    assert_int_equal(crt_hdr_parse(p, 111, &h), CR_E2BIG);
    assert_int_equal(crt_hdr_parse(p, 112, &h), 0);
    /* a length below 12 */
    memset(p, 0, 4);
    p[3] = 11;
    assert_int_equal(crt_hdr_parse(p, CRT_MAX_FRAME, &h), CR_EPARSE);
    /* reserved bytes set */
    crt_hdr_put(p, CRT_CALL, 0, 1, 0);
    p[7] = 1;
    assert_int_equal(crt_hdr_parse(p, CRT_MAX_FRAME, &h), CR_EPARSE);
    assert_string_equal(crt_kind_name(CRT_CHALLENGE), "CHALLENGE");
    assert_string_equal(crt_kind_name(200), "unknown");
}

static void test_call(void **state)
{
    crt_bytes_t b = {0};
    assert_int_equal(crt_call_add(&b, 7, 0, "Counter.add", "abc", 3), 0);
    crt_hdr_t h;
    assert_int_equal(crt_hdr_parse(b.p, CRT_MAX_FRAME, &h), 0);
    assert_int_equal(h.len, 2 + 11 + 3);
    const char *name;
    size_t nl, al;
    const uint8_t *args;
    assert_int_equal(crt_call_parse(b.p + CRT_HDR, h.len, &name, &nl, &args, &al), 0);
    assert_int_equal(nl, 11);
    assert_memory_equal(name, "Counter.add", 11);
    assert_int_equal(al, 3);
    assert_memory_equal(args, "abc", 3);
    /* names: empty, too long */
    assert_int_equal(crt_call_add(&b, 8, 0, "", NULL, 0), CR_EINVAL);
    char longname[CORRAL_TASK_NAME_MAX + 2];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    assert_int_equal(crt_call_add(&b, 8, 0, longname, NULL, 0), CR_EINVAL);
    /* a name longer than the payload, an empty one, one with a NUL */
    const uint8_t short_name[] = {0, 5, 'a', 'b'};
    assert_int_equal(crt_call_parse(short_name, 4, &name, &nl, &args, &al), CR_EPARSE);
    const uint8_t empty[] = {0, 0, 'x'};
    assert_int_equal(crt_call_parse(empty, 3, &name, &nl, &args, &al), CR_EPARSE);
    const uint8_t nul[] = {0, 2, 'a', 0};
    assert_int_equal(crt_call_parse(nul, 4, &name, &nl, &args, &al), CR_EPARSE);
    assert_int_equal(crt_call_parse(nul, 1, &name, &nl, &args, &al), CR_EPARSE);
    crt_bytes_free(&b);
}

static void test_return(void **state)
{
    uint8_t st;
    const uint8_t *v;
    size_t n;
    const uint8_t ok[] = {CRT_OK, 'h', 'i'};
    assert_int_equal(crt_return_parse(ok, 3, &st, &v, &n), 0);
    assert_int_equal(st, CRT_OK);
    assert_int_equal(n, 2);
    const uint8_t bad[] = {3};
    assert_int_equal(crt_return_parse(bad, 1, &st, &v, &n), CR_EPARSE);
    assert_int_equal(crt_return_parse(ok, 0, &st, &v, &n), CR_EPARSE);
}

static void test_hello(void **state)
{
    crt_hello_t h;
    char why[160];
    const char *good = "{\"role\":\"worker\",\"pid\":42,\"runtime\":\"c\",\"lease\":\"L1\","
                       "\"node\":\"n\",\"mac\":\"00\"}";
    assert_int_equal(crt_hello_parse((const uint8_t *)good, strlen(good), &h, why, sizeof(why)), 0);
    assert_string_equal(h.role, "worker");
    assert_string_equal(h.lease, "L1");
    assert_int_equal(h.pid, 42);
    crt_hello_free(&h);
    const char *bad[] = {"[1]",
                         "{\"role\":\"boss\"}",
                         "{\"role\":\"worker\",\"pid\":\"1\"}",
                         "{\"role\":\"caller\",\"lease\":5}",
                         "{",
                         "{}"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        assert_int_equal(
            crt_hello_parse((const uint8_t *)bad[i], strlen(bad[i]), &h, why, sizeof(why)),
            CR_EPARSE);
        assert_true(strlen(why) > 0);
    }
    char *big = cr_calloc(1, CRT_HELLO_MAX + 2);
    memset(big, ' ', CRT_HELLO_MAX + 1);
    assert_int_equal(crt_hello_parse((uint8_t *)big, CRT_HELLO_MAX + 1, &h, why, sizeof(why)),
                     CR_E2BIG);
    free(big);
}

static void test_mac(void **state)
{
    uint8_t key[32], nonce[CRT_NONCE_LEN];
    memset(key, 1, sizeof(key));
    memset(nonce, 2, sizeof(nonce));
    char mac[65];
    crt_mac_hex(key, sizeof(key), nonce, mac);
    assert_int_equal(strlen(mac), 64);
    assert_true(crt_mac_ok(key, sizeof(key), nonce, mac));
    mac[10] ^= 1;
    assert_false(crt_mac_ok(key, sizeof(key), nonce, mac));
    assert_false(crt_mac_ok(key, sizeof(key), nonce, NULL));
    assert_false(crt_mac_ok(key, sizeof(key), nonce, "abc"));

    /* WELCOME's mac: both nonces under a label, never a HELLO's mac of
     * either nonce (a fake owner cannot get it by passing a worker's
     * nonce on to another worker as its CHALLENGE) */
    uint8_t cnonce[CRT_NONCE_LEN];
    memset(cnonce, 3, sizeof(cnonce));
    char wmac[65], hmac_c[65];
    crt_welcome_mac_hex(key, sizeof(key), nonce, cnonce, wmac);
    assert_true(crt_welcome_mac_ok(key, sizeof(key), nonce, cnonce, wmac));
    assert_false(crt_welcome_mac_ok(key, sizeof(key), cnonce, nonce, wmac));
    crt_mac_hex(key, sizeof(key), cnonce, hmac_c);
    assert_false(crt_welcome_mac_ok(key, sizeof(key), nonce, cnonce, hmac_c));
    assert_false(crt_welcome_mac_ok(key, sizeof(key), nonce, cnonce, NULL));
    key[0] ^= 1;
    assert_false(crt_welcome_mac_ok(key, sizeof(key), nonce, cnonce, wmac));
    uint8_t got[CRT_NONCE_LEN];
    char hex[65];
    cr_hex_encode(cnonce, sizeof(cnonce), hex);
    assert_int_equal(crt_nonce_parse(hex, got), 0);
    assert_memory_equal(got, cnonce, sizeof(got));
    assert_int_equal(crt_nonce_parse(NULL, got), CR_EPARSE);
    assert_int_equal(crt_nonce_parse("abcd", got), CR_EPARSE);
    hex[5] = 'x';
    assert_int_equal(crt_nonce_parse(hex, got), CR_EPARSE);

    crt_welcome_t w;
    char why[128];
    const char *good = "{\"pid\":7,\"runtime\":\"c\",\"mac\":\"ab\"}";
    assert_int_equal(crt_welcome_parse((const uint8_t *)good, strlen(good), &w, why, sizeof(why)),
                     0);
    assert_string_equal(w.mac, "ab");
    assert_int_equal(w.pid, 7);
    crt_welcome_free(&w);
    const char *bad[] = {"[]", "{\"mac\":1}", "{\"pid\":\"x\"}", "{"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++)
        assert_int_equal(
            crt_welcome_parse((const uint8_t *)bad[i], strlen(bad[i]), &w, why, sizeof(why)),
            CR_EPARSE);
}

/* ref arguments' encoding: what the owner makes, corral_args_get reads */
static void test_args(void **state)
{
    const void *parts[] = {"ab", "", "cdef"};
    size_t lens[] = {2, 0, 4};
    crt_bytes_t b = {0};
    crt_args_add(&b, parts, lens, 3);
    assert_int_equal(b.len, crt_args_size(lens, 3));
    const void *p;
    size_t n;
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(corral_args_get(b.p, b.len, i, &p, &n), 0);
        assert_int_equal(n, lens[i]);
        assert_memory_equal(p, parts[i], n);
    }
    assert_int_equal(corral_args_get(b.p, b.len, 3, &p, &n), CR_ERANGE);
    /* cut anywhere: never an item past the end */
    for (size_t cut = 0; cut < b.len; cut++)
        for (size_t i = 0; i < 3; i++)
            if (corral_args_get(b.p, cut, i, &p, &n) == 0)
                assert_true((const uint8_t *)p + n <= b.p + cut);
    assert_int_equal(corral_args_get("\0\0\0\0", 4, 0, &p, &n), CR_EPARSE); /* no items */
    assert_int_equal(corral_args_get("\xff\xff\xff\xff", 4, 0, &p, &n), CR_EPARSE);
    uint8_t huge[4 + 8] = {0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(corral_args_get(huge, sizeof(huge), 0, &p, &n), CR_EPARSE);
    assert_int_equal(corral_args_get(NULL, 0, 0, &p, &n), CR_EPARSE);
    crt_bytes_free(&b);
}

/* frames through a real socket pair, one byte at a time, with a memfd */
static void test_reader(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    crt_bytes_t b = {0};
    crt_frame_add(&b, CRT_HELLO, 0, 0, "{}", 2, NULL, 0);
    void *map;
    int mfd = crt_memfd_from("object", 6, &map);
    assert_true(mfd >= 0);
    munmap(map, 6);
    size_t fd_at = b.len;
    assert_int_equal(crt_call_add(&b, 9, CRT_FLAG_FD, "f", NULL, 0), 0);
    /* the header of the frame with the descriptor goes with it */
    crt_bytes_t first = {0};
    crt_bytes_add(&first, b.p, fd_at);
    assert_int_equal(crt_write_all(sv[0], &first, -1), 0);
    crt_bytes_t second = {0};
    crt_bytes_add(&second, b.p + fd_at, b.len - fd_at);
    assert_int_equal(crt_write_all(sv[0], &second, mfd), 0);
    close(mfd);

    crt_reader_t r;
    crt_reader_init(&r, CRT_HELLO_MAX);
    crt_hdr_t h;
    const uint8_t *p;
    int fd, got = 0;
    while (got < 2) {
        int rc = crt_reader_next(&r, &h, &p, &fd);
        assert_true(rc >= 0);
        if (!rc) {
            assert_true(crt_reader_fill(&r, sv[1], true) > 0);
            continue;
        }
        if (got == 0) {
            assert_int_equal(h.kind, CRT_HELLO);
            assert_int_equal(fd, -1);
        } else {
            assert_int_equal(h.kind, CRT_CALL);
            assert_true(fd >= 0);
            size_t n;
            assert_int_equal(crt_memfd_map(fd, &map, &n), 0);
            assert_int_equal(n, 6);
            assert_memory_equal(map, "object", 6);
            munmap(map, n);
            close(fd);
        }
        got++;
    }
    /* a frame that says it has a descriptor but none came */
    b.len = b.off = 0;
    assert_int_equal(crt_call_add(&b, 10, CRT_FLAG_FD, "f", NULL, 0), 0);
    assert_int_equal(crt_write_all(sv[0], &b, -1), 0);
    assert_true(crt_reader_fill(&r, sv[1], true) > 0);
    assert_int_equal(crt_reader_next(&r, &h, &p, &fd), CR_EPARSE);
    crt_reader_fini(&r);
    /* before HELLO a frame over CRT_HELLO_MAX is refused from its header */
    crt_reader_init(&r, CRT_HELLO_MAX);
    uint8_t hdr[CRT_HDR];
    crt_hdr_put(hdr, CRT_HELLO, 0, 0, CRT_HELLO_MAX);
    assert_int_equal(write(sv[0], hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    assert_true(crt_reader_fill(&r, sv[1], true) > 0);
    assert_int_equal(crt_reader_next(&r, &h, &p, &fd), CR_E2BIG);
    crt_reader_fini(&r);
    /* the end of the stream */
    crt_reader_init(&r, CRT_HELLO_MAX);
    close(sv[0]);
    assert_int_equal(crt_reader_fill(&r, sv[1], true), 0);
    crt_reader_fini(&r);
    close(sv[1]);
    crt_bytes_free(&b);
    crt_bytes_free(&first);
    crt_bytes_free(&second);
}

/* a memfd someone can still write is refused: it could change under a
 * reader's mapping or shrink and fault it */
static void test_memfd_unsealed(void **state)
{
    void *map;
    int fd = crt_memfd_new(4096, &map);
    assert_true(fd >= 0);
    munmap(map, 4096);
    size_t n;
    assert_int_equal(crt_memfd_map(fd, &map, &n), CR_EACCES);
    assert_int_equal(crt_memfd_seal(fd), 0);
    assert_int_equal(crt_memfd_map(fd, &map, &n), 0);
    assert_int_equal(n, 4096);
    munmap(map, n);
    close(fd);
}

/* ---- the worker's answers ---- */
static int twice(const void *args, size_t len, corral_result_t *res)
{
    uint8_t *p = corral_result_alloc(res, len * 2);
    memcpy(p, args, len);
    memcpy(p + len, args, len);
    return 0;
}

static int broken(const void *args, size_t len, corral_result_t *res)
{
    return corral_result_error(res, "broken %d", 7), 1;
}

static int silent_fail(const void *args, size_t len, corral_result_t *res)
{
    return 3;
}

static int ctor(const void *args, size_t len, void **state, corral_result_t *res)
{
    *state = cr_strndup(args, len);
    return 0;
}

static int get(void *state, const void *args, size_t len, corral_result_t *res)
{
    return corral_result_set(res, state, strlen(state));
}

static void dtor(void *state)
{
    free(state);
}

static const corral_method_def_t methods[] = {{"get", get}, {NULL, NULL}};

/* Runs a CALL of name(args) and returns the RETURN's status, with its
 * value in v (NUL-terminated). */
static int call(const char *name, const char *args, char *v, size_t vsize)
{
    crt_bytes_t in = {0}, out = {0};
    assert_int_equal(crt_call_add(&in, 1, 0, name, args, strlen(args)), 0);
    crt_worker_run_call(in.p + CRT_HDR, in.len - CRT_HDR, &out);
    crt_hdr_t h;
    assert_int_equal(crt_hdr_parse(out.p, CRT_MAX_FRAME, &h), 0);
    assert_int_equal(h.kind, CRT_RETURN);
    assert_true(h.id == 1);
    uint8_t st;
    const uint8_t *val;
    size_t n;
    assert_int_equal(crt_return_parse(out.p + CRT_HDR, h.len, &st, &val, &n), 0);
    snprintf(v, vsize, "%.*s", (int)n, (const char *)val);
    crt_bytes_free(&in);
    crt_bytes_free(&out);
    return st;
}

static void test_worker_calls(void **state)
{
    char v[256];
    assert_int_equal(corral_worker_register_fn("twice", twice), 0);
    assert_int_equal(corral_worker_register_fn("twice", twice), CR_EEXIST);
    assert_int_equal(corral_worker_register_fn("a.b", twice), CR_EINVAL);
    assert_int_equal(corral_worker_register_fn("", twice), CR_EINVAL);
    assert_int_equal(corral_worker_register_fn("broken", broken), 0);
    assert_int_equal(corral_worker_register_fn("silent", silent_fail), 0);
    assert_int_equal(corral_worker_register_class("Box", ctor, methods, dtor), 0);
    assert_int_equal(corral_worker_register_class("Box", ctor, methods, dtor), CR_EEXIST);

    assert_int_equal(call("twice", "ab", v, sizeof(v)), CRT_OK);
    assert_string_equal(v, "abab");
    assert_int_equal(call("broken", "", v, sizeof(v)), CRT_APP_ERROR);
    assert_string_equal(v, "broken 7");
    assert_int_equal(call("silent", "", v, sizeof(v)), CRT_APP_ERROR);
    assert_string_equal(v, "silent returned 3");
    assert_int_equal(call("nosuch", "", v, sizeof(v)), CRT_SYS_ERROR);
    assert_non_null(strstr(v, "nosuch"));
    /* a method before the constructor, then after it */
    assert_int_equal(call("Box.get", "", v, sizeof(v)), CRT_SYS_ERROR);
    assert_non_null(strstr(v, "no actor of class Box"));
    assert_int_equal(call("Box", "held", v, sizeof(v)), CRT_OK);
    assert_int_equal(call("Box.get", "", v, sizeof(v)), CRT_OK);
    assert_string_equal(v, "held");
    assert_int_equal(call("Box.nosuch", "", v, sizeof(v)), CRT_SYS_ERROR);
    assert_non_null(strstr(v, "no method nosuch"));
    assert_int_equal(call("Other.get", "", v, sizeof(v)), CRT_SYS_ERROR);
    /* a second constructor is refused */
    assert_int_equal(call("Box", "again", v, sizeof(v)), CRT_SYS_ERROR);
    assert_non_null(strstr(v, "constructed already"));
    /* a malformed CALL */
    crt_bytes_t out = {0};
    const uint8_t junk[] = {0, 9, 'x'};
    crt_worker_run_call(junk, sizeof(junk), &out);
    assert_int_equal(out.p[CRT_HDR], CRT_SYS_ERROR);
    crt_bytes_free(&out);
}

/* a C actor's lease job command: its class and socket directory */
static void test_actor_cmd(void **state)
{
    char cls[CORRAL_TASK_NAME_MAX + 1], dir[CRT_LISTEN_DIR_MAX + 1], own[CRT_OWNER_ADDR_MAX + 1];
    assert_int_equal(
        crt_actor_cmd_parse("/bin/prog a b --corral-actor Counter /tmp/corral-actor-0f "
                            "unix:/tmp/x/owner.sock;tcp:127.0.0.1:9",
                            cls, dir, own),
        0);
    assert_string_equal(cls, "Counter");
    assert_string_equal(dir, "/tmp/corral-actor-0f");
    assert_string_equal(own, "unix:/tmp/x/owner.sock;tcp:127.0.0.1:9");
    assert_int_equal(crt_actor_cmd_parse("/bin/prog --corral-actor C /d o", cls, dir, own), 0);
    static const char *const bad[] = {
        "",
        "/bin/prog",
        "/bin/prog --corral-actor Counter /tmp/x",
        "/bin/prog --corral-actor Counter relative/dir o",
        "/bin/prog --corral-actor Count.er /tmp/x o",
        "/bin/prog --corral-actor  /tmp/x o",
        "/bin/prog --corral-actorX Counter /tmp/x o",
        "/bin/prog --corral-actor Counter /tmp/../etc o",
        "/bin/prog --corral-actor Counter /tmp/x o ",
        "--corral-actor Counter /tmp/x o",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(crt_actor_cmd_parse(bad[i], cls, dir, own), CR_EPARSE);
    char longdir[300] = "/bin/prog --corral-actor C /";
    memset(longdir + strlen(longdir), 'd', CRT_LISTEN_DIR_MAX);
    strcat(longdir, " o");
    assert_int_equal(crt_actor_cmd_parse(longdir, cls, dir, own), CR_EPARSE);
    char longown[600] = "/bin/prog --corral-actor C /d ";
    memset(longown + strlen(longown), 'o', CRT_OWNER_ADDR_MAX + 1);
    assert_int_equal(crt_actor_cmd_parse(longown, cls, dir, own), CR_EPARSE);
    assert_int_equal(crt_actor_cmd_parse(NULL, cls, dir, own), CR_EPARSE);
}

/* the actor's loop for other callers: methods run, functions and the
 * constructor refused, every RETURN well formed (checked by the feed) */
static void test_caller_feed(void **state)
{
    crt_bytes_t in = {0};
    crt_call_add(&in, 1, 0, "Box.get", "", 0);
    crt_call_add(&in, 2, 0, "twice", "ab", 2);
    crt_call_add(&in, 3, 0, "Box", "x", 1);
    crt_cancel_add(&in, 1);
    crt_frame_add(&in, CRT_BYE, 0, 0, NULL, 0, NULL, 0);
    assert_int_equal(crt_worker_caller_feed(in.p, in.len), 0);
    crt_bytes_free(&in);
    const uint8_t junk[CRT_HDR] = {0, 0, 0, 3};
    assert_int_equal(crt_worker_caller_feed(junk, sizeof(junk)), 0);
}

/* the owner API without a head: a clear error, nothing left behind */
static void test_owner_no_head(void **state)
{
    corral_tasks_opts_t o = {.address = "unix:/nonexistent/corral.sock",
                             .token_path = "/nonexistent/token"};
    corral_tasks_t *t = NULL;
    char *why = NULL;
    int rc = corral_tasks_init(&o, &t, &why);
    assert_true(rc < 0);
    assert_null(t);
    assert_non_null(why);
    assert_non_null(strstr(why, "connecting to the head"));
    assert_non_null(strstr(corral_tasks_errmsg(), "connecting to the head"));
    free(why);
    assert_false(corral_worker_is_leased());
    /* a worker started by hand says what it is for */
    assert_int_equal(corral_worker_main(), 1);
}

int main(void)
{
    unsetenv("CORRAL_TASK_LEASE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr),          cmocka_unit_test(test_call),
        cmocka_unit_test(test_return),       cmocka_unit_test(test_hello),
        cmocka_unit_test(test_mac),          cmocka_unit_test(test_args),
        cmocka_unit_test(test_reader),       cmocka_unit_test(test_memfd_unsealed),
        cmocka_unit_test(test_worker_calls), cmocka_unit_test(test_actor_cmd),
        cmocka_unit_test(test_caller_feed),  cmocka_unit_test(test_owner_no_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
