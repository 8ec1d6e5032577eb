/* A job's workers on their nodes (docs/workers.md): starting and stopping
 * them through their node's agent, the environment and ranks they get,
 * and what the agents say of them (started, ended, lost, adopted after a
 * head restart), recorded in state.db. Part of the jobs module (jobs.h). */
#include "head/jobs.h"
#include "head/follow.h"
#include <stdio.h>
#include <sys/stat.h>

static cr_worker_state_t db_worker_state(Corral__WorkerState s)
{
    switch (s) {
    case CORRAL__WORKER_STATE__WORKER_STARTING:
        return CR_WORKER_STARTING;
    case CORRAL__WORKER_STATE__WORKER_RUNNING:
        return CR_WORKER_RUNNING;
    case CORRAL__WORKER_STATE__WORKER_STOPPED:
        return CR_WORKER_STOPPED;
    case CORRAL__WORKER_STATE__WORKER_LOST:
        return CR_WORKER_LOST;
    case CORRAL__WORKER_STATE__WORKER_EXITED:
    case CORRAL__WORKER_STATE__WORKER_FAILED:
        return CR_WORKER_EXITED;
    default:
        return CR_WORKER_PENDING;
    }
}

/* w's row in state.db, written as a new row (create) or over its row;
 * its node and devices left out unless placed */
static void db_worker_write(const wk_t *w, bool create, bool placed)
{
    cr_buf_t devs = {0};
    if (placed)
        devs_format(w->devs, w->ndevs, &devs);
    cr_state_worker_t r = {.job_id = w->job->id,
                           .index = w->index,
                           .node_id = placed && w->node ? w->node->id : NULL,
                           .devices = devs.s,
                           .pid = w->pid,
                           .pgid = w->pid,
                           .start_time = w->start_time,
                           .state = db_worker_state(w->state),
                           .exit_code = w->exit_code,
                           .exit_signal = w->signal,
                           .restarts = w->attempt,
                           .stdout_path = w->out_path,
                           .stderr_path = w->err_path,
                           .output_lost = w->output_lost};
    if (create)
        db_check(cr_state_worker_create(D.st, &r, w->job->submitted_ms));
    else
        db_check(cr_state_worker_update(D.st, &r, cr_wall_ms()));
    cr_buf_free(&devs);
}

void db_worker(const wk_t *w)
{
    db_worker_write(w, false, true);
}

void db_worker_create(const wk_t *w, bool placed)
{
    db_worker_write(w, true, placed);
}

/* The unit resource name of worker w's devices ("GPU", "TPU"), "" when
 * none: from its bundle in a placement group, else from the job's spec. */
static const char *accel_type(const wk_t *w)
{
    const job_t *j = w->job;
    const Corral__Bundle *b = j->pg ? pg_bundle_spec(j->pg, w->bundle) : NULL;
    Corral__Quantity **q = b ? b->resources : j->spec->worker->resources;
    size_t n = b ? b->n_resources : j->spec->worker->n_resources;
    for (size_t i = 0; i < n; i++) {
        int rid = sched_syms_find(&D.cluster->res, q[i]->name, strlen(q[i]->name));
        if (rid >= 0 && sched_resource_is_unit(rid))
            return q[i]->name;
    }
    return "";
}

void worker_gang_slot(const wk_t *w, sched_gang_slot_t *out, char *addr, size_t size)
{
    const node_t *n = w->node;
    const char *wid =
        n && n->desc ? cr_node_get_label(n->desc, "corral.io/tpu-slice-worker-id") : NULL;
    int64_t v = -1;
    if (!wid || cr_parse_i64(wid, 10, &v) != 0 || v < 0 || v > 1000000)
        v = -1;
    int first = -1;
    for (size_t i = 0; i < w->ndevs; i++)
        if (first < 0 || w->devs[i] < first)
            first = w->devs[i];
    char tmp[256];
    const job_t *j = w->job;
    node_t **peers = cr_calloc((size_t)j->n + 1, sizeof(*peers));
    for (int i = 0; i < j->n; i++)
        peers[i] = j->wk[i].node;
    snprintf(addr, size, "%s", n ? node_address(n, peers, (size_t)j->n, tmp, sizeof(tmp)) : "?");
    free(peers);
    *out = (sched_gang_slot_t){.node = n ? n->sn : -1,
                               .addr = addr,
                               .slice_worker = (int)v,
                               .first_dev = first,
                               .ndevs = (int)w->ndevs};
}

