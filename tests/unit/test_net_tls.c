/* TLS in net/conn.c (net/tls.h, docs/protocol.md "TLS") over real TCP
 * sockets on one loop: a pinned client and a TLS listener carry requests
 * and a 4 MiB stream; a wrong pin, a plain client on the TLS port, a TLS
 * client on a plain port and garbage that starts like a TLS record each
 * close that one connection with words saying why, and the server carries
 * on. Fingerprints parse in the forms corral and openssl print. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "net/net.h"
#include "net/tls.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[] = "/tmp/corral-tls-XXXXXX";
static char logpath[600];
static const uint8_t token[CR_TOKEN_LEN] = {7, 7, 7};

typedef struct side {
    int ready, closed, msgs;
    int close_err;
    char why[400];
    char text[256];
    uint64_t log_bytes, log_next;
    const char *tls;
} side_t;

static struct {
    uv_loop_t loop;
    cr_net_t *server;
    side_t sv;
    int tls_port, plain_port;
    uint8_t fp[CR_TLS_FP_LEN];
    int nets_done;
} W;

static void sv_ready(cr_conn_t *c, void *data)
{
    side_t *s = data;
    s->ready++;
    s->tls = cr_conn_tls(c);
}

static void sv_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    side_t *s = data;
    s->msgs++;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.reply_to = e->id;
    if (e->body_case == CORRAL__ENVELOPE__BODY_JOB_SUBMIT) {
        Corral__JobSubmitted r = CORRAL__JOB_SUBMITTED__INIT;
        r.job_id = e->job_submit->spec->worker->argv[0];
        a.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMITTED;
        a.job_submitted = &r;
        assert_int_equal(cr_conn_send(c, &a), 0);
    } else if (e->body_case == CORRAL__ENVELOPE__BODY_JOB_LOGS) {
        /* 4 MiB at once: well above one TLS record, one read, one BIO */
        static uint8_t chunk[64 * 1024];
        memset(chunk, 'x', sizeof(chunk));
        Corral__LogChunk r = CORRAL__LOG_CHUNK__INIT;
        r.job_id = e->job_logs->job_id;
        r.data.data = chunk;
        r.data.len = sizeof(chunk);
        a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
        a.log_chunk = &r;
        for (int i = 0; i < 64; i++) {
            r.offset = (uint64_t)i * sizeof(chunk);
            assert_int_equal(cr_conn_send(c, &a), 0);
        }
    }
}

static void any_close(cr_conn_t *c, int err, void *data)
{
    side_t *s = data;
    s->closed++;
    s->close_err = err;
    snprintf(s->why, sizeof(s->why), "%s", cr_conn_why(c));
}

static void cl_ready(cr_conn_t *c, void *data)
{
    side_t *s = data;
    s->ready++;
    s->tls = cr_conn_tls(c);
}

static void cl_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    side_t *s = data;
    s->msgs++;
    if (e->body_case == CORRAL__ENVELOPE__BODY_JOB_SUBMITTED)
        snprintf(s->text, sizeof(s->text), "%s", e->job_submitted->job_id);
    if (e->body_case == CORRAL__ENVELOPE__BODY_LOG_CHUNK) {
        const Corral__LogChunk *l = e->log_chunk;
        assert_int_equal(l->offset, s->log_next); /* in order, nothing lost */
        for (size_t i = 0; i < l->data.len; i++)
            assert_int_equal(l->data.data[i], 'x');
        s->log_next += l->data.len;
        s->log_bytes += l->data.len;
    }
}

static const cr_net_callbacks_t sv_cb = {
    .on_ready = sv_ready, .on_message = sv_message, .on_close = any_close};
