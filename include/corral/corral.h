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
 * CR_EAGAIN and the connection is closed (connect again). The variable
 * CORRAL_CALL_TIMEOUT_MS, read at corral_connect, sets another (100 to
 * 3,600,000 ms). */
#define CORRAL_CALL_TIMEOUT_MS 60000

/* Connects and authenticates with the cluster token.
 *
 * address: "unix:/path", "/path" (a Unix socket) or "host:port" (TCP).
 * NULL: $CORRAL_ADDRESS, else the session's socket,
 * $CORRAL_HOME/session_latest/corrald.sock ($CORRAL_HOME defaults to
 * /tmp/corral).
 * token_path: the token file (64 hex digits, mode 0600). NULL:
 * $CORRAL_TOKEN_FILE, else, inside a worker, the job credential its agent
 * set in $CORRAL_JOB_TOKEN (which the head serves only that job's status,
 * logs and stop: docs/protocol.md, "Job credentials"), else
 * $CORRAL_HOME/session_latest/token.
 * A TCP address runs TLS 1.3 when $CORRAL_TLS_FINGERPRINT pins the head's
 * certificate ("sha256:HEX", as `corral start --head` prints it) or
 * $CORRAL_TLS_CA names a CA file to verify it with; only then is libssl
 * loaded (docs/cluster.md "TLS"). A Unix socket never runs TLS.
 *
 * Returns 0 with *out set, or a negative code with *errmsg (malloc'ed,
 * when errmsg is not NULL) saying why: -ECONNREFUSED / CR_ENOENT when no
 * head runs there, CR_EACCES when the head refused the token (or, said so,
 * takes only TLS), -EPROTO when the head's certificate is not the one
 * pinned or does not verify. */
int corral_connect(const char *address, const char *token_path, corral_t **out, char **errmsg);
/* Closes the connection and frees the handle; NULL is a no-op. */
void corral_disconnect(corral_t *c);
/* What the last failing call on c said ("" when none). Valid until the
 * next call. */
const char *corral_errmsg(const corral_t *c);

/* Called about every 100 ms while a following call (corral_job_logs_follow,
 * corral_events_follow) waits; a non-zero return ends that call with
 * -EINTR (the connection stays usable). It runs inside the call: it must
 * not use c, but may use another handle (for example to stop the job on
 * Ctrl-C, as `corral run` does). NULL: none. Calls other than following
 * ones do not call it. */
typedef int (*corral_tick_fn)(void *arg);
void corral_set_tick(corral_t *c, corral_tick_fn fn, void *arg);

/* ---- placement: strategies, binding ---- */

/* How a gang's (or a group's) bundles are spread over nodes; the values
 * are the protocol's. PACK (the default) fills few nodes, SPREAD uses
 * many; the STRICT_ forms refuse rather than fall back (one node; one
 * node per bundle). */
typedef enum corral_strategy {
    CORRAL_PACK = 0,
    CORRAL_SPREAD,
    CORRAL_STRICT_PACK,
    CORRAL_STRICT_SPREAD,
} corral_strategy_t;

/* "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD". */
const char *corral_strategy_name(corral_strategy_t s);
/* The name (any case, '-' for '_') to the value; CR_EINVAL when unknown. */
int corral_strategy_parse(const char *name, corral_strategy_t *out);

/* Where a worker's threads may run: CLOSEST (the default) binds them to
 * the cores local to its devices, NONE leaves them free. */
