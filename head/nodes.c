/* The head's nodes, its membership (docs/cluster.md): its own node (with
 * the agent in-process) and those whose agents joined over TCP.
 * Registration, heartbeats and the free resources they carry, ALIVE ->
 * SUSPECT -> DEAD, a new incarnation on rejoin, the ports an agent hands
 * out, and the nodes as `corral nodes` and `corral status` show them.
 * What happens to a node's workers and bundles is the jobs' and the
 * groups' business: a death is told through D.watch. */
#include "head/head.h"
#include "head/telemetry.h"
#include "sched/gang.h"
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct port_wait {
    uint64_t req;
    node_t *node;
    char key[24];
    node_port_fn done;
} port_wait_t;
static CR_VEC(port_wait_t) port_waits;

const char *node_state_name(Corral__NodeState s)
{
    switch (s) {
    case CORRAL__NODE_STATE__NODE_ALIVE:
        return "ALIVE";
    case CORRAL__NODE_STATE__NODE_SUSPECT:
        return "SUSPECT";
    case CORRAL__NODE_STATE__NODE_DEAD:
        return "DEAD";
    default:
        return "UNKNOWN";
    }
}

static cr_node_state_t db_state(Corral__NodeState s)
{
    return s == CORRAL__NODE_STATE__NODE_DEAD      ? CR_NODE_DEAD
           : s == CORRAL__NODE_STATE__NODE_SUSPECT ? CR_NODE_SUSPECT
                                                   : CR_NODE_ALIVE;
}

static void db_node_state(const node_t *n);

/* A remote node's description is kept whole in state.db only: the head
 * keeps its labels and names (what status, selectors' answers and events
 * use; the scheduler has its own copy of the rest). 16 KiB of a DGX-class
 * description per node becomes well under 1 KiB. */
static void node_slim(node_t *n)
{
    cr_node_t *d = n->desc;
    n->ndev = (uint32_t)d->devices.n;
    if (n->local || n->slim)
        return;
    CR_VEC_FREE(&d->numa);
    CR_VEC_FREE(&d->devices);
    CR_VEC_FREE(&d->links);
    for (size_t i = 0; i < d->domains.n; i++)
        hw_domain_fini(&d->domains.v[i]);
    CR_VEC_FREE(&d->domains);
    CR_VEC_FREE(&d->nics);
    CR_VEC_FREE(&d->resources);
    for (size_t i = 0; i < d->warnings.n; i++)
        free(d->warnings.v[i]);
    CR_VEC_FREE(&d->warnings);
    n->slim = true;
}

void node_record(const node_t *n)
{
    if (n->slim) { /* the description in state.db is the whole one */
        db_node_state(n);
        return;
    }
    json_t *nj = hw_node_to_json(n->desc);
    char *njs = json_dumps(nj, JSON_COMPACT);
    json_decref(nj);
    cr_state_node_t row = {.id = n->id,
                           .incarnation = (int64_t)n->incarnation,
                           .address = n->address,
                           .state = db_state(n->state),
                           .desc_json = njs,
                           .last_heartbeat_ms = node_seen_wall(n)};
    db_check(cr_state_node_put(D.st, &row, cr_wall_ms()));
    free(njs);
}

/* A change of state alone: the row's state, not the whole description
 * serialized and written again (node_record). 10,000 agents disconnecting at
 * once stalled the loop 6.6 s on re-serializing their descriptions. */
static void db_node_state(const node_t *n)
{
    db_check(cr_state_node_set_state(D.st, n->id, db_state(n->state), cr_wall_ms()));
}

node_t *node_by_id(const char *id)
{
    for (size_t i = 0; i < D.nodes.n; i++)
        if (strcmp(D.nodes.v[i]->id, id) == 0)
            return D.nodes.v[i];
    return NULL;
}

node_t *node_of(int sn)
{
    return sn >= 0 && (size_t)sn < D.nodes.n ? D.nodes.v[sn] : NULL;
}

static const char *desc_id(const cr_node_t *d)
{
    return d->id[0] ? d->id : d->hostname;
}

/* A node into the scheduler's view and the table (D.nodes[sn] is the
 * node of scheduler index sn). Takes desc. */
