/* The head's message tables (as Slurm's proc_req.c and Redis's command
 * table): a client's request goes to the module that owns what it names,
 * an agent's message to membership, its workers or its reservations. Also
 * the cluster status, which spans them, and `corral stop`. */
#include "head/head.h"
#include <stdio.h>
#include <string.h>

static void on_force(uv_timer_t *t)
{
    /* remote workers whose agents did not answer in time */
    D.running_workers = 0;
    maybe_finish_shutdown();
}

void begin_shutdown(const char *why)
{
    static uv_timer_t force;
    if (D.shutting_down)
        return;
    D.shutting_down = true;
    head_event("shutdown", "%s: stopping %d worker(s)", why, D.running_workers);
    jobs_stop_all(SHUTDOWN_GRACE_MS);
    uv_timer_init(&D.loop, &force);
    uv_timer_start(&force, on_force, SHUTDOWN_GRACE_MS + 2000, 0);
    uv_unref((uv_handle_t *)&force);
    maybe_finish_shutdown();
}

/* corral stop: the head (its workers first). With agents (corral stop
 * --address), every agent connected is told to stop its workers and
 * exit first, and keep_head leaves the head running; the answer says how
 * many agents were told. An agent told so does not come back: it has
 * exited (it shows SUSPECT, then DEAD, as any node that went). */
static void req_shutdown(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__Shutdown *r = e->shutdown;
    if (!r->agents) {
        reply_ack(c, e);
        begin_shutdown("corral stop");
        return;
    }
    uint32_t told = 0;
    for (size_t i = 0; i < D.nodes.n; i++) {
        node_t *n = D.nodes.v[i];
        if (n->local || !n->conn)
            continue;
        Corral__Shutdown sd = CORRAL__SHUTDOWN__INIT;
        Corral__Envelope m = CORRAL__ENVELOPE__INIT;
        m.body_case = CORRAL__ENVELOPE__BODY_SHUTDOWN;
        m.shutdown = &sd;
        if (node_send(n, &m) == 0)
            told++;
    }
    head_event("shutdown", "corral stop --address: %u agent(s) told to stop%s", told,
               r->keep_head ? "" : ", then the head");
    Corral__ShutdownReply sr = CORRAL__SHUTDOWN_REPLY__INIT;
    sr.agents = told;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_SHUTDOWN_REPLY;
    a.shutdown_reply = &sr;
    reply(c, e, &a);
    if (!r->keep_head)
        begin_shutdown("corral stop --address");
}

static void req_status(cr_conn_t *c, const Corral__Envelope *e)
{
    Corral__ClusterStatus s = CORRAL__CLUSTER_STATUS__INIT;
    void *mem;
    nodes_status(&s, &mem);
    s.head_address = D.address;
    s.pending_jobs = (uint32_t)jobs_count(CR_JOB_PENDING);
    s.running_jobs = (uint32_t)jobs_count(CR_JOB_RUNNING);
    s.pending_groups = (uint32_t)pgs_pending();
    holders_t h = {0};
    jobs_holders(&h);
    pgs_holders(&h);
    s.holders = h.v.v;
    s.n_holders = h.v.n;
    s.holders_not_listed = h.not_listed;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_CLUSTER_STATUS;
    a.cluster_status = &s;
    reply(c, e, &a);
    nodes_status_free(&s, mem);
    holders_free(&h);
}

typedef void (*handler_fn)(cr_conn_t *c, const Corral__Envelope *e);
/* write: the request changes the state, refused while the state store
 * cannot commit (head_refuse_write) */
static const struct {
    Corral__Envelope__BodyCase body;
    handler_fn fn;
    bool write;
} handlers[] = {
    {CORRAL__ENVELOPE__BODY_JOB_SUBMIT, req_job_submit, true},
    {CORRAL__ENVELOPE__BODY_JOB_STATUS, req_job_status, false},
    {CORRAL__ENVELOPE__BODY_JOB_LIST, req_job_list, false},
    {CORRAL__ENVELOPE__BODY_JOB_STOP, req_job_stop, true},
    {CORRAL__ENVELOPE__BODY_JOB_LOGS, req_job_logs, false},
    {CORRAL__ENVELOPE__BODY_STATUS_REQUEST, req_status, false},
    {CORRAL__ENVELOPE__BODY_NODE_LIST, req_node_list, false},
    {CORRAL__ENVELOPE__BODY_EVENTS_REQUEST, req_events, false},
    {CORRAL__ENVELOPE__BODY_SHUTDOWN, req_shutdown, false},
    {CORRAL__ENVELOPE__BODY_PG_CREATE, req_pg, true},
    {CORRAL__ENVELOPE__BODY_PG_REMOVE, req_pg, true},
    {CORRAL__ENVELOPE__BODY_PG_LIST, req_pg, false},
};

/* An agent's messages. Register first; everything else names the node of
 * the connection (which it marks alive). */