typedef enum corral_bind {
    CORRAL_BIND_CLOSEST = 0,
    CORRAL_BIND_NONE,
} corral_bind_t;

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
    const char *cwd;         /* NULL: the agent's working directory */
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
    /* Placement (docs/runtime.md "Placement"). Zero everywhere: PACK, no
     * selector, no domain, no group. */
    corral_strategy_t strategy; /* of the gang's workers over nodes */
    const char *selector;       /* label selector, "k=v,k2 in (a,b)"; NULL: none */
    const char *domain;         /* a label key every worker shares one value of; NULL */
    /* Run in this placement group (name or id) instead; then strategy and
     * domain must be left 0/NULL. bundle_index is read only when
     * has_bundle is set (one worker, in that bundle): without it worker i
     * runs in bundle i. */
    const char *placement_group;
    int has_bundle;
    unsigned bundle_index;
    corral_bind_t bind;
    /* One worker per device for torch.distributed/JAX (corral train): the
     * head gives each worker RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
     * MASTER_PORT (a port free on rank 0's node, new at each gang start)
     * and the rest of docs/train.md, and restarts the whole gang. */
    int distributed;
    /* Non-zero: a gang the alive nodes could never hold is accepted and
     * stays PENDING, its reason saying so, until nodes join (an autoscaled
     * cluster); 0: it is refused at submit with the scheduler's reason. */
    int wait_for_nodes;
    /* Non-zero: env is the workers' whole environment (corral run sends
     * the caller's); 0: env goes on top of the agent's PATH, HOME, USER,
     * LOGNAME, SHELL, LANG, LC_ALL, TZ and TMPDIR (nothing else of the
     * daemon's). Either way CORRAL_TOKEN_FILE is dropped and the isolation
     * and CORRAL_* variables come last. */
    int env_whole;
    /* Non-zero: the head stops the job when this connection closes before
     * the job ends (a corral run that waits on it and dies or loses the
     * head); 0: the job outlives the connection (corral run --detach). */
    int bound;
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
    /* bytes of its output that its (remote) agent wrote and that never
     * reached the head: its agent lost the head with them unsent; 0 none */
    uint64_t output_lost;
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
    unsigned queue_position;  /* PENDING: its place among pending jobs, 1 first; 0 else */
    char *parent_job;         /* the job whose worker submitted it with its job credential (a
                               * driver's task leases and actors; stopped with it); "" none */
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
/* Every job the head knows, oldest first: every page of the listing
 * (corral_job_list_page), one after the other. */
int corral_job_list(corral_t *c, corral_job_t **out, size_t *n);
void corral_job_free(corral_job_t *j);
void corral_job_list_free(corral_job_t *v, size_t n);

/* Paged listings (docs/protocol.md "Paged listings"), as Kubernetes' list
 * chunking: one call gets one page of at most limit items (0: as many as
 * one reply of the head holds), oldest first, from where continue_token
 * says (NULL or "": the first page). On success next_token is the token of
 * the next page (malloc'd, the caller frees it), or NULL on the last
 * page, and remaining how many items come after this page. A token names
 * the item the next page starts at: items added meanwhile neither repeat
 * nor shift pages, removed ones are skipped. A malformed token, one of
 * another listing, or one of an earlier head (it restarted: the token
 * has expired) fails with CR_EINVAL and says so in corral_errmsg; list
 * again from the start. */
typedef struct corral_page {
    unsigned limit;             /* in: at most this many items; 0: as many as fit */
    const char *continue_token; /* in: NULL or "" for the first page */
    char *next_token;           /* out: NULL on the last page; free() it */
    unsigned remaining;         /* out: the items after this page */
} corral_page_t;
/* A page of corral_job_list; states (n_states of them, 0: every state)
 * filters (the same filter for every page of a listing). */
int corral_job_list_page(corral_t *c, const corral_job_state_t *states, size_t n_states,
                         corral_page_t *page, corral_job_t **out, size_t *n);

/* Calls fn for each piece of the job's output (worker_index -1: every
 * worker), stdout (stream 0) then stderr (stream 1) of each worker, as
 * recorded so far (the last 8 MiB of each file). */
typedef void (*corral_log_fn)(void *arg, unsigned worker_index, int stream, const char *data,
                              size_t len);
int corral_job_logs(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn, void *arg);
/* Told by corral_job_logs and the follows before the piece of a worker's
 * stream that comes after a gap: dropped bytes of its earlier output are
 * gone, because each worker output file keeps only its last log_max
 * bytes (corrald --worker-log-max; 0 when the head did not say).
 * fn NULL: not told. */
typedef void (*corral_log_dropped_fn)(void *arg, unsigned worker_index, int stream,
                                      uint64_t dropped, uint64_t log_max);
void corral_set_log_dropped(corral_t *c, corral_log_dropped_fn fn, void *arg);
/* During corral_job_logs and the follows: output of workers' stdout that
 * the head sends as raw chunks (docs/protocol.md "Raw log chunks") is
 * written to fd (blocking, such as a program's stdout), moved there from
 * the socket by splice(2) when fd is a pipe, instead of being passed to
 * the callback; stderr, and output in other chunks, still go to the
 * callback, so a caller that sets this writes the callback's stdout data
 * to the same fd. -1: none (the default). */
void corral_set_log_fd(corral_t *c, int fd);

/* Follows the job's output as it is written: fn gets what each worker's
 * stdout and stderr already hold (the last 8 MiB of each), then each new
 * piece as the client takes it (within about 50 ms of its writing when
 * the follower has caught up), in order per worker and
 * stream (pieces of different workers or streams interleave; a piece
 * may end inside a line). A restarted worker's output continues with
 * its new run's. Returns 0 once the job is final and everything has been
 * delivered. There is no overall time limit (a job may run for days):
 * it fails when the connection closes (the head stopped), with -EINTR
 * when the tick (corral_set_tick) asks, or with CR_ENOSYS from a head
 * that cannot follow. */