static node_t *node_new(cr_node_t *desc, char *why, size_t size)
{
    if (sched_cluster_add(D.cluster, desc, why, size) < 0)
        return NULL;
    int sn = sched_cluster_find_node(D.cluster, desc_id(desc));
    if (sn < 0 || (size_t)sn != D.nodes.n) {
        snprintf(why, size, "scheduler index %d for node %s, expected %zu", sn, desc_id(desc),
                 D.nodes.n);
        return NULL;
    }
    node_t *n = cr_calloc(1, sizeof(*n));
    n->id = cr_strdup(desc_id(desc));
    n->sn = sn;
    n->desc = desc;
    n->state = CORRAL__NODE_STATE__NODE_ALIVE;
    n->last_seen = cr_mono_ms();
    *CR_VEC_PUSH(&D.nodes) = n;
    return n;
}

node_t *node_add_local(cr_node_t *desc, char *why, size_t size)
{
    node_t *n = node_new(desc, why, size);
    if (!n)
        return NULL;
    n->local = true;
    n->incarnation = 1;
    n->address = cr_strdup("local");
    return n;
}

static void node_free(node_t *n)
{
    free(n->id);
    free(n->address);
    free(n->rfree);
    if (!n->local)
        hw_node_free(n->desc);
    free(n);
}

void nodes_free(void)
{
    telemetry_stop(); /* their readings and history (after head_web_stop: nothing left) */
    for (size_t i = 0; i < D.nodes.n; i++)
        node_free(D.nodes.v[i]);
    CR_VEC_FREE(&D.nodes);
    CR_VEC_FREE(&port_waits);
}

int node_send(node_t *n, Corral__Envelope *e)
{
    if (!n->conn)
        return -ENOTCONN;
    e->id = cr_conn_next_id(n->conn);
    int err = cr_conn_send(n->conn, e);
    if (err < 0)
        cr_warn("to node %s: %s", n->id, cr_strerror(err));
    return err;
}

const char *node_address(const node_t *n, node_t *const *peers, size_t npeers, char *buf,
                         size_t size)
{
    if (!n->local && n->address && n->address[0])
        return n->address;
    if (D.node_ip && D.node_ip[0])
        return D.node_ip;
    if (!sched_addr_is_local_only(D.listen))
        return D.listen;
    for (size_t i = 0; i < npeers; i++) {
        const node_t *o = peers[i];
        if (o && !o->local && o->conn && cr_conn_local_ip(o->conn, buf, size) == 0 &&
            !sched_addr_is_local_only(buf))
            return buf;
    }
    return "127.0.0.1";
}

void node_request_port(node_t *n, const char *key, node_port_fn done)
{
    if (n->local) {
        uint32_t p2, p = agent_free_port(&p2);
        done(key, p, p2, p ? NULL : strerror(errno));
        return;
    }
    Corral__PortRequest pr = CORRAL__PORT_REQUEST__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_PORT_REQUEST;
    e.port_request = &pr;
    if (node_send(n, &e) < 0) {
        done(key, 0, 0, "its agent is not connected");
        return;
    }
    port_wait_t *pw = CR_VEC_PUSH(&port_waits);
    pw->req = e.id;
    pw->node = n;
    snprintf(pw->key, sizeof(pw->key), "%s", key);
    pw->done = done;
}

static void port_answer(node_t *n, uint64_t reply_to, uint32_t port, uint32_t port2,
                        const char *why)
{
    for (size_t i = 0; i < port_waits.n; i++) {
        port_wait_t pw = port_waits.v[i];
        if (pw.node != n || (reply_to && pw.req != reply_to))
            continue;
        port_waits.v[i--] = port_waits.v[--port_waits.n];
        pw.done(pw.key, port, port2, why);
    }
}

/* ------------------------------------------------------------ membership */

