/* web/: the pure core (route.c) and the Prometheus writer (prom.c):
 * %-decoding, cookies, query integers, route patterns, who a request is
 * (cluster token, login cookie, job credential, nothing, wrong), the
 * login redirect, and the text format's escapes. The server itself is
 * tested with curl against a real head (tests/cli/web_api.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "web/web.h"
#include <string.h>

static void test_decode(void **state)
{
    char b[16];
    assert_true(web_decode("a%2Fb", 5, b, sizeof(b), false));
    assert_string_equal(b, "a/b");
    assert_true(web_decode("a+b%20c", 7, b, sizeof(b), true));
    assert_string_equal(b, "a b c");
    assert_true(web_decode("a+b", 3, b, sizeof(b), false));
    assert_string_equal(b, "a+b");
    assert_false(web_decode("%zz", 3, b, sizeof(b), false));               /* not hex */
    assert_false(web_decode("ab%2", 4, b, sizeof(b), false));              /* cut short */
    assert_false(web_decode("a%00b", 5, b, sizeof(b), false));             /* a NUL */
    assert_false(web_decode("0123456789abcdef", 16, b, sizeof(b), false)); /* no room */
    assert_true(web_decode("0123456789abcde", 15, b, sizeof(b), false));
}

static void test_cookie(void **state)
{
    char b[80];
    assert_true(web_cookie_get("a=1; corral_session=xyz; b=2", "corral_session", b, sizeof(b)));
    assert_string_equal(b, "xyz");
    assert_true(web_cookie_get("corral_session=\"q\"", "corral_session", b, sizeof(b)));
    assert_string_equal(b, "q");
    assert_false(
        web_cookie_get("xcorral_session=1; corral_sessionx=2", "corral_session", b, sizeof(b)));
    assert_false(web_cookie_get("", "corral_session", b, sizeof(b)));
    assert_false(web_cookie_get("corral_session=0123456789", "corral_session", b, 4)); /* room */
}

static void test_query(void **state)
{
    web_in_t in = {.nquery = 3};
    in.query[0] = (web_kv_t){"limit", "5"};
    in.query[1] = (web_kv_t){"bad", "-1"};
    in.query[2] = (web_kv_t){"big", "99999999999"};
    uint32_t v;
    char why[160];
    assert_int_equal(web_query_u32(&in, "limit", 7, 1, 10, &v, why, sizeof(why)), 0);
    assert_int_equal(v, 5);
    assert_int_equal(web_query_u32(&in, "absent", 7, 1, 10, &v, why, sizeof(why)), 0);
    assert_int_equal(v, 7);
    assert_int_equal(web_query_u32(&in, "bad", 7, 0, 10, &v, why, sizeof(why)), CR_EINVAL);
    assert_non_null(strstr(why, "bad"));
    assert_int_equal(web_query_u32(&in, "big", 7, 0, 100000, &v, why, sizeof(why)), CR_EINVAL);
    assert_int_equal(web_query_u32(&in, "limit", 7, 6, 10, &v, why, sizeof(why)), CR_EINVAL);
}

static char seen[256];
static web_who_t seen_who;

static void echo(void *ctx, const web_req_t *rq, web_out_t *out)
{
    seen[0] = '\0';
    for (size_t i = 0; i < rq->nargs; i++)
        snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "[%s]", rq->args[i]);
    seen_who = rq->who;
    cr_buf_printf(&out->body, "%s", (const char *)ctx);
}

static bool job_bearer(void *ctx, const char *text, char *job_id, size_t size)
{
    if (strcmp(text, "job:7:secret") != 0)
        return false;
    snprintf(job_id, size, "7");
    return true;
}

static web_t *server(void)
{
    uint8_t token[WEB_KEY_LEN];
    memset(token, 0xab, sizeof(token));
    char why[160];
    web_config_t wc = {.who = "test", .token = token, .login = true, .job_bearer = job_bearer};
    web_t *w = web_new(&wc, why, sizeof(why));
    assert_non_null(w);
    web_route_add(w, &(web_route_t){"GET", "/healthz", WEB_PUBLIC, echo, "health"});
    web_route_add(w, &(web_route_t){"GET", "/api/v1/nodes/{}/topology", 0, echo, "topo"});
    web_route_add(w, &(web_route_t){"GET", "/api/v1/nodes/{}", 0, echo, "node"});
    web_route_add(w, &(web_route_t){"GET", "/api/v1/jobs/{}", WEB_JOB, echo, "job"});
    web_route_add(w, &(web_route_t){"GET", "/static/*", 0, echo, "static"});
    return w;
}

static int run(web_t *w, const char *path, const char *auth, const char *cookie, web_out_t *out)
{
    web_in_t in = {.method = "GET", .path = path, .authorization = auth, .cookie = cookie};
    memset(out, 0, sizeof(*out));
    seen[0] = '\0';
    web_dispatch(w, &in, out);
    return out->status;
}

#define HEX "abababababababababababababababababababababababababababababababab"
#define CLUSTER "Bearer " HEX

