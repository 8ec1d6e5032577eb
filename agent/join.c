/* corrald --address HEAD:PORT: an agent that joins a head over TCP
 * (docs/cluster.md). It registers its node description, sends heartbeats,
 * starts and stops workers on the head's word (agent.c), forwards their
 * output, holds two-phase reservations with a lease, and keeps its workers
 * running through a head outage, reconnecting with backoff and reporting
 * them on the next Register. */
#include "agent/agent.h"
#include "net/tls.h"
#include "web/web.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define FWD_CHUNK (1024 * 1024) /* bytes per LogChunk */
#define FWD_MS 50               /* looking again at files that were caught up, at most */
#define FWD_MIN_MS 1            /* and at least: after a worker starts, or a bulk moved */
#define FWD_BULK (64u << 10)    /* bytes one look must move to look again at FWD_MIN_MS */
#define FWD_HIGH (4u << 20)     /* bytes queued to the head before forwarding waits */
#define MAX_BACKOFF_MS 5000

typedef struct fwd {
    char *worker_id, *job_id;
    uint32_t index;
    char *path[2];
    uint64_t off[2];
    Corral__WorkerReport *exit; /* it ended: told once its output is sent (fwd_exit) */
    bool left;                  /* the last pump left bytes unsent */
} fwd_t;

/* What a worker or a reservation holds of this node's resources, by
 * resource id of A.view. */
typedef struct use {
    uint8_t n;
    uint8_t rid[SCHED_REQ_MAX];
    int64_t qty[SCHED_REQ_MAX];
} use_t;

typedef struct wuse {
    char *worker_id;
    use_t u;
} wuse_t;

/* A worker's start or end not yet acknowledged by the head: sent at once
 * (WorkerStarted, WorkerExit), and again in each heartbeat until one that
 * carried it is acknowledged, or in the next Register. */
typedef struct change {
    Corral__WorkerReport *r;
    uint64_t seq; /* the first heartbeat that carried it, 0 none */
    bool in_reg;  /* in the Register sent last */
} change_t;

typedef struct resv {
    char txn[48];
    char pg[24];
    uint64_t devs;
    use_t u;
    bool committed;
    int64_t expires; /* cr_mono_ms, prepared ones */
} resv_t;

static struct {
    uv_loop_t loop;
    cr_net_t *net;
    cr_conn_t *conn;
    agent_t *agent;
    cr_node_t *node;
    hw_options_t hwo;
    const agent_opts_t *o;
    char *dir, *logs;
    uint64_t output_max;                    /* the bound on worker output files (agent_config_t) */
    char session_id[CR_SESSION_ID_LEN + 1]; /* its workers carry it (cr_session_id) */
    uint64_t incarnation;
    bool registered, stopping, fatal;
    uv_timer_t hb, retry, pump;
    uv_signal_t sig_term, sig_int;
    uint32_t backoff, heartbeat_ms;
    uint64_t seq;
    sched_cluster_t *view; /* this node alone: its totals, its resource ids */
    CR_VEC(change_t) changes;
    CR_VEC(wuse_t) uses; /* running workers outside placement groups */
    /* free resources by resource id: as the head last acknowledged them
     * (free_acked_seq), and as last sent (free_sent_seq) */
    int64_t free_acked[SCHED_MAX_RES], free_sent[SCHED_MAX_RES];
    uint64_t free_acked_seq, free_sent_seq;
    CR_VEC(fwd_t) fwd;
    size_t fwd_next;   /* the one pumped first next time */
    uint32_t pump_ms;  /* the pump timer's next interval (on_pump) */
    uint64_t fwd_sent; /* output bytes forwarded so far: a pump that moved some */
    CR_VEC(resv_t) resv;
    /* telemetry (docs/cluster.md "Telemetry"): what was last sent of each
     * device on this connection (tel_have false: nothing yet), and when */
    web_reading_t *tel_sent;
    bool *tel_have;
    int64_t tel_ms;
    agent_keep_t *keep; /* its files of finished workers (keep.c) */
} A;

static void connect_head(void);

static void send_msg(Corral__Envelope *e)
{
    if (!A.conn || !A.registered)
        return;
    if (!e->id)
        e->id = cr_conn_next_id(A.conn);
    int err = cr_conn_send(A.conn, e);
    if (err < 0)
        cr_warn("to the head: %s", cr_strerror(err));
}

/* ----------------------------------------------------- output forwarding */

/* Output goes to the head as fast as the connection takes it: a pump
 * reads what a worker's files gained and sends it while fewer than
 * FWD_HIGH bytes wait to be written, and the connection's drain (on_drain)
 * pumps again at once; the timer looks at files that were caught up. A
 * head that reads slowly so holds at most FWD_HIGH bytes of this agent's
 * memory: the rest waits in the files. A worker's exit is told once its
 * output is sent (worker_ended), so the head has every byte before it
 * calls the job final.
 *
 * To a head that takes raw log chunks (docs/protocol.md "Raw log
 * chunks"), a chunk is its header frame and the file's bytes read right
 * after it into the write buffer: no protobuf copy here or at the head. */

static Corral__WorkerReport *report_copy(const Corral__WorkerReport *r);
static void report_free(Corral__WorkerReport *r);
static void worker_ended(const Corral__WorkerReport *r);

/* By sendfile (cr_conn_can_sendfile: raw chunks, no TLS) only into an
 * empty queue, the rest after the drain: the socket's buffer is the
 * queue then, and the bytes wait in the file, not in this process. */
static bool fwd_room(void)
{
    if (!A.conn || !A.registered)
        return false;
    size_t queued = cr_conn_queued(A.conn);
    return cr_conn_can_sendfile(A.conn) ? queued == 0 : queued < FWD_HIGH;
}

/* Sends what was written to f's files since last time, while the queue
 * has room; false when nothing is left to send (all of it went). */
