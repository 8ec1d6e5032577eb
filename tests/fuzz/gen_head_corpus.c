/* Writes the seed corpus of fuzz_head (tests/fuzz/corpus/head/): a few
 * conversations of a client and agents with a fresh head, in fuzz_head's
 * input format ([ctl][len lo][len hi][Envelope payload], ctl 0 the client,
 * 1 agent A, 2 agent B). The head is the harness's: a simulated DGX H100
 * (specs/dgx-h100.yaml, node dgx-h100-01, 8 GPUs); its first job is "1"
 * (workers job1-w0, ...), its first placement group "pg1" (transaction
 * pgpg1-1). Agents register as dgx-h100-02 and -03, the same spec renamed.
 *
 * Not part of the build; regenerate with (from the repository root, after
 * `make build`):
 *   build/corral-tools hw --spec specs/dgx-h100.yaml --json > /tmp/node.json
 *   cc -O1 -Ibuild/proto/gen -o /tmp/gen_head_corpus tests/fuzz/gen_head_corpus.c \
 *      build/proto/libcorral_proto.a -lprotobuf-c
 *   /tmp/gen_head_corpus /tmp/node.json tests/fuzz/corpus/head */
#include "proto/corral.pb-c.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t buf[1 << 20];
static size_t used;
static uint64_t next_id;

static void put(int ctl, Corral__Envelope *e)
{
    if (!e->id)
        e->id = ++next_id;
    size_t n = corral__envelope__get_packed_size(e);
    if (used + 3 + n > sizeof(buf) || n > 0xffff) {
        fprintf(stderr, "gen_head_corpus: message too long\n");
        exit(1);
    }
    buf[used++] = (uint8_t)ctl;
    buf[used++] = (uint8_t)(n & 0xff);
    buf[used++] = (uint8_t)(n >> 8);
    corral__envelope__pack(e, buf + used);
    used += n;
}

static void save(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(buf, 1, used, fp) != used || fclose(fp) != 0) {
        perror(path);
        exit(1);
    }
    used = 0;
    next_id = 0;
}

#define ENV(var, field, BODY, val)                                                                 \
    Corral__Envelope var = CORRAL__ENVELOPE__INIT;                                                 \
    var.body_case = CORRAL__ENVELOPE__BODY_##BODY;                                                 \
    var.field = (val)

#define REMOTE "corral.io/node-id in (dgx-h100-02,dgx-h100-03)"

static char *node_json[3];

static char *renamed(const char *json, const char *from, const char *to)
{
    size_t n = 0, lf = strlen(from), lt = strlen(to);
    for (const char *p = json; (p = strstr(p, from)); p += lf)
        n++;
    char *out = malloc(strlen(json) + n * (lt > lf ? lt - lf : 0) + 1), *o = out;
    for (const char *p = json;;) {
        const char *q = strstr(p, from);
        if (!q) {
            strcpy(o, p);
            break;
        }
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, lt);
        o += lt;
        p = q + lf;
    }
    return out;
}

static void reg(int agent, uint64_t incarnation)
{
    Corral__Register r = CORRAL__REGISTER__INIT;
    r.node_json = node_json[agent];
    r.incarnation = incarnation;
    r.address = agent == 1 ? "10.0.0.2" : "10.0.0.3";
    ENV(e, register_, REGISTER, &r);
    put(agent, &e);
}

static void heartbeat(int agent, uint64_t seq)
{
    Corral__Heartbeat h = CORRAL__HEARTBEAT__INIT;
    h.node_id = agent == 1 ? "dgx-h100-02" : "dgx-h100-03";
    h.incarnation = 1;
    h.seq = seq;
    Corral__Quantity q = CORRAL__QUANTITY__INIT, *qs[1] = {&q};
    q.name = "GPU";
    q.amount = 8 * 10000;
    h.free = qs;
    h.n_free = 1;
    ENV(e, heartbeat, HEARTBEAT, &h);
    put(agent, &e);
}

