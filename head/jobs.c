/* The head's jobs (docs/runtime.md): submit, place, start, restart, stop,
 * and their requests. The rest of the jobs module: workers.c (a job's
 * workers on their nodes), logs.c (their output), recover.c (after a head
 * restart); jobs.h is the module's own header.
 *
 * A failing worker fails the gang (the others are stopped and the job
 * takes its exit code) unless the job's restart policy has restarts left:
 * then, after a backoff on a libuv timer, that worker (RESTART_WORKER) or
 * every worker once the others are stopped (RESTART_GANG) is started again
 * on the same devices. A worker lost with its node takes the gang's
 * placement with it: the gang is placed again (any policy but none). */
#include "head/jobs.h"
#include "head/follow.h"
#include "head/waiters.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#define DEFAULT_BACKOFF_MS 100 /* before the first restart, doubling */
#define MAX_BACKOFF_MS 5000
/* How long a gang placed again after a node loss waits for a node that can
 * hold it to rejoin, on top of the dead-after time: an agent that lost the
 * head retries at most 5 s apart (agent/), so a node back from a cut link
 * or a reboot of its agent is there in time. */
#define REJOIN_WINDOW_MS 6000

/* Whether a waiting job may have its rejoin window open: most ticks do
 * not visit every waiting job. */
static bool rejoin_windows;

/* j's reason is r (a copy; r may be j->reason), newer than its shape's. */
static void set_reason(job_t *j, const char *r)
{
    char *copy = r ? cr_strdup(r) : NULL;
    free(j->reason);
    j->reason = copy;
    j->reason_seq = reason_seq_next();
}

/* The jobs of D.jobs by state, and those not final in id order: what a
 * status reads (counts, holders), where D.jobs also keeps the finished
 * ones (10,000 by default, each status walked them three times). */
static size_t by_state[CR_JOB_STOPPED + 1];
static CR_VEC(job_t *) live;

/* The first of v[0, n) (in id order) whose id is not below id, or n:
 * D.jobs (job_find) and live. */
static size_t id_bisect(job_t *const *v, size_t n, int64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t live_find(int64_t id)
{
    return id_bisect(live.v, live.n, id);
}

static void live_in(job_t *j)
{
    size_t i = live_find(j->id);
    CR_VEC_PUSH(&live);
    memmove(&live.v[i + 1], &live.v[i], (live.n - 1 - i) * sizeof(live.v[0]));
    live.v[i] = j;
}

static void live_out(job_t *j)
{
    size_t i = live_find(j->id);
    if (i < live.n && live.v[i] == j) {
        memmove(&live.v[i], &live.v[i + 1], (live.n - i - 1) * sizeof(live.v[0]));
        live.n--;
    }
}

void jobs_add(job_t *j)
{
    *CR_VEC_PUSH(&D.jobs) = j;
    j->listed = true;
    by_state[j->state]++;
    if (!cr_job_state_is_final(j->state))
        live_in(j);
}

/* j leaves D.jobs (its caller takes it out). */
static void unlisted(job_t *j)
{
    if (!j->listed)
        return;
    j->listed = false;
    by_state[j->state]--;
    if (!cr_job_state_is_final(j->state))
        live_out(j);
}

void job_set_state(job_t *j, cr_job_state_t s, const char *reason)
{
    if (j->listed) {
        by_state[j->state]--;
        by_state[s]++;
        if (!cr_job_state_is_final(j->state) && cr_job_state_is_final(s))
            live_out(j);
        else if (cr_job_state_is_final(j->state) && !cr_job_state_is_final(s))
            live_in(j);
    }
    j->state = s;
    set_reason(j, reason);
    db_check(cr_state_job_set_state(D.st, j->id, s, j->reason, cr_wall_ms()));
}

static void release_placement(job_t *j)
{
    if (j->placement) {
        sched_release(D.cluster, j->placement);
        D.sched_freed++;
        j->placement = 0;
    }
    if (j->pg)
        for (int i = 0; i < j->n; i++)
            if (j->wk[i].bundle >= 0) {
                pg_bundle_give(j->pg, j->wk[i].bundle, j->idstr);
                j->wk[i].bundle = -1;
            }
}

static bool is_child_of(const job_t *c, const char *parent)
{
    return c->spec->parent_job && !strcmp(c->spec->parent_job, parent);
}

/* A job's task leases and actors (its children) end with it. */
static void stop_children(const job_t *j)
{
    if (!j->has_children)
        return; /* most jobs: no scan of every job */
    for (size_t i = 0; i < D.jobs.n; i++) {
        job_t *c = D.jobs.v[i];
        if (is_child_of(c, j->idstr) && !cr_job_state_is_final(c->state)) {
            event("stopping", c, "its parent job %s ended", j->idstr);
            job_stop(c, 0);
        }
    }
}

bool jobs_in_scope(const cr_job_scope_t *s, const char *id)
{
    if (!strcmp(id, s->job_id))
        return true;
    const job_t *j = job_find(id);
    return j && is_child_of(j, s->job_id);
}

/* Every worker has ended: the job's final state, its devices back. */
void job_check_done(job_t *j)
{
    for (int i = 0; i < j->n; i++)
        if (wk_alive(&j->wk[i]))
            return;
    if (cr_job_state_is_final(j->state) || j->restart_pending || j->port_wait)
        return;
    if (j->replace && !j->failed && !j->stopping)
        return; /* waiting in the queue to be placed again */
    j->finished_ms = cr_wall_ms();
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
    stop_children(j);
    cr_waiters_wake(j); /* JobStatus requests waiting for this end */
    job_drop_env(j);
    release_placement(j);
    follow_pump();
    try_pending();
    pgs_try_pending();
}

/* The jobs whose owner is set (bound submits whose connection is still
 * open): a connection's close looks through these, not through every job
 * kept (10,000 by default: about 90 us of every `corral run`). */
static CR_VEC(job_t *) bound;

static void unbind(size_t i)
{
    bound.v[i]->owner = NULL;
    bound.v[i] = bound.v[--bound.n];
}

static void remove_pending(job_t *j);

/* The jobs submitted in this turn (uncommitted), in order. */
static CR_VEC(job_t *) fresh;

/* The first failure of a gang decides the job; the rest are stopped. */
void job_fail(job_t *j, int code, const char *fmt, ...)
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
    set_reason(j, msg);
    if (j->replace) {
        j->replace = false;
        remove_pending(j);
    }
    for (int i = 0; i < j->n; i++)
        wk_stop(&j->wk[i], j->spec->grace_ms ? j->spec->grace_ms : DEFAULT_GRACE_MS);
}

