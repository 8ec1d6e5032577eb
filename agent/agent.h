/* The agent's worker table: starts, stops and watches the worker
 * processes of one node, and reports what happens to them through ops
 * (DESIGN.md "Runtime"). The same code serves the agent inside a head
 * (ops call the head directly) and an agent that joined a head over TCP
 * (ops send WorkerStarted and WorkerExit). */
#ifndef CORRAL_AGENT_AGENT_H
#define CORRAL_AGENT_AGENT_H

#include "agent/launch.h"
#include "hw/hw.h"
#include "net/net.h"
#include "sched/sched.h"
#include "proto/corral.pb-c.h"
#include <uv.h>

typedef struct agent agent_t;

typedef struct agent_started {
    const char *worker_id;
    uint32_t attempt;
    int pid;
    int64_t start_time; /* field 22 of /proc/PID/stat */
    const char *cpus;   /* "" when unbound */
    const char *warning;
    const char *out_path, *err_path; /* on this node */
} agent_started_t;

typedef struct agent_ops {
    void (*started)(void *arg, const agent_started_t *s);
    /* The worker ended, or never started (WORKER_FAILED with the reason).
     * r->code_unknown for an adopted worker, whose exit code nobody can
     * know. */
    void (*exited)(void *arg, const Corral__WorkerReport *r);
} agent_ops_t;

typedef struct agent_config {
    uv_loop_t *loop;
    const cr_node_t *node;
    const hw_options_t *hwo;
    const char *logs;   /* log directory of this node */
    const char *socket; /* CORRAL_AGENT_SOCKET for the workers, may be NULL */
    /* CORRAL_ADDRESS for the workers (the head as they reach it), may be NULL */
    const char *head_address;
    /* how the workers authenticate the head there when it runs TLS:
     * CORRAL_TLS_FINGERPRINT and CORRAL_TLS_CA (docs/cluster.md "TLS"),
     * each may be NULL */
    const char *tls_fingerprint, *tls_ca;
    /* holds the cluster token: each worker gets its job credential from it
     * (CORRAL_JOB_TOKEN, cr_net_job_credential), never the token. NULL:
     * workers get none */
    const cr_net_t *net;
    /* CORRAL_SESSION_ID for the workers (cr_session_id): only a process
     * that carries it, and is the agent's user's, is adopted or swept. NULL:
     * none is ever adopted. */
    const char *session_id;
    agent_ops_t ops;
    void *arg;
    /* When set, no process is ever started: each start fails at once
     * (WORKER_FAILED, this reason). Harnesses that feed untrusted specs
     * to a head (tests/fuzz/fuzz_head.c) set it. Borrowed. */
    const char *refuse_start;
    /* bytes each worker output file keeps on disk (cr_output_bound, looked
     * at every AGENT_BOUND_MS); 0 unbounded */
    uint64_t output_max;
    /* the cluster token file when it is not in the corral home (a joined
     * agent's --token-file): hidden from workers as the home is, when the
     * agent runs as root (docs/workers.md "What a worker can reach") */
    const char *token_file;
} agent_config_t;

agent_t *agent_new(const agent_config_t *cfg);
/* Kills what still runs (SIGKILL to each group) and frees the table. */
void agent_free(agent_t *a);

/* Starts a worker; a failure is reported through ops.exited (FAILED). A
 * worker id already running is refused the same way. */
void agent_start(agent_t *a, const Corral__WorkerStart *ws);
/* SIGTERM, then SIGKILL after grace_ms; CR_ENOENT when not running here. */
int agent_stop(agent_t *a, const char *worker_id, uint32_t grace_ms);
/* Takes over a worker a previous process started, watched through a
 * pidfd, when agent_proc_is_ours; false otherwise. */
bool agent_adopt(agent_t *a, const Corral__WorkerReport *r, int64_t start_time,
                 const char *out_path, const char *err_path);
size_t agent_running(const agent_t *a);
/* The running workers, as reports (for Register); free with
 * agent_reports_free. */
size_t agent_reports(const agent_t *a, Corral__WorkerReport ***out);
void agent_reports_free(Corral__WorkerReport **v, size_t n);
/* The worker that holds device dev of this node (started by this agent,
 * not adopted: an adopted worker's devices are not known here): false
 * when none; job_id and worker_id borrowed until the worker ends. */
bool agent_device_holder(const agent_t *a, int dev, const char **job_id, const char **worker_id);
/* The node's /metrics (agent/metrics.c): device telemetry, served on
 * host:port (NULL host: 127.0.0.1) on loop to the cluster token as a
 * Bearer; HTTPS with cert and key (PEM, copied), which a host off
 * loopback needs (web/). NULL with why when it cannot listen. */
typedef struct web web_t;
web_t *agent_metrics_start(uv_loop_t *loop, const cr_node_t *node, const hw_options_t *hwo,
                           const agent_t *const *agent, const char *host, int port,
                           const uint8_t token[CR_TOKEN_LEN], const char *cert, const char *key,
                           char *why, size_t size);
