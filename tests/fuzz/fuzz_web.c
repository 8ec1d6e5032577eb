/* Fuzz the HTTP request handling (web/route.c and the head's routes in
 * head/web.c): each input is one request as the server hands it to
 * web_dispatch, against a head set up once (daemon/harness.h, a simulated
 * DGX H100 node, no sockets) with every route of the head's server.
 *
 * Input: up to five lines: method, path (as sent, %-escapes and all), the
 * Authorization header, the Cookie header (an empty line: no header), and
 * the query string, split at '&' and '=' and decoded as web/server.c
 * decodes it. The cluster token is 32 bytes of 0x11 (the seeds carry its
 * hex, so the fuzzer reaches the authenticated handlers). A stream answer
 * (the event stream) is read a few times, then freed. */
#undef NDEBUG
#include "daemon/harness.h"
#include "web/web.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CORRAL_SOURCE_DIR
#error "CORRAL_SOURCE_DIR must be defined"
#endif

static web_t *web, *web_tls; /* web_tls: as the head serves off loopback (HTTPS) */
static char dir[64];

static void teardown(void)
{
    web_free(web);
    web_free(web_tls);
    head_harness_fini();
    char *db = cr_asprintf("%s/state.db", dir), *logs = cr_asprintf("%s/logs", dir);
    unlink(db);
    char *wal = cr_asprintf("%s-wal", db), *shm = cr_asprintf("%s-shm", db);
    unlink(wal);
    unlink(shm);
    rmdir(logs);
    rmdir(dir);
    free(db);
    free(logs);
    free(wal);
    free(shm);
}

static void setup(void)
{
    cr_log_set_level(CR_LOG_ERROR);
    snprintf(dir, sizeof(dir), "/tmp/corral-fuzz-web-XXXXXX");
    assert(mkdtemp(dir));
    if (head_harness_init(CORRAL_SOURCE_DIR "/specs/dgx-h100.yaml", dir) < 0)
        abort();
    uint8_t token[WEB_KEY_LEN];
    memset(token, 0x11, sizeof(token));
    char why[256];
    web_config_t wc = {.who = "fuzz", .token = token, .login = true};
    web = web_new(&wc, why, sizeof(why));
    assert(web);
    head_web_routes(web);
    /* never listens: the PEM only has to be there (a Secure cookie) */
    wc.tls_cert_pem = "-----BEGIN CERTIFICATE-----\n";
    wc.tls_key_pem = "-----BEGIN PRIVATE KEY-----\n";
    web_tls = web_new(&wc, why, sizeof(why));
    assert(web_tls);
    head_web_routes(web_tls);
    atexit(teardown);
}

/* The next line of the input into a NUL-terminated copy (NULL when the
 * input is used up). */
static char *line(const uint8_t **data, size_t *size)
{
    if (!*size)
        return NULL;
    const uint8_t *nl = memchr(*data, '\n', *size);
    size_t n = nl ? (size_t)(nl - *data) : *size;
    char *s = cr_malloc(n + 1);
    memcpy(s, *data, n);
    s[n] = '\0';
    *data += nl ? n + 1 : n;
    *size -= nl ? n + 1 : n;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!web)
        setup();
    char *method = line(&data, &size), *path = line(&data, &size), *auth = line(&data, &size),
         *cookie = line(&data, &size), *query = line(&data, &size);
    web_in_t in = {.method = method ? method : "GET", .path = path ? path : "/"};
    in.authorization = auth && auth[0] ? auth : NULL;
    in.cookie = cookie && cookie[0] ? cookie : NULL;
    char arena[4096];
    size_t used = 0;
    for (char *save = NULL, *kv = query ? strtok_r(query, "&", &save) : NULL; kv;
         kv = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(kv, '=');
        const char *v = eq ? eq + 1 : "";
        size_t kn = eq ? (size_t)(eq - kv) : strlen(kv), vn = strlen(v);
        if (used + kn + vn + 2 > sizeof(arena) || in.nquery == WEB_MAX_QUERY)
            break;
        char *k = arena + used;
        if (!web_decode(kv, kn, k, sizeof(arena) - used, true))
            continue;
        used += strlen(k) + 1;
        char *dv = arena + used;
        if (!web_decode(v, vn, dv, sizeof(arena) - used, true))
            continue;
        used += strlen(dv) + 1;
        in.query[in.nquery++] = (web_kv_t){k, dv};
    }
    web_out_t out = {0};
    web_dispatch(in.nquery & 1 ? web_tls : web, &in, &out);
    assert(out.status >= 200 && out.status < 600);
    assert(out.type);
    if (out.stream) {
        char buf[512];
        for (int i = 0; i < 4; i++)
            if (out.stream(out.stream_ctx, buf, sizeof(buf)) < 0)
                break;
    }
    web_out_fini(&out);
    free(method);
    free(path);
    free(auth);
    free(cookie);
    free(query);
    return 0;
}