int corral_job_logs_follow(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn,
                           void *arg);
/* The same from the first byte of each worker's output however long it
 * is already: for following a job just submitted (corral run), whose
 * workers may have written more than 8 MiB before the follow began. */
int corral_job_logs_follow_all(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn,
                               void *arg);
/* corral_job_logs_follow_all, and with the end of the output the job as
 * it ended, in the same answer: on success with *ended set, *job is
 * filled (free it with corral_job_free) and final, as corral_wait would
 * give it, one round trip sooner. *ended stays 0 when the head did not
 * say (one from before 2026-12-05, or a job it no longer knows): then
 * corral_wait gives it. */
int corral_job_logs_follow_end(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn,
                               void *arg, corral_job_t *job, int *ended);

/* ---- the cluster ---- */

typedef struct corral_resource {
    char *name;         /* "GPU", "CPU", "memory", ... */
    double total, free; /* units (memory: bytes) */
    /* Free as the node's agent counted it in its last heartbeat (its
     * workers and reservations against its totals); NAN where no agent
     * reports (the head's own node, cluster-wide sums). Below free for
     * beats in a row means the agent runs what the head did not place
     * (a node_drift event says so). */
    double reported_free;
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
    /* Each job and group that waits or holds resources (corral status's
     * "pending" and "held"). */
    size_t nholders;
    struct corral_holder {
        char *kind; /* "job" or "group" */
        char *id, *name;
        char *state;             /* PENDING, PLACING, RUNNING, PREPARING, CREATED */
        char *reason;            /* PENDING: why; "" */
        unsigned queue_position; /* PENDING: its place in its queue, 1 first */
        char *held;              /* what it holds, "GPU=8,CPU=8"; "" nothing (a job in a
                                  * group runs on what the group holds) */
        char *group;             /* a job: the group it runs in; "" */
        unsigned jobs;           /* a group: the jobs running in it */
    } * holders;
    /* holders is bounded (the oldest 100 pending jobs, 100 jobs holding
     * resources, 100 groups): how many were left out
     * (corral_job_list and corral_pg_list give them all) */
    unsigned holders_not_listed;
} corral_status_t;

int corral_status(corral_t *c, corral_status_t *out);
void corral_status_free(corral_status_t *s);
/* Every node, in node id order: every page of the head's NodeList answer
 * (corral_node_list_page: one page, corral_page_t as
 * corral_job_list_page's). corral_status holds the nodes too, in one
 * answer. */
int corral_node_list(corral_t *c, corral_node_t **out, size_t *n);
int corral_node_list_page(corral_t *c, corral_page_t *page, corral_node_t **out, size_t *n);
void corral_node_list_free(corral_node_t *v, size_t n);

typedef struct corral_event {
    uint64_t seq;
    int64_t time_ms;
    char *kind;    /* "submitted", "placed", "started", "exited", "infeasible", ... */
    char *job_id;  /* "" when none */
    char *node_id; /* "" when none */
    char *message;
} corral_event_t;

/* Events after since_seq (0: from the start), at most limit (0: all; the
 * newest are kept): every page (corral_events_page), one after the other. */
int corral_events(corral_t *c, uint64_t since_seq, unsigned limit, corral_event_t **out, size_t *n);
/* One page of it (corral_page_t, corral_job_list_page): newest as
 * corral_events' limit on the first page (later pages go on to the end). */
int corral_events_page(corral_t *c, uint64_t since_seq, unsigned newest, corral_page_t *page,
                       corral_event_t **out, size_t *n);
void corral_events_free(corral_event_t *v, size_t n);

/* Calls fn for each event after since_seq, then for each new one as the
 * head records it, until the tick (corral_set_tick) ends the call
 * (-EINTR) or the connection closes. The event is borrowed for the call. */
typedef void (*corral_event_fn)(void *arg, const corral_event_t *ev);
int corral_events_follow(corral_t *c, uint64_t since_seq, corral_event_fn fn, void *arg);

/* ---- placement groups ---- */

/* A set of bundles (each a set of resources on one node) reserved
 * together, all or nothing, for jobs to run in later
 * (corral_job_spec_t.placement_group). */
typedef struct corral_bundle_spec {
    const char *resources; /* "GPU=1,CPU=2", parsed as corral_submit's */
    const char *selector;  /* labels this bundle's node must have; NULL: any */
} corral_bundle_spec_t;

