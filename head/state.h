/* The head's persistent state: nodes, jobs, workers, placement groups and
 * the event log in one SQLite database (WAL), so that a head killed with
 * SIGKILL and restarted finds everything it acknowledged (DESIGN.md
 * "Runtime"). One handle per process, used from the head's one loop
 * thread; the handle is not thread-safe.
 *
 * Rules for every call below:
 * - Returns 0 or a negative corral code; on failure cr_state_errmsg()
 *   says which database file, what failed and what to do. Codes:
 *   CR_ENOSPC disk full, CR_EACCES read-only file or directory, CR_ENOENT
 *   no such row (or a reference to a missing job/node/pg), CR_EEXIST
 *   duplicate id or name, CR_EINVAL bad argument or state value,
 *   CR_EPARSE corrupt file or not a database, CR_ESCHEMA schema newer
 *   than this corral or not a corral database, CR_EAGAIN locked by
 *   another process, CR_EIO any other I/O error.
 * - Times are milliseconds chosen by the caller (no clock is read here).
 * - Strings passed in are copied; the caller keeps them. Records filled
 *   by get/list hold malloc'ed strings owned by the caller, released with
 *   the matching _free function (which frees the members, not the
 *   struct, for a single record; the array too for a list). A get or
 *   list that fails leaves nothing to free.
 * - Outside cr_state_begin/commit every write is its own transaction.
 *   Between them, the writes commit together or not at all: after the
 *   first failing write the transaction is doomed, later writes are
 *   refused with that error, and cr_state_commit rolls everything back
 *   and returns it (a failing read, such as a get that finds nothing,
 *   dooms nothing). */
#ifndef CORRAL_HEAD_STATE_H
#define CORRAL_HEAD_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The schema version this code writes; older databases are migrated at
 * open, newer ones refused. */
#define CR_STATE_SCHEMA_VERSION 4
/* cr_state_open refuses a file system with less free space than this. */
#define CR_STATE_MIN_FREE_BYTES (1024 * 1024)
/* Enough for any message of cr_state_open's err buffer. */
#define CR_STATE_ERRMSG_MAX 512

typedef struct cr_state cr_state_t;

/* ---- states, stored as their names (readable with the sqlite3 tool) ---- */
typedef enum { CR_NODE_ALIVE, CR_NODE_SUSPECT, CR_NODE_DEAD } cr_node_state_t;
typedef enum {
    CR_JOB_PENDING,
    CR_JOB_PLACING,
    CR_JOB_RUNNING,
    CR_JOB_SUCCEEDED,
    CR_JOB_FAILED,
    CR_JOB_STOPPED
} cr_job_state_t;
/* none; restart the failed worker; restart the whole gang */
typedef enum { CR_RESTART_NONE, CR_RESTART_WORKER, CR_RESTART_GANG } cr_restart_policy_t;
/* STARTING: spawned, pid known, not yet reported running; LOST: its node
 * died or the head could not re-adopt it after a restart. */
typedef enum {
    CR_WORKER_PENDING,
    CR_WORKER_STARTING,
    CR_WORKER_RUNNING,
    CR_WORKER_EXITED,
    CR_WORKER_STOPPED,
    CR_WORKER_LOST
} cr_worker_state_t;
/* PREPARED: reserved on every agent, not yet committed (two-phase). */
typedef enum { CR_PG_PENDING, CR_PG_PREPARED, CR_PG_CREATED, CR_PG_REMOVED } cr_pg_state_t;
typedef enum { CR_PG_PACK, CR_PG_SPREAD, CR_PG_STRICT_PACK, CR_PG_STRICT_SPREAD } cr_pg_strategy_t;

/* Names ("ALIVE", "RUNNING", "gang", "STRICT_PACK"...) and back; the
 * parsers return CR_EINVAL for an unknown name. */
