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
#include "head/jobs.h"
#include <ftw.h>
#include <jansson.h>
#include <sqlite3.h>
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

/* The last message of kind b the head sent since the last clear; NULL none. */
static const Corral__Envelope *last_sent(const fx_t *f, Corral__Envelope__BodyCase b)
{
    const Corral__Envelope *found = NULL;
    for (size_t i = 0; i < f->got.n; i++)
        if (f->got.v[i]->body_case == b)
            found = f->got.v[i];
    return found;
}

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

static void count_pg(void *ctx, const Corral__PgInfo *info)
{
    size_t *n = ctx;
    n[0] += info->state == CORRAL__PG_STATE__PG_PENDING ||
            info->state == CORRAL__PG_STATE__PG_PREPARING;
    n[1]++;
}

/* What a status reads (counts by state, the jobs not final and the
 * groups as holders), kept as jobs and groups change, agrees with a walk
 * of every job and group the head keeps: checked at the end of every
 * test here. */
static void check_status_counts(void)
{
    size_t pg[2] = {0, 0};
    pgs_info_each(count_pg, pg);
    assert_int_equal(pgs_pending(), pg[0]);
    holders_t hg = {0};
    pgs_holders(&hg);
    assert_int_equal(hg.v.n + hg.not_listed, pg[1]);
    holders_free(&hg);

    size_t n[CR_JOB_STOPPED + 1] = {0}, live = 0;
    for (size_t i = 0; i < D.jobs.n; i++) {
        n[D.jobs.v[i]->state]++;
        live += !cr_job_state_is_final(D.jobs.v[i]->state);
    }
    for (int s = 0; s <= CR_JOB_STOPPED; s++)
        assert_int_equal(jobs_count((cr_job_state_t)s), n[s]);
    holders_t h = {0};
    jobs_holders(&h);
    assert_int_equal(h.v.n + h.not_listed, live);
    holders_free(&h);
}

static int teardown(void **state)
{
    fx_t *f = *state;
    check_status_counts();
    head_harness_fini();
    got_clear(&f->got);
    assert_int_equal(nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
    free(f);
    return 0;
}

static const Corral__Envelope *send_got(fx_t *f, cr_conn_t *c, Corral__Envelope *e, uint64_t id)
{
    e->id = id;
    head_dispatch(c, e);
    for (int i = 0; i < 4; i++)
        head_harness_run();
    return answer(&f->got, id);
}

/* A JobStatusRequest for job_id (with its workers' environment or not):
 * the head's answer. */
static const Corral__Envelope *job_status(fx_t *f, cr_conn_t *c, const char *job_id, uint64_t id,
                                          bool with_env)
{
    Corral__JobStatusRequest sr = CORRAL__JOB_STATUS_REQUEST__INIT;
    sr.job_id = (char *)job_id;
    sr.with_env = with_env;
    Corral__Envelope s = CORRAL__ENVELOPE__INIT;
    s.body_case = CORRAL__ENVELOPE__BODY_JOB_STATUS;
    s.job_status = &sr;
    return send_got(f, c, &s, id);
}

static const Corral__JobInfo *job_info(fx_t *f, cr_conn_t *c, const char *job_id, uint64_t id)
{
    const Corral__Envelope *a = job_status(f, c, job_id, id, false);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_INFO);
    return a->job_info;
}

/* A JobSubmit and the messages it points to. */
typedef struct submit_msg {
    char *argv[1];
    Corral__Quantity q, *qs[1];
    Corral__KeyValue kv[2], *kvs[2];
    Corral__WorkerSpec ws;
    Corral__JobSpec spec;
    Corral__JobSubmit js;
    Corral__Envelope e;
} submit_msg_t;

/* m's workers get an environment: HOME=/root, LANG=C.UTF-8 */
static void submit_env(submit_msg_t *m)
{
    static const char *const kv[2][2] = {{"HOME", "/root"}, {"LANG", "C.UTF-8"}};
    for (int i = 0; i < 2; i++) {
        m->kv[i] = (Corral__KeyValue)CORRAL__KEY_VALUE__INIT;
        m->kv[i].key = (char *)kv[i][0];
        m->kv[i].value = (char *)kv[i][1];
        m->kvs[i] = &m->kv[i];
    }
    m->ws.env = m->kvs;
    m->ws.n_env = 2;
}

/* A one-worker job running `true` with amount of resource res, on nodes
 * matching selector (NULL: any). */
static Corral__Envelope *submit_msg(submit_msg_t *m, const char *res, int64_t amount,
                                    const char *selector)
{
    m->argv[0] = "true";
    m->q = (Corral__Quantity)CORRAL__QUANTITY__INIT;
    m->q.name = (char *)res;
    m->q.amount = amount;
    m->qs[0] = &m->q;
    m->ws = (Corral__WorkerSpec)CORRAL__WORKER_SPEC__INIT;
    m->ws.argv = m->argv;
    m->ws.n_argv = 1;
    m->ws.resources = m->qs;
    m->ws.n_resources = 1;
    m->spec = (Corral__JobSpec)CORRAL__JOB_SPEC__INIT;
    m->spec.name = "t";
    m->spec.worker = &m->ws;
    m->spec.selector = (char *)(selector ? selector : "");
    m->js = (Corral__JobSubmit)CORRAL__JOB_SUBMIT__INIT;
    m->js.spec = &m->spec;
    m->e = (Corral__Envelope)CORRAL__ENVELOPE__INIT;
    m->e.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMIT;
    m->e.job_submit = &m->js;
    return &m->e;
}

/* submit_msg's job through head_dispatch: the head's answer. */
static const Corral__Envelope *submit(fx_t *f, cr_conn_t *c, uint64_t id, const char *res,
                                      int64_t amount, const char *selector)
{
    submit_msg_t m;
    return send_got(f, c, submit_msg(&m, res, amount, selector), id);
}

static void test_submit_fails_with_the_harness_reason(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);

    const Corral__Envelope *a = submit(f, c, 7, "GPU", CR_QTY_ONE, NULL);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_SUBMITTED);
    char job_id[32];
    assert_true(a->job_submitted->job_id[0]);
    cr_strlcpy(job_id, a->job_submitted->job_id, sizeof(job_id));

    const Corral__JobInfo *ji = job_info(f, c, job_id, 8);
    assert_string_equal(ji->job_id, job_id);
    assert_int_equal(ji->state, CORRAL__JOB_STATE__JOB_FAILED);
    /* a worker that could not start: 127, as a shell's "command not found" */
    assert_int_equal(ji->exit_code, 127);
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

/* ---- an agent's heartbeats: changes and free resources ---- */

#define SAME INT64_MIN /* a beat with free_same */

static void beat(fx_t *f, cr_conn_t *a, uint64_t seq, Corral__WorkerReport *change,
                 int64_t cpu_free)
{
    Corral__Heartbeat h = CORRAL__HEARTBEAT__INIT;
    h.node_id = "remote-1";
    h.incarnation = 1;
    h.seq = seq;
    Corral__WorkerReport *ch[] = {change};
    h.changes = change ? ch : NULL;
    h.n_changes = change ? 1 : 0;
    Corral__Quantity q = CORRAL__QUANTITY__INIT, *qs[] = {&q};
    q.name = "CPU";
    q.amount = cpu_free;
    h.free = cpu_free == SAME ? NULL : qs;
    h.n_free = cpu_free == SAME ? 0 : 1;
    h.free_same = cpu_free == SAME;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &h;
    if (!change && cpu_free == SAME) {
        /* nothing new: the head answers nothing (issue 18) */
        e.id = 100 + seq;
        head_dispatch(a, &e);
        for (int i = 0; i < 4; i++)
            head_harness_run();
        for (size_t i = 0; i < f->got.n; i++)
            assert_int_not_equal(f->got.v[i]->reply_to, 100 + seq);
        return;
    }
    const Corral__Envelope *a2 = send_got(f, a, &e, 100 + seq);
    assert_int_equal(a2->body_case, CORRAL__ENVELOPE__BODY_HEARTBEAT_ACK);
    assert_int_equal(a2->heartbeat_ack->seq, seq);
}

