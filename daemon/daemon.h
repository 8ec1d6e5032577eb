/* corrald's shared insides: the head (jobs, placement groups, nodes and
 * their agents, the event log) and the agent, on one libuv loop
 * (DESIGN.md "Runtime", docs/runtime.md, docs/cluster.md).
 *
 * Files: head.c jobs and their handlers; nodes.c membership, the agents'
 * messages and worker dispatch; pg.c placement groups and the two-phase
 * reservation; agent.c the worker table of a node; remote.c an agent that
 * joins a head over TCP; main.c options and the session. */
#ifndef CORRAL_DAEMON_H
#define CORRAL_DAEMON_H

#include "daemon/agent.h"
#include "head/state.h"
#include "hw/hw.h"
#include "net/net.h"
#include "sched/sched.h"

#define DEFAULT_GRACE_MS 5000
#define SHUTDOWN_GRACE_MS 2000
#define MAX_DEVS 64

typedef struct job job_t;
typedef struct pg pg_t;

/* A node of the cluster: the head's own (local, its agent in-process) or
 * one whose agent joined over TCP. */
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
    int64_t last_seen;      /* cr_mono_ms of its last message */
    int64_t last_seen_wall; /* the same, wall clock, for people */
    cr_conn_t *conn;        /* its agent; NULL when local or disconnected */
    bool local;
    bool waiting; /* known from state.db after a head restart, not yet back */
    bool slim;    /* desc keeps labels and names only; the whole is in state.db */
    uint32_t ndev;
    uint32_t port_req;      /* PortRequests outstanding */
    node_free_t *rfree;     /* free as its agent last reported it (heartbeats) */
    uint8_t nrfree;
    uint8_t drift_beats; /* beats in a row it reported less free than the head counts */
} node_t;

typedef struct wk {
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
    int attempt;      /* restarts of this worker so far: CORRAL_RESTART_COUNT */
    bool restart_due; /* to be started again when the backoff ends */
    char cause[96];   /* why it is restarted, for the event */
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
    pg_t *pg;           /* running in this group */
    bool stopping, failed;
    bool unknown_exit;    /* an adopted worker ended: its exit code cannot be known */
    bool replace;         /* its placement was lost with a node: place the gang again */
    int restarts;         /* done or scheduled, every worker and gang restart counted */
    bool restart_pending; /* a restart waits for its backoff (and, gang, the others' exit) */
    bool backoff_over;
    uv_timer_t *timer; /* the backoff; NULL until the first restart */
    int64_t fail_us;      /* when the worker whose failure decided the job ended */
    uint32_t master_port; /* distributed jobs: the rendezvous port of this start */
    bool port_wait;       /* waiting for the port before starting the gang */
};

typedef struct daemon {
    uv_loop_t loop;
    node_t *self; /* the head's own node (NULL in a fuzzing harness without one) */
    cr_node_t *node;
    hw_options_t hwo;
    agent_t *agent; /* the local agent */
    sched_cluster_t *cluster;
    sched_config_t scfg;
    sched_rng_t rng;
    cr_state_t *st;
    cr_net_t *net;
    uv_signal_t sig_term, sig_int;
    uv_timer_t tick; /* membership, leases */
    char *session, *logs, *sock, *address;
    int port;
    const char *listen; /* TCP address, NULL: 127.0.0.1 */
    CR_VEC(node_t *) nodes;
    CR_VEC(job_t *) jobs;
    CR_VEC(job_t *) pending; /* waiting for resources, in arrival order */
    CR_VEC(pg_t *) pgs;
    bool shutting_down, closed;
    bool reused; /* the session of a head that died: recover() reads it back */
    int running_workers;
    uint32_t heartbeat_ms, suspect_ms, dead_ms;
    int exit_status;
} daemon_t;

extern daemon_t D;