static const cr_net_callbacks_t cl_cb = {
    .on_ready = cl_ready, .on_message = cl_message, .on_close = any_close};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define RUN_UNTIL(cond)                                                                            \
    do {                                                                                           \
        double deadline_ = now_s() + 5;                                                            \
        while (!(cond) && now_s() < deadline_) {                                                   \
            uv_run(&W.loop, UV_RUN_NOWAIT);                                                        \
            if (!(cond))                                                                           \
                usleep(200);                                                                       \
        }                                                                                          \
        if (!(cond))                                                                               \
            fail_msg("timed out waiting for %s", #cond);                                           \
    } while (0)

static bool log_has(const char *what)
{
    char *s;
    size_t n;
    assert_int_equal(cr_read_file_alloc(NULL, logpath, &s, &n), 0);
    bool has = strstr(s, what) != NULL;
    free(s);
    return has;
}

static void net_done(void *data)
{
    W.nets_done++;
}

static void close_net(cr_net_t *n)
{
    int d0 = W.nets_done;
    cr_net_close(n, net_done, NULL);
    RUN_UNTIL(W.nets_done == d0 + 1);
}

static int setup(void **state)
{
    memset(&W, 0, sizeof(W));
    if (uv_loop_init(&W.loop))
        return -1;
    snprintf(logpath, sizeof(logpath), "%s/log", dir);
    cr_log_set_level(CR_LOG_WARN);
    cr_log_set_file(logpath);
    if (truncate(logpath, 0))
        return -1;
    char why[512];
    const cr_tls_ops_t *t = cr_tls_load(why, sizeof(why));
    if (!t)
        fail_msg("%s", why);
    char *cert, *key;
    assert_int_equal(t->selfsigned("corral test head", &cert, &key, why, sizeof(why)), 0);
    assert_int_equal(t->fingerprint(cert, strlen(cert), W.fp, why, sizeof(why)), 0);
    cr_net_config_t cfg = {
        .token = token, .name = "head", .tls_cert_pem = cert, .tls_key_pem = key};
    W.server = cr_net_new(&W.loop, &cfg, &sv_cb, &W.sv);
    free(cert);
    free(key);
    assert_non_null(W.server);
    assert_int_equal(cr_net_listen_tcp_tls(W.server, NULL, 0, &W.tls_port, true), 0);
    return cr_net_listen_tcp(W.server, NULL, 0, &W.plain_port);
}

static int teardown(void **state)
{
    close_net(W.server);
    int r = uv_loop_close(&W.loop);
    cr_log_set_file(NULL);
    return r;
}

/* A client net pinning pin (NULL: plain) and one connection of it to port. */
static cr_net_t *client(const uint8_t *pin, int port, side_t *s, cr_conn_t **c)
{
    cr_net_config_t cfg = {.token = token, .name = "client", .tls_pin = pin};
    cr_net_t *n = cr_net_new(&W.loop, &cfg, &cl_cb, s);
    assert_non_null(n);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    assert_int_equal(cr_net_connect(n, addr, CORRAL__ROLE__ROLE_CLIENT, c), 0);
    return n;
}

static void submit(cr_conn_t *c, uint64_t id, const char *cmd)
{
    char *argv[] = {(char *)cmd};
    Corral__WorkerSpec w = CORRAL__WORKER_SPEC__INIT;
    w.n_argv = 1;
    w.argv = argv;
    Corral__JobSpec spec = CORRAL__JOB_SPEC__INIT;
    spec.worker = &w;
    spec.num_workers = 1;
    Corral__JobSubmit js = CORRAL__JOB_SUBMIT__INIT;
    js.spec = &spec;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = id;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMIT;
    e.job_submit = &js;
    assert_int_equal(cr_conn_send(c, &e), 0);
}

static void test_fingerprints(void **state)
{
    uint8_t fp[CR_TLS_FP_LEN], back[CR_TLS_FP_LEN];
    for (int i = 0; i < CR_TLS_FP_LEN; i++)
        fp[i] = (uint8_t)(i * 37 + 5);
    char text[96], colons[128] = "SHA256:";
    cr_tls_fp_format(fp, text, sizeof(text));
    assert_int_equal(strlen(text), 7 + 64);
    assert_int_equal(cr_tls_fp_parse(text, back), 0);
    assert_memory_equal(fp, back, sizeof(fp));
    assert_int_equal(cr_tls_fp_parse(text + 7, back), 0); /* the hex alone */
    for (int i = 0; i < CR_TLS_FP_LEN; i++) /* as openssl x509 -fingerprint prints it */
        snprintf(colons + strlen(colons), 4, "%02X%s", fp[i], i + 1 < CR_TLS_FP_LEN ? ":" : "");
    memset(back, 0, sizeof(back));
    assert_int_equal(cr_tls_fp_parse(colons, back), 0);
    assert_memory_equal(fp, back, sizeof(fp));
    const char *bad[] = {"", "sha256:", "sha256:00", "md5:00", text + 8, "zz"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(cr_tls_fp_parse(bad[i], back), CR_EPARSE);
    char odd[96];
    snprintf(odd, sizeof(odd), "%s", text);
    odd[20] = 'g';
    assert_int_equal(cr_tls_fp_parse(odd, back), CR_EPARSE);
    colons[12] = '-';
    assert_int_equal(cr_tls_fp_parse(colons, back), CR_EPARSE);
}

static void test_round_trip(void **state)
{
    side_t cl = {0};
    cr_conn_t *c;
    cr_net_t *n = client(W.fp, W.tls_port, &cl, &c);
    RUN_UNTIL(cl.ready == 1 && W.sv.ready == 1);
    assert_string_equal(cl.tls, "TLSv1.3");
    assert_string_equal(W.sv.tls, "TLSv1.3");
    submit(c, 1, "over-tls");
    RUN_UNTIL(cl.msgs == 1);
    assert_string_equal(cl.text, "over-tls");
    Corral__JobLogs jl = CORRAL__JOB_LOGS__INIT;
    jl.job_id = "j";
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 2;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_LOGS;
    e.job_logs = &jl;
    assert_int_equal(cr_conn_send(c, &e), 0);
    RUN_UNTIL(cl.log_bytes == 64u * 64 * 1024);
    /* the plain port of the same net stays plain */
    side_t pl = {0};
    cr_conn_t *p;
    cr_net_t *pn = client(NULL, W.plain_port, &pl, &p);
    RUN_UNTIL(pl.ready == 1);
    assert_null(pl.tls);
    close_net(pn);
    close_net(n);
    assert_int_equal(cl.close_err, 0);
    assert_false(log_has("warning"));
}

static void test_wrong_pin(void **state)
{
    uint8_t other[CR_TLS_FP_LEN];
    memcpy(other, W.fp, sizeof(other));
    other[31] ^= 1;
    side_t cl = {0};
    cr_conn_t *c;
    cr_net_t *n = client(other, W.tls_port, &cl, &c);
    RUN_UNTIL(cl.closed == 1);
    assert_int_equal(cl.close_err, -EPROTO);
    assert_int_equal(cl.ready, 0);
    assert_non_null(strstr(cl.why, "not the pinned sha256:"));
    char fp[96];
    cr_tls_fp_format(W.fp, fp, sizeof(fp));
    assert_non_null(strstr(cl.why, fp)); /* the one the head has, said */
    assert_int_equal(W.sv.ready, 0);
    close_net(n);
}

static void test_plain_client_refused(void **state)
{
    side_t cl = {0};
    cr_conn_t *c;
    cr_net_t *n = client(NULL, W.tls_port, &cl, &c);
    RUN_UNTIL(cl.closed == 1);
    assert_int_equal(cl.close_err, CR_EACCES);
    assert_non_null(strstr(cl.why, "refused by the server: this head takes TLS only"));
    assert_true(log_has("a plain (non-TLS) client on a TLS port"));
    assert_int_equal(W.sv.ready, 0);
    close_net(n);
}

static void test_tls_client_on_plain_port(void **state)
{
    side_t cl = {0};
    cr_conn_t *c;
    cr_net_t *n = client(W.fp, W.plain_port, &cl, &c);
    RUN_UNTIL(cl.closed == 1);
    assert_int_equal(cl.ready, 0);
    assert_non_null(strstr(cl.why, "does it listen with TLS?"));
    assert_true(log_has("a TLS client on a port without TLS"));
    close_net(n);
}

/* Bytes that start like a TLS record and go on as garbage: that one
 * connection is closed with a line saying why; a pinned client still gets
 * in and through afterwards. */
static void test_garbage_record(void **state)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)W.tls_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    uint8_t junk[300] = {0x16, 0x03, 0x01, 0x01, 0x00, 0x01};
    for (size_t i = 6; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 131);
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    RUN_UNTIL(log_has("TLS handshake failed"));
    char b[64];
    ssize_t got;
    RUN_UNTIL((got = recv(fd, b, sizeof(b), MSG_DONTWAIT)) == 0 ||
              (got < 0 && errno != EAGAIN)); /* the alert, if any, then the end */
    close(fd);
    side_t cl = {0};
    cr_conn_t *c;
    cr_net_t *n = client(W.fp, W.tls_port, &cl, &c);
    RUN_UNTIL(cl.ready == 1);
    submit(c, 9, "after");
    RUN_UNTIL(cl.msgs == 1);
    assert_string_equal(cl.text, "after");
    close_net(n);
}