/* A beat of agent a saying worker_id of job_id exited (code 0). */
static void beat_exited(fx_t *f, cr_conn_t *a, uint64_t seq, const char *job_id,
                        const char *worker_id)
{
    Corral__WorkerReport end = CORRAL__WORKER_REPORT__INIT;
    end.worker_id = (char *)worker_id;
    end.job_id = (char *)job_id;
    end.state = CORRAL__WORKER_STATE__WORKER_EXITED;
    end.pid = 4242;
    beat(f, a, seq, &end, SAME);
}

/* how many events of this kind the head has logged */
static int events_of(fx_t *f, cr_conn_t *c, const char *kind, uint64_t id)
{
    Corral__EventsRequest er = CORRAL__EVENTS_REQUEST__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_EVENTS_REQUEST;
    e.events_request = &er;
    const Corral__Envelope *a = send_got(f, c, &e, id);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_EVENT_LIST);
    int n = 0;
    for (size_t i = 0; i < a->event_list->n_events; i++)
        n += strcmp(a->event_list->events[i]->kind, kind) == 0;
    return n;
}

/* The description of a node named id from specs/SPEC, as its agent sends
 * it. */
static char *node_json_of(const char *id, const char *spec)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/specs/%s", CORRAL_SOURCE_DIR, spec);
    hw_options_t o = {.spec_path = path};
    cr_node_t *node = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &node, &msg), 0);
    snprintf(node->id, sizeof(node->id), "%s", id);
    for (size_t i = 0; i < node->labels.n; i++) /* as agent_main does */
        if (strcmp(node->labels.v[i].key, "corral.io/node-id") == 0) {
            free(node->labels.v[i].value);
            node->labels.v[i].value = cr_strdup(id);
        }
    json_t *nj = hw_node_to_json(node);
    char *njs = json_dumps(nj, JSON_COMPACT);
    json_decref(nj);
    hw_node_free(node);
    return njs;
}

/* A CPU-only node named id (16 CPUs). */
static char *node_json(const char *id)
{
    return node_json_of(id, "cpu-only.yaml");
}

/* Node id (specs/SPEC) registers through the agent connection ag. */
static void register_node(fx_t *f, cr_conn_t *ag, const char *id, const char *spec,
                          uint64_t incarnation, uint64_t rid)
{
    char *njs = node_json_of(id, spec);
    Corral__Register r = CORRAL__REGISTER__INIT;
    r.node_json = njs;
    r.incarnation = incarnation;
    r.address = "10.0.0.2";
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_REGISTER;
    e.register_ = &r;
    assert_int_equal(send_got(f, ag, &e, rid)->body_case, CORRAL__ENVELOPE__BODY_REGISTERED);
    free(njs);
}

/* remote-1 registers through the agent connection ag. */
static void register_remote(fx_t *f, cr_conn_t *ag, uint64_t id)
{
    register_node(f, ag, "remote-1", "cpu-only.yaml", 1, id);
}

/* CPU free of remote-1 as the head counts it and as its agent reported it
 * (-1 when not reported) */
static void node_free_cpu(fx_t *f, cr_conn_t *c, uint64_t id, int64_t *head, int64_t *agent)
{
    Corral__NodeList nl = CORRAL__NODE_LIST__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_NODE_LIST;
    e.node_list = &nl;
    const Corral__Envelope *a = send_got(f, c, &e, id);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_NODE_LIST_REPLY);
    *head = *agent = -1;
    for (size_t i = 0; i < a->node_list_reply->n_nodes; i++) {
        const Corral__NodeInfo *ni = a->node_list_reply->nodes[i];
        if (strcmp(ni->node_id, "remote-1"))
            continue;
        for (size_t k = 0; k < ni->n_free; k++)
            if (!strcmp(ni->free[k]->name, "CPU"))
                *head = ni->free[k]->amount;
        for (size_t k = 0; k < ni->n_reported_free; k++)
            if (!strcmp(ni->reported_free[k]->name, "CPU"))
                *agent = ni->reported_free[k]->amount;
    }
}

/* A worker's start and end that reach the head only in heartbeats (their
 * WorkerStarted and WorkerExit were lost) are applied, twice harmlessly;
 * the free resources an agent reports are kept, and an agent that counts
 * less free than the head for three beats in a row is a node_drift event,
 * cleared once they agree. */
static void test_heartbeat_changes_and_free(void **state)
{
    fx_t *f = *state;
    cr_conn_t *cl = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    cr_conn_t *ag = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);

    register_remote(f, ag, 1);

    int64_t head, agent;
    node_free_cpu(f, cl, 2, &head, &agent);
    assert_true(head > 2 * CR_QTY_ONE);
    assert_int_equal(agent, -1); /* no beat yet */
    const int64_t total = head;

    const Corral__Envelope *a =
        submit(f, cl, 3, "CPU", 2 * CR_QTY_ONE, "corral.io/node-id=remote-1");
    if (a->body_case == CORRAL__ENVELOPE__BODY_ERROR)
        fail_msg("submit: %s", a->error->message);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_SUBMITTED);
    char job_id[32];
    cr_strlcpy(job_id, a->job_submitted->job_id, sizeof(job_id));
    const Corral__Envelope *sent = last_sent(f, CORRAL__ENVELOPE__BODY_WORKER_START);
    assert_non_null(sent);
    const Corral__WorkerStart *start = sent->worker_start;
    char worker_id[48];
    cr_strlcpy(worker_id, start->worker_id, sizeof(worker_id));
    uint32_t attempt = start->attempt;
    assert_int_equal(job_info(f, cl, job_id, 4)->workers[0]->state,
                     CORRAL__WORKER_STATE__WORKER_STARTING);

    /* its start, in a beat only */
    Corral__WorkerReport run = CORRAL__WORKER_REPORT__INIT;
    run.worker_id = worker_id;
    run.state = CORRAL__WORKER_STATE__WORKER_RUNNING;
    run.pid = 4242;
    run.attempt = attempt;
    beat(f, ag, 1, &run, total - 2 * CR_QTY_ONE);
    const Corral__JobInfo *ji = job_info(f, cl, job_id, 5);
    assert_int_equal(ji->state, CORRAL__JOB_STATE__JOB_RUNNING);
    assert_int_equal(ji->workers[0]->state, CORRAL__WORKER_STATE__WORKER_RUNNING);
    assert_int_equal(ji->workers[0]->pid, 4242);
    node_free_cpu(f, cl, 6, &head, &agent);
    assert_int_equal(head, total - 2 * CR_QTY_ONE);
    assert_int_equal(agent, total - 2 * CR_QTY_ONE);

    /* its end, in a beat only, then again in the next */
    Corral__WorkerReport end = CORRAL__WORKER_REPORT__INIT;
    end.worker_id = worker_id;
    end.job_id = job_id;
    end.state = CORRAL__WORKER_STATE__WORKER_EXITED;
    end.pid = 4242;
    end.exit_code = 3;
    end.attempt = attempt;
    beat(f, ag, 2, &end, total);
    beat(f, ag, 3, &end, total);
    ji = job_info(f, cl, job_id, 7);
    assert_int_equal(ji->state, CORRAL__JOB_STATE__JOB_FAILED);
    assert_int_equal(ji->exit_code, 3);
    assert_int_equal(ji->workers[0]->state, CORRAL__WORKER_STATE__WORKER_EXITED);
    assert_int_equal(events_of(f, cl, "exited", 8), 1);
    node_free_cpu(f, cl, 9, &head, &agent);
    assert_int_equal(head, total);
    assert_int_equal(agent, total);

    /* the agent counts one CPU less than the head: an event on the third beat */
    assert_int_equal(events_of(f, cl, "node_drift", 10), 0);
    beat(f, ag, 4, NULL, total - CR_QTY_ONE);
    beat(f, ag, 5, NULL, SAME); /* as the last: still one less */
    assert_int_equal(events_of(f, cl, "node_drift", 11), 0);
    beat(f, ag, 6, NULL, SAME);
    beat(f, ag, 7, NULL, SAME);
    assert_int_equal(events_of(f, cl, "node_drift", 12), 1);
    node_free_cpu(f, cl, 13, &head, &agent);
    assert_int_equal(head, total);
    assert_int_equal(agent, total - CR_QTY_ONE);
    beat(f, ag, 8, NULL, total);
    assert_int_equal(events_of(f, cl, "node_drift_cleared", 14), 1);
    /* more free than the head counts (a start in flight) is no drift */
    for (uint64_t s = 9; s < 13; s++)
        beat(f, ag, s, NULL, total + CR_QTY_ONE);
    assert_int_equal(events_of(f, cl, "node_drift", 15), 1);

    head_harness_conn_closed(ag);
    head_harness_conn_closed(cl);
    cr_conn_free_detached(ag);
    cr_conn_free_detached(cl);
}

