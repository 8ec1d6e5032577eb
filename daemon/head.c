/* The head's jobs: placement, starting workers through their nodes'
 * agents, restart policies, stop, the client handlers, and recovery after
 * a head restart (docs/runtime.md).
 *
 * A failing worker fails the gang (the others are stopped and the job
 * takes its exit code) unless the job's restart policy has restarts left:
 * then, after a backoff on a libuv timer, that worker (RESTART_WORKER) or
 * every worker once the others are stopped (RESTART_GANG) is started again
 * on the same devices. A worker lost with its node takes the gang's
 * placement with it: the gang is placed again (any policy but none). */
#include "daemon/daemon.h"
#include "daemon/follow.h"
#include "daemon/waiters.h"
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#define LOG_CHUNK (64 * 1024)
#define LOG_MAX (8u << 20) /* the tail of a log file a JobLogs answer carries */
#define DEFAULT_BACKOFF_MS 100 /* before the first restart, doubling */
#define MAX_BACKOFF_MS 5000

daemon_t D;

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *node_name(void)
{
    return D.self ? D.self->id : "head";
}

/* ---------------------------------------------------------------- events */

static void event_v(const char *kind, const job_t *j, const char *node, const char *fmt,
                    va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    cr_state_event_t ev = {.time_ms = now_ms(),
                           .kind = (char *)kind,
                           .job_id = j ? j->id : 0,
                           .node_id = (char *)node,
                           .message = msg};
    if (D.st && cr_state_event_append(D.st, &ev, NULL) < 0)
        cr_warn("events: %s", cr_state_errmsg(D.st));
    cr_info("%s%s%s: %s", kind, j ? " job " : "", j ? j->idstr : "", msg);
}

void event(const char *kind, const job_t *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    event_v(kind, j, node_name(), fmt, ap);
    va_end(ap);
}

void event_node(const char *kind, const node_t *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    event_v(kind, NULL, n->id, fmt, ap);
    va_end(ap);
}

void db_check(int err)
{
    if (err < 0)
        cr_warn("state: %s", cr_state_errmsg(D.st));
}

void reply(cr_conn_t *c, const Corral__Envelope *req, Corral__Envelope *ans)
{
    ans->reply_to = req->id;
    int err = cr_conn_send(c, ans);
    if (err < 0)
        cr_warn("reply to %s: %s", cr_conn_peer(c), cr_strerror(err));
}

void reply_ack(cr_conn_t *c, const Corral__Envelope *req)
{
    Corral__Ack ack = CORRAL__ACK__INIT;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_ACK;
    a.ack = &ack;
    reply(c, req, &a);
}

/* --------------------------------------------------------------- workers */

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

void devs_format(const int *devs, size_t n, cr_buf_t *out)
{
    for (size_t i = 0; i < n; i++)
        cr_buf_printf(out, "%s%d", i ? "," : "", devs[i]);
}

size_t devs_parse(const char *s, int *devs)
{
    size_t n = 0;
    for (const char *p = s; p && *p && n < MAX_DEVS;) {
        char *end;
        long d = strtol(p, &end, 10);
        if (end == p)
            break;
        devs[n++] = (int)d;
        if (*end != ',')
            break;
        p = end + 1;
    }
    return n;
}

void db_worker(const wk_t *w)
{
    cr_buf_t devs = {0};
    devs_format(w->devs, w->ndevs, &devs);
    cr_state_worker_t r = {.job_id = w->job->id,
                           .index = w->index,
                           .node_id = w->node ? w->node->id : NULL,
                           .devices = devs.s,
                           .pid = w->pid,
                           .pgid = w->pid,
                           .start_time = w->start_time,
                           .state = db_worker_state(w->state),
                           .exit_code = w->exit_code,
                           .exit_signal = w->signal,
                           .restarts = w->attempt,
                           .stdout_path = w->out_path,
                           .stderr_path = w->err_path};
    db_check(cr_state_worker_update(D.st, &r, now_ms()));
    cr_buf_free(&devs);
}

static bool wk_alive(const wk_t *w)
{
    return w->state == CORRAL__WORKER_STATE__WORKER_STARTING ||
           w->state == CORRAL__WORKER_STATE__WORKER_RUNNING;
}

static void job_set_state(job_t *j, cr_job_state_t s, const char *reason)
{
    char *copy = reason ? cr_strdup(reason) : NULL; /* reason may be j->reason */
    j->state = s;
    free(j->reason);
    j->reason = copy;
    db_check(cr_state_job_set_state(D.st, j->id, s, copy, now_ms()));
}

static void release_placement(job_t *j)
{
    if (j->placement) {
        sched_release(D.cluster, j->placement);
        j->placement = 0;
    }
    if (j->pg)
        for (int i = 0; i < j->n; i++)
            if (j->wk[i].bundle >= 0) {
                pg_bundle_give(j->pg, j->wk[i].bundle, j);
                j->wk[i].bundle = -1;
            }
}

/* Every worker has ended: the job's final state, its devices back. */
static void job_check_done(job_t *j)
{
    for (int i = 0; i < j->n; i++)
        if (wk_alive(&j->wk[i]))
            return;
    if (cr_job_state_is_final(j->state) || j->restart_pending || j->port_wait)
        return;
    if (j->replace && !j->failed && !j->stopping)
        return; /* waiting in the queue to be placed again */
    j->finished_ms = now_ms();
    if (j->failed) {
        job_set_state(j, CR_JOB_FAILED, j->reason);
    } else if (j->stopping) {
        job_set_state(j, CR_JOB_STOPPED, "stopped on request");
        j->exit_code = 143; /* 128 + SIGTERM, what a shell reports */
    } else if (j->unknown_exit) {
        /* success is not claimed when it cannot be known */
        j->exit_code = 255;
        job_set_state(j, CR_JOB_FAILED,
                      "its workers ended after a head restart: exit codes unknown (adopted "
                      "workers are not children of the new head)");
    } else {
        j->exit_code = 0;
        job_set_state(j, CR_JOB_SUCCEEDED, "every worker exited with code 0");
    }
    event("finished", j, "%s (exit code %d)", cr_job_state_name(j->state), j->exit_code);
    cr_waiters_wake(j); /* JobStatus requests waiting for this end */
    release_placement(j);
    follow_pump();
    try_pending();
    pgs_try_pending();
}

static void restart_cancel(job_t *j);
static void wk_stop(wk_t *w, uint64_t grace_ms);
static void remove_pending(job_t *j);