/* a beat carrying its devices' telemetry (docs/cluster.md), one index out
 * of range */
static void heartbeat_telemetry(int agent, uint64_t seq)
{
    Corral__DeviceTelemetry t[3], *ts[3];
    for (int i = 0; i < 3; i++) {
        corral__device_telemetry__init(&t[i]);
        t[i].index = i == 2 ? 99 : (uint32_t)i;
        t[i].available = i != 1;
        t[i].why = i == 1 ? "the backend reads no telemetry" : "";
        t[i].utilization_pct = 42;
        t[i].power_w = -1;
        t[i].temperature_c = 55;
        t[i].ecc_corrected = 3;
        t[i].ecc_uncorrected = -1;
        t[i].xid_last = 31;
        ts[i] = &t[i];
    }
    Corral__Heartbeat h = CORRAL__HEARTBEAT__INIT;
    h.node_id = agent == 1 ? "dgx-h100-02" : "dgx-h100-03";
    h.incarnation = 1;
    h.seq = seq;
    h.free_same = true;
    h.telemetry = ts;
    h.n_telemetry = 3;
    ENV(e, heartbeat, HEARTBEAT, &h);
    put(agent, &e);
}

/* a beat carrying a worker's start (code < 0) or end, as an agent whose
 * WorkerStarted or WorkerExit went astray sends it */
static void heartbeat_change(int agent, uint64_t seq, const char *worker_id, int code)
{
    Corral__WorkerReport r = CORRAL__WORKER_REPORT__INIT, *rs[1] = {&r};
    r.worker_id = (char *)worker_id;
    r.state = code < 0 ? CORRAL__WORKER_STATE__WORKER_RUNNING : CORRAL__WORKER_STATE__WORKER_EXITED;
    r.pid = 4242;
    r.exit_code = code < 0 ? 0 : code;
    Corral__Heartbeat h = CORRAL__HEARTBEAT__INIT;
    h.node_id = agent == 1 ? "dgx-h100-02" : "dgx-h100-03";
    h.incarnation = 1;
    h.seq = seq;
    h.changes = rs;
    h.n_changes = 1;
    ENV(e, heartbeat, HEARTBEAT, &h);
    put(agent, &e);
}

static bool bound_next; /* the next submit or group is bound to its connection */

static void submit(int nworkers, int gpus, const char *pg, bool distributed, uint32_t restarts,
                   const char *selector)
{
    char *argv[] = {"sh", "-c", "echo hi"};
    Corral__Quantity q = CORRAL__QUANTITY__INIT, *qs[1] = {&q};
    q.name = "GPU";
    q.amount = (int64_t)gpus * 10000; /* fixed point: 10000 a unit */
    Corral__KeyValue kv = CORRAL__KEY_VALUE__INIT, *kvs[1] = {&kv};
    kv.key = "FOO";
    kv.value = "bar";
    Corral__WorkerSpec ws = CORRAL__WORKER_SPEC__INIT;
    ws.argv = argv;
    ws.n_argv = 3;
    ws.env = kvs;
    ws.n_env = 1;
    ws.resources = qs;
    ws.n_resources = gpus ? 1 : 0;
    Corral__JobSpec s = CORRAL__JOB_SPEC__INIT;
    s.name = "fuzz";
    s.worker = &ws;
    s.num_workers = (uint32_t)nworkers;
    s.placement_group = pg ? (char *)pg : "";
    s.bundle_index = pg ? -1 : 0;
    s.distributed = distributed;
    s.max_restarts = restarts;
    s.restart =
        restarts ? CORRAL__RESTART_POLICY__RESTART_WORKER : CORRAL__RESTART_POLICY__RESTART_NONE;
    s.backoff_ms = 1;
    s.selector = selector ? (char *)selector : "";
    Corral__JobSubmit js = CORRAL__JOB_SUBMIT__INIT;
    js.spec = &s;
    js.bound = bound_next;
    ENV(e, job_submit, JOB_SUBMIT, &js);
    put(0, &e);
}

