/* bench/cluster load generator: N simulated nodes joining one head over
 * TCP, from one process and one libuv loop (bench/cluster/run.sh).
 *
 * Each simulated node is one ROLE_AGENT connection (net/, the HMAC
 * handshake) that sends Register with a node description taken from a
 * file (`corral hw --spec specs/dgx-h100.yaml --json`) under its own id and
 * hostname (sim-00042) and the label corral.io/simulated=true, then a
 * Heartbeat every second, the N nodes' beats spread evenly over the
 * second, carrying the node's free resources (all of its totals: nothing
 * runs on a simulated node) until a beat is acknowledged, then free_same,
 * as a real agent's do. It answers
 * Prepare with PrepareReply{ok} and Commit/Abort with TxnDone, so that a
 * placement group's two-phase reservation completes on simulated nodes
 * (they hold nothing: no device is checked); everything
 * else it gets is counted, not answered. Nothing runs on a simulated node.
 *
 * Signals: SIGUSR1 stops the heartbeats of node 0 (its connection stays
 * open, as with a frozen agent) and prints "silenced ID MS WALL", MS since
 * its last beat and WALL the wall clock of that beat (ms since the epoch,
 * to hold against the head's node_dead event); SIGTERM
 * or SIGINT prints the summary and exits.
 *
 * Output, one line each, on stdout:
 *   registered N MS            all N answered Registered, MS after the first connect
 *   acks T COUNT               heartbeat acks in the second ending T s after registration
 *                              (the head acknowledges only beats that carry a change)
 *   beats T COUNT              heartbeats sent in that second
 *   summary key=value ...      at exit
 *
 * usage: bench_cluster_loadgen --address HOST:PORT --token-file F
 *            --node-json F --nodes N [--prefix sim] [--inflight 256] */
#include "base/base.h"
#include "net/net.h"
#include <corral/accel.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

typedef struct sim {
    cr_conn_t *conn;
    char id[32];
    bool registered, silent;
    unsigned tries;  /* connections closed before it registered (a busy head's handshake timeout) */
    bool free_acked; /* a beat carrying its free resources was acknowledged */
    uint64_t seq;
    int64_t last_beat; /* cr_mono_ms */
} sim_t;

static struct {
    uv_loop_t *loop;
    cr_net_t *net;
    const char *address;
    sim_t *sims;
    size_t n, next_connect, inflight, max_inflight, nreg;
    size_t *again, nagain; /* nodes to connect again, a stack */
    uint64_t retries;
    json_t *tmpl;
    Corral__Quantity *free_q, **free_p; /* the template's resources, in fixed point */
    size_t nfree;
    uint64_t incarnation;
    int64_t t_first, t_reg;
    size_t hb_cursor;
    int64_t hb_t0;
    uint64_t hb_sent, acks, acks_sec, acks_window, prepares, commits, aborts, other, errors, closed;
    uint64_t beats, beats_sec, beats_window; /* heartbeats written to the head */
    int64_t silenced_at;
    uv_timer_t tick, sec;
    uv_signal_t s_usr1, s_term, s_int;
    int sec_no, window_secs; /* seconds before node 0 went silent */
} G;

static void connect_more(void);

/* a node whose connection closes before it registered connects again, at most this often */
#define RETRIES 5

static void send_env(sim_t *s, Corral__Envelope *e)
{
    if (!s->conn)
        return;
    if (!e->id)
        e->id = cr_conn_next_id(s->conn);
    int err = cr_conn_send(s->conn, e);
    if (err < 0 && G.errors++ < 5)
        fprintf(stderr, "loadgen: send to the head for %s: %s\n", s->id, cr_strerror(err));
}