/* A one-CPU job on remote-1 submitted on c, bound to c or not, with
 * submit_env's environment or none: its id and its worker's from the
 * WorkerStart the head sent the agent. */
static void submit_remote(fx_t *f, cr_conn_t *c, uint64_t id, bool bound, bool env, char job_id[32],
                          char worker_id[48])
{
    submit_msg_t m;
    Corral__Envelope *e = submit_msg(&m, "CPU", CR_QTY_ONE, "corral.io/node-id=remote-1");
    m.js.bound = bound;
    if (env)
        submit_env(&m);
    got_clear(&f->got);
    const Corral__Envelope *a = send_got(f, c, e, id);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_SUBMITTED);
    cr_strlcpy(job_id, a->job_submitted->job_id, 32);
    const Corral__Envelope *start = last_sent(f, CORRAL__ENVELOPE__BODY_WORKER_START);
    assert_non_null(start);
    cr_strlcpy(worker_id, start->worker_start->worker_id, 48);
}

/* whether the head sent a WorkerStop for worker_id since the last clear */
static bool stop_sent(const fx_t *f, const char *worker_id)
{
    for (size_t i = 0; i < f->got.n; i++)
        if (f->got.v[i]->body_case == CORRAL__ENVELOPE__BODY_WORKER_STOP &&
            strcmp(f->got.v[i]->worker_stop->worker_id, worker_id) == 0)
            return true;
    return false;
}

/* A bound submit's job (corral run's) stops when its connection closes,
 * and only its: another connection's bound job and the same connection's
 * unbound one run on. A bound job that ended and was removed by retention
 * while its connection stayed is forgotten with it (the close after finds
 * nothing of it; ASan sees a use after free if it did not). */
static void test_bound_jobs_stop_with_their_connection(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c1 = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    cr_conn_t *c2 = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    cr_conn_t *ag = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    register_remote(f, ag, 1);
    char j1[32], w1[48], j2[32], w2[48], j3[32], w3[48], j4[32], w4[48];
    submit_remote(f, c1, 2, true, false, j1, w1);
    submit_remote(f, c2, 3, true, false, j2, w2);
    submit_remote(f, c1, 4, false, false, j3, w3);
    submit_remote(f, c2, 5, true, false, j4, w4);

    /* j4 ends and retention removes it, c2 still open */
    beat_exited(f, ag, 1, j4, w4);
    D.keep_finished_ms = 1;
    D.retention_last_ms = 0;
    assert_int_equal(jobs_retention(cr_wall_ms() + 60000), 1);
    assert_null(job_find(j4));

    got_clear(&f->got);
    head_harness_conn_closed(c1);
    cr_conn_free_detached(c1);
    for (int i = 0; i < 4; i++)
        head_harness_run();
    assert_true(stop_sent(f, w1));
    assert_false(stop_sent(f, w2));
    assert_false(stop_sent(f, w3));
    assert_true(job_find(j1)->stopping);
    assert_false(job_find(j2)->stopping);
    assert_false(job_find(j3)->stopping);
    assert_int_equal(events_of(f, c2, "client_gone", 6), 1);

    got_clear(&f->got);
    head_harness_conn_closed(c2);
    cr_conn_free_detached(c2);
    for (int i = 0; i < 4; i++)
        head_harness_run();
    assert_true(stop_sent(f, w2));
    assert_false(stop_sent(f, w3));
    assert_true(job_find(j2)->stopping);
    assert_false(job_find(j3)->stopping);

    head_harness_conn_closed(ag);
    cr_conn_free_detached(ag);
}

/* with_env asked about this connection's job id: its workers' environment */
static const Corral__WorkerSpec *status_with_env(fx_t *f, cr_conn_t *c, const char *id,
                                                 uint64_t rid, bool with)
{
    const Corral__Envelope *a = job_status(f, c, id, rid, with);
    if (a->body_case == CORRAL__ENVELOPE__BODY_ERROR)
        return NULL;
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_INFO);
    return a->job_info->spec->worker;
}

/* A job that has ended lets go of its workers' environment (a corral run
 * sends the submitter's whole one, and 10,000 ended jobs are kept); a
 * with_env answer reads it back from state.db, the same variables, and
 * one that cannot is an error that says so, not an empty environment. */
static void test_ended_job_env_from_state_db(void **state)
{
    fx_t *f = *state;
    cr_conn_t *cl = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    cr_conn_t *ag = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    register_remote(f, ag, 1);
    char id[32], wid[48];
    submit_remote(f, cl, 2, false, true, id, wid);
    const Corral__WorkerSpec *w = status_with_env(f, cl, id, 3, true);
    assert_int_equal(w->n_env, 2); /* running: from memory */
    assert_false(job_find(id)->env_dropped);

    beat_exited(f, ag, 1, id, wid);
    job_t *j = job_find(id);
    assert_true(cr_job_state_is_final(j->state));
    assert_true(j->env_dropped);
    assert_int_equal(j->spec->worker->n_env, 0);
    w = status_with_env(f, cl, id, 4, true);
    assert_non_null(w);
    assert_int_equal(w->n_env, 2);
    assert_string_equal(w->env[0]->key, "HOME");
    assert_string_equal(w->env[1]->value, "C.UTF-8");
    assert_string_equal(w->argv[0], "true"); /* the rest as kept */
    assert_int_equal(status_with_env(f, cl, id, 5, false)->n_env, 0);

    /* a stored spec that cannot be read: said */
    char sql[128];
    snprintf(sql, sizeof(sql), "UPDATE jobs SET spec_json = '{}' WHERE id = %s", id);
    assert_int_equal(sqlite3_exec(cr__state_db(D.st), sql, NULL, NULL, NULL), SQLITE_OK);
    got_clear(&f->got);
    assert_null(status_with_env(f, cl, id, 6, true));
    const Corral__Envelope *a = answer(&f->got, 6);
    assert_non_null(strstr(a->error->message, "cannot be read back from state.db"));
    assert_int_equal(status_with_env(f, cl, id, 7, false)->n_env, 0);

    head_harness_conn_closed(ag);
    head_harness_conn_closed(cl);
    cr_conn_free_detached(ag);
    cr_conn_free_detached(cl);
}

/* Finished jobs over the count kept go 256 a sweep; while a sweep removes
 * a whole batch the next one runs at the next tick, not a second later, so
 * jobs that end faster than 256 a second do not pile up without bound. */
static void submit_finished(fx_t *f, cr_conn_t *c, int n)
{
    for (int i = 0; i < n; i++) { /* each fails at once in the harness: finished */
        submit_msg_t m;
        head_dispatch(c, submit_msg(&m, "GPU", CR_QTY_ONE, NULL));
        head_harness_run();
        got_clear(&f->got);
    }
}