static void reg_refuse(cr_conn_t *c, const Corral__Envelope *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reg_refuse(cr_conn_t *c, const Corral__Envelope *e, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cr_warn("registration from %s refused: %s", cr_conn_peer(c), msg);
    cr_conn_reply_error(c, e->id, code, "%s", msg);
    cr_conn_close(c, 0);
}

/* n is dead: its workers are lost, its share of every gang and group goes
 * back, its agent (if any) is let go. */
static void node_dead(node_t *n, const char *why)
{
    if (n->state == CORRAL__NODE_STATE__NODE_DEAD)
        return;
    n->state = CORRAL__NODE_STATE__NODE_DEAD;
    n->waiting = false;
    db_node_state(n);
    event_node("node_dead", n, "node %s declared dead: %s", n->id, why);
    uint64_t ids[1];
    sched_node_lost(D.cluster, n->sn, ids, 0);
    port_answer(n, 0, 0, 0, "its node died");
    char reason[192];
    snprintf(reason, sizeof(reason), "node %s died (%s)", n->id, why);
    if (D.watch.node_lost)
        D.watch.node_lost(n, reason);
    if (n->conn) {
        cr_conn_t *c = n->conn;
        n->conn = NULL;
        cr_conn_set_data(c, NULL);
        cr_conn_close(c, 0);
    }
    head_retry();
    maybe_finish_shutdown();
}

/* Register: the node, new, back or rejoining, answered with Registered;
 * *fresh when what its agent ran before is not the head's any more. NULL
 * when refused (the connection is closing). */
node_t *nodes_register(cr_conn_t *c, const Corral__Envelope *e, bool *fresh_out)
{
    const Corral__Register *r = e->register_;
    if (cr_conn_data(c)) {
        reg_refuse(c, e, CR_EINVAL, "this connection has registered already");
        return NULL;
    }
    json_error_t je;
    json_t *jn = json_loads(r->node_json, 0, &je);
    if (!jn) {
        reg_refuse(c, e, CR_EPARSE, "node_json is not JSON: %s (line %d)", je.text, je.line);
        return NULL;
    }
    cr_node_t *desc = hw_node_new();
    hw_json_error_t herr;
    int err = hw_node_from_json(jn, desc, &herr);
    json_decref(jn);
    if (err < 0) {
        reg_refuse(c, e, CR_ESCHEMA, "node_json at %s: %s", herr.path, herr.msg);
        hw_node_free(desc);
        return NULL;
    }
    const char *id = desc_id(desc);
    if (!id[0]) {
        reg_refuse(c, e, CR_EINVAL, "the node has neither an id nor a hostname");
        hw_node_free(desc);
        return NULL;
    }
    node_t *n = node_by_id(id);
    if (n && n->local) {
        reg_refuse(c, e, CR_EEXIST,
                   "node id %s is the head's own node; give the agent another id (--node-id or "
                   "the hardware spec's id)",
                   id);
        hw_node_free(desc);
        return NULL;
    }
    if (n && n->conn && n->conn != c && n->state != CORRAL__NODE_STATE__NODE_DEAD) {
        reg_refuse(c, e, CR_EEXIST,
                   "node id %s is already registered by the agent at %s; give each agent its "
                   "own id (--node-id or the hardware spec's id)",
                   id, cr_conn_peer(n->conn));
        hw_node_free(desc);
        return NULL;
    }
    char why[256];
    bool rejoin = false, fresh = false;
    if (!n) {
        n = node_new(desc, why, sizeof(why));
        if (!n) {
            reg_refuse(c, e, CR_EINVAL, "node %s cannot be scheduled: %s", id, why);
            hw_node_free(desc);
            return NULL;
        }
        fresh = true;
    } else if (n->waiting && n->incarnation == r->incarnation) {
        hw_node_free(desc); /* the same agent, back after a head restart */
    } else if (n->state != CORRAL__NODE_STATE__NODE_DEAD && n->incarnation == r->incarnation) {
        hw_node_free(desc); /* the same agent, reconnecting */
    } else {
        /* a new incarnation: whatever the old one ran is gone. The node is
         * dead to the scheduler until restored below, and a job that only
         * it could take must not be refused for that moment: what runs
         * while it is dead (a job ending, a gang queued again) tries the
         * queue; the register's head_retry tries it again after */
        D.rejoining = true;
        if (n->state != CORRAL__NODE_STATE__NODE_DEAD)
            node_dead(n, "its agent restarted (new incarnation)");
        D.sched_freed++;
        if (sched_cluster_replace(D.cluster, n->sn, desc, why, sizeof(why)) < 0) {
            D.rejoining = false;
            reg_refuse(c, e, CR_EINVAL, "node %s cannot rejoin: %s", id, why);
            head_retry(); /* what waited for it is told now */
            hw_node_free(desc);
            return NULL;
        }
        hw_node_free(n->desc);
        n->desc = desc;
        n->slim = false; /* whole again until it is written */
        sched_node_restore(D.cluster, n->sn);
        D.sched_freed++;
        D.rejoining = false;
        rejoin = true;
    }
    bool was_waiting = n->waiting;
    n->incarnation = r->incarnation;
    free(n->address);
    /* an agent without --node-ip says 127.0.0.1: where its connection came
     * from is what the other nodes can reach, unless that is loopback too */
    char peer[64];
    const char *adv = r->address && r->address[0] ? r->address : "127.0.0.1";
    if (sched_addr_is_local_only(adv) && cr_conn_peer_ip(c, peer, sizeof(peer)) == 0 &&
        !sched_addr_is_local_only(peer))
        adv = peer;
    n->address = cr_strdup(adv);
    n->conn = c;
    sched_node_cordon(D.cluster, n->sn, false);
    n->state = CORRAL__NODE_STATE__NODE_ALIVE;
    n->waiting = false;
    free(n->rfree); /* until its first beat on this connection */
    n->rfree = NULL;
    n->nrfree = 0;
    n->drift_beats = 0;
    n->last_seen = cr_mono_ms();
    cr_conn_set_data(c, n);
    node_record(n);

    Corral__Registered ok = CORRAL__REGISTERED__INIT;
    ok.node_id = n->id;
    ok.incarnation = n->incarnation;
    ok.heartbeat_ms = D.heartbeat_ms;
    ok.suspect_after_ms = D.suspect_ms;
    ok.dead_after_ms = D.dead_ms;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_REGISTERED;
    a.registered = &ok;
    reply(c, e, &a);
    node_slim(n);
    event_node(fresh    ? "node_joined"
               : rejoin ? "node_rejoined"
                        : "node_reconnected",
               n, "node %s (incarnation %llu) at %s: %u device(s)%s%s", n->id,
               (unsigned long long)n->incarnation, n->address, n->ndev,
               n->desc->simulated ? ", simulated" : "",
               was_waiting ? ", back after a head restart" : "");
    *fresh_out = rejoin || fresh;
    return n;
}

int64_t node_seen_wall(const node_t *n)
{
    return cr_wall_ms() - (cr_mono_ms() - n->last_seen);
}

node_t *node_of_agent(cr_conn_t *c, const Corral__Envelope *e)
{
    node_t *n = cr_conn_data(c);
    if (!n) {
        cr_conn_reply_error(c, e->id, CR_EINVAL, "%s before Register: register first",
                            cr_msg_name(e->body_case));
        return NULL;
    }
    n->last_seen = cr_mono_ms();
    if (n->state == CORRAL__NODE_STATE__NODE_SUSPECT) {
        n->state = CORRAL__NODE_STATE__NODE_ALIVE;
        db_node_state(n);
        event_node("node_alive", n, "node %s is alive again", n->id);
    }
    return n;
}

/* Beats in a row an agent may report less free than the head counts
 * before it is an event: a start or a stop in flight is one or two. */
#define DRIFT_BEATS 3

/* What the agent counts free, kept for `corral nodes`. */
static void note_free(node_t *n, Corral__Quantity *const *q, size_t nq)
{
    if (nq > 64)
        nq = 64;
    if (nq != n->nrfree) {
        free(n->rfree);
        n->rfree = nq ? cr_calloc(nq, sizeof(*n->rfree)) : NULL;
        n->nrfree = (uint8_t)nq;
    }
    const sched_cluster_t *c = D.cluster;
    for (size_t i = 0; i < nq; i++) {
        int rid = sched_syms_find(&c->res, q[i]->name, strlen(q[i]->name));
        n->rfree[i].rid = rid < c->nres ? rid : -1;
        n->rfree[i].amount = q[i]->amount;
    }
}

/* What the agent counts free held against what the head counts, each
 * beat: an agent that sees less free than the head does, beat after
 * beat, runs something the head does not know. */
static void check_drift(node_t *n)
{
    sched_cluster_t *c = D.cluster;
    sched_cluster_sync(c);
    bool less = false;
    for (size_t i = 0; i < n->nrfree && !less; i++)
        less = n->rfree[i].rid >= 0 && (size_t)n->sn < c->nnodes &&
               n->rfree[i].amount < c->avail[(size_t)n->rfree[i].rid * c->nnodes + (size_t)n->sn];
    if (!less) {
        if (n->drift_beats == DRIFT_BEATS)
            event_node("node_drift_cleared", n, "node %s: its agent and the head agree again",
                       n->id);
        n->drift_beats = 0;
        return;
    }
    if (n->drift_beats >= DRIFT_BEATS || ++n->drift_beats < DRIFT_BEATS)
        return;
    char what[200] = "";
    size_t at = 0;
    for (size_t i = 0; i < n->nrfree && at < sizeof(what); i++) {
        int rid = n->rfree[i].rid;
        if (rid < 0)
            continue;
        int64_t head = c->avail[(size_t)rid * c->nnodes + (size_t)n->sn];
        if (n->rfree[i].amount < head)
            at += (size_t)snprintf(what + at, sizeof(what) - at, "%s%s %g < %g", at ? ", " : "",
                                   c->res.str[rid], (double)n->rfree[i].amount / CR_QTY_ONE,
                                   (double)head / CR_QTY_ONE);
    }
    event_node("node_drift", n,
               "node %s: its agent counts less free than the head (%s) for %d beats; something "
               "the head did not place holds resources there",
               n->id, what, DRIFT_BEATS);
}

/* A beat: the free resources it carries (its worker changes are
 * workers.c's), the drift check, the HeartbeatAck. A beat that carries
 * nothing new (free_same, no changes) touches nothing but the node's
 * last-seen time (node_of_agent, issue 18): the drift check is skipped
 * while it found none last time and the head has given nothing back
 * since (only a release can make the head count more free than the
 * agent), and it gets no ack, which would acknowledge nothing (the agent
 * waits for acks only of the changes and free resources it sent). */
void nodes_heartbeat(cr_conn_t *c, const Corral__Envelope *e, node_t *n)
{
    const Corral__Heartbeat *hb = e->heartbeat;
    head_counters.heartbeats++;
    telemetry_heartbeat(n, hb); /* telemetry.c: needs no ack */
    bool news = !hb->free_same || hb->n_changes > 0;
    if (!hb->free_same)
        note_free(n, hb->free, hb->n_free);
    if (news || n->drift_beats || n->drift_freed != D.sched_freed) {
        n->drift_freed = D.sched_freed;
        check_drift(n);
    }
    if (!news)
        return;
    Corral__HeartbeatAck ack = CORRAL__HEARTBEAT_ACK__INIT;
    ack.seq = hb->seq;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT_ACK;
    a.heartbeat_ack = &ack;
    reply(c, e, &a);
}

/* PortReply, or an Error an agent answered a PortRequest with. */
void nodes_port_reply(node_t *n, const Corral__Envelope *e)
{
    if (e->body_case == CORRAL__ENVELOPE__BODY_PORT_REPLY) {
        port_answer(n, e->reply_to, e->port_reply->port, e->port_reply->port2,
                    "the agent found no free port");
        return;
    }
    cr_warn("node %s: %s", n->id, e->error->message);
    if (e->reply_to)
        port_answer(n, e->reply_to, 0, 0, e->error->message);
}

void nodes_conn_closed(cr_conn_t *c)
{
    node_t *n = cr_conn_data(c);
    if (!n || n->conn != c)
        return;
    n->conn = NULL;
    /* nothing new goes where nothing can be sent (what it holds stays) */
    sched_node_cordon(D.cluster, n->sn, true);
    port_answer(n, 0, 0, 0, "its agent disconnected");
    if (D.watch.node_disconnected)
        D.watch.node_disconnected(n);
    if (n->state == CORRAL__NODE_STATE__NODE_ALIVE && !D.shutting_down) {
        n->state = CORRAL__NODE_STATE__NODE_SUSPECT;
        db_node_state(n);
        event_node("node_suspect", n, "node %s: its agent disconnected", n->id);
    }
}

/* The head's own stall (Lifeguard's local health awareness, as Serf does
 * it): a tick that comes far later than its period means the head itself
 * was paused (SIGSTOP, a stopped VM, a swap storm) or starved, and heard
 * nothing meanwhile; the heartbeats its agents sent wait unread in its
 * sockets. Judging them by the silence would declare healthy nodes dead,
 * so every node gets a fresh grace period instead, from now. */
static void stall_check(int64_t now)
{
    int64_t last = D.last_tick_ms, limit = D.heartbeat_ms > 500 ? D.heartbeat_ms : 500;
    D.last_tick_ms = now;
    if (!last || now - last <= limit)
        return;
    size_t k = 0;
    for (size_t i = 0; i < D.nodes.n; i++) {
        node_t *n = D.nodes.v[i];
        if (n->local || n->state == CORRAL__NODE_STATE__NODE_DEAD)
            continue;
        n->last_seen = now;
        k++;
    }
    cr_warn("the head's loop stalled for %lld ms (was it paused or starved?): %zu node(s) get a "
            "fresh grace period before they are judged",
            (long long)(now - last), k);
    head_event("head_stalled",
               "the head's loop stalled for %lld ms: %zu node(s) get a fresh grace period of "
               "%u ms before they are judged",
               (long long)(now - last), k, D.dead_ms);
}

/* Nodes judged per tick: all of a small cluster; a fifth of a large one
 * (each node once per five ticks, at most 500 ms at the 100 ms tick),
 * so that a tick at 100,000 nodes does not walk them all ten times a
 * second (issue 18). A node is seen SUSPECT or DEAD at most that much
 * later. */
#define SCAN_ALL_BELOW 2000
static size_t scan_at;

void nodes_tick(void)
{
    int64_t now = cr_mono_ms();
    stall_check(now);
    size_t total = D.nodes.n, count = total;
    if (total >= SCAN_ALL_BELOW)
        count = total / 5 + 1;
    if (scan_at >= total)
        scan_at = 0;
    for (size_t k = 0; k < count; k++) {
        size_t i = count == total ? k : (scan_at + k) % total;
        node_t *n = D.nodes.v[i];
        if (n->local || n->state == CORRAL__NODE_STATE__NODE_DEAD)
            continue;
        int64_t age = now - n->last_seen;
        /* after a head restart its agent is retrying with backoff (at most
         * 5 s between tries): it gets that long on top */
        if (age > (int64_t)D.dead_ms + (n->waiting ? 6000 : 0)) {
            char why[96];
            snprintf(why, sizeof(why), "no word from its agent for %lld ms%s", (long long)age,
                     n->waiting ? " after a head restart" : "");
            node_dead(n, why);
        } else if (age > (int64_t)D.suspect_ms && n->state == CORRAL__NODE_STATE__NODE_ALIVE) {
            n->state = CORRAL__NODE_STATE__NODE_SUSPECT;
            db_node_state(n);
            event_node("node_suspect", n, "node %s: no heartbeat for %lld ms", n->id,
                       (long long)age);
        }
    }
    scan_at = count == total ? 0 : (scan_at + count) % total;
}

/* After a head restart: the nodes state.db knows, waiting for their
 * agents (dead ones stay dead); the local node is already there. */
void nodes_recover(void)
{
    cr_state_node_t *v = NULL;
    size_t n = 0;
    if (cr_state_node_list(D.st, &v, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (node_by_id(v[i].id) || !v[i].desc_json)
            continue;
        json_t *jn = json_loads(v[i].desc_json, 0, NULL);
        cr_node_t *desc = hw_node_new();
        hw_json_error_t herr;
        char why[256];
        node_t *nd = NULL;
        if (jn && hw_node_from_json(jn, desc, &herr) == 0)
            nd = node_new(desc, why, sizeof(why));
        json_decref(jn);
        if (!nd) {
            hw_node_free(desc);
            cr_warn("state: node %s cannot be read back", v[i].id);
            continue;
        }
        nd->incarnation = (uint64_t)v[i].incarnation;
        node_slim(nd);
        nd->address = cr_strdup(v[i].address ? v[i].address : "");
        if (v[i].state == CR_NODE_DEAD) {
            nd->state = CORRAL__NODE_STATE__NODE_DEAD;
            sched_node_lost(D.cluster, nd->sn, NULL, 0);
        } else {
            nd->state = CORRAL__NODE_STATE__NODE_SUSPECT;
            nd->waiting = true;
            sched_node_cordon(D.cluster, nd->sn, true); /* until its agent is back */
            event_node("node_waiting", nd, "node %s: waiting for its agent after a head restart",
                       nd->id);
        }
    }
    cr_state_node_list_free(v, n);
}

/* ------------------------------------------------------------ NodeInfo */

typedef struct node_mem {
    Corral__Quantity *q;
    Corral__Quantity **tot, **fr;
    Corral__KeyValue *kv;
    Corral__KeyValue **kvp;
    Corral__Quantity *rq, **rfp;
    char *json;
} node_mem_t;

void node_fill(const node_t *n, Corral__NodeInfo *ni, void **memp, bool with_json)
{
    corral__node_info__init(ni);
    node_mem_t *m = cr_calloc(1, sizeof(*m));
    *memp = m;
    const sched_cluster_t *c = D.cluster;
    size_t nres = (size_t)c->nres;
    m->q = cr_calloc(2 * nres + 1, sizeof(*m->q));
    m->tot = cr_calloc(nres + 1, sizeof(*m->tot));
    m->fr = cr_calloc(nres + 1, sizeof(*m->fr));
    size_t k = 0;
    bool dead = n->state == CORRAL__NODE_STATE__NODE_DEAD;
    for (size_t r = 0; r < nres; r++) {
        int64_t total = c->total[r * c->nnodes + (size_t)n->sn];
        if (total <= 0)
            continue;
        Corral__Quantity *t = &m->q[2 * k], *f = &m->q[2 * k + 1];
        corral__quantity__init(t);
        corral__quantity__init(f);
        t->name = f->name = c->res.str[r];
        t->amount = total;
        f->amount = dead ? 0 : c->avail[r * c->nnodes + (size_t)n->sn];
        m->tot[k] = t;
        m->fr[k] = f;
        k++;
    }
    ni->total = m->tot;
    ni->n_total = k;
    ni->free = m->fr;
    ni->n_free = k;
    m->rq = cr_calloc(n->nrfree + 1u, sizeof(*m->rq));
    m->rfp = cr_calloc(n->nrfree + 1u, sizeof(*m->rfp));
    size_t nr = 0;
    for (size_t i = 0; i < n->nrfree && !dead; i++) {
        if (n->rfree[i].rid < 0)
            continue;
        corral__quantity__init(&m->rq[nr]);
        m->rq[nr].name = c->res.str[n->rfree[i].rid];
        m->rq[nr].amount = n->rfree[i].amount;
        m->rfp[nr] = &m->rq[nr];
        nr++;
    }
    ni->reported_free = m->rfp;
    ni->n_reported_free = nr;
    const cr_node_t *d = n->desc;
    m->kv = cr_calloc(d->labels.n + 1, sizeof(*m->kv));
    m->kvp = cr_calloc(d->labels.n + 1, sizeof(*m->kvp));
    for (size_t i = 0; i < d->labels.n; i++) {
        corral__key_value__init(&m->kv[i]);
        m->kv[i].key = d->labels.v[i].key;
        m->kv[i].value = d->labels.v[i].value;
        m->kvp[i] = &m->kv[i];
    }
    ni->labels = m->kvp;
    ni->n_labels = d->labels.n;
    ni->node_id = n->id;
    ni->state = n->state;
    ni->incarnation = n->local ? (uint64_t)cr_state_generation(D.st) : n->incarnation;
    ni->address = n->local ? (D.address ? D.address : "") : n->address;
    ni->last_seen_ms = n->local ? cr_wall_ms() : node_seen_wall(n);
    if (with_json && n->slim) { /* the whole description is in state.db */
        cr_state_node_t row;
        if (cr_state_node_get(D.st, n->id, &row) == 0) {
            m->json = row.desc_json ? cr_strdup(row.desc_json) : NULL;
            cr_state_node_free(&row);
        }
        ni->node_json = m->json;
    } else if (with_json) {
        json_t *jn = hw_node_to_json(d);
        m->json = json_dumps(jn, JSON_COMPACT);
        json_decref(jn);
        ni->node_json = m->json;
    }
}

void node_fill_free(Corral__NodeInfo *ni, void *mem)
{
    node_mem_t *m = mem;
    free(m->q);
    free(m->tot);
    free(m->fr);
    free(m->kv);
    free(m->kvp);
    free(m->rq);
    free(m->rfp);
    free(m->json);
    free(m);
}

/* Every node as a NodeInfo, for NodeList and ClusterStatus. */
typedef struct status_mem {
    Corral__NodeInfo *ni, **nip;
    void **mem;
    size_t n;
    Corral__Quantity *q, **tot, **fr;
} status_mem_t;

static status_mem_t *fill_all(bool with_json)
{
    sched_cluster_sync(D.cluster);
    status_mem_t *m = cr_calloc(1, sizeof(*m));
    m->n = D.nodes.n;
    m->ni = cr_calloc(m->n + 1, sizeof(*m->ni));
    m->nip = cr_calloc(m->n + 1, sizeof(*m->nip));
    m->mem = cr_calloc(m->n + 1, sizeof(*m->mem));
    for (size_t i = 0; i < m->n; i++) {
        node_fill(D.nodes.v[i], &m->ni[i], &m->mem[i], with_json);
        m->nip[i] = &m->ni[i];
    }
    return m;
}

static void fill_all_free(status_mem_t *m)
{
    for (size_t i = 0; i < m->n; i++)
        node_fill_free(&m->ni[i], m->mem[i]);
    free(m->q);
    free(m->tot);
    free(m->fr);
    free(m->mem);
    free(m->nip);
    free(m->ni);
    free(m);
}

static int by_node_id(const void *a, const void *b)
{
    return strcmp((*(Corral__NodeInfo *const *)a)->node_id,
                  (*(Corral__NodeInfo *const *)b)->node_id);
}

/* One page (head/page.c), in node id order from the token's id on. */
void req_node_list(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__NodeList *q = e->node_list;
    char msg[256], from[512], token[600] = "";
    int err = page_parse(q->continue_token, "nodes", from, sizeof(from), msg, sizeof(msg));
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "%s", msg);
        return;
    }
    status_mem_t *m = fill_all(q->with_json);
    qsort(m->nip, m->n, sizeof(*m->nip), by_node_id);
    size_t i = 0, k = 0, budget = page_budget(), used = 0, cap = page_items(q->limit);
    while (i < m->n && strcmp(m->nip[i]->node_id, from) < 0)
        i++;
    Corral__NodeInfo **page = m->nip + i;
    for (; i < m->n && k < cap; i++, k++) {
        size_t cost = page_item_cost(corral__node_info__get_packed_size(m->nip[i]));
        if (used + cost > budget)
            break;
        used += cost;
    }
    if (k == 0 && i < m->n) {
        cr_conn_reply_error(c, e->id, CR_E2BIG,
                            "node %s's record alone is larger than the frame limit",
                            m->nip[i]->node_id);
        goto out;
    }
    if (i < m->n)
        page_token("nodes", m->nip[i]->node_id, token, sizeof(token));
    Corral__NodeListReply r = CORRAL__NODE_LIST_REPLY__INIT;
    r.nodes = page;
    r.n_nodes = k;
    r.continue_token = token;
    r.remaining = (uint32_t)(m->n - i);
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_NODE_LIST_REPLY;
    a.node_list_reply = &r;
    reply(c, e, &a);
out:
    fill_all_free(m);
}

