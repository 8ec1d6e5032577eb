/* The agent's worker table (agent.h): one entry per worker process this
 * node runs, started with agent/launch or adopted from a previous daemon
 * through a pidfd. */
#include "agent/agent.h"
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <netinet/in.h>
#include <limits.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct aw aw_t;

/* A worker started by a previous daemon, found running: not our child, so
 * its exit is seen through a pidfd (readable once the process has exited)
 * and its exit code is never known. Its memory goes when both handles
 * have closed. */
typedef struct adopt {
    uv_poll_t poll;
    uv_timer_t timer; /* the grace period of a stop */
    int fd;
    int handles;
    bool stopping, done;
    aw_t *w; /* NULL once released */
} adopt_t;

struct aw {
    agent_t *a;
    char *id, *job_id;
    uint32_t index, attempt;
    uint64_t devs; /* the devices it holds (bit i: node device i < 64; web/ reads them) */
    int pid;
    int64_t start_time;
    cr_worker_t *w;
    adopt_t *ad;
    char *out_path, *err_path;
    int outfd[2]; /* its output files, for cr_output_bound; -1 none */
    /* a later attempt of the same worker, asked for while this one is
     * still stopping (a node that rejoined: its stale worker goes first);
     * started once this one's exit is reported (packed WorkerStart) */
    uint8_t *next;
    size_t next_len;
};

struct agent {
    agent_config_t cfg;
    CR_VEC(aw_t *) ws;
    uv_timer_t *bound;   /* every AGENT_BOUND_MS while cfg.output_max or home */
    bool unbounded_told; /* a filesystem that cannot punch holes, warned once */
    /* what workers cannot reach (launch.h hide, keep; docs/workers.md
     * "What a worker can reach"): set when the agent runs as root */
    char *home, *token_file;
    const char *hide[3], *keep[4];
};

/* ---- output files bounded (docs/workers.md "Output files") ---- */

/* How often running workers' output files are looked at: one fstat
 * each; a file can pass its bound by what its worker writes meanwhile. */
#define AGENT_BOUND_MS 250

static void bound_closed(uv_handle_t *h)
{
    free(h);
}

static void bound_fail(agent_t *a, aw_t *w, int s, int err)
{
    if (!a->unbounded_told)
        cr_warn("output of worker %s: %s cannot be bounded to %llu bytes: %s; worker output in %s "
                "grows without limit",
                w->id, s ? w->err_path : w->out_path, (unsigned long long)a->cfg.output_max,
                cr_strerror(err), a->cfg.logs ? a->cfg.logs : "?");
    a->unbounded_told = true;
    close(w->outfd[s]);
    w->outfd[s] = -1;
}

static void bound_files(agent_t *a, aw_t *w)
{
    for (int s = 0; s < 2; s++) {
        if (w->outfd[s] < 0)
            continue;
        int err = cr_output_bound(w->outfd[s], a->cfg.output_max, NULL);
        if (err < 0)
            bound_fail(a, w, s, err);
    }
}

static void on_bound(uv_timer_t *t)
{
    agent_t *a = t->data;
    for (size_t i = 0; a->cfg.output_max && i < a->ws.n; i++)
        bound_files(a, a->ws.v[i]);
    cr_worker_ns_tick();
}

/* Opens w's output files for bounding; a filesystem that cannot punch
 * holes leaves them unbounded, and *why (malloc'ed) says so for the
 * worker's start event. A worker started here (started: its launch) is
 * bounded through the very descriptors it was given, not its files opened
 * again by name: no lookup, and nothing put at the path since is bounded
 * in its place; one adopted after a restart (started NULL) has its files
 * opened by name. */