static void test_retention_catches_up(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    submit_finished(f, c, 600);
    for (int i = 0; i < 4; i++)
        head_harness_run();
    assert_int_equal(D.jobs.n, 600);
    D.keep_finished = 10;
    D.retention_last_ms = 0;
    int64_t t = cr_wall_ms();
    assert_int_equal(jobs_retention(t), 256);
    assert_int_equal(jobs_retention(t + 100), 256); /* behind: the next tick */
    assert_int_equal(jobs_retention(t + 200), 78);
    assert_int_equal(D.jobs.n, 10);
    assert_int_equal(jobs_retention(t + 300), 0); /* caught up: a second apart again */
    /* a second after the last sweep: the count's bound holds as before */
    submit_finished(f, c, 3);
    assert_int_equal(jobs_retention(t + 700), 0);
    assert_int_equal(jobs_retention(t + 1300), 3);
    assert_int_equal(D.jobs.n, 10);
    head_harness_conn_closed(c);
    cr_conn_free_detached(c);
}

/* Pins dead-node detection (daemon/nodes.c nodes_tick): a node is dead
 * once dead_ms passed without word from its agent (dead_ms, not suspect_ms
 * + dead_ms), and a node known from state.db after a head restart, whose
 * agent retries with a backoff of up to 5 s, gets 6 s more. The ages are
 * set on the nodes, not waited for, and each margin is seconds wide. */
static void test_dead_node_detection(void **state)
{
    fx_t *f = *state;
    cr_conn_t *ag = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    register_remote(f, ag, 1);
    /* remote-2 as a restarted head finds it: in state.db, its agent not back */
    char *njs = node_json("remote-2");
    cr_state_node_t row = {.id = "remote-2",
                           .incarnation = 1,
                           .address = "10.0.0.3",
                           .state = CR_NODE_ALIVE,
                           .desc_json = njs};
    assert_int_equal(cr_state_node_put(D.st, &row, 0), 0);
    free(njs);
    nodes_recover();
    node_t *n1 = node_by_id("remote-1"), *n2 = node_by_id("remote-2");
    assert_non_null(n1);
    assert_non_null(n2);
    assert_false(n1->waiting);
    assert_true(n2->waiting);
    assert_int_equal(D.dead_ms, 10000);
    assert_int_equal(D.suspect_ms, 3000);

    /* 11 s of silence: past dead_ms, short of suspect + dead (13 s) and of
     * dead + the restart grace (16 s) */
    n1->last_seen = n2->last_seen = cr_mono_ms() - 11000;
    nodes_tick();
    assert_int_equal(n1->state, CORRAL__NODE_STATE__NODE_DEAD);
    assert_int_equal(n2->state, CORRAL__NODE_STATE__NODE_SUSPECT);
    /* 17 s: past the grace too */
    n2->last_seen = cr_mono_ms() - 17000;
    nodes_tick();
    assert_int_equal(n2->state, CORRAL__NODE_STATE__NODE_DEAD);

    head_harness_conn_closed(ag);
    cr_conn_free_detached(ag);
}

/* Pins the two-phase reservation's refusal (daemon/pg.c
 * pgs_prepare_reply): an agent that refuses to reserve its bundle is sent
 * no Commit, and the group is not CREATED but rolled back (nothing held,
 * tried again later). */
/* A group named name of one bundle of cpus CPUs on nodes matching
 * selector (NULL: any), created without waiting for it: answered as
 * queued or on its way (what was sent since cleared first). */
static void pg_create_cpus(fx_t *f, cr_conn_t *cl, const char *name, int cpus, const char *selector,
                           uint64_t rid)
{
    Corral__Quantity q = CORRAL__QUANTITY__INIT, *qs[] = {&q};
    q.name = "CPU";
    q.amount = cpus * CR_QTY_ONE;
    Corral__Bundle b = CORRAL__BUNDLE__INIT, *bs[] = {&b};
    b.resources = qs;
    b.n_resources = 1;
    b.selector = (char *)(selector ? selector : "");
    Corral__PgCreate pc = CORRAL__PG_CREATE__INIT;
    pc.name = (char *)name;
    pc.bundles = bs;
    pc.n_bundles = 1;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_CREATE;
    e.pg_create = &pc;
    got_clear(&f->got);
    assert_int_equal(send_got(f, cl, &e, rid)->body_case, CORRAL__ENVELOPE__BODY_PG_CREATED);
}

/* One JobList page: its job ids into ids ("1,2"), its token into tok. */
static const Corral__JobListReply *job_page(fx_t *f, cr_conn_t *c, uint64_t id, uint32_t limit,
                                            const char *token, char *ids, size_t size)
{
    got_clear(&f->got);
    Corral__JobList q = CORRAL__JOB_LIST__INIT;
    q.limit = limit;
    q.continue_token = (char *)token;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_LIST;
    e.job_list = &q;
    const Corral__Envelope *a = send_got(f, c, &e, id);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_LIST_REPLY);
    const Corral__JobListReply *r = a->job_list_reply;
    ids[0] = '\0';
    for (size_t i = 0; i < r->n_jobs; i++)
        snprintf(ids + strlen(ids), size - strlen(ids), "%s%s", i ? "," : "", r->jobs[i]->job_id);
    return r;
}

/* Paged listings (head/page.c): limits, tokens that hold across a job
 * submitted between pages, node pages in id order, event pages, and
 * tokens refused: malformed, another listing's, an earlier head's. */
