/* corrald --head: the control service and the local agent of one node in
 * one process, on one libuv loop (DESIGN.md "Runtime", docs/runtime.md).
 *
 * It wires the tested blocks together: hw_discover describes the node,
 * sched places gangs on it, agent/launch starts and stops the workers,
 * head/state records jobs, workers and events, net serves clients on a
 * Unix socket and on TCP 127.0.0.1 behind the token handshake.
 *
 * The job table lives in memory and in state.db. A head started again on
 * the session of one that died (kill -9) reads it back and adopts the
 * workers that still run (recover(), docs/runtime.md "Recovery"). A failing worker fails the gang
 * (the others are stopped and the job takes its exit code) unless the job's restart policy has
 * restarts left: then, after a backoff on a libuv timer, that worker (RESTART_WORKER) or every
 * worker once the others are stopped (RESTART_GANG) is started again on the same devices. */
#include "agent/launch.h"
#include "daemon/waiters.h"
#include "head/state.h"
#include "hw/hw.h"
#include "net/net.h"
#include "sched/sched.h"
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_GRACE_MS 5000
#define SHUTDOWN_GRACE_MS 2000
#define LOG_CHUNK (64 * 1024)
#define LOG_MAX (8u << 20) /* the tail of a log file a JobLogs answer carries */
#define MAX_DEVS 64
#define DEFAULT_BACKOFF_MS 100 /* before the first restart, doubling */
#define MAX_BACKOFF_MS 5000

static const char usage_line[] = "usage: corrald --head [--hw-spec FILE] [--resources 'K=V,...'] "
                                 "[--labels 'k=v,...'] [--port N] [--block]\n";

typedef struct job job_t;
typedef struct adopt adopt_t;

typedef struct wk {
    job_t *job;
    int index;
    char id[48];
    cr_worker_t *w;
    Corral__WorkerState state;
    int pid;
    int64_t start_time;
    int exit_code, signal;
    char *reason;
    int devs[MAX_DEVS];
    size_t ndevs;
    char *out_path, *err_path;
    int attempt;      /* restarts of this worker so far: CORRAL_RESTART_COUNT */
    bool restart_due; /* to be started again when the backoff ends */
    char cause[96];   /* why it is restarted, for the event */
    adopt_t *ad;      /* a worker of a previous head, watched through a pidfd */
} wk_t;

struct job {
    int64_t id;
    char idstr[24];
    char *name;
    Corral__JobSpec *spec; /* a copy, packed and unpacked */
    cr_job_state_t state;
    char *reason;
    int exit_code;
    int64_t submitted_ms, finished_ms;
    int n;
    wk_t *wk;
    sched_bundle_t *bundles;
    uint64_t placement; /* 0: none held */
    bool stopping, failed;
    bool unknown_exit;    /* an adopted worker ended: its exit code cannot be known */
    int restarts;         /* done or scheduled, every worker and gang restart counted */
    bool restart_pending; /* a restart waits for its backoff (and, gang, the others' exit) */
    bool backoff_over;
    uv_timer_t *timer; /* the backoff; NULL until the first restart */
};

typedef struct daemon {
    uv_loop_t loop;
    cr_node_t *node;
    hw_options_t hwo;
    sched_cluster_t *cluster;
    sched_config_t scfg;
    sched_rng_t rng;
    cr_state_t *st;
    cr_net_t *net;
    uv_signal_t sig_term, sig_int;
    char *session, *logs, *sock, *address;
    int port;
    CR_VEC(job_t *) jobs;
    CR_VEC(job_t *) pending; /* waiting for resources, in arrival order */
    bool shutting_down, closed;
    bool reused; /* the session of a head that died: recover() reads it back */
    int running_workers;
    int exit_status;
} daemon_t;

static daemon_t D;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *node_name(void)
{
    return D.node->id[0] ? D.node->id : D.node->hostname;
}

/* ---------------------------------------------------------------- events */

static void event(const char *kind, const job_t *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void event(const char *kind, const job_t *j, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cr_state_event_t ev = {.time_ms = now_ms(),
                           .kind = (char *)kind,
                           .job_id = j ? j->id : 0,
                           .node_id = (char *)node_name(),
                           .message = msg};
    if (cr_state_event_append(D.st, &ev, NULL) < 0)
        cr_warn("events: %s", cr_state_errmsg(D.st));
    cr_info("%s%s%s: %s", kind, j ? " job " : "", j ? j->idstr : "", msg);
}

static void db_check(int err)
{
    if (err < 0)
        cr_warn("state: %s", cr_state_errmsg(D.st));
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
    case CORRAL__WORKER_STATE__WORKER_EXITED:
    case CORRAL__WORKER_STATE__WORKER_FAILED:
        return CR_WORKER_EXITED;
    default:
        return CR_WORKER_PENDING;
    }
}

/* Field 22 of /proc/PID/stat: with the pid it names the process for a
 * restarted head that re-adopts workers (0 when unreadable); *state gets
 * field 3 ('Z' for a zombie, 0 when unreadable). */
static int64_t proc_stat(int pid, char *state)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (state)
        *state = p && p[1] == ' ' ? p[2] : 0;
    for (int field = 2; p && field < 22; field++) /* p is at the end of field `field` */
        p = strchr(p + 1, ' ');
    return p ? strtoll(p + 1, NULL, 10) : 0;
}

static int64_t proc_start_time(int pid)
{
    return proc_stat(pid, NULL);
}