static bool pump_one(fwd_t *f)
{
    static uint8_t buf[FWD_CHUNK]; /* one loop, one read at a time */
    bool left = false;
    for (int s = 0; s < 2; s++) {
        if (!f->path[s])
            continue;
        int fd = open(f->path[s], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        int retries = 0;
        for (;;) {
            if (!fwd_room()) { /* kept for the drain, or for when the head is back */
                struct stat sb;
                left |= fstat(fd, &sb) == 0 && (uint64_t)sb.st_size > f->off[s];
                break;
            }
            /* skips the holes the bound left (cr_output_bound): output this
             * agent dropped before it could send it; the head's copy gets
             * the same gap */
            struct stat sb;
            uint64_t start, end;
            uint64_t size = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
            if (!cr_output_next(fd, f->off[s], size, cr_output_old(size, A.output_max), &start,
                                &end))
                break;
            size_t want = end - start < FWD_CHUNK ? (size_t)(end - start) : FWD_CHUNK;
            /* raw only where the bound cannot punch these bytes while the
             * kernel copies them (head/follow.c raw_ok says why) */
            if (cr_conn_can_send_raw(A.conn) &&
                (!A.output_max || size - start <= A.output_max / 2)) {
                {
                    Corral__LogChunk ch = CORRAL__LOG_CHUNK__INIT;
                    ch.dropped = start - f->off[s];
                    ch.job_id = f->job_id;
                    ch.worker_index = f->index;
                    ch.stream = s ? CORRAL__LOG_STREAM__LOG_STDERR : CORRAL__LOG_STREAM__LOG_STDOUT;
                    ch.offset = start;
                    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
                    e.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
                    e.log_chunk = &ch;
                    e.id = cr_conn_next_id(A.conn);
                    size_t copied;
                    int err = cr_conn_send_log_file(A.conn, &e, fd, start, want, true, &copied);
                    if (err < 0) {
                        cr_warn("to the head: %s", cr_strerror(err));
                        left = true;
                        break;
                    }
                    f->off[s] = start + want;
                    A.fwd_sent += want;
                    continue;
                }
            }
            ssize_t got = pread(fd, buf, want, (off_t)start);
            if (got <= 0)
                break;
            if (retries < 8 && cr_output_punched(fd, start, A.output_max)) {
                retries++;
                continue; /* punched while read: what was read may be zeros */
            }
            uint64_t dropped = start - f->off[s];
            f->off[s] = start;
            Corral__LogChunk ch = CORRAL__LOG_CHUNK__INIT;
            ch.dropped = dropped;
            ch.job_id = f->job_id;
            ch.worker_index = f->index;
            ch.stream = s ? CORRAL__LOG_STREAM__LOG_STDERR : CORRAL__LOG_STREAM__LOG_STDOUT;
            ch.offset = f->off[s];
            ch.data.data = buf;
            ch.data.len = (size_t)got;
            Corral__Envelope e = CORRAL__ENVELOPE__INIT;
            e.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
            e.log_chunk = &ch;
            send_msg(&e);
            f->off[s] += (uint64_t)got;
            A.fwd_sent += (uint64_t)got;
        }
        close(fd);
    }
    return left;
}

static void fwd_free(size_t i)
{
    fwd_t *f = &A.fwd.v[i];
    free(f->worker_id);
    free(f->job_id);
    free(f->path[0]);
    free(f->path[1]);
    if (f->exit)
        report_free(f->exit);
    A.fwd.v[i] = A.fwd.v[--A.fwd.n];
}

/* The sizes of f's files, for the head to count what never reached it. */
static void fwd_sizes(const fwd_t *f, Corral__WorkerReport *r)
{
    uint64_t *out[2] = {&r->stdout_bytes, &r->stderr_bytes};
    for (int s = 0; s < 2; s++) {
        struct stat sb;
        *out[s] = f->path[s] && stat(f->path[s], &sb) == 0 ? (uint64_t)sb.st_size : 0;
    }
}

/* Ends f's forwarding (its worker exited): tells the exit, drops f. */
static void fwd_end(size_t i)
{
    Corral__WorkerReport *r = A.fwd.v[i].exit;
    A.fwd.v[i].exit = NULL;
    fwd_free(i);
    worker_ended(r);
    report_free(r);
}

/* Pumps every forwarded worker; those that exited and have sent all end.
 * flush: the head is gone (or this agent stops): exits are told now, what
 * output is left stays unsent, as it would with the worker's pipe. */
static void fwd_pump_all(bool flush)
{
    size_t n = A.fwd.n;
    for (size_t k = 0; k < n; k++) { /* from the next one each time: none starves */
        fwd_t *f = &A.fwd.v[(A.fwd_next + k) % n];
        f->left = pump_one(f);
    }
    A.fwd_next = n ? (A.fwd_next + 1) % n : 0;
    for (size_t i = 0; i < A.fwd.n;) {
        fwd_t *f = &A.fwd.v[i];
        if (f->exit && (!f->left || flush)) {
            fwd_end(i); /* the last slot moved into i */
            continue;
        }
        i++;
    }
}

/* The timer looks at the files soon after a worker started or a look
 * moved at least FWD_BULK bytes (FWD_MIN_MS), and otherwise less often,
 * doubling to FWD_MS: a worker's first bytes, and a fast writer that the
 * forwarding caught up with, wait about a millisecond rather than half
 * the period on average, while a worker that prints a line now and then
 * (or nothing) is looked at 20 times a second, as before, not a
 * thousand. */
static void on_pump(uv_timer_t *t);

static void pump_after(uint32_t ms)
{
    A.pump_ms = ms;
    uv_timer_start(&A.pump, on_pump, ms, 0);
}

static void on_pump(uv_timer_t *t)
{
    uint64_t sent = A.fwd_sent;
    fwd_pump_all(!A.conn || !A.registered || A.stopping);
    pump_after(A.fwd_sent - sent >= FWD_BULK ? FWD_MIN_MS
               : A.pump_ms * 2 < FWD_MS      ? A.pump_ms * 2
                                             : FWD_MS);
}

static void on_drain(cr_conn_t *c, void *data)
{
    fwd_pump_all(false);
}

/* r's worker exited: true when its output is still on the way (its
 * exit is told once it went), false when the caller tells it now. */
static bool fwd_exit(Corral__WorkerReport *r)
{
    for (size_t i = 0; i < A.fwd.n; i++) {
        fwd_t *f = &A.fwd.v[i];
        if (f->exit || strcmp(f->worker_id, r->worker_id) != 0)
            continue;    /* (an earlier run of the same worker, still sending) */
        fwd_sizes(f, r); /* final: the worker is gone */
        if (pump_one(f) && !A.stopping && A.conn && A.registered) {
            f->exit = report_copy(r);
            return true;
        }
        fwd_free(i);
        return false;
    }
    return false;
}

/* ------------------------------------------------------ what is in use */

/* Quantities by name into a use: those this node has (the head places
 * nothing else here); none named is one CPU, as the head counts it
 * (build_request). */
static void use_push(use_t *u, const char *name, int64_t amount)
{
    int rid = sched_syms_find(&A.view->res, name, strlen(name));
    if (rid < 0 || rid >= A.view->nres || u->n >= SCHED_REQ_MAX)
        return;
    u->rid[u->n] = (uint8_t)rid;
    u->qty[u->n++] = amount;
}

static void use_of(use_t *u, Corral__Quantity *const *q, size_t n, bool default_cpu)
{
    memset(u, 0, sizeof(*u));
    for (size_t i = 0; i < n; i++)
        use_push(u, q[i]->name, q[i]->amount);
    if (n == 0 && default_cpu)
        use_push(u, "CPU", CR_QTY_ONE);
}

static void use_add(const char *worker_id, const use_t *u)
{
    wuse_t *w = CR_VEC_PUSH(&A.uses);
    w->worker_id = cr_strdup(worker_id);
    w->u = *u;
}

static const use_t *use_find(const char *worker_id)
{
    for (size_t i = 0; i < A.uses.n; i++)
        if (strcmp(A.uses.v[i].worker_id, worker_id) == 0)
            return &A.uses.v[i].u;
    return NULL;
}

static void use_drop(const char *worker_id)
{
    for (size_t i = 0; i < A.uses.n; i++)
        if (strcmp(A.uses.v[i].worker_id, worker_id) == 0) {
            free(A.uses.v[i].worker_id);
            A.uses.v[i] = A.uses.v[--A.uses.n];
            return;
        }
}

/* The node's free resources as this agent sees them: its totals less its
 * workers (those in a placement group's bundle count through the group's
 * reservation) and its reservations, by resource id in left and as
 * quantities (those the node has) in fr; each has room for SCHED_MAX_RES. */
static size_t free_now(int64_t *left, Corral__Quantity *fr, Corral__Quantity **frp)
{
    memset(left, 0, SCHED_MAX_RES * sizeof(*left));
    int nres = A.view->nres < SCHED_MAX_RES ? A.view->nres : SCHED_MAX_RES;
    for (int r = 0; r < nres; r++)
        left[r] = A.view->total[r];
    for (size_t i = 0; i < A.uses.n; i++)
        for (int k = 0; k < A.uses.v[i].u.n; k++)
            left[A.uses.v[i].u.rid[k]] -= A.uses.v[i].u.qty[k];
    for (size_t i = 0; i < A.resv.n; i++)
        for (int k = 0; k < A.resv.v[i].u.n; k++)
            left[A.resv.v[i].u.rid[k]] -= A.resv.v[i].u.qty[k];
    size_t n = 0;
    for (int r = 0; r < nres; r++) {
        if (A.view->total[r] <= 0)
            continue;
        corral__quantity__init(&fr[n]);
        fr[n].name = A.view->res.str[r];
        fr[n].amount = left[r];
        frp[n] = &fr[n];
        n++;
    }
    return n;
}

/* ------------------------------------------------------ the agent's news */

static Corral__WorkerReport *report_copy(const Corral__WorkerReport *r)
{
    Corral__WorkerReport *c = cr_malloc(sizeof(*c));
    *c = *r;
    c->worker_id = cr_strdup(r->worker_id);
    c->job_id = cr_strdup(r->job_id ? r->job_id : "");
    c->reason = cr_strdup(r->reason ? r->reason : "");
    return c;
}

static void report_free(Corral__WorkerReport *r)
{
    free(r->worker_id);
    free(r->job_id);
    free(r->reason);
    free(r);
}

/* A change for the head, kept until acknowledged; a worker's end
 * replaces its start. */
static void change_add(const Corral__WorkerReport *r)
{
    bool ended = r->state != CORRAL__WORKER_STATE__WORKER_RUNNING;
    for (size_t i = 0; ended && i < A.changes.n; i++)
        if (strcmp(A.changes.v[i].r->worker_id, r->worker_id) == 0 &&
            A.changes.v[i].r->state == CORRAL__WORKER_STATE__WORKER_RUNNING) {
            report_free(A.changes.v[i].r);
            A.changes.v[i] = A.changes.v[--A.changes.n];
            break;
        }
    change_t *c = CR_VEC_PUSH(&A.changes);
    memset(c, 0, sizeof(*c));
    c->r = report_copy(r);
}

/* Drops the changes a beat up to seq carried (or the Register, when
 * seq is 0). */
static void changes_acked(uint64_t seq)
{
    size_t keep = 0;
    for (size_t i = 0; i < A.changes.n; i++) {
        change_t *c = &A.changes.v[i];
        if (seq ? (c->seq && c->seq <= seq) : c->in_reg) {
            report_free(c->r);
            continue;
        }
        A.changes.v[keep++] = *c;
    }
    A.changes.n = keep;
}

/* ------------------------------------------------- the table on disk */

/* The running workers, in agent_<id>/workers.json, rewritten on every start
 * and exit: an agent killed and started again adopts those still running
 * (pid and start time match) and reports them, so the head can stop them
 * as stale rather than leave them orphaned on the node. */
static void save_table(void)
{
    Corral__WorkerReport **v = NULL;
    size_t n = agent_reports(A.agent, &v);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *out = agent_log_path(A.agent, v[i]->worker_id, 0);
        const char *err = agent_log_path(A.agent, v[i]->worker_id, 1);
        json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:i, s:I, s:s?, s:s?}", "id", v[i]->worker_id,
                              "job", v[i]->job_id, "index", (int)v[i]->worker_index, "attempt",
                              (int)v[i]->attempt, "pid", v[i]->pid, "start_time",
                              (json_int_t)v[i]->start_time, "out", out, "err", err);
        const use_t *u = use_find(v[i]->worker_id);
        if (u) {
            json_t *uj = json_object();
            for (int k = 0; k < u->n; k++)
                json_object_set_new(uj, A.view->res.str[u->rid[k]], json_integer(u->qty[k]));
            json_object_set_new(o, "uses", uj);
        }
        json_array_append_new(arr, o);
    }
    agent_reports_free(v, n);
    char *path = cr_asprintf("%s/workers.json", A.dir), *text = json_dumps(arr, JSON_COMPACT);
    char why[1024];
    if (!text || cr_write_private(path, text, strlen(text), why, sizeof(why)) < 0)
        cr_warn("cannot write %s: %s", path, text ? why : "out of memory");
    json_decref(arr);
    free(path);
    free(text);
}