static void test_paged_lists(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    cr_conn_t *ag = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    register_remote(f, ag, 1);
    for (uint64_t i = 0; i < 3; i++)
        assert_int_equal(submit(f, c, 10 + i, "GPU", CR_QTY_ONE, NULL)->body_case,
                         CORRAL__ENVELOPE__BODY_JOB_SUBMITTED);
    char ids[64], tok[64];
    const Corral__JobListReply *r = job_page(f, c, 20, 2, "", ids, sizeof(ids));
    assert_string_equal(ids, "1,2");
    assert_int_equal(r->remaining, 1);
    assert_true(r->continue_token[0]);
    cr_strlcpy(tok, r->continue_token, sizeof(tok));
    /* a job submitted meanwhile comes at the end: nothing repeats */
    assert_int_equal(submit(f, c, 21, "GPU", CR_QTY_ONE, NULL)->body_case,
                     CORRAL__ENVELOPE__BODY_JOB_SUBMITTED);
    r = job_page(f, c, 22, 2, tok, ids, sizeof(ids));
    assert_string_equal(ids, "3,4");
    assert_string_equal(r->continue_token, "");
    assert_int_equal(r->remaining, 0);
    r = job_page(f, c, 23, 0, "", ids, sizeof(ids));
    assert_string_equal(ids, "1,2,3,4");
    assert_string_equal(r->continue_token, "");

    /* refused tokens: each an Error that says why */
    char expired[64];
    snprintf(expired, sizeof(expired), "jobs.%s.3",
             strstr(tok, ".")[1] == '0' ? "ffffffff" : "00000000");
    const char *bad[] = {"nonsense", "events.00000000.1", expired, "jobs.12.3", "jobs.00000000."};
    const char *says[] = {"invalid continue token", "not one of a jobs listing", "has expired",
                          "invalid continue token", "invalid continue token"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        got_clear(&f->got);
        Corral__JobList q = CORRAL__JOB_LIST__INIT;
        q.continue_token = (char *)bad[i];
        Corral__Envelope e = CORRAL__ENVELOPE__INIT;
        e.body_case = CORRAL__ENVELOPE__BODY_JOB_LIST;
        e.job_list = &q;
        const Corral__Envelope *a = send_got(f, c, &e, 30 + i);
        assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_ERROR);
        assert_int_equal(a->error->code, CR_EINVAL);
        assert_non_null(strstr(a->error->message, says[i]));
    }

    /* nodes: one a page, in id order */
    got_clear(&f->got);
    Corral__NodeList nl = CORRAL__NODE_LIST__INIT;
    nl.limit = 1;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_NODE_LIST;
    e.node_list = &nl;
    const Corral__Envelope *a = send_got(f, c, &e, 40);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_NODE_LIST_REPLY);
    assert_int_equal(a->node_list_reply->n_nodes, 1);
    assert_string_equal(a->node_list_reply->nodes[0]->node_id, "dgx-h100-01");
    assert_int_equal(a->node_list_reply->remaining, 1);
    cr_strlcpy(tok, a->node_list_reply->continue_token, sizeof(tok));
    got_clear(&f->got);
    nl.continue_token = tok;
    a = send_got(f, c, &e, 41);
    assert_int_equal(a->node_list_reply->n_nodes, 1);
    assert_string_equal(a->node_list_reply->nodes[0]->node_id, "remote-1");
    assert_string_equal(a->node_list_reply->continue_token, "");

    /* events: two a page, each page going on from the last */
    uint64_t last = 0, pages = 0, seen = 0;
    tok[0] = '\0';
    do {
        got_clear(&f->got);
        Corral__EventsRequest er = CORRAL__EVENTS_REQUEST__INIT;
        er.page_limit = 2;
        er.continue_token = tok;
        Corral__Envelope ee = CORRAL__ENVELOPE__INIT;
        ee.body_case = CORRAL__ENVELOPE__BODY_EVENTS_REQUEST;
        ee.events_request = &er;
        a = send_got(f, c, &ee, 50 + pages);
        assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_EVENT_LIST);
        const Corral__EventList *el = a->event_list;
        assert_true(el->n_events >= 1 && el->n_events <= 2);
        for (size_t i = 0; i < el->n_events; i++) {
            assert_true(el->events[i]->seq > last);
            last = el->events[i]->seq;
            seen++;
        }
        cr_strlcpy(tok, el->continue_token, sizeof(tok));
        pages++;
    } while (tok[0] && pages < 40);
    assert_true(pages > 2);
    assert_int_equal(seen, last); /* every event, none twice: seq 1..last */

    /* groups: two a page */
    const char *names[] = {"g1", "g2", "g3"};
    for (size_t i = 0; i < 3; i++)
        pg_create_cpus(f, c, names[i], 1, NULL, 60 + i);
    tok[0] = '\0';
    char got_names[64] = "";
    for (int page = 0; page < 2; page++) {
        got_clear(&f->got);
        Corral__PgList pl = CORRAL__PG_LIST__INIT;
        pl.limit = 2;
        pl.continue_token = tok;
        Corral__Envelope pe = CORRAL__ENVELOPE__INIT;
        pe.body_case = CORRAL__ENVELOPE__BODY_PG_LIST;
        pe.pg_list = &pl;
        a = send_got(f, c, &pe, 70 + (uint64_t)page);
        assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_PG_LIST_REPLY);
        const Corral__PgListReply *pr = a->pg_list_reply;
        assert_int_equal(pr->n_groups, page ? 1 : 2);
        assert_int_equal(pr->remaining, page ? 0 : 1);
        for (size_t i = 0; i < pr->n_groups; i++)
            snprintf(got_names + strlen(got_names), sizeof(got_names) - strlen(got_names), "%s ",
                     pr->groups[i]->name);
        cr_strlcpy(tok, pr->continue_token, sizeof(tok));
        assert_true(page ? !tok[0] : tok[0]);
    }
    assert_string_equal(got_names, "g1 g2 g3 ");

    head_harness_conn_closed(ag);
    cr_conn_free_detached(ag);
    head_harness_conn_closed(c);
    cr_conn_free_detached(c);
}

/* An answer above the frame limit (16 MiB here) is an Error that names
 * it, not a reply that never comes: a job whose spec holds 18 MiB of
 * arguments (the detached connection takes any size in) is asked for. */
/* e's job submitted through head_dispatch as request 1: its id, in id. */
static void submit_id(fx_t *f, cr_conn_t *c, Corral__Envelope *e, char *id, size_t size)
{
    const Corral__Envelope *a = send_got(f, c, e, 1);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_SUBMITTED);
    cr_strlcpy(id, a->job_submitted->job_id, size);
}

/* A client connection, and an agent's with remote-1 registered. */
static void pair_open(fx_t *f, cr_conn_t **cl, cr_conn_t **ag)
{
    *cl = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    *ag = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    register_remote(f, *ag, 1);
}

static void pair_close(cr_conn_t *cl, cr_conn_t *ag)
{
    head_harness_conn_closed(cl);
    cr_conn_free_detached(cl);
    head_harness_conn_closed(ag);
    cr_conn_free_detached(ag);
}

/* id's state as a JobInfo answer gives it: PENDING, RUNNING or other */
static const char *job_state_of(fx_t *f, cr_conn_t *c, const char *id, uint64_t rid)
{
    Corral__JobState st = job_info(f, c, id, rid)->state;
    return st == CORRAL__JOB_STATE__JOB_PENDING   ? "PENDING"
           : st == CORRAL__JOB_STATE__JOB_RUNNING ? "RUNNING"
                                                  : "other";
}

/* A one-worker job asking cpus CPUs of remote-1, submitted: its id in
 * id[32]. */
static void submit_cpus(fx_t *f, cr_conn_t *cl, int cpus, char *id)
{
    submit_msg_t m;
    got_clear(&f->got); /* submit_id's answer is to request 1 */
    submit_id(f, cl, submit_msg(&m, "CPU", cpus * CR_QTY_ONE, "corral.io/node-id=remote-1"), id,
              32);
}

/* A JobStop of id, as request rid (what was sent since cleared first). */
static void stop_job(fx_t *f, cr_conn_t *cl, const char *id, uint64_t rid)
{
    Corral__JobStop js = CORRAL__JOB_STOP__INIT;
    js.job_id = (char *)id;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_STOP;
    e.job_stop = &js;
    got_clear(&f->got);
    send_got(f, cl, &e, rid);
}

/* Stops job id (one worker on remote-1) and reports its worker's end. */
static void end_job(fx_t *f, cr_conn_t *cl, cr_conn_t *ag, const char *id, uint64_t rid)
{
    stop_job(f, cl, id, rid);
    const Corral__Envelope *stop = last_sent(f, CORRAL__ENVELOPE__BODY_WORKER_STOP);
    assert_non_null(stop);
    char wid[48];
    cr_strlcpy(wid, stop->worker_stop->worker_id, sizeof(wid));
    beat_exited(f, ag, rid, id, wid);
    for (int i = 0; i < 4; i++)
        head_harness_run();
}

/* Queue positions stay right as the queue changes: a pending job stopped,
 * the others move up; a new one goes to the end; the blocker's end places
 * the first and the rest move up again. */
static void test_queue_positions_follow_the_queue(void **state)
{
    fx_t *f = *state;
    cr_conn_t *cl, *ag;
    pair_open(f, &cl, &ag);
    char blocker[32], id[4][32];
    submit_cpus(f, cl, 16, blocker);
    for (int i = 0; i < 3; i++)
        submit_cpus(f, cl, 1, id[i]);
    for (int i = 0; i < 3; i++)
        assert_int_equal(job_info(f, cl, id[i], 10 + (uint64_t)i)->queue_position, i + 1);
    assert_int_equal(job_info(f, cl, blocker, 13)->queue_position, 0);

    stop_job(f, cl, id[0], 14);
    assert_int_equal(job_info(f, cl, id[0], 15)->queue_position, 0);
    assert_int_equal(job_info(f, cl, id[1], 16)->queue_position, 1);
    assert_int_equal(job_info(f, cl, id[2], 17)->queue_position, 2);
    submit_cpus(f, cl, 1, id[3]);
    assert_int_equal(job_info(f, cl, id[3], 18)->queue_position, 3);

    /* the blocker ends: its CPUs go to the pending ones, in order */
    end_job(f, cl, ag, blocker, 19);
    for (int i = 1; i < 4; i++)
        assert_int_equal(job_info(f, cl, id[i], 20 + (uint64_t)i)->queue_position, 0);
    pair_close(cl, ag);
}