static void send_register(sim_t *s)
{
    json_t *j = json_deep_copy(G.tmpl);
    json_object_set_new(j, "id", json_string(s->id));
    json_object_set_new(j, "hostname", json_string(s->id));
    json_t *labels = json_object_get(j, "labels");
    if (!json_is_object(labels)) {
        labels = json_object();
        json_object_set_new(j, "labels", labels);
    }
    json_object_set_new(labels, "corral.io/simulated", json_string("true"));
    if (json_object_get(labels, "corral.io/node-id"))
        json_object_set_new(labels, "corral.io/node-id", json_string(s->id));
    char *njs = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    Corral__Register r = CORRAL__REGISTER__INIT;
    r.node_json = njs;
    r.incarnation = G.incarnation;
    r.address = "127.0.0.1";
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_REGISTER;
    e.register_ = &r;
    send_env(s, &e);
    free(njs);
}

static void on_ready(cr_conn_t *c, void *data)
{
    sim_t *s = cr_conn_data(c);
    if (s)
        send_register(s);
}

static void reply(sim_t *s, const Corral__Envelope *req, Corral__Envelope *a)
{
    a->reply_to = req->id;
    send_env(s, a);
}

static void txn_done(sim_t *s, const Corral__Envelope *req, const char *txn, bool committed)
{
    Corral__TxnDone d = CORRAL__TXN_DONE__INIT;
    d.txn_id = (char *)txn;
    d.committed = committed;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_TXN_DONE;
    a.txn_done = &d;
    reply(s, req, &a);
}

static void on_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    sim_t *s = cr_conn_data(c);
    if (!s)
        return;
    switch (e->body_case) {
    case CORRAL__ENVELOPE__BODY_REGISTERED:
        if (!s->registered) {
            s->registered = true;
            G.inflight--;
            if (++G.nreg == G.n) {
                G.t_reg = cr_mono_ms();
                printf("registered %zu %lld\n", G.n, (long long)(G.t_reg - G.t_first));
            }
            connect_more();
        }
        break;
    case CORRAL__ENVELOPE__BODY_HEARTBEAT_ACK:
        s->free_acked = true;
        G.acks++;
        G.acks_sec++;
        break;
    case CORRAL__ENVELOPE__BODY_PREPARE: {
        G.prepares++;
        Corral__PrepareReply pr = CORRAL__PREPARE_REPLY__INIT;
        pr.txn_id = e->prepare->txn_id;
        pr.ok = true;
        pr.reason = "";
        Corral__Envelope a = CORRAL__ENVELOPE__INIT;
        a.body_case = CORRAL__ENVELOPE__BODY_PREPARE_REPLY;
        a.prepare_reply = &pr;
        reply(s, e, &a);
        break;
    }
    case CORRAL__ENVELOPE__BODY_COMMIT:
        G.commits++;
        txn_done(s, e, e->commit->txn_id, true);
        break;
    case CORRAL__ENVELOPE__BODY_ABORT:
        G.aborts++;
        txn_done(s, e, e->abort->txn_id, false);
        break;
    case CORRAL__ENVELOPE__BODY_ERROR:
        if (G.errors++ < 5)
            fprintf(stderr, "loadgen: the head to %s: %s\n", s->id, e->error->message);
        break;
    default:
        G.other++;
        break;
    }
}

static void on_close(cr_conn_t *c, int err, void *data)
{
    sim_t *s = cr_conn_data(c);
    if (!s)
        return;
    if (!s->registered)
        G.inflight--;
    s->conn = NULL;
    G.closed++;
    if (!s->registered && s->tries < RETRIES) { /* connected again, as a real agent would */
        s->tries++;
        G.retries++;
        G.again[G.nagain++] = (size_t)(s - G.sims);
    }
    if (G.closed <= 5)
        fprintf(stderr, "loadgen: %s's connection closed: %s\n", s->id,
                err ? cr_strerror(err) : "by the head");
    connect_more();
}

static void connect_more(void)
{
    while ((G.nagain || G.next_connect < G.n) && G.inflight < G.max_inflight) {
        sim_t *s = G.nagain ? &G.sims[G.again[--G.nagain]] : &G.sims[G.next_connect++];
        cr_conn_t *c = NULL;
        int err = cr_net_connect(G.net, G.address, CORRAL__ROLE__ROLE_AGENT, &c);
        if (err < 0) {
            fprintf(stderr, "loadgen: connect %s for %s: %s\n", G.address, s->id, cr_strerror(err));
            continue;
        }
        if (!G.t_first)
            G.t_first = cr_mono_ms();
        s->conn = c;
        cr_conn_set_data(c, s);
        G.inflight++;
    }
}