static void fwd_add(const char *worker_id, const char *out, const char *err, bool from_end);

static void load_table(void)
{
    char *path = cr_asprintf("%s/workers.json", A.dir), *text = NULL, why[1024];
    int e = cr_read_private(path, &text, NULL, why, sizeof(why));
    json_t *arr = e == 0 ? json_loads(text, 0, NULL) : NULL;
    if (e < 0 && e != CR_ENOENT)
        fprintf(stderr, "corrald: not adopting workers: %s\n", why);
    free(path);
    free(text);
    size_t i, adopted = 0;
    json_t *o;
    json_array_foreach(arr, i, o)
    {
        const char *id = json_string_value(json_object_get(o, "id"));
        const char *job = json_string_value(json_object_get(o, "job"));
        if (!id || !job)
            continue;
        Corral__WorkerReport r = CORRAL__WORKER_REPORT__INIT;
        r.worker_id = (char *)id;
        r.job_id = (char *)job;
        r.worker_index = (uint32_t)json_integer_value(json_object_get(o, "index"));
        r.attempt = (uint32_t)json_integer_value(json_object_get(o, "attempt"));
        r.pid = (int32_t)json_integer_value(json_object_get(o, "pid"));
        int64_t st = json_integer_value(json_object_get(o, "start_time"));
        const char *out = json_string_value(json_object_get(o, "out"));
        const char *err = json_string_value(json_object_get(o, "err"));
        if (agent_adopt(A.agent, &r, st, out, err)) {
            fwd_add(id, out, err, true);
            json_t *uj = json_object_get(o, "uses");
            const char *name;
            json_t *amt;
            use_t u = {0};
            json_object_foreach(uj, name, amt)
            {
                if (json_is_integer(amt))
                    use_push(&u, name, json_integer_value(amt));
            }
            if (json_is_object(uj))
                use_add(id, &u);
            adopted++;
        }
    }
    json_decref(arr);
    if (adopted)
        fprintf(stderr, "corrald: adopted %zu worker(s) a previous agent left running\n", adopted);
}