int64_t now_ms(void);
void event(const char *kind, const job_t *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void event_node(const char *kind, const node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void db_check(int err);
void reply(cr_conn_t *c, const Corral__Envelope *req, Corral__Envelope *ans);
void reply_ack(cr_conn_t *c, const Corral__Envelope *req);
const char *node_name(void);

/* head.c */
extern const struct follow_ops head_follow_ops;
void head_dispatch(cr_conn_t *c, const Corral__Envelope *e);
/* head_dispatch inside the turn's group commit (answers held until it
 * commits); head_batch opens it for other work of the turn (worker exits,
 * timers); head_batch_fini commits what is left and closes it. */
void head_handle(cr_conn_t *c, const Corral__Envelope *e);
void head_batch(void);
void head_batch_fini(void);
/* After head_batch_fini and the loop's close (the harness, which makes a
 * new loop for each test): the next head_batch starts afresh. */
void head_batch_forget(void);
void try_pending(void);
void maybe_finish_shutdown(void);
void begin_shutdown(const char *why);
void recover(void);
void jobs_free(void);
job_t *job_find(const char *id);
wk_t *worker_find(const char *worker_id);
void job_stop(job_t *j, uint32_t grace_ms);
/* Device indices as state.db keeps them: "0,3,5" appended to out, and
 * back (at most MAX_DEVS into devs; the count). */
void devs_format(const int *devs, size_t n, cr_buf_t *out);
size_t devs_parse(const char *s, int *devs);
/* Asks the scheduler to place n bundles (strategy, domain: a label key
 * they share a value of, or NULL): SCHED_OK with *placement, or RETRY or
 * INFEASIBLE with why. */
sched_status_t schedule_bundles(uint32_t n, sched_bundle_t *bundles, Corral__Strategy strategy,
                                const char *domain, uint64_t *placement, char *why, size_t size);
/* The scheduler's strategy for a gang's or a group's (PACK when unknown). */
sched_strategy_t strategy_of(Corral__Strategy s);
int build_request(const Corral__WorkerSpec *ws, sched_resreq_t *req, char *why, size_t size);
void db_worker(const wk_t *w);
/* what the agents say of a worker */
void worker_started(wk_t *w, const agent_started_t *s);
void worker_ended(wk_t *w, const Corral__WorkerReport *r);
/* its node died, or it was not found again: reason */
void worker_lost(wk_t *w, const char *reason);
void job_port_ready(job_t *j, uint32_t port, const char *why);

/* nodes.c */
node_t *node_add_local(cr_node_t *desc, char *why, size_t size);
/* A node's row in state.db: its description, incarnation, address, state
 * and last beat (a slim node's description is there already: its state
 * only). The head's own node is recorded so at start. */
void node_record(const node_t *n);
node_t *node_by_id(const char *id);
node_t *node_of(int sn);
void node_start_worker(wk_t *w);
void node_stop_worker(wk_t *w, uint32_t grace_ms);
/* Asks n's agent for a free port; job_port_ready answers. */
void node_request_port(node_t *n, job_t *j);
void nodes_dispatch(cr_conn_t *c, const Corral__Envelope *e); /* agent messages */
void nodes_conn_closed(cr_conn_t *c);
void nodes_tick(void);
void nodes_recover(void);
void nodes_free(void);
bool nodes_is_agent_msg(Corral__Envelope__BodyCase b);
void node_fill(const node_t *n, Corral__NodeInfo *ni, void **mem, bool with_json);
void node_fill_free(Corral__NodeInfo *ni, void *mem);
const char *node_state_name(Corral__NodeState s);

/* pg.c */
pg_t *pg_find(const char *id_or_name);
void pg_dispatch(cr_conn_t *c, const Corral__Envelope *e);
void pgs_try_pending(void);
void pgs_node_lost(node_t *n);
void pgs_prepare_reply(node_t *n, const Corral__PrepareReply *r);
void pgs_txn_done(node_t *n, const Corral__TxnDone *r);
void pgs_conn_closed(node_t *n);
void pgs_recover(void);
void pgs_tick(void);
void pgs_free(void);
void pgs_client_gone(cr_conn_t *c);
size_t pgs_pending(void);
/* Bundle b of g for a worker of j: its node and devices; false with why
 * when the group is not created or the bundle is taken. */
bool pg_bundle_take(pg_t *g, int b, job_t *j, node_t **node, int *devs, size_t *ndevs,
                    char *why, size_t size);
void pg_bundle_give(pg_t *g, int b, const job_t *j);
int pg_nbundles(const pg_t *g);
const Corral__Bundle *pg_bundle_spec(const pg_t *g, int b);
bool pg_created(const pg_t *g);
const char *pg_name(const pg_t *g);
void pg_job_gone(job_t *j);

/* remote.c: corrald --address HEAD:PORT */
typedef struct agent_opts {
    const char *head;
    const char *token_file;
    const char *node_ip;
    const char *node_id;
} agent_opts_t;
int agent_main(const agent_opts_t *o);
/* $CORRAL_HOME (default /tmp/corral), created when missing; NULL when it
 * cannot be, said on stderr. */
const char *corral_home(void);

/* main.c helpers shared with remote.c */
int make_dir_session(const char *prefix);
int apply_overrides(const char *resources, const char *labels);

#endif