static void bound_open(agent_t *a, aw_t *w, cr_worker_t *started, char **why)
{
    const char *paths[2] = {w->out_path, w->err_path};
    for (int s = 0; s < 2; s++) {
        w->outfd[s] = -1;
        int given = started ? cr_worker_take_log_fd(started, s) : -1;
        if (!a->cfg.output_max || !paths[s]) {
            if (given >= 0)
                close(given);
            continue;
        }
        w->outfd[s] = given >= 0 ? given : open(paths[s], O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (w->outfd[s] < 0)
            continue;
        int err = cr_output_probe(w->outfd[s]);
        if (err < 0) {
            if (why && !*why)
                *why = cr_asprintf("output files unbounded (%s cannot punch holes: %s)", paths[s],
                                   cr_strerror(err));
            bound_fail(a, w, s, err);
        }
    }
}

int64_t agent_proc_stat(int pid, char *state)
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

bool agent_proc_env(int pid, const char *name, char *val, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/environ", pid);
    char *env = NULL;
    size_t len = 0;
    if (cr_read_file_alloc("/", path, &env, &len) < 0)
        return false;
    size_t nl = strlen(name);
    bool found = false;
    for (size_t at = 0; at < len && !found;) {
        const char *v = env + at;
        size_t vl = strnlen(v, len - at);
        if (vl > nl && memcmp(v, name, nl) == 0 && v[nl] == '=') {
            cr_strlcpy(val, v + nl + 1, size);
            found = true;
        }
        at += vl + 1;
    }
    free(env);
    return found;
}

bool agent_proc_is_ours(int pid, int64_t start_time, const char *session_id, char *why, size_t size)
{
    char path[64], buf[4096], state = 0, sid[CR_SESSION_ID_LEN + 1] = "";
    unsigned ruid = 0, euid = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    if (pid <= 1) {
        snprintf(why, size, "pid %d is never a worker", pid);
        return false;
    }
    int64_t st = agent_proc_stat(pid, &state);
    if (st == 0 || state == 'Z') {
        snprintf(why, size, "pid %d is gone", pid);
        return false;
    }
    if (start_time && st != start_time) {
        snprintf(why, size, "pid %d now names another process (start time %lld, not %lld)", pid,
                 (long long)st, (long long)start_time);
        return false;
    }
    if (getpgid(pid) != pid) {
        snprintf(why, size, "pid %d leads no process group of its own", pid);
        return false;
    }
    const char *u = cr_read_file("/", path, buf, sizeof(buf)) == 0 ? strstr(buf, "\nUid:") : NULL;
    if (!u || sscanf(u, "\nUid: %u %u", &ruid, &euid) != 2 || ruid != geteuid() ||
        euid != geteuid()) {
        snprintf(why, size, "pid %d runs as uid %u, not as this agent's %u", pid, ruid,
                 (unsigned)geteuid());
        return false;
    }
    if (!session_id || !session_id[0] ||
        !agent_proc_env(pid, "CORRAL_SESSION_ID", sid, sizeof(sid)) ||
        strcmp(sid, session_id) != 0) {
        snprintf(why, size, "pid %d does not carry this session's CORRAL_SESSION_ID", pid);
        return false;
    }
    return true;
}

/* SIGNAL to the process group a worker leads; never to pid 1 or below,
 * where kill(2) would reach every process or the caller's own group. */
static void signal_group(int pid, int sig)
{
    if (pid > 1)
        kill(-pid, sig);
}

/* Whether path is dir or lies inside it. */
static bool path_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* As root, workers start where the corral home (every session's token,
 * state.db, TLS key and logs) and the cluster token file are hidden, and
 * this process is not dumpable, so that a worker's root cannot read the
 * token through /proc/PID/root, fd or mem of the daemon either (without
 * CAP_SYS_PTRACE, which workers lose). Without root a worker keeps the
 * daemon's uid and can read what the daemon can: said in docs/workers.md. */
static void hide_session(agent_t *a)
{
    char home[PATH_MAX], real[PATH_MAX];
    if (geteuid() != 0 || a->cfg.refuse_start || cr_home_path(home, sizeof(home)) < 0)
        return;
    /* root without CAP_SYS_ADMIN (a container's default): no namespace
     * can be made, and a worker that could not start would be worse */
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2] = {{0}};
    if (syscall(SYS_capget, &h, d) < 0 ||
        !(d[CAP_SYS_ADMIN / 32].effective & (1u << (CAP_SYS_ADMIN % 32)))) {
        cr_warn("running as root without CAP_SYS_ADMIN: workers are not kept from the corral home "
                "%s and can read the cluster token (docs/workers.md \"What a worker can reach\")",
                home);
        return;
    }
    a->home = cr_strdup(realpath(home, real) ? real : home);
    size_t n = 0, k = 0;
    a->hide[n++] = a->home;
    if (a->cfg.token_file && realpath(a->cfg.token_file, real) && !path_under(real, a->home))
        a->hide[n++] = a->token_file = cr_strdup(real);
    const char *keep[] = {a->cfg.socket, a->cfg.head_address, a->cfg.tls_ca};
    for (size_t i = 0; i < CR_ARRAY_SIZE(keep); i++)
        if (keep[i] && keep[i][0] == '/')
            a->keep[k++] = keep[i];
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        cr_warn("prctl(PR_SET_DUMPABLE, 0): %s: a worker may reach the daemon's files through "
                "/proc",
                strerror(errno));
}