static void fwd_add(const char *worker_id, const char *out, const char *err, bool from_end)
{
    /* worker_index and job id come from the id the head gave: job<J>-w<I> */
    fwd_t *f = CR_VEC_PUSH(&A.fwd);
    memset(f, 0, sizeof(*f));
    f->worker_id = cr_strdup(worker_id);
    const char *w = strstr(worker_id, "-w");
    f->job_id = cr_strdup(strncmp(worker_id, "job", 3) == 0 ? worker_id + 3 : worker_id);
    char *dash = strstr(f->job_id, "-w");
    if (dash)
        *dash = '\0';
    f->index = w ? (uint32_t)strtoul(w + 2, NULL, 10) : 0;
    f->path[0] = out ? cr_strdup(out) : NULL;
    f->path[1] = err ? cr_strdup(err) : NULL;
    pump_after(FWD_MIN_MS);                   /* its first bytes soon */
    for (int k = 0; k < 2 && from_end; k++) { /* what the head already has */
        struct stat sb;
        if (f->path[k] && stat(f->path[k], &sb) == 0)
            f->off[k] = (uint64_t)sb.st_size;
    }
}

static void a_started(void *arg, const agent_started_t *s)
{
    fwd_add(s->worker_id, s->out_path, s->err_path, false);
    save_table();
    Corral__WorkerStarted ws = CORRAL__WORKER_STARTED__INIT;
    ws.worker_id = (char *)s->worker_id;
    ws.pid = s->pid;
    ws.attempt = s->attempt;
    ws.cpus = (char *)(s->cpus ? s->cpus : "");
    ws.warning = (char *)(s->warning ? s->warning : "");
    ws.start_time = s->start_time;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_WORKER_STARTED;
    e.worker_started = &ws;
    send_msg(&e);
    Corral__WorkerReport r = CORRAL__WORKER_REPORT__INIT;
    r.worker_id = (char *)s->worker_id;
    r.state = CORRAL__WORKER_STATE__WORKER_RUNNING;
    r.pid = s->pid;
    r.attempt = s->attempt;
    r.start_time = s->start_time;
    change_add(&r);
}

static void a_exited(void *arg, const Corral__WorkerReport *r)
{
    Corral__WorkerReport x = *r; /* with its files' sizes */
    if (!fwd_exit(&x))           /* else its output reaches the head first, then worker_ended */
        worker_ended(&x);
}

static void worker_ended(const Corral__WorkerReport *r)
{
    use_drop(r->worker_id);
    agent_keep_ended(A.keep, r->worker_id, cr_wall_ms()); /* its output went (or never will) */
    if (!A.stopping)
        save_table();
    change_add(r);
    Corral__WorkerExit x = CORRAL__WORKER_EXIT__INIT;
    x.report = (Corral__WorkerReport *)r;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_WORKER_EXIT;
    e.worker_exit = &x;
    send_msg(&e);
    if (A.stopping && agent_running(A.agent) == 0)
        uv_stop(&A.loop);
    else
        cr_worker_spares_fill(); /* for the next workers, now the exit is told */
}

/* ---------------------------------------------------------- reservations */

static void reply_to(const Corral__Envelope *req, Corral__Envelope *a)
{
    a->reply_to = req->id;
    send_msg(a);
}

static void h_prepare(const Corral__Envelope *e)
{
    const Corral__Prepare *p = e->prepare;
    char why[256] = "";
    uint64_t want[64] = {0};
    size_t n = p->n_reservations < 64 ? p->n_reservations : 64;
    for (size_t i = 0; i < n && !why[0]; i++) {
        const Corral__Reservation *r = p->reservations[i];
        for (size_t d = 0; d < r->n_devices && !why[0]; d++) {
            if (r->devices[d] >= A.node->devices.n || r->devices[d] >= 64) {
                snprintf(why, sizeof(why), "device %u does not exist on node %s", r->devices[d],
                         A.node->id);
                break;
            }
            want[i] |= 1ull << r->devices[d];
        }
        for (size_t k = 0; k < A.resv.n && !why[0]; k++)
            if (strcmp(A.resv.v[k].pg, r->pg_id) && (A.resv.v[k].devs & want[i]))
                snprintf(why, sizeof(why), "device %d is held by placement group %s",
                         __builtin_ctzll(A.resv.v[k].devs & want[i]), A.resv.v[k].pg);
    }
    if (!why[0])
        for (size_t i = 0; i < n; i++) {
            resv_t *r = CR_VEC_PUSH(&A.resv);
            memset(r, 0, sizeof(*r));
            snprintf(r->txn, sizeof(r->txn), "%s", p->txn_id);
            snprintf(r->pg, sizeof(r->pg), "%s", p->reservations[i]->pg_id);
            r->devs = want[i];
            use_of(&r->u, p->reservations[i]->resources, p->reservations[i]->n_resources, false);
            r->expires = cr_mono_ms() + (p->lease_ms ? p->lease_ms : 10000);
        }
    Corral__PrepareReply pr = CORRAL__PREPARE_REPLY__INIT;
    pr.txn_id = p->txn_id;
    pr.ok = !why[0];
    pr.reason = why;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_PREPARE_REPLY;
    a.prepare_reply = &pr;
    reply_to(e, &a);
    cr_info("prepare %s: %s%s", p->txn_id, why[0] ? "refused: " : "held", why);
}

