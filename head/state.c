/* The head's persistent state in SQLite (see state.h for the contract).
 *
 * Layout: the schema is a table of migration steps; every SQL statement is
 * one row of a table, prepared once on first use and kept; SQLite's
 * result codes become corral codes through one table that also says what
 * the operator should do. States are stored by name so that the file
 * reads well with the sqlite3 tool, and CHECK constraints keep out what
 * the enums do not know. */
#include "head/state.h"
#include "base/base.h"
#include <errno.h>
#include <libgen.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* ---- names ---- */
static const char *const node_state_names[] = {"ALIVE", "SUSPECT", "DEAD"};
static const char *const job_state_names[] = {"PENDING",   "PLACING", "RUNNING",
                                              "SUCCEEDED", "FAILED",  "STOPPED"};
static const char *const restart_names[] = {"none", "worker", "gang"};
static const char *const worker_state_names[] = {"PENDING", "STARTING", "RUNNING",
                                                 "EXITED",  "STOPPED",  "LOST"};
static const char *const pg_state_names[] = {"PENDING", "PREPARED", "CREATED", "REMOVED"};
static const char *const pg_strategy_names[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};

/* NULL for a value out of range: bound as NULL, the NOT NULL constraint
 * refuses it with CR_EINVAL. */
#define NAME_OR_NULL(table, v)                                                                     \
    ((unsigned)(v) < CR_ARRAY_SIZE(table) ? (table)[(unsigned)(v)] : NULL)
#define NAME_OR_UNKNOWN(table, v) (NAME_OR_NULL(table, v) ? NAME_OR_NULL(table, v) : "UNKNOWN")

const char *cr_node_state_name(cr_node_state_t s)
{
    return NAME_OR_UNKNOWN(node_state_names, s);
}
const char *cr_job_state_name(cr_job_state_t s)
{
    return NAME_OR_UNKNOWN(job_state_names, s);
}
const char *cr_restart_policy_name(cr_restart_policy_t p)
{
    return NAME_OR_UNKNOWN(restart_names, p);
}
const char *cr_worker_state_name(cr_worker_state_t s)
{
    return NAME_OR_UNKNOWN(worker_state_names, s);
}
const char *cr_pg_state_name(cr_pg_state_t s)
{
    return NAME_OR_UNKNOWN(pg_state_names, s);
}
const char *cr_pg_strategy_name(cr_pg_strategy_t s)
{
    return NAME_OR_UNKNOWN(pg_strategy_names, s);
}

static int name_index(const char *const *names, size_t n, const char *s)
{
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(names[i], s) == 0)
            return (int)i;
    return CR_EINVAL;
}

int cr_job_state_parse(const char *name, cr_job_state_t *out)
{
    int i = name_index(job_state_names, CR_ARRAY_SIZE(job_state_names), name);
    if (i < 0)
        return i;
    *out = (cr_job_state_t)i;
    return 0;
}

int cr_pg_strategy_parse(const char *name, cr_pg_strategy_t *out)
{
    int i = name_index(pg_strategy_names, CR_ARRAY_SIZE(pg_strategy_names), name);
    if (i < 0)
        return i;
    *out = (cr_pg_strategy_t)i;
    return 0;
}

bool cr_job_state_is_final(cr_job_state_t s)
{
    return s == CR_JOB_SUCCEEDED || s == CR_JOB_FAILED || s == CR_JOB_STOPPED;
}

/* ---- the schema: migrations[i] takes version i to version i + 1 ---- */
static const char *const migrations[] = {
    /* 1: the first schema */
    "CREATE TABLE head (id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  generation INTEGER NOT NULL);"
    "INSERT INTO head VALUES (1, 0);"
    "CREATE TABLE nodes ("
    "  id TEXT PRIMARY KEY NOT NULL,"
    "  incarnation INTEGER NOT NULL,"
    "  address TEXT,"
    "  state TEXT NOT NULL CHECK (state IN ('ALIVE','SUSPECT','DEAD')),"
    "  desc_json TEXT,"
    "  last_heartbeat_ms INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL);"
    "CREATE TABLE jobs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name TEXT,"
    "  spec_json TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN"
    "    ('PENDING','PLACING','RUNNING','SUCCEEDED','FAILED','STOPPED')),"
    "  reason TEXT,"
    "  restart_policy TEXT NOT NULL CHECK (restart_policy IN ('none','worker','gang')),"
    "  max_restarts INTEGER NOT NULL CHECK (max_restarts >= 0),"
    "  restarts INTEGER NOT NULL CHECK (restarts >= 0),"
    "  created_ms INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL);"
    "CREATE INDEX jobs_state ON jobs (state);"
    "CREATE TABLE workers ("
    "  job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,"
    "  idx INTEGER NOT NULL CHECK (idx >= 0),"
    "  node_id TEXT,"
    "  devices TEXT,"
    "  pid INTEGER NOT NULL,"
    "  pgid INTEGER NOT NULL,"
    "  start_time INTEGER NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN"
    "    ('PENDING','STARTING','RUNNING','EXITED','STOPPED','LOST')),"
    "  exit_code INTEGER NOT NULL,"
    "  exit_signal INTEGER NOT NULL,"
    "  restarts INTEGER NOT NULL CHECK (restarts >= 0),"
    "  stdout_path TEXT,"
    "  stderr_path TEXT,"
    "  updated_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, idx));"
    "CREATE INDEX workers_node ON workers (node_id);"
    "CREATE TABLE pgs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name TEXT UNIQUE,"
    "  strategy TEXT NOT NULL CHECK (strategy IN"
    "    ('PACK','SPREAD','STRICT_PACK','STRICT_SPREAD')),"
    "  state TEXT NOT NULL CHECK (state IN ('PENDING','PREPARED','CREATED','REMOVED')),"
    "  created_ms INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL);"
    "CREATE TABLE bundles ("
    "  pg_id INTEGER NOT NULL REFERENCES pgs (id) ON DELETE CASCADE,"
    "  idx INTEGER NOT NULL CHECK (idx >= 0),"
    "  resources_json TEXT NOT NULL,"
    "  node_id TEXT,"
    "  devices TEXT,"
    "  PRIMARY KEY (pg_id, idx));"
    "CREATE TABLE events ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  time_ms INTEGER NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  job_id INTEGER,"
    "  node_id TEXT,"
    "  pg_id INTEGER,"
    "  message TEXT NOT NULL);",
    /* 2: what of a worker's output its remote agent wrote and never
     * delivered (WorkerStatus.output_lost), kept across a head restart */
    ("ALTER TABLE workers ADD COLUMN output_lost INTEGER NOT NULL DEFAULT 0"
     "  CHECK (output_lost >= 0);"),
    /* 3: no index on a job's state. Every state change of a job rewrote
     * a page of it (a WAL frame in each of a run's three commits), and
     * no query of the head's needs it: a restarted head reads every job
     * (retention bounds them), and the active list scans. */
    "DROP INDEX IF EXISTS jobs_state;",
    /* 4: a job's events by the job. A job credential (a worker of the
     * job) lists its own events: without this every such request read
     * the whole log, 100,000 events by default and 80 ms of the head's
     * loop, and any worker could repeat it. One page of it more in a
     * commit that appends a job's events; partial, so a node's events
     * (no job) cost it nothing (job_id = ? implies IS NOT NULL, so
     * SQLite uses it for a job's). */
    "CREATE INDEX IF NOT EXISTS events_job ON events (job_id, id) WHERE job_id IS NOT NULL;",
};
_Static_assert(CR_ARRAY_SIZE(migrations) == CR_STATE_SCHEMA_VERSION,
               "one migration step per schema version");

/* ---- statements, prepared once on first use ---- */
#define NODE_COLS "id, incarnation, address, state, desc_json, last_heartbeat_ms, updated_ms"
#define JOB_COLS                                                                                   \
    "id, name, spec_json, state, reason, restart_policy, max_restarts, restarts, created_ms, "     \
    "updated_ms"
#define WORKER_COLS                                                                                \
    "job_id, idx, node_id, devices, pid, pgid, start_time, state, exit_code, exit_signal, "        \
    "restarts, stdout_path, stderr_path, updated_ms, output_lost"