/* The variables of torch.distributed, JAX and a TPU slice for worker w of
 * a distributed job, whose workers are in rank order (sched/gang.c). */
static void rank_env(const wk_t *w, cr_envlist_t *out)
{
    const job_t *j = w->job;
    sched_gang_slot_t *s = cr_calloc((size_t)j->n, sizeof(*s));
    char(*addr)[256] = cr_calloc((size_t)j->n, sizeof(*addr));
    for (int i = 0; i < j->n; i++)
        worker_gang_slot(&j->wk[i], &s[i], addr[i], sizeof(addr[i]));
    cr_envlist_t job = {0}; /* a view of what the job sets */
    const Corral__WorkerSpec *ws = j->spec->worker;
    for (size_t i = 0; i < ws->n_env; i++)
        *CR_VEC_PUSH(&job.vars) = (cr_kv_t){.key = ws->env[i]->key, .value = ws->env[i]->value};
    const char *topo = w->node && w->node->desc
                           ? cr_node_get_label(w->node->desc, "corral.io/tpu-slice-topology")
                           : NULL;
    sched_gang_t g = {.slots = s,
                      .n = j->n,
                      .run_id = j->idstr,
                      .master_port = j->master_port,
                      .jax_port = j->jax_port,
                      .restart_count = w->attempt,
                      .max_restarts = (int)j->spec->max_restarts,
                      .job_env = &job,
                      .tpu = strcmp(accel_type(w), "TPU") == 0,
                      .tpu_topology = topo};
    if (sched_gang_env(&g, w->index, out) < 0)
        cr_warn("job %s worker %d: its rank variables do not fit", j->idstr, w->index);
    CR_VEC_FREE(&job.vars);
    free(addr);
    free(s);
}

/* A worker's extra environment as the WorkerStart message carries it. */
typedef struct envb {
    cr_envlist_t env;
    Corral__KeyValue *kv;
    Corral__KeyValue **p;
} envb_t;

static void envb_pack(envb_t *b, Corral__WorkerStart *ws)
{
    size_t n = b->env.vars.n;
    b->kv = cr_calloc(n + 1, sizeof(*b->kv));
    b->p = cr_calloc(n + 1, sizeof(*b->p));
    for (size_t i = 0; i < n; i++) {
        corral__key_value__init(&b->kv[i]);
        b->kv[i].key = b->env.vars.v[i].key;
        b->kv[i].value = b->env.vars.v[i].value;
        b->p[i] = &b->kv[i];
    }
    ws->extra_env = b->p;
    ws->n_extra_env = n;
}

static void envb_free(envb_t *b)
{
    cr_envlist_free(&b->env);
    free(b->kv);
    free(b->p);
}

/* Starts w on its node: through the in-process agent, or a WorkerStart to
 * the node's agent (a failure to send loses the worker). */
static void start_on_node(wk_t *w)
{
    job_t *j = w->job;
    node_t *n = w->node;
    Corral__WorkerStart ws = CORRAL__WORKER_START__INIT;
    ws.job_id = j->idstr;
    ws.worker_id = w->id;
    ws.worker_index = (uint32_t)w->index;
    ws.num_workers = (uint32_t)j->n;
    ws.attempt = (uint32_t)w->attempt;
    ws.spec = j->spec->worker;
    uint32_t devs[MAX_DEVS];
    for (size_t i = 0; i < w->ndevs; i++)
        devs[i] = (uint32_t)w->devs[i];
    ws.devices = devs;
    ws.n_devices = w->ndevs;
    ws.pg_id = j->pg ? (char *)pg_name(j->pg) : "";
    ws.bundle_index = w->bundle >= 0 ? (uint32_t)w->bundle : 0;
    ws.bind = j->spec->bind;
    ws.grace_ms = j->spec->grace_ms;
    envb_t b = {0};
    cr_envlist_set(&b.env, "CORRAL_ACCELERATOR_TYPE", accel_type(w));
    if (j->spec->distributed)
        rank_env(w, &b.env);
    envb_pack(&b, &ws);
    if (!n) {
        envb_free(&b);
        worker_lost(w, "it has no node");
        return;
    }
    if (n->local) {
        agent_start(D.agent, &ws);
        envb_free(&b);
        return;
    }
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_WORKER_START;
    e.worker_start = &ws;
    int err = node_send(n, &e);
    envb_free(&b);
    if (err < 0) {
        char why[160];
        snprintf(why, sizeof(why), "node %s's agent cannot be reached (%s)", n->id,
                 cr_strerror(err));
        worker_lost(w, why);
    }
}

