/* The head's internal header: the control service of a cluster (DESIGN.md
 * "Runtime", docs/runtime.md, docs/cluster.md), one libuv loop, one
 * server struct D.
 *
 * One file per thing the head owns, each with its state and handlers:
 *   turn.c       the server struct D, answers, the group commit of a loop
 *                turn, the end of a shutdown (every module uses it)
 *   events.c     the event log
 *   placement.c  the head's use of sched/: requests, bundles, strategies,
 *                the shapes of requests that wait alike
 *   nodes.c      membership: the node table, agents registering and
 *                beating, ALIVE -> SUSPECT -> DEAD, ports of an agent
 *   pgs.c        placement groups and their two-phase reservation
 *   jobs.c       jobs: submit, place, start, restart, stop (jobs.h has the
 *                jobs module's own types; workers.c, logs.c and recover.c
 *                are the rest of that module)
 *   workers.c    a job's workers on their nodes and what agents say of them
 *   logs.c       a job's output: JobLogs, forwarded output, follow ops
 *   recover.c    a new head taking over the state of one that died
 *   retention.c  finished jobs removed past their count and age
 *   page.c       paged listings: the page budget, continue tokens
 *   dispatch.c   the message tables of clients and agents, status, stop
 *   server.c     corrald --head: set-up, the loop's callbacks, tear-down
 *   session.c    the head's session directory, token and TLS certificate
 *   web.c        its HTTP server (web/): the REST API and /metrics, which
 *                read the modules through their functions only
 *   telemetry.c  every device's latest telemetry (remote ones from their
 *                agents' heartbeats) and its last hour (telemetry.h)
 *   state.c      SQLite (state.h), follow.c, waiters.c: followers, waits
 *
 * The calls run one way: server.c, dispatch.c -> jobs module -> pgs.c ->
 * nodes.c -> placement.c, events.c, turn.c. What a lower module must tell
 * the ones above it (a node died, a group was removed, capacity came
 * back) goes through one table, D.watch, that server.c fills at start: the
 * one documented way up.
 *
 * Ownership (Redis's one server struct): D's fields are grouped by the
 * module that owns them, and only that module writes them; others call
 * the functions below. A module's entities (node_t, pg_t, job_t) are
 * written only by their module; node_t is public for reading, pg_t and
 * job_t are opaque outside their module. */
#ifndef CORRAL_HEAD_HEAD_H
#define CORRAL_HEAD_HEAD_H

#include "agent/agent.h"
#include "head/state.h"
#include "hw/hw.h"
#include "net/net.h"
#include "sched/sched.h"

#define DEFAULT_GRACE_MS 5000
#define SHUTDOWN_GRACE_MS 2000
#define STORE_RETRY_MS 1000 /* a commit tried again while the state store fails */
#define MAX_DEVS 64

typedef struct job job_t;
typedef struct wk wk_t;
typedef struct pg pg_t;

/* A waiting job's entry in D.pending (jobs.c "the queue"). */
typedef struct pending {
    job_t *j;
    struct shape *shape; /* NULL: not shared */
    uint64_t ticket;     /* grows along the queue */
} pending_t;

/* A node of the cluster: the head's own (local, its agent in-process) or
 * one whose agent joined over TCP. Written by nodes.c only. */
typedef struct node_free {
    int32_t rid; /* resource id in D.cluster, -1 unknown there */
    int64_t amount;
} node_free_t;

typedef struct node {
    char *id;
    int sn; /* index in the scheduler's view */
    cr_node_t *desc;
    Corral__NodeState state;
    uint64_t incarnation;
    char *address;
    int64_t last_seen; /* cr_mono_ms of its last message (the wall clock of it, for
                          people, is derived: node_seen_wall) */
    cr_conn_t *conn;   /* its agent; NULL when local or disconnected */
    bool local;
    bool waiting; /* known from state.db after a head restart, not yet back */
    bool slim;    /* desc keeps labels and names only; the whole is in state.db */
    uint32_t ndev;
    uint32_t port_req;  /* PortRequests outstanding */
    node_free_t *rfree; /* free as its agent last reported it (heartbeats) */
    uint8_t nrfree;
    uint8_t drift_beats;  /* beats in a row it reported less free than the head counts */
    uint64_t drift_freed; /* D.sched_freed at its last drift check */
} node_t;