#define PG_COLS "id, name, strategy, state, created_ms, updated_ms"
#define EVENT_COLS "id, time_ms, kind, job_id, node_id, pg_id, message"

enum stmt_id {
    S_BEGIN,
    S_COMMIT,
    S_ROLLBACK,
    S_SAVEPOINT,
    S_RELEASE,
    S_ROLLBACK_TO,
    S_BEGIN_READ, /* the last of the transaction's own statements */
    S_NODE_PUT,
    S_NODE_SET_STATE,
    S_NODE_HEARTBEAT,
    S_NODE_GET,
    S_NODE_LIST,
    S_NODE_DELETE,
    S_JOB_INSERT,
    S_JOB_SET_STATE,
    S_JOB_SET_RESTARTS,
    S_JOB_GET,
    S_JOB_LIST,
    S_JOB_LIST_ACTIVE,
    S_JOB_DELETE,
    S_WORKER_INSERT,
    S_WORKER_UPDATE,
    S_WORKER_UPDATE_SAME_NODE,
    S_WORKER_SET_STATE,
    S_WORKER_GET,
    S_WORKER_LIST_JOB,
    S_WORKER_LIST_NODE,
    S_WORKER_LIST_ALL,
    S_PG_INSERT,
    S_PG_SET_STATE,
    S_PG_TOUCH,
    S_PG_GET,
    S_PG_GET_BY_NAME,
    S_PG_LIST,
    S_PG_DELETE,
    S_BUNDLE_INSERT,
    S_BUNDLE_SET,
    S_BUNDLE_LIST,
    S_EVENT_INSERT,
    S_EVENT_LIST,
    S_EVENT_TRIM,
    S_EVENT_NEWEST,
    S_EVENT_COUNT,
    S_EVENT_DELETE_JOB,
    S_EVENT_LIST_JOB_NEWEST,
    S_EVENT_LIST_JOB,
    S__COUNT
};

static const char *const stmt_sql[S__COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_SAVEPOINT] = "SAVEPOINT cr",
    [S_RELEASE] = "RELEASE cr",
    [S_ROLLBACK_TO] = "ROLLBACK TO cr",
    [S_BEGIN_READ] = "BEGIN DEFERRED",
    [S_NODE_PUT] = "INSERT INTO nodes (" NODE_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
                   "ON CONFLICT (id) DO UPDATE SET incarnation = excluded.incarnation, "
                   "address = excluded.address, state = excluded.state, "
                   "desc_json = excluded.desc_json, "
                   "last_heartbeat_ms = excluded.last_heartbeat_ms, "
                   "updated_ms = excluded.updated_ms",
    [S_NODE_SET_STATE] = "UPDATE nodes SET state = ?2, updated_ms = ?3 WHERE id = ?1",
    [S_NODE_HEARTBEAT] = "UPDATE nodes SET last_heartbeat_ms = ?2 WHERE id = ?1",
    [S_NODE_GET] = "SELECT " NODE_COLS " FROM nodes WHERE id = ?1",
    [S_NODE_LIST] = "SELECT " NODE_COLS " FROM nodes ORDER BY id",
    [S_NODE_DELETE] = "DELETE FROM nodes WHERE id = ?1",
    [S_JOB_INSERT] = "INSERT INTO jobs (name, spec_json, state, reason, restart_policy, "
                     "max_restarts, restarts, created_ms, updated_ms) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
    [S_JOB_SET_STATE] = "UPDATE jobs SET state = ?2, reason = ?3, updated_ms = ?4 WHERE id = ?1",
    [S_JOB_SET_RESTARTS] = "UPDATE jobs SET restarts = ?2, updated_ms = ?3 WHERE id = ?1",
    [S_JOB_GET] = "SELECT " JOB_COLS " FROM jobs WHERE id = ?1",
    [S_JOB_LIST] = "SELECT " JOB_COLS " FROM jobs ORDER BY id",
    [S_JOB_LIST_ACTIVE] = "SELECT " JOB_COLS " FROM jobs WHERE state IN "
                          "('PENDING','PLACING','RUNNING') ORDER BY id",
    [S_JOB_DELETE] = "DELETE FROM jobs WHERE id = ?1",
    [S_WORKER_INSERT] = "INSERT INTO workers (" WORKER_COLS ") VALUES "
                        "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    [S_WORKER_UPDATE] = "UPDATE workers SET node_id = ?3, devices = ?4, pid = ?5, pgid = ?6, "
                        "start_time = ?7, state = ?8, exit_code = ?9, exit_signal = ?10, "
                        "restarts = ?11, stdout_path = ?12, stderr_path = ?13, updated_ms = ?14, "
                        "output_lost = ?15 WHERE job_id = ?1 AND idx = ?2",
    /* the update of a worker that stays on its node (most: its start
     * after the submit named the node, its exit, its restarts): node_id
     * is not set, so its index is not rewritten (a WAL frame a commit) */
    [S_WORKER_UPDATE_SAME_NODE] = "UPDATE workers SET devices = ?4, pid = ?5, pgid = ?6, "
                                  "start_time = ?7, state = ?8, exit_code = ?9, "
                                  "exit_signal = ?10, restarts = ?11, stdout_path = ?12, "
                                  "stderr_path = ?13, updated_ms = ?14, output_lost = ?15 "
                                  "WHERE job_id = ?1 AND idx = ?2 AND node_id IS ?3",
    [S_WORKER_SET_STATE] = "UPDATE workers SET state = ?3, updated_ms = ?4 "
                           "WHERE job_id = ?1 AND idx = ?2",
    [S_WORKER_GET] = "SELECT " WORKER_COLS " FROM workers WHERE job_id = ?1 AND idx = ?2",
    [S_WORKER_LIST_JOB] = "SELECT " WORKER_COLS " FROM workers WHERE job_id = ?1 ORDER BY idx",
    [S_WORKER_LIST_NODE] = "SELECT " WORKER_COLS " FROM workers WHERE node_id = ?1 "
                           "ORDER BY job_id, idx",
    [S_WORKER_LIST_ALL] = "SELECT " WORKER_COLS " FROM workers ORDER BY job_id, idx",
    [S_PG_INSERT] = "INSERT INTO pgs (name, strategy, state, created_ms, updated_ms) "
                    "VALUES (?1, ?2, ?3, ?4, ?4)",
    [S_PG_SET_STATE] = "UPDATE pgs SET state = ?2, updated_ms = ?3 WHERE id = ?1",
    [S_PG_TOUCH] = "UPDATE pgs SET updated_ms = ?2 WHERE id = ?1",
    [S_PG_GET] = "SELECT " PG_COLS " FROM pgs WHERE id = ?1",
    [S_PG_GET_BY_NAME] = "SELECT " PG_COLS " FROM pgs WHERE name = ?1",
    [S_PG_LIST] = "SELECT " PG_COLS " FROM pgs ORDER BY id",
    [S_PG_DELETE] = "DELETE FROM pgs WHERE id = ?1",
    [S_BUNDLE_INSERT] = "INSERT INTO bundles (pg_id, idx, resources_json, node_id, devices) "
                        "VALUES (?1, ?2, ?3, ?4, ?5)",
    [S_BUNDLE_SET] = "UPDATE bundles SET node_id = ?3, devices = ?4 WHERE pg_id = ?1 AND idx = ?2",
    [S_BUNDLE_LIST] = "SELECT idx, resources_json, node_id, devices FROM bundles "
                      "WHERE pg_id = ?1 ORDER BY idx",
    [S_EVENT_INSERT] = "INSERT INTO events (time_ms, kind, job_id, node_id, pg_id, message) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [S_EVENT_LIST] = "SELECT " EVENT_COLS " FROM events WHERE id > ?1 ORDER BY id LIMIT ?2",
    [S_EVENT_TRIM] = "DELETE FROM events WHERE id <= ?1",
    [S_EVENT_NEWEST] = "SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?1",
    /* through events_job: the rows read are the ones returned */
    [S_EVENT_LIST_JOB_NEWEST] = "SELECT " EVENT_COLS " FROM events WHERE job_id = ?1 AND id > ?2 "
                                "ORDER BY id DESC LIMIT ?3",
    [S_EVENT_LIST_JOB] = "SELECT " EVENT_COLS " FROM events WHERE job_id = ?1 AND id > ?2 "
                         "ORDER BY id LIMIT ?3",
    [S_EVENT_COUNT] = "SELECT count(*) FROM events WHERE id > ?1",
    /* through events_job: the rows read are the job's. Not one pass of
     * "job_id NOT IN jobs" after a batch, which (with the index, schema 4)
     * looked up every event's job: at 10,000 jobs kept and 50,000 events,
     * 150 page reads a run and 20 ms or more of the loop once a second
     * while retention removed jobs */
    [S_EVENT_DELETE_JOB] = "DELETE FROM events WHERE job_id = ?1",
};