/* The status lists the oldest HOLDERS_EACH pending jobs and says how many
 * more wait (a deep queue made every status, read often, as long as the
 * queue: 1 MiB and 19 ms of the head's loop at 10,000 pending). */
static void test_status_holders_bounded(void **state)
{
    fx_t *f = *state;
    cr_conn_t *cl, *ag;
    pair_open(f, &cl, &ag);
    char id[32];
    submit_cpus(f, cl, 16, id);
    for (int i = 0; i < HOLDERS_EACH + 5; i++)
        submit_cpus(f, cl, 1, id);
    Corral__StatusRequest sr = CORRAL__STATUS_REQUEST__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_STATUS_REQUEST;
    e.status_request = &sr;
    got_clear(&f->got);
    const Corral__Envelope *a = send_got(f, cl, &e, 2);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_CLUSTER_STATUS);
    const Corral__ClusterStatus *st = a->cluster_status;
    assert_int_equal(st->pending_jobs, HOLDERS_EACH + 5);
    assert_int_equal(st->n_holders, HOLDERS_EACH + 1); /* the running one, the oldest pending */
    assert_int_equal(st->holders_not_listed, 5);
    uint32_t last = 0;
    for (size_t i = 0; i < st->n_holders; i++) {
        const Corral__Holder *h = st->holders[i];
        if (strcmp(h->state, "PENDING"))
            continue;
        assert_int_equal(h->queue_position, last + 1); /* the first ones, in order */
        last = h->queue_position;
    }
    assert_int_equal(last, HOLDERS_EACH);
    pair_close(cl, ag);
}

/* A pass over the queue asks the scheduler once for alike requests it has
 * no room for (jobs.c "the queue": their shape), still places a different
 * one behind them that fits, and the alike ones once room is freed. */
static void test_queue_pass_alike_and_different(void **state)
{
    fx_t *f = *state;
    cr_conn_t *cl, *ag;
    pair_open(f, &cl, &ag);
    char big[32], small[32], a1[32], a2[32], b[32];
    submit_cpus(f, cl, 10, big); /* 16 CPUs: 2 left after these two */
    submit_cpus(f, cl, 4, small);
    submit_cpus(f, cl, 8, a1);
    submit_cpus(f, cl, 8, a2);
    submit_cpus(f, cl, 4, b);
    assert_string_equal(job_state_of(f, cl, a1, 10), "PENDING");
    assert_string_equal(job_state_of(f, cl, a2, 11), "PENDING");
    assert_string_equal(job_state_of(f, cl, b, 12), "PENDING");
    /* 6 free: the alike ones still wait, the different one behind them
     * fits; the scheduler was asked for a1 and b, not a2 (its shape was
     * refused in the pass already) */
    uint64_t asked = head_counters.place_count;
    end_job(f, cl, ag, small, 13);
    assert_int_equal(head_counters.place_count - asked, 2);
    assert_string_equal(job_state_of(f, cl, a1, 14), "PENDING");
    assert_string_equal(job_state_of(f, cl, a2, 15), "PENDING");
    assert_string_equal(job_state_of(f, cl, b, 16), "RUNNING");
    assert_string_equal(job_info(f, cl, a2, 17)->reason, job_info(f, cl, a1, 18)->reason);
    /* a2 was passed over, a1 asked: a2 waits for what a1's answer says
     * now; its row keeps the reason it was queued with (what a job waits
     * for is not written at every pass) */
    assert_string_equal(job_info(f, cl, a2, 30)->reason,
                        "no node has CPU=8 free now: the closest, remote-1, has CPU=6 free");
    cr_state_job_t row;
    assert_int_equal(cr_state_job_get(D.st, strtoll(a2, NULL, 10), &row), 0);
    assert_string_equal(row.reason,
                        "no node has CPU=8 free now: the closest, remote-1, has CPU=2 free");
    cr_state_job_free(&row);
    /* 12 free: the first alike one is placed, the second waits (4 left) */
    end_job(f, cl, ag, big, 19);
    assert_string_equal(job_state_of(f, cl, a1, 20), "RUNNING");
    assert_string_equal(job_state_of(f, cl, a2, 21), "PENDING");
    assert_int_equal(job_info(f, cl, a2, 22)->queue_position, 1);
    pair_close(cl, ag);
}

/* Group name as PgList shows it (NULL when there is none). */
static const Corral__PgInfo *pg_info_of(fx_t *f, cr_conn_t *cl, const char *name, uint64_t rid)
{
    got_clear(&f->got);
    Corral__PgList pl = CORRAL__PG_LIST__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_LIST;
    e.pg_list = &pl;
    const Corral__Envelope *a = send_got(f, cl, &e, rid);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_PG_LIST_REPLY);
    for (size_t i = 0; i < a->pg_list_reply->n_groups; i++)
        if (!strcmp(a->pg_list_reply->groups[i]->name, name))
            return a->pg_list_reply->groups[i];
    return NULL;
}

/* The pass over pending groups asks the scheduler once for alike groups
 * it has no room for (their shape, pgs.c "the pending groups"), and still
 * reserves a different one behind them that fits; the one passed over
 * waits for what the shape's answer says now, and the queue's places
 * follow removals. */
static void test_pg_pass_alike_and_different(void **state)
{
    fx_t *f = *state;
    cr_conn_t *cl, *ag;
    pair_open(f, &cl, &ag);
    char big[32], small[32];
    submit_cpus(f, cl, 10, big); /* 16 CPUs: 2 left after these two */
    submit_cpus(f, cl, 4, small);
    pg_create_cpus(f, cl, "a1", 8, "corral.io/node-id=remote-1", 2);
    pg_create_cpus(f, cl, "a2", 8, "corral.io/node-id=remote-1", 3);
    pg_create_cpus(f, cl, "b", 4, "corral.io/node-id=remote-1", 4);
    uint64_t asked = head_counters.place_count;
    end_job(f, cl, ag, small, 5);                           /* 6 free */
    assert_int_equal(head_counters.place_count - asked, 2); /* a1 and b, not a2 */
    const Corral__Envelope *prep = last_sent(f, CORRAL__ENVELOPE__BODY_PREPARE);
    assert_non_null(prep); /* b's reservation, on remote-1 */
    assert_non_null(strstr(prep->prepare->txn_id, "pg"));
    const char *now = "no node has CPU=8 free now: the closest, remote-1, has CPU=6 free";
    const Corral__PgInfo *g = pg_info_of(f, cl, "a2", 6);
    assert_non_null(g);
    assert_int_equal(g->state, CORRAL__PG_STATE__PG_PENDING);
    assert_string_equal(g->reason, now);
    assert_int_equal(g->queue_position, 2);
    assert_string_equal(pg_info_of(f, cl, "a1", 7)->reason, now);
    assert_int_equal(pg_info_of(f, cl, "a1", 8)->queue_position, 1);
    assert_int_equal(pg_info_of(f, cl, "b", 9)->queue_position, 0); /* reserving */
    check_status_counts(); /* b PREPARING */
    Corral__PgRemove rm = CORRAL__PG_REMOVE__INIT;
    rm.name = "a1";
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_REMOVE;
    e.pg_remove = &rm;
    got_clear(&f->got);
    send_got(f, cl, &e, 10);
    assert_null(pg_info_of(f, cl, "a1", 11));
    assert_int_equal(pg_info_of(f, cl, "a2", 12)->queue_position, 1);
    pair_close(cl, ag);
}