/* What lower modules tell the upper ones (server.c fills it): the one way
 * up. Each may be NULL in a harness that has no such listener. */
typedef struct head_watch {
    /* n was declared dead (why): its workers are lost, its bundles back */
    void (*node_lost)(node_t *n, const char *why);
    /* n's agent disconnected (n may come back) */
    void (*node_disconnected)(node_t *n);
    /* g is being removed: the jobs running in it stop and let go of it */
    void (*group_removed)(pg_t *g);
    /* g is created: the jobs waiting for it may start */
    void (*group_created)(pg_t *g);
    /* capacity came back or the cluster changed: what waits is tried again */
    void (*retry)(void);
    /* the turn's group commit ended (ok: it is recorded; else rolled back,
     * its answers errors): what the turn created waits for this to start
     * or be dropped (nothing runs that is not recorded) */
    void (*committed)(bool ok);
    /* the state store commits again after failing: what the head holds is
     * written again (the changes of the failed turns); an error if not */
    int (*resync)(void);
} head_watch_t;

typedef struct head {
    /* server.c: the process */
    uv_loop_t loop;
    cr_node_t *node; /* this node's description */
    hw_options_t hwo;
    agent_t *agent; /* the local agent, in-process */
    cr_net_t *net;
    uv_signal_t sig_term, sig_int;
    uv_timer_t tick; /* membership, leases */
    head_watch_t watch;
    /* session.c */
    char *session, *logs, *sock, *address;
    char session_id[CR_SESSION_ID_LEN + 1]; /* its workers carry it (cr_session_id) */
    int port;
    const char *listen;  /* TCP address, NULL: 127.0.0.1 */
    const char *node_ip; /* --node-ip: the address other nodes reach this one at */
    bool reused;         /* the session of a head that died: recover() reads it back */
    time_t died_at;      /* when that head last wrote its state or its log */
    /* turn.c */
    cr_state_t *st;
    /* a commit failed: the head serves reads only, and tries a commit
     * again every STORE_RETRY_MS, until one succeeds (store_why: why) */
    bool store_failing;
    char store_why[CR_STATE_ERRMSG_MAX];
    int64_t store_tried_ms;
    bool shutting_down, closed;
    int running_workers; /* started and not ended: the shutdown waits for them */
    /* the scheduler's view (sched/): nodes.c adds, loses and restores
     * nodes in it; jobs.c and pgs.c place and release through placement.c
     * and sched_release */
    sched_cluster_t *cluster;
    /* bumped whenever the head gives resources back to the scheduler
     * (a release, a node restored or replaced): a heartbeat that carries
     * no change skips the drift check while it has not moved (nodes.c) */
    uint64_t sched_freed;
    sched_config_t scfg;
    sched_rng_t rng;
    /* nodes.c */
    node_t *self; /* the head's own node (NULL in a harness without one) */
    CR_VEC(node_t *) nodes;
    uint32_t heartbeat_ms, suspect_ms, dead_ms;
    /* a node is between its old incarnation's death and its return: no
     * pending job is refused as unplaceable until it is back (jobs.c) */
    bool rejoining;
    int64_t last_tick_ms; /* the last nodes_tick (cr_mono_ms): a late one is a stall */
    /* jobs.c */
    CR_VEC(job_t *) jobs;
    CR_VEC(pending_t) pending; /* waiting for resources, in arrival order (jobs.c) */
    uint32_t keep_finished;    /* retention.c: finished jobs kept */
    int64_t keep_finished_ms;  /* and for how long after they finished */
    int64_t retention_last_ms;
    bool retention_behind; /* the last sweep removed a whole batch: the next tick sweeps */
    /* events.c: the event log keeps the newest keep_events (0: the
     * default); the newest id appended, and the id trimmed up to */
    uint32_t keep_events;
    int64_t event_last_id, event_trimmed_to;
    /* logs.c: bytes each worker output file keeps, the local agent's and
     * the head's copy of remote output (cr_output_bound); 0 unbounded */
    uint64_t worker_log_max;
    bool worker_log_unbounded_told; /* its filesystem cannot punch holes: warned once */
    /* pgs.c */
    CR_VEC(pg_t *) pgs;
} head_t;