static void start_workers(job_t *j);

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
void restart_cancel(job_t *j)
{
    if (!j->restart_pending)
        return;
    j->restart_pending = j->backoff_over = false;
    if (j->timer)
        uv_timer_stop(j->timer);
    for (int i = 0; i < j->n; i++)
        j->wk[i].restart_due = false;
}

void wk_reset(wk_t *w)
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
void restart_check(job_t *j)
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
        j->rejoin_until_ms = cr_mono_ms() + D.dead_ms + REJOIN_WINDOW_MS;
        rejoin_windows = true;
        job_set_state(j, CR_JOB_PENDING, "placing the gang again: a node of it was lost");
        jobs_pending_push(j);
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
bool restart_schedule(job_t *j, wk_t *w, const char *cause)
{
    Corral__RestartPolicy pol = j->spec->restart;
    if (pol == CORRAL__RESTART_POLICY__RESTART_NONE || j->failed || j->stopping ||
        D.shutting_down || j->restarts >= (int)j->spec->max_restarts)
        return false;
    bool gang = pol == CORRAL__RESTART_POLICY__RESTART_GANG || j->replace || j->spec->distributed;
    j->restarts++;
    db_check(cr_state_job_set_restarts(D.st, j->id, j->restarts, cr_wall_ms()));
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

/* A distributed gang's workers in rank order (sched_gang_order: ranks
 * contiguous per node, nodes in slice worker id order): worker r takes
 * the node, devices and bundle placement slot order[r] got. */
static void rank_order(job_t *j)
{
    sched_gang_slot_t *s = cr_calloc((size_t)j->n, sizeof(*s));
    int *order = cr_calloc((size_t)j->n, sizeof(*order));
    wk_t *was = cr_calloc((size_t)j->n, sizeof(*was));
    char addr[256];
    for (int i = 0; i < j->n; i++) {
        worker_gang_slot(&j->wk[i], &s[i], addr, sizeof(addr));
        was[i] = j->wk[i];
    }
    sched_gang_order(s, j->n, order);
    for (int r = 0; r < j->n; r++) {
        const wk_t *from = &was[order[r]];
        j->wk[r].node = from->node;
        j->wk[r].bundle = from->bundle;
        j->wk[r].ndevs = from->ndevs;
        memcpy(j->wk[r].devs, from->devs, sizeof(from->devs));
    }
    free(was);
    free(order);
    free(s);
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
            if (!pg_bundle_take(j->pg, b, j->idstr, &w->node, w->devs, &w->ndevs, why,
                                sizeof(why))) {
                for (int k = 0; k < i; k++)
                    if (j->wk[k].bundle >= 0) {
                        pg_bundle_give(j->pg, j->wk[k].bundle, j->idstr);
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
    if (j->spec->distributed)
        rank_order(j);
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

void job_port_ready(const char *job_id, uint32_t port, uint32_t jax_port, const char *why)
{
    job_t *j = job_find(job_id);
    if (!j || !j->port_wait)
        return;
    j->port_wait = false;
    if (!port) {
        job_fail(j, 1, "no rendezvous port on node %s: %s", j->wk[0].node->id,
                 why ? why : "unknown");
        job_check_done(j);
        return;
    }
    j->master_port = port;
    /* an agent from before PortReply.port2 gave one port only */
    j->jax_port = jax_port ? jax_port : port < 65535 ? port + 1 : port - 1;
    start_gang_now(j);
}

static void start_workers(job_t *j)
{
    job_set_state(j, CR_JOB_RUNNING, NULL);
    if (j->spec->distributed && j->n > 0 && j->wk[0].node) {
        j->port_wait = true;
        node_request_port(j->wk[0].node, j->idstr, job_port_ready);
        return;
    }
    start_gang_now(j);
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
            snprintf(reason, size, "the bundles of placement group %s are in use", pg_name(j->pg));
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

static void placed(job_t *j)
{
    j->rejoin_until_ms = 0;
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

void jobs_tick(void)
{
    if (!rejoin_windows)
        return;
    int64_t now = cr_mono_ms();
    bool due = false, open = false;
    for (size_t i = 0; i < D.pending.n; i++) {
        job_t *j = D.pending.v[i].j;
        if (!j->rejoin_until_ms)
            continue;
        if (now >= j->rejoin_until_ms) {
            j->rejoin_until_ms = 0; /* the window is over: placed now or never */
            due = true;
        } else {
            open = true;
        }
    }
    rejoin_windows = open;
    if (due)
        try_pending();
}

/* ------------------------------------------------------------ the queue */

/* D.pending holds the waiting jobs in arrival order. Each entry carries
 * its ticket, which grows: a job's place is found by bisection, and
 * nothing is renumbered when the queue moves. A one-worker request outside
 * a group also carries its shape (head.h, placement.c): what it asks,
 * shared by every waiting job that asks the same.
 *
 * In a pass (try_pending) the later jobs of a shape the scheduler
 * refused are passed over without being read, and what they wait for is
 * the shape's reason (job_reason). Anything freed meanwhile
 * (D.sched_freed moves: a job placed in the pass that ended at once)
 * starts a new generation, in which every shape is asked again. A queue
 * of 10,000 alike jobs costs one decision a pass and a walk of its
 * entries, not a read of each job (each job's end read them all: 1.6 ms
 * of the head a job at 10,000 waiting). */
static shapes_t shapes;

static uint64_t pass_gen, last_ticket;

/* A pass is not entered again from inside (pass_run). A job that leaves
 * the queue meanwhile leaves a hole in its entry. */
static pass_t pass;
static size_t pass_keep, pass_at; /* D.pending: [0, keep) kept, [at, n) not yet seen */
static size_t pass_holes;         /* in [0, keep) */

/* Jobs that can share a shape: one worker, no group. */
static bool missable(const job_t *j)
{
    return j->n == 1 && !j->pg && j->bundles;
}

/* j's shape, shared (its count taken). */
static shape_t *job_shape(const job_t *j)
{
    return shape_get(&shapes, j->spec->strategy, j->spec->domain, 1, &j->bundles[0]);
}

const char *job_reason(const job_t *j)
{
    if (j->shape && j->state == CR_JOB_PENDING && j->shape->why_seq > j->reason_seq)
        return j->shape->why;
    return j->reason;
}

void jobs_pending_push(job_t *j)
{
    pending_t *e = CR_VEC_PUSH(&D.pending);
    e->j = j;
    e->ticket = j->ticket = ++last_ticket;
    e->shape = j->shape = missable(j) && j->state == CR_JOB_PENDING ? job_shape(j) : NULL;
}

/* j's entry has left D.pending: what it waits for becomes its own. */
static void pending_left(job_t *j)
{
    if (j->shape) {
        if (j->shape->why_seq > j->reason_seq)
            set_reason(j, j->shape->why);
        shape_put(&shapes, j->shape);
        j->shape = NULL;
    }
    j->ticket = 0;
}

/* The index of ticket in D.pending[lo, hi) (sorted), or hi. */
static size_t ticket_find(size_t lo, size_t hi, uint64_t ticket)
{
    size_t end = hi;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (D.pending.v[mid].ticket < ticket)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < end && D.pending.v[lo].ticket == ticket ? lo : end;
}

/* A pending job's place in the queue (the pass's order, from 1), 0 for
 * any other. In a pass, the kept part and the part not yet seen are
 * looked in. */
static uint32_t queue_position(const job_t *j)
{
    if (j->state != CR_JOB_PENDING || !j->ticket)
        return 0;
    size_t kept = pass.in ? pass_keep : D.pending.n;
    size_t i = ticket_find(0, kept, j->ticket);
    if (i < kept)
        return (uint32_t)(i + 1);
    if (!pass.in)
        return 0;
    i = ticket_find(pass_at, D.pending.n, j->ticket);
    return i < D.pending.n ? (uint32_t)(kept + i - pass_at + 1) : 0;
}

static void remove_pending(job_t *j)
{
    if (!j->ticket)
        return; /* not waiting */
    size_t kept = pass.in ? pass_keep : D.pending.n;
    size_t i = ticket_find(0, kept, j->ticket);
    if (i == kept && pass.in)
        i = ticket_find(pass_at, D.pending.n, j->ticket);
    if (i < D.pending.n && pass.in) {
        D.pending.v[i].j = NULL; /* a hole: the pass drops it */
        D.pending.v[i].shape = NULL;
        pass_holes += i < kept;
    } else if (i < D.pending.n) {
        memmove(&D.pending.v[i], &D.pending.v[i + 1],
                (D.pending.n - i - 1) * sizeof(D.pending.v[0]));
        D.pending.n--;
    }
    pending_left(j);
}

/* What a waiting job waits for, as this pass found it. Its move to
 * PENDING is recorded; what it waits for after is kept in memory only
 * (recovery asks the scheduler again): the reason names free amounts,
 * which move with every start and end, and writing every waiting job's
 * row each time cost 10 us a job a pass, 21 ms of the head for each run
 * beside 1,000 waiting jobs. */
static void pending_reason(job_t *j, const char *why)
{
    if (j->state != CR_JOB_PENDING) {
        job_set_state(j, CR_JOB_PENDING, why);
    } else if (!j->reason || strcmp(job_reason(j), why)) {
        set_reason(j, why);
    }
}

/* One pass over the queue, in order; D.pending may grow meanwhile (a job
 * queued again), never shrink. */
static void pass_once(void)
{
    size_t keep = 0;
    uint64_t freed = D.sched_freed;
    pass_gen++;
    for (size_t i = 0; i < D.pending.n; i++) {
        pending_t e = D.pending.v[i];
        pass_keep = keep;
        pass_at = i;
        if (!e.j)
            continue; /* left the queue in this pass */
        if (D.sched_freed != freed) {
            freed = D.sched_freed;
            pass_gen++;
        }
        if (e.shape && e.shape->missed == pass_gen) {
            D.pending.v[keep++] = e; /* refused in this pass already: not read */
            continue;
        }
        job_t *j = e.j;
        char why[256];
        if (D.shutting_down || j->stopping || j->failed || j->uncommitted) {
            D.pending.v[keep++] = e;
            continue;
        }
        sched_status_t st = place(j, why, sizeof(why));
        if (st == SCHED_RETRY && e.shape)
            shape_refused(e.shape, pass_gen, why);
        if (st == SCHED_INFEASIBLE && j->spec->wait_for_nodes) {
            st = SCHED_RETRY;
            wait_reason(why, sizeof(why));
        } else if (st == SCHED_INFEASIBLE && j->replace && j->rejoin_until_ms &&
                   cr_mono_ms() < j->rejoin_until_ms) {
            /* within its restart window: the node it lost may come back */
            st = SCHED_RETRY;
            char was[sizeof(why)];
            cr_strlcpy(was, why, sizeof(was));
            snprintf(why, sizeof(why),
                     "placing the gang again: waiting up to %u ms after its node's loss for a node "
                     "that can hold it to rejoin (%.150s)",
                     D.dead_ms + REJOIN_WINDOW_MS, was);
        }
        if (st == SCHED_INFEASIBLE && D.rejoining) {
            if (j->ticket)
                D.pending.v[keep++] = e; /* asked again once the node is back */
            continue;
        }
        if (st == SCHED_RETRY) {
            pending_reason(j, why);
            if (j->ticket)
                D.pending.v[keep++] = e;
            continue;
        }
        pending_left(j); /* placed or refused for good: out of the queue */
        if (st == SCHED_INFEASIBLE) {
            j->replace = false;
            job_fail(j, 1, "cannot be placed any more: %s", why);
            job_check_done(j);
            continue;
        }
        placed(j);
    }
    D.pending.n = keep;
    if (pass_holes) {
        keep = 0;
        for (size_t i = 0; i < D.pending.n; i++)
            if (D.pending.v[i].j)
                D.pending.v[keep++] = D.pending.v[i];
        D.pending.n = keep;
        pass_holes = 0;
    }
}

void try_pending(void)
{
    pass_run(&pass, pass_once);
}

/* ------------------------------------------------------------------ jobs */

static void free_handle(uv_handle_t *h)
{
    free(h);
}

void job_free(job_t *j)
{
    unlisted(j);
    remove_pending(j);
    if (j->shape) /* jobs_free: the queue let go of at once */
        shape_put(&shapes, j->shape);
    for (size_t i = 0; j->owner && i < bound.n; i++)
        if (bound.v[i] == j)
            unbind(i);
    logs_forget_job(j);
    for (int i = 0; j->wk && i < j->n; i++) {
        free(j->wk[i].reason);
        free(j->wk[i].out_path);
        free(j->wk[i].err_path);
    }
    free(j->wk);
    if (j->timer) /* its memory goes in the close callback */
        uv_close((uv_handle_t *)j->timer, free_handle);
    free(j->bundles);
    free(j->spec_pb);
    free(j->name);
    free(j->reason);
    if (j->spec)
        corral__job_spec__free_unpacked(j->spec, NULL);
    free(j);
}

void jobs_free(void)
{
    CR_VEC_FREE(&bound);
    CR_VEC_FREE(&fresh);
    for (size_t i = 0; i < D.pending.n; i++) /* each job's shape goes with it */
        if (D.pending.v[i].j)
            D.pending.v[i].j->ticket = 0;
    D.pending.n = 0;
    for (size_t i = 0; i < D.jobs.n; i++) /* all go: not one by one from live */
        D.jobs.v[i]->listed = false;
    CR_VEC_FREE(&live);
    memset(by_state, 0, sizeof(by_state));
    for (size_t i = 0; i < D.jobs.n; i++)
        job_free(D.jobs.v[i]);
    CR_VEC_FREE(&D.jobs);
    CR_VEC_FREE(&D.pending);
    shapes_free(&shapes);
}

/* D.jobs is in id order (ids grow; retention and removal keep the order):
 * a canonical decimal id is found by bisection, anything else by a scan. */
job_t *job_find(const char *id)
{
    char *end;
    errno = 0;
    long long want = id[0] >= '1' && id[0] <= '9' ? strtoll(id, &end, 10) : 0;
    if (want > 0 && !errno && !*end) {
        size_t lo = id_bisect(D.jobs.v, D.jobs.n, want);
        if (lo < D.jobs.n && D.jobs.v[lo]->id == want)
            return D.jobs.v[lo];
    }
    for (size_t i = 0; i < D.jobs.n; i++)
        if (strcmp(D.jobs.v[i]->idstr, id) == 0)
            return D.jobs.v[i];
    return NULL;
}

bool jobs_scope_current(const cr_job_scope_t *s, char *why, size_t size)
{
    const job_t *j = job_find(s->job_id);
    if (!j || s->worker_index >= (uint32_t)j->n) {
        snprintf(why, size, "job %s has no worker %u here", s->job_id, s->worker_index);
        return false;
    }
    const wk_t *w = &j->wk[s->worker_index];
    if ((uint32_t)w->attempt != s->attempt) {
        snprintf(why, size,
                 "it is worker %u's attempt %u of job %s, and that worker is at attempt %d now "
                 "(restarted)",
                 s->worker_index, s->attempt, s->job_id, w->attempt);
        return false;
    }
    if (!wk_alive(w)) {
        snprintf(why, size, "worker %u of job %s has ended", s->worker_index, s->job_id);
        return false;
    }
    return true;
}

/* pb: s packed (len bytes) */
static char *spec_json(const Corral__JobSpec *s, const uint8_t *pb, size_t len)
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
    char *rest = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!rest)
        return NULL; /* (as jansson's dump of the whole was: the row is then refused) */
    /* the whole spec, packed, in hex: what a restarted head reads back, as
     * the object's last member "pb". Written here, not by jansson, whose
     * dump looks at every character of a string for escapes: for the
     * caller's environment that corral run sends, 240,000 instructions a
     * submit (callgrind), on the way to its answer. Hex needs none. */
    size_t rl = strlen(rest);
    char *out = cr_malloc(rl + 2 * len + 9), *p = out;
    memcpy(p, rest, rl - 1); /* without its closing brace */
    p += rl - 1;
    memcpy(p, ",\"pb\":\"", 7);
    p += 7;
    cr_hex_encode(pb, len, p);
    p += 2 * len;
    memcpy(p, "\"}", 3);
    free(rest);
    return out;
}

/* spec_json's reader: the spec from its "pb" (recover.c, and a with_env
 * answer about a job that has ended, job_drop_env). */
Corral__JobSpec *job_spec_load(const char *sj)
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

void job_drop_env(job_t *j)
{
    Corral__WorkerSpec *w = j->spec ? j->spec->worker : NULL;
    if (!w || !w->n_env)
        return;
    for (size_t i = 0; i < w->n_env; i++)
        corral__key_value__free_unpacked(w->env[i], NULL);
    free(w->env);
    w->env = NULL;
    w->n_env = 0;
    j->env_dropped = true;
}

static const cr_restart_policy_t restart_policy_db[] = {
    [CORRAL__RESTART_POLICY__RESTART_NONE] = CR_RESTART_NONE,
    [CORRAL__RESTART_POLICY__RESTART_WORKER] = CR_RESTART_WORKER,
    [CORRAL__RESTART_POLICY__RESTART_GANG] = CR_RESTART_GANG,
};

/* The job's bundles (one per worker) from its spec; CR_EINVAL or
 * CR_EINFEASIBLE with why. */
int job_bundles(job_t *j, char *why, size_t size)
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

/* A job of spec s whose parent is parent ("" for none), with a private
 * copy of the spec (it outlives the borrowed envelope) unpacked from
 * j->spec_pb: packed once, those bytes are also what state.db keeps
 * (spec_json). */
static job_t *job_new(const Corral__JobSpec *s, const char *parent)
{
    job_t *j = cr_calloc(1, sizeof(*j));
    j->n = s->num_workers ? (int)s->num_workers : 1;
    Corral__JobSpec t = *s; /* shallow: only parent_job differs */
    t.parent_job = (char *)parent;
    size_t len = corral__job_spec__get_packed_size(&t);
    j->spec_pb = cr_malloc(len ? len : 1);
    j->spec_pb_len = len;
    corral__job_spec__pack(&t, j->spec_pb);
    j->spec = corral__job_spec__unpack(NULL, len, j->spec_pb);
    j->name = cr_strdup(s->name && s->name[0] ? s->name : s->worker->argv[0]);
    return j;
}

void job_workers(job_t *j)
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

static void jobs_remove(job_t *j)
{
    for (size_t i = 0; i < D.jobs.n; i++)
        if (D.jobs.v[i] == j) {
            memmove(&D.jobs.v[i], &D.jobs.v[i + 1], (D.jobs.n - i - 1) * sizeof(*D.jobs.v));
            D.jobs.n--;
            return;
        }
}

void jobs_committed(bool ok)
{
    size_t n = fresh.n;
    job_t **v = fresh.v;
    fresh.v = NULL;
    fresh.n = fresh.cap = 0;
    for (size_t i = 0; i < n; i++) {
        job_t *j = v[i];
        j->uncommitted = false;
        if (!ok) {
            /* its id was rolled back with it and its answer is an error: it
             * is forgotten, so the id is not handed out twice; none of its
             * workers ran (they start at the commit) */
            cr_waiters_drop_key(j);
            remove_pending(j);
            jobs_remove(j);
            release_placement(j);
            job_free(j);
            continue;
        }
        if (j->start_on_commit && !j->stopping && !j->failed && !D.shutting_down &&
            !cr_job_state_is_final(j->state)) {
            head_batch(); /* a turn of its own, committed in batch_end */
            j->start_on_commit = false;
            placed(j);
        }
        j->start_on_commit = false;
    }
    free(v);
    if (ok && n)
        try_pending(); /* the ones submitted pending, in arrival order */
}

int jobs_resync(void)
{
    int64_t now = cr_wall_ms();
    for (size_t i = 0; i < D.jobs.n; i++) {
        job_t *j = D.jobs.v[i];
        int err = cr_state_job_set_state(D.st, j->id, j->state, job_reason(j), now);
        if (err == 0)
            err = cr_state_job_set_restarts(D.st, j->id, j->restarts, now);
        if (err < 0)
            return err;
        for (int k = 0; k < j->n; k++)
            db_worker(&j->wk[k]);
    }
    return 0;
}

void req_job_submit(cr_conn_t *c, const Corral__Envelope *e)
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
    /* a worker's job credential submits children of its job; a client
     * cannot claim a parent */
    const cr_job_scope_t *scope = cr_conn_job_scope(c);
    job_t *j = job_new(s, scope ? scope->job_id : "");
    if (scope) {
        job_t *parent = job_find(scope->job_id);
        if (parent)
            parent->has_children = true;
    }
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
    j->submitted_ms = cr_wall_ms();
    j->id = 0;
    snprintf(j->idstr, sizeof(j->idstr), "new");
    job_workers(j);

    char reason[256];
    sched_status_t st = place(j, reason, sizeof(reason));
    if (st == SCHED_INFEASIBLE && s->wait_for_nodes) {
        st = SCHED_RETRY; /* kept until nodes join that can hold it */
        wait_reason(reason, sizeof(reason));
    } else if (st == SCHED_INFEASIBLE) {
        event("infeasible", NULL, "%s: %s", j->name, reason);
        cr_conn_reply_error(c, e->id, CR_EINFEASIBLE, "cannot place %d worker(s): %s", j->n,
                            reason);
        release_placement(j);
        job_free(j);
        return;
    }
    char *sj = spec_json(j->spec, j->spec_pb, j->spec_pb_len);
    free(j->spec_pb); /* recorded: not needed again */
    j->spec_pb = NULL;
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
            db_worker_create(&j->wk[i], st == SCHED_OK);
        }
        err = cr_state_commit(D.st);
    }
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "cannot record the job: %s", cr_state_errmsg(D.st));
        release_placement(j);
        job_free(j);
        return;
    }
    jobs_add(j);
    if (e->job_submit->bound) {
        j->owner = c;
        *CR_VEC_PUSH(&bound) = j;
    }
    /* inside the turn's group commit, the job is recorded only when the
     * turn commits: until then nothing of it starts */
    bool later = cr_state_in_transaction(D.st);
    if (later) {
        j->uncommitted = true;
        *CR_VEC_PUSH(&fresh) = j;
    }
    event("submitted", j, "%s: %d worker(s) of %s", j->name, j->n, s->worker->argv[0]);

    Corral__JobSubmitted r = CORRAL__JOB_SUBMITTED__INIT;
    r.job_id = j->idstr;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMITTED;
    a.job_submitted = &r;
    reply(c, e, &a);

    if (st == SCHED_OK && later) {
        j->start_on_commit = true; /* its placement held meanwhile */
    } else if (st == SCHED_OK) {
        placed(j);
    } else {
        event("pending", j, "%s", reason);
        job_set_state(j, CR_JOB_PENDING, reason);
        jobs_pending_push(j);
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
    info->reason = (char *)(job_reason(j) ? job_reason(j) : "");
    info->exit_code = j->exit_code;
    info->submitted_ms = j->submitted_ms;
    info->finished_ms = j->finished_ms;
    info->restarts = (uint32_t)j->restarts;
    info->queue_position = queue_position(j);
    info->spec = j->spec;
    info->parent_job = j->spec->parent_job;
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
        s->output_lost = w->output_lost;
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

/* The JobInfo answer to request id, with its workers' environment or
 * without (JobStatusRequest with_env); also a parked JobStatus's answer
 * (head/waiters.c), key being the job. */
static void job_info_answer(cr_conn_t *c, uint64_t id, const job_t *j, bool with_env)
{
    Corral__JobInfo info, brief;
    Corral__JobSpec spec;
    Corral__WorkerSpec worker;
    Corral__JobSpec *stored = NULL; /* a job that has ended: its environment from state.db */
    if (with_env && j->env_dropped) {
        cr_state_job_t row;
        int err = D.st ? cr_state_job_get(D.st, j->id, &row) : CR_ENOENT;
        if (!err) {
            stored = job_spec_load(row.spec_json);
            cr_state_job_free(&row);
        }
        if (!stored) {
            cr_conn_reply_error(c, id, err < 0 ? err : CR_EIO,
                                "job %s has ended and its environment cannot be read back from "
                                "state.db (%s): ask without it",
                                j->idstr, err < 0 ? cr_strerror(err) : "its spec is damaged");
            return;
        }
    }
    info_mem_t m;
    info_fill(j, &info, &m);
    if (stored) { /* the kept spec, but the stored environment */
        spec = *info.spec;
        worker = *spec.worker;
        worker.env = stored->worker->env;
        worker.n_env = stored->worker->n_env;
        spec.worker = &worker;
        info.spec = &spec;
    }
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_JOB_INFO;
    a.job_info =
        with_env ? &info : (Corral__JobInfo *)cr_msg_job_info_brief(&info, &brief, &spec, &worker);
    reply_to(c, id, &a);
    info_fini(&m);
    if (stored)
        corral__job_spec__free_unpacked(stored, NULL);
}

static void send_job_info(cr_conn_t *c, uint64_t id, void *key)
{
    job_info_answer(c, id, key, false);
}

static void send_job_info_env(cr_conn_t *c, uint64_t id, void *key)
{
    job_info_answer(c, id, key, true);
}

#define MAX_STATUS_WAIT_MS 30000 /* under the client's CORRAL_CALL_TIMEOUT_MS */

void req_job_status(cr_conn_t *c, const Corral__Envelope *e)
{
    job_t *j = job_find(e->job_status->job_id);
    if (!j) {
        cr_conn_reply_error(c, e->id, CR_ENOENT, "no job %s", e->job_status->job_id);
        return;
    }
    uint32_t wait = e->job_status->wait_ms;
    if (wait && !cr_job_state_is_final(j->state)) { /* answered by job_check_done */
        cr_waiters_add(&D.loop, c, e->id, j, wait < MAX_STATUS_WAIT_MS ? wait : MAX_STATUS_WAIT_MS,
                       e->job_status->with_env ? send_job_info_env : send_job_info);
        return;
    }
    job_info_answer(c, e->id, j, e->job_status->with_env);
}

static void info_one(const job_t *j, void (*fn)(void *ctx, const Corral__JobInfo *info), void *ctx)
{
    Corral__JobInfo info;
    info_mem_t m;
    info_fill(j, &info, &m);
    fn(ctx, &info);
    info_fini(&m);
}

void jobs_info_each(const char *only, void (*fn)(void *ctx, const Corral__JobInfo *info), void *ctx)
{
    if (only) { /* one job: found by its id, not by a walk of them all */
        const job_t *j = job_find(only);
        if (j && strcmp(j->idstr, only) == 0)
            info_one(j, fn, ctx);
        return;
    }
    for (size_t i = 0; i < D.jobs.n; i++)
        info_one(D.jobs.v[i], fn, ctx);
}

static bool list_wants(const Corral__JobList *q, const job_t *j, const cr_job_scope_t *scope)
{
    if (scope && strcmp(j->idstr, scope->job_id) && !is_child_of(j, scope->job_id))
        return false; /* a job credential lists its job and its children */
    bool want = q->n_states == 0;
    for (size_t s = 0; s < q->n_states; s++)
        want |= q->states[s] == job_state_proto[j->state];
    return want;
}

/* One page (head/page.c): the jobs of the asked states from the token's
 * id on, in id order, as many as limit allows and one frame holds. */
void req_job_list(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__JobList *q = e->job_list;
    const cr_job_scope_t *scope = cr_conn_job_scope(c);
    char msg[256], token[64] = "";
    int64_t from;
    int err = page_parse_id(q->continue_token, "jobs", &from, msg, sizeof(msg));
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "%s", msg);
        return;
    }
    size_t n = D.jobs.n, i = 0;
    while (i < n && D.jobs.v[i]->id < from) /* D.jobs is in id order */
        i++;
    size_t cap = page_cap(q->limit, n - i);
    Corral__JobInfo *infos = cr_calloc(cap + 1, sizeof(*infos));
    Corral__JobInfo **ptrs = cr_calloc(cap + 1, sizeof(*ptrs));
    info_mem_t *mem = cr_calloc(cap + 1, sizeof(*mem));
    size_t k = 0, budget = page_budget(), used = 0;
    for (; i < n && k < cap; i++) {
        const job_t *j = D.jobs.v[i];
        if (!list_wants(q, j, scope))
            continue;
        info_fill(j, &infos[k], &mem[k]);
        infos[k].spec = NULL; /* listings stay small */
        size_t cost = page_item_cost(corral__job_info__get_packed_size(&infos[k]));
        if (used + cost > budget) {
            info_fini(&mem[k]);
            if (k == 0) { /* it can never be listed: say so rather than loop */
                cr_conn_reply_error(c, e->id, CR_E2BIG,
                                    "job %s's record alone is larger than the frame limit",
                                    j->idstr);
                goto out;
            }
            break;
        }
        used += cost;
        ptrs[k] = &infos[k];
        k++;
    }
    uint32_t remaining = 0;
    for (size_t r = i; r < n; r++)
        if (list_wants(q, D.jobs.v[r], scope)) {
            if (!remaining++)
                page_token("jobs", D.jobs.v[r]->idstr, token, sizeof(token));
        }
    Corral__JobListReply r = CORRAL__JOB_LIST_REPLY__INIT;
    r.jobs = ptrs;
    r.n_jobs = k;
    r.continue_token = token;
    r.remaining = remaining;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_JOB_LIST_REPLY;
    a.job_list_reply = &r;
    reply(c, e, &a);