static void agent_message(cr_conn_t *c, const Corral__Envelope *e)
{
    if (e->body_case == CORRAL__ENVELOPE__BODY_REGISTER) {
        bool fresh = false;
        node_t *n = nodes_register(c, e, &fresh);
        if (n) {
            workers_registered(n, e->register_, fresh);
            head_retry();
        }
        return;
    }
    node_t *n = node_of_agent(c, e);
    if (!n)
        return;
    switch (e->body_case) {
    case CORRAL__ENVELOPE__BODY_HEARTBEAT:
        workers_heartbeat(n, e->heartbeat); /* the changes it carries, then the beat */
        nodes_heartbeat(c, e, n);
        break;
    case CORRAL__ENVELOPE__BODY_WORKER_STARTED:
        workers_started_msg(n, e->worker_started);
        break;
    case CORRAL__ENVELOPE__BODY_WORKER_EXIT:
        workers_exit_msg(n, e->worker_exit);
        break;
    case CORRAL__ENVELOPE__BODY_LOG_CHUNK:
        logs_chunk_msg(n, e->log_chunk);
        break;
    case CORRAL__ENVELOPE__BODY_PREPARE_REPLY:
        pgs_prepare_reply(n, e->prepare_reply);
        break;
    case CORRAL__ENVELOPE__BODY_TXN_DONE:
        pgs_txn_done(n, e->txn_done);
        break;
    case CORRAL__ENVELOPE__BODY_PORT_REPLY:
    case CORRAL__ENVELOPE__BODY_ERROR:
        nodes_port_reply(n, e);
        break;
    case CORRAL__ENVELOPE__BODY_ACK:
    case CORRAL__ENVELOPE__BODY_EVENT:
        break;
    default:
        cr_conn_reply_error(c, e->id, CR_ENOSYS, "%s is not served to agents",
                            cr_msg_name(e->body_case));
    }
}

/* A connection that proved a job credential (a worker's CORRAL_JOB_TOKEN)
 * is served, while the worker's attempt it names is the current one: its
 * own job's status, logs and stop; submitting jobs, which become children
 * of its job (a driver's task leases and actors: stopped when the job
 * ends), and their status, logs and stop; the listing of its job and its
 * children. Everything else is refused with an Error that says so. */
static bool job_scope_allows(cr_conn_t *c, const Corral__Envelope *e, const cr_job_scope_t *s)
{
    char why[256];
    if (!jobs_scope_current(s, why, sizeof(why))) {
        cr_conn_reply_error(c, e->id, CR_EACCES,
                            "this job credential (CORRAL_JOB_TOKEN) is no longer valid: %s", why);
        return false;
    }
    const char *target = NULL;
    switch (e->body_case) {
    case CORRAL__ENVELOPE__BODY_JOB_STATUS:
        target = e->job_status->job_id;
        break;
    case CORRAL__ENVELOPE__BODY_JOB_LOGS:
        target = e->job_logs->job_id;
        break;
    case CORRAL__ENVELOPE__BODY_JOB_STOP:
        target = e->job_stop->job_id;
        break;
    case CORRAL__ENVELOPE__BODY_JOB_SUBMIT: /* a child of its job (jobs.c) */
    case CORRAL__ENVELOPE__BODY_JOB_LIST:   /* its job and its children */
        return true;
    default:
        cr_conn_reply_error(c, e->id, CR_EACCES,
                            "refused: %s needs the cluster token; a worker's job credential "
                            "(CORRAL_JOB_TOKEN, job %s) may only act on its own job and the "
                            "jobs it submitted (status, logs, stop, list, submit)",
                            cr_msg_name(e->body_case), s->job_id);
        return false;
    }
    if (!target || !jobs_in_scope(s, target)) {
        cr_conn_reply_error(c, e->id, CR_EACCES,
                            "refused: the job credential of job %s (CORRAL_JOB_TOKEN) may not "
                            "act on job %s; a worker may act on its own job and the jobs it "
                            "submitted only",
                            s->job_id, target ? target : "");
        return false;
    }
    return true;
}

void head_dispatch(cr_conn_t *c, const Corral__Envelope *e)
{
    if (cr_conn_role(c) == CORRAL__ROLE__ROLE_AGENT) {
        agent_message(c, e);
        return;
    }
    const cr_job_scope_t *scope = cr_conn_job_scope(c);
    if (scope && !job_scope_allows(c, e, scope))
        return;
    for (size_t i = 0; i < CR_ARRAY_SIZE(handlers); i++)
        if (handlers[i].body == e->body_case) {
            if (!handlers[i].write || !head_refuse_write(c, e))
                handlers[i].fn(c, e);
            return;
        }
    cr_conn_reply_error(c, e->id, CR_ENOSYS, "%s is not served by this head",
                        cr_msg_name(e->body_case));
}

void head_handle(cr_conn_t *c, const Corral__Envelope *e)
{
    head_batch();
    head_dispatch(c, e);
}