/* A one-worker job asking amount of res on node (its id in id[32]). */
static void submit_on(fx_t *f, cr_conn_t *cl, const char *res, int64_t amount, const char *node,
                      char *id)
{
    submit_msg_t m;
    char sel[64];
    snprintf(sel, sizeof(sel), "corral.io/node-id=%s", node);
    got_clear(&f->got);
    submit_id(f, cl, submit_msg(&m, res, amount * CR_QTY_ONE, sel), id, 32);
}

/* A pass over the queue is not entered again from inside: a job refused
 * for good in a pass ends there, and its end's own pass used to run over
 * the queue half compacted, where a job the outer pass had just placed
 * was still listed, and placed it a second time (two WorkerStarts, its
 * first placement leaked). Here remote-2 comes back as a new incarnation
 * without GPUs: its pass places a (4 of its 16 CPUs) and refuses b (a
 * GPU) for good. */
static void test_queue_pass_not_reentered(void **state)
{
    fx_t *f = *state;
    cr_conn_t *cl = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    cr_conn_t *ag = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    register_node(f, ag, "remote-2", "dgx-h100.yaml", 1, 1);
    char cpus[32], gpus[32], a[32], b[32];
    submit_on(f, cl, "CPU", 224, "remote-2", cpus);
    submit_on(f, cl, "GPU", 8, "remote-2", gpus);
    submit_on(f, cl, "CPU", 4, "remote-2", a);
    submit_on(f, cl, "GPU", 1, "remote-2", b);
    assert_string_equal(job_state_of(f, cl, a, 2), "PENDING");
    assert_string_equal(job_state_of(f, cl, b, 3), "PENDING");

    head_harness_conn_closed(ag); /* its agent restarts, on a smaller node */
    cr_conn_free_detached(ag);
    got_clear(&f->got);
    cr_conn_t *ag2 = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    register_node(f, ag2, "remote-2", "cpu-only.yaml", 2, 4);
    for (int i = 0; i < 4; i++)
        head_harness_run();
    int starts = 0;
    for (size_t i = 0; i < f->got.n; i++)
        starts += f->got.v[i]->body_case == CORRAL__ENVELOPE__BODY_WORKER_START &&
                  !strcmp(f->got.v[i]->worker_start->job_id, a);
    assert_int_equal(starts, 1);
    assert_string_equal(job_state_of(f, cl, a, 5), "RUNNING");
    assert_int_equal(job_info(f, cl, b, 6)->state, CORRAL__JOB_STATE__JOB_FAILED);
    /* 12 of its 16 CPUs free: one CPU=4 placement, not two */
    char c12[32], c1[32];
    submit_on(f, cl, "CPU", 12, "remote-2", c12);
    assert_string_equal(job_state_of(f, cl, c12, 7), "RUNNING");
    submit_on(f, cl, "CPU", 1, "remote-2", c1);
    assert_string_equal(job_state_of(f, cl, c1, 8), "PENDING");
    head_harness_conn_closed(cl);
    cr_conn_free_detached(cl);
    head_harness_conn_closed(ag2);
    cr_conn_free_detached(ag2);
}

static void test_oversized_answer_is_an_error(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    submit_msg_t m;
    Corral__Envelope *e = submit_msg(&m, "GPU", CR_QTY_ONE, NULL);
    size_t big = 3u << 20; /* each under the 4 MiB a string may hold */
    char *arg = cr_malloc(big + 1);
    memset(arg, 'x', big);
    arg[big] = '\0';
    char *argv[6] = {arg, arg, arg, arg, arg, arg};
    m.ws.argv = argv;
    m.ws.n_argv = 6;
    char id[32];
    submit_id(f, c, e, id, sizeof(id));
    free(arg);
    got_clear(&f->got);
    Corral__JobStatusRequest sr = CORRAL__JOB_STATUS_REQUEST__INIT;
    sr.job_id = id;
    Corral__Envelope s = CORRAL__ENVELOPE__INIT;
    s.body_case = CORRAL__ENVELOPE__BODY_JOB_STATUS;
    s.job_status = &sr;
    const Corral__Envelope *a = send_got(f, c, &s, 2);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_ERROR);
    assert_int_equal(a->error->code, CR_E2BIG);
    assert_non_null(strstr(a->error->message, "job_info"));
    assert_non_null(strstr(a->error->message, "above the frame limit of 16777216 bytes"));
    got_clear(&f->got);
    head_harness_conn_closed(c);
    cr_conn_free_detached(c);
}

/* A JobStatusRequest's answer leaves the workers' environment out (the
 * submitter's whole one for corral run, which no reader of the answer
 * uses) unless it asks with_env; the rest of the spec is there either way,
 * and a parked request (wait_ms) answers the same way. */
static void test_job_status_env_on_request(void **state)
{
    fx_t *f = *state;
    cr_conn_t *c = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    submit_msg_t m;
    Corral__Envelope *e = submit_msg(&m, "GPU", CR_QTY_ONE, NULL);
    submit_env(&m);
    char id[32];
    submit_id(f, c, e, id, sizeof(id));
    for (int with = 0; with < 2; with++) {
        for (int wait = 0; wait < 2; wait++) {
            got_clear(&f->got);
            Corral__JobStatusRequest sr = CORRAL__JOB_STATUS_REQUEST__INIT;
            sr.job_id = id;
            sr.with_env = with;
            sr.wait_ms = wait ? 50 : 0; /* the job runs on: answered when the wait ends */
            Corral__Envelope s = CORRAL__ENVELOPE__INIT;
            s.body_case = CORRAL__ENVELOPE__BODY_JOB_STATUS;
            s.job_status = &sr;
            s.id = 10 + with * 2 + wait;
            head_dispatch(c, &s);
            const Corral__Envelope *r = NULL;
            for (int i = 0; i < 400 && !(r = answer(&f->got, s.id)); i++) {
                head_harness_run();
                usleep(1000);
            }
            assert_non_null(r);
            assert_int_equal(r->body_case, CORRAL__ENVELOPE__BODY_JOB_INFO);
            const Corral__WorkerSpec *w = r->job_info->spec->worker;
            assert_string_equal(w->argv[0], "true");
            assert_int_equal(w->n_resources, 1);
            assert_int_equal(w->n_env, with ? 2 : 0);
            if (with)
                assert_string_equal(w->env[1]->value, "C.UTF-8");
        }
    }
    got_clear(&f->got);
    head_harness_conn_closed(c);
    cr_conn_free_detached(c);
}

static void test_pg_refused_reservation(void **state)
{
    fx_t *f = *state;
    cr_conn_t *cl = cr_conn_new_detached(CORRAL__ROLE__ROLE_CLIENT, sink, &f->got);
    cr_conn_t *ag = cr_conn_new_detached(CORRAL__ROLE__ROLE_AGENT, sink, &f->got);
    register_remote(f, ag, 1);

    pg_create_cpus(f, cl, "g", 1, "corral.io/node-id=remote-1", 2);
    const Corral__Envelope *prep = last_sent(f, CORRAL__ENVELOPE__BODY_PREPARE);
    assert_non_null(prep);
    char txn[64];
    cr_strlcpy(txn, prep->prepare->txn_id, sizeof(txn));

    Corral__PrepareReply pr = CORRAL__PREPARE_REPLY__INIT;
    pr.txn_id = txn;
    pr.ok = false;
    pr.reason = "CPU taken meanwhile";
    Corral__Envelope r = CORRAL__ENVELOPE__INIT;
    r.id = 3;
    r.body_case = CORRAL__ENVELOPE__BODY_PREPARE_REPLY;
    r.prepare_reply = &pr;
    head_dispatch(ag, &r);
    for (int i = 0; i < 4; i++)
        head_harness_run();
    for (size_t i = 0; i < f->got.n; i++)
        assert_int_not_equal(f->got.v[i]->body_case, CORRAL__ENVELOPE__BODY_COMMIT);

    Corral__PgList pl = CORRAL__PG_LIST__INIT;
    Corral__Envelope l = CORRAL__ENVELOPE__INIT;
    l.body_case = CORRAL__ENVELOPE__BODY_PG_LIST;
    l.pg_list = &pl;
    const Corral__Envelope *a = send_got(f, cl, &l, 4);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_PG_LIST_REPLY);
    assert_int_equal(a->pg_list_reply->n_groups, 1);
    const Corral__PgInfo *g = a->pg_list_reply->groups[0];
    /* PENDING, or PREPARING again if its retry came already: never CREATED */
    assert_int_not_equal(g->state, CORRAL__PG_STATE__PG_CREATED);
    assert_int_equal(events_of(f, cl, "pg_rolled_back", 5), 1);

    head_harness_conn_closed(ag);
    head_harness_conn_closed(cl);
    cr_conn_free_detached(ag);
    cr_conn_free_detached(cl);
}