out:
    for (size_t x = 0; x < k; x++)
        info_fini(&mem[x]);
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

void req_job_stop(cr_conn_t *c, const Corral__Envelope *e)
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

void event(const char *kind, const job_t *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    event_v(kind, j ? j->id : 0, node_name(), fmt, ap);
    va_end(ap);
}

void jobs_stop_all(uint32_t grace_ms)
{
    for (size_t i = 0; i < D.jobs.n; i++)
        job_stop(D.jobs.v[i], grace_ms);
}

size_t jobs_count(cr_job_state_t s)
{
    return by_state[s];
}

void job_leave_group(job_t *j)
{
    if (!j->pg)
        return;
    for (int b = 0; b < pg_nbundles(j->pg); b++)
        pg_bundle_give(j->pg, b, j->idstr);
}

void jobs_node_lost(node_t *n, const char *why)
{
    for (size_t i = 0; i < D.jobs.n; i++) {
        job_t *j = D.jobs.v[i];
        for (int k = 0; k < j->n; k++)
            if (j->wk[k].node == n)
                worker_lost(&j->wk[k], why);
    }
}

void jobs_group_removed(pg_t *g)
{
    /* every job of the group stops before any lets go of it: a stop that
     * ends a job tries the queue, which must not start another of its jobs
     * in bundles about to go */
    for (size_t i = 0; i < D.jobs.n; i++)
        if (D.jobs.v[i]->pg == g && !cr_job_state_is_final(D.jobs.v[i]->state))
            job_stop(D.jobs.v[i], DEFAULT_GRACE_MS);
    for (size_t i = 0; i < D.jobs.n; i++) {
        job_t *j = D.jobs.v[i];
        if (j->pg != g)
            continue;
        job_leave_group(j);
        for (int k = 0; k < j->n; k++)
            j->wk[k].bundle = -1;
        j->pg = NULL;
    }
}