static void db_worker(const wk_t *w)
{
    cr_buf_t devs = {0};
    for (size_t i = 0; i < w->ndevs; i++)
        cr_buf_printf(&devs, "%s%d", i ? "," : "", w->devs[i]);
    cr_state_worker_t r = {.job_id = w->job->id,
                           .index = w->index,
                           .node_id = (char *)node_name(),
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

static void try_pending(void);
static void maybe_finish_shutdown(void);

static void job_set_state(job_t *j, cr_job_state_t s, const char *reason)
{
    char *copy = reason ? cr_strdup(reason) : NULL; /* reason may be j->reason */
    j->state = s;
    free(j->reason);
    j->reason = copy;
    db_check(cr_state_job_set_state(D.st, j->id, s, copy, now_ms()));
}

/* Every worker has ended: the job's final state, its devices back. */
static void job_check_done(job_t *j)
{
    for (int i = 0; i < j->n; i++)
        if (wk_alive(&j->wk[i]))
            return;
    if (cr_job_state_is_final(j->state) || j->restart_pending)
        return;
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
    if (j->placement) {
        sched_release(D.cluster, j->placement);
        j->placement = 0;
    }
    try_pending();
}

/* The first failure of a gang decides the job; the rest are stopped. */
static void job_fail(job_t *j, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void restart_cancel(job_t *j);
static void wk_stop(wk_t *w, uint64_t grace_ms);
static void adopt_release(adopt_t *a);
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
    j->exit_code = code;
    free(j->reason);
    j->reason = cr_strdup(msg);
    for (int i = 0; i < j->n; i++)
        wk_stop(&j->wk[i], j->spec->grace_ms ? j->spec->grace_ms : DEFAULT_GRACE_MS);
}

static void start_workers(job_t *j);
static bool start_one(job_t *j, wk_t *w);
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

/* Once the backoff is over and, for a gang, every worker has ended: the
 * workers due are started again on their devices. */
static void restart_check(job_t *j)
{
    if (!j->restart_pending || !j->backoff_over)
        return;
    for (int i = 0; i < j->n; i++)
        if (wk_alive(&j->wk[i]))
            if (j->spec->restart == CORRAL__RESTART_POLICY__RESTART_GANG)
                return;
    j->restart_pending = j->backoff_over = false;
    job_set_state(j, CR_JOB_RUNNING, NULL);
    for (int i = 0; i < j->n && !j->failed; i++) {
        wk_t *w = &j->wk[i];
        if (!w->restart_due)
            continue;
        w->restart_due = false;
        w->attempt++;
        if (w->w) {
            cr_worker_release(w->w); /* it has exited: only its memory */
            w->w = NULL;
        }
        if (w->ad) {
            adopt_release(w->ad);
            w->ad = NULL;
        }
        free(w->reason);
        free(w->out_path);
        free(w->err_path);
        w->reason = w->out_path = w->err_path = NULL;
        w->exit_code = w->signal = 0;
        event("restarted", j, "restarted worker %d (attempt %d of %u) after %s", i, j->restarts,
              j->spec->max_restarts, w->cause);
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
    bool gang = pol == CORRAL__RESTART_POLICY__RESTART_GANG;
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

static void on_worker_exit(cr_worker_t *cw, const cr_worker_exit_t *ex, void *arg)
{
    wk_t *w = arg;
    job_t *j = w->job;
    w->exit_code = (int)ex->code;
    w->signal = ex->signal;
    w->state =
        ex->stopped ? CORRAL__WORKER_STATE__WORKER_STOPPED : CORRAL__WORKER_STATE__WORKER_EXITED;
    D.running_workers--;
    db_worker(w);
    if (ex->signal)
        event("exited", j, "worker %d (pid %d) ended by signal %d%s", w->index, w->pid, ex->signal,
              ex->killed ? " after the grace period" : "");
    else
        event("exited", j, "worker %d (pid %d) exited with code %d", w->index, w->pid,
              (int)ex->code);
    if (!ex->stopped && (ex->signal || ex->code != 0)) {
        int code = ex->signal ? 128 + ex->signal : (int)ex->code;
        char cause[64];
        if (ex->signal)
            snprintf(cause, sizeof(cause), "signal %d", ex->signal);
        else
            snprintf(cause, sizeof(cause), "exit code %d", code);
        if (!restart_schedule(j, w, cause)) {
            if (j->spec->max_restarts && j->spec->restart != CORRAL__RESTART_POLICY__RESTART_NONE)
                job_fail(j, code, "worker %d ended with %s after %d restart(s), the limit",
                         w->index, cause, j->restarts);
            else if (ex->signal)
                job_fail(j, code, "worker %d ended by signal %d", w->index, ex->signal);
            else
                job_fail(j, code, "worker %d exited with code %d", w->index, code);
        }
    }
    restart_check(j);
    job_check_done(j);
    maybe_finish_shutdown();
}

/* ------------------------------------------------------ adopted workers */

/* A worker started by a previous head of this session, found running at
 * start: not our child, so its exit is seen through a pidfd (readable
 * once the process has exited) and its exit code is never known. Its
 * memory goes when both handles have closed. */
struct adopt {
    uv_poll_t poll;
    uv_timer_t timer; /* the grace period of a stop */
    int fd;
    int handles;
    bool stopping, done;
    wk_t *w; /* NULL once released */
};

static void adopt_closed(uv_handle_t *h)
{
    adopt_t *a = h->data;
    if (--a->handles == 0) {
        close(a->fd);
        free(a);
    }
}

/* Hands a back; one still running is killed, as cr_worker_release does. */
static void adopt_release(adopt_t *a)
{
    if (!a->done && a->w)
        kill(-a->w->pid, SIGKILL);
    a->w = NULL;
    uv_close((uv_handle_t *)&a->poll, adopt_closed);
    uv_close((uv_handle_t *)&a->timer, adopt_closed);
}

static void on_adopt_grace(uv_timer_t *t)
{
    adopt_t *a = t->data;
    if (!a->done && a->w)
        kill(-a->w->pid, SIGKILL);
}

static void on_adopt_exit(uv_poll_t *h, int status, int events)
{
    adopt_t *a = h->data;
    wk_t *w = a->w;
    if (a->done || !w)
        return;
    a->done = true;
    uv_poll_stop(&a->poll);
    uv_timer_stop(&a->timer);
    kill(-w->pid, SIGKILL); /* what the leader left in its group, as launch does */
    job_t *j = w->job;
    w->state =
        a->stopping ? CORRAL__WORKER_STATE__WORKER_STOPPED : CORRAL__WORKER_STATE__WORKER_EXITED;
    w->exit_code = -1; /* unknown: recorded as -1 */
    w->signal = 0;
    free(w->reason);
    w->reason = cr_strdup("exited (code unknown: adopted after a head restart)");
    if (!a->stopping)
        j->unknown_exit = true;
    D.running_workers--;
    db_worker(w);
    event("exited", j, "worker %d (pid %d) %s%s", w->index, w->pid, w->reason,
          a->stopping ? ", stopped on request" : "");
    restart_check(j);
    job_check_done(j);
    maybe_finish_shutdown();
}

/* Watches w's process (pid and start time checked by the caller); false
 * when it is already gone. */
static bool adopt(wk_t *w)
{
    int fd = (int)syscall(SYS_pidfd_open, w->pid, 0);
    if (fd < 0)
        return false;
    char state = 0; /* the pid may have been reused between the check and the open */
    if (proc_stat(w->pid, &state) != w->start_time || state == 'Z') {
        close(fd);
        return false;
    }
    adopt_t *a = cr_calloc(1, sizeof(*a));
    a->fd = fd;
    a->w = w;
    a->handles = 2;
    if (uv_poll_init(&D.loop, &a->poll, fd) < 0) {
        close(fd);
        free(a);
        return false;
    }
    uv_timer_init(&D.loop, &a->timer);
    a->poll.data = a->timer.data = a;
    uv_poll_start(&a->poll, UV_READABLE, on_adopt_exit);
    w->ad = a;
    return true;
}

/* SIGTERM to the group, SIGKILL after grace_ms, as cr_worker_stop. */
static void adopt_stop(adopt_t *a, uint64_t grace_ms)
{
    if (a->done || !a->w)
        return;
    a->stopping = true;
    kill(-a->w->pid, grace_ms ? SIGTERM : SIGKILL);
    if (grace_ms && !uv_is_active((uv_handle_t *)&a->timer))
        uv_timer_start(&a->timer, on_adopt_grace, grace_ms, 0);
}

static void wk_stop(wk_t *w, uint64_t grace_ms)
{
    if (!wk_alive(w))
        return;
    if (w->w)
        cr_worker_stop(w->w, grace_ms);
    else if (w->ad)
        adopt_stop(w->ad, grace_ms);
}

/* Starts worker w on its devices (w->devs); false, with the job failed,
 * when it cannot start. */
static bool start_one(job_t *j, wk_t *w)
{
    const Corral__WorkerSpec *ws = j->spec->worker;
    char **argv = cr_calloc(ws->n_argv + 1, sizeof(*argv));
    for (size_t i = 0; i < ws->n_argv; i++)
        argv[i] = ws->argv[i];
    cr_envlist_t env = {0};
    for (size_t i = 0; i < ws->n_env; i++) {
        cr_kv_t *kv = CR_VEC_PUSH(&env.vars);
        kv->key = ws->env[i]->key;
        kv->value = ws->env[i]->value;
    }
    char count[16];
    snprintf(count, sizeof(count), "%d", w->attempt);
    cr_kv_t *kv = CR_VEC_PUSH(&env.vars); /* last: it wins over the job's */
    kv->key = (char *)"CORRAL_RESTART_COUNT";
    kv->value = count;
    int i = w->index;
    cr_worker_spec_t s = {.argv = (const char *const *)argv,
                          .cwd = ws->cwd && ws->cwd[0] ? ws->cwd : NULL,
                          .env = &env,
                          .inherit_env = true,
                          .node = D.node,
                          .hw = &D.hwo,
                          .devs = w->devs,
                          .ndevs = w->ndevs,
                          .job_id = j->idstr,
                          .worker_id = w->id,
                          .worker_index = i,
                          .agent_socket = D.sock,
                          .log_dir = D.logs,
                          .bind = j->spec->bind == CORRAL__BIND__BIND_NONE ? CR_BIND_NONE
                                                                           : CR_BIND_CLOSEST};
    char *errmsg = NULL;
    int err = cr_worker_start(&D.loop, &s, on_worker_exit, w, &w->w, &errmsg);
    free(argv);
    CR_VEC_FREE(&env.vars);
    if (err < 0) {
        w->w = NULL;
        w->state = CORRAL__WORKER_STATE__WORKER_FAILED;
        w->reason = errmsg ? errmsg : cr_strdup(cr_strerror(err));
        w->exit_code = 127;
        db_worker(w);
        event("failed", j, "worker %d: %s", i, w->reason);
        job_fail(j, 127, "worker %d: %s", i, w->reason);
        return false;
    }
    free(errmsg);
    w->pid = cr_worker_pid(w->w);
    w->start_time = proc_start_time(w->pid);
    w->state = CORRAL__WORKER_STATE__WORKER_RUNNING;
    if (cr_worker_stdout_path(w->w))
        w->out_path = cr_strdup(cr_worker_stdout_path(w->w));
    if (cr_worker_stderr_path(w->w))
        w->err_path = cr_strdup(cr_worker_stderr_path(w->w));
    D.running_workers++;
    db_worker(w);
    const char *warn = cr_worker_warning(w->w);
    cr_buf_t devs = {0};
    for (size_t k = 0; k < w->ndevs; k++)
        cr_buf_printf(&devs, "%s%d", k ? "," : "", w->devs[k]);
    event("started", j, "worker %d pid %d devices [%s] cpus %s%s%s", i, w->pid,
          devs.s ? devs.s : "", cr_worker_cpus(w->w)[0] ? cr_worker_cpus(w->w) : "-",
          warn ? ": " : "", warn ? warn : "");
    cr_buf_free(&devs);
    return true;
}

static void start_workers(job_t *j)
{
    const sched_placement_t *p = sched_placement_get(D.cluster, j->placement);
    job_set_state(j, CR_JOB_RUNNING, NULL);
    for (int i = 0; i < j->n && !j->failed; i++) {
        wk_t *w = &j->wk[i];
        w->ndevs =
            p ? sched_alloc_devices(D.cluster, sched__alloc(p, (uint32_t)i), w->devs, MAX_DEVS) : 0;
        if (w->ndevs > MAX_DEVS)
            w->ndevs = MAX_DEVS;
        if (!start_one(j, w))
            break;
    }
    /* workers never started because an earlier one failed */
    for (int i = 0; i < j->n; i++)
        if (j->wk[i].state == CORRAL__WORKER_STATE__WORKER_UNSPECIFIED) {
            j->wk[i].state = CORRAL__WORKER_STATE__WORKER_FAILED;
            j->wk[i].reason = cr_strdup("not started: an earlier worker of the gang failed");
        }
    job_check_done(j);
}

/* ------------------------------------------------------------- placement */

/* RETRY keeps the job pending; INFEASIBLE is refused before it gets here. */
static sched_status_t place(job_t *j, char *reason, size_t size)
{
    sched_request_t r = {.nbundles = (uint32_t)j->n,
                         .bundles = j->bundles,
                         .policy = SCHED_HYBRID,
                         .strategy = SCHED_PACK,
                         .domain_key = -1,
                         .affinity_node = -1};
    sched_result_t res;
    int err = sched_schedule(D.cluster, &D.scfg, &r, &D.rng, &res);
    if (err < 0) {
        snprintf(reason, size, "scheduler error: %s", cr_strerror(err));
        return SCHED_INFEASIBLE;
    }
    if (res.status == SCHED_OK)
        j->placement = res.placement;
    snprintf(reason, size, "%s", res.reason);
    return res.status;
}

static void try_pending(void)
{
    size_t keep = 0;
    for (size_t i = 0; i < D.pending.n; i++) {
        job_t *j = D.pending.v[i];
        char why[256];
        if (D.shutting_down || j->stopping || place(j, why, sizeof(why)) != SCHED_OK) {
            D.pending.v[keep++] = j;
            continue;
        }
        event("placed", j, "%d worker(s) on %s", j->n, node_name());
        start_workers(j);
    }
    D.pending.n = keep;
}

/* Parses the spec's resources into one bundle request; CR_EINFEASIBLE
 * with why for names this node does not have. */
static int build_request(const Corral__JobSpec *s, sched_resreq_t *req, char *why, size_t size)
{
    memset(req, 0, sizeof(*req));
    const Corral__WorkerSpec *ws = s->worker;
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
        if (j->wk[i].w)
            cr_worker_release(j->wk[i].w);
        if (j->wk[i].ad)
            adopt_release(j->wk[i].ad);
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

static job_t *job_find(const char *id)
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
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", pb[i]);
    hex[2 * len] = '\0';
    json_object_set_new(o, "pb", json_string(hex));
    free(hex);
    free(pb);
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out;
}

static void reply(cr_conn_t *c, const Corral__Envelope *req, Corral__Envelope *ans)
{
    ans->reply_to = req->id;
    int err = cr_conn_send(c, ans);
    if (err < 0)
        cr_warn("reply to %s: %s", cr_conn_peer(c), cr_strerror(err));
}

static const cr_restart_policy_t restart_policy_db[] = {
    [CORRAL__RESTART_POLICY__RESTART_NONE] = CR_RESTART_NONE,
    [CORRAL__RESTART_POLICY__RESTART_WORKER] = CR_RESTART_WORKER,
    [CORRAL__RESTART_POLICY__RESTART_GANG] = CR_RESTART_GANG,
};

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
    if (s->placement_group && s->placement_group[0]) {
        cr_conn_reply_error(c, e->id, CR_ENOSYS, "placement groups are not supported yet");
        return;
    }
    sched_resreq_t req;
    int err = build_request(s, &req, why, sizeof(why));
    if (err < 0) {
        event("refused", NULL, "%s", why);
        cr_conn_reply_error(c, e->id, err, "%s", why);
        return;
    }
    job_t *j = cr_calloc(1, sizeof(*j));
    j->n = s->num_workers ? (int)s->num_workers : 1;
    j->bundles = cr_calloc((size_t)j->n, sizeof(*j->bundles));
    for (int i = 0; i < j->n; i++)
        j->bundles[i].req = req;
    /* a private copy of the spec outlives the borrowed envelope */
    size_t len = corral__job_spec__get_packed_size(s);
    uint8_t *buf = cr_malloc(len ? len : 1);
    corral__job_spec__pack(s, buf);
    j->spec = corral__job_spec__unpack(NULL, len, buf);
    free(buf);
    j->name = cr_strdup(s->name && s->name[0] ? s->name : s->worker->argv[0]);
    j->submitted_ms = now_ms();

    char reason[256];
    sched_status_t st = place(j, reason, sizeof(reason));
    if (st == SCHED_INFEASIBLE) {
        event("infeasible", NULL, "%s: %s", j->name, reason);
        cr_conn_reply_error(c, e->id, CR_EINFEASIBLE, "cannot place %d worker(s): %s", j->n,
                            reason);
        job_free(j);
        return;
    }
    char *sj = spec_json(s);
    cr_state_job_t row = {.name = j->name,
                          .spec_json = sj,
                          .state = CR_JOB_PENDING,
                          .restart_policy = restart_policy_db[s->restart],
                          .max_restarts = (int)s->max_restarts};
    err = cr_state_job_create(D.st, &row, j->submitted_ms, &j->id);
    free(sj);
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "cannot record the job: %s", cr_state_errmsg(D.st));
        if (j->placement)
            sched_release(D.cluster, j->placement);
        job_free(j);
        return;
    }
    snprintf(j->idstr, sizeof(j->idstr), "%lld", (long long)j->id);
    j->wk = cr_calloc((size_t)j->n, sizeof(*j->wk));
    for (int i = 0; i < j->n; i++) {
        wk_t *w = &j->wk[i];
        w->job = j;
        w->index = i;
        snprintf(w->id, sizeof(w->id), "job%s-w%d", j->idstr, i);
        cr_state_worker_t wr = {.job_id = j->id, .index = i, .state = CR_WORKER_PENDING};
        db_check(cr_state_worker_create(D.st, &wr, j->submitted_ms));
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
        event("placed", j, "%d worker(s) on %s", j->n, node_name());
        start_workers(j);
    } else {
        event("pending", j, "%s", reason);
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
        s->node_id = (char *)node_name();
        s->state = w->state ? w->state : CORRAL__WORKER_STATE__WORKER_STARTING;
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

static void job_stop(job_t *j, uint32_t grace_ms)
{
    if (cr_job_state_is_final(j->state))
        return;
    j->stopping = true;
    restart_cancel(j);
    for (size_t i = 0; i < D.pending.n; i++)
        if (D.pending.v[i] == j) {
            memmove(&D.pending.v[i], &D.pending.v[i + 1],
                    (D.pending.n - i - 1) * sizeof(*D.pending.v));
            D.pending.n--;
            break;
        }
    for (int i = 0; i < j->n; i++) {
        wk_t *w = &j->wk[i];
        if (wk_alive(w) && (w->w || w->ad))
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
    Corral__Ack ack = CORRAL__ACK__INIT;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_ACK;
    a.ack = &ack;
    reply(c, e, &a);
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
    if (q->follow) {
        cr_conn_reply_error(c, e->id, CR_ENOSYS, "following logs is not supported yet");
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

typedef struct node_mem {
    Corral__Quantity *q;
    Corral__Quantity **tot, **fr;
    Corral__KeyValue *kv;
    Corral__KeyValue **kvp;
} node_mem_t;

static void node_fill(Corral__NodeInfo *ni, node_mem_t *m, bool with_json)
{
    corral__node_info__init(ni);
    const sched_cluster_t *c = D.cluster;
    size_t nres = (size_t)c->nres;
    m->q = cr_calloc(2 * nres + 1, sizeof(*m->q));
    m->tot = cr_calloc(nres + 1, sizeof(*m->tot));
    m->fr = cr_calloc(nres + 1, sizeof(*m->fr));
    size_t k = 0;
    for (size_t r = 0; r < nres; r++) {
        int64_t total = c->total[r * c->nnodes];
        if (total <= 0)
            continue;
        Corral__Quantity *t = &m->q[2 * k], *f = &m->q[2 * k + 1];
        corral__quantity__init(t);
        corral__quantity__init(f);
        t->name = f->name = c->res.str[r];
        t->amount = total;
        f->amount = c->avail[r * c->nnodes];
        m->tot[k] = t;
        m->fr[k] = f;
        k++;
    }
    ni->total = m->tot;
    ni->n_total = k;
    ni->free = m->fr;
    ni->n_free = k;
    m->kv = cr_calloc(D.node->labels.n + 1, sizeof(*m->kv));
    m->kvp = cr_calloc(D.node->labels.n + 1, sizeof(*m->kvp));
    for (size_t i = 0; i < D.node->labels.n; i++) {
        corral__key_value__init(&m->kv[i]);
        m->kv[i].key = D.node->labels.v[i].key;
        m->kv[i].value = D.node->labels.v[i].value;
        m->kvp[i] = &m->kv[i];
    }
    ni->labels = m->kvp;
    ni->n_labels = D.node->labels.n;
    ni->node_id = (char *)node_name();
    ni->state = CORRAL__NODE_STATE__NODE_ALIVE;
    ni->incarnation = (uint64_t)cr_state_generation(D.st);
    ni->address = D.address;
    ni->last_seen_ms = now_ms();
    ni->node_json = NULL;
    if (with_json) {
        json_t *jn = hw_node_to_json(D.node);
        ni->node_json = json_dumps(jn, JSON_COMPACT);
        json_decref(jn);
    }
}

static void node_fini(Corral__NodeInfo *ni, node_mem_t *m)
{
    free(m->q);
    free(m->tot);
    free(m->fr);
    free(m->kv);
    free(m->kvp);
    free(ni->node_json);
}

static void h_status(cr_conn_t *c, const Corral__Envelope *e)
{
    Corral__NodeInfo ni, *nip = &ni;
    node_mem_t m;
    node_fill(&ni, &m, false);
    Corral__ClusterStatus s = CORRAL__CLUSTER_STATUS__INIT;
    s.head_address = D.address;
    s.nodes = &nip;
    s.n_nodes = 1;
    s.total = ni.total; /* one node: the cluster is the node */
    s.n_total = ni.n_total;
    s.free = ni.free;
    s.n_free = ni.n_free;
    for (size_t i = 0; i < D.jobs.n; i++) {
        s.pending_jobs += D.jobs.v[i]->state == CR_JOB_PENDING;
        s.running_jobs += D.jobs.v[i]->state == CR_JOB_RUNNING;
    }
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_CLUSTER_STATUS;
    a.cluster_status = &s;
    reply(c, e, &a);
    node_fini(&ni, &m);
}

static void h_node_list(cr_conn_t *c, const Corral__Envelope *e)
{
    Corral__NodeInfo ni, *nip = &ni;
    node_mem_t m;
    node_fill(&ni, &m, e->node_list->with_json);
    Corral__NodeListReply r = CORRAL__NODE_LIST_REPLY__INIT;
    r.nodes = &nip;
    r.n_nodes = 1;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_NODE_LIST_REPLY;
    a.node_list_reply = &r;
    reply(c, e, &a);
    node_fini(&ni, &m);
}

static void h_events(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__EventsRequest *q = e->events_request;
    if (q->follow) {
        cr_conn_reply_error(c, e->id, CR_ENOSYS, "following events is not supported yet");
        return;
    }
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
    free(ids);
    free(p);
    free(evs);
    cr_state_event_list_free(v, n);
}

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
    bool okhex = hex && strlen(hex) % 2 == 0;
    for (size_t i = 0; okhex && i < len; i++) {
        unsigned v;
        okhex = sscanf(hex + 2 * i, "%2x", &v) == 1;
        pb[i] = (uint8_t)v;
    }
    if (okhex)
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
    j->bundles = cr_calloc((size_t)j->n, sizeof(*j->bundles));
    sched_resreq_t req;
    char why[256];
    if (build_request(spec, &req, why, sizeof(why)) == 0)
        for (int i = 0; i < j->n; i++)
            j->bundles[i].req = req;
    j->wk = cr_calloc((size_t)j->n, sizeof(*j->wk));
    for (int i = 0; i < j->n; i++) {
        j->wk[i].job = j;
        j->wk[i].index = i;
        snprintf(j->wk[i].id, sizeof(j->wk[i].id), "job%s-w%d", j->idstr, i);
    }
    cr_state_worker_t *v = NULL;
    size_t n = 0;
    db_check(cr_state_worker_list(D.st, j->id, NULL, &v, &n));
    for (size_t k = 0; k < n; k++) {
        if (v[k].index < 0 || v[k].index >= j->n)
            continue;
        wk_t *w = &j->wk[v[k].index];
        w->state = worker_state_proto[v[k].state];
        w->pid = v[k].pid;
        w->start_time = v[k].start_time;
        w->exit_code = v[k].exit_code;
        w->signal = v[k].exit_signal;
        w->attempt = v[k].restarts;
        w->out_path = v[k].stdout_path ? cr_strdup(v[k].stdout_path) : NULL;
        w->err_path = v[k].stderr_path ? cr_strdup(v[k].stderr_path) : NULL;
        for (char *p = v[k].devices, *end; p && *p && w->ndevs < MAX_DEVS; p = end + 1) {
            long d = strtol(p, &end, 10);
            if (end == p)
                break;
            w->devs[w->ndevs++] = (int)d;
            if (*end != ',')
                break;
        }
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

/* A job that was running: each worker recorded running is adopted when
 * its pid still names the same process (same start time), else lost; a
 * job with a lost worker fails (its adopted ones are stopped). */
static void job_recover(job_t *j)
{
    int adopted = 0, lost = 0, first_lost = -1;
    for (int i = 0; i < j->n; i++) {
        wk_t *w = &j->wk[i];
        const char *gone = NULL;
        if (w->state == CORRAL__WORKER_STATE__WORKER_UNSPECIFIED) {
            gone = "it had not been started";
        } else if (wk_alive(w)) {
            char state = 0;
            int64_t st = w->pid > 0 ? proc_stat(w->pid, &state) : 0;
            if (st == 0 || state == 'Z')
                gone = "its process is gone";
            else if (st != w->start_time)
                gone = "its pid now names another process";
            else if (!adopt(w))
                gone = "its process is gone";
        } else {
            continue;
        }
        if (gone) {
            lost++;
            if (first_lost < 0)
                first_lost = i;
            w->state = CORRAL__WORKER_STATE__WORKER_LOST;
            free(w->reason);
            w->reason = cr_asprintf("lost in a head restart: %s", gone);
            cr_state_worker_t r;
            if (cr_state_worker_get(D.st, j->id, i, &r) == 0) {
                r.state = CR_WORKER_LOST;
                db_check(cr_state_worker_update(D.st, &r, now_ms()));
                cr_state_worker_free(&r);
            }
            event("lost", j, "worker %d lost: %s", i, gone);
        } else {
            adopted++;
            D.running_workers++;
            event("adopted", j, "adopted worker %d (pid %d)", i, w->pid);
        }
    }
    /* its resources again, as the scheduler sees them */
    char why[256];
    if (adopted && place(j, why, sizeof(why)) != SCHED_OK)
        event("warning", j, "the adopted workers' resources cannot be reserved again: %s", why);
    /* the scheduler has no call to take given devices: placement is run
     * again (jobs in id order, as first placed) and a difference is said */
    const sched_placement_t *p = j->placement ? sched_placement_get(D.cluster, j->placement) : NULL;
    for (int i = 0; p && i < j->n; i++) {
        int devs[MAX_DEVS];
        size_t nd = sched_alloc_devices(D.cluster, sched__alloc(p, (uint32_t)i), devs, MAX_DEVS);
        nd = nd < MAX_DEVS ? nd : MAX_DEVS;
        if (j->wk[i].ad && (nd != j->wk[i].ndevs || memcmp(devs, j->wk[i].devs, nd * sizeof(int))))
            event("warning", j,
                  "worker %d: the devices reserved again differ from the ones it runs on", i);
    }
    if (lost) {
        job_fail(j, 255, "lost in a head restart: worker %d %s", first_lost,
                 j->wk[first_lost].reason + strlen("lost in a head restart: "));
    } else {
        /* a worker that had failed: its restart was due (or the outcome
         * unrecorded); the job fails and the others are stopped */
        for (int i = 0; i < j->n && !j->failed; i++) {
            const wk_t *w = &j->wk[i];
            if (w->state == CORRAL__WORKER_STATE__WORKER_EXITED && (w->signal || w->exit_code))
                job_fail(j, w->signal ? 128 + w->signal : w->exit_code,
                         "lost in a head restart: worker %d had ended with %s %d", i,
                         w->signal ? "signal" : "exit code", w->signal ? w->signal : w->exit_code);
        }
    }
    if (adopted && !j->failed)
        job_set_state(j, CR_JOB_RUNNING, "adopted after a head restart");
    job_check_done(j);
}

/* Reads the session's jobs back after a head died: finished ones as they
 * were, running ones adopted or failed, pending ones queued again. */
static void recover(void)
{
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
    try_pending();
}

/* -------------------------------------------------------------- shutdown */

static void net_closed(void *data)
{
    D.closed = true;
}

static void maybe_finish_shutdown(void)
{
    if (!D.shutting_down || D.running_workers > 0 || D.closed || !D.net)
        return;
    cr_net_t *n = D.net;
    D.net = NULL;
    uv_close((uv_handle_t *)&D.sig_term, NULL);
    uv_close((uv_handle_t *)&D.sig_int, NULL);
    cr_net_close(n, net_closed, NULL);
}

static void begin_shutdown(const char *why)
{
    if (D.shutting_down)
        return;
    D.shutting_down = true;
    event("shutdown", NULL, "%s: stopping %d worker(s)", why, D.running_workers);
    for (size_t i = 0; i < D.jobs.n; i++)
        job_stop(D.jobs.v[i], SHUTDOWN_GRACE_MS);
    maybe_finish_shutdown();
}

static void on_signal(uv_signal_t *h, int signum)
{
    begin_shutdown(signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void h_shutdown(cr_conn_t *c, const Corral__Envelope *e)
{
    Corral__Ack ack = CORRAL__ACK__INIT;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_ACK;
    a.ack = &ack;
    reply(c, e, &a);
    begin_shutdown("corral stop");
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
};

static void on_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(handlers); i++)
        if (handlers[i].body == e->body_case) {
            handlers[i].fn(c, e);
            return;
        }
    cr_conn_reply_error(c, e->id, CR_ENOSYS, "%s is not served by this head yet",
                        cr_msg_name(e->body_case));
}

static void on_ready(cr_conn_t *c, void *data)
{
    cr_debug("client %s connected", cr_conn_peer(c));
}

static void on_close(cr_conn_t *c, int err, void *data)
{
    cr_waiters_drop_conn(c);
    if (err && err != CR_EACCES)
        cr_info("connection %s closed: %s", cr_conn_peer(c), cr_strerror(err));
    else if (err == CR_EACCES)
        cr_warn("connection %s refused: bad token", cr_conn_peer(c));
}

/* --------------------------------------------------------------- startup */

static int parse_kv_list(const char *s, const char *what, int (*fn)(const char *k, const char *v))
{
    char *dup = cr_strdup(s), *save = NULL;
    int err = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) {
            fprintf(stderr, "corrald: --%s: expected K=V, got '%s'\n", what, tok);
            err = CR_EINVAL;
            break;
        }
        *eq = '\0';
        if ((err = fn(tok, eq + 1)) < 0)
            break;
    }
    free(dup);
    return err;
}

static int set_resource(const char *k, const char *v)
{
    int64_t q;
    sched_err_t se;
    if (sched_parse_qty(v, strlen(v), &q, &se) < 0) {
        fprintf(stderr, "corrald: --resources: %s=%s: %s\n", k, v, se.msg);
        return CR_EINVAL;
    }
    if (strlen(k) >= sizeof(D.node->resources.v[0].name)) {
        fprintf(stderr, "corrald: --resources: name '%s' is too long\n", k);
        return CR_EINVAL;
    }
    for (size_t i = 0; i < D.node->resources.n; i++)
        if (strcmp(D.node->resources.v[i].name, k) == 0) {
            D.node->resources.v[i].amount = q;
            return 0;
        }
    cr_resource_t *r = CR_VEC_PUSH(&D.node->resources);
    snprintf(r->name, sizeof(r->name), "%s", k);
    r->amount = q;
    return 0;
}

static int set_label(const char *k, const char *v)
{
    for (size_t i = 0; i < D.node->labels.n; i++)
        if (strcmp(D.node->labels.v[i].key, k) == 0) {
            free(D.node->labels.v[i].value);
            D.node->labels.v[i].value = cr_strdup(v);
            return 0;
        }
    cr_kv_t *kv = CR_VEC_PUSH(&D.node->labels);
    kv->key = cr_strdup(k);
    kv->value = cr_strdup(v);
    return 0;
}

/* Whether pid runs; a zombie does not (nobody may reap a head that died). */
static bool pid_alive(int pid)
{
    char state = 0;
    return kill(pid, 0) == 0 && proc_stat(pid, &state) != 0 && state != 'Z';
}

/* When session_latest names the session of a head that died (its
 * corrald.pid names no live process; a clean exit removes the file) and
 * holds its state.db, this head takes it over, token included. */
static bool reuse_session(const char *home)
{
    char *link = cr_asprintf("%s/session_latest", home);
    char target[512];
    ssize_t len = readlink(link, target, sizeof(target) - 1);
    free(link);
    if (len <= 0 || memchr(target, '/', (size_t)len))
        return false;
    target[len] = '\0';
    char *dir = cr_asprintf("%s/%s", home, target);
    char *pidf = cr_asprintf("%s/corrald.pid", dir), *db = cr_asprintf("%s/state.db", dir);
    FILE *fp = fopen(pidf, "r");
    int pid = 0;
    if (fp) {
        if (fscanf(fp, "%d", &pid) != 1)
            pid = 0;
        fclose(fp);
    }
    bool reuse = pid > 0 && !pid_alive(pid) && access(db, R_OK | W_OK) == 0;
    free(pidf);
    free(db);
    if (!reuse) {
        free(dir);
        return false;
    }
    D.session = dir;
    D.reused = true;
    D.logs = cr_asprintf("%s/logs", D.session);
    D.sock = cr_asprintf("%s/corrald.sock", D.session);
    if (mkdir(D.logs, 0700) < 0 && errno != EEXIST)
        fprintf(stderr, "corrald: cannot create %s: %s\n", D.logs, strerror(errno));
    unlink(D.sock); /* the dead head's */
    fprintf(stderr, "corrald: taking over the session %s of a head that died (pid %d)\n", D.session,
            pid);
    return true;
}

/* $CORRAL_HOME/session_<time>_<pid>/ with logs/, and session_latest
 * pointing at it (or the session of a head that died, reuse_session). Any failure here is reported
 * now, not at the first job. */
static int make_session(void)
{
    const char *home = getenv("CORRAL_HOME");
    if (!home || !home[0])
        home = "/tmp/corral";
    if (mkdir(home, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "corrald: cannot create %s: %s (set CORRAL_HOME to a writable directory)\n",
                home, strerror(errno));
        return -errno;
    }
    if (reuse_session(home))
        return 0;
    char stamp[64];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%d_%H-%M-%S", &tm);
    D.session = cr_asprintf("%s/session_%s_%d", home, stamp, (int)getpid());
    if (mkdir(D.session, 0700) < 0) {
        fprintf(stderr,
                "corrald: cannot create the session directory %s: %s (set CORRAL_HOME to a "
                "writable directory)\n",
                D.session, strerror(errno));
        return -errno;
    }
    D.logs = cr_asprintf("%s/logs", D.session);
    if (mkdir(D.logs, 0700) < 0) {
        fprintf(stderr, "corrald: cannot create %s: %s\n", D.logs, strerror(errno));
        return -errno;
    }
    D.sock = cr_asprintf("%s/corrald.sock", D.session);
    if (strlen(D.sock) >= 108) {
        fprintf(stderr,
                "corrald: the socket path %s is too long for a Unix socket; use a shorter "
                "CORRAL_HOME\n",
                D.sock);
        return CR_E2BIG;
    }
    /* the link is replaced atomically: a client never finds it missing */
    char *tmp = cr_asprintf("%s/.session_latest.%d", home, (int)getpid());
    char *link = cr_asprintf("%s/session_latest", home);
    const char *base = strrchr(D.session, '/') + 1;
    int err = 0;
    unlink(tmp);
    if (symlink(base, tmp) < 0 || rename(tmp, link) < 0) {
        fprintf(stderr, "corrald: cannot point %s at %s: %s\n", link, base, strerror(errno));
        err = -errno;
        unlink(tmp);
    }
    free(tmp);
    free(link);
    return err;
}

static int write_file(const char *name, const char *text)
{
    char *path = cr_asprintf("%s/%s", D.session, name);
    FILE *fp = fopen(path, "w");
    int err = 0;
    if (!fp || fputs(text, fp) < 0) {
        fprintf(stderr, "corrald: cannot write %s: %s\n", path, strerror(errno));
        err = CR_EIO;
    }
    if (fp && fclose(fp) != 0 && !err) {
        fprintf(stderr, "corrald: cannot write %s: %s\n", path, strerror(errno));
        err = CR_EIO;
    }
    free(path);
    return err;
}

static void usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "corrald: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage_line);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"head", no_argument, 0, 'H'},
        {"hw-spec", required_argument, 0, 's'},
        {"resources", required_argument, 0, 'r'},
        {"labels", required_argument, 0, 'l'},
        {"port", required_argument, 0, 'p'},
        {"block", no_argument, 0, 'b'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *spec = NULL, *resources = NULL, *labels = NULL;
    bool head = false;
    int port = 0, opt, rc = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'H':
            head = true;
            break;
        case 's':
            spec = optarg;
            break;
        case 'r':
            resources = optarg;
            break;
        case 'l':
            labels = optarg;
            break;
        case 'b':
            break; /* corrald always runs in the foreground; corral start detaches it */
        case 'p': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 0 || v > 65535) {
                usage_error("--port: expected 0..65535, got '%s'", optarg);
                return 2;
            }
            port = (int)v;
            break;
        }
        case 'h':
            fputs(usage_line, stdout);
            return 0;
        default:
            usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
            return 2;
        }
    }
    if (!head || optind < argc) {
        usage_error("%s", !head ? "only --head is supported for now (agents joining a head come "
                                  "with the multi-node issue)"
                                : "unexpected arguments");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    D.hwo.spec_path = spec;
    char *msg = NULL;
    if (hw_discover(&D.hwo, &D.node, &msg) < 0) {
        fprintf(stderr, "corrald: %s\n", msg ? msg : "discovery failed");
        free(msg);
        goto out;
    }
    if (resources && parse_kv_list(resources, "resources", set_resource) < 0)
        goto out;
    if (labels && parse_kv_list(labels, "labels", set_label) < 0)
        goto out;
    if (labels)
        hw_node_sort_labels(D.node);

    D.cluster = sched_cluster_new();
    char why[256];
    if (sched_cluster_add(D.cluster, D.node, why, sizeof(why)) < 0 ||
        sched_cluster_finalize(D.cluster) < 0) {
        fprintf(stderr, "corrald: the scheduler cannot represent this node: %s\n", why);
        goto out;
    }
    D.scfg = (sched_config_t){.top_k = 1, .spread_threshold_pct = 50};
    D.rng.s = (uint64_t)getpid();

    /* the session once the node is known (a bad spec does not move
     * session_latest); an unwritable CORRAL_HOME is still reported at start */
    if (make_session() < 0)
        goto out;
    char *logfile = cr_asprintf("%s/corrald.log", D.logs);
    if (cr_log_set_file(logfile) < 0)
        fprintf(stderr, "corrald: cannot log to %s; logging to stderr\n", logfile);
    free(logfile);

    char *dbpath = cr_asprintf("%s/state.db", D.session);
    char err[CR_STATE_ERRMSG_MAX];
    int e = cr_state_open(dbpath, &D.st, err, sizeof(err));
    free(dbpath);
    if (e < 0) {
        fprintf(stderr, "corrald: %s\n", err);
        goto out;
    }
    json_t *nj = hw_node_to_json(D.node);
    char *njs = json_dumps(nj, JSON_COMPACT);
    json_decref(nj);
    cr_state_node_t nrow = {.id = (char *)node_name(),
                            .incarnation = 1,
                            .address = "local",
                            .state = CR_NODE_ALIVE,
                            .desc_json = njs};
    db_check(cr_state_node_put(D.st, &nrow, now_ms()));
    free(njs);

    uint8_t token[CR_TOKEN_LEN];
    char *tokpath = cr_asprintf("%s/token", D.session);
    if (D.reused) { /* clients of the dead head keep their token */
        e = cr_token_read(tokpath, token);
    } else {
        e = cr_token_generate(token);
        if (e == 0)
            e = cr_token_write(tokpath, token);
    }
    if (e < 0) {
        fprintf(stderr, "corrald: cannot %s the token %s: %s%s\n", D.reused ? "read" : "write",
                tokpath, cr_strerror(e),
                D.reused ? " (remove session_latest to start a new session)" : "");
        free(tokpath);
        goto out;
    }
    free(tokpath);

    uv_loop_init(&D.loop);
    char name[160];
    snprintf(name, sizeof(name), "corrald:%.128s:%d", node_name(), (int)getpid());
    cr_net_config_t nc = {.token = token, .name = name};
    cr_net_callbacks_t cb = {.on_ready = on_ready, .on_message = on_message, .on_close = on_close};
    D.net = cr_net_new(&D.loop, &nc, &cb, NULL);
    memset(token, 0, sizeof(token));
    if (!D.net) {
        fprintf(stderr, "corrald: cannot set up the transport\n");
        goto loop_out;
    }
    if ((e = cr_net_listen_unix(D.net, D.sock)) < 0) {
        fprintf(stderr, "corrald: cannot listen on %s: %s\n", D.sock, cr_strerror(e));
        goto loop_out;
    }
    if ((e = cr_net_listen_tcp(D.net, NULL, port, &D.port)) < 0) {
        fprintf(stderr, "corrald: cannot listen on 127.0.0.1:%d: %s\n", port, cr_strerror(e));
        goto loop_out;
    }
    D.address = cr_asprintf("127.0.0.1:%d", D.port);
    char *text = cr_asprintf("%s\n", D.address), *pidtext = cr_asprintf("%d\n", (int)getpid());
    e = write_file("address", text);
    if (e == 0)
        e = write_file("corrald.pid", pidtext);
    free(text);
    free(pidtext);
    if (e < 0)
        goto loop_out;
    uv_signal_init(&D.loop, &D.sig_term);
    uv_signal_init(&D.loop, &D.sig_int);
    uv_signal_start(&D.sig_term, on_signal, SIGTERM);
    uv_signal_start(&D.sig_int, on_signal, SIGINT);
    event("started", NULL, "head on %s%s: %zu device(s), socket %s, tcp %s", node_name(),
          D.node->simulated ? " (simulated)" : "", D.node->devices.n, D.sock, D.address);
    fprintf(stderr, "corrald: head %s serving %s and %s\n", node_name(), D.sock, D.address);
    if (D.reused)
        recover();

    uv_run(&D.loop, UV_RUN_DEFAULT);
    rc = 0;
    goto done;

loop_out:
    if (D.net) {
        cr_net_close(D.net, NULL, NULL);
        D.net = NULL;
    }
done:
    for (size_t i = 0; i < D.jobs.n; i++)
        job_free(D.jobs.v[i]);
    CR_VEC_FREE(&D.jobs);
    CR_VEC_FREE(&D.pending);
    uv_run(&D.loop, UV_RUN_DEFAULT); /* close callbacks of released workers */
    if (uv_loop_close(&D.loop) != 0)
        cr_warn("loop closed with handles left");
out:
    if (D.st) {
        if (rc == 0)
            event("stopped", NULL, "clean exit");
        cr_state_close(D.st);
    }
    if (D.sock && rc != 0)
        unlink(D.sock);
    if (rc == 0 && D.session) { /* a clean exit: the next head starts a new session */
        char *pidf = cr_asprintf("%s/corrald.pid", D.session);
        unlink(pidf);
        free(pidf);
    }
    sched_cluster_free(D.cluster);
    hw_node_free(D.node);
    free(D.session);
    free(D.logs);
    free(D.sock);
    free(D.address);
    return rc;
}