static void drop_where(const char *txn, const char *pg)
{
    size_t keep = 0;
    for (size_t i = 0; i < A.resv.n; i++) {
        const resv_t *r = &A.resv.v[i];
        if ((txn && strcmp(r->txn, txn) == 0) || (pg && strcmp(r->pg, pg) == 0))
            continue;
        A.resv.v[keep++] = *r;
    }
    A.resv.n = keep;
}

static void txn_done(const Corral__Envelope *e, const char *txn, bool committed)
{
    Corral__TxnDone d = CORRAL__TXN_DONE__INIT;
    d.txn_id = (char *)txn;
    d.committed = committed;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_TXN_DONE;
    a.txn_done = &d;
    reply_to(e, &a);
}

static void leases(void)
{
    int64_t now = cr_mono_ms();
    size_t keep = 0;
    for (size_t i = 0; i < A.resv.n; i++) {
        const resv_t *r = &A.resv.v[i];
        if (!r->committed && now > r->expires) {
            cr_warn("reservation %s of %s: lease ran out without a decision; dropped", r->txn,
                    r->pg);
            continue;
        }
        A.resv.v[keep++] = *r;
    }
    A.resv.n = keep;
}

/* ---------------------------------------------------------- the head */

static bool reading_same(const web_reading_t *a, const web_reading_t *b)
{
    return a->available == b->available && strcmp(a->why, b->why) == 0 &&
           a->t.utilization_pct == b->t.utilization_pct && a->t.memory_used == b->t.memory_used &&
           a->t.power_w == b->t.power_w && a->t.temperature_c == b->t.temperature_c &&
           a->t.health == b->t.health && a->t.ecc_corrected == b->t.ecc_corrected &&
           a->t.ecc_uncorrected == b->t.ecc_uncorrected && a->t.xid_last == b->t.xid_last;
}

/* The devices whose reading changed since the last sent, into hb, at most
 * once per WEB_TELEMETRY_PERIOD_MS: a quiet node (a simulated one, or
 * idle devices) sends none after the first. *msgs is freed by the caller. */
static void telemetry_into(Corral__Heartbeat *hb, Corral__DeviceTelemetry **msgs,
                           Corral__DeviceTelemetry ***ptrs)
{
    size_t n = A.node->devices.n;
    int64_t now = cr_mono_ms();
    if (!n || (A.tel_ms && now - A.tel_ms < WEB_TELEMETRY_PERIOD_MS))
        return;
    A.tel_ms = now;
    if (!A.tel_sent) {
        A.tel_sent = cr_calloc(n, sizeof(*A.tel_sent));
        A.tel_have = cr_calloc(n, sizeof(*A.tel_have));
    }
    *msgs = cr_calloc(n, sizeof(**msgs));
    *ptrs = cr_calloc(n, sizeof(**ptrs));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *job, *wk;
        web_reading_t r;
        web_device_read(A.node, &A.hwo, (int)i, agent_device_holder(A.agent, (int)i, &job, &wk),
                        &r);
        if (A.tel_have[i] && reading_same(&r, &A.tel_sent[i]))
            continue;
        A.tel_sent[i] = r;
        A.tel_have[i] = true;
        Corral__DeviceTelemetry *m = &(*msgs)[k];
        corral__device_telemetry__init(m);
        m->index = (uint32_t)i;
        m->available = r.available;
        m->why = A.tel_sent[i].why;
        m->utilization_pct = r.t.utilization_pct;
        m->memory_used = r.t.memory_used;
        m->power_w = r.t.power_w;
        m->temperature_c = r.t.temperature_c;
        m->health = (uint32_t)r.t.health;
        m->ecc_corrected = r.t.ecc_corrected;
        m->ecc_uncorrected = r.t.ecc_uncorrected;
        m->xid_last = r.t.xid_last;
        (*ptrs)[k++] = m;
    }
    hb->telemetry = *ptrs;
    hb->n_telemetry = k;
}

/* A new connection: the head has none of it (a restarted head, or one
 * that dropped the node): the next beat sends every device. */
static void telemetry_forget(void)
{
    if (A.tel_have)
        memset(A.tel_have, 0, A.node->devices.n * sizeof(*A.tel_have));
    A.tel_ms = 0;
}

static void on_hb(uv_timer_t *t)
{
    leases();
    if (!A.conn || !A.registered)
        return;
    Corral__Heartbeat hb = CORRAL__HEARTBEAT__INIT;
    hb.node_id = A.node->id;
    hb.incarnation = A.incarnation;
    hb.seq = ++A.seq;
    Corral__Quantity fr[SCHED_MAX_RES];
    Corral__Quantity *frp[SCHED_MAX_RES];
    int64_t left[SCHED_MAX_RES];
    size_t nfr = free_now(left, fr, frp);
    /* with none in flight, what the head holds is what it acknowledged */
    if (A.free_acked_seq && !A.free_sent_seq && memcmp(left, A.free_acked, sizeof(left)) == 0) {
        hb.free_same = true; /* the head has it: say so rather than send it again */
    } else {
        hb.n_free = nfr;
        hb.free = frp;
        memcpy(A.free_sent, left, sizeof(left));
        A.free_sent_seq = hb.seq;
    }
    Corral__WorkerReport **ch = cr_calloc(A.changes.n + 1, sizeof(*ch));
    for (size_t i = 0; i < A.changes.n; i++) {
        ch[i] = A.changes.v[i].r;
        if (!A.changes.v[i].seq)
            A.changes.v[i].seq = hb.seq;
    }
    hb.changes = ch;
    hb.n_changes = A.changes.n;
    Corral__DeviceTelemetry *tel = NULL, **telp = NULL;
    telemetry_into(&hb, &tel, &telp);
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    send_msg(&e);
    free(ch);
    free(tel);
    free(telp);
}