static void client_queries(const char *job)
{
    Corral__StatusRequest sr = CORRAL__STATUS_REQUEST__INIT;
    ENV(e1, status_request, STATUS_REQUEST, &sr);
    put(0, &e1);
    Corral__NodeList nl = CORRAL__NODE_LIST__INIT;
    nl.with_json = true;
    ENV(e2, node_list, NODE_LIST, &nl);
    put(0, &e2);
    Corral__JobList jl = CORRAL__JOB_LIST__INIT;
    ENV(e3, job_list, JOB_LIST, &jl);
    put(0, &e3);
    Corral__EventsRequest er = CORRAL__EVENTS_REQUEST__INIT;
    er.limit = 100;
    ENV(e4, events_request, EVENTS_REQUEST, &er);
    put(0, &e4);
    Corral__PgList pl = CORRAL__PG_LIST__INIT;
    ENV(e5, pg_list, PG_LIST, &pl);
    put(0, &e5);
    /* pages: a limit, and tokens of another head, listing or form */
    Corral__JobList jp = CORRAL__JOB_LIST__INIT;
    jp.limit = 1;
    jp.continue_token = "jobs.00000000.2";
    ENV(e8, job_list, JOB_LIST, &jp);
    put(0, &e8);
    Corral__EventsRequest ep = CORRAL__EVENTS_REQUEST__INIT;
    ep.page_limit = 1;
    ep.continue_token = "events.x.";
    ENV(e9, events_request, EVENTS_REQUEST, &ep);
    put(0, &e9);
    Corral__NodeList np = CORRAL__NODE_LIST__INIT;
    np.limit = 1;
    np.continue_token = "groups.00000000.dgx";
    ENV(e10, node_list, NODE_LIST, &np);
    put(0, &e10);
    if (job) {
        Corral__JobStatusRequest st = CORRAL__JOB_STATUS_REQUEST__INIT;
        st.job_id = (char *)job;
        ENV(e6, job_status, JOB_STATUS, &st);
        put(0, &e6);
        Corral__JobLogs lg = CORRAL__JOB_LOGS__INIT;
        lg.job_id = (char *)job;
        lg.worker_index = -1;
        ENV(e7, job_logs, JOB_LOGS, &lg);
        put(0, &e7);
    }
}

static void worker_started(int agent, const char *wid)
{
    Corral__WorkerStarted s = CORRAL__WORKER_STARTED__INIT;
    s.worker_id = (char *)wid;
    s.pid = 4242;
    s.cpus = "0-3";
    s.start_time = 12345;
    ENV(e, worker_started, WORKER_STARTED, &s);
    put(agent, &e);
}

static void worker_exit(int agent, const char *job, const char *wid, int index, int code)
{
    Corral__WorkerReport r = CORRAL__WORKER_REPORT__INIT;
    r.worker_id = (char *)wid;
    r.job_id = (char *)job;
    r.worker_index = (uint32_t)index;
    r.state = CORRAL__WORKER_STATE__WORKER_EXITED;
    r.pid = 4242;
    r.exit_code = code;
    r.stdout_bytes = 1u << 20; /* more than was forwarded: counted as lost */
    Corral__WorkerExit x = CORRAL__WORKER_EXIT__INIT;
    x.report = &r;
    ENV(e, worker_exit, WORKER_EXIT, &x);
    put(agent, &e);
}

static void log_chunk(int agent, const char *job, int index, int eof)
{
    Corral__LogChunk l = CORRAL__LOG_CHUNK__INIT;
    l.job_id = (char *)job;
    l.worker_index = (uint32_t)index;
    l.stream = CORRAL__LOG_STREAM__LOG_STDOUT;
    l.data.data = (uint8_t *)"hello\n";
    l.data.len = 6;
    l.eof = eof;
    ENV(e, log_chunk, LOG_CHUNK, &l);
    put(agent, &e);
}