struct cr_state {
    sqlite3 *db;
    char *path;
    int64_t generation;
    bool in_tx;
    /* how far the open transaction (in_tx) is in SQLite: cr_state_begin
     * only marks it open; its first read runs BEGIN DEFERRED (one read
     * snapshot for the turn, not one per statement), its first write
     * BEGIN IMMEDIATE or, after a read, takes the write lock with that
     * write. A turn that touches no table (a status served from memory, a
     * heartbeat that changes nothing) costs SQLite nothing (issue 18). */
    enum { BEGUN_NO, BEGUN_READ, BEGUN_WRITE } begun;
    int depth;  /* cr_state_begin calls inside the open transaction */
    int tx_err; /* the first failure since cr_state_begin: the transaction is doomed */
    int fault_after, fault_rc; /* cr_state_fault_commit */
    sqlite3_stmt *stmt[S__COUNT];
    char errmsg[CR_STATE_ERRMSG_MAX];
};

/* ---- errors: SQLite's codes, ours, and what to do ---- */
#define HINT_DAMAGED                                                                               \
    "the file is damaged or is not a database: move it aside to start with an empty state "        \
    "(the jobs recorded in it are then forgotten), or restore a copy"

static const struct sqlite_err {
    int code; /* extended code, or a primary one matching all its extended codes */
    int err;
    const char *hint;
} sqlite_errs[] = {
    {SQLITE_CONSTRAINT_PRIMARYKEY, CR_EEXIST, "that id is already taken"},
    {SQLITE_CONSTRAINT_UNIQUE, CR_EEXIST, "that name is already taken"},
    {SQLITE_CONSTRAINT_FOREIGNKEY, CR_ENOENT, "it refers to a job or group that does not exist"},
    {SQLITE_CONSTRAINT, CR_EINVAL, "a value is missing or out of range"},
    {SQLITE_FULL, CR_ENOSPC,
     "the disk is full: free space on its file system; this change was not saved"},
    {SQLITE_READONLY, CR_EACCES,
     "it is read-only: make the file and its directory writable by this user, or use another "
     "CORRAL_HOME"},
    {SQLITE_PERM, CR_EACCES, "permission denied: make the file writable by this user"},
    {SQLITE_AUTH, CR_EACCES, "permission denied"},
    {SQLITE_CANTOPEN, CR_EIO, "check that its directory exists and is writable by this user"},
    {SQLITE_NOTADB, CR_EPARSE, HINT_DAMAGED},
    {SQLITE_CORRUPT, CR_EPARSE, HINT_DAMAGED},
    {SQLITE_BUSY, CR_EAGAIN,
     "another process holds it locked: is another corrald using this session directory?"},
    {SQLITE_LOCKED, CR_EAGAIN, "it is locked"},
    {SQLITE_NOMEM, CR_ENOMEM, "out of memory"},
    {SQLITE_TOOBIG, CR_E2BIG, "a value is too large"},
    {SQLITE_IOERR, CR_EIO, "an I/O error: check the disk and the kernel log"},
    {SQLITE_MISUSE, CR_EINVAL, "a bug in corral: please report it"},
    /* in a file this code made, a plain SQL error means its tables are
     * not the ones the schema version promises */
    {SQLITE_ERROR, CR_ESCHEMA,
     "its tables do not match its schema version (was it edited by hand?): move it aside to "
     "start with an empty state"},
};

static const struct sqlite_err *sqlite_err_of(int rc)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(sqlite_errs); i++)
        if (sqlite_errs[i].code == rc)
            return &sqlite_errs[i];
    for (size_t i = 0; i < CR_ARRAY_SIZE(sqlite_errs); i++)
        if (sqlite_errs[i].code == (rc & 0xff))
            return &sqlite_errs[i];
    return NULL;
}

static void doom(cr_state_t *st, int err)
{
    if (st->in_tx && !st->tx_err)
        st->tx_err = err;
}

/* A failure that is not SQLite's (no such row, bad argument). */
static int failf(cr_state_t *st, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int failf(cr_state_t *st, int err, const char *fmt, ...)
{
    int off = snprintf(st->errmsg, sizeof(st->errmsg), "state database %s: ", st->path);
    va_list ap;
    va_start(ap, fmt);
    if (off >= 0 && (size_t)off < sizeof(st->errmsg))
        vsnprintf(st->errmsg + off, sizeof(st->errmsg) - off, fmt, ap);
    va_end(ap);
    return err;
}

/* Why the file or its directory cannot be opened, from the errno SQLite
 * saw: the directory is named, since that is what the operator fixes. */
static int cantopen(cr_state_t *st, const char *what)
{
    int e = sqlite3_system_errno(st->db);
    char *copy = cr_strdup(st->path);
    const char *dir = dirname(copy);
    int err;
    if (access(dir, F_OK) != 0)
        err = failf(st, CR_ENOENT,
                    "%s: directory %s does not exist: create it or use another "
                    "CORRAL_HOME",
                    what, dir);
    else if (access(dir, W_OK) != 0 || e == EACCES || e == EPERM || e == EROFS)
        err = failf(st, CR_EACCES,
                    "%s: %s: directory %s is not writable by this user (corrald "
                    "needs to create the database and its -wal and -shm files there): fix its "
                    "permissions or use another CORRAL_HOME",
                    what, e ? strerror(e) : "cannot open", dir);
    else
        err = failf(st, CR_EIO, "%s: cannot open it: %s; check the file and its directory", what,
                    e ? strerror(e) : sqlite3_errmsg(st->db));
    free(copy);
    return err;
}

/* Turns SQLite's rc into a corral code with a message. */
static int fail(cr_state_t *st, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(cr_state_t *st, int rc, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (st->db && (rc & 0xff) == SQLITE_CANTOPEN)
        return cantopen(st, what);
    /* a full disk met while growing the -shm file or syncing is an I/O
     * error to SQLite, but the operator's fix is the same */
    if (st->db && (rc & 0xff) == SQLITE_IOERR && sqlite3_system_errno(st->db) == ENOSPC)
        rc = SQLITE_FULL;
    const struct sqlite_err *e = sqlite_err_of(rc);
    int err = e ? e->err : CR_EIO;
    return failf(st, err, "%s: %s (%s)", what, st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc),
                 e ? e->hint : "an unexpected SQLite error");
}

/* ---- statement helpers ---- */
static int prepare(cr_state_t *st, enum stmt_id id, sqlite3_stmt **out)
{
    if (!st->stmt[id]) {
        int rc = sqlite3_prepare_v3(st->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                    &st->stmt[id], NULL);
        if (rc != SQLITE_OK)
            return fail(st, rc, "preparing a statement");
    }
    *out = st->stmt[id];
    /* a read in an open transaction not yet in SQLite: one read
     * snapshot for the rest of the turn (see begun) */
    if (id > S_BEGIN_READ && st->in_tx && st->begun == BEGUN_NO && !st->tx_err) {
        st->begun = BEGUN_READ;
        sqlite3_stmt *b;
        int err = prepare(st, S_BEGIN_READ, &b);
        if (!err) {
            int rc = sqlite3_step(b);
            sqlite3_reset(b);
            if (rc != SQLITE_DONE)
                err = fail(st, rc, "starting a transaction");
        }
        if (err) {
            st->begun = BEGUN_NO;
            doom(st, err);
        }
    }
    return 0;
}

static void finish(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

static void bind_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, i);
}