/* The first failure of a gang decides the job; the rest are stopped. */
static void job_fail(job_t *j, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void job_fail(job_t *j, int code, const char *fmt, ...)
{
    if (j->failed || j->stopping)
        return;
    restart_cancel(j);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    j->failed = true;
    j->port_wait = false;
    j->exit_code = code;
    free(j->reason);
    j->reason = cr_strdup(msg);
    if (j->replace) {
        j->replace = false;
        remove_pending(j);
    }
    for (int i = 0; i < j->n; i++)
        wk_stop(&j->wk[i], j->spec->grace_ms ? j->spec->grace_ms : DEFAULT_GRACE_MS);
}

static void start_workers(job_t *j);
static void start_one(job_t *j, wk_t *w);
static void restart_check(job_t *j);

/* How long to wait before restart number n (1, 2, ...): the job's backoff
 * (or the default) doubled each time, capped. */
static uint64_t backoff_ms(const job_t *j, int n)
{
    uint64_t base = j->spec->backoff_ms ? j->spec->backoff_ms : DEFAULT_BACKOFF_MS;
    uint64_t cap = base > MAX_BACKOFF_MS ? base : MAX_BACKOFF_MS;
    uint64_t d = base;
    for (int k = 1; k < n && d < cap; k++)
        d *= 2;
    return d < cap ? d : cap;
}

static void on_backoff(uv_timer_t *t)
{
    job_t *j = t->data;
    head_batch();
    j->backoff_over = true;
    restart_check(j);
}

/* A pending restart given up: the job fails or stops instead. */
static void restart_cancel(job_t *j)
{
    if (!j->restart_pending)
        return;
    j->restart_pending = j->backoff_over = false;
    if (j->timer)
        uv_timer_stop(j->timer);
    for (int i = 0; i < j->n; i++)
        j->wk[i].restart_due = false;
}

static void wk_reset(wk_t *w)
{
    free(w->reason);
    w->reason = NULL;
    w->exit_code = w->signal = 0;
    w->pid = 0;
    w->start_time = 0;
}

/* Once the backoff is over and, for a gang, every worker has ended: the
 * workers due are started again on their devices (a gang whose placement
 * went with a node is placed again first). */
static void restart_check(job_t *j)
{
    if (!j->restart_pending || !j->backoff_over)
        return;
    bool gang = j->spec->restart == CORRAL__RESTART_POLICY__RESTART_GANG || j->replace ||
                j->spec->distributed;
    for (int i = 0; i < j->n; i++)
        if (wk_alive(&j->wk[i]) && gang)
            return;
    j->restart_pending = j->backoff_over = false;
    for (int i = 0; i < j->n; i++) {
        wk_t *w = &j->wk[i];
        if (!w->restart_due)
            continue;
        w->attempt++;
        event("restarted", j, "restarted worker %d (attempt %d of %u) after %s, %llu ms later", i,
              j->restarts, j->spec->max_restarts, w->cause,
              (unsigned long long)backoff_ms(j, j->restarts));
    }
    if (j->replace) {
        /* its placement went with a node: queued to be placed again */
        for (int i = 0; i < j->n; i++)
            j->wk[i].restart_due = false;
        release_placement(j);
        job_set_state(j, CR_JOB_PENDING, "placing the gang again: a node of it was lost");
        *CR_VEC_PUSH(&D.pending) = j;
        try_pending();
        return;
    }
    job_set_state(j, CR_JOB_RUNNING, NULL);
    if (j->spec->distributed) { /* a new rendezvous port for every start */
        for (int i = 0; i < j->n; i++)
            j->wk[i].restart_due = false;
        start_workers(j);
        return;
    }
    for (int i = 0; i < j->n && !j->failed; i++) {
        wk_t *w = &j->wk[i];
        if (!w->restart_due)
            continue;
        w->restart_due = false;
        wk_reset(w);
        start_one(j, w);
    }
    job_check_done(j);
}

/* Schedules the restart the job's policy asks for after worker w failed
 * with cause; false when the policy has none left. */
static bool restart_schedule(job_t *j, wk_t *w, const char *cause)
{
    Corral__RestartPolicy pol = j->spec->restart;
    if (pol == CORRAL__RESTART_POLICY__RESTART_NONE || j->failed || j->stopping ||
        D.shutting_down || j->restarts >= (int)j->spec->max_restarts)
        return false;
    bool gang = pol == CORRAL__RESTART_POLICY__RESTART_GANG || j->replace || j->spec->distributed;
    j->restarts++;
    db_check(cr_state_job_set_restarts(D.st, j->id, j->restarts, now_ms()));
    uint64_t delay = backoff_ms(j, j->restarts);
    for (int i = 0; i < j->n; i++) {
        wk_t *x = &j->wk[i];
        if (!gang && x != w)
            continue;
        x->restart_due = true;
        if (x == w)
            snprintf(x->cause, sizeof(x->cause), "%s", cause);
        else
            snprintf(x->cause, sizeof(x->cause), "worker %d's %s", w->index, cause);
        wk_stop(x, j->spec->grace_ms ? j->spec->grace_ms : DEFAULT_GRACE_MS);
    }
    char why[160];
    snprintf(why, sizeof(why), "restarting %s in %llu ms after worker %d's %s",
             gang ? "the gang" : "the worker", (unsigned long long)delay, w->index, cause);
    job_set_state(j, CR_JOB_RUNNING, why);
    if (!j->timer) {
        j->timer = cr_malloc(sizeof(*j->timer));
        uv_timer_init(&D.loop, j->timer);
        j->timer->data = j;
    }
    j->restart_pending = true;
    j->backoff_over = false;
    uv_timer_start(j->timer, on_backoff, delay, 0);
    return true;
}

/* ----------------------------------------------- what the agents report */

/* A worker's exit code as a shell reports it: 128 + the signal that ended it. */
static int exit_code_of(const Corral__WorkerReport *r)
{
    return r->signal ? 128 + r->signal : (int)r->exit_code;
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

void worker_ended(wk_t *w, const Corral__WorkerReport *r)
{
    job_t *j = w->job;
    if ((int)r->attempt != w->attempt || !wk_alive(w))
        return; /* an older attempt's news, or already decided (lost) */
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
    if (failure && j->failed && r->ended_us && r->ended_us < j->fail_us) {
        /* its report came later, but it ended first: the gang failed because of it */
        int code = exit_code_of(r);
        free(j->reason);
        j->reason = r->signal ? cr_asprintf("worker %d ended by signal %d", w->index, r->signal)
                              : cr_asprintf("worker %d exited with code %d", w->index, code);
        j->exit_code = code;
        j->fail_us = r->ended_us;
    }
    if (failure && !in_restart && !j->failed) {
        int code = exit_code_of(r);
        j->fail_us = r->ended_us;
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

static void wk_stop(wk_t *w, uint64_t grace_ms)
{
    if (wk_alive(w))
        node_stop_worker(w, (uint32_t)grace_ms);
}

static void start_one(job_t *j, wk_t *w)
{
    w->state = CORRAL__WORKER_STATE__WORKER_STARTING;
    D.running_workers++;
    db_worker(w);
    node_start_worker(w); /* may report back at once (local agent) */
}

/* Fills each worker's node and devices from the job's placement or group. */
static bool assign(job_t *j)
{
    const sched_placement_t *p = j->placement ? sched_placement_get(D.cluster, j->placement) : NULL;
    for (int i = 0; i < j->n; i++) {
        wk_t *w = &j->wk[i];
        if (j->pg) {
            int b = j->spec->bundle_index >= 0 ? j->spec->bundle_index : i;
            char why[256];
            if (!pg_bundle_take(j->pg, b, j, &w->node, w->devs, &w->ndevs, why, sizeof(why))) {
                for (int k = 0; k < i; k++)
                    if (j->wk[k].bundle >= 0) {
                        pg_bundle_give(j->pg, j->wk[k].bundle, j);
                        j->wk[k].bundle = -1;
                    }
                return false;
            }
            w->bundle = b;
            continue;
        }
        if (!p)
            return false;
        const sched_alloc_t *al = sched__alloc(p, (uint32_t)i);
        w->node = node_of(al->node);
        w->ndevs = sched_alloc_devices(D.cluster, al, w->devs, MAX_DEVS);
        if (w->ndevs > MAX_DEVS)
            w->ndevs = MAX_DEVS;
    }
    return true;
}

static void start_gang_now(job_t *j)
{
    for (int i = 0; i < j->n && !j->failed; i++) {
        wk_reset(&j->wk[i]);
        start_one(j, &j->wk[i]);
    }
    /* workers never started because an earlier one failed */
    for (int i = 0; i < j->n; i++)
        if (j->wk[i].state == CORRAL__WORKER_STATE__WORKER_UNSPECIFIED) {
            j->wk[i].state = CORRAL__WORKER_STATE__WORKER_FAILED;
            j->wk[i].reason = cr_strdup("not started: an earlier worker of the gang failed");
        }
    job_check_done(j);
}

void job_port_ready(job_t *j, uint32_t port, const char *why)
{
    if (!j->port_wait)
        return;
    j->port_wait = false;
    if (!port) {
        job_fail(j, 1, "no rendezvous port on node %s: %s", j->wk[0].node->id,
                 why ? why : "unknown");
        job_check_done(j);
        return;
    }
    j->master_port = port;
    start_gang_now(j);
}

static void start_workers(job_t *j)
{
    job_set_state(j, CR_JOB_RUNNING, NULL);
    if (j->spec->distributed && j->n > 0 && j->wk[0].node) {
        j->port_wait = true;
        node_request_port(j->wk[0].node, j);
        return;
    }
    start_gang_now(j);
}

/* ------------------------------------------------------------- placement */

sched_strategy_t strategy_of(Corral__Strategy s)
{
    switch (s) {
    case CORRAL__STRATEGY__STRATEGY_SPREAD:
        return SCHED_SPREAD_PG;
    case CORRAL__STRATEGY__STRATEGY_STRICT_PACK:
        return SCHED_STRICT_PACK;
    case CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD:
        return SCHED_STRICT_SPREAD;
    default:
        return SCHED_PACK;
    }
}

/* RETRY keeps the job pending; INFEASIBLE is refused before it gets here
 * (or fails a job that waited). */
static sched_status_t place(job_t *j, char *reason, size_t size)
{
    reason[0] = '\0';
    if (j->pg) {
        if (!pg_created(j->pg)) {
            snprintf(reason, size, "placement group %s is not created yet", pg_name(j->pg));
            return SCHED_RETRY;
        }
        if (!assign(j)) {
            snprintf(reason, size, "the bundles of placement group %s are in use",
                     pg_name(j->pg));
            return SCHED_RETRY;
        }
        return SCHED_OK;
    }
    sched_status_t st = schedule_bundles((uint32_t)j->n, j->bundles, j->spec->strategy,
                                         j->spec->domain, &j->placement, reason, size);
    if (st == SCHED_OK)
        assign(j);
    return st;
}

sched_status_t schedule_bundles(uint32_t n, sched_bundle_t *bundles, Corral__Strategy strategy,
                                const char *domain, uint64_t *placement, char *why, size_t size)
{
    int key = -1;
    if (domain && domain[0]) {
        key = sched_syms_find(&D.cluster->labels, domain, strlen(domain));
        if (key < 0) {
            snprintf(why, size, "no node has the label %s", domain);
            return SCHED_INFEASIBLE;
        }
    }
    sched_request_t r = {.nbundles = n,
                         .bundles = bundles,
                         .policy = SCHED_HYBRID,
                         .strategy = strategy_of(strategy),
                         .domain_key = key,
                         .affinity_node = -1};
    sched_result_t res;
    int err = sched_schedule(D.cluster, &D.scfg, &r, &D.rng, &res);
    if (err < 0) {
        snprintf(why, size, "scheduler error: %s", cr_strerror(err));
        return SCHED_INFEASIBLE;
    }
    if (res.status == SCHED_OK)
        *placement = res.placement;
    snprintf(why, size, "%s", res.reason);
    return res.status;
}

static void placed(job_t *j)
{
    cr_buf_t where = {0};
    for (int i = 0; i < j->n; i++) {
        const char *id = j->wk[i].node ? j->wk[i].node->id : "?";
        if (i == 0 || strcmp(id, j->wk[i - 1].node ? j->wk[i - 1].node->id : "?"))
            cr_buf_printf(&where, "%s%s", i ? "," : "", id);
    }
    event("placed", j, "%d worker(s) on %s%s%s", j->n, where.s ? where.s : "?",
          j->pg ? " in group " : "", j->pg ? pg_name(j->pg) : "");
    cr_buf_free(&where);
    j->replace = false;
    start_workers(j);
}

void try_pending(void)
{
    size_t keep = 0;
    for (size_t i = 0; i < D.pending.n; i++) {
        job_t *j = D.pending.v[i];
        char why[256];
        if (D.shutting_down || j->stopping || j->failed) {
            D.pending.v[keep++] = j;
            continue;
        }
        sched_status_t st = place(j, why, sizeof(why));
        if (st == SCHED_RETRY) {
            D.pending.v[keep++] = j;
            continue;
        }
        if (st == SCHED_INFEASIBLE) {
            j->replace = false;
            job_fail(j, 1, "cannot be placed any more: %s", why);
            job_check_done(j);
            continue;
        }
        placed(j);
    }
    D.pending.n = keep;
}

static void remove_pending(job_t *j)
{
    for (size_t i = 0; i < D.pending.n; i++)
        if (D.pending.v[i] == j) {
            memmove(&D.pending.v[i], &D.pending.v[i + 1],
                    (D.pending.n - i - 1) * sizeof(*D.pending.v));
            D.pending.n--;
            return;
        }
}

/* Parses a worker's resources into one bundle request; CR_EINFEASIBLE
 * with why for names no node has. */
int build_request(const Corral__WorkerSpec *ws, sched_resreq_t *req, char *why, size_t size)
{
    memset(req, 0, sizeof(*req));
    sched_cluster_sync(D.cluster); /* resources of nodes that joined since */
    if (ws->n_resources > SCHED_REQ_MAX) {
        snprintf(why, size, "at most %d resources per worker", SCHED_REQ_MAX);
        return CR_EINVAL;
    }
    for (size_t i = 0; i < ws->n_resources; i++) {
        const Corral__Quantity *q = ws->resources[i];
        int rid = sched_syms_find(&D.cluster->res, q->name, strlen(q->name));
        if (rid < 0 || rid >= D.cluster->nres) {
            snprintf(why, size, "no node has resource %s", q->name);
            return CR_EINFEASIBLE;
        }
        if (q->amount <= 0) {
            snprintf(why, size, "resource %s: amount must be positive", q->name);
            return CR_EINVAL;
        }
        if (sched_check_unit_qty(rid, q->amount, why, size) < 0)
            return CR_EINVAL;
        for (int k = 0; k < req->n; k++)
            if (req->id[k] == rid) {
                snprintf(why, size, "resource %s is named twice", q->name);
                return CR_EINVAL;
            }
        req->id[req->n] = (uint8_t)rid;
        req->qty[req->n++] = q->amount;
    }
    if (req->n == 0) { /* nothing asked: one CPU, so the worker counts */
        int rid = sched_syms_find(&D.cluster->res, "CPU", 3);
        if (rid >= 0 && rid < D.cluster->nres) {
            req->id[0] = (uint8_t)rid;
            req->qty[0] = CR_QTY_ONE;
            req->n = 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ jobs */

static void free_handle(uv_handle_t *h)
{
    free(h);
}

static void job_free(job_t *j)
{
    for (int i = 0; j->wk && i < j->n; i++) {
        free(j->wk[i].reason);
        free(j->wk[i].out_path);
        free(j->wk[i].err_path);
    }
    free(j->wk);
    if (j->timer) /* its memory goes in the close callback */
        uv_close((uv_handle_t *)j->timer, free_handle);
    free(j->bundles);
    free(j->name);
    free(j->reason);
    if (j->spec)
        corral__job_spec__free_unpacked(j->spec, NULL);
    free(j);
}

void jobs_free(void)
{
    for (size_t i = 0; i < D.jobs.n; i++)
        job_free(D.jobs.v[i]);
    CR_VEC_FREE(&D.jobs);
    CR_VEC_FREE(&D.pending);
}

job_t *job_find(const char *id)
{
    for (size_t i = 0; i < D.jobs.n; i++)
        if (strcmp(D.jobs.v[i]->idstr, id) == 0)
            return D.jobs.v[i];
    return NULL;
}

static char *spec_json(const Corral__JobSpec *s)
{
    json_t *o = json_object(), *argv = json_array(), *res = json_object();
    for (size_t i = 0; i < s->worker->n_argv; i++)
        json_array_append_new(argv, json_string(s->worker->argv[i]));
    for (size_t i = 0; i < s->worker->n_resources; i++)
        json_object_set_new(res, s->worker->resources[i]->name,
                            json_integer(s->worker->resources[i]->amount));
    json_object_set_new(o, "argv", argv);
    json_object_set_new(o, "resources", res);
    json_object_set_new(o, "num_workers", json_integer(s->num_workers ? s->num_workers : 1));
    /* the whole spec, packed, in hex: what a restarted head reads back */
    size_t len = corral__job_spec__get_packed_size(s);
    uint8_t *pb = cr_malloc(len ? len : 1);
    corral__job_spec__pack(s, pb);
    char *hex = cr_malloc(2 * len + 1);
    cr_hex_encode(pb, len, hex);
    json_object_set_new(o, "pb", json_string(hex));
    free(hex);
    free(pb);
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out;
}

static const cr_restart_policy_t restart_policy_db[] = {
    [CORRAL__RESTART_POLICY__RESTART_NONE] = CR_RESTART_NONE,
    [CORRAL__RESTART_POLICY__RESTART_WORKER] = CR_RESTART_WORKER,
    [CORRAL__RESTART_POLICY__RESTART_GANG] = CR_RESTART_GANG,
};

/* The job's bundles (one per worker) from its spec; CR_EINVAL or
 * CR_EINFEASIBLE with why. */
static int job_bundles(job_t *j, char *why, size_t size)
{
    const Corral__JobSpec *s = j->spec;
    sched_resreq_t req;
    int err = build_request(s->worker, &req, why, size);
    if (err < 0)
        return err;
    sched_selector_t sel = {0};
    if (s->selector && s->selector[0]) {
        sched_err_t se;
        if (sched_parse_selector(&D.cluster->labels, s->selector, &sel, &se) < 0) {
            snprintf(why, size, "label selector '%s': %s", s->selector, se.msg);
            return CR_EINVAL;
        }
    }
    j->bundles = cr_calloc((size_t)j->n, sizeof(*j->bundles));
    for (int i = 0; i < j->n; i++) {
        j->bundles[i].req = req;
        j->bundles[i].sel = sel;
    }
    return 0;
}

static job_t *job_new(const Corral__JobSpec *s)
{
    job_t *j = cr_calloc(1, sizeof(*j));
    j->n = s->num_workers ? (int)s->num_workers : 1;
    /* a private copy of the spec outlives the borrowed envelope */
    size_t len = corral__job_spec__get_packed_size(s);
    uint8_t *buf = cr_malloc(len ? len : 1);
    corral__job_spec__pack(s, buf);
    j->spec = corral__job_spec__unpack(NULL, len, buf);
    free(buf);
    j->name = cr_strdup(s->name && s->name[0] ? s->name : s->worker->argv[0]);
    return j;
}

static void job_workers(job_t *j)
{
    j->wk = cr_calloc((size_t)j->n, sizeof(*j->wk));
    for (int i = 0; i < j->n; i++) {
        wk_t *w = &j->wk[i];
        w->job = j;
        w->index = i;
        w->bundle = -1;
        snprintf(w->id, sizeof(w->id), "job%s-w%d", j->idstr, i);
    }
}

static void h_submit(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__JobSpec *s = e->job_submit->spec;
    char why[256] = "";
    if (D.shutting_down) {
        cr_conn_reply_error(c, e->id, CR_EAGAIN, "the head is shutting down");
        return;
    }
    if ((unsigned)s->restart >= CR_ARRAY_SIZE(restart_policy_db) || s->max_restarts > 1000) {
        cr_conn_reply_error(c, e->id, CR_EINVAL,
                            "restart policy %d, max_restarts %u: expected a policy of 0 to 2 "
                            "and at most 1000 restarts",
                            (int)s->restart, s->max_restarts);
        return;
    }
    if ((unsigned)s->strategy > CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD) {
        cr_conn_reply_error(c, e->id, CR_EINVAL, "strategy %d: expected 0 to 3", (int)s->strategy);
        return;
    }
    job_t *j = job_new(s);
    if (s->placement_group && s->placement_group[0]) {
        j->pg = pg_find(s->placement_group);
        if (!j->pg) {
            cr_conn_reply_error(c, e->id, CR_ENOENT,
                                "no placement group %s (corral pg list shows them)",
                                s->placement_group);
            job_free(j);
            return;
        }
        int nb = pg_nbundles(j->pg);
        if (s->bundle_index >= nb || (s->bundle_index < 0 && j->n > nb) ||
            (s->bundle_index >= 0 && j->n > 1)) {
            cr_conn_reply_error(
                c, e->id, CR_EINVAL,
                "placement group %s has %d bundle(s): bundle %d for %d worker(s) does not fit "
                "(one worker per bundle; --bundle I runs one worker in bundle I, no --bundle "
                "runs worker i in bundle i)",
                pg_name(j->pg), nb, s->bundle_index, j->n);
            job_free(j);
            return;
        }
    } else {
        int err = job_bundles(j, why, sizeof(why));
        if (err < 0) {
            event("refused", NULL, "%s", why);
            cr_conn_reply_error(c, e->id, err, "%s", why);
            job_free(j);
            return;
        }
    }
    j->submitted_ms = now_ms();
    j->id = 0;
    snprintf(j->idstr, sizeof(j->idstr), "new");
    job_workers(j);

    char reason[256];
    sched_status_t st = place(j, reason, sizeof(reason));
    if (st == SCHED_INFEASIBLE) {
        event("infeasible", NULL, "%s: %s", j->name, reason);
        cr_conn_reply_error(c, e->id, CR_EINFEASIBLE, "cannot place %d worker(s): %s", j->n,
                            reason);
        release_placement(j);
        job_free(j);
        return;
    }
    char *sj = spec_json(s);
    cr_state_job_t row = {.name = j->name,
                          .spec_json = sj,
                          .state = CR_JOB_PENDING,
                          .restart_policy = restart_policy_db[s->restart],
                          .max_restarts = (int)s->max_restarts};
    int err = cr_state_begin(D.st);
    if (err == 0)
        err = cr_state_job_create(D.st, &row, j->submitted_ms, &j->id);
    free(sj);
    if (err == 0) {
        snprintf(j->idstr, sizeof(j->idstr), "%lld", (long long)j->id);
        for (int i = 0; i < j->n; i++) {
            snprintf(j->wk[i].id, sizeof(j->wk[i].id), "job%s-w%d", j->idstr, i);
            cr_state_worker_t wr = {.job_id = j->id, .index = i, .state = CR_WORKER_PENDING};
            db_check(cr_state_worker_create(D.st, &wr, j->submitted_ms));
        }
        err = cr_state_commit(D.st);
    }
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "cannot record the job: %s", cr_state_errmsg(D.st));
        release_placement(j);
        job_free(j);
        return;
    }
    *CR_VEC_PUSH(&D.jobs) = j;
    event("submitted", j, "%s: %d worker(s) of %s", j->name, j->n, s->worker->argv[0]);

    Corral__JobSubmitted r = CORRAL__JOB_SUBMITTED__INIT;
    r.job_id = j->idstr;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMITTED;
    a.job_submitted = &r;
    reply(c, e, &a);

    if (st == SCHED_OK) {
        placed(j);
    } else {
        event("pending", j, "%s", reason);
        job_set_state(j, CR_JOB_PENDING, reason);
        *CR_VEC_PUSH(&D.pending) = j;
    }
}

static const Corral__JobState job_state_proto[] = {
    [CR_JOB_PENDING] = CORRAL__JOB_STATE__JOB_PENDING,
    [CR_JOB_PLACING] = CORRAL__JOB_STATE__JOB_PLACING,
    [CR_JOB_RUNNING] = CORRAL__JOB_STATE__JOB_RUNNING,
    [CR_JOB_SUCCEEDED] = CORRAL__JOB_STATE__JOB_SUCCEEDED,
    [CR_JOB_FAILED] = CORRAL__JOB_STATE__JOB_FAILED,
    [CR_JOB_STOPPED] = CORRAL__JOB_STATE__JOB_STOPPED,
};

/* Fills info from j; the pointers borrow j's memory, the arrays are
 * malloc'ed and released with info_fini. */
typedef struct info_mem {
    Corral__WorkerStatus *ws;
    Corral__WorkerStatus **wsp;
    uint32_t *devs;
} info_mem_t;

static void info_fill(const job_t *j, Corral__JobInfo *info, info_mem_t *m)
{
    corral__job_info__init(info);
    info->job_id = (char *)j->idstr;
    info->name = j->name;
    info->state = job_state_proto[j->state];
    info->reason = j->reason ? j->reason : "";
    info->exit_code = j->exit_code;
    info->submitted_ms = j->submitted_ms;
    info->finished_ms = j->finished_ms;
    info->restarts = (uint32_t)j->restarts;
    info->spec = j->spec;
    m->ws = cr_calloc((size_t)j->n, sizeof(*m->ws));
    m->wsp = cr_calloc((size_t)j->n, sizeof(*m->wsp));
    m->devs = cr_calloc((size_t)j->n * MAX_DEVS + 1, sizeof(*m->devs));
    for (int i = 0; i < j->n; i++) {
        const wk_t *w = &j->wk[i];
        Corral__WorkerStatus *s = &m->ws[i];
        corral__worker_status__init(s);
        s->worker_id = (char *)w->id;
        s->worker_index = (uint32_t)i;
        s->node_id = w->node ? w->node->id : "";
        s->state = w->state;
        s->pid = w->pid;
        s->exit_code = w->exit_code;
        s->signal = w->signal;
        s->attempt = (uint32_t)w->attempt;
        s->reason = w->reason ? w->reason : "";
        s->devices = &m->devs[(size_t)i * MAX_DEVS];
        for (size_t k = 0; k < w->ndevs; k++)
            s->devices[k] = (uint32_t)w->devs[k];
        s->n_devices = w->ndevs;
        m->wsp[i] = s;
    }
    info->workers = m->wsp;
    info->n_workers = (size_t)j->n;
}

static void info_fini(info_mem_t *m)
{
    free(m->ws);
    free(m->wsp);
    free(m->devs);
}

/* The JobInfo answer to request id; also a parked JobStatus's answer
 * (daemon/waiters.c), key being the job. */
static void send_job_info(cr_conn_t *c, uint64_t id, void *key)
{
    const job_t *j = key;
    Corral__JobInfo info;
    info_mem_t m;
    info_fill(j, &info, &m);
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_JOB_INFO;
    a.job_info = &info;
    a.reply_to = id;
    int err = cr_conn_send(c, &a);
    if (err < 0)
        cr_warn("reply to %s: %s", cr_conn_peer(c), cr_strerror(err));
    info_fini(&m);
}

#define MAX_STATUS_WAIT_MS 30000 /* under the client's CORRAL_CALL_TIMEOUT_MS */

static void h_job_status(cr_conn_t *c, const Corral__Envelope *e)
{
    job_t *j = job_find(e->job_status->job_id);
    if (!j) {
        cr_conn_reply_error(c, e->id, CR_ENOENT, "no job %s", e->job_status->job_id);
        return;
    }
    uint32_t wait = e->job_status->wait_ms;
    if (wait && !cr_job_state_is_final(j->state)) { /* answered by job_check_done */
        cr_waiters_add(&D.loop, c, e->id, j, wait < MAX_STATUS_WAIT_MS ? wait : MAX_STATUS_WAIT_MS,
                       send_job_info);
        return;
    }
    send_job_info(c, e->id, j);
}

static void h_job_list(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__JobList *q = e->job_list;
    size_t n = D.jobs.n;
    Corral__JobInfo *infos = cr_calloc(n + 1, sizeof(*infos));
    Corral__JobInfo **ptrs = cr_calloc(n + 1, sizeof(*ptrs));
    info_mem_t *mem = cr_calloc(n + 1, sizeof(*mem));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const job_t *j = D.jobs.v[i];
        bool want = q->n_states == 0;
        for (size_t s = 0; s < q->n_states; s++)
            want |= q->states[s] == job_state_proto[j->state];
        if (!want)
            continue;
        info_fill(j, &infos[k], &mem[k]);
        infos[k].spec = NULL; /* listings stay small */
        ptrs[k] = &infos[k];
        k++;
    }
    size_t first = q->limit && k > q->limit ? k - q->limit : 0; /* the newest */
    Corral__JobListReply r = CORRAL__JOB_LIST_REPLY__INIT;
    r.jobs = ptrs + first;
    r.n_jobs = k - first;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_JOB_LIST_REPLY;
    a.job_list_reply = &r;
    reply(c, e, &a);
    for (size_t i = 0; i < k; i++)
        info_fini(&mem[i]);
    free(mem);
    free(ptrs);
    free(infos);
}

void job_stop(job_t *j, uint32_t grace_ms)
{
    if (cr_job_state_is_final(j->state))
        return;
    j->stopping = true;
    j->port_wait = false;
    restart_cancel(j);
    remove_pending(j);
    j->replace = false;
    for (int i = 0; i < j->n; i++) {
        wk_t *w = &j->wk[i];
        if (wk_alive(w))
            wk_stop(w, grace_ms);
        else if (w->state == CORRAL__WORKER_STATE__WORKER_UNSPECIFIED)
            w->state = CORRAL__WORKER_STATE__WORKER_STOPPED;
    }
    event("stopping", j, "SIGTERM, then SIGKILL after %u ms", grace_ms);
    job_check_done(j);
}

static void h_job_stop(cr_conn_t *c, const Corral__Envelope *e)
{
    job_t *j = job_find(e->job_stop->job_id);
    if (!j) {
        cr_conn_reply_error(c, e->id, CR_ENOENT, "no job %s", e->job_stop->job_id);
        return;
    }
    uint32_t grace = e->job_stop->grace_ms ? e->job_stop->grace_ms
                     : j->spec->grace_ms   ? j->spec->grace_ms
                                           : DEFAULT_GRACE_MS;
    job_stop(j, grace);
    reply_ack(c, e);
}

/* Sends one log file (its last LOG_MAX bytes) as chunks. */
static void send_log(cr_conn_t *c, const Corral__Envelope *e, const job_t *j, const wk_t *w,
                     const char *path, Corral__LogStream stream)
{
    if (!path)
        return;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return;
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    long start = size > (long)LOG_MAX ? size - (long)LOG_MAX : 0;
    fseek(fp, start, SEEK_SET);
    uint8_t *buf = cr_malloc(LOG_CHUNK);
    size_t got;
    uint64_t off = (uint64_t)start;
    while ((got = fread(buf, 1, LOG_CHUNK, fp)) > 0) {
        Corral__LogChunk ch = CORRAL__LOG_CHUNK__INIT;
        ch.job_id = (char *)j->idstr;
        ch.worker_index = (uint32_t)w->index;
        ch.stream = stream;
        ch.offset = off;
        ch.data.data = buf;
        ch.data.len = got;
        off += got;
        Corral__Envelope a = CORRAL__ENVELOPE__INIT;
        a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
        a.log_chunk = &ch;
        reply(c, e, &a);
    }
    free(buf);
    fclose(fp);
}

static void h_job_logs(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__JobLogs *q = e->job_logs;
    job_t *j = job_find(q->job_id);
    if (!j) {
        cr_conn_reply_error(c, e->id, CR_ENOENT, "no job %s", q->job_id);
        return;
    }
    if (q->worker_index >= j->n) {
        cr_conn_reply_error(c, e->id, CR_EINVAL, "job %s has %d worker(s): no worker %d",
                            j->idstr, j->n, q->worker_index);
        return;
    }
    if (q->follow) { /* daemon/follow.c answers from here on, eof included */
        if (follow_add(c, e->id, j->idstr, q->worker_index, q->offset) < 0)
            cr_conn_reply_error(c, e->id, CR_ENOENT, "no job %s", q->job_id);
        return;
    }
    for (int i = 0; i < j->n; i++) {
        if (q->worker_index >= 0 && q->worker_index != i)
            continue;
        send_log(c, e, j, &j->wk[i], j->wk[i].out_path, CORRAL__LOG_STREAM__LOG_STDOUT);
        send_log(c, e, j, &j->wk[i], j->wk[i].err_path, CORRAL__LOG_STREAM__LOG_STDERR);
    }
    Corral__LogChunk end = CORRAL__LOG_CHUNK__INIT;
    end.job_id = j->idstr;
    end.eof = true;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
    a.log_chunk = &end;
    reply(c, e, &a);
}

/* ---------------------------------------------------------- status, nodes */

static void h_status(cr_conn_t *c, const Corral__Envelope *e)
{
    sched_cluster_sync(D.cluster);
    size_t n = D.nodes.n;
    Corral__NodeInfo *ni = cr_calloc(n + 1, sizeof(*ni));
    Corral__NodeInfo **nip = cr_calloc(n + 1, sizeof(*nip));
    void **mem = cr_calloc(n + 1, sizeof(*mem));
    for (size_t i = 0; i < n; i++) {
        node_fill(D.nodes.v[i], &ni[i], &mem[i], false);
        nip[i] = &ni[i];
    }
    /* cluster totals over alive nodes */
    const sched_cluster_t *cl = D.cluster;
    size_t nres = (size_t)cl->nres;
    Corral__Quantity *q = cr_calloc(2 * nres + 1, sizeof(*q));
    Corral__Quantity **tot = cr_calloc(nres + 1, sizeof(*tot)), **fr = cr_calloc(nres + 1, sizeof(*fr));
    size_t k = 0;
    for (size_t r = 0; r < nres; r++) {
        int64_t t = 0, f = 0;
        for (size_t x = 0; x < n; x++) {
            const node_t *nd = D.nodes.v[x];
            if (nd->state == CORRAL__NODE_STATE__NODE_DEAD || nd->waiting)
                continue;
            t += cl->total[r * cl->nnodes + (size_t)nd->sn];
            f += cl->avail[r * cl->nnodes + (size_t)nd->sn];
        }
        if (t <= 0)
            continue;
        corral__quantity__init(&q[2 * k]);
        corral__quantity__init(&q[2 * k + 1]);
        q[2 * k].name = q[2 * k + 1].name = cl->res.str[r];
        q[2 * k].amount = t;
        q[2 * k + 1].amount = f;
        tot[k] = &q[2 * k];
        fr[k] = &q[2 * k + 1];
        k++;
    }
    Corral__ClusterStatus s = CORRAL__CLUSTER_STATUS__INIT;
    s.head_address = D.address;
    s.nodes = nip;
    s.n_nodes = n;
    s.total = tot;
    s.n_total = k;
    s.free = fr;
    s.n_free = k;
    for (size_t i = 0; i < D.jobs.n; i++) {
        s.pending_jobs += D.jobs.v[i]->state == CR_JOB_PENDING;
        s.running_jobs += D.jobs.v[i]->state == CR_JOB_RUNNING;
    }
    s.pending_groups = (uint32_t)pgs_pending();
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_CLUSTER_STATUS;
    a.cluster_status = &s;
    reply(c, e, &a);
    for (size_t i = 0; i < n; i++)
        node_fill_free(&ni[i], mem[i]);
    free(q);
    free(tot);
    free(fr);
    free(mem);
    free(nip);
    free(ni);
}

static void h_node_list(cr_conn_t *c, const Corral__Envelope *e)
{
    sched_cluster_sync(D.cluster);
    size_t n = D.nodes.n;
    Corral__NodeInfo *ni = cr_calloc(n + 1, sizeof(*ni));
    Corral__NodeInfo **nip = cr_calloc(n + 1, sizeof(*nip));
    void **mem = cr_calloc(n + 1, sizeof(*mem));
    for (size_t i = 0; i < n; i++) {
        node_fill(D.nodes.v[i], &ni[i], &mem[i], e->node_list->with_json);
        nip[i] = &ni[i];
    }
    Corral__NodeListReply r = CORRAL__NODE_LIST_REPLY__INIT;
    r.nodes = nip;
    r.n_nodes = n;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_NODE_LIST_REPLY;
    a.node_list_reply = &r;
    reply(c, e, &a);
    for (size_t i = 0; i < n; i++)
        node_fill_free(&ni[i], mem[i]);
    free(mem);
    free(nip);
    free(ni);
}

static void h_events(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__EventsRequest *q = e->events_request;
    cr_state_event_t *v = NULL;
    size_t n = 0;
    int err = cr_state_event_list(D.st, (int64_t)q->since_seq, 0, &v, &n);
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "%s", cr_state_errmsg(D.st));
        return;
    }
    size_t first = q->limit && n > q->limit ? n - q->limit : 0; /* the newest */
    Corral__Event *evs = cr_calloc(n + 1, sizeof(*evs));
    Corral__Event **p = cr_calloc(n + 1, sizeof(*p));
    char(*ids)[24] = cr_calloc(n + 1, sizeof(*ids));
    for (size_t i = first; i < n; i++) {
        Corral__Event *ev = &evs[i - first];
        corral__event__init(ev);
        ev->seq = (uint64_t)v[i].id;
        ev->time_ms = v[i].time_ms;
        ev->kind = v[i].kind;
        if (v[i].job_id)
            snprintf(ids[i], sizeof(ids[i]), "%lld", (long long)v[i].job_id);
        ev->job_id = ids[i];
        ev->node_id = v[i].node_id ? v[i].node_id : "";
        ev->message = v[i].message ? v[i].message : "";
        p[i - first] = ev;
    }
    Corral__EventList r = CORRAL__EVENT_LIST__INIT;
    r.events = p;
    r.n_events = n - first;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_EVENT_LIST;
    a.event_list = &r;
    reply(c, e, &a);
    if (q->follow) /* then each new event, pushed by daemon/follow.c */
        follow_events_add(c, e->id, n ? (uint64_t)v[n - 1].id : q->since_seq);
    free(ids);
    free(p);
    free(evs);
    cr_state_event_list_free(v, n);
}

/* ------------------------------------- following logs and events (follow.c) */

static int fo_nworkers(void *arg, const char *job_id)
{
    const job_t *j = job_find(job_id);
    return j ? j->n : -1;
}

static void fo_paths(void *arg, const char *job_id, int i, const char **out, const char **err)
{
    const job_t *j = job_find(job_id);
    *out = *err = NULL;
    if (j && i >= 0 && i < j->n) {
        *out = j->wk[i].out_path;
        *err = j->wk[i].err_path;
    }
}

static bool fo_is_final(void *arg, const char *job_id)
{
    const job_t *j = job_find(job_id);
    return !j || cr_job_state_is_final(j->state);
}

static size_t fo_events_since(void *arg, uint64_t since_seq,
                              void (*emit)(void *ctx, const Corral__Event *ev), void *ctx)
{
    cr_state_event_t *v = NULL;
    size_t n = 0;
    if (cr_state_event_list(D.st, (int64_t)since_seq, 0, &v, &n) < 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char id[24] = "";
        if (v[i].job_id)
            snprintf(id, sizeof(id), "%lld", (long long)v[i].job_id);
        Corral__Event ev = CORRAL__EVENT__INIT;
        ev.seq = (uint64_t)v[i].id;
        ev.time_ms = v[i].time_ms;
        ev.kind = v[i].kind;
        ev.job_id = id;
        ev.node_id = v[i].node_id ? v[i].node_id : "";
        ev.message = v[i].message ? v[i].message : "";
        emit(ctx, &ev);
    }
    cr_state_event_list_free(v, n);
    return n;
}

const follow_ops_t head_follow_ops = {.nworkers = fo_nworkers,
                                        .paths = fo_paths,
                                        .is_final = fo_is_final,
                                        .events_since = fo_events_since};



/* -------------------------------------------------------------- recovery */

/* The spec stored by spec_json ("pb": the packed spec in hex); NULL when
 * it is missing or damaged. */
static Corral__JobSpec *spec_load(const char *sj)
{
    json_t *o = sj ? json_loads(sj, 0, NULL) : NULL;
    const char *hex = json_string_value(json_object_get(o, "pb"));
    Corral__JobSpec *spec = NULL;
    size_t len = hex ? strlen(hex) / 2 : 0;
    uint8_t *pb = cr_malloc(len + 1);
    if (hex && cr_hex_decode(hex, strlen(hex), pb))
        spec = corral__job_spec__unpack(NULL, len, pb);
    if (spec && (!spec->worker || spec->worker->n_argv == 0)) {
        corral__job_spec__free_unpacked(spec, NULL);
        spec = NULL;
    }
    free(pb);
    json_decref(o);
    return spec;
}

static const Corral__WorkerState worker_state_proto[] = {
    [CR_WORKER_PENDING] = CORRAL__WORKER_STATE__WORKER_UNSPECIFIED,
    [CR_WORKER_STARTING] = CORRAL__WORKER_STATE__WORKER_STARTING,
    [CR_WORKER_RUNNING] = CORRAL__WORKER_STATE__WORKER_RUNNING,
    [CR_WORKER_EXITED] = CORRAL__WORKER_STATE__WORKER_EXITED,
    [CR_WORKER_STOPPED] = CORRAL__WORKER_STATE__WORKER_STOPPED,
    [CR_WORKER_LOST] = CORRAL__WORKER_STATE__WORKER_LOST,
};

/* A job as state.db has it, workers included; NULL when its spec cannot
 * be read (an active one is then failed in the database). */
static job_t *job_load(const cr_state_job_t *r)
{
    Corral__JobSpec *spec = spec_load(r->spec_json);
    if (!spec) {
        cr_warn("state: job %lld: its spec cannot be read back; left out", (long long)r->id);
        if (!cr_job_state_is_final(r->state))
            db_check(cr_state_job_set_state(D.st, r->id, CR_JOB_FAILED,
                                            "lost in a head restart: its spec could not be read",
                                            now_ms()));
        return NULL;
    }
    job_t *j = cr_calloc(1, sizeof(*j));
    j->spec = spec;
    j->id = r->id;
    snprintf(j->idstr, sizeof(j->idstr), "%lld", (long long)r->id);
    j->name = cr_strdup(r->name ? r->name : spec->worker->argv[0]);
    j->state = r->state;
    j->reason = r->reason ? cr_strdup(r->reason) : NULL;
    j->restarts = r->restarts;
    j->submitted_ms = r->created_ms;
    j->finished_ms = cr_job_state_is_final(r->state) ? r->updated_ms : 0;
    j->n = spec->num_workers ? (int)spec->num_workers : 1;
    if (spec->placement_group && spec->placement_group[0])
        j->pg = pg_find(spec->placement_group);
    char why[256];
    if (!j->pg && job_bundles(j, why, sizeof(why)) < 0)
        j->bundles = cr_calloc((size_t)j->n, sizeof(*j->bundles));
    job_workers(j);
    cr_state_worker_t *v = NULL;
    size_t n = 0;
    db_check(cr_state_worker_list(D.st, j->id, NULL, &v, &n));
    for (size_t k = 0; k < n; k++) {
        if (v[k].index < 0 || v[k].index >= j->n)
            continue;
        wk_t *w = &j->wk[v[k].index];
        w->state = worker_state_proto[v[k].state];
        w->node = v[k].node_id ? node_by_id(v[k].node_id) : NULL;
        w->pid = v[k].pid;
        w->start_time = v[k].start_time;
        w->exit_code = v[k].exit_code;
        w->signal = v[k].exit_signal;
        w->attempt = v[k].restarts;
        w->out_path = v[k].stdout_path ? cr_strdup(v[k].stdout_path) : NULL;
        w->err_path = v[k].stderr_path ? cr_strdup(v[k].stderr_path) : NULL;
        w->ndevs = devs_parse(v[k].devices, w->devs);
        if (w->exit_code && w->state == CORRAL__WORKER_STATE__WORKER_EXITED && !j->exit_code)
            j->exit_code = w->exit_code;
        if (w->signal && !j->exit_code)
            j->exit_code = 128 + w->signal;
    }
    cr_state_worker_list_free(v, n);
    if (j->state == CR_JOB_SUCCEEDED)
        j->exit_code = 0;
    else if (j->state == CR_JOB_STOPPED)
        j->exit_code = 143;
    else if (j->state == CR_JOB_FAILED && !j->exit_code)
        j->exit_code = 1;
    return j;
}

/* The job's resources again, where its workers run. */
static void job_retake(job_t *j)
{
    if (j->pg) {
        for (int i = 0; i < j->n; i++) {
            wk_t *w = &j->wk[i];
            if (!wk_alive(w))
                continue;
            int b = j->spec->bundle_index >= 0 ? j->spec->bundle_index : i;
            node_t *nd;
            int devs[MAX_DEVS];
            size_t nds;
            char why[256];
            if (pg_bundle_take(j->pg, b, j, &nd, devs, &nds, why, sizeof(why)))
                w->bundle = b;
            else
                event("warning", j, "worker %d: bundle %d cannot be held again: %s", i, b, why);
        }
        return;
    }
    sched_exact_t *x = cr_calloc((size_t)j->n, sizeof(*x));
    bool all = true;
    for (int i = 0; i < j->n; i++) {
        const wk_t *w = &j->wk[i];
        if (!w->node) {
            all = false;
            break;
        }
        x[i].node = w->node->sn;
        x[i].req = j->bundles[i].req;
        x[i].devs = w->devs;
        x[i].ndevs = w->ndevs;
    }
    int err = all ? sched_take_exact(D.cluster, (uint32_t)j->n, x, &j->placement) : CR_EINVAL;
    free(x);
    if (err < 0)
        event("warning", j,
              "the resources its workers hold cannot be reserved again (%s): the scheduler may "
              "place other work on them",
              cr_strerror(err));
}

/* A job that was running: each worker recorded running on this node is
 * adopted when its pid still names the same process (same start time),
 * else lost; one on another node waits for that node's agent to come back
 * (nodes.c reconciles it, or the node is declared dead). Lost workers go
 * through the job's restart policy. */
static void job_recover(job_t *j)
{
    int adopted = 0, waiting = 0;
    const char *lost_why[64] = {0};
    for (int i = 0; i < j->n; i++) {
        wk_t *w = &j->wk[i];
        const char *gone = NULL;
        if (w->state == CORRAL__WORKER_STATE__WORKER_UNSPECIFIED) {
            gone = "it had not been started";
        } else if (wk_alive(w)) {
            if (!w->node) {
                gone = "its node is unknown";
            } else if (!w->node->local) {
                waiting++;
                continue;
            } else {
                char state = 0;
                int64_t st = w->pid > 0 ? agent_proc_stat(w->pid, &state) : 0;
                Corral__WorkerReport r = CORRAL__WORKER_REPORT__INIT;
                r.worker_id = w->id;
                r.job_id = j->idstr;
                r.worker_index = (uint32_t)i;
                r.attempt = (uint32_t)w->attempt;
                r.pid = w->pid;
                if (st == 0 || state == 'Z')
                    gone = "its process is gone";
                else if (st != w->start_time)
                    gone = "its pid now names another process";
                else if (!agent_adopt(D.agent, &r, w->start_time, w->out_path, w->err_path))
                    gone = "its process is gone";
            }
        } else {
            continue;
        }
        if (gone) {
            if (i < 64)
                lost_why[i] = gone;
        } else {
            adopted++;
            w->state = CORRAL__WORKER_STATE__WORKER_RUNNING;
            event("adopted", j, "adopted worker %d (pid %d)", i, w->pid);
        }
    }
    for (int i = 0; i < j->n; i++)
        if (wk_alive(&j->wk[i]))
            D.running_workers++;
    if (adopted || waiting)
        job_retake(j);
    if (adopted && !j->failed)
        job_set_state(j, CR_JOB_RUNNING,
                      waiting ? "adopted after a head restart; waiting for agents"
                              : "adopted after a head restart");
    for (int i = 0; i < j->n && i < 64; i++) {
        if (!lost_why[i])
            continue;
        wk_t *w = &j->wk[i];
        if (w->state == CORRAL__WORKER_STATE__WORKER_UNSPECIFIED) {
            /* a gang that was never fully started: restarted or failed whole */
            w->state = CORRAL__WORKER_STATE__WORKER_STARTING;
            D.running_workers++;
        }
        char why[128];
        snprintf(why, sizeof(why), "%s (lost in a head restart)", lost_why[i]);
        worker_lost(w, why);
    }
    /* a worker that had failed: its restart was due (or the outcome
     * unrecorded); the job fails and the others are stopped */
    for (int i = 0; i < j->n && !j->failed && !j->restart_pending; i++) {
        const wk_t *w = &j->wk[i];
        if (w->state == CORRAL__WORKER_STATE__WORKER_EXITED && (w->signal || w->exit_code))
            job_fail(j, w->signal ? 128 + w->signal : w->exit_code,
                     "lost in a head restart: worker %d had ended with %s %d", i,
                     w->signal ? "signal" : "exit code", w->signal ? w->signal : w->exit_code);
    }
    job_check_done(j);
}

/* Workers a previous head started in a turn of its loop it never
 * committed (it was killed in the middle): nothing in state.db names
 * them, so nobody would ever stop them. They are found by the variable
 * every local worker gets, CORRAL_AGENT_SOCKET naming this session's
 * socket, and stopped (SIGKILL to their process group: the work was never
 * acknowledged). A worker the head adopted is kept; so is anything that
 * is no group leader (its group goes with its leader). A process of a
 * worker that made a process group of its own is stopped too: the head
 * cannot tell it from an orphan, and stopping the job would not reach it
 * either. */
static void sweep_orphans(void)
{
    if (!D.sock)
        return;
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 1 || pid == (long)getpid() || getpgid((pid_t)pid) != (pid_t)pid)
            continue; /* a group leader only: its group goes with it */
        char sock[256], wid[64] = "";
        if (!agent_proc_env((int)pid, "CORRAL_AGENT_SOCKET", sock, sizeof(sock)) ||
            strcmp(sock, D.sock) != 0)
            continue;
        agent_proc_env((int)pid, "CORRAL_WORKER_ID", wid, sizeof(wid));
        const wk_t *w = wid[0] ? worker_find(wid) : NULL;
        if (w && wk_alive(w) && w->node == D.self && w->pid == (int)pid)
            continue; /* adopted */
        if (kill(-(pid_t)pid, SIGKILL) == 0)
            event("orphan", NULL,
                  "stopped worker %s (pid %ld): the previous head started it in work it never "
                  "recorded",
                  wid[0] ? wid : "?", pid);
    }
    closedir(d);
}