/* ---- the group commit, over a real connection ---- */

static int client_ready;

static void cl_ready(cr_conn_t *c, void *data)
{
    client_ready++;
}

static void cl_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    sink(data, e);
}

/* Runs the head's loop until the client has n messages; fails after 5 s
 * (a deadline for a hang, not a measurement). */
static void run_until_got(fx_t *f, size_t n)
{
    for (int i = 0; i < 5000 && f->got.n < n; i++) {
        head_harness_run();
        if (f->got.n < n)
            usleep(1000);
    }
    assert_true(f->got.n >= n);
}

static size_t jobs_in_state_db(void)
{
    cr_state_job_t *v;
    size_t n;
    assert_int_equal(cr_state_job_list(D.st, false, &v, &n), 0);
    cr_state_job_list_free(v, n);
    return n;
}

/* Pins the group commit's failure branch (head/turn.c batch_end): a job
 * submitted over a real connection in a turn whose commit fails (a full
 * disk, injected in the state layer as SQLite's own test harness injects
 * I/O errors: head/state.h cr_state_fault_commit) is answered an Error
 * that names the full disk, never JobSubmitted, state.db holds no job and
 * the head forgets it; writes are refused until a commit succeeds again
 * (head_store_retry), then the next submit is acknowledged. */
static void test_failed_commit_is_never_acknowledged(void **state)
{
    fx_t *f = *state;
    static const uint8_t token[CR_TOKEN_LEN] = {7, 7, 7};
    char path[128];
    snprintf(path, sizeof(path), "%s/head.sock", f->dir);
    assert_int_equal(head_harness_listen(path, token), 0);
    cr_net_callbacks_t cb = {.on_ready = cl_ready, .on_message = cl_message};
    cr_net_t *cn =
        cr_net_new(&D.loop, &(cr_net_config_t){.token = token, .name = "client"}, &cb, &f->got);
    cr_conn_t *c;
    client_ready = 0;
    assert_int_equal(cr_net_connect(cn, path, CORRAL__ROLE__ROLE_CLIENT, &c), 0);
    for (int i = 0; i < 5000 && !client_ready; i++) {
        head_harness_run();
        usleep(1000);
    }
    assert_int_equal(client_ready, 1);

    submit_msg_t m;
    Corral__Envelope *e = submit_msg(&m, "GPU", CR_QTY_ONE, NULL);
    cr_state_fault_commit(D.st, 1, SQLITE_FULL);
    e->id = 1;
    assert_int_equal(cr_conn_send(c, e), 0);
    run_until_got(f, 1);
    const Corral__Envelope *a = answer(&f->got, 1);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_ERROR);
    assert_int_equal(a->error->code, CR_ENOSPC);
    assert_non_null(strstr(a->error->message, "the disk is full"));
    assert_non_null(strstr(a->error->message, "nothing of this request was kept"));
    assert_int_equal(jobs_in_state_db(), 0);
    /* the failed turn's job is forgotten with its id, not left running */
    assert_int_equal(D.jobs.n, 0);
    assert_true(D.store_failing);

    /* until a commit succeeds again, writes are refused and say why */
    e->id = 2;
    assert_int_equal(cr_conn_send(c, e), 0);
    run_until_got(f, 2);
    a = answer(&f->got, 2);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_ERROR);
    assert_non_null(strstr(a->error->message, "serves reads only until it can commit"));
    assert_non_null(strstr(a->error->message, "the disk is full"));
    assert_int_equal(jobs_in_state_db(), 0);

    /* the retry commits (nothing injected now): writes are served again */
    D.store_tried_ms = 0;
    head_store_retry();
    assert_false(D.store_failing);
    e->id = 3;
    assert_int_equal(cr_conn_send(c, e), 0);
    run_until_got(f, 3);
    a = answer(&f->got, 3);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_JOB_SUBMITTED);
    assert_int_equal(jobs_in_state_db(), 1);
    assert_int_equal(D.jobs.n, 1); /* one job for the id, not two */
    cr_net_close(cn, NULL, NULL);
}

/* A placement group created in a turn whose commit fails is answered an
 * Error and forgotten (its id was rolled back with it): none is left in
 * the head, none in state.db. */
static void test_failed_commit_forgets_group(void **state)
{
    fx_t *f = *state;
    static const uint8_t token[CR_TOKEN_LEN] = {7, 7, 7};
    char path[128];
    snprintf(path, sizeof(path), "%s/head.sock", f->dir);
    assert_int_equal(head_harness_listen(path, token), 0);
    cr_net_callbacks_t cb = {.on_ready = cl_ready, .on_message = cl_message};
    cr_net_t *cn =
        cr_net_new(&D.loop, &(cr_net_config_t){.token = token, .name = "client"}, &cb, &f->got);
    cr_conn_t *c;
    client_ready = 0;
    assert_int_equal(cr_net_connect(cn, path, CORRAL__ROLE__ROLE_CLIENT, &c), 0);
    for (int i = 0; i < 5000 && !client_ready; i++) {
        head_harness_run();
        usleep(1000);
    }
    assert_int_equal(client_ready, 1);

    Corral__Quantity q = CORRAL__QUANTITY__INIT, *qs[] = {&q};
    q.name = "CPU";
    q.amount = CR_QTY_ONE;
    Corral__Bundle b = CORRAL__BUNDLE__INIT, *bs[] = {&b};
    b.resources = qs;
    b.n_resources = 1;
    Corral__PgCreate pc = CORRAL__PG_CREATE__INIT;
    pc.name = "g";
    pc.bundles = bs;
    pc.n_bundles = 1;
    pc.wait_for_nodes = true;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_CREATE;
    e.pg_create = &pc;
    e.id = 1;
    cr_state_fault_commit(D.st, 1, SQLITE_FULL);
    assert_int_equal(cr_conn_send(c, &e), 0);
    run_until_got(f, 1);
    const Corral__Envelope *a = answer(&f->got, 1);
    assert_int_equal(a->body_case, CORRAL__ENVELOPE__BODY_ERROR);
    assert_non_null(strstr(a->error->message, "nothing of this request was kept"));
    assert_int_equal(D.pgs.n, 0);
    cr_state_pg_t *v;
    size_t n;
    assert_int_equal(cr_state_pg_list(D.st, &v, &n), 0);
    cr_state_pg_list_free(v, n);
    assert_int_equal(n, 0);
    cr_net_close(cn, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_submit_fails_with_the_harness_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heartbeat_before_register_is_an_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unserved_message_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_detached_conn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heartbeat_changes_and_free, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_commit_is_never_acknowledged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_commit_forgets_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_node_detection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pg_refused_reservation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paged_lists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_answer_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_status_env_on_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bound_jobs_stop_with_their_connection, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_queue_positions_follow_the_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_holders_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_pass_alike_and_different, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_pass_not_reentered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pg_pass_alike_and_different, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_catches_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ended_job_env_from_state_db, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