extern head_t D;

/* ------------------------------------------------------------- turn.c */
void db_check(int err);
void reply(cr_conn_t *c, const Corral__Envelope *req, Corral__Envelope *ans);
void reply_ack(cr_conn_t *c, const Corral__Envelope *req);
/* Sends ans as the answer to request id; an answer above the frame limit
 * becomes an Error reply that says so (never a silent drop). */
int reply_to(cr_conn_t *c, uint64_t id, Corral__Envelope *ans);
/* A turn's group commit: head_batch opens it for the work of this turn
 * (a message, a worker exit, a timer); what is sent meanwhile is held
 * until the commit when the loop is about to wait. head_batch_fini
 * commits what is left and closes it. */
void head_batch(void);
void head_batch_fini(void);
/* After head_batch_fini and the loop's close (the harness, which makes a
 * new loop for each test): the next head_batch starts afresh. */
void head_batch_forget(void);
/* Once shutting down, nothing runs and the net is not closed yet: closes
 * the net, the signals and the tick, so that the loop ends. */
void maybe_finish_shutdown(void);
/* The watch's retry, when set. */
void head_retry(void);
/* While the state store fails: true, and c's request e answered with an
 * error that says so, for a request that would change the state. */
bool head_refuse_write(cr_conn_t *c, const Corral__Envelope *e);
/* From the tick: while the state store fails, a commit tried again now
 * and then (the watch's resync writes what the head holds). */
void head_store_retry(void);

/* ------------------------------------------------------------- page.c */
/* Paged listings (docs/protocol.md "Paged listings"). page_budget: the
 * bytes the items of one reply may take (the frame limit less room for
 * the rest); page_items: the items one reply may hold, those asked for
 * (0: no number asked) and never more than a message may carry
 * (CR_MSG_MAX_LIST), and page_cap no more than the left that remain;
 * page_item_cost: what an item of packed bytes costs.
 * page_token writes the continue token of listing kind whose next page
 * starts at key; page_parse reads one back into key ("" for no token: from
 * the start), or fails with CR_EINVAL and why in msg for a malformed
 * token, one of another listing or one of an earlier head (expired).
 * page_parse_id: the same for a numeric key (job, group, event ids). */
size_t page_budget(void);
size_t page_items(uint32_t asked);
size_t page_cap(uint32_t asked, size_t left);
size_t page_item_cost(size_t packed);
void page_token(const char *kind, const char *key, char *buf, size_t size);
int page_parse(const char *token, const char *kind, char *key, size_t keysize, char *msg,
               size_t size);
int page_parse_id(const char *token, const char *kind, int64_t *id, char *msg, size_t size);

/* ----------------------------------------------------------- events.c */
/* An event: of a job (job_id, 0 none) on node, of the cluster on the
 * head's node (head_event), of node n (event_node). The jobs module's
 * event() names a job_t (jobs.h). */