/* 0 is "none" for optional references */
static void bind_ref(sqlite3_stmt *s, int i, int64_t v)
{
    if (v)
        sqlite3_bind_int64(s, i, v);
    else
        sqlite3_bind_null(s, i);
}

static char *col_text(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? cr_strdup((const char *)t) : NULL;
}

/* Runs a write statement whose parameters are bound. With must_change, a
 * statement that touched no row is CR_ENOENT (what names the row). */
static int run(cr_state_t *st, sqlite3_stmt *s, bool must_change, const char *what)
{
    int rc = sqlite3_step(s);
    int err = 0;
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        err = fail(st, rc, "%s", what);
    else if (must_change && sqlite3_changes(st->db) == 0)
        err = failf(st, CR_ENOENT, "%s: no such record", what);
    finish(s);
    doom(st, err);
    return err;
}

static int exec_stmt(cr_state_t *st, enum stmt_id id, const char *what);

/* A write may not start in a doomed transaction; the first write of an
 * open one starts it in SQLite (cr_state_begin defers that). A failed
 * BEGIN dooms the transaction: its commit then fails with that error. */
static int writable(cr_state_t *st)
{
    if (!st->in_tx || st->tx_err || st->begun == BEGUN_WRITE)
        return st->in_tx ? st->tx_err : 0;
    if (st->begun == BEGUN_READ) { /* this write takes the write lock */
        st->begun = BEGUN_WRITE;
        return 0;
    }
    st->begun = BEGUN_WRITE; /* before exec_stmt: BEGIN itself is a write */
    if (exec_stmt(st, S_BEGIN, "starting a transaction"))
        st->begun = BEGUN_NO;
    return st->tx_err;
}

/* prepare for a write: a failure dooms the transaction */
static int prepare_w(cr_state_t *st, enum stmt_id id, sqlite3_stmt **out)
{
    int err = prepare(st, id, out);
    doom(st, err);
    return err;
}

static int exec_stmt(cr_state_t *st, enum stmt_id id, const char *what)
{
    sqlite3_stmt *s = NULL;
    int err = prepare_w(st, id, &s);
    return err ? err : run(st, s, false, what);
}

/* Several statements as one unit, inside or outside cr_state_begin: a
 * savepoint, released on success, rolled back to on failure. */
static int unit_begin(cr_state_t *st)
{
    int err = writable(st);
    return err ? err : exec_stmt(st, S_SAVEPOINT, "starting a transaction");
}

static int unit_end(cr_state_t *st, int err)
{
    if (!err)
        err = exec_stmt(st, S_RELEASE, "committing");
    if (err && !sqlite3_get_autocommit(st->db)) {
        /* SQLite may already have rolled everything back (disk full, I/O
         * error): then there is no savepoint left to go back to */
        sqlite3_stmt *s = NULL;
        if (prepare(st, S_ROLLBACK_TO, &s) == 0) {
            sqlite3_step(s);
            finish(s);
        }
        if (prepare(st, S_RELEASE, &s) == 0) {
            sqlite3_step(s);
            finish(s);
        }
    }
    return err;
}

/* Runs a query and collects its rows through fn into a malloc'ed array
 * of elem-sized records; fini frees one record's members. */
typedef int (*row_fn)(cr_state_t *st, sqlite3_stmt *s, void *rec);
static int query(cr_state_t *st, sqlite3_stmt *s, const char *what, row_fn fn, void (*fini)(void *),
                 size_t elem, void **out, size_t *n)
{
    char *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc, err = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        cr__vec_grow((void **)&v, &cap, cnt + 1, elem);
        memset(v + cnt * elem, 0, elem);
        cnt++;
        if ((err = fn(st, s, v + (cnt - 1) * elem)) < 0)
            goto out_free;
    }
    if (rc != SQLITE_DONE) {
        err = fail(st, rc, "%s", what);
        goto out_free;
    }
    finish(s);
    *out = v;
    *n = cnt;
    return 0;
out_free:
    finish(s);
    for (size_t i = 0; i < cnt; i++)
        fini(v + i * elem);
    free(v);
    *out = NULL;
    *n = 0;
    return err;
}

/* One row into *out, CR_ENOENT when there is none. */
static int query_one(cr_state_t *st, sqlite3_stmt *s, const char *what, row_fn fn,
                     void (*fini)(void *), size_t elem, void *out)
{
    void *v;
    size_t n;
    int err = query(st, s, what, fn, fini, elem, &v, &n);
    if (err)
        return err;
    if (n == 0)
        return failf(st, CR_ENOENT, "%s: no such record", what);
    memcpy(out, v, elem);
    for (size_t i = 1; i < n; i++)
        fini((char *)v + i * elem);
    free(v);
    return 0;
}

/* A state column back into its enum; a name this code does not know
 * (the file was edited by hand) is reported, not guessed. */
static int col_enum(cr_state_t *st, sqlite3_stmt *s, int i, const char *const *names, size_t n,
                    int *out)
{
    const char *t = (const char *)sqlite3_column_text(s, i);
    int v = name_index(names, n, t);
    if (v < 0)
        return failf(st, CR_EPARSE, "unknown value '%s' in column %s: " HINT_DAMAGED,
                     t ? t : "NULL", sqlite3_column_name(s, i));
    *out = v;
    return 0;
}
#define COL_ENUM(st, s, i, table, out) col_enum(st, s, i, table, CR_ARRAY_SIZE(table), (int *)(out))

/* ---- open and close ---- */
static int exec_sql(cr_state_t *st, const char *sql, const char *what)
{
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : fail(st, rc, "%s", what);
}

static int query_int(cr_state_t *st, const char *sql, const char *what, int64_t *out)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return fail(st, rc, "%s", what);
    rc = sqlite3_step(s);
    int err = 0;
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else if (rc == SQLITE_DONE)
        *out = 0;
    else
        err = fail(st, rc, "%s", what);
    sqlite3_finalize(s);
    return err;
}

/* Brings the schema to CR_STATE_SCHEMA_VERSION in one transaction and
 * counts this open, which also proves at open that the file and disk take
 * writes (a full disk is reported now, not at the first job). */
static int migrate(cr_state_t *st)
{
    int64_t have, others, version = 0;
    int err = exec_sql(st, "BEGIN IMMEDIATE", "starting the schema check");
    if (err)
        return err;
    if ((err = query_int(st,
                         "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                         "name = 'schema_version'",
                         "reading the schema", &have)) ||
        (err = query_int(st,
                         "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                         "name <> 'schema_version' AND name NOT LIKE 'sqlite_%'",
                         "reading the schema", &others)))
        goto out_rollback;
    if (!have && others) {
        err = failf(st, CR_ESCHEMA,
                    "it is not a corral state database (it has tables but no "
                    "schema_version): point corral at another file or move this one aside");
        goto out_rollback;
    }
    if (!have && (err = exec_sql(st,
                                 "CREATE TABLE schema_version (version INTEGER NOT NULL);"
                                 "INSERT INTO schema_version VALUES (0)",
                                 "creating the schema")))
        goto out_rollback;
    if ((err = query_int(st, "SELECT max(version) FROM schema_version", "reading the schema",
                         &version)))
        goto out_rollback;
    if (version > CR_STATE_SCHEMA_VERSION) {
        err = failf(st, CR_ESCHEMA,
                    "it has schema version %lld, newer than this corral's %d "
                    "(it was written by a later corral): run that corral, or move the file aside "
                    "to start with an empty state",
                    (long long)version, CR_STATE_SCHEMA_VERSION);
        goto out_rollback;
    }
    for (int64_t v = version < 0 ? 0 : version; v < CR_STATE_SCHEMA_VERSION; v++) {
        char what[64];
        snprintf(what, sizeof(what), "migrating the schema to version %lld", (long long)v + 1);
        if ((err = exec_sql(st, migrations[v], what)))
            goto out_rollback;
    }
    char sql[96];
    snprintf(sql, sizeof(sql), "UPDATE schema_version SET version = %d", CR_STATE_SCHEMA_VERSION);
    if ((err = exec_sql(st, sql, "recording the schema version")) ||
        (err =
             exec_sql(st, "UPDATE head SET generation = generation + 1", "recording this open")) ||
        (err =
             query_int(st, "SELECT generation FROM head", "recording this open", &st->generation)))
        goto out_rollback;
    return exec_sql(st, "COMMIT", "committing the schema");
out_rollback:
    if (!sqlite3_get_autocommit(st->db))
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return err;
}