const char *cr_node_state_name(cr_node_state_t s);
const char *cr_job_state_name(cr_job_state_t s);
const char *cr_restart_policy_name(cr_restart_policy_t p);
const char *cr_worker_state_name(cr_worker_state_t s);
const char *cr_pg_state_name(cr_pg_state_t s);
const char *cr_pg_strategy_name(cr_pg_strategy_t s);
int cr_job_state_parse(const char *name, cr_job_state_t *out);
int cr_pg_strategy_parse(const char *name, cr_pg_strategy_t *out);
bool cr_job_state_is_final(cr_job_state_t s);

/* ---- records ---- */
typedef struct cr_state_node {
    char *id;            /* the agent's node id */
    int64_t incarnation; /* grows each time the node (re)joins */
    char *address;       /* host:port of its agent */
    cr_node_state_t state;
    char *desc_json; /* its node description (hw/node_json.c) */
    int64_t last_heartbeat_ms;
    int64_t updated_ms;
} cr_state_node_t;

typedef struct cr_state_job {
    int64_t id; /* chosen by cr_state_job_create, never reused */
    char *name; /* may be NULL */
    char *spec_json;
    cr_job_state_t state;
    char *reason; /* why it is in its state; may be NULL */
    cr_restart_policy_t restart_policy;
    int max_restarts, restarts;
    int64_t created_ms, updated_ms;
} cr_state_job_t;

typedef struct cr_state_worker {
    int64_t job_id;
    int index;     /* in the gang, 0..n-1 */
    char *node_id; /* NULL until placed */
    char *devices; /* the assigned device ids, e.g. "0,1"; may be NULL */
    int pid, pgid; /* 0 when not started */
    /* The process's start time (field 22 of /proc/PID/stat, clock ticks
     * since boot): with the pid it tells the worker from a later process
     * that reuses the pid when a restarted daemon re-adopts workers. */
    int64_t start_time;
    cr_worker_state_t state;
    int exit_code;   /* valid when state is EXITED and exit_signal is 0 */
    int exit_signal; /* the signal that ended it, 0 if none */
    int restarts;
    char *stdout_path, *stderr_path; /* may be NULL */
    int64_t updated_ms;
    /* bytes of its output its remote agent wrote that never reached the
     * head (WorkerStatus.output_lost); 0 none */
    uint64_t output_lost;
} cr_state_worker_t;

typedef struct cr_state_bundle {
    int index;
    char *resources_json; /* what the bundle asks for */
    char *node_id;        /* NULL until reserved */
    char *devices;        /* may be NULL */
} cr_state_bundle_t;

typedef struct cr_state_pg {
    int64_t id; /* chosen by cr_state_pg_create, never reused */
    char *name; /* unique among placement groups; may be NULL */
    cr_pg_strategy_t strategy;
    cr_pg_state_t state;
    int64_t created_ms, updated_ms;
    cr_state_bundle_t *bundles;
    size_t n_bundles;
} cr_state_pg_t;

typedef struct cr_state_event {
    int64_t id; /* increases with every append, never reused */
    int64_t time_ms;
    char *kind;            /* "placed", "started", "exited", "infeasible", ... */
    int64_t job_id, pg_id; /* 0 when none */
    char *node_id;         /* NULL when none */
    char *message;
} cr_state_event_t;

/* ---- the database ---- */

/* Opens (creating it if needed) the database at path: WAL journal,
 * synchronous=NORMAL, a busy timeout, foreign keys on; migrates an older
 * schema; refuses a newer one; bumps the open generation. A full disk
 * (less than CR_STATE_MIN_FREE_BYTES free) is refused here, at start. On failure
 * *out is NULL and err (if not NULL) holds the message.
 *
 * Why synchronous=NORMAL is enough: in WAL mode a commit is a write() of
 * its frames to the -wal file, so once cr_state_* returns, the kernel has
 * the data and a killed process (SIGKILL, crash, OOM kill) loses nothing;
 * fsync happens at checkpoints. FULL would add an fsync of the WAL to
 * every commit, which only matters if the machine itself loses power or
 * the kernel crashes: then NORMAL can lose the last transactions since
 * the last checkpoint (the database stays consistent, never corrupt), and
 * agents re-report their workers when the head comes back. */