void event_v(const char *kind, int64_t job_id, const char *node, const char *fmt, va_list ap);
void head_event(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void event_node(const char *kind, const node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *node_name(void);
void req_events(cr_conn_t *c, const Corral__Envelope *e);
/* The event log's bound (docs/runtime.md "Retention"): the events older
 * than the newest D.keep_events go from state.db, at the tick. */
void events_retention(void);
/* The events a follower (follow.c, the API's event stream) is handed at
 * most per pump: one that lags far behind catches up a pump at a time,
 * not the whole log (up to --keep-events) read and queued at once. */
#define EVENTS_PUMP_MAX 4096
/* The seq of the k-th newest event (1: the newest); 0 when there are
 * fewer, or it cannot be read: a listing of the newest k starts after
 * it, and reads only those. */
uint64_t events_newest(size_t k);
/* Each event after since_seq, at most limit of them (0: all), handed to
 * emit, oldest first; how many. */
size_t events_each_since(uint64_t since_seq, size_t limit,
                         void (*emit)(void *ctx, const Corral__Event *ev), void *ctx);
/* The same for job job_id's events only, its newest limit (newest) or
 * its oldest after since_seq: read through state.db's index on the job,
 * whatever else the log holds (a job credential's listing and stream). */
size_t events_each_of_job(const char *job_id, uint64_t since_seq, size_t limit, bool newest,
                          void (*emit)(void *ctx, const Corral__Event *ev), void *ctx);

/* -------------------------------------------------------- placement.c */
/* Device indices as state.db keeps them: "0,3,5" appended to out, and
 * back (at most MAX_DEVS into devs; the count). */
void devs_format(const int *devs, size_t n, cr_buf_t *out);
size_t devs_parse(const char *s, int *devs);
/* why (an INFEASIBLE reason) as what a request that waits for nodes waits for. */
void wait_reason(char *why, size_t size);
/* Asks the scheduler to place n bundles (strategy, domain: a label key
 * they share a value of, or NULL): SCHED_OK with *placement, or RETRY or
 * INFEASIBLE with why. */
sched_status_t schedule_bundles(uint32_t n, sched_bundle_t *bundles, Corral__Strategy strategy,
                                const char *domain, uint64_t *placement, char *why, size_t size);
/* The scheduler's strategy for a gang's or a group's (PACK when unknown). */
sched_strategy_t strategy_of(Corral__Strategy s);
int build_request(const Corral__WorkerSpec *ws, sched_resreq_t *req, char *why, size_t size);
/* The sum of n bundles' requests, "GPU=8,CPU=8", appended to out. */
void bundles_held(const sched_bundle_t *b, int n, cr_buf_t *out);

/* Shapes: what a waiting request asks (its bundles, strategy and domain),
 * shared by every request of a queue that asks the same (jobs.c "the
 * queue", pgs.c "the pending groups"). A pass over a queue only places,
 * so free capacity only falls in it: a shape the scheduler refused in a
 * pass (shape_refused, with that pass's generation) is refused again
 * later in it, and the later requests of that shape are passed over
 * without being read. What they wait for is the shape's why, when that
 * is newer (why_seq) than their own reason. */
typedef struct shape {
    struct shape *next; /* in its hash bucket */
    uint64_t hash;
    Corral__Strategy strategy;
    char *domain; /* "" for none */
    int nb;
    sched_bundle_t *b;
    size_t refs;      /* the waiting requests of this shape */
    uint64_t missed;  /* the pass generation in which the scheduler refused it */
    uint64_t why_seq; /* when why was set (reason_seq_next), against a request's own */
    char why[256];
} shape_t;
typedef struct shapes {
    shape_t **tab;
    size_t cap, n; /* cap: a power of two */
} shapes_t;
/* The shape of t asking this (domain NULL: none), shared (its count taken). */
shape_t *shape_get(shapes_t *t, Corral__Strategy strategy, const char *domain, int nb,
                   const sched_bundle_t *bundles);
void shape_put(shapes_t *t, shape_t *s);
/* The scheduler refused s in pass generation gen (why). */
void shape_refused(shape_t *s, uint64_t gen, const char *why);
/* Frees t and whatever shapes it still holds. */
void shapes_free(shapes_t *t);
/* When a waiting request's reason or a shape's was set: the newer one is
 * what it waits for. */
uint64_t reason_seq_next(void);
/* A queue's pass, not entered again from inside (a request it refuses
 * for good ends there, and an end asks for a pass): pass_run runs once()
 * unless a pass is under way (in), in which case that pass runs once()
 * again after (again). */
typedef struct pass {
    bool in, again;
} pass_t;
void pass_run(pass_t *p, void (*once)(void));

/* What waits and what holds resources, for the status (ClusterStatus
 * holders): each module adds its own with holder_new (strings copied;
 * the caller sets the rest, malloc'ed), holders_free frees them all.
 * Bounded, as a status is read often and a queue can be deep: at most
 * HOLDERS_EACH pending jobs, HOLDERS_EACH jobs holding resources and
 * HOLDERS_EACH groups, the oldest of each; not_listed counts the rest
 * (the job and group lists page through them all). */
#define HOLDERS_EACH 100
typedef struct holders {
    CR_VEC(Corral__Holder *) v;
    uint32_t not_listed;
} holders_t;
Corral__Holder *holder_new(holders_t *h, const char *kind, const char *id, const char *name,
                           const char *state, const char *reason);
void holders_free(holders_t *h);

/* ------------------------------------------------------------ nodes.c */
node_t *node_add_local(cr_node_t *desc, char *why, size_t size);
/* A node's row in state.db: its description, incarnation, address, state
 * and last beat (a slim node's description is there already: its state
 * only). The head's own node is recorded so at start. */
void node_record(const node_t *n);
node_t *node_by_id(const char *id);
node_t *node_of(int sn);
/* The node whose agent is on c, its last word noted (SUSPECT -> ALIVE);
 * NULL, answered with an error, when c has not registered. */
node_t *node_of_agent(cr_conn_t *c, const Corral__Envelope *e);
int64_t node_seen_wall(const node_t *n); /* the wall clock of n->last_seen */
/* The address other workers reach n at: its advertised one (an agent's
 * --node-ip, else the address its connection came from; the head's own
 * --node-ip or --listen), never loopback when a gang spans nodes: a head
 * on a wildcard --listen without --node-ip is reached at the address the
 * gang's other nodes (peers) connected to. buf (size bytes) may hold it. */
const char *node_address(const node_t *n, node_t *const *peers, size_t npeers, char *buf,
                         size_t size);
/* Sends e to n's agent (e->id set): 0, or -ENOTCONN / the send's error. */
int node_send(node_t *n, Corral__Envelope *e);
/* Asks n's agent for two free TCP ports (the rendezvous and JAX's
 * coordinator); done(key, port, port2, why) answers (port 0 with why on
 * failure; port2 0 from an agent that gives one), maybe at once. key is
 * copied (at most 23 bytes). */
typedef void (*node_port_fn)(const char *key, uint32_t port, uint32_t port2, const char *why);
void node_request_port(node_t *n, const char *key, node_port_fn done);
/* The membership messages of an agent: Register (the node, or NULL when
 * refused: then the connection is closing), Heartbeat, PortReply, Error. */
node_t *nodes_register(cr_conn_t *c, const Corral__Envelope *e, bool *fresh);
void nodes_heartbeat(cr_conn_t *c, const Corral__Envelope *e, node_t *n);
void nodes_port_reply(node_t *n, const Corral__Envelope *e);
void nodes_conn_closed(cr_conn_t *c);
void nodes_tick(void);
void nodes_recover(void);
void nodes_free(void);
void req_node_list(cr_conn_t *c, const Corral__Envelope *e);
/* The nodes and the totals over alive ones into s; free with
 * nodes_status_free(mem). */
void nodes_status(Corral__ClusterStatus *s, void **mem);
/* nodes_status's totals without the nodes (n_nodes 0): what /metrics
 * needs, without filling a NodeInfo per node; freed the same way. */
void nodes_totals(Corral__ClusterStatus *s, void **memp);
void nodes_status_free(Corral__ClusterStatus *s, void *mem);
void node_fill(const node_t *n, Corral__NodeInfo *ni, void **mem, bool with_json);
void node_fill_free(Corral__NodeInfo *ni, void *mem);
const char *node_state_name(Corral__NodeState s);

/* -------------------------------------------------------------- pgs.c */
pg_t *pg_find(const char *id_or_name);
void req_pg(cr_conn_t *c, const Corral__Envelope *e); /* PgCreate, PgRemove, PgList */
void pgs_try_pending(void);
void pgs_node_lost(node_t *n);
void pgs_prepare_reply(node_t *n, const Corral__PrepareReply *r);
void pgs_txn_done(node_t *n, const Corral__TxnDone *r);
void pgs_conn_closed(node_t *n);
void pgs_recover(void);
void pgs_tick(void);
/* The watch's committed for groups: those created in a turn whose commit
 * failed are forgotten (their reservations released, their waiters told). */
void pgs_committed(bool ok);
void pgs_free(void);
/* c closed: its waits end, and the groups bound to it (PgCreate.bound)
 * are removed. */
void pgs_client_gone(cr_conn_t *c);
void pgs_holders(holders_t *h);
size_t pgs_pending(void);
/* Each group not removed, as its PgList entry, handed to fn (web.c reads
 * them so). */
void pgs_info_each(void (*fn)(void *ctx, const Corral__PgInfo *info), void *ctx);
/* Bundle b of g for a job (holder: its id string): its node and devices;
 * false with why when the group is not created or the bundle is taken. */
bool pg_bundle_take(pg_t *g, int b, const char *holder, node_t **node, int *devs, size_t *ndevs,
                    char *why, size_t size);
void pg_bundle_give(pg_t *g, int b, const char *holder);
int pg_nbundles(const pg_t *g);
const Corral__Bundle *pg_bundle_spec(const pg_t *g, int b);
bool pg_created(const pg_t *g);
const char *pg_name(const pg_t *g);
int64_t pg_id(const pg_t *g);

/* -------------------------------------- the jobs module (jobs.c, ...) */
extern const struct follow_ops head_follow_ops; /* logs.c */
void req_job_submit(cr_conn_t *c, const Corral__Envelope *e);
void req_job_status(cr_conn_t *c, const Corral__Envelope *e);
void req_job_list(cr_conn_t *c, const Corral__Envelope *e);
void req_job_stop(cr_conn_t *c, const Corral__Envelope *e);
void req_job_logs(cr_conn_t *c, const Corral__Envelope *e);
void try_pending(void);
/* From the tick: the gangs whose window for a lost node to rejoin is over
 * are placed now or fail. */
void jobs_tick(void);
/* The watch's committed for jobs: the jobs submitted in the turn start
 * (ok) or are forgotten (their answers were errors; nothing of them ran). */
void jobs_committed(bool ok);
/* The watch's resync for jobs: every job's state and workers written again
 * (inside the caller's transaction); 0 or the store's error. */
int jobs_resync(void);
void jobs_stop_all(uint32_t grace_ms);
void jobs_free(void);
size_t jobs_count(cr_job_state_t s);
/* Whether a job credential's scope is current: its job is known, its
 * worker runs (starting or running) at that attempt. why says which not. */
bool jobs_scope_current(const cr_job_scope_t *s, char *why, size_t size);
/* Whether job id is the scope's job or one of its children (the jobs its
 * worker submitted with its credential: docs/actors.md "Jobs"). */
bool jobs_in_scope(const cr_job_scope_t *s, const char *id);
/* Each job (only: that job id alone, NULL all), as its JobStatus answer,
 * handed to fn (web.c reads them so). */
void jobs_info_each(const char *only, void (*fn)(void *ctx, const Corral__JobInfo *info),
                    void *ctx);
/* the watch's node_lost and group_removed for jobs */
void jobs_node_lost(node_t *n, const char *why);
#define CR_KEEP_FINISHED_DEFAULT 10000u
#define CR_KEEP_FINISHED_MS_DEFAULT (24 * 3600 * 1000LL) /* a day */
#define CR_KEEP_EVENTS_DEFAULT 100000u
/* Retention (retention.c, docs/runtime.md "Retention"): once a second at
 * most, removes the finished jobs beyond D.keep_finished (the oldest
 * first) and those finished more than D.keep_finished_ms ago, with their
 * workers, events and output files, from memory and state.db. A job that
 * is not final is never removed. Returns how many went. */
size_t jobs_retention(int64_t now_ms);
void jobs_group_removed(pg_t *g);
/* c closed: the jobs submitted bound to it that have not ended stop. */
void jobs_client_gone(cr_conn_t *c);
void jobs_holders(holders_t *h);
/* What an agent says of workers (workers.c): on n's connection ... */
void workers_started_msg(node_t *n, const Corral__WorkerStarted *s);
void workers_exit_msg(node_t *n, const Corral__WorkerExit *x);
void workers_heartbeat(node_t *n, const Corral__Heartbeat *hb);
/* ... on Register: a fresh or rejoined node's old workers are stopped,
 * a reconnected one's reconciled with what the head believes. */
void workers_registered(node_t *n, const Corral__Register *r, bool fresh);
void logs_chunk_msg(node_t *n, const Corral__LogChunk *ch);
/* Closes the head's copies of j's remote output that logs_chunk_msg
 * keeps open (job_free calls it). */
void logs_forget_job(const job_t *j);
/* ... and the in-process agent's callbacks */
void workers_local_started(void *arg, const agent_started_t *s);
void workers_local_exited(void *arg, const Corral__WorkerReport *r);
void recover(void); /* recover.c */

/* ---------------------------------------------------------- server.c */
/* corrald --head: runs the head until it stops; the exit status. node
 * and hwo are the discovered node (the caller frees node after). */
typedef struct head_opts {
    cr_node_t *node;
    const hw_options_t *hwo;
    const char *listen;  /* TCP address, NULL: 127.0.0.1 */
    const char *node_ip; /* --node-ip */
    uint32_t port;       /* 0: any (or the dead head's when taking over) */
    const char *token_file;
    const char *log_file;                       /* --log-file; NULL: logs/corrald.log */
    uint32_t heartbeat_ms, suspect_ms, dead_ms; /* 0: 1000, 3000, 10000 */
    /* TLS on the TCP listener (docs/cluster.md "TLS"): 1 --tls, -1
     * --no-tls, 0 on unless it listens on a loopback address; a certificate
     * and key given (PEM files) instead of the session's own */
    int tls;
    const char *tls_cert, *tls_key;
    uint32_t max_frame;         /* 0: CR_FRAME_MAX_DEFAULT */
    uint32_t keep_finished;     /* finished jobs kept (retention.c); 0: the default */
    int64_t keep_finished_ms;   /* how long each is kept; 0: the default */
    uint32_t keep_events;       /* newest events kept (events.c); 0: the default */
    const char *dashboard_host; /* --dashboard-host; NULL: 127.0.0.1 */
    int dashboard_port;         /* --dashboard-port: -1 off, 0 any, else that port */
    bool dashboard_required;    /* given: failing to serve it fails the start */
    /* --worker-log-max: 0 CR_WORKER_LOG_MAX_DEFAULT, CR_WORKER_LOG_UNBOUNDED none */
    uint64_t worker_log_max;
} head_opts_t;
int head_main(const head_opts_t *o);
/* The head without its session, token, listeners and signals, for
 * head_main and the fuzzing harness (daemon/harness.c): init sets up D
 * around the node; open opens state.db at dbpath; start (D.loop
 * initialised) starts the local agent, the followers and the tick; stop
 * undoes start and frees jobs and groups; fini closes the state and
 * frees the nodes and the scheduler's view. Messages are said on stderr,
 * prefixed with who. */
typedef struct head_core {
    const char *who;
    cr_node_t *node;
    const hw_options_t *hwo;
    uint32_t heartbeat_ms, suspect_ms, dead_ms;
    uint64_t seed;            /* the scheduler's random generator */
    const char *refuse_start; /* agent_config_t.refuse_start */
} head_core_t;
int head_core_init(const head_core_t *c);
int head_core_open(const head_core_t *c, const char *dbpath);
void head_core_start(const head_core_t *c);
void head_core_stop(void);
void head_core_fini(void);
/* What goes when a connection closes: its waits, its node's agent, its
 * followers, its groups' waits. */
void head_conn_closed(cr_conn_t *c);

/* --------------------------------------------------------- session.c */
/* $CORRAL_HOME/session_<time>_<pid>/ with logs/, and session_latest
 * pointing at it, or the session of a head that died, taken over (then
 * D.reused). Fills D.session, D.logs, D.sock; said on stderr on failure. */
int session_make(void);
/* Says on stderr (which corral start relays) that the session of a head
 * that died was taken over, when it died and what was read back. */
void session_took_over(size_t njobs, int active);
/* Writes text into the session's file name, atomically (base/trust.c). */
int session_write(const char *name, const char *text);
int session_token(const char *token_file, uint8_t token[CR_TOKEN_LEN]);
/* Whether the TCP listener runs TLS (*tcp: o->tls, its address) and the
 * head's certificate and key, PEM, malloc'ed, when it does or when the
 * dashboard needs them (dashboard: it serves off loopback, over HTTPS):
 * the ones given, else the session's tls.crt and tls.key (made with the
 * session, naming this machine's addresses; kept when it is taken over:
 * agents keep their pin). With TCP TLS, writes tls_fingerprint into the
 * session and says it on stderr (corral start puts it into the join
 * command). 0 (*cert NULL when neither needs one) or a negative code,
 * said on stderr. */
int session_tls(const head_opts_t *o, bool dashboard, char **cert, char **key, bool *tcp);

/* --------------------------------------------------------------- web.c */
/* What /metrics counts that no module keeps: each module adds to it. */
#define HEAD_PLACE_BUCKETS 12
typedef struct head_counters {
    uint64_t heartbeats;                                    /* nodes.c */
    uint64_t commits, commit_failures;                      /* turn.c */
    uint64_t place_bucket[HEAD_PLACE_BUCKETS], place_count; /* placement.c */
    double place_sum;
} head_counters_t;
extern head_counters_t head_counters;
/* One scheduler decision took ns nanoseconds. */
void head_count_placement(int64_t ns);
/* The HTTP server on host:port (NULL host: 127.0.0.1; port 0: any), on
 * D.loop: the API, /metrics; the login URL goes into the session's
 * "dashboard" file. Off loopback it serves HTTPS with cert and key (PEM,
 * the head's: session_tls), and says the certificate's fingerprint and
 * file (cert_file) on stderr. 0, or an error said on stderr. */
typedef struct web web_t;
int head_web_start(const char *host, int port, const uint8_t token[CR_TOKEN_LEN], const char *cert,
                   const char *key, const char *cert_file);
/* The head's routes on w (the fuzz target serves them without a socket). */
void head_web_routes(web_t *w);
void head_web_stop(void);

/* ---------------------------------------------------------- dispatch.c */
void head_dispatch(cr_conn_t *c, const Corral__Envelope *e);
/* head_dispatch inside the turn's group commit */
void head_handle(cr_conn_t *c, const Corral__Envelope *e);
void begin_shutdown(const char *why);

#endif
