/* The head's message handlers through head_dispatch, on the socketless
 * harness (daemon/harness.h) and detached connections (net/net.h): a job
 * submitted over a client connection is answered JobSubmitted and fails
 * with the harness's refusal (nothing is started), an agent that beats
 * before it registers is answered an Error, a message the head does not
 * serve is answered an Error, and a closed detached connection refuses
 * sends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "daemon/harness.h"
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_GOT 64

typedef struct got {
    Corral__Envelope *v[MAX_GOT];
    size_t n;
} got_t;

/* keeps a copy of each envelope the head sends */
static void sink(void *arg, const Corral__Envelope *e)
{
    got_t *g = arg;
    assert_true(g->n < MAX_GOT);
    size_t len = corral__envelope__get_packed_size(e);
    uint8_t *buf = cr_malloc(len ? len : 1);
    corral__envelope__pack(e, buf);
    g->v[g->n] = corral__envelope__unpack(NULL, len, buf);
    assert_non_null(g->v[g->n]);
    g->n++;
    free(buf);
}

static void got_clear(got_t *g)
{
    for (size_t i = 0; i < g->n; i++)
        corral__envelope__free_unpacked(g->v[i], NULL);
    g->n = 0;
}

/* the one answer to request id among what was sent */
static const Corral__Envelope *answer(const got_t *g, uint64_t id)
{
    const Corral__Envelope *a = NULL;
    for (size_t i = 0; i < g->n; i++)
        if (g->v[i]->reply_to == id) {
            assert_null(a); /* one answer only */
            a = g->v[i];
        }
    assert_non_null(a);
    return a;
}

typedef struct fx {
    char dir[64];
    got_t got;
} fx_t;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    fx_t *f = cr_calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/corral-head-dispatch-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    assert_int_equal(head_harness_init(CORRAL_SOURCE_DIR "/specs/dgx-h100.yaml", f->dir), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    head_harness_fini();
    got_clear(&f->got);
    assert_int_equal(nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
    free(f);
    return 0;
}

static void test_submit_fails_with_the_harness_reason(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);

    char *argv[] = {"true"};
    Corral__Quantity q = CORRAL__QUANTITY__INIT, *qs[] = {&q};
    q.name = "GPU";
    q.amount = CR_QTY_ONE;
    Corral__WorkerSpec ws = CORRAL__WORKER_SPEC__INIT;
    ws.argv = argv;
    ws.n_argv = 1;
    ws.resources = qs;
    ws.n_resources = 1;
    Corral__JobSpec spec = CORRAL__JOB_SPEC__INIT;
    spec.name = "t";
    spec.worker = &ws;
    Corral__JobSubmit js = CORRAL__JOB_SUBMIT__INIT;
    js.spec = &spec;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 7;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMIT;
    e.job_submit = &js;
    head_dispatch(c, &e);
    for (int i = 0; i < 4; i++)
        head_harness_run();

    const Corral__Envelope *a = answer(&f->got, 7);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_SUBMITTED);
    char job_id[32];
    assert_true(a->job_submitted->job_id[0]);
    cr_strlcpy(job_id, a->job_submitted->job_id, sizeof(job_id));

    Corral__JobStatusRequest sr = CORRAL__JOB_STATUS_REQUEST__INIT;
    sr.job_id = job_id;
    Corral__Envelope s = CORRAL__ENVELOPE__INIT;
    s.id = 8;
    s.body_case = CORRAL__ENVELOPE__BODY_JOB_STATUS;
    s.job_status = &sr;
    head_dispatch(c, &s);
    a = answer(&f->got, 8);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_INFO);
    const Corral__JobInfo *ji = a->job_info;
    assert_string_equal(ji->job_id, job_id);
    assert_int_equal(ji->state, CORRAL__JOB_STATE__JOB_FAILED);
    assert_int_equal(ji->n_workers, 1);
    assert_int_equal(ji->workers[0]->state, CORRAL__WORKER_STATE__WORKER_FAILED);
    assert_non_null(strstr(ji->workers[0]->reason, HEAD_HARNESS_REFUSAL));
    assert_non_null(strstr(ji->reason, HEAD_HARNESS_REFUSAL));

    head_harness_conn_closed(c);
    cr_conn_free_detached(c);
}

static void test_heartbeat_before_register_is_an_error(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    Corral__Heartbeat h = CORRAL__HEARTBEAT__INIT;
    h.node_id = "nobody";
    h.incarnation = 1;
    h.seq = 1;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 3;
    e.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &h;
    head_dispatch(c, &e);
    const Corral__Envelope *a = answer(&f->got, 3);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_ERROR);
    assert_true(a->error->code < 0);
    assert_non_null(strstr(a->error->message, "Register"));
    assert_int_equal(f->got.n, 1);
    head_harness_conn_closed(c);
    cr_conn_free_detached(c);
}

static void test_unserved_message_is_an_error(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    Corral__Ack ack = CORRAL__ACK__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 5;
    e.body_case = CORRAL__ENVELOPE__BODY_ACK;
    e.ack = &ack;
    head_dispatch(c, &e);
    const Corral__Envelope *a = answer(&f->got, 5);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_ERROR);
    assert_int_equal(a->error->code, CR_ENOSYS);
    head_harness_conn_closed(c);
    cr_conn_free_detached(c);
}

static void test_detached_conn(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    assert_int_equal(cr_conn_role(c), CORRAL__ROLE__ROLE_AGENT);
    assert_true(cr_conn_is_ready(c));
    assert_non_null(strstr(cr_conn_peer(c), "detached"));
    assert_int_equal(cr_conn_next_id(c), 1);
    assert_int_equal(cr_conn_next_id(c), 2);
    int x;
    cr_conn_set_data(c, &x);
    assert_ptr_equal(cr_conn_data(c), &x);
    /* what the head may not send is refused as on a real connection */
    Corral__JobSubmit js = CORRAL__JOB_SUBMIT__INIT;
    Corral__Envelope bad = CORRAL__ENVELOPE__INIT;
    bad.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMIT;
    bad.job_submit = &js;
    assert_int_equal(cr_conn_send(c, &bad), CR_EINVAL);
    assert_int_equal(f->got.n, 0);
    assert_int_equal(cr_conn_reply_error(c, 9, CR_ENOENT, "no %s", "such"), 0);
    assert_int_equal(f->got.n, 1);
    assert_int_equal(f->got.v[0]->reply_to, 9);
    assert_string_equal(f->got.v[0]->error->message, "no such");
    cr_conn_close(c, 0);
    assert_false(cr_conn_is_ready(c));
    assert_int_equal(cr_conn_reply_error(c, 10, CR_ENOENT, "late"), -ENOTCONN);
    assert_int_equal(f->got.n, 1);
    cr_conn_free_detached(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_submit_fails_with_the_harness_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heartbeat_before_register_is_an_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unserved_message_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_detached_conn, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