/* Rewriting a page in place needs no new space, so a successful write at
 * open does not prove there is room for the next job: the free space is
 * checked too, so that a full disk stops the head at start. */
static int check_free_space(cr_state_t *st)
{
    char *copy = cr_strdup(st->path);
    const char *dir = dirname(copy);
    struct statvfs sv;
    int err = 0;
    if (statvfs(dir, &sv) == 0 &&
        (uint64_t)sv.f_bavail * sv.f_frsize < (uint64_t)CR_STATE_MIN_FREE_BYTES)
        err = failf(st, CR_ENOSPC,
                    "opening it: only %llu KiB free on the file system of %s, "
                    "less than the %d KiB the head needs to record its state: the disk is full: "
                    "free space there or use another CORRAL_HOME",
                    (unsigned long long)sv.f_bavail * sv.f_frsize / 1024, dir,
                    CR_STATE_MIN_FREE_BYTES / 1024);
    free(copy);
    return err;
}

/* PRAGMA quick_check (name "quick_check": the b-trees' and pages'
 * consistency, without the index-content check, O(size)) or
 * integrity_check (cr_state_check): damage is CR_EPARSE, said as what. */
static int run_check(cr_state_t *st, const char *name, const char *what)
{
    sqlite3_stmt *s = NULL;
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA %s(1)", name);
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return fail(st, rc, "checking it");
    int err = 0;
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const char *r = (const char *)sqlite3_column_text(s, 0);
        if (!r || strcmp(r, "ok") != 0)
            err = failf(st, CR_EPARSE, "%s: %s: " HINT_DAMAGED, what, r ? r : "no answer");
    } else {
        err = fail(st, rc, "checking it");
    }
    sqlite3_finalize(s);
    return err;
}

static int quick_check(cr_state_t *st)
{
    return run_check(st, "quick_check", "checking it (quick_check)");
}

int cr_state_open(const char *path, cr_state_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!path || !*path) {
        if (err && errlen)
            snprintf(err, errlen, "state database: no path given");
        return CR_EINVAL;
    }
    cr_state_t *st = cr_calloc(1, sizeof(*st));
    st->path = cr_strdup(path);
    int rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    int e = 0;
    if (st->db)
        sqlite3_extended_result_codes(st->db, 1);
    if (rc != SQLITE_OK) {
        e = fail(st, rc, "opening it");
        goto out_close;
    }
    /* SQLite quietly opens a file it cannot write read-only; a head that
     * cannot record what it acknowledges must not start */
    if (sqlite3_db_readonly(st->db, "main") == 1) {
        e = failf(st, CR_EACCES,
                  "opening it: the file is read-only for this user: make it "
                  "writable (chmod u+w, or run corrald as its owner) or use another CORRAL_HOME");
        goto out_close;
    }
    if ((e = check_free_space(st)))
        goto out_close;
    /* the head is its only writer; the wait covers a reader such as the
     * sqlite3 tool holding a lock for a moment */
    sqlite3_busy_timeout(st->db, 5000);
    /* the first statement reads the file: a damaged one shows up here */
    sqlite3_stmt *s = NULL;
    rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            const char *mode = (const char *)sqlite3_column_text(s, 0);
            rc = mode && strcmp(mode, "wal") == 0 ? SQLITE_OK : SQLITE_CANTOPEN;
        }
        sqlite3_finalize(s);
    }
    if (rc != SQLITE_OK) {
        e = fail(st, rc, "switching it to WAL mode");
        goto out_close;
    }
    /* see state.h for why NORMAL and not FULL; damage inside the file
     * (a page the header does not show) is found before anything is
     * written or read back from it */
    if ((e = exec_sql(st, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON",
                      "setting it up")) ||
        (e = quick_check(st)) || (e = migrate(st)))
        goto out_close;
    *out = st;
    return 0;
out_close:
    if (err && errlen)
        cr_strlcpy(err, st->errmsg, errlen);
    cr_state_close(st);
    return e;
}

void cr_state_close(cr_state_t *st)
{
    if (!st)
        return;
    if (st->in_tx)
        cr_state_rollback(st);
    for (size_t i = 0; i < S__COUNT; i++)
        sqlite3_finalize(st->stmt[i]);
    sqlite3_close_v2(st->db);
    free(st->path);
    free(st);
}

const char *cr_state_errmsg(const cr_state_t *st)
{
    return st->errmsg;
}

int64_t cr_state_generation(const cr_state_t *st)
{
    return st->generation;
}

const char *cr_state_path(const cr_state_t *st)
{
    return st->path;
}

struct sqlite3 *cr__state_db(cr_state_t *st)
{
    return st->db;
}

int cr_state_check(cr_state_t *st)
{
    return run_check(st, "integrity_check", "integrity check");
}

/* ---- transactions ---- */
int cr_state_begin(cr_state_t *st)
{
    if (st->in_tx) { /* nested: part of the open one */
        st->depth++;
        return 0;
    }
    st->in_tx = true; /* BEGIN waits for the first statement (prepare, writable) */
    st->begun = BEGUN_NO;
    st->tx_err = 0;
    return 0;
}

bool cr_state_in_transaction(const cr_state_t *st)
{
    return st->in_tx;
}

static void rollback_raw(cr_state_t *st)
{
    if (!sqlite3_get_autocommit(st->db)) {
        sqlite3_stmt *s = NULL;
        if (prepare(st, S_ROLLBACK, &s) == 0) {
            sqlite3_step(s);
            finish(s);
        }
    }
}

void cr_state_fault_commit(cr_state_t *st, int n, int rc)
{
    st->fault_after = n;
    st->fault_rc = rc;
}

/* The injected failure of this commit, if it is the one chosen. */
static int commit_fault(cr_state_t *st)
{
    if (st->fault_after <= 0 || --st->fault_after > 0)
        return 0;
    const struct sqlite_err *e = sqlite_err_of(st->fault_rc);
    return failf(st, e ? e->err : CR_EIO, "committing: %s (%s)", sqlite3_errstr(st->fault_rc),
                 e ? e->hint : "an unexpected SQLite error");
}

int cr_state_commit(cr_state_t *st)
{
    if (!st->in_tx)
        return failf(st, CR_EINVAL, "commit without a transaction");
    if (st->depth > 0) { /* an inner one: the outer commits */
        st->depth--;
        return st->tx_err;
    }
    int err = st->tx_err;
    st->in_tx = false;
    if (st->begun == BEGUN_NO && !err) /* nothing was read or written */
        return 0;
    bool wrote = st->begun == BEGUN_WRITE;
    st->begun = BEGUN_NO;
    if (!err && wrote)
        err = commit_fault(st);
    if (!err)
        err = exec_stmt(st, S_COMMIT, "committing");
    if (err)
        rollback_raw(st);
    st->tx_err = 0;
    return err;
}

void cr_state_rollback(cr_state_t *st)
{
    if (!st->in_tx)
        return;
    if (st->depth > 0) { /* an inner one dooms the outer */
        st->depth--;
        if (!st->tx_err)
            st->tx_err = CR_EAGAIN;
        return;
    }
    st->in_tx = false;
    st->begun = BEGUN_NO;
    st->tx_err = 0;
    rollback_raw(st);
}

/* ---- nodes ---- */
int cr_state_node_put(cr_state_t *st, const cr_state_node_t *n, int64_t now_ms)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_NODE_PUT, &s)))
        return err;
    bind_text(s, 1, n->id);
    sqlite3_bind_int64(s, 2, n->incarnation);
    bind_text(s, 3, n->address);
    bind_text(s, 4, NAME_OR_NULL(node_state_names, n->state));
    bind_text(s, 5, n->desc_json);
    sqlite3_bind_int64(s, 6, n->last_heartbeat_ms);
    sqlite3_bind_int64(s, 7, now_ms);
    return run(st, s, false, "storing a node");
}