/* The certificate /metrics serves off loopback, PEM, malloc'ed into cert
 * and key, and the path of the certificate into path (to trust it with):
 * tls_cert and tls_key when given (--tls-cert/--tls-key), else the
 * agent's own self-signed one in dir (metrics.crt, metrics.key 0600),
 * kept across restarts while it is valid and names name (the address it
 * is reached at), made at the first start. 0, or a negative code and why
 * (a key others may read, a file that is not the user's own). */
int agent_metrics_tls(const char *dir, const char *node_id, const char *tls_cert,
                      const char *tls_key, const char *name, char **cert, char **key, char *path,
                      size_t psize, char *why, size_t size);
/* The node's device metrics into b (the head's /metrics has its own). */
void agent_device_metrics(cr_buf_t *b, const cr_node_t *node, const hw_options_t *hwo,
                          const agent_t *a);
/* Log files of a running worker, NULL when unknown. */
const char *agent_log_path(const agent_t *a, const char *worker_id, int stream);

/* A TCP port free on this host now, 0 when none could be had: an agent's
 * answer to a PortRequest (the rendezvous port of a distributed job); with
 * second, another one besides (JAX's coordinator), both bound at once so
 * that they differ. */
uint32_t agent_free_port(uint32_t *second);
/* Whether pid is provably a worker of this session, so that it may be
 * adopted or its group signalled: pid > 1, it leads its own process group
 * (launch made it one), it runs as the effective user, its start time is
 * start_time (0: not checked) and its environment carries
 * CORRAL_SESSION_ID=session_id. why says which failed. */
bool agent_proc_is_ours(int pid, int64_t start_time, const char *session_id, char *why,
                        size_t size);
/* The value of variable name in the environment process pid started with
 * (/proc/PID/environ) into val; false when unreadable or not set. */
bool agent_proc_env(int pid, const char *name, char *val, size_t size);

/* Field 22 of /proc/PID/stat (0 when unreadable); *state gets field 3. */
int64_t agent_proc_stat(int pid, char *state);

/* A joined agent's own output files of finished workers (keep.c): the
 * files of the newest keep finished workers are kept, each for keep_ms
 * after it ended (0: these defaults, the head's --keep-finished-jobs and
 * --keep-finished-for defaults, CR_KEEP_FINISHED_DEFAULT in head.h); the
 * rest are removed, a batch a second (512 workers), or a batch every
 * 100 ms while a sweep leaves some over the bounds. Files an earlier agent
 * process left in logs are found at start, aged by their mtime; a worker
 * running again is never touched. */
#define AGENT_KEEP_FINISHED_DEFAULT 10000u
#define AGENT_KEEP_FINISHED_MS_DEFAULT (24 * 3600 * 1000LL) /* a day */
typedef struct agent_keep agent_keep_t;
/* *agent is looked at on each sweep (it may be NULL then: none runs). */
agent_keep_t *agent_keep_new(uv_loop_t *loop, const char *logs, const agent_t *const *agent,
                             uint32_t keep, int64_t keep_ms);
/* worker_id's files are a finished worker's from ended_ms (wall clock). */
void agent_keep_ended(agent_keep_t *k, const char *worker_id, int64_t ended_ms);
/* Removes what is over the bounds now, a batch at most; returns how many
 * workers' files. */
size_t agent_keep_sweep(agent_keep_t *k, int64_t now_ms);
/* Whether the last sweep removed a whole batch, so the next is due in
 * 100 ms rather than a second. */
bool agent_keep_behind(const agent_keep_t *k);
/* Closes the timer; the rest is freed from its close callback. */
void agent_keep_free(agent_keep_t *k);

/* How long a worker stopped at the agent's own shutdown gets between
 * SIGTERM and SIGKILL. */
#define AGENT_STOP_GRACE_MS 2000

/* corrald --address HEAD:PORT (join.c): an agent that joins a head over
 * TCP, on its own loop, until SIGTERM or a fatal refusal. node is the
 * discovered description (the agent takes it over), hwo how it was
 * discovered. Returns the process's exit status. */
typedef struct agent_opts {
    const char *head;
    const char *token_file;
    const char *node_ip;
    const char *node_id;
    const char *log_file; /* --log-file; NULL: corrald.log in the agent's logs */
    cr_node_t *node;
    const hw_options_t *hwo;
    /* TLS to the head (docs/cluster.md "TLS"): its certificate's SHA-256
     * pinned ("sha256:HEX", as corral start --head prints it), or a CA
     * file (PEM) to verify it with; either makes the connection TLS */
    const char *tls_fingerprint, *tls_ca;
    int metrics_port;         /* --metrics-port: -1 off, 0 any free port */
    const char *metrics_host; /* --metrics-host; NULL: 127.0.0.1; off loopback HTTPS */
    /* --tls-cert/--tls-key: the certificate /metrics serves off loopback;
     * NULL: the agent's own (agent_metrics_tls) */
    const char *tls_cert, *tls_key;
    /* --worker-log-max: 0 CR_WORKER_LOG_MAX_DEFAULT, CR_WORKER_LOG_UNBOUNDED none */
    uint64_t worker_log_max;
    /* --keep-finished-jobs / --keep-finished-for: the output files of
     * finished workers this agent keeps (agent_keep_new); 0 the defaults */
    uint32_t keep_finished;
    int64_t keep_finished_ms;
} agent_opts_t;
int agent_main(const agent_opts_t *o);
#endif