static void send_register(cr_conn_t *c)
{
    telemetry_forget();
    json_t *nj = hw_node_to_json(A.node);
    char *njs = json_dumps(nj, JSON_COMPACT);
    json_decref(nj);
    Corral__WorkerReport **run = NULL;
    size_t nrun = agent_reports(A.agent, &run);
    /* those running, and the ends the head has not acknowledged */
    Corral__WorkerReport **all = cr_calloc(nrun + A.changes.n + 1, sizeof(*all));
    if (nrun)
        memcpy(all, run, nrun * sizeof(*all));
    size_t nall = nrun;
    for (size_t i = 0; i < A.changes.n; i++) {
        A.changes.v[i].in_reg = true;
        if (A.changes.v[i].r->state != CORRAL__WORKER_STATE__WORKER_RUNNING)
            all[nall++] = A.changes.v[i].r;
    }
    char **txns = cr_calloc(A.resv.n + 1, sizeof(*txns));
    size_t nt = 0;
    for (size_t i = 0; i < A.resv.n; i++)
        if (!A.resv.v[i].committed)
            txns[nt++] = A.resv.v[i].txn;
    Corral__Register r = CORRAL__REGISTER__INIT;
    r.node_json = njs;
    r.incarnation = A.incarnation;
    r.address = (char *)(A.o->node_ip ? A.o->node_ip : "127.0.0.1");
    r.workers = all;
    r.n_workers = nall;
    r.prepared_txns = txns;
    r.n_prepared_txns = nt;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_REGISTER;
    e.register_ = &r;
    e.id = cr_conn_next_id(c);
    int err = cr_conn_send(c, &e);
    if (err < 0)
        cr_warn("register: %s", cr_strerror(err));
    free(txns);
    free(all);
    agent_reports_free(run, nrun);
    free(njs);
}

static void on_ready(cr_conn_t *c, void *data)
{
    A.conn = c;
    cr_conn_set_sendfile(c, true); /* output by sendfile (fwd_room) */
    send_register(c);
}

static void begin_stop(const char *why);

static void on_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    switch (e->body_case) {
    case CORRAL__ENVELOPE__BODY_REGISTERED:
        A.registered = true;
        A.backoff = 0;
        A.heartbeat_ms = e->registered->heartbeat_ms ? e->registered->heartbeat_ms : 1000;
        uv_timer_start(&A.hb, on_hb, A.heartbeat_ms, A.heartbeat_ms);
        changes_acked(0);                       /* they were in the Register */
        A.free_acked_seq = A.free_sent_seq = 0; /* a new head, or one that forgot */
        fprintf(stderr, "corrald: agent %s registered with the head %s (heartbeat %u ms)\n",
                A.node->id, A.o->head, A.heartbeat_ms);
        cr_info("registered with %s as %s", A.o->head, e->registered->node_id);
        break;
    case CORRAL__ENVELOPE__BODY_ERROR:
        if (!A.registered) {
            fprintf(stderr, "corrald: the head refused this agent: %s\n", e->error->message);
            cr_warn("refused by the head: %s", e->error->message);
            A.fatal = true;
            uv_stop(&A.loop);
        } else {
            cr_warn("the head: %s", e->error->message);
        }
        break;
    case CORRAL__ENVELOPE__BODY_HEARTBEAT_ACK:
        changes_acked(e->heartbeat_ack->seq);
        if (A.free_sent_seq && e->heartbeat_ack->seq >= A.free_sent_seq) {
            memcpy(A.free_acked, A.free_sent, sizeof(A.free_acked));
            A.free_acked_seq = A.free_sent_seq;
            A.free_sent_seq = 0;
        }
        break;
    case CORRAL__ENVELOPE__BODY_WORKER_START: {
        const Corral__WorkerStart *ws = e->worker_start;
        if (!ws->pg_id || !ws->pg_id[0]) { /* a bundle's worker counts through its group */
            use_t u;
            use_of(&u, ws->spec ? ws->spec->resources : NULL, ws->spec ? ws->spec->n_resources : 0,
                   true);
            use_add(ws->worker_id, &u);
        }
        agent_start(A.agent, ws);
        break;
    }
    case CORRAL__ENVELOPE__BODY_WORKER_STOP:
        if (agent_stop(A.agent, e->worker_stop->worker_id, e->worker_stop->grace_ms) < 0)
            cr_info("stop %s: not running here", e->worker_stop->worker_id);
        break;
    case CORRAL__ENVELOPE__BODY_PORT_REQUEST: {
        Corral__PortReply pr = CORRAL__PORT_REPLY__INIT;
        pr.port = agent_free_port(&pr.port2);
        Corral__Envelope a = CORRAL__ENVELOPE__INIT;
        a.body_case = CORRAL__ENVELOPE__BODY_PORT_REPLY;
        a.port_reply = &pr;
        reply_to(e, &a);
        break;
    }
    case CORRAL__ENVELOPE__BODY_PREPARE:
        h_prepare(e);
        break;
    case CORRAL__ENVELOPE__BODY_COMMIT:
        for (size_t i = 0; i < A.resv.n; i++)
            if (strcmp(A.resv.v[i].txn, e->commit->txn_id) == 0)
                A.resv.v[i].committed = true;
        txn_done(e, e->commit->txn_id, true);
        break;
    case CORRAL__ENVELOPE__BODY_ABORT:
        drop_where(e->abort->txn_id, NULL);
        txn_done(e, e->abort->txn_id, false);
        break;
    case CORRAL__ENVELOPE__BODY_RELEASE:
        drop_where(NULL, e->release->pg_id);
        break;
    case CORRAL__ENVELOPE__BODY_SHUTDOWN:
        cr_info("the head told this agent to stop (corral stop --address)");
        begin_stop("the head said so: corral stop --address");
        break;
    default:
        break;
    }
}

static void on_retry(uv_timer_t *t)
{
    connect_head();
}