typedef enum corral_pg_bound {
    CORRAL_PG_BOUND_NONE = 0,
    CORRAL_PG_BOUND_UNTIL_CREATED,
    CORRAL_PG_BOUND_ALWAYS,
} corral_pg_bound_t;

typedef struct corral_pg_spec {
    const char *name; /* unique among the head's groups; NULL or "": the head names it */
    const corral_bundle_spec_t *bundles;
    size_t nbundles; /* at least 1 */
    corral_strategy_t strategy;
    const char *selector; /* labels every bundle's node must have; NULL: any */
    const char *domain;   /* a label key all bundles' nodes share one value of; NULL */
    /* Non-zero: answer once the group is created (or found infeasible);
     * 0: once it is queued (PENDING). */
    int wait;
    int wait_for_nodes; /* as corral_job_spec_t's */
    /* When this connection closes the head removes the group: NONE never
     * (the default: it outlives its creator), UNTIL_CREATED if it is not
     * created by then (a pg create that waits on it), ALWAYS (a group
     * made for one run, as corral train's). */
    corral_pg_bound_t bound;
} corral_pg_spec_t;

typedef struct corral_bundle {
    char *resources; /* "GPU=1,CPU=2" (as the head returned them) */
    char *selector;  /* "" none */
    int placed;      /* where it is, once the group is CREATED: */
    char *node_id;   /* "" when not placed */
    char *devices;   /* device indices on that node, "0,1"; "" none */
} corral_bundle_t;

typedef struct corral_pg {
    char *pg_id;
    char *name;
    const char *state; /* "PENDING", "PREPARING", "CREATED", "REMOVED", "INFEASIBLE" (static) */
    char *reason;      /* why it is in this state; "" */
    corral_strategy_t strategy;
    char *domain; /* "" none */
    size_t nbundles;
    corral_bundle_t *bundles;
    unsigned queue_position; /* PENDING: its place among pending groups, 1 first; 0 else */
} corral_pg_t;

/* Creates a group. Returns 0 with *out filled (state PENDING, or with
 * spec->wait CREATED or INFEASIBLE with the reason). A malformed spec
 * (no bundle, a bundle asking for nothing, bad resource text) fails with
 * CR_EINVAL before anything is sent. */
int corral_pg_create(corral_t *c, const corral_pg_spec_t *spec, corral_pg_t *out);
/* What corral_pg_create checks before sending, without a head: 0, or
 * CR_EINVAL with why (a sentence naming the bundle) in why[size]. */
int corral_pg_spec_check(const corral_pg_spec_t *spec, char *why, size_t size);
/* Removes a group, by id or by name (an id is tried first), releasing
 * what it reserved. */
int corral_pg_remove(corral_t *c, const char *id_or_name);
/* Many groups at once, as Ray's placement_group() calls that return at
 * once and are waited on together: every request is sent (in one write)
 * before any answer is awaited, so n groups cost one round trip, not n.
 * out[i] is group i as corral_pg_create would give it; errs (n entries,
 * may be NULL) gets 0 or group i's error, and out[i] is zeroed for a
 * group with an error. Returns 0 when every group was answered without
 * an error, else the first error, with its message in corral_errmsg (a
 * malformed spec: CR_EINVAL naming it, nothing sent). */
int corral_pg_create_many(corral_t *c, const corral_pg_spec_t *specs, size_t n, corral_pg_t *out,
                          int *errs);
/* Removes n groups (ids or names), all requests sent before any answer is
 * awaited; errs and the result as corral_pg_create_many's. */
int corral_pg_remove_many(corral_t *c, const char *const *ids_or_names, size_t n, int *errs);
/* Every group the head knows. */
int corral_pg_list(corral_t *c, corral_pg_t **out, size_t *n);
/* One page of it (corral_page_t, corral_job_list_page). */
int corral_pg_list_page(corral_t *c, corral_page_t *page, corral_pg_t **out, size_t *n);
void corral_pg_free(corral_pg_t *pg);
void corral_pg_list_free(corral_pg_t *v, size_t n);

/* Asks the head to stop its workers and exit. */
int corral_shutdown(corral_t *c);
/* The same for the cluster (corral stop --address): every agent
 * connected to the head is told to stop its workers and exit, then the
 * head stops unless keep_head. *nagents (may be NULL) gets how many
 * agents were told. */
int corral_shutdown_cluster(corral_t *c, int keep_head, unsigned *nagents);

#ifdef __cplusplus
}
#endif
#endif