/* Reads the session back after a head died: nodes, groups, finished jobs
 * as they were, running ones adopted, waiting for their agents or
 * restarted, pending ones queued again. */
void recover(void)
{
    nodes_recover();
    pgs_recover();
    cr_state_job_t *v = NULL;
    size_t n = 0;
    if (cr_state_job_list(D.st, false, &v, &n) < 0) {
        cr_warn("state: %s: nothing recovered", cr_state_errmsg(D.st));
        return;
    }
    int active = 0;
    for (size_t i = 0; i < n; i++) {
        job_t *j = job_load(&v[i]);
        if (j)
            *CR_VEC_PUSH(&D.jobs) = j;
    }
    cr_state_job_list_free(v, n);
    for (size_t i = 0; i < D.jobs.n; i++) {
        job_t *j = D.jobs.v[i];
        if (cr_job_state_is_final(j->state))
            continue;
        active++;
        if (j->state == CR_JOB_PENDING || j->state == CR_JOB_PLACING) {
            event("recovered", j, "pending again after a head restart");
            *CR_VEC_PUSH(&D.pending) = j;
        } else {
            job_recover(j);
        }
    }
    event("recovered", NULL, "%zu job(s) read back from the previous head, %d active", D.jobs.n,
          active);
    sweep_orphans();
    try_pending();
}