agent_t *agent_new(const agent_config_t *cfg)
{
    agent_t *a = cr_calloc(1, sizeof(*a));
    a->cfg = *cfg;
    hide_session(a);
    if (cfg->output_max || a->home) { /* a->home: the workers' namespace (cr_worker_ns_tick) */
        a->bound = cr_malloc(sizeof(*a->bound));
        uv_timer_init(cfg->loop, a->bound);
        a->bound->data = a;
        uv_timer_start(a->bound, on_bound, AGENT_BOUND_MS, AGENT_BOUND_MS);
        uv_unref((uv_handle_t *)a->bound); /* no reason by itself to keep a loop running */
    }
    return a;
}

static aw_t *find(const agent_t *a, const char *id, size_t *at)
{
    for (size_t i = 0; i < a->ws.n; i++)
        if (strcmp(a->ws.v[i]->id, id) == 0) {
            if (at)
                *at = i;
            return a->ws.v[i];
        }
    return NULL;
}

static void adopt_closed(uv_handle_t *h)
{
    adopt_t *ad = h->data;
    if (--ad->handles == 0) {
        close(ad->fd);
        free(ad);
    }
}

/* Hands ad back; one still running is killed, as cr_worker_release does. */
static void adopt_release(adopt_t *ad)
{
    if (!ad->done && ad->w)
        signal_group(ad->w->pid, SIGKILL);
    ad->w = NULL;
    uv_close((uv_handle_t *)&ad->poll, adopt_closed);
    uv_close((uv_handle_t *)&ad->timer, adopt_closed);
}

static void aw_free(aw_t *w)
{
    if (w->w)
        cr_worker_release(w->w);
    if (w->ad)
        adopt_release(w->ad);
    for (int s = 0; s < 2; s++) /* what it wrote since the last look */
        if (w->outfd[s] >= 0) {
            (void)cr_output_bound(w->outfd[s], w->a->cfg.output_max, NULL);
            close(w->outfd[s]);
        }
    free(w->id);
    free(w->job_id);
    free(w->out_path);
    free(w->err_path);
    free(w->next);
    free(w);
}

/* Takes w out of the table and frees it once its exit is reported. */
static void aw_done(agent_t *a, aw_t *w, Corral__WorkerReport *r)
{
    size_t at;
    if (find(a, w->id, &at) == w) {
        a->ws.v[at] = a->ws.v[a->ws.n - 1];
        a->ws.n--;
    }
    a->cfg.ops.exited(a->cfg.arg, r);
    Corral__WorkerStart *next =
        w->next ? corral__worker_start__unpack(NULL, w->next_len, w->next) : NULL;
    aw_free(w);
    if (next) {
        agent_start(a, next);
        corral__worker_start__free_unpacked(next, NULL);
    }
}

/* ended_us: when the exit was seen, not now (a stop's drain comes between). */
static void report_init(Corral__WorkerReport *r, const aw_t *w, Corral__WorkerState st,
                        int64_t ended_us)
{
    corral__worker_report__init(r);
    r->ended_us = ended_us;
    r->worker_id = w->id;
    r->job_id = w->job_id;
    r->worker_index = w->index;
    r->attempt = w->attempt;
    r->pid = w->pid;
    r->start_time = w->start_time;
    r->state = st;
}

static void on_worker_exit(cr_worker_t *cw, const cr_worker_exit_t *ex, void *arg)
{
    aw_t *w = arg;
    Corral__WorkerReport r;
    report_init(&r, w,
                ex->stopped ? CORRAL__WORKER_STATE__WORKER_STOPPED
                            : CORRAL__WORKER_STATE__WORKER_EXITED,
                ex->ended_us);
    r.exit_code = (int32_t)ex->code;
    r.signal = ex->signal;
    r.reason = ex->killed ? "killed after the grace period" : "";
    aw_done(w->a, w, &r);
}

static void on_adopt_grace(uv_timer_t *t)
{
    adopt_t *ad = t->data;
    if (!ad->done && ad->w)
        signal_group(ad->w->pid, SIGKILL);
}