static void stop_on_node(wk_t *w, uint32_t grace_ms)
{
    node_t *n = w->node;
    if (!n)
        return;
    if (n->local) {
        agent_stop(D.agent, w->id, grace_ms);
        return;
    }
    Corral__WorkerStop s = CORRAL__WORKER_STOP__INIT;
    s.worker_id = w->id;
    s.grace_ms = grace_ms;
    s.reason = "stopped by the head";
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_WORKER_STOP;
    e.worker_stop = &s;
    node_send(n, &e); /* a node without its agent: the stop happens when it is reconciled or dead */
}

bool wk_alive(const wk_t *w)
{
    return w->state == CORRAL__WORKER_STATE__WORKER_STARTING ||
           w->state == CORRAL__WORKER_STATE__WORKER_RUNNING;
}

wk_t *worker_find(const char *worker_id)
{
    /* ids are "job<J>-w<I>" */
    if (strncmp(worker_id, "job", 3) != 0)
        return NULL;
    char *end;
    long long id = strtoll(worker_id + 3, &end, 10);
    if (end == worker_id + 3 || strncmp(end, "-w", 2) != 0)
        return NULL;
    char *e2;
    long idx = strtol(end + 2, &e2, 10);
    if (e2 == end + 2 || *e2)
        return NULL;
    char idstr[24];
    snprintf(idstr, sizeof(idstr), "%lld", id);
    job_t *j = job_find(idstr);
    if (!j || idx < 0 || idx >= j->n)
        return NULL;
    return &j->wk[idx];
}

void worker_started(wk_t *w, const agent_started_t *s)
{
    job_t *j = w->job;
    if ((int)s->attempt != w->attempt || w->state != CORRAL__WORKER_STATE__WORKER_STARTING)
        return; /* an older attempt's news */
    w->pid = s->pid;
    w->start_time = s->start_time;
    w->state = CORRAL__WORKER_STATE__WORKER_RUNNING;
    if (w->node && w->node->local) {
        free(w->out_path);
        free(w->err_path);
        w->out_path = s->out_path ? cr_strdup(s->out_path) : NULL;
        w->err_path = s->err_path ? cr_strdup(s->err_path) : NULL;
    }
    db_worker(w);
    cr_buf_t devs = {0};
    devs_format(w->devs, w->ndevs, &devs);
    event("started", j, "worker %d on %s pid %d devices [%s] cpus %s%s%s", w->index,
          w->node ? w->node->id : "?", w->pid, devs.s ? devs.s : "",
          s->cpus && s->cpus[0] ? s->cpus : "-", s->warning && s->warning[0] ? ": " : "",
          s->warning ? s->warning : "");
    cr_buf_free(&devs);
    follow_pump();
}

static void worker_gone(wk_t *w)
{
    if (wk_alive(w))
        D.running_workers--;
}

/* A worker's exit code as a shell reports it: 128 + the signal that ended it. */
static int exit_code_of(const Corral__WorkerReport *r)
{
    return r->signal ? 128 + r->signal : (int)r->exit_code;
}

/* A failure that ended at ended_us ended before the one that decided j: an
 * earlier end wins, an equal one goes to the lower index (clocks tick in
 * steps, so ties happen; one rule makes the report the same every run). */
static bool ended_first(int64_t ended_us, int index, const job_t *j)
{
    if (!ended_us || !j->fail_us)
        return false;
    return ended_us < j->fail_us || (ended_us == j->fail_us && index < j->fail_index);
}

/* A remote worker's end says how much output its agent holds: what of
 * it never reached the head's copy is lost (the agent lost the head with
 * output unsent), and the job's record says so. */