/* -------------------------------------------------------------- shutdown */

static void net_closed(void *data)
{
    D.closed = true;
}

static void on_force(uv_timer_t *t)
{
    /* remote workers whose agents did not answer in time */
    D.running_workers = 0;
    maybe_finish_shutdown();
}

static void batch_end(uv_prepare_t *h);
static uv_prepare_t batch;
static bool batch_ready;

void maybe_finish_shutdown(void)
{
    if (!D.shutting_down || D.running_workers > 0 || D.closed || !D.net)
        return;
    if (batch_ready) /* the turn's answers go before the net does */
        batch_end(&batch);
    cr_net_t *n = D.net;
    D.net = NULL;
    follow_fini();
    uv_close((uv_handle_t *)&D.sig_term, NULL);
    uv_close((uv_handle_t *)&D.sig_int, NULL);
    uv_timer_stop(&D.tick);
    uv_close((uv_handle_t *)&D.tick, NULL);
    cr_net_close(n, net_closed, NULL);
}

void begin_shutdown(const char *why)
{
    static uv_timer_t force;
    if (D.shutting_down)
        return;
    D.shutting_down = true;
    event("shutdown", NULL, "%s: stopping %d worker(s)", why, D.running_workers);
    for (size_t i = 0; i < D.jobs.n; i++)
        job_stop(D.jobs.v[i], SHUTDOWN_GRACE_MS);
    uv_timer_init(&D.loop, &force);
    uv_timer_start(&force, on_force, SHUTDOWN_GRACE_MS + 2000, 0);
    uv_unref((uv_handle_t *)&force);
    maybe_finish_shutdown();
}