static void pg_create(int bundles, int gpus)
{
    Corral__Quantity q = CORRAL__QUANTITY__INIT, *qs[1] = {&q};
    q.name = "GPU";
    q.amount = (int64_t)gpus * 10000; /* fixed point: 10000 a unit */
    Corral__Bundle b = CORRAL__BUNDLE__INIT, *bs[8];
    b.resources = qs;
    b.n_resources = 1;
    for (int i = 0; i < bundles; i++)
        bs[i] = &b;
    Corral__PgCreate c = CORRAL__PG_CREATE__INIT;
    c.name = "grp";
    c.bundles = bs;
    c.n_bundles = (size_t)bundles;
    c.strategy = CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD;
    c.bound = bound_next ? CORRAL__PG_BOUND__BOUND_UNTIL_CREATED : CORRAL__PG_BOUND__BOUND_NONE;
    ENV(e, pg_create, PG_CREATE, &c);
    put(0, &e);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: gen_head_corpus NODE_JSON OUT_DIR\n");
        return 2;
    }
    FILE *fp = fopen(argv[1], "r");
    static char json[1 << 17];
    size_t n = fp ? fread(json, 1, sizeof(json) - 1, fp) : 0;
    if (!n) {
        perror(argv[1]);
        return 1;
    }
    fclose(fp);
    /* compact: drop newlines and indentation (no string has either) */
    char *o = json;
    bool in_str = false;
    for (const char *p = json; *p; p++) {
        if (*p == '"' && (p == json || p[-1] != '\\'))
            in_str = !in_str;
        if (!in_str && (*p == '\n' || *p == ' '))
            continue;
        *o++ = *p;
    }
    *o = '\0';
    node_json[1] = renamed(json, "dgx-h100-01", "dgx-h100-02");
    node_json[2] = renamed(json, "dgx-h100-01", "dgx-h100-03");
    const char *dir = argv[2];

    /* 1: every query of a client, nothing there */
    client_queries(NULL);
    save(dir, "queries");

    /* 2: a local job (its start refused by the harness), queried, stopped */
    submit(1, 1, NULL, false, 0, NULL);
    client_queries("1");
    {
        Corral__JobLogs lg = CORRAL__JOB_LOGS__INIT;
        lg.job_id = "1";
        lg.worker_index = 0;
        lg.follow = true;
        lg.with_job = true; /* the eof carries the JobInfo (corral run) */
        ENV(e, job_logs, JOB_LOGS, &lg);
        put(0, &e);
        Corral__JobStop js = CORRAL__JOB_STOP__INIT;
        js.job_id = "1";
        js.grace_ms = 10;
        ENV(e2, job_stop, JOB_STOP, &js);
        put(0, &e2);
        Corral__EventsRequest er = CORRAL__EVENTS_REQUEST__INIT;
        er.follow = true;
        ENV(e3, events_request, EVENTS_REQUEST, &er);
        put(0, &e3);
    }
    save(dir, "local_job");

    /* 3: an agent joins; a 16-worker job spans it; its workers start, log, exit */
    reg(1, 1);
    heartbeat(1, 1);
    submit(2, 1, NULL, false, 1, REMOTE);
    worker_started(1, "job1-w0");
    worker_started(1, "job1-w1");
    log_chunk(1, "1", 0, 0);
    log_chunk(1, "1", 0, 1);
    worker_exit(1, "1", "job1-w0", 0, 0);
    worker_exit(1, "1", "job1-w1", 1, 3);
    heartbeat(1, 2);
    heartbeat_telemetry(1, 3);
    client_queries("1");
    save(dir, "remote_job");

    /* 4: a distributed job across two agents: the port request answered */
    reg(1, 1);
    reg(2, 1);
    submit(16, 1, NULL, true, 0, REMOTE);
    {
        Corral__PortReply pr = CORRAL__PORT_REPLY__INIT;
        pr.port = 29500;
        ENV(e, port_reply, PORT_REPLY, &pr);
        e.reply_to = 1;
        put(1, &e);
        put(2, &e);
    }
    worker_started(1, "job1-w0");
    worker_started(2, "job1-w8");
    client_queries("1");
    save(dir, "distributed");

    /* 5: a placement group over two agents: prepared, committed, used, removed */
    reg(1, 1);
    reg(2, 1);
    pg_create(3, 8);
    {
        Corral__PrepareReply p = CORRAL__PREPARE_REPLY__INIT;
        p.txn_id = "pgpg1-1";
        p.ok = true;
        ENV(e, prepare_reply, PREPARE_REPLY, &p);
        e.reply_to = 1;
        put(1, &e);
        put(2, &e);
        Corral__TxnDone t = CORRAL__TXN_DONE__INIT;
        t.txn_id = "pgpg1-1";
        t.committed = true;
        ENV(e2, txn_done, TXN_DONE, &t);
        put(1, &e2);
        put(2, &e2);
    }
    submit(1, 8, "grp", false, 0, NULL);
    client_queries("1");
    {
        Corral__PgRemove r = CORRAL__PG_REMOVE__INIT;
        r.name = "grp";
        ENV(e, pg_remove, PG_REMOVE, &r);
        put(0, &e);
    }
    save(dir, "pg");

    /* 6: an agent that beats before it registers, then leaves mid-job */
    heartbeat(1, 1);
    reg(1, 1);
    submit(2, 1, NULL, false, 0, REMOTE);
    worker_started(1, "job1-w0");
    heartbeat(1, 1);
    /* ctl 0x41: agent A sends Ack-less nothing and closes */
    {
        Corral__Heartbeat h = CORRAL__HEARTBEAT__INIT;
        h.node_id = "dgx-h100-02";
        h.incarnation = 1;
        h.seq = 2;
        ENV(e, heartbeat, HEARTBEAT, &h);
        put(0x41, &e);
    }
    client_queries("1");
    save(dir, "agent_leaves");

    /* 7: shutdown with a job of a remote agent running */
    reg(1, 1);
    submit(2, 1, NULL, false, 0, REMOTE);
    worker_started(1, "job1-w0");
    {
        Corral__Shutdown s = CORRAL__SHUTDOWN__INIT;
        ENV(e, shutdown, SHUTDOWN, &s);
        put(0x80, &e);
    }
    submit(1, 1, NULL, false, 0, NULL);
    worker_exit(1, "1", "job1-w0", 0, 0);
    client_queries("1");
    save(dir, "shutdown");

    /* 8: a remote worker's start and end in heartbeats only, the end twice */
    reg(1, 1);
    submit(1, 1, NULL, false, 0, REMOTE);
    heartbeat_change(1, 1, "job1-w0", -1);
    heartbeat_change(1, 2, "job1-w0", 3);
    heartbeat_change(1, 3, "job1-w0", 3);
    client_queries("1");
    save(dir, "changes_in_beats");

    /* 9: a client's bound job and bound group, both waiting (the GPUs
     * taken), and the client goes: the head stops the job, removes the
     * group; a new client's status shows what is left */
    submit(1, 8, NULL, false, 0, NULL);
    bound_next = true;
    submit(1, 8, NULL, false, 0, NULL);
    pg_create(1, 8);
    bound_next = false;
    client_queries("2");
    {
        Corral__StatusRequest sr = CORRAL__STATUS_REQUEST__INIT;
        ENV(e, status_request, STATUS_REQUEST, &sr);
        put(0x40, &e); /* then the client's connection closes */
    }
    client_queries("2");
    save(dir, "bound");

    /* 10: corral stop --address: the agents told to stop, the head kept,
     * then all of it */
    reg(1, 1);
    reg(2, 1);
    submit(2, 1, NULL, false, 0, REMOTE);
    {
        Corral__Shutdown sd = CORRAL__SHUTDOWN__INIT;
        sd.agents = true;
        sd.keep_head = true;
        ENV(e, shutdown, SHUTDOWN, &sd);
        put(0, &e);
        client_queries("1");
        sd.keep_head = false;
        put(0x80, &e);
    }
    client_queries(NULL);
    save(dir, "stop_cluster");
    return 0;
}