int cr_state_node_set_state(cr_state_t *st, const char *id, cr_node_state_t state, int64_t now_ms)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_NODE_SET_STATE, &s)))
        return err;
    bind_text(s, 1, id);
    bind_text(s, 2, NAME_OR_NULL(node_state_names, state));
    sqlite3_bind_int64(s, 3, now_ms);
    char what[160];
    snprintf(what, sizeof(what), "node %s: setting its state", id ? id : "(null)");
    return run(st, s, true, what);
}

int cr_state_node_heartbeat(cr_state_t *st, const char *id, int64_t time_ms)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_NODE_HEARTBEAT, &s)))
        return err;
    bind_text(s, 1, id);
    sqlite3_bind_int64(s, 2, time_ms);
    char what[160];
    snprintf(what, sizeof(what), "node %s: recording a heartbeat", id ? id : "(null)");
    return run(st, s, true, what);
}

static int node_row(cr_state_t *st, sqlite3_stmt *s, void *rec)
{
    cr_state_node_t *n = rec;
    n->id = col_text(s, 0);
    n->incarnation = sqlite3_column_int64(s, 1);
    n->address = col_text(s, 2);
    n->desc_json = col_text(s, 4);
    n->last_heartbeat_ms = sqlite3_column_int64(s, 5);
    n->updated_ms = sqlite3_column_int64(s, 6);
    return COL_ENUM(st, s, 3, node_state_names, &n->state);
}

static void node_fini(void *rec)
{
    cr_state_node_free(rec);
}

int cr_state_node_get(cr_state_t *st, const char *id, cr_state_node_t *out)
{
    sqlite3_stmt *s = NULL;
    int err = prepare(st, S_NODE_GET, &s);
    if (err)
        return err;
    bind_text(s, 1, id);
    char what[160];
    snprintf(what, sizeof(what), "node %s", id ? id : "(null)");
    return query_one(st, s, what, node_row, node_fini, sizeof(*out), out);
}

int cr_state_node_list(cr_state_t *st, cr_state_node_t **out, size_t *n)
{
    sqlite3_stmt *s = NULL;
    int err = prepare(st, S_NODE_LIST, &s);
    return err ? err
               : query(st, s, "listing nodes", node_row, node_fini, sizeof(**out), (void **)out, n);
}

int cr_state_node_delete(cr_state_t *st, const char *id)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_NODE_DELETE, &s)))
        return err;
    bind_text(s, 1, id);
    char what[160];
    snprintf(what, sizeof(what), "node %s: removing it", id ? id : "(null)");
    return run(st, s, true, what);
}

void cr_state_node_free(cr_state_node_t *n)
{
    if (!n)
        return;
    CR_FREE(n->id);
    CR_FREE(n->address);
    CR_FREE(n->desc_json);
}

void cr_state_node_list_free(cr_state_node_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_state_node_free(&v[i]);
    free(v);
}

/* ---- jobs ---- */
int cr_state_job_create(cr_state_t *st, const cr_state_job_t *job, int64_t now_ms, int64_t *id)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_JOB_INSERT, &s)))
        return err;
    bind_text(s, 1, job->name);
    bind_text(s, 2, job->spec_json);
    bind_text(s, 3, NAME_OR_NULL(job_state_names, job->state));
    bind_text(s, 4, job->reason);
    bind_text(s, 5, NAME_OR_NULL(restart_names, job->restart_policy));
    sqlite3_bind_int(s, 6, job->max_restarts);
    sqlite3_bind_int(s, 7, job->restarts);
    sqlite3_bind_int64(s, 8, now_ms);
    if ((err = run(st, s, false, "creating a job")))
        return err;
    *id = sqlite3_last_insert_rowid(st->db);
    return 0;
}

int cr_state_job_set_state(cr_state_t *st, int64_t id, cr_job_state_t state, const char *reason,
                           int64_t now_ms)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_JOB_SET_STATE, &s)))
        return err;
    sqlite3_bind_int64(s, 1, id);
    bind_text(s, 2, NAME_OR_NULL(job_state_names, state));
    bind_text(s, 3, reason);
    sqlite3_bind_int64(s, 4, now_ms);
    char what[64];
    snprintf(what, sizeof(what), "job %lld: setting its state", (long long)id);
    return run(st, s, true, what);
}

int cr_state_job_set_restarts(cr_state_t *st, int64_t id, int restarts, int64_t now_ms)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_JOB_SET_RESTARTS, &s)))
        return err;
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int(s, 2, restarts);
    sqlite3_bind_int64(s, 3, now_ms);
    char what[64];
    snprintf(what, sizeof(what), "job %lld: setting its restart count", (long long)id);
    return run(st, s, true, what);
}

static int job_row(cr_state_t *st, sqlite3_stmt *s, void *rec)
{
    cr_state_job_t *j = rec;
    j->id = sqlite3_column_int64(s, 0);
    j->name = col_text(s, 1);
    j->spec_json = col_text(s, 2);
    j->reason = col_text(s, 4);
    j->max_restarts = sqlite3_column_int(s, 6);
    j->restarts = sqlite3_column_int(s, 7);
    j->created_ms = sqlite3_column_int64(s, 8);
    j->updated_ms = sqlite3_column_int64(s, 9);
    int err = COL_ENUM(st, s, 3, job_state_names, &j->state);
    return err ? err : COL_ENUM(st, s, 5, restart_names, &j->restart_policy);
}

static void job_fini(void *rec)
{
    cr_state_job_free(rec);
}

int cr_state_job_get(cr_state_t *st, int64_t id, cr_state_job_t *out)
{
    sqlite3_stmt *s = NULL;
    int err = prepare(st, S_JOB_GET, &s);
    if (err)
        return err;
    sqlite3_bind_int64(s, 1, id);
    char what[64];
    snprintf(what, sizeof(what), "job %lld", (long long)id);
    return query_one(st, s, what, job_row, job_fini, sizeof(*out), out);
}

int cr_state_job_list(cr_state_t *st, bool only_active, cr_state_job_t **out, size_t *n)
{
    sqlite3_stmt *s = NULL;
    int err = prepare(st, only_active ? S_JOB_LIST_ACTIVE : S_JOB_LIST, &s);
    return err ? err
               : query(st, s, "listing jobs", job_row, job_fini, sizeof(**out), (void **)out, n);
}

int cr_state_job_delete(cr_state_t *st, int64_t id)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_JOB_DELETE, &s)))
        return err;
    sqlite3_bind_int64(s, 1, id);
    char what[64];
    snprintf(what, sizeof(what), "job %lld: removing it", (long long)id);
    return run(st, s, true, what);
}

void cr_state_job_free(cr_state_job_t *j)
{
    if (!j)
        return;
    CR_FREE(j->name);
    CR_FREE(j->spec_json);
    CR_FREE(j->reason);
}

void cr_state_job_list_free(cr_state_job_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_state_job_free(&v[i]);
    free(v);
}

/* ---- workers ---- */
static void bind_worker(sqlite3_stmt *s, const cr_state_worker_t *w, int64_t now_ms)
{
    sqlite3_bind_int64(s, 1, w->job_id);
    sqlite3_bind_int(s, 2, w->index);
    bind_text(s, 3, w->node_id);
    bind_text(s, 4, w->devices);
    sqlite3_bind_int(s, 5, w->pid);
    sqlite3_bind_int(s, 6, w->pgid);
    sqlite3_bind_int64(s, 7, w->start_time);
    bind_text(s, 8, NAME_OR_NULL(worker_state_names, w->state));
    sqlite3_bind_int(s, 9, w->exit_code);
    sqlite3_bind_int(s, 10, w->exit_signal);
    sqlite3_bind_int(s, 11, w->restarts);
    bind_text(s, 12, w->stdout_path);
    bind_text(s, 13, w->stderr_path);
    sqlite3_bind_int64(s, 14, now_ms);
    /* SQLite's integers are signed: a count past INT64_MAX is clamped */
    sqlite3_bind_int64(s, 15, w->output_lost > INT64_MAX ? INT64_MAX : (int64_t)w->output_lost);
}