static void h_shutdown(cr_conn_t *c, const Corral__Envelope *e)
{
    reply_ack(c, e);
    begin_shutdown("corral stop");
}

/* ----------------------------------------------------------- group commit */

/* What the messages and events handled in one turn of the loop change is
 * committed together when the loop is about to wait again (a libuv
 * prepare handle), and every answer and message sent meanwhile goes out
 * only after (an acknowledged request survives kill -9): one transaction
 * per turn, one write per connection. */
static bool batching;
static cr_net_t *batch_net;

static void batch_end(uv_prepare_t *h)
{
    uv_prepare_stop(h);
    if (!batching)
        return;
    batching = false;
    int err = D.st ? cr_state_commit(D.st) : 0;
    if (err < 0)
        cr_warn("state: %s: what the last turn changed is not recorded; its answers are errors",
                cr_state_errmsg(D.st));
    if (batch_net && err < 0) /* nothing is acknowledged that is not recorded */
        cr_net_flush_failed(batch_net, err, cr_state_errmsg(D.st));
    else if (batch_net)
        cr_net_flush(batch_net);
    batch_net = NULL;
}

void head_batch(void)
{
    if (!batch_ready) {
        uv_prepare_init(&D.loop, &batch);
        batch_ready = true;
    }
    if (batching || !D.st || cr_state_begin(D.st) < 0)
        return;
    batching = true;
    batch_net = D.net; /* a Shutdown may let go of D.net */
    if (batch_net)
        cr_net_hold(batch_net);
    if (!uv_is_closing((uv_handle_t *)&batch))
        uv_prepare_start(&batch, batch_end);
}