static void on_adopt_exit(uv_poll_t *h, int status, int events)
{
    adopt_t *ad = h->data;
    aw_t *w = ad->w;
    if (ad->done || !w)
        return;
    int64_t seen_us = cr_wall_us();
    ad->done = true;
    uv_poll_stop(&ad->poll);
    uv_timer_stop(&ad->timer);
    signal_group(w->pid, SIGKILL); /* what the leader left in its group, as launch does */
    Corral__WorkerReport r;
    report_init(&r, w,
                ad->stopping ? CORRAL__WORKER_STATE__WORKER_STOPPED
                             : CORRAL__WORKER_STATE__WORKER_EXITED,
                seen_us);
    r.exit_code = -1;
    r.code_unknown = true;
    r.reason = "exited (code unknown: adopted after a head restart)";
    aw_done(w->a, w, &r);
}

bool agent_adopt(agent_t *a, const Corral__WorkerReport *rep, int64_t start_time,
                 const char *out_path, const char *err_path)
{
    char why[160];
    if (rep->pid <= 1 || find(a, rep->worker_id, NULL))
        return false;
    int fd = (int)syscall(SYS_pidfd_open, rep->pid, 0);
    if (fd < 0)
        return false;
    /* checked once the pidfd is open: the pid cannot be reused after */
    if (!start_time ||
        !agent_proc_is_ours(rep->pid, start_time, a->cfg.session_id, why, sizeof(why))) {
        if (start_time)
            cr_warn("not adopting worker %s: %s", rep->worker_id ? rep->worker_id : "?", why);
        close(fd);
        return false;
    }
    adopt_t *ad = cr_calloc(1, sizeof(*ad));
    ad->fd = fd;
    ad->handles = 2;
    if (uv_poll_init(a->cfg.loop, &ad->poll, fd) < 0) {
        close(fd);
        free(ad);
        return false;
    }
    uv_timer_init(a->cfg.loop, &ad->timer);
    ad->poll.data = ad->timer.data = ad;
    aw_t *w = cr_calloc(1, sizeof(*w));
    w->a = a;
    w->outfd[0] = w->outfd[1] = -1;
    w->id = cr_strdup(rep->worker_id);
    w->job_id = cr_strdup(rep->job_id ? rep->job_id : "");
    w->index = rep->worker_index;
    w->attempt = rep->attempt;
    w->pid = rep->pid;
    w->start_time = start_time;
    w->out_path = out_path ? cr_strdup(out_path) : NULL;
    w->err_path = err_path ? cr_strdup(err_path) : NULL;
    bound_open(a, w, NULL, NULL);
    w->ad = ad;
    ad->w = w;
    uv_poll_start(&ad->poll, UV_READABLE, on_adopt_exit);
    *CR_VEC_PUSH(&a->ws) = w;
    return true;
}

static void fail_start(agent_t *a, const Corral__WorkerStart *ws, const char *why)
{
    Corral__WorkerReport r = CORRAL__WORKER_REPORT__INIT;
    r.worker_id = ws->worker_id;
    r.job_id = ws->job_id;
    r.worker_index = ws->worker_index;
    r.attempt = ws->attempt;
    r.state = CORRAL__WORKER_STATE__WORKER_FAILED;
    r.exit_code = 127;
    r.reason = (char *)why;
    a->cfg.ops.exited(a->cfg.arg, &r);
}