static int worker_write(cr_state_t *st, enum stmt_id id, const cr_state_worker_t *w, int64_t now_ms,
                        bool must_change, const char *verb)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, id, &s)))
        return err;
    bind_worker(s, w, now_ms);
    char what[96];
    snprintf(what, sizeof(what), "worker %d of job %lld: %s", w->index, (long long)w->job_id, verb);
    return run(st, s, must_change, what);
}

int cr_state_worker_create(cr_state_t *st, const cr_state_worker_t *w, int64_t now_ms)
{
    return worker_write(st, S_WORKER_INSERT, w, now_ms, false, "creating it");
}

int cr_state_worker_update(cr_state_t *st, const cr_state_worker_t *w, int64_t now_ms)
{
    /* the row as it is on the same node first; when nothing matched (a
     * new node, or no such row) the whole row, which says which */
    int err = worker_write(st, S_WORKER_UPDATE_SAME_NODE, w, now_ms, false, "updating it");
    if (err || sqlite3_changes(st->db) > 0)
        return err;
    return worker_write(st, S_WORKER_UPDATE, w, now_ms, true, "updating it");
}

int cr_state_worker_set_state(cr_state_t *st, int64_t job_id, int index, cr_worker_state_t state,
                              int64_t now_ms)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_WORKER_SET_STATE, &s)))
        return err;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int(s, 2, index);
    bind_text(s, 3, NAME_OR_NULL(worker_state_names, state));
    sqlite3_bind_int64(s, 4, now_ms);
    char what[96];
    snprintf(what, sizeof(what), "worker %d of job %lld: setting its state", index,
             (long long)job_id);
    return run(st, s, true, what);
}

static int worker_row(cr_state_t *st, sqlite3_stmt *s, void *rec)
{
    cr_state_worker_t *w = rec;
    w->job_id = sqlite3_column_int64(s, 0);
    w->index = sqlite3_column_int(s, 1);
    w->node_id = col_text(s, 2);
    w->devices = col_text(s, 3);
    w->pid = sqlite3_column_int(s, 4);
    w->pgid = sqlite3_column_int(s, 5);
    w->start_time = sqlite3_column_int64(s, 6);
    w->exit_code = sqlite3_column_int(s, 8);
    w->exit_signal = sqlite3_column_int(s, 9);
    w->restarts = sqlite3_column_int(s, 10);
    w->stdout_path = col_text(s, 11);
    w->stderr_path = col_text(s, 12);
    w->updated_ms = sqlite3_column_int64(s, 13);
    int64_t lost = sqlite3_column_int64(s, 14);
    w->output_lost = lost > 0 ? (uint64_t)lost : 0;
    return COL_ENUM(st, s, 7, worker_state_names, &w->state);
}

static void worker_fini(void *rec)
{
    cr_state_worker_free(rec);
}

int cr_state_worker_get(cr_state_t *st, int64_t job_id, int index, cr_state_worker_t *out)
{
    sqlite3_stmt *s = NULL;
    int err = prepare(st, S_WORKER_GET, &s);
    if (err)
        return err;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int(s, 2, index);
    char what[96];
    snprintf(what, sizeof(what), "worker %d of job %lld", index, (long long)job_id);
    return query_one(st, s, what, worker_row, worker_fini, sizeof(*out), out);
}

int cr_state_worker_list(cr_state_t *st, int64_t job_id, const char *node_id,
                         cr_state_worker_t **out, size_t *n)
{
    sqlite3_stmt *s = NULL;
    enum stmt_id id = job_id ? S_WORKER_LIST_JOB : node_id ? S_WORKER_LIST_NODE : S_WORKER_LIST_ALL;
    int err = prepare(st, id, &s);
    if (err)
        return err;
    if (job_id)
        sqlite3_bind_int64(s, 1, job_id);
    else if (node_id)
        bind_text(s, 1, node_id);
    return query(st, s, "listing workers", worker_row, worker_fini, sizeof(**out), (void **)out, n);
}

void cr_state_worker_free(cr_state_worker_t *w)
{
    if (!w)
        return;
    CR_FREE(w->node_id);
    CR_FREE(w->devices);
    CR_FREE(w->stdout_path);
    CR_FREE(w->stderr_path);
}

void cr_state_worker_list_free(cr_state_worker_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_state_worker_free(&v[i]);
    free(v);
}

/* ---- placement groups ---- */
int cr_state_pg_create(cr_state_t *st, const cr_state_pg_t *pg, int64_t now_ms, int64_t *id)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err)
        return err;
    for (size_t i = 0; i < pg->n_bundles; i++)
        if (pg->bundles[i].index != (int)i) {
            err = failf(st, CR_EINVAL,
                        "creating a placement group: bundle %zu has index %d "
                        "(indexes must be 0..%zu in order)",
                        i, pg->bundles[i].index, pg->n_bundles - 1);
            doom(st, err);
            return err;
        }
    if ((err = unit_begin(st)))
        return err;
    if ((err = prepare_w(st, S_PG_INSERT, &s)))
        goto out_end;
    bind_text(s, 1, pg->name);
    bind_text(s, 2, NAME_OR_NULL(pg_strategy_names, pg->strategy));
    bind_text(s, 3, NAME_OR_NULL(pg_state_names, pg->state));
    sqlite3_bind_int64(s, 4, now_ms);
    if ((err = run(st, s, false, "creating a placement group")))
        goto out_end;
    int64_t new_id = sqlite3_last_insert_rowid(st->db);
    if ((err = prepare_w(st, S_BUNDLE_INSERT, &s)))
        goto out_end;
    for (size_t i = 0; i < pg->n_bundles; i++) {
        const cr_state_bundle_t *b = &pg->bundles[i];
        sqlite3_bind_int64(s, 1, new_id);
        sqlite3_bind_int(s, 2, b->index);
        bind_text(s, 3, b->resources_json);
        bind_text(s, 4, b->node_id);
        bind_text(s, 5, b->devices);
        char what[96];
        snprintf(what, sizeof(what), "placement group %lld: storing bundle %d", (long long)new_id,
                 b->index);
        if ((err = run(st, s, false, what)))
            goto out_end;
    }
    *id = new_id;
out_end:
    return unit_end(st, err);
}

int cr_state_pg_set_state(cr_state_t *st, int64_t id, cr_pg_state_t state, int64_t now_ms)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_PG_SET_STATE, &s)))
        return err;
    sqlite3_bind_int64(s, 1, id);
    bind_text(s, 2, NAME_OR_NULL(pg_state_names, state));
    sqlite3_bind_int64(s, 3, now_ms);
    char what[80];
    snprintf(what, sizeof(what), "placement group %lld: setting its state", (long long)id);
    return run(st, s, true, what);
}

int cr_state_pg_set_bundle(cr_state_t *st, int64_t id, int index, const char *node_id,
                           const char *devices, int64_t now_ms)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = unit_begin(st)))
        return err;
    char what[96];
    snprintf(what, sizeof(what), "placement group %lld: setting bundle %d", (long long)id, index);
    if ((err = prepare_w(st, S_BUNDLE_SET, &s)))
        goto out_end;
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int(s, 2, index);
    bind_text(s, 3, node_id);
    bind_text(s, 4, devices);
    if ((err = run(st, s, true, what)) || (err = prepare_w(st, S_PG_TOUCH, &s)))
        goto out_end;
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int64(s, 2, now_ms);
    err = run(st, s, true, what);
out_end:
    return unit_end(st, err);
}

static int bundle_row(cr_state_t *st, sqlite3_stmt *s, void *rec)
{
    cr_state_bundle_t *b = rec;
    b->index = sqlite3_column_int(s, 0);
    b->resources_json = col_text(s, 1);
    b->node_id = col_text(s, 2);
    b->devices = col_text(s, 3);
    return 0;
}

static void bundle_fini(void *rec)
{
    cr_state_bundle_t *b = rec;
    CR_FREE(b->resources_json);
    CR_FREE(b->node_id);
    CR_FREE(b->devices);
}

static int pg_row(cr_state_t *st, sqlite3_stmt *s, void *rec)
{
    cr_state_pg_t *pg = rec;
    pg->id = sqlite3_column_int64(s, 0);
    pg->name = col_text(s, 1);
    pg->created_ms = sqlite3_column_int64(s, 4);
    pg->updated_ms = sqlite3_column_int64(s, 5);
    int err = COL_ENUM(st, s, 2, pg_strategy_names, &pg->strategy);
    return err ? err : COL_ENUM(st, s, 3, pg_state_names, &pg->state);
}