void head_batch_fini(void)
{
    if (!batch_ready)
        return;
    batch_end(&batch);
    if (!uv_is_closing((uv_handle_t *)&batch))
        uv_close((uv_handle_t *)&batch, NULL);
}

void head_batch_forget(void)
{
    batch_ready = batching = false;
    batch_net = NULL;
}

void head_handle(cr_conn_t *c, const Corral__Envelope *e)
{
    head_batch();
    head_dispatch(c, e);
}

/* ------------------------------------------------------------ dispatching */

typedef void (*handler_fn)(cr_conn_t *c, const Corral__Envelope *e);
static const struct {
    Corral__Envelope__BodyCase body;
    handler_fn fn;
} handlers[] = {
    {CORRAL__ENVELOPE__BODY_JOB_SUBMIT, h_submit},
    {CORRAL__ENVELOPE__BODY_JOB_STATUS, h_job_status},
    {CORRAL__ENVELOPE__BODY_JOB_LIST, h_job_list},
    {CORRAL__ENVELOPE__BODY_JOB_STOP, h_job_stop},
    {CORRAL__ENVELOPE__BODY_JOB_LOGS, h_job_logs},
    {CORRAL__ENVELOPE__BODY_STATUS_REQUEST, h_status},
    {CORRAL__ENVELOPE__BODY_NODE_LIST, h_node_list},
    {CORRAL__ENVELOPE__BODY_EVENTS_REQUEST, h_events},
    {CORRAL__ENVELOPE__BODY_SHUTDOWN, h_shutdown},
    {CORRAL__ENVELOPE__BODY_PG_CREATE, pg_dispatch},
    {CORRAL__ENVELOPE__BODY_PG_REMOVE, pg_dispatch},
    {CORRAL__ENVELOPE__BODY_PG_LIST, pg_dispatch},
};

void head_dispatch(cr_conn_t *c, const Corral__Envelope *e)
{
    if (cr_conn_role(c) == CORRAL__ROLE__ROLE_AGENT) {
        nodes_dispatch(c, e);
        return;
    }
    for (size_t i = 0; i < CR_ARRAY_SIZE(handlers); i++)
        if (handlers[i].body == e->body_case) {
            handlers[i].fn(c, e);
            return;
        }
    cr_conn_reply_error(c, e->id, CR_ENOSYS, "%s is not served by this head",
                        cr_msg_name(e->body_case));
}