static void on_close(cr_conn_t *c, int err, void *data)
{
    bool was = A.registered;
    A.conn = NULL;
    A.registered = false;
    uv_timer_stop(&A.hb);
    if (A.stopping || A.fatal)
        return;
    fwd_pump_all(true); /* exits waiting on output go into the next Register */
    const char *why = cr_conn_why(c);
    if ((err == CR_EACCES && strstr(why, "TLS")) || err == -EPROTO) {
        /* the head's certificate is not the one pinned, or the head wants
         * TLS: trying again changes neither */
        fprintf(stderr, "corrald: cannot join the head at %s: %s\n", A.o->head, why);
        cr_warn("cannot join the head at %s: %s", A.o->head, why);
        A.fatal = true;
        uv_stop(&A.loop);
        return;
    }
    if (err == CR_EACCES) {
        fprintf(stderr,
                "corrald: the head at %s refused this agent's token; use the head's token file "
                "(--token-file)\n",
                A.o->head);
        cr_warn("the head at %s refused the token", A.o->head);
        A.fatal = true;
        uv_stop(&A.loop);
        return;
    }
    A.backoff = A.backoff ? A.backoff * 2 : 100;
    if (A.backoff > MAX_BACKOFF_MS)
        A.backoff = MAX_BACKOFF_MS;
    if (was)
        fprintf(stderr, "corrald: lost the head (%s); %zu worker(s) keep running; retrying\n",
                err ? cr_strerror(err) : "closed", agent_running(A.agent));
    cr_info("head connection closed (%s); retrying in %u ms", err ? cr_strerror(err) : "closed",
            A.backoff);
    uv_timer_start(&A.retry, on_retry, A.backoff, 0);
}

static void connect_head(void)
{
    int err = cr_net_connect(A.net, A.o->head, CORRAL__ROLE__ROLE_AGENT, NULL);
    if (err < 0) {
        A.backoff = A.backoff ? A.backoff * 2 : 100;
        if (A.backoff > MAX_BACKOFF_MS)
            A.backoff = MAX_BACKOFF_MS;
        uv_timer_start(&A.retry, on_retry, A.backoff, 0);
    }
}

/* A signal, or the head's Shutdown (corral stop --address): the workers
 * stop, then the agent exits, without joining again. */
static void begin_stop(const char *why)
{
    if (A.stopping)
        return;
    A.stopping = true;
    fprintf(stderr, "corrald: agent stopping its %zu worker(s) (%s)\n", agent_running(A.agent),
            why);
    Corral__WorkerReport **run = NULL;
    size_t n = agent_reports(A.agent, &run);
    for (size_t i = 0; i < n; i++)
        agent_stop(A.agent, run[i]->worker_id, AGENT_STOP_GRACE_MS);
    agent_reports_free(run, n);
    if (n == 0)
        uv_stop(&A.loop);
}

