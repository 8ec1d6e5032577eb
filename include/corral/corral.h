/* libcorral: the C API of a corral head (docs/runtime.md).
 *
 * A program connects to a head, submits jobs (gangs of worker processes),
 * waits for them, stops them, and asks for the cluster's status, its jobs
 * and its event log. Every call is synchronous: it returns once the head
 * has answered. One handle is used by one thread at a time.
 *
 * Errors: calls return 0 or a negative corral code (corral/error.h);
 * corral_errmsg() then says what went wrong in words, as the head put it
 * (for example the scheduler's reason for refusing an impossible request).
 *
 * Memory: strings and arrays filled in by a call are owned by the caller
 * and released with the matching _free function. */
#ifndef CORRAL_CORRAL_H
#define CORRAL_CORRAL_H

#include <corral/error.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct corral corral_t;

/* The longest any call waits for the head's answer; then it fails with
 * CR_EAGAIN and the connection is closed (connect again). */
#define CORRAL_CALL_TIMEOUT_MS 60000

/* Connects and authenticates with the cluster token.
 *
 * address: "unix:/path", "/path" (a Unix socket) or "host:port" (TCP).
 * NULL: $CORRAL_ADDRESS, else the session's socket,
 * $CORRAL_HOME/session_latest/corrald.sock ($CORRAL_HOME defaults to
 * /tmp/corral).
 * token_path: the token file (64 hex digits, mode 0600). NULL:
 * $CORRAL_TOKEN_FILE, else $CORRAL_HOME/session_latest/token.
 *
 * Returns 0 with *out set, or a negative code with *errmsg (malloc'ed,
 * when errmsg is not NULL) saying why: -ECONNREFUSED / CR_ENOENT when no
 * head runs there, CR_EACCES when the head refused the token. */
int corral_connect(const char *address, const char *token_path, corral_t **out, char **errmsg);
/* Closes the connection and frees the handle; NULL is a no-op. */
void corral_disconnect(corral_t *c);
/* What the last failing call on c said ("" when none). Valid until the
 * next call. */
const char *corral_errmsg(const corral_t *c);

/* ---- jobs ---- */

typedef enum corral_restart {
    CORRAL_RESTART_NONE = 0,
    CORRAL_RESTART_WORKER,
    CORRAL_RESTART_GANG,
} corral_restart_t;

typedef struct corral_job_spec {
    const char *name;        /* NULL: the command's name */
    const char *const *argv; /* NULL-terminated, argv[0] searched in PATH */
    const char *const *env;  /* "K=V" strings, NULL-terminated; may be NULL */
    const char *cwd;         /* NULL: the head's working directory */
    const char *resources;   /* per worker: "GPU=1,CPU=2,memory=8Gi"; NULL: CPU=1 */
    unsigned num_workers;    /* the gang's size; 0 means 1 */
    unsigned grace_ms;       /* SIGTERM to SIGKILL on stop; 0: the head's default */
    /* What a failing worker (non-zero exit, signal) leads to while
     * restarts are left: NONE fails the job, WORKER restarts that worker
     * on the same devices, GANG stops the others and restarts every
     * worker. After max_restarts restarts the next failure fails the job. */
    corral_restart_t restart;
    unsigned max_restarts;
    unsigned backoff_ms; /* before the first restart, doubling; 0: the head's default */
} corral_job_spec_t;

/* States, as the head names them. */
typedef enum corral_job_state {
    CORRAL_JOB_UNKNOWN = 0,
    CORRAL_JOB_PENDING,
    CORRAL_JOB_PLACING,
    CORRAL_JOB_RUNNING,
    CORRAL_JOB_SUCCEEDED,
    CORRAL_JOB_FAILED,
    CORRAL_JOB_STOPPED,
} corral_job_state_t;

/* "PENDING", ..., "UNKNOWN". */
const char *corral_job_state_name(corral_job_state_t s);
/* SUCCEEDED, FAILED or STOPPED. */
int corral_job_state_is_final(corral_job_state_t s);