int cr_state_open(const char *path, cr_state_t **out, char *err, size_t errlen);
/* Closes the database (rolling back an unfinished transaction); NULL is a
 * no-op. Nothing to report: everything committed is already in the WAL,
 * and a final checkpoint that fails (full disk) is redone at the next open. */
void cr_state_close(cr_state_t *st);
/* The message of the last failure on this handle ("" if none). Valid
 * until the next call on the handle. */
const char *cr_state_errmsg(const cr_state_t *st);
/* How many times this database has been opened for writing, this open
 * included: 1 for a fresh file. The head's incarnation. */
int64_t cr_state_generation(const cr_state_t *st);
/* The database's file path (as given to open). */
const char *cr_state_path(const cr_state_t *st);
/* Runs SQLite's integrity check: 0 when the file is sound, CR_EPARSE with
 * the first problem in the message otherwise. */
int cr_state_check(cr_state_t *st);

/* ---- transactions ---- */
/* Starts a transaction. Inside an open one it nests: the inner commit
 * only returns the error so far, the outermost commits everything, and an
 * inner rollback dooms the outer transaction. */
int cr_state_begin(cr_state_t *st);
/* Whether a transaction of cr_state_begin is open. */
bool cr_state_in_transaction(const cr_state_t *st);
/* Commits, or, when a call since begin failed, rolls back and returns
 * that call's error. */
int cr_state_commit(cr_state_t *st);
/* Fault injection for tests, as SQLite's own test harness injects I/O
 * errors: the nth commit of an outermost transaction from now (1: the
 * next) fails as if SQLite had answered rc (SQLITE_FULL: the disk is
 * full; SQLITE_READONLY: the file became read-only), and its transaction
 * is rolled back, with the message and code such a failure gets. n 0
 * turns it off. */
void cr_state_fault_commit(cr_state_t *st, int n, int rc);
/* Undoes everything since begin. */
void cr_state_rollback(cr_state_t *st);

/* ---- nodes ---- */
/* Inserts the node or, when its id is known, replaces every field. */
int cr_state_node_put(cr_state_t *st, const cr_state_node_t *n, int64_t now_ms);
int cr_state_node_set_state(cr_state_t *st, const char *id, cr_node_state_t s, int64_t now_ms);
int cr_state_node_heartbeat(cr_state_t *st, const char *id, int64_t time_ms);
/* Fills *out (caller frees with cr_state_node_free); CR_ENOENT if none. */
int cr_state_node_get(cr_state_t *st, const char *id, cr_state_node_t *out);
/* All nodes, by id; *out is NULL when there are none. */
int cr_state_node_list(cr_state_t *st, cr_state_node_t **out, size_t *n);
/* Removes a node; workers and bundles on it keep the id as plain text. */
int cr_state_node_delete(cr_state_t *st, const char *id);
void cr_state_node_free(cr_state_node_t *n);
void cr_state_node_list_free(cr_state_node_t *v, size_t n);

/* ---- jobs ---- */
/* Inserts job (its id, created_ms and updated_ms are ignored: the new id
 * goes to *id, both times are now_ms). */
int cr_state_job_create(cr_state_t *st, const cr_state_job_t *job, int64_t now_ms, int64_t *id);
/* State and reason (NULL clears it). */
int cr_state_job_set_state(cr_state_t *st, int64_t id, cr_job_state_t s, const char *reason,
                           int64_t now_ms);
/* Stores a new restart count. */
int cr_state_job_set_restarts(cr_state_t *st, int64_t id, int restarts, int64_t now_ms);
int cr_state_job_get(cr_state_t *st, int64_t id, cr_state_job_t *out);
/* All jobs by id; with only_active, those not in a final state. */
int cr_state_job_list(cr_state_t *st, bool only_active, cr_state_job_t **out, size_t *n);
/* Removes the job and its workers. */
int cr_state_job_delete(cr_state_t *st, int64_t id);
void cr_state_job_free(cr_state_job_t *j);
void cr_state_job_list_free(cr_state_job_t *v, size_t n);

