/* A new head taking over the session of one that died (docs/runtime.md
 * "Recovery"): nodes, groups and jobs read back from state.db, running
 * workers adopted or restarted, pending work queued again, and the
 * orphans of turns the previous head never committed stopped. Part of the
 * jobs module (jobs.h). */
#include "head/jobs.h"
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

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
    Corral__JobSpec *spec = job_spec_load(r->spec_json);
    if (!spec) {
        cr_warn("state: job %lld: its spec cannot be read back; left out", (long long)r->id);
        if (!cr_job_state_is_final(r->state))
            db_check(cr_state_job_set_state(D.st, r->id, CR_JOB_FAILED,
                                            "lost in a head restart: its spec could not be read",
                                            cr_wall_ms()));
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
    if (cr_job_state_is_final(r->state))
        job_drop_env(j);
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
        w->output_lost = v[k].output_lost;
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
            if (pg_bundle_take(j->pg, b, j->idstr, &nd, devs, &nds, why, sizeof(why)))
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
                    gone = "its pid does not name this session's worker";
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
 * every local worker gets, CORRAL_SESSION_ID naming this session (a
 * process of another user, or one that is no group leader, is never
 * taken: agent_proc_is_ours), and stopped (SIGKILL to their process group: the work was never
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
        char why[160], wid[64] = "";
        if (*end || pid == (long)getpid() ||
            !agent_proc_is_ours((int)pid, 0, D.session_id, why, sizeof(why)))
            continue; /* a group leader of our user carrying our session's id only */
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
            jobs_add(j);
    }
    cr_state_job_list_free(v, n);
    for (size_t i = 0; i < D.jobs.n; i++) { /* what stop_children looks at */
        const char *p = D.jobs.v[i]->spec->parent_job;
        job_t *parent = p && p[0] ? job_find(p) : NULL;
        if (parent)
            parent->has_children = true;
    }
    for (size_t i = 0; i < D.jobs.n; i++) {
        job_t *j = D.jobs.v[i];
        if (cr_job_state_is_final(j->state))
            continue;
        active++;
        if (j->state == CR_JOB_PENDING || j->state == CR_JOB_PLACING) {
            event("recovered", j, "pending again after a head restart");
            jobs_pending_push(j);
        } else {
            job_recover(j);
        }
    }
    event("recovered", NULL, "%zu job(s) read back from the previous head, %d active", D.jobs.n,
          active);
    session_took_over(D.jobs.n, active);
    sweep_orphans();
    try_pending();
}