/* A process's own certificate (net/tls_files.c): made once, kept while
 * it is valid and names the address asked for, made again when it does
 * not; a key others may read is refused; a key of another certificate
 * does not pass the shim's check. */
static void test_own_cert(void **state)
{
    char why[1024], what[700], path[700];
    char *c1, *k1, *c2, *k2, *c3, *k3;
    assert_int_equal(cr_tls_own_cert(dir, "own", "corral test", "10.9.8.7", &c1, &k1, what,
                                     sizeof(what), why, sizeof(why)),
                     0);
    assert_string_equal(what, "");
    snprintf(path, sizeof(path), "%s/own.key", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* kept across a restart */
    assert_int_equal(cr_tls_own_cert(dir, "own", "corral test", "10.9.8.7", &c2, &k2, what,
                                     sizeof(what), why, sizeof(why)),
                     0);
    assert_string_equal(what, "");
    assert_string_equal(c1, c2);
    assert_string_equal(k1, k2);
    /* an address it does not name: a new one, said */
    assert_int_equal(cr_tls_own_cert(dir, "own", "corral test", "10.9.8.6", &c3, &k3, what,
                                     sizeof(what), why, sizeof(why)),
                     0);
    assert_non_null(strstr(what, "does not name 10.9.8.6"));
    assert_string_not_equal(c1, c3);
    const cr_tls_ops_t *t = cr_tls_load(why, sizeof(why));
    assert_non_null(t);
    assert_int_equal(t->check(c3, strlen(c3), k3, strlen(k3), "10.9.8.6", why, sizeof(why)), 0);
    assert_int_equal(t->check(c3, strlen(c3), k3, strlen(k3), "localhost", why, sizeof(why)), 0);
    assert_int_equal(t->check(c3, strlen(c3), k1, strlen(k1), NULL, why, sizeof(why)), CR_TLS_ERR);
    assert_non_null(strstr(why, "does not belong"));
    assert_int_equal(t->check(c3, strlen(c3), "x", 1, NULL, why, sizeof(why)), CR_TLS_ERR);
    /* a key others may read: refused, not replaced */
    assert_int_equal(chmod(path, 0644), 0);
    char *c4 = (char *)1, *k4 = (char *)1;
    assert_int_equal(cr_tls_own_cert(dir, "own", "corral test", NULL, &c4, &k4, what, sizeof(what),
                                     why, sizeof(why)),
                     CR_EACCES);
    assert_null(c4);
    assert_null(k4);
    assert_non_null(strstr(why, "(mode 644): chmod 600 it"));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    free(c1), free(k1), free(c2), free(k2), free(c3), free(k3);
}

static int group_setup(void **state)
{
    return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fingerprints),
        cmocka_unit_test(test_own_cert),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_pin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plain_client_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tls_client_on_plain_port, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_record, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