static void pg_fini(void *rec)
{
    cr_state_pg_free(rec);
}

/* Fills the bundles of each group that a pgs query returned. */
static int pg_bundles(cr_state_t *st, cr_state_pg_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sqlite3_stmt *s = NULL;
        int err = prepare(st, S_BUNDLE_LIST, &s);
        if (err)
            return err;
        sqlite3_bind_int64(s, 1, v[i].id);
        if ((err = query(st, s, "listing bundles", bundle_row, bundle_fini, sizeof(*v[i].bundles),
                         (void **)&v[i].bundles, &v[i].n_bundles)))
            return err;
    }
    return 0;
}

static int pg_get(cr_state_t *st, enum stmt_id id, int64_t pg_id, const char *name,
                  cr_state_pg_t *out)
{
    sqlite3_stmt *s = NULL;
    int err = prepare(st, id, &s);
    if (err)
        return err;
    char what[160];
    if (name) {
        bind_text(s, 1, name);
        snprintf(what, sizeof(what), "placement group '%s'", name);
    } else {
        sqlite3_bind_int64(s, 1, pg_id);
        snprintf(what, sizeof(what), "placement group %lld", (long long)pg_id);
    }
    if ((err = query_one(st, s, what, pg_row, pg_fini, sizeof(*out), out)))
        return err;
    if ((err = pg_bundles(st, out, 1)))
        cr_state_pg_free(out);
    return err;
}

int cr_state_pg_get(cr_state_t *st, int64_t id, cr_state_pg_t *out)
{
    return pg_get(st, S_PG_GET, id, NULL, out);
}

int cr_state_pg_get_by_name(cr_state_t *st, const char *name, cr_state_pg_t *out)
{
    if (!name)
        return failf(st, CR_EINVAL, "placement group: no name given");
    return pg_get(st, S_PG_GET_BY_NAME, 0, name, out);
}

int cr_state_pg_list(cr_state_t *st, cr_state_pg_t **out, size_t *n)
{
    sqlite3_stmt *s = NULL;
    int err = prepare(st, S_PG_LIST, &s);
    if (err || (err = query(st, s, "listing placement groups", pg_row, pg_fini, sizeof(**out),
                            (void **)out, n)))
        return err;
    if ((err = pg_bundles(st, *out, *n))) {
        cr_state_pg_list_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return err;
}

int cr_state_pg_delete(cr_state_t *st, int64_t id)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_PG_DELETE, &s)))
        return err;
    sqlite3_bind_int64(s, 1, id);
    char what[80];
    snprintf(what, sizeof(what), "placement group %lld: removing it", (long long)id);
    return run(st, s, true, what);
}

void cr_state_pg_free(cr_state_pg_t *pg)
{
    if (!pg)
        return;
    CR_FREE(pg->name);
    for (size_t i = 0; i < pg->n_bundles; i++)
        bundle_fini(&pg->bundles[i]);
    CR_FREE(pg->bundles);
    pg->n_bundles = 0;
}

void cr_state_pg_list_free(cr_state_pg_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_state_pg_free(&v[i]);
    free(v);
}

/* ---- events ---- */
int cr_state_event_append(cr_state_t *st, const cr_state_event_t *ev, int64_t *id)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_EVENT_INSERT, &s)))
        return err;
    sqlite3_bind_int64(s, 1, ev->time_ms);
    bind_text(s, 2, ev->kind);
    bind_ref(s, 3, ev->job_id);
    bind_text(s, 4, ev->node_id);
    bind_ref(s, 5, ev->pg_id);
    bind_text(s, 6, ev->message ? ev->message : "");
    if ((err = run(st, s, false, "appending an event")))
        return err;
    if (id)
        *id = sqlite3_last_insert_rowid(st->db);
    return 0;
}

static int event_row(cr_state_t *st, sqlite3_stmt *s, void *rec)
{
    cr_state_event_t *e = rec;
    e->id = sqlite3_column_int64(s, 0);
    e->time_ms = sqlite3_column_int64(s, 1);
    e->kind = col_text(s, 2);
    e->job_id = sqlite3_column_int64(s, 3); /* NULL reads as 0: none */
    e->node_id = col_text(s, 4);
    e->pg_id = sqlite3_column_int64(s, 5);
    e->message = col_text(s, 6);
    return 0;
}

static void event_fini(void *rec)
{
    cr_state_event_t *e = rec;
    CR_FREE(e->kind);
    CR_FREE(e->node_id);
    CR_FREE(e->message);
}

int cr_state_event_list(cr_state_t *st, int64_t after_id, size_t limit, cr_state_event_t **out,
                        size_t *n)
{
    sqlite3_stmt *s = NULL;
    int err = prepare(st, S_EVENT_LIST, &s);
    if (err)
        return err;
    sqlite3_bind_int64(s, 1, after_id);
    sqlite3_bind_int64(s, 2, limit && limit <= (size_t)INT64_MAX ? (int64_t)limit : -1);
    return query(st, s, "listing events", event_row, event_fini, sizeof(**out), (void **)out, n);
}

int cr_state_event_list_job(cr_state_t *st, int64_t job_id, int64_t after_id, size_t limit,
                            bool newest, cr_state_event_t **out, size_t *n)
{
    sqlite3_stmt *s = NULL;
    int err = prepare(st, newest ? S_EVENT_LIST_JOB_NEWEST : S_EVENT_LIST_JOB, &s);
    if (err)
        return err;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int64(s, 2, after_id);
    sqlite3_bind_int64(s, 3, limit && limit <= (size_t)INT64_MAX ? (int64_t)limit : -1);
    err = query(st, s, "listing a job's events", event_row, event_fini, sizeof(**out), (void **)out,
                n);
    for (size_t i = 0; err == 0 && newest && i < *n / 2; i++) { /* oldest first */
        cr_state_event_t t = (*out)[i];
        (*out)[i] = (*out)[*n - 1 - i];
        (*out)[*n - 1 - i] = t;
    }
    return err;
}

/* The first column of s's one row into *out (0: no row). */
static int query_int64(cr_state_t *st, sqlite3_stmt *s, const char *what, int64_t *out)
{
    int rc = sqlite3_step(s), err = 0;
    *out = 0;
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else if (rc != SQLITE_DONE)
        err = fail(st, rc, "%s", what);
    finish(s);
    return err;
}

int cr_state_event_newest(cr_state_t *st, size_t k, int64_t *id)
{
    sqlite3_stmt *s = NULL;
    *id = 0;
    if (!k)
        return 0;
    int err = prepare(st, S_EVENT_NEWEST, &s);
    if (err)
        return err;
    sqlite3_bind_int64(s, 1, k - 1 <= (size_t)INT64_MAX ? (int64_t)(k - 1) : INT64_MAX);
    return query_int64(st, s, "listing events", id);
}

int cr_state_event_count(cr_state_t *st, int64_t after_id, size_t *n)
{
    sqlite3_stmt *s = NULL;
    int64_t v = 0;
    int err = prepare(st, S_EVENT_COUNT, &s);
    if (!err) {
        sqlite3_bind_int64(s, 1, after_id);
        err = query_int64(st, s, "counting events", &v);
    }
    *n = err ? 0 : (size_t)v;
    return err;
}

int cr_state_event_trim(cr_state_t *st, int64_t up_to_id)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_EVENT_TRIM, &s)))
        return err;
    sqlite3_bind_int64(s, 1, up_to_id);
    return run(st, s, false, "trimming the event log");
}

int cr_state_event_delete_job(cr_state_t *st, int64_t job_id)
{
    sqlite3_stmt *s = NULL;
    int err = writable(st);
    if (err || (err = prepare_w(st, S_EVENT_DELETE_JOB, &s)))
        return err;
    sqlite3_bind_int64(s, 1, job_id);
    return run(st, s, false, "removing the events of a removed job");
}

void cr_state_event_list_free(cr_state_event_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        event_fini(&v[i]);
    free(v);
}