/* c closed: the jobs it submitted bound to it (an attached corral run)
 * and that have not ended stop, as srun's steps end with srun. */
void jobs_client_gone(cr_conn_t *c)
{
    for (size_t i = 0; i < bound.n;) {
        job_t *j = bound.v[i];
        if (j->owner != c) {
            i++;
            continue;
        }
        unbind(i);
        if (cr_job_state_is_final(j->state) || j->stopping)
            continue;
        event("client_gone", j, "the client that submitted it and waited on it is gone: stopping");
        job_stop(j, j->spec->grace_ms ? j->spec->grace_ms : DEFAULT_GRACE_MS);
    }
}

/* What each job that is not final waits for or holds, for the status:
 * the oldest HOLDERS_EACH pending ones and HOLDERS_EACH others. */
void jobs_holders(holders_t *h)
{
    uint32_t listed[2] = {0, 0}; /* pending, the others */
    for (size_t i = 0; i < live.n; i++) {
        const job_t *j = live.v[i];
        uint32_t *n = &listed[j->state == CR_JOB_PENDING ? 0 : 1];
        if (*n >= HOLDERS_EACH) {
            h->not_listed++;
            continue;
        }
        (*n)++;
        Corral__Holder *o =
            holder_new(h, "job", j->idstr, j->name, cr_job_state_name(j->state), job_reason(j));
        o->queue_position = queue_position(j);
        if (j->pg) {
            free(o->group);
            o->group = cr_strdup(pg_name(j->pg));
        }
        o->since_ms = j->submitted_ms;
        cr_buf_t b = {0};
        if (j->placement && !j->pg)
            bundles_held(j->bundles, j->n, &b);
        if (b.s) {
            free(o->held);
            o->held = b.s;
        }
    }
}