static void on_signal(uv_signal_t *h, int signum)
{
    begin_stop(signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void walk_close(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int agent_main(const agent_opts_t *o)
{
    A.o = o;
    A.node = o->node;
    A.hwo = *o->hwo;
    if (o->node_id)
        snprintf(A.node->id, sizeof(A.node->id), "%.63s", o->node_id);
    if (!A.node->id[0])
        snprintf(A.node->id, sizeof(A.node->id), "%.63s", A.node->hostname);
    for (size_t i = 0; i < A.node->labels.n; i++) /* the label follows the id given */
        if (strcmp(A.node->labels.v[i].key, "corral.io/node-id") == 0) {
            free(A.node->labels.v[i].value);
            A.node->labels.v[i].value = cr_strdup(A.node->id);
        }
    char why[1024] = "";
    A.view = sched_cluster_new();
    if (sched_cluster_add(A.view, A.node, why, sizeof(why)) < 0 ||
        sched_cluster_finalize(A.view) < 0) {
        fprintf(stderr, "corrald: node %s cannot be described to a scheduler: %s\n", A.node->id,
                why);
        sched_cluster_free(A.view);
        return 1;
    }
    const char *home = cr_corral_home();
    if (!home)
        return 1;
    A.dir = cr_asprintf("%s/agent_%s", home, A.node->id);
    A.logs = cr_asprintf("%s/logs", A.dir);
    char pidtext[32];
    if (cr_mkdir_private(A.dir, why, sizeof(why)) < 0 ||
        cr_mkdir_private(A.logs, why, sizeof(why)) < 0) {
        fprintf(stderr, "corrald: %s\n", why);
        return 1;
    }
    if (cr_session_id(A.dir, A.session_id, why, sizeof(why)) < 0) {
        fprintf(stderr, "corrald: the agent's session id: %s\n", why);
        return 1;
    }
    char *pidf = cr_asprintf("%s/corrald.pid", A.dir);
    snprintf(pidtext, sizeof(pidtext), "%d\n", (int)getpid());
    if (cr_write_private(pidf, pidtext, strlen(pidtext), why, sizeof(why)) < 0)
        fprintf(stderr, "corrald: %s\n", why);
    free(pidf);
    if (cr_log_use_file(o->log_file, A.logs) < 0)
        return 1;
    uint8_t token[CR_TOKEN_LEN];
    web_t *metrics = NULL;
    char session[4096];
    if (!o->token_file && cr_session_latest(home, session, sizeof(session), why, sizeof(why)) < 0) {
        fprintf(stderr, "corrald: no cluster token: %s (give the head's token with --token-file)\n",
                why);
        return 1;
    }
    char *tokpath = o->token_file ? cr_strdup(o->token_file) : cr_asprintf("%s/token", session);
    int err = cr_token_read(tokpath, token);
    if (err < 0) {
        fprintf(stderr,
                "corrald: cannot read the cluster token %s: %s (give the head's token with "
                "--token-file)\n",
                tokpath, cr_strerror(err));
        free(tokpath);
        return 1;
    }
    free(tokpath);
    /* --metrics-host off loopback: HTTPS only (web/), with a certificate
     * that names the address it is reached at (docs/metrics.md); a
     * certificate given (--tls-cert) is served on loopback too */
    const char *mhost = o->metrics_host && o->metrics_host[0] ? o->metrics_host : "127.0.0.1";
    char mat[256], mcert_path[4096] = "";
    char *mcert = NULL, *mkey = NULL;
    snprintf(mat, sizeof(mat), "%s", mhost);
    if (!strcmp(mhost, "0.0.0.0") || !strcmp(mhost, "::")) { /* every address: one to name */
        if (o->node_ip && o->node_ip[0])
            snprintf(mat, sizeof(mat), "%s", o->node_ip);
        else if (gethostname(mat, sizeof(mat) - 1) < 0 || !mat[0] ||
                 strspn(mat, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") !=
                     strlen(mat))
            snprintf(mat, sizeof(mat), "127.0.0.1");
    }
    if (o->metrics_port >= 0 && (!web_is_loopback(mhost) || o->tls_cert) &&
        agent_metrics_tls(A.dir, A.node->id, o->tls_cert, o->tls_key, mat, &mcert, &mkey,
                          mcert_path, sizeof(mcert_path), why, sizeof(why)) < 0) {
        fprintf(stderr, "corrald: no metrics on %s: %s\n", mhost, why);
        memset(token, 0, sizeof(token));
        return 1;
    }
    A.incarnation = (uint64_t)cr_wall_ms();
    uv_loop_init(&A.loop);
    char name[160];
    snprintf(name, sizeof(name), "agent:%.128s:%d", A.node->id, (int)getpid());
    cr_net_config_t nc = {.token = token, .name = name};
    uint8_t pin[CR_TLS_FP_LEN];
    char *ca = NULL, *ca_path = NULL;
    if (o->tls_fingerprint) {
        if (cr_tls_fp_parse(o->tls_fingerprint, pin) < 0) {
            fprintf(stderr,
                    "corrald: --tls-fingerprint: expected sha256: and 64 hex digits (as corral "
                    "start --head prints it), got '%s'\n",
                    o->tls_fingerprint);
            return 1;
        }
        nc.tls_pin = pin;
    } else if (o->tls_ca) {
        size_t len;
        /* the workers get it as an absolute path: they start elsewhere */
        ca_path = realpath(o->tls_ca, NULL);
        int fd = open(o->tls_ca, O_RDONLY | O_CLOEXEC);
        int e = fd < 0 ? -errno : cr_read_fd_alloc(fd, &ca, &len);
        if (fd >= 0)
            close(fd);
        if (e < 0) {
            fprintf(stderr, "corrald: --tls-ca: cannot read %s: %s\n", o->tls_ca, cr_strerror(e));
            free(ca_path);
            return 1;
        }
        nc.tls_ca_pem = ca;
    }
    cr_net_callbacks_t cb = {
        .on_ready = on_ready, .on_message = on_message, .on_close = on_close, .on_drain = on_drain};
    A.net = cr_net_new(&A.loop, &nc, &cb, NULL);
    free(ca);
    if (!A.net) {
        fprintf(stderr, "corrald: cannot set up the transport to the head (TLS: see above)\n");
        memset(token, 0, sizeof(token));
        free(ca_path);
        return 1;
    }
    agent_config_t ac = {.loop = &A.loop,
                         .node = A.node,
                         .hwo = &A.hwo,
                         .logs = A.logs,
                         .session_id = A.session_id,
                         .head_address = A.o->head,
                         /* the workers reach the head as this agent does */
                         .tls_fingerprint = o->tls_fingerprint,
                         .tls_ca = ca_path,
                         .net = A.net,
                         .ops = {.started = a_started, .exited = a_exited},
                         .token_file = o->token_file,
                         .output_max = !o->worker_log_max ? CR_WORKER_LOG_MAX_DEFAULT
                                       : o->worker_log_max == CR_WORKER_LOG_UNBOUNDED
                                           ? 0
                                           : o->worker_log_max};
    A.output_max = ac.output_max;
    A.agent = agent_new(&ac);
    if (o->metrics_port >= 0) { /* --metrics-port */
        metrics = agent_metrics_start(&A.loop, A.node, &A.hwo, (const agent_t *const *)&A.agent,
                                      mhost, o->metrics_port, token, mcert, mkey, why, sizeof(why));
        bool v6 = strchr(mat, ':') != NULL;
        if (!metrics)
            fprintf(stderr, "corrald: no metrics: %s\n", why);
        else
            fprintf(stderr, "corrald: metrics on %s://%s%s%s:%d/metrics\n",
                    mcert ? "https" : "http", v6 ? "[" : "", mat, v6 ? "]" : "", web_port(metrics));
        if (metrics && mcert) { /* how curl or Prometheus trusts it (corral start says it) */
            const cr_tls_ops_t *t = cr_tls_load(why, sizeof(why));
            uint8_t fp[CR_TLS_FP_LEN];
            char text[96] = "?";
            if (t && t->fingerprint(mcert, strlen(mcert), fp, why, sizeof(why)) == 0)
                cr_tls_fp_format(fp, text, sizeof(text));
            fprintf(stderr, "corrald: metrics certificate %s in %s\n", text, mcert_path);
        }
    }
    if (mkey)
        cr_wipe(mkey, strlen(mkey));
    free(mkey);
    free(mcert);
    memset(token, 0, sizeof(token));
    uv_timer_init(&A.loop, &A.pump); /* before load_table: adopted workers' output pumps */
    load_table();
    uv_timer_init(&A.loop, &A.hb);
    uv_timer_init(&A.loop, &A.retry);
    if (!uv_is_active((uv_handle_t *)&A.pump))
        pump_after(FWD_MS);
    A.keep = agent_keep_new(&A.loop, A.logs, (const agent_t *const *)&A.agent, o->keep_finished,
                            o->keep_finished_ms);
    uv_signal_init(&A.loop, &A.sig_term);
    uv_signal_init(&A.loop, &A.sig_int);
    uv_signal_start(&A.sig_term, on_signal, SIGTERM);
    uv_signal_start(&A.sig_int, on_signal, SIGINT);
    fprintf(stderr, "corrald: agent %s%s joining %s\n", A.node->id,
            A.node->simulated ? " (simulated)" : "", o->head);
    connect_head();
    uv_run(&A.loop, UV_RUN_DEFAULT);
    int rc = A.fatal ? 1 : 0;
    web_free(metrics);
    agent_free(A.agent);
    A.agent = NULL;
    A.stopping = true;
    agent_keep_free(A.keep);
    A.keep = NULL;
    cr_net_close(A.net, NULL, NULL);
    uv_walk(&A.loop, walk_close, NULL);
    uv_run(&A.loop, UV_RUN_DEFAULT);
    uv_loop_close(&A.loop);
    while (A.fwd.n)
        fwd_free(A.fwd.n - 1);
    CR_VEC_FREE(&A.fwd);
    for (size_t i = 0; i < A.changes.n; i++)
        report_free(A.changes.v[i].r);
    CR_VEC_FREE(&A.changes);
    for (size_t i = 0; i < A.uses.n; i++)
        free(A.uses.v[i].worker_id);
    CR_VEC_FREE(&A.uses);
    sched_cluster_free(A.view);
    CR_VEC_FREE(&A.resv);
    free(A.tel_sent);
    free(A.tel_have);
    A.tel_sent = NULL;
    A.tel_have = NULL;
    free(A.dir);
    free(A.logs);
    free(ca_path);
    return rc;
}