static void count_lost_output(wk_t *w, const Corral__WorkerReport *r)
{
    if (!r->stdout_bytes && !r->stderr_bytes)
        return; /* the head's own agent, or an agent that does not say */
    const uint64_t total[2] = {r->stdout_bytes, r->stderr_bytes};
    const char *paths[2] = {w->out_path, w->err_path};
    uint64_t lost = 0;
    for (int s = 0; s < 2; s++) {
        struct stat sb;
        uint64_t got = paths[s] && stat(paths[s], &sb) == 0 ? (uint64_t)sb.st_size : 0;
        lost += total[s] > got ? total[s] - got : 0;
    }
    uint64_t was = w->output_lost;
    w->output_lost = lost > was ? lost : was; /* the files only grow over attempts */
    if (w->output_lost > was)
        event("output_lost", w->job,
              "worker %d: %llu byte(s) of its output on node %s never reached the head", w->index,
              (unsigned long long)(w->output_lost - was), w->node ? w->node->id : "?");
}

void worker_ended(wk_t *w, const Corral__WorkerReport *r)
{
    job_t *j = w->job;
    if ((int)r->attempt != w->attempt || !wk_alive(w))
        return; /* an older attempt's news, or already decided (lost) */
    count_lost_output(w, r);
    worker_gone(w);
    free(w->reason);
    w->reason = r->reason && r->reason[0] ? cr_strdup(r->reason) : NULL;
    if (r->state == CORRAL__WORKER_STATE__WORKER_FAILED) {
        w->state = CORRAL__WORKER_STATE__WORKER_FAILED;
        w->exit_code = 127;
        db_worker(w);
        event("failed", j, "worker %d: %s", w->index, w->reason ? w->reason : "did not start");
        char cause[160];
        snprintf(cause, sizeof(cause), "start failure (%s)", w->reason ? w->reason : "?");
        if (!restart_schedule(j, w, cause))
            job_fail(j, 127, "worker %d: %s", w->index, w->reason ? w->reason : "did not start");
        restart_check(j);
        job_check_done(j);
        maybe_finish_shutdown();
        return;
    }
    bool stopped = r->state == CORRAL__WORKER_STATE__WORKER_STOPPED;
    w->state = stopped ? CORRAL__WORKER_STATE__WORKER_STOPPED : CORRAL__WORKER_STATE__WORKER_EXITED;
    w->exit_code = r->exit_code;
    w->signal = r->signal;
    db_worker(w);
    if (r->code_unknown) {
        event("exited", j, "worker %d (pid %d) %s%s", w->index, w->pid,
              w->reason ? w->reason : "exited", stopped ? ", stopped on request" : "");
        if (!stopped)
            j->unknown_exit = true;
    } else if (r->signal) {
        event("exited", j, "worker %d (pid %d) ended by signal %d%s", w->index, w->pid, r->signal,
              w->reason ? " after the grace period" : "");
    } else {
        event("exited", j, "worker %d (pid %d) exited with code %d", w->index, w->pid,
              (int)r->exit_code);
    }
    /* a worker already being stopped for a restart that is scheduled (its
     * gang's peers fail on their own when one of them goes): part of that
     * restart, not another failure */
    bool in_restart = j->restart_pending && w->restart_due;
    bool failure = !stopped && !r->code_unknown && (r->signal || r->exit_code != 0);
    if (failure && j->failed && ended_first(r->ended_us, w->index, j)) {
        /* its report came later, but it ended first: the gang failed because of it */
        int code = exit_code_of(r);
        free(j->reason);
        j->reason = r->signal ? cr_asprintf("worker %d ended by signal %d", w->index, r->signal)
                              : cr_asprintf("worker %d exited with code %d", w->index, code);
        j->exit_code = code;
        j->fail_us = r->ended_us;
        j->fail_index = w->index;
    }
    if (failure && !in_restart && !j->failed) {
        int code = exit_code_of(r);
        j->fail_us = r->ended_us;
        j->fail_index = w->index;
        char cause[64];
        if (r->signal)
            snprintf(cause, sizeof(cause), "signal %d", r->signal);
        else
            snprintf(cause, sizeof(cause), "exit code %d", code);
        if (!restart_schedule(j, w, cause)) {
            if (j->spec->max_restarts && j->spec->restart != CORRAL__RESTART_POLICY__RESTART_NONE)
                job_fail(j, code, "worker %d ended with %s after %d restart(s), the limit",
                         w->index, cause, j->restarts);
            else if (r->signal)
                job_fail(j, code, "worker %d ended by signal %d", w->index, r->signal);
            else
                job_fail(j, code, "worker %d exited with code %d", w->index, code);
        }
    }
    restart_check(j);
    job_check_done(j);
    follow_pump();
    maybe_finish_shutdown();
}