void agent_start(agent_t *a, const Corral__WorkerStart *ws)
{
    if (a->cfg.refuse_start) {
        fail_start(a, ws, a->cfg.refuse_start);
        return;
    }
    aw_t *old = find(a, ws->worker_id, NULL);
    if (old && old->attempt < ws->attempt && !old->next) {
        /* an older attempt still ends (the head stops it): this one
         * starts after it, on the same devices */
        old->next_len = corral__worker_start__get_packed_size(ws);
        old->next = cr_malloc(old->next_len ? old->next_len : 1);
        corral__worker_start__pack(ws, old->next);
        return;
    }
    if (old) {
        fail_start(a, ws, "a worker of that id already runs on this node");
        return;
    }
    const Corral__WorkerSpec *spec = ws->spec;
    int devs[64];
    size_t nd = 0;
    for (size_t i = 0; i < ws->n_devices; i++) {
        if (ws->devices[i] >= a->cfg.node->devices.n || nd == CR_ARRAY_SIZE(devs)) {
            char why[96];
            snprintf(why, sizeof(why), "device %u does not exist on this node", ws->devices[i]);
            fail_start(a, ws, why);
            return;
        }
        devs[nd++] = (int)ws->devices[i];
    }
    char **argv = cr_calloc(spec->n_argv + 1, sizeof(*argv));
    for (size_t i = 0; i < spec->n_argv; i++)
        argv[i] = spec->argv[i];
    cr_envlist_t env = {0};
    for (size_t i = 0; i < spec->n_env; i++) {
        cr_kv_t *kv = CR_VEC_PUSH(&env.vars);
        kv->key = spec->env[i]->key;
        kv->value = spec->env[i]->value;
    }
    cr_envlist_t gang = {0}; /* the head's: after isolation, later entries winning */
    for (size_t i = 0; i < ws->n_extra_env; i++) {
        cr_kv_t *kv = CR_VEC_PUSH(&gang.vars);
        kv->key = ws->extra_env[i]->key;
        kv->value = ws->extra_env[i]->value;
    }
    char count[16];
    snprintf(count, sizeof(count), "%u", ws->attempt);
    cr_kv_t *kv = CR_VEC_PUSH(&env.vars); /* last: it wins over the job's */
    kv->key = (char *)"CORRAL_RESTART_COUNT";
    kv->value = count;
    if (a->cfg.session_id) { /* what proves the process ours (agent_proc_is_ours) */
        kv = CR_VEC_PUSH(&env.vars);
        kv->key = (char *)"CORRAL_SESSION_ID";
        kv->value = (char *)a->cfg.session_id;
    }
    char job_token[CR_JOB_TOKEN_TEXT_MAX] = "";
    if (a->cfg.net && strlen(ws->job_id) <= CR_JOB_ID_MAX) {
        cr_job_scope_t scope = {.worker_index = ws->worker_index, .attempt = ws->attempt};
        cr_strlcpy(scope.job_id, ws->job_id, sizeof(scope.job_id));
        uint8_t cred[CR_TOKEN_LEN];
        cr_net_job_credential(a->cfg.net, &scope, cred);
        cr_job_token_format(&scope, cred, job_token, sizeof(job_token));
        cr_wipe(cred, sizeof(cred));
    }
    cr_worker_spec_t s = {.argv = (const char *const *)argv,
                          .cwd = spec->cwd && spec->cwd[0] ? spec->cwd : NULL,
                          .env = &env,
                          .gang_env = &gang,
                          .inherit_env = !spec->env_whole, /* the submitter's, not ours */
                          .node = a->cfg.node,
                          .hw = a->cfg.hwo,
                          .devs = devs,
                          .ndevs = nd,
                          .job_id = ws->job_id,
                          .worker_id = ws->worker_id,
                          .worker_index = (int)ws->worker_index,
                          .agent_socket = a->cfg.socket,
                          .head_address = a->cfg.head_address,
                          .tls_fingerprint = a->cfg.tls_fingerprint,
                          .tls_ca = a->cfg.tls_ca,
                          .job_token = job_token[0] ? job_token : NULL,
                          .log_dir = a->cfg.logs,
                          .log_fresh = ws->attempt == 0,
                          .hide = a->home ? a->hide : NULL,
                          .keep = a->keep,
                          .bind =
                              ws->bind == CORRAL__BIND__BIND_NONE ? CR_BIND_NONE : CR_BIND_CLOSEST};
    aw_t *w = cr_calloc(1, sizeof(*w));
    w->a = a;
    w->outfd[0] = w->outfd[1] = -1;
    w->id = cr_strdup(ws->worker_id);
    w->job_id = cr_strdup(ws->job_id);
    w->index = ws->worker_index;
    w->attempt = ws->attempt;
    for (size_t i = 0; i < nd; i++)
        if (devs[i] < 64)
            w->devs |= 1ull << devs[i];
    char *errmsg = NULL;
    int err = cr_worker_start(a->cfg.loop, &s, on_worker_exit, w, &w->w, &errmsg);
    cr_wipe(job_token, sizeof(job_token));
    free(argv);
    CR_VEC_FREE(&env.vars);
    CR_VEC_FREE(&gang.vars);
    if (err < 0) {
        w->w = NULL;
        fail_start(a, ws, errmsg ? errmsg : cr_strerror(err));
        free(errmsg);
        aw_free(w);
        return;
    }
    free(errmsg);
    w->pid = cr_worker_pid(w->w);
    w->start_time = agent_proc_stat(w->pid, NULL);
    if (cr_worker_stdout_path(w->w))
        w->out_path = cr_strdup(cr_worker_stdout_path(w->w));
    if (cr_worker_stderr_path(w->w))
        w->err_path = cr_strdup(cr_worker_stderr_path(w->w));
    char *unbounded = NULL, *warning = NULL;
    bound_open(a, w, w->w, &unbounded);
    const char *launch_warning = cr_worker_warning(w->w);
    if (unbounded)
        warning = launch_warning ? cr_asprintf("%s; %s", launch_warning, unbounded)
                                 : cr_strdup(unbounded);
    *CR_VEC_PUSH(&a->ws) = w;
    agent_started_t st = {.worker_id = w->id,
                          .attempt = w->attempt,
                          .pid = w->pid,
                          .start_time = w->start_time,
                          .cpus = cr_worker_cpus(w->w),
                          .warning = warning ? warning : launch_warning,
                          .out_path = w->out_path,
                          .err_path = w->err_path};
    a->cfg.ops.started(a->cfg.arg, &st);
    free(unbounded);
    free(warning);
}

