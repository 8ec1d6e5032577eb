/* The jobs module's own header (jobs.c, workers.c, logs.c, recover.c):
 * a job, its workers, and the functions these files share. Nothing
 * outside the module includes it; the rest of the head sees job_t
 * through head.h's functions. */
#ifndef CORRAL_HEAD_JOBS_H
#define CORRAL_HEAD_JOBS_H

#include "head/head.h"
#include "sched/gang.h"

struct wk {
    job_t *job;
    int index;
    char id[48];
    node_t *node;
    int bundle; /* of the job's placement group, -1 none */
    Corral__WorkerState state;
    int pid;
    int64_t start_time;
    int exit_code, signal;
    char *reason;
    int devs[MAX_DEVS];
    size_t ndevs;
    char *out_path, *err_path; /* on the head (remote output is forwarded here) */
    int attempt;               /* restarts of this worker so far: CORRAL_RESTART_COUNT */
    bool restart_due;          /* to be started again when the backoff ends */
    char cause[96];            /* why it is restarted, for the event */
    uint64_t output_lost;      /* bytes its remote agent wrote that never came */
    /* remote output by stream: the end of the last gap its agent left in
     * the head's copy (what the agent's bound dropped unsent: a hole) */
    uint64_t out_gap[2];
};

struct job {
    int64_t id;
    char idstr[24];
    char *name;
    Corral__JobSpec *spec; /* a copy, packed and unpacked */
    uint8_t *spec_pb;      /* at the submit: spec packed, until it is recorded */
    size_t spec_pb_len;
    cr_job_state_t state;
    char *reason;
    int exit_code;
    int64_t submitted_ms, finished_ms;
    int n;
    wk_t *wk;
    sched_bundle_t *bundles;
    uint64_t placement; /* 0: none held */
    pg_t *pg;           /* running in this group */
    bool stopping, failed;
    bool unknown_exit;    /* an adopted worker ended: its exit code cannot be known */
    bool replace;         /* its placement was lost with a node: place the gang again */
    int restarts;         /* done or scheduled, every worker and gang restart counted */
    bool restart_pending; /* a restart waits for its backoff (and, gang, the others' exit) */
    bool backoff_over;
    uv_timer_t *timer;    /* the backoff; NULL until the first restart */
    int64_t fail_us;      /* when the worker whose failure decided the job ended */
    int fail_index;       /* that worker's index (ties go to the lower) */
    uint32_t master_port; /* distributed jobs: the rendezvous port of this start */
    uint32_t jax_port;    /* and JAX's coordinator's, another one */
    bool port_wait;       /* waiting for the port before starting the gang */
    uint64_t ticket;      /* its entry in D.pending (arrival order), 0 when not there */
    struct shape *shape;  /* waiting, one worker: what it asks, shared (jobs.c "the queue") */
    uint64_t reason_seq;  /* when reason was set, against its shape's */
    cr_conn_t *owner;     /* a bound submit's connection: stopped when it closes */
    bool has_children;    /* a job was submitted with this one as its parent */
    bool listed;          /* in D.jobs (jobs_add): counted by state, in live while not final */
    /* ended: its workers' environment left memory (job_drop_env); state.db
     * keeps it, read back for a JobStatus with_env */
    bool env_dropped;
    /* submitted in this turn and recorded in its open transaction, not yet
     * committed: nothing of it starts before the commit (jobs_committed) */
    bool uncommitted;
    bool start_on_commit; /* placed at submit: its workers start at the commit */
    /* a gang placed again after losing a node, when no node left can hold
     * it, waits until then (cr_mono_ms) for one to rejoin (jobs_tick) */
    int64_t rejoin_until_ms;
};

/* jobs.c */
void event(const char *kind, const job_t *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
job_t *job_find(const char *id);
void job_stop(job_t *j, uint32_t grace_ms);
void job_fail(job_t *j, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void job_check_done(job_t *j);
/* Appends j to D.pending (its ticket, its shape). */
void jobs_pending_push(job_t *j);
/* What j waits for or why it ended: a waiting job's shape's reason when
 * that is newer than its own. */
const char *job_reason(const job_t *j);
void job_set_state(job_t *j, cr_job_state_t s, const char *reason);
/* Appends j to D.jobs (its id the newest, or in id order at recovery). */
void jobs_add(job_t *j);
void job_free(job_t *j);
/* A spec as state.db keeps it (jobs.spec_json, its "pb"): NULL when it is
 * missing or damaged. */
Corral__JobSpec *job_spec_load(const char *spec_json);
/* Frees the workers' environment of a job that has ended (a submitter's
 * whole one for corral run: most of what a finished job holds, 10,000
 * of them kept by default). */
void job_drop_env(job_t *j);
/* Its bundles from its spec (0, or an error with why), its worker table. */
int job_bundles(job_t *j, char *why, size_t size);
void job_workers(job_t *j);
/* Restarts (jobs.c): w failed or was lost (cause): true when the job's
 * policy restarts it (then after a backoff); restart_check starts what is
 * due once the backoff is over. */
bool restart_schedule(job_t *j, wk_t *w, const char *cause);
void restart_check(job_t *j);
void restart_cancel(job_t *j);
/* The rendezvous port of a distributed job's start (node_request_port's answer). */
void job_port_ready(const char *job_id, uint32_t port, uint32_t jax_port, const char *why);
/* Lets go of the bundles the job holds in its group (not of the group). */
void job_leave_group(job_t *j);

/* workers.c */
wk_t *worker_find(const char *worker_id);
bool wk_alive(const wk_t *w);
void wk_reset(wk_t *w);
void wk_stop(wk_t *w, uint64_t grace_ms);
void start_one(job_t *j, wk_t *w);
/* Worker w where it was placed, for sched/gang.c; addr (size bytes) holds
 * the address other nodes reach its node at. */
void worker_gang_slot(const wk_t *w, sched_gang_slot_t *out, char *addr, size_t size);
void db_worker(const wk_t *w);
/* w's first row, at the submit: its node and devices when it was placed
 * then (placed), so that its start updates the row as on the same node */
void db_worker_create(const wk_t *w, bool placed);
void worker_started(wk_t *w, const agent_started_t *s);
void worker_ended(wk_t *w, const Corral__WorkerReport *r);
/* its node died, or it was not found again: reason */
void worker_lost(wk_t *w, const char *reason);

#endif