/* Every 5 ms: the beats due by now, so node i beats at phase i/N of each
 * second, from the first Registered on (a node still registering skips its
 * slot: it beats within a second of its own registration, so none goes
 * SUSPECT while the others register). */
static void on_tick(uv_timer_t *t)
{
    if (!G.nreg)
        return;
    if (!G.hb_t0)
        G.hb_t0 = cr_mono_ms();
    uint64_t due = (uint64_t)(cr_mono_ms() - G.hb_t0) * G.n / 1000;
    while (G.hb_sent < due) {
        sim_t *s = &G.sims[G.hb_cursor];
        G.hb_cursor = (G.hb_cursor + 1) % G.n;
        G.hb_sent++;
        if (!s->conn || !s->registered || s->silent)
            continue;
        Corral__Heartbeat hb = CORRAL__HEARTBEAT__INIT;
        hb.node_id = s->id;
        hb.incarnation = G.incarnation;
        hb.seq = ++s->seq;
        if (s->free_acked) { /* nothing changes on a simulated node */
            hb.free_same = true;
        } else {
            hb.free = G.free_p;
            hb.n_free = G.nfree;
        }
        s->last_beat = cr_mono_ms();
        G.beats++;
        G.beats_sec++;
        Corral__Envelope e = CORRAL__ENVELOPE__INIT;
        e.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
        e.heartbeat = &hb;
        send_env(s, &e);
    }
}

static void on_sec(uv_timer_t *t)
{
    if (!G.t_reg) {
        G.acks_sec = G.beats_sec = 0;
        return;
    }
    G.sec_no++;
    printf("acks %d %llu\n", G.sec_no, (unsigned long long)G.acks_sec);
    printf("beats %d %llu\n", G.sec_no, (unsigned long long)G.beats_sec);
    fflush(stdout);
    if (!G.silenced_at) {
        G.acks_window += G.acks_sec;
        G.beats_window += G.beats_sec;
        G.window_secs++;
    }
    G.acks_sec = G.beats_sec = 0;
}

static void on_usr1(uv_signal_t *h, int sig)
{
    if (G.silenced_at || !G.n)
        return;
    G.sims[0].silent = true;
    G.silenced_at = cr_mono_ms();
    int64_t since = G.sims[0].last_beat ? G.silenced_at - G.sims[0].last_beat : 0;
    printf("silenced %s %lld %lld\n", G.sims[0].id, (long long)since,
           (long long)(cr_wall_ms() - since));
}

static void on_term(uv_signal_t *h, int sig)
{
    int secs = G.window_secs;
    printf("summary nodes=%zu registered=%zu register_ms=%lld hb_sent=%llu beats=%llu "
           "beats_per_s=%.1f acks=%llu acks_per_s=%.1f prepares=%llu commits=%llu aborts=%llu "
           "other=%llu errors=%llu "
           "closed=%llu retries=%llu\n",
           G.n, G.nreg, G.t_reg ? (long long)(G.t_reg - G.t_first) : -1LL,
           (unsigned long long)G.hb_sent, (unsigned long long)G.beats,
           secs ? (double)G.beats_window / secs : 0.0, (unsigned long long)G.acks,
           secs ? (double)G.acks_window / secs : 0.0, (unsigned long long)G.prepares,
           (unsigned long long)G.commits, (unsigned long long)G.aborts, (unsigned long long)G.other,
           (unsigned long long)G.errors, (unsigned long long)G.closed,
           (unsigned long long)G.retries);
    fflush(stdout);
    exit(0);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    cr_buf_t b = {0};
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0)
        cr_buf_append(&b, chunk, got);
    fclose(f);
    return b.s;
}

