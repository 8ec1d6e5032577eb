/* Fuzz the task protocol's reading side (worker/frame.c, docs/actors.md
 * "Wire"): the input is a byte stream from a peer, taken frame by frame
 * by the reader with HELLO's small limit first and the full one after;
 * each frame goes to the parser of its kind (HELLO's JSON and its nonce,
 * WELCOME's JSON and its mac as the worker checks it, RETURN, and
 * CALL through the C worker's own dispatch, with a function and a class
 * registered; its args read as ref arguments too), CANCEL's id. Whatever comes, nothing reads out
 * of bounds and every RETURN the worker writes parses back. Then the same bytes go through the C
 * worker's whole loop (crt_worker_feed: CALLs, CANCELs noted ahead of their calls, FETCHes of
 * results kept in its object store (odd sizes: the connection counts as TCP), BYE), whose
 * RETURNs must parse too, and through an actor's loop for other callers
 * (crt_worker_caller_feed: methods only, CANCEL, BYE; an actor constructed
 * by a CALL above is called). The bytes are also read as a lease job's
 * command whose last words name a C actor's class and socket directory
 * (crt_actor_cmd_parse, corral_actor_get). */
/* the checks are the point: keep assert() in release builds too */
#undef NDEBUG
#include "worker/frame.h"
#include "worker/worker.h"
#include <assert.h>

static int echo(const void *args, size_t len, corral_result_t *res)
{
    if (len && ((const uint8_t *)args)[0] == 'E')
        return corral_result_error(res, "asked to fail: %.*s", (int)(len > 16 ? 16 : len),
                                   (const char *)args);
    return corral_result_set(res, args, len);
}

static int ctor(const void *args, size_t len, void **state, corral_result_t *res)
{
    *state = NULL;
    return len && ((const uint8_t *)args)[0] == 'E';
}

static int meth(void *state, const void *args, size_t len, corral_result_t *res)
{
    return corral_result_set(res, args, len > 8 ? 8 : len);
}

static const corral_method_def_t methods[] = {{"m", meth}, {NULL, NULL}};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int registered;
    if (!registered) {
        registered = 1;
        corral_worker_register_fn("f", echo);
        corral_worker_register_class("C", ctor, methods, NULL);
    }
    crt_reader_t r;
    crt_reader_init(&r, CRT_HELLO_MAX);
    crt_bytes_add(&r.in, data, size);
    crt_hdr_t h;
    const uint8_t *p;
    int fd, rc;
    while ((rc = crt_reader_next(&r, &h, &p, &fd)) == 1) {
        assert(fd == -1); /* no descriptors came */
        if (h.kind == CRT_HELLO) {
            crt_hello_t hello;
            char why[160];
            if (crt_hello_parse(p, h.len, &hello, why, sizeof(why)) == 0) {
                assert(hello.role);
                uint8_t nonce[CRT_NONCE_LEN];
                if (crt_nonce_parse(hello.nonce, nonce) == 0)
                    assert(strlen(hello.nonce) == 2 * CRT_NONCE_LEN);
                crt_hello_free(&hello);
            }
            r.max = CRT_MAX_FRAME;
        } else if (h.kind == CRT_WELCOME) {
            crt_welcome_t w;
            char why[160];
            if (crt_welcome_parse(p, h.len, &w, why, sizeof(why)) == 0) {
                static const uint8_t key[32], sn[CRT_NONCE_LEN], cn[CRT_NONCE_LEN];
                char want[65];
                crt_welcome_mac_hex(key, sizeof(key), sn, cn, want);
                bool ok = crt_welcome_mac_ok(key, sizeof(key), sn, cn, w.mac);
                assert(ok == (w.mac && !strcmp(w.mac, want)));
                crt_welcome_free(&w);
            }
        } else if (h.kind == CRT_CALL) {
            const char *name;
            size_t nl, alen, n;
            const uint8_t *args;
            const void *item;
            /* the args as ref arguments' encoding: items within them */
            if (crt_call_parse(p, h.len, &name, &nl, &args, &alen) == 0)
                for (size_t i = 0; i < 4; i++)
                    if (corral_args_get(args, alen, i, &item, &n) == 0)
                        assert((const uint8_t *)item >= args &&
                               (const uint8_t *)item + n <= args + alen);
            crt_bytes_t out = {0};
            crt_worker_run_call(p, h.len, &out);
            crt_hdr_t rh;
            assert(crt_hdr_parse(out.p, CRT_MAX_FRAME, &rh) == 0);
            assert(rh.kind == CRT_RETURN && CRT_HDR + rh.len == out.len);
            uint8_t st;
            const uint8_t *v;
            size_t vn;
            assert(crt_return_parse(out.p + CRT_HDR, rh.len, &st, &v, &vn) == 0);
            crt_bytes_free(&out);
        } else if (h.kind == CRT_FETCH) {
            uint64_t oid, off;
            uint32_t len;
            if (crt_fetch_parse(p, h.len, &oid, &off, &len) == 0)
                assert(h.len == CRT_FETCH_LEN && len <= CRT_FETCH_CHUNK);
        } else if (h.kind == CRT_CANCEL) {
            uint64_t id;
            assert((crt_cancel_parse(p, h.len, &id) == 0) == (h.len == 8));
        } else if (h.kind == CRT_RETURN) {
            uint8_t st;
            const uint8_t *v;
            size_t vn;
            if (crt_return_parse(p, h.len, &st, &v, &vn) == 0)
                assert(st <= CRT_SYS_ERROR && vn + 1 == h.len);
        }
    }
    assert(rc == 0 || rc == CR_EPARSE || rc == CR_E2BIG);
    crt_reader_fini(&r);
    if (size <= 4096) {
        char cmd[4097], cls[CORRAL_TASK_NAME_MAX + 1], dir[CRT_LISTEN_DIR_MAX + 1],
            own[CRT_OWNER_ADDR_MAX + 1];
        memcpy(cmd, data, size);
        cmd[size] = 0;
        if (crt_actor_cmd_parse(cmd, cls, dir, own) == 0) {
            assert(*own && strlen(own) <= CRT_OWNER_ADDR_MAX);
            assert(*cls && strlen(cls) <= CORRAL_TASK_NAME_MAX && !strchr(cls, '.'));
            assert(dir[0] == '/' && strlen(dir) <= CRT_LISTEN_DIR_MAX && !strstr(dir, "/.."));
            assert(strstr(cmd, CRT_ACTOR_ARG));
        }
    }
    if (size <= (1u << 20)) {
        assert(crt_worker_caller_feed(data, size) == 0);
        assert(crt_worker_feed(data, size) == 0);
    }
    return 0;
}