void worker_lost(wk_t *w, const char *reason)
{
    job_t *j = w->job;
    bool was_alive = wk_alive(w);
    if (!was_alive && w->state != CORRAL__WORKER_STATE__WORKER_UNSPECIFIED &&
        !(j->restart_pending && w->restart_due))
        return;
    worker_gone(w);
    w->state = CORRAL__WORKER_STATE__WORKER_LOST;
    free(w->reason);
    w->reason = cr_strdup(reason);
    db_worker(w);
    event("lost", j, "worker %d lost: %s", w->index, reason);
    if (cr_job_state_is_final(j->state) || j->failed || j->stopping) {
        job_check_done(j);
        maybe_finish_shutdown();
        return;
    }
    /* the placement went with the node */
    j->placement = 0;
    j->replace = true;
    char cause[128];
    snprintf(cause, sizeof(cause), "loss (%s)", reason);
    if (!restart_schedule(j, w, cause))
        job_fail(j, 255, "worker %d lost: %s", w->index, reason);
    restart_check(j);
    job_check_done(j);
    maybe_finish_shutdown();
}

void wk_stop(wk_t *w, uint64_t grace_ms)
{
    if (wk_alive(w))
        stop_on_node(w, (uint32_t)grace_ms);
}

void start_one(job_t *j, wk_t *w)
{
    w->state = CORRAL__WORKER_STATE__WORKER_STARTING;
    D.running_workers++;
    start_on_node(w); /* may report back at once (local agent) */
    /* STARTING is recorded while the start is under way (a remote
     * agent's); a local start already recorded what it came to (RUNNING,
     * or its failure) in this turn, and STARTING before it would only be
     * a write the same commit overwrites */
    if (w->state == CORRAL__WORKER_STATE__WORKER_STARTING)
        db_worker(w);
}

static void send_stop(cr_conn_t *c, const char *worker_id, const char *why)
{
    Corral__WorkerStop s = CORRAL__WORKER_STOP__INIT;
    s.worker_id = (char *)worker_id;
    s.grace_ms = SHUTDOWN_GRACE_MS;
    s.reason = (char *)why;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_WORKER_STOP;
    e.worker_stop = &s;
    e.id = cr_conn_next_id(c);
    cr_conn_send(c, &e);
}

/* The workers an agent reports on (re)connecting, against what the head
 * believes runs there: matching ones are kept (adopted), finished ones
 * recorded, unknown or unwanted ones stopped, missing ones lost. */