int main(int argc, char **argv)
{
    const char *token_file = NULL, *node_json = NULL, *prefix = "sim";
    G.max_inflight = 256;
    static const struct option lo[] = {{"address", 1, 0, 'a'},
                                       {"token-file", 1, 0, 't'},
                                       {"node-json", 1, 0, 'j'},
                                       {"nodes", 1, 0, 'n'},
                                       {"prefix", 1, 0, 'p'},
                                       {"inflight", 1, 0, 'i'},
                                       {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'a':
            G.address = optarg;
            break;
        case 't':
            token_file = optarg;
            break;
        case 'j':
            node_json = optarg;
            break;
        case 'n':
            G.n = strtoul(optarg, NULL, 10);
            break;
        case 'p':
            prefix = optarg;
            break;
        case 'i':
            G.max_inflight = strtoul(optarg, NULL, 10);
            break;
        default:
            goto usage;
        }
    }
    if (!G.address || !token_file || !node_json || !G.n || !G.max_inflight) {
    usage:
        fprintf(stderr,
                "usage: %s --address HOST:PORT --token-file F --node-json F --nodes N "
                "[--prefix sim] [--inflight 256]\n",
                argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < G.n + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < G.n + 64) {
        fprintf(stderr,
                "loadgen: %zu connections need %zu file descriptors; the limit is %llu (raise "
                "the hard limit: ulimit -Hn)\n",
                G.n, G.n + 64, (unsigned long long)rl.rlim_cur);
        return 1;
    }
    char *txt = slurp(node_json);
    json_error_t je;
    G.tmpl = txt ? json_loads(txt, 0, &je) : NULL;
    free(txt);
    if (!json_is_object(G.tmpl)) {
        fprintf(stderr, "loadgen: %s: not a node description (corral hw --json)\n", node_json);
        return 1;
    }
    json_t *res = json_object_get(G.tmpl, "resources");
    G.free_q = cr_calloc(json_object_size(res) + 1, sizeof(*G.free_q));
    G.free_p = cr_calloc(json_object_size(res) + 1, sizeof(*G.free_p));
    const char *rname;
    json_t *rv;
    json_object_foreach(res, rname, rv)
    {
        Corral__Quantity *q = &G.free_q[G.nfree];
        corral__quantity__init(q);
        q->name = (char *)rname;
        q->amount = json_is_integer(rv) ? (int64_t)json_integer_value(rv) * CR_QTY_ONE
                                        : (int64_t)(json_number_value(rv) * CR_QTY_ONE);
        G.free_p[G.nfree++] = q;
    }
    uint8_t token[CR_TOKEN_LEN];
    if (cr_token_read(token_file, token) < 0) {
        fprintf(stderr, "loadgen: cannot read the token %s\n", token_file);
        return 1;
    }
    G.incarnation = (uint64_t)cr_mono_ms() + 1;
    G.sims = cr_calloc(G.n, sizeof(*G.sims));
    G.again = cr_calloc(G.n, sizeof(*G.again));
    for (size_t i = 0; i < G.n; i++)
        snprintf(G.sims[i].id, sizeof(G.sims[i].id), "%s-%05zu", prefix, i);
    G.loop = uv_default_loop();
    cr_net_config_t nc = {
        .token = token, .name = "bench-cluster-loadgen", .handshake_timeout_ms = 60000};
    cr_net_callbacks_t cb = {.on_ready = on_ready, .on_message = on_message, .on_close = on_close};
    G.net = cr_net_new(G.loop, &nc, &cb, NULL);
    if (!G.net)
        return 1;
    uv_timer_init(G.loop, &G.tick);
    uv_timer_start(&G.tick, on_tick, 5, 5);
    uv_timer_init(G.loop, &G.sec);
    uv_timer_start(&G.sec, on_sec, 1000, 1000);
    uv_signal_init(G.loop, &G.s_usr1);
    uv_signal_start(&G.s_usr1, on_usr1, SIGUSR1);
    uv_signal_init(G.loop, &G.s_term);
    uv_signal_start(&G.s_term, on_term, SIGTERM);
    uv_signal_init(G.loop, &G.s_int);
    uv_signal_start(&G.s_int, on_term, SIGINT);
    connect_more();
    uv_run(G.loop, UV_RUN_DEFAULT);
    return 0;
}