typedef struct corral_worker {
    unsigned index;
    char *worker_id;
    char *node_id;
    const char *state; /* "STARTING", "RUNNING", "EXITED", "FAILED", "STOPPED" (static) */
    int pid;
    int exit_code;    /* when EXITED and signal is 0 */
    int signal;       /* the signal that ended it, 0 none */
    char *devices;    /* device indices on its node, "0,1"; "" none */
    char *reason;     /* why it failed ("exec failed: No such file or directory"); "" */
    unsigned attempt; /* how many times this worker was restarted */
} corral_worker_t;

typedef struct corral_job {
    char *job_id;
    char *name;
    corral_job_state_t state;
    char *reason;  /* why it is in this state; "" */
    int exit_code; /* when final: 0, the first failing worker's code, 128+signal */
    int64_t submitted_ms, finished_ms; /* wall clock, ms since the epoch */
    char *command;                     /* argv joined by spaces ("" in listings) */
    size_t nworkers;
    corral_worker_t *workers;
    unsigned restarts;        /* restarts done (each worker restart or gang restart) */
    unsigned max_restarts;    /* allowed; 0 in listings, which carry no spec */
    corral_restart_t restart; /* the policy; NONE in listings */
} corral_job_t;

/* Submits a job. Returns 0 with *job_id (malloc'ed). An impossible request
 * is refused with CR_EINFEASIBLE and the scheduler's reason in errmsg; a
 * request that fits but not now is accepted and stays PENDING. */
int corral_submit(corral_t *c, const corral_job_spec_t *spec, char **job_id);
/* Fills *out with the job's state and its workers. */
int corral_job_status(corral_t *c, const char *job_id, corral_job_t *out);
/* Waits until the job is final (or timeout_ms passes: CR_EAGAIN; a
 * negative timeout waits for ever) and fills *out. The head holds the
 * status request and answers as soon as the job ends (JobStatusRequest
 * wait_ms); with a head that answers at once it polls every few ms. */
int corral_wait(corral_t *c, const char *job_id, int timeout_ms, corral_job_t *out);
/* SIGTERM to every worker's process group, SIGKILL after grace_ms (0: the
 * job's grace period). Returns once the stop has been started. */
int corral_stop(corral_t *c, const char *job_id, unsigned grace_ms);
/* Every job the head knows, oldest first. */
int corral_job_list(corral_t *c, corral_job_t **out, size_t *n);
void corral_job_free(corral_job_t *j);
void corral_job_list_free(corral_job_t *v, size_t n);

/* Calls fn for each piece of the job's output (worker_index -1: every
 * worker), stdout (stream 0) then stderr (stream 1) of each worker, as
 * recorded so far (the last 8 MiB of each file). */
typedef void (*corral_log_fn)(void *arg, unsigned worker_index, int stream, const char *data,
                              size_t len);
int corral_job_logs(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn, void *arg);

/* ---- the cluster ---- */

typedef struct corral_resource {
    char *name;         /* "GPU", "CPU", "memory", ... */
    double total, free; /* units (memory: bytes) */
} corral_resource_t;

typedef struct corral_node {
    char *node_id;
    char *state; /* "ALIVE", "SUSPECT", "DEAD" */
    char *address;
    size_t nres;
    corral_resource_t *res;
    size_t nlabels;
    char **labels; /* "k=v" */
} corral_node_t;

typedef struct corral_status {
    char *head_address;
    size_t nnodes;
    corral_node_t *nodes;
    size_t nres; /* cluster-wide totals */
    corral_resource_t *res;
    unsigned pending_jobs, running_jobs;
} corral_status_t;

int corral_status(corral_t *c, corral_status_t *out);
void corral_status_free(corral_status_t *s);

typedef struct corral_event {
    uint64_t seq;
    int64_t time_ms;
    char *kind;    /* "submitted", "placed", "started", "exited", "infeasible", ... */
    char *job_id;  /* "" when none */
    char *node_id; /* "" when none */
    char *message;
} corral_event_t;

/* Events after since_seq (0: from the start), at most limit (0: all; the
 * newest are kept). */
int corral_events(corral_t *c, uint64_t since_seq, unsigned limit, corral_event_t **out, size_t *n);
void corral_events_free(corral_event_t *v, size_t n);

/* Asks the head to stop its workers and exit. */
int corral_shutdown(corral_t *c);

#ifdef __cplusplus
}
#endif
#endif