static void test_routes_and_access(void **state)
{
    web_t *w = server();
    web_out_t o;
    assert_int_equal(run(w, "/healthz", NULL, NULL, &o), 200); /* public */
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/n1", NULL, NULL, &o), 401);
    assert_non_null(strstr(o.body.s, "authentication required"));
    web_out_fini(&o);
    assert_int_equal(run(w, "/nosuch", NULL, NULL, &o), 401); /* no route is told for free */
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/a%2Fb", CLUSTER, NULL, &o), 200);
    assert_string_equal(seen, "[a/b]");
    assert_int_equal(seen_who, WEB_WHO_CLUSTER);
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/n1/topology", CLUSTER, NULL, &o), 200);
    assert_string_equal(seen, "[n1]");
    assert_string_equal(o.body.s, "topo");
    web_out_fini(&o);
    assert_int_equal(run(w, "/static/js/app.js", CLUSTER, NULL, &o), 200);
    assert_string_equal(seen, "[js/app.js]");
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/%zz", CLUSTER, NULL, &o), 400);
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/", CLUSTER, NULL, &o), 404); /* an empty segment */
    web_out_fini(&o);
    assert_int_equal(run(w, "/nosuch", CLUSTER, NULL, &o), 404);
    web_out_fini(&o);
    /* a wrong token, one digit off, the wrong scheme, a lower-case scheme */
    char off[sizeof(CLUSTER)];
    memcpy(off, CLUSTER, sizeof(CLUSTER));
    off[sizeof(CLUSTER) - 2] = 'c';
    assert_int_equal(run(w, "/api/v1/nodes/n1", off, NULL, &o), 401);
    assert_non_null(strstr(o.body.s, "credential is wrong"));
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/n1", "Basic abab", NULL, &o), 401);
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/n1", "bearer  " HEX " ", NULL, &o), 200);
    web_out_fini(&o);
    /* a job credential: its job's routes only */
    assert_int_equal(run(w, "/api/v1/jobs/7", "Bearer job:7:secret", NULL, &o), 200);
    assert_int_equal(seen_who, WEB_WHO_JOB);
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/n1", "Bearer job:7:secret", NULL, &o), 403);
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/jobs/7", "Bearer job:7:guess", NULL, &o), 401);
    web_out_fini(&o);
    /* methods */
    web_in_t in = {.method = "POST", .path = "/api/v1/nodes/n1", .authorization = CLUSTER};
    memset(&o, 0, sizeof(o));
    web_dispatch(w, &in, &o);
    assert_int_equal(o.status, 405);
    web_out_fini(&o);
    web_free(w);
}

static void test_login(void **state)
{
    web_t *w = server();
    const char *login = web_login_token(w);
    assert_int_equal(strlen(login), 64);
    web_in_t in = {.method = "GET", .path = "/api/v1/nodes/n1", .nquery = 2};
    in.query[0] = (web_kv_t){"token", login};
    in.query[1] = (web_kv_t){"x", "a b"};
    web_out_t o = {0};
    web_dispatch(w, &in, &o);
    assert_int_equal(o.status, 303);
    assert_string_equal(o.location, "/api/v1/nodes/n1?x=a%20b"); /* the token dropped */
    assert_non_null(strstr(o.cookie, "HttpOnly"));
    assert_non_null(strstr(o.cookie, "SameSite=Strict"));
    char cookie[200];
    snprintf(cookie, sizeof(cookie), "other=1; %.*s", (int)strcspn(o.cookie, ";"), o.cookie);
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/n1", NULL, cookie, &o), 200);
    assert_int_equal(seen_who, WEB_WHO_SESSION);
    web_out_fini(&o);
    assert_int_equal(run(w, "/api/v1/nodes/n1", NULL, "corral_session=00", &o), 401);
    web_out_fini(&o);
    in.query[0].value = "00";
    memset(&o, 0, sizeof(o));
    web_dispatch(w, &in, &o);
    assert_int_equal(o.status, 401); /* a wrong login token sets nothing */
    assert_string_equal(o.cookie, "");
    web_out_fini(&o);
    web_free(w);
}

static void test_prom(void **state)
{
    cr_buf_t b = {0};
    web_prom_family(&b, "corral_x", "gauge", "a\\b\nc");
    const char *l[] = {"node", "a\"b\\c\nd", "index", "0"};
    web_prom_sample(&b, "corral_x", l, 2, 1.5);
    web_prom_sample(&b, "corral_x", NULL, 0, 3);
    assert_string_equal(b.s, "# HELP corral_x a\\\\b\\nc\n# TYPE corral_x gauge\n"
                             "corral_x{node=\"a\\\"b\\\\c\\nd\",index=\"0\"} 1.5\ncorral_x 3\n");
    cr_buf_free(&b);
}

static void test_key_equal(void **state)
{
    uint8_t a[32], b[32];
    memset(a, 1, sizeof(a));
    memcpy(b, a, sizeof(b));
    assert_true(web_key_equal(a, b, sizeof(a)));
    b[31] ^= 1;
    assert_false(web_key_equal(a, b, sizeof(a)));
    b[31] ^= 1;
    b[0] ^= 0x80;
    assert_false(web_key_equal(a, b, sizeof(a)));
    assert_true(web_is_loopback("127.0.0.1") && web_is_loopback("::1") &&
                web_is_loopback("localhost") && !web_is_loopback("0.0.0.0") &&
                !web_is_loopback("10.0.0.1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),    cmocka_unit_test(test_cookie),
        cmocka_unit_test(test_query),     cmocka_unit_test(test_routes_and_access),
        cmocka_unit_test(test_login),     cmocka_unit_test(test_prom),
        cmocka_unit_test(test_key_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