static void reconcile(node_t *n, const Corral__Register *r)
{
    CR_VEC(wk_t *) seen = {0};
    for (size_t i = 0; i < r->n_workers; i++) {
        const Corral__WorkerReport *rep = r->workers[i];
        wk_t *w = worker_find(rep->worker_id);
        bool alive = w && (w->state == CORRAL__WORKER_STATE__WORKER_STARTING ||
                           w->state == CORRAL__WORKER_STATE__WORKER_RUNNING);
        bool wanted = alive && w->node == n && (int)rep->attempt == w->attempt &&
                      !w->job->stopping && !w->job->failed && !w->restart_due;
        bool running = rep->state == CORRAL__WORKER_STATE__WORKER_RUNNING ||
                       rep->state == CORRAL__WORKER_STATE__WORKER_STARTING;
        if (!wanted) {
            if (running)
                send_stop(n->conn, rep->worker_id, "unknown to the head, or no longer wanted");
            if (running)
                event_node("stale", n, "stopping worker %s on %s: %s", rep->worker_id, n->id,
                           w ? "the head no longer wants it" : "unknown to the head");
            if (w && alive && w->node == n && (int)rep->attempt == w->attempt)
                *CR_VEC_PUSH(&seen) = w; /* its stop is under way: not lost */
            continue;
        }
        *CR_VEC_PUSH(&seen) = w;
        if (running) {
            if (w->state != CORRAL__WORKER_STATE__WORKER_RUNNING || w->pid != rep->pid) {
                w->state = CORRAL__WORKER_STATE__WORKER_RUNNING;
                w->pid = rep->pid;
                w->start_time = rep->start_time;
            }
            event("adopted", w->job, "worker %d (pid %d) still runs on %s", w->index, w->pid,
                  n->id);
        } else {
            worker_ended(w, rep);
        }
    }
    for (size_t i = 0; i < D.jobs.n; i++) {
        job_t *j = D.jobs.v[i];
        for (int k = 0; k < j->n; k++) {
            wk_t *w = &j->wk[k];
            if (w->node != n || (w->state != CORRAL__WORKER_STATE__WORKER_STARTING &&
                                 w->state != CORRAL__WORKER_STATE__WORKER_RUNNING))
                continue;
            bool found = false;
            for (size_t s = 0; s < seen.n && !found; s++)
                found = seen.v[s] == w;
            if (!found)
                worker_lost(w, "its agent no longer runs it");
        }
    }
    CR_VEC_FREE(&seen);
}

static wk_t *node_worker(node_t *n, const char *worker_id)
{
    wk_t *w = worker_find(worker_id);
    return w && w->node == n ? w : NULL;
}

/* A worker's start or end the agent had not seen acknowledged: applied
 * as the message that first carried it was (twice is harmless). */
static void apply_change(node_t *n, const Corral__WorkerReport *r)
{
    wk_t *w = node_worker(n, r->worker_id);
    if (!w)
        return;
    if (r->state == CORRAL__WORKER_STATE__WORKER_RUNNING ||
        r->state == CORRAL__WORKER_STATE__WORKER_STARTING) {
        agent_started_t st = {.worker_id = r->worker_id,
                              .attempt = r->attempt,
                              .pid = r->pid,
                              .start_time = r->start_time,
                              .cpus = ""};
        worker_started(w, &st);
    } else {
        worker_ended(w, r);
    }
}

void workers_heartbeat(node_t *n, const Corral__Heartbeat *hb)
{
    for (size_t i = 0; i < hb->n_changes; i++)
        apply_change(n, hb->changes[i]);
}

void workers_started_msg(node_t *n, const Corral__WorkerStarted *s)
{
    wk_t *w = node_worker(n, s->worker_id);
    if (!w)
        return;
    agent_started_t st = {.worker_id = s->worker_id,
                          .attempt = s->attempt,
                          .pid = s->pid,
                          .start_time = s->start_time,
                          .cpus = s->cpus,
                          .warning = s->warning};
    worker_started(w, &st);
}

void workers_exit_msg(node_t *n, const Corral__WorkerExit *x)
{
    wk_t *w = node_worker(n, x->report->worker_id);
    if (w)
        worker_ended(w, x->report);
}

void workers_registered(node_t *n, const Corral__Register *r, bool fresh)
{
    if (!fresh) {
        reconcile(n, r);
        return;
    }
    for (size_t i = 0; i < r->n_workers; i++)
        if (r->workers[i]->state == CORRAL__WORKER_STATE__WORKER_RUNNING ||
            r->workers[i]->state == CORRAL__WORKER_STATE__WORKER_STARTING) {
            send_stop(n->conn, r->workers[i]->worker_id, "stale: from before the node rejoined");
            event_node("stale", n, "stopping worker %s on %s: from before the node rejoined",
                       r->workers[i]->worker_id, n->id);
        }
}

/* The in-process agent's callbacks (its agent_ops_t): the head's own node. */
void workers_local_started(void *arg, const agent_started_t *s)
{
    wk_t *w = worker_find(s->worker_id);
    if (w && w->node == D.self)
        worker_started(w, s);
}

void workers_local_exited(void *arg, const Corral__WorkerReport *r)
{
    wk_t *w = worker_find(r->worker_id);
    if (!w || w->node != D.self)
        return;
    head_batch();
    worker_ended(w, r);
}