static void status_totals(status_mem_t *m, Corral__ClusterStatus *s, void **memp);

void nodes_status(Corral__ClusterStatus *s, void **memp)
{
    status_totals(fill_all(false), s, memp);
}

void nodes_totals(Corral__ClusterStatus *s, void **memp)
{
    sched_cluster_sync(D.cluster);
    status_totals(cr_calloc(1, sizeof(status_mem_t)), s, memp);
}

/* The cluster's totals over its alive nodes into s (m's nodes, if any, as
 * s->nodes); s's memory is m, into *memp. */
static void status_totals(status_mem_t *m, Corral__ClusterStatus *s, void **memp)
{
    size_t n = D.nodes.n;
    /* cluster totals over alive nodes */
    const sched_cluster_t *cl = D.cluster;
    size_t nres = (size_t)cl->nres;
    m->q = cr_calloc(2 * nres + 1, sizeof(*m->q));
    m->tot = cr_calloc(nres + 1, sizeof(*m->tot));
    m->fr = cr_calloc(nres + 1, sizeof(*m->fr));
    size_t k = 0;
    for (size_t r = 0; r < nres; r++) {
        int64_t t = 0, f = 0;
        for (size_t x = 0; x < n; x++) {
            const node_t *nd = D.nodes.v[x];
            if (nd->state == CORRAL__NODE_STATE__NODE_DEAD || nd->waiting)
                continue;
            t += cl->total[r * cl->nnodes + (size_t)nd->sn];
            f += cl->avail[r * cl->nnodes + (size_t)nd->sn];
        }
        if (t <= 0)
            continue;
        corral__quantity__init(&m->q[2 * k]);
        corral__quantity__init(&m->q[2 * k + 1]);
        m->q[2 * k].name = m->q[2 * k + 1].name = cl->res.str[r];
        m->q[2 * k].amount = t;
        m->q[2 * k + 1].amount = f;
        m->tot[k] = &m->q[2 * k];
        m->fr[k] = &m->q[2 * k + 1];
        k++;
    }
    s->nodes = m->nip;
    s->n_nodes = m->n;
    s->total = m->tot;
    s->n_total = k;
    s->free = m->fr;
    s->n_free = k;
    *memp = m;
}

void nodes_status_free(Corral__ClusterStatus *s, void *mem)
{
    fill_all_free(mem);
}