int agent_stop(agent_t *a, const char *worker_id, uint32_t grace_ms)
{
    aw_t *w = find(a, worker_id, NULL);
    if (!w)
        return CR_ENOENT;
    if (w->w) {
        cr_worker_stop(w->w, grace_ms);
    } else if (w->ad && !w->ad->done) {
        w->ad->stopping = true;
        signal_group(w->pid, grace_ms ? SIGTERM : SIGKILL);
        if (grace_ms && !uv_is_active((uv_handle_t *)&w->ad->timer))
            uv_timer_start(&w->ad->timer, on_adopt_grace, grace_ms, 0);
    }
    return 0;
}

size_t agent_running(const agent_t *a)
{
    return a->ws.n;
}

size_t agent_reports(const agent_t *a, Corral__WorkerReport ***out)
{
    Corral__WorkerReport **v = cr_calloc(a->ws.n + 1, sizeof(*v));
    for (size_t i = 0; i < a->ws.n; i++) {
        const aw_t *w = a->ws.v[i];
        v[i] = cr_malloc(sizeof(**v));
        report_init(v[i], w, CORRAL__WORKER_STATE__WORKER_RUNNING, 0);
        v[i]->worker_id = cr_strdup(w->id);
        v[i]->job_id = cr_strdup(w->job_id);
    }
    *out = v;
    return a->ws.n;
}

void agent_reports_free(Corral__WorkerReport **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i]->worker_id);
        free(v[i]->job_id);
        free(v[i]);
    }
    free(v);
}

const char *agent_log_path(const agent_t *a, const char *worker_id, int stream)
{
    const aw_t *w = find(a, worker_id, NULL);
    return !w ? NULL : stream ? w->err_path : w->out_path;
}

void agent_free(agent_t *a)
{
    if (!a)
        return;
    if (a->bound) {
        uv_timer_stop(a->bound);
        uv_close((uv_handle_t *)a->bound, bound_closed);
    }
    for (size_t i = 0; i < a->ws.n; i++)
        aw_free(a->ws.v[i]);
    CR_VEC_FREE(&a->ws);
    free(a->home);
    free(a->token_file);
    free(a);
    cr_worker_spares_drop(); /* one agent a process */
}

uint32_t agent_free_port(uint32_t *second)
{
    int fd[2] = {-1, -1};
    uint32_t port[2] = {0, 0};
    for (int i = 0; i < (second ? 2 : 1); i++) {
        fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t len = sizeof(a);
        if (fd[i] >= 0 && bind(fd[i], (struct sockaddr *)&a, sizeof(a)) == 0 &&
            getsockname(fd[i], (struct sockaddr *)&a, &len) == 0)
            port[i] = ntohs(a.sin_port);
    }
    for (int i = 0; i < 2; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    if (second)
        *second = port[1];
    return port[0];
}

bool agent_device_holder(const agent_t *a, int dev, const char **job_id, const char **worker_id)
{
    if (!a || dev < 0 || dev >= 64)
        return false;
    for (size_t i = 0; i < a->ws.n; i++)
        if (a->ws.v[i]->devs & (1ull << dev)) {
            *job_id = a->ws.v[i]->job_id;
            *worker_id = a->ws.v[i]->id;
            return true;
        }
    return false;
}