/* ---- workers: (job_id, index) is the key ---- */
int cr_state_worker_create(cr_state_t *st, const cr_state_worker_t *w, int64_t now_ms);
/* Writes every field but the key; CR_ENOENT if there is no such worker. */
int cr_state_worker_update(cr_state_t *st, const cr_state_worker_t *w, int64_t now_ms);
/* Only the state (the common transition). */
int cr_state_worker_set_state(cr_state_t *st, int64_t job_id, int index, cr_worker_state_t s,
                              int64_t now_ms);
int cr_state_worker_get(cr_state_t *st, int64_t job_id, int index, cr_state_worker_t *out);
/* The workers of one job by index (job_id > 0), or those placed on one
 * node (node_id not NULL, job_id 0; for re-adoption after a restart), or
 * all (0, NULL). */
int cr_state_worker_list(cr_state_t *st, int64_t job_id, const char *node_id,
                         cr_state_worker_t **out, size_t *n);
void cr_state_worker_free(cr_state_worker_t *w);
void cr_state_worker_list_free(cr_state_worker_t *v, size_t n);

/* ---- placement groups ---- */
/* Inserts pg with its bundles in one transaction (bundle indexes must be
 * 0..n-1); the new id goes to *id. */
int cr_state_pg_create(cr_state_t *st, const cr_state_pg_t *pg, int64_t now_ms, int64_t *id);
int cr_state_pg_set_state(cr_state_t *st, int64_t id, cr_pg_state_t s, int64_t now_ms);
/* Records where bundle index of pg is reserved (node_id NULL: released). */
int cr_state_pg_set_bundle(cr_state_t *st, int64_t id, int index, const char *node_id,
                           const char *devices, int64_t now_ms);
int cr_state_pg_get(cr_state_t *st, int64_t id, cr_state_pg_t *out);
/* CR_ENOENT when no group has that name. */
int cr_state_pg_get_by_name(cr_state_t *st, const char *name, cr_state_pg_t *out);
int cr_state_pg_list(cr_state_t *st, cr_state_pg_t **out, size_t *n);
/* Removes the group and its bundles. */
int cr_state_pg_delete(cr_state_t *st, int64_t id);
void cr_state_pg_free(cr_state_pg_t *pg);
void cr_state_pg_list_free(cr_state_pg_t *v, size_t n);

/* ---- events ---- */
/* Appends ev (its id is ignored; the new one goes to *id if not NULL). */
int cr_state_event_append(cr_state_t *st, const cr_state_event_t *ev, int64_t *id);
/* The id of the k-th newest event (1: the newest), 0 when there are
 * fewer than k (or k is 0): O(k), for a listing of the newest k. */
int cr_state_event_newest(cr_state_t *st, size_t k, int64_t *id);
/* How many events have id > after_id (counted, not read). */
int cr_state_event_count(cr_state_t *st, int64_t after_id, size_t *n);
/* Events with id > after_id, oldest first, at most limit (0: all). */
int cr_state_event_list(cr_state_t *st, int64_t after_id, size_t limit, cr_state_event_t **out,
                        size_t *n);
/* Job job_id's events with id > after_id, at most limit (0: all): its
 * newest limit (newest) or its oldest, oldest first either way; through
 * the index on the job, whatever the log holds. */
int cr_state_event_list_job(cr_state_t *st, int64_t job_id, int64_t after_id, size_t limit,
                            bool newest, cr_state_event_t **out, size_t *n);
/* Deletes events with id <= up_to_id (the log is trimmed by the caller's
 * retention policy, never here). */
int cr_state_event_trim(cr_state_t *st, int64_t up_to_id);
/* Removes the events of job job_id (head/retention.c, with the job), read
 * through the index events_job: the cost of the job's events only. */
int cr_state_event_delete_job(cr_state_t *st, int64_t job_id);
void cr_state_event_list_free(cr_state_event_t *v, size_t n);

/* For tests and benchmarks only: the underlying connection (to shrink
 * max_page_count, run PRAGMAs). Owned by st. */
struct sqlite3;
struct sqlite3 *cr__state_db(cr_state_t *st);

#endif
