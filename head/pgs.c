/* Placement groups (docs/runtime.md "Placement groups", docs/cluster.md):
 * bundles reserved by the scheduler, then, where bundles land on nodes of
 * other agents, in two phases: Prepare on every such agent, Commit once
 * all said yes, Abort everywhere on any refusal, timeout or lost agent (the
 * group then waits and is tried again). A job runs in a group's bundles,
 * one worker per bundle. */
#include "head/head.h"
#include <jansson.h>
#include <stdio.h>

#define TXN_TIMEOUT_MS 5000
#define LEASE_MS 10000
#define RETRY_MS 500

struct pg {
    int64_t id;
    char idstr[24];
    char *name;
    Corral__PgCreate *spec; /* a copy */
    Corral__PgState state;
    char *reason;
    int nb;
    sched_bundle_t *bundles;
    uint64_t placement;
    node_t **bnode;
    int (*bdevs)[MAX_DEVS];
    size_t *bndevs;
    char (*bjob)[24]; /* the job using each bundle, "" none */
    /* the two-phase reservation under way */
    char txn[48];
    uint32_t txn_seq;
    node_t **txn_nodes;
    size_t ntxn, votes;
    int64_t txn_deadline, retry_at;
    CR_VEC(struct waiter {
        cr_conn_t *c;
        uint64_t req;
    })
    waiters;
    cr_conn_t *owner; /* spec->bound: removed when this connection closes */
    bool tied;        /* in tied: an owner or waiters */
    /* pending: its entry in the queue ("the pending groups" below) */
    bool queued;
    shape_t *shape;
    uint64_t reason_seq; /* when reason was set, against its shape's */
};

/* The groups created in this turn, recorded in its open transaction and
 * not yet committed (pgs_committed). */
static CR_VEC(pg_t *) fresh;

static const char *state_name(Corral__PgState s)
{
    switch (s) {
    case CORRAL__PG_STATE__PG_PENDING:
        return "PENDING";
    case CORRAL__PG_STATE__PG_PREPARING:
        return "PREPARING";
    case CORRAL__PG_STATE__PG_CREATED:
        return "CREATED";
    case CORRAL__PG_STATE__PG_REMOVED:
        return "REMOVED";
    default:
        return "INFEASIBLE";
    }
}

static cr_pg_state_t db_state(Corral__PgState s)
{
    return s == CORRAL__PG_STATE__PG_CREATED     ? CR_PG_CREATED
           : s == CORRAL__PG_STATE__PG_PREPARING ? CR_PG_PREPARED
           : s == CORRAL__PG_STATE__PG_REMOVED   ? CR_PG_REMOVED
                                                 : CR_PG_PENDING;
}

pg_t *pg_find(const char *key)
{
    for (size_t i = 0; i < D.pgs.n; i++) {
        pg_t *g = D.pgs.v[i];
        if (g->state == CORRAL__PG_STATE__PG_REMOVED)
            continue;
        if (strcmp(g->idstr, key) == 0 || (g->name && strcmp(g->name, key) == 0))
            return g;
    }
    return NULL;
}

const Corral__Bundle *pg_bundle_spec(const pg_t *g, int b)
{
    return b >= 0 && (size_t)b < g->spec->n_bundles ? g->spec->bundles[b] : NULL;
}

int pg_nbundles(const pg_t *g)
{
    return g->nb;
}

bool pg_created(const pg_t *g)
{
    return g->state == CORRAL__PG_STATE__PG_CREATED;
}

const char *pg_name(const pg_t *g)
{
    return g->name ? g->name : g->idstr;
}

bool pg_bundle_take(pg_t *g, int b, const char *holder, node_t **node, int *devs, size_t *ndevs,
                    char *why, size_t size)
{
    if (g->state != CORRAL__PG_STATE__PG_CREATED) {
        snprintf(why, size, "placement group %s is %s", pg_name(g), state_name(g->state));
        return false;
    }
    if (b < 0 || b >= g->nb) {
        snprintf(why, size, "placement group %s has no bundle %d", pg_name(g), b);
        return false;
    }
    if (g->bjob[b][0] && strcmp(g->bjob[b], holder) != 0) {
        snprintf(why, size, "bundle %d of %s is used by job %s", b, pg_name(g), g->bjob[b]);
        return false;
    }
    snprintf(g->bjob[b], sizeof(g->bjob[b]), "%s", holder);
    *node = g->bnode[b];
    *ndevs = g->bndevs[b];
    memcpy(devs, g->bdevs[b], g->bndevs[b] * sizeof(int));
    return true;
}

void pg_bundle_give(pg_t *g, int b, const char *holder)
{
    if (b >= 0 && b < g->nb && strcmp(g->bjob[b], holder) == 0)
        g->bjob[b][0] = '\0';
}

int64_t pg_id(const pg_t *g)
{
    return g->id;
}

/* ------------------------------------------------------------------ info */

typedef struct info_mem {
    Corral__BundlePlacement *bp;
    Corral__BundlePlacement **bpp;
    uint32_t *devs;
} info_mem_t;

static bool is_pending(const pg_t *g)
{
    return g->state == CORRAL__PG_STATE__PG_PENDING;
}

/* ------------------------------------------------- the pending groups */

/* The pending groups in id order, the order a pass tries them (and D.pgs
 * keeps them), each entry with the group's shape (head.h): a pass skips
 * the later groups of a shape refused in it without reading them (10,000
 * pending groups cost each run 0.3 ms of the head in reads of every group
 * and a copy of the new reason into each). A group enters when it becomes
 * PENDING (set_state) and leaves when it stops being pending or goes; in
 * a pass, leaving makes a hole the pass removes at its end. */
typedef struct pg_wait {
    pg_t *g; /* NULL: a hole */
    shape_t *shape;
    int64_t id;
    int64_t retry_at; /* g's, not tried before (a rolled-back reservation) */
} pg_wait_t;

static CR_VEC(pg_wait_t) waiting;
static shapes_t shapes;
static uint64_t pass_gen;
static pass_t pass;
static size_t holes;

/* The first entry whose id is not below id (waiting.n when none). */
static size_t wait_find(int64_t id)
{
    size_t lo = 0, hi = waiting.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (waiting.v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void wait_enter(pg_t *g)
{
    size_t i = wait_find(g->id);
    if (i < waiting.n && waiting.v[i].id == g->id) {
        holes--; /* it left in this pass and is back: its hole again */
    } else {
        CR_VEC_PUSH(&waiting);
        memmove(&waiting.v[i + 1], &waiting.v[i], (waiting.n - 1 - i) * sizeof(waiting.v[0]));
    }
    g->shape = shape_get(&shapes, g->spec->strategy, g->spec->domain, g->nb, g->bundles);
    waiting.v[i] = (pg_wait_t){.g = g, .shape = g->shape, .id = g->id, .retry_at = g->retry_at};
    g->queued = true;
}

static void wait_leave(pg_t *g)
{
    size_t i = wait_find(g->id);
    if (i < waiting.n && waiting.v[i].g == g) {
        if (pass.in) {
            waiting.v[i].g = NULL;
            waiting.v[i].shape = NULL;
            holes++;
        } else {
            memmove(&waiting.v[i], &waiting.v[i + 1], (waiting.n - i - 1) * sizeof(waiting.v[0]));
            waiting.n--;
        }
    }
    shape_put(&shapes, g->shape);
    g->shape = NULL;
    g->queued = false;
}

/* Groups PREPARING (set_state, pg_free): with the queue's length, what a
 * status counts without a walk of every group. */
static size_t npreparing;

size_t pgs_pending(void)
{
    return waiting.n - holes + npreparing;
}

/* What g waits for: its shape's reason when that is newer than its own. */
static const char *pg_reason(const pg_t *g)
{
    if (g->shape && g->shape->why_seq > g->reason_seq)
        return g->shape->why;
    return g->reason;
}

/* g's place among the pending groups, in the order pgs_try_pending tries
 * them (1 first), 0 when it is not pending. */
static uint32_t queue_position(const pg_t *g)
{
    if (!g->queued)
        return 0;
    size_t i = wait_find(g->id), pos = i + 1;
    for (size_t k = 0; holes && k < i; k++)
        pos -= !waiting.v[k].g;
    return (uint32_t)pos;
}

/* qpos: g's queue_position (counted by the caller, which may list many) */
static void info_fill(const pg_t *g, Corral__PgInfo *info, info_mem_t *m, uint32_t qpos)
{
    corral__pg_info__init(info);
    info->queue_position = qpos;
    info->pg_id = (char *)g->idstr;
    info->name = g->name ? g->name : "";
    info->state = g->state;
    info->reason = (char *)(pg_reason(g) ? pg_reason(g) : "");
    info->strategy = g->spec->strategy;
    info->domain = g->spec->domain;
    info->bundles = g->spec->bundles;
    info->n_bundles = g->spec->n_bundles;
    m->bp = cr_calloc((size_t)g->nb + 1, sizeof(*m->bp));
    m->bpp = cr_calloc((size_t)g->nb + 1, sizeof(*m->bpp));
    m->devs = cr_calloc((size_t)g->nb * MAX_DEVS + 1, sizeof(*m->devs));
    size_t k = 0;
    if (g->state == CORRAL__PG_STATE__PG_CREATED || g->state == CORRAL__PG_STATE__PG_PREPARING)
        for (int b = 0; b < g->nb; b++) {
            if (!g->bnode[b])
                continue;
            Corral__BundlePlacement *p = &m->bp[k];
            corral__bundle_placement__init(p);
            p->bundle_index = (uint32_t)b;
            p->node_id = g->bnode[b]->id;
            p->devices = &m->devs[(size_t)b * MAX_DEVS];
            for (size_t d = 0; d < g->bndevs[b]; d++)
                p->devices[d] = (uint32_t)g->bdevs[b][d];
            p->n_devices = g->bndevs[b];
            m->bpp[k++] = p;
        }
    info->placements = m->bpp;
    info->n_placements = k;
}

static void info_fini(info_mem_t *m)
{
    free(m->bp);
    free(m->bpp);
    free(m->devs);
}

static void answer(cr_conn_t *c, uint64_t req, const pg_t *g)
{
    Corral__PgInfo info;
    info_mem_t m;
    info_fill(g, &info, &m, queue_position(g));
    Corral__PgCreated r = CORRAL__PG_CREATED__INIT;
    r.pg = &info;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_PG_CREATED;
    a.pg_created = &r;
    a.reply_to = req;
    if (cr_conn_send(c, &a) < 0)
        cr_warn("placement group %s: the answer to %s was not sent", pg_name(g), cr_conn_peer(c));
    info_fini(&m);
}

static void answer_waiters(pg_t *g, int err, const char *why)
{
    for (size_t i = 0; i < g->waiters.n; i++) {
        if (err)
            cr_conn_reply_error(g->waiters.v[i].c, g->waiters.v[i].req, err, "%s", why);
        else
            answer(g->waiters.v[i].c, g->waiters.v[i].req, g);
    }
    g->waiters.n = 0;
}

static void pg_remove(pg_t *g, const char *why);

/* The groups tied to a client's connection (an owner, or a waiter for the
 * creation): a connection's close looks through these, not through every
 * group (10,000 pending ones cost every `corral run` 0.17 ms). A group
 * tied no more leaves at the next close. */
static CR_VEC(pg_t *) tied;

static void tie(pg_t *g)
{
    if (!g->tied)
        *CR_VEC_PUSH(&tied) = g;
    g->tied = true;
}

static void untie(size_t i)
{
    tied.v[i]->tied = false;
    tied.v[i] = tied.v[--tied.n];
}

static int by_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The group of that id, NULL when there is none (D.pgs is in id order). */
static pg_t *pg_by_id(int64_t id)
{
    size_t lo = 0, hi = D.pgs.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (D.pgs.v[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < D.pgs.n && D.pgs.v[lo]->id == id ? D.pgs.v[lo] : NULL;
}

void pgs_client_gone(cr_conn_t *c)
{
    CR_VEC(int64_t) gone = {0}; /* ids: a removal may take another group with it */
    for (size_t i = 0; i < tied.n;) {
        pg_t *g = tied.v[i];
        size_t keep = 0;
        for (size_t k = 0; k < g->waiters.n; k++)
            if (g->waiters.v[k].c != c)
                g->waiters.v[keep++] = g->waiters.v[k];
        g->waiters.n = keep;
        if (g->owner == c) {
            g->owner = NULL;
            /* the one who waited on it is gone: nobody would use it */
            if (g->spec->bound == CORRAL__PG_BOUND__BOUND_ALWAYS ||
                g->state != CORRAL__PG_STATE__PG_CREATED)
                *CR_VEC_PUSH(&gone) = g->id;
        }
        if (!g->owner && !g->waiters.n)
            untie(i);
        else
            i++;
    }
    if (gone.n > 1)
        qsort(gone.v, gone.n, sizeof(gone.v[0]), by_id); /* in the order they were made */
    for (size_t i = 0; i < gone.n; i++) {
        pg_t *g = pg_by_id(gone.v[i]);
        if (g)
            pg_remove(g, "removed: the client that created it and waited on it is gone");
    }
    if (gone.n)
        head_retry();
    CR_VEC_FREE(&gone);
}

void pgs_holders(holders_t *h)
{
    uint32_t qpos = 0, listed = 0;
    for (size_t i = 0; i < D.pgs.n; i++) {
        const pg_t *g = D.pgs.v[i];
        if (g->state != CORRAL__PG_STATE__PG_PENDING &&
            g->state != CORRAL__PG_STATE__PG_PREPARING && g->state != CORRAL__PG_STATE__PG_CREATED)
            continue;
        qpos += is_pending(g);
        if (listed >= HOLDERS_EACH) {
            h->not_listed += (uint32_t)(D.pgs.n - i); /* D.pgs holds no other state */
            break;
        }
        listed++;
        Corral__Holder *o = holder_new(h, "group", g->idstr, pg_name(g), state_name(g->state),
                                       is_pending(g) ? pg_reason(g) : "");
        o->queue_position = is_pending(g) ? qpos : 0;
        for (int b = 0; b < g->nb; b++) {
            bool first = g->bjob[b][0] != '\0';
            for (int k = 0; k < b && first; k++)
                first = strcmp(g->bjob[k], g->bjob[b]) != 0;
            o->jobs += first; /* each job once, however many bundles it uses */
        }
        cr_buf_t held = {0};
        if (g->placement)
            bundles_held(g->bundles, g->nb, &held);
        if (held.s) {
            free(o->held);
            o->held = held.s;
        }
    }
}

/* ----------------------------------------------------------------- state */

static void set_reason(pg_t *g, const char *reason)
{
    char *copy = reason ? cr_strdup(reason) : NULL;
    free(g->reason);
    g->reason = copy;
    g->reason_seq = reason_seq_next();
}

static void set_state(pg_t *g, Corral__PgState s, const char *reason)
{
    npreparing +=
        (s == CORRAL__PG_STATE__PG_PREPARING) - (g->state == CORRAL__PG_STATE__PG_PREPARING);
    g->state = s;
    set_reason(g, reason);
    if (is_pending(g) && !g->queued)
        wait_enter(g);
    else if (!is_pending(g) && g->queued)
        wait_leave(g);
    if (g->id)
        db_check(cr_state_pg_set_state(D.st, g->id, db_state(s), cr_wall_ms()));
}

static void pg_event(const char *kind, const pg_t *g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pg_event(const char *kind, const pg_t *g, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    head_event(kind, "placement group %s: %s", pg_name(g), msg);
}

static void send_txn(node_t *n, Corral__Envelope *e)
{
    if (!n->conn)
        return;
    e->id = cr_conn_next_id(n->conn);
    cr_conn_send(n->conn, e);
}

static void unplace(pg_t *g)
{
    if (g->placement && sched_placement_get(D.cluster, g->placement)) {
        sched_release(D.cluster, g->placement);
        D.sched_freed++;
    }
    g->placement = 0;
    for (int b = 0; b < g->nb; b++) {
        g->bnode[b] = NULL;
        g->bndevs[b] = 0;
    }
}

/* Tells every remote node of g's bundles to drop them (Abort while
 * preparing, Release once committed). */
static void release_remote(pg_t *g, bool abort, const char *why)
{
    for (size_t i = 0; i < g->ntxn; i++) {
        node_t *n = g->txn_nodes[i];
        Corral__Envelope e = CORRAL__ENVELOPE__INIT;
        Corral__Abort ab = CORRAL__ABORT__INIT;
        Corral__Release rel = CORRAL__RELEASE__INIT;
        if (abort) {
            ab.txn_id = g->txn;
            ab.reason = (char *)why;
            e.body_case = CORRAL__ENVELOPE__BODY_ABORT;
            e.abort = &ab;
        } else {
            rel.pg_id = g->idstr;
            e.body_case = CORRAL__ENVELOPE__BODY_RELEASE;
            e.release = &rel;
        }
        send_txn(n, &e);
    }
    g->ntxn = 0;
}

static void db_bundles(const pg_t *g)
{
    for (int b = 0; b < g->nb; b++) {
        cr_buf_t devs = {0};
        devs_format(g->bdevs[b], g->bndevs[b], &devs);
        db_check(cr_state_pg_set_bundle(D.st, g->id, b, g->bnode[b] ? g->bnode[b]->id : NULL,
                                        devs.s, cr_wall_ms()));
        cr_buf_free(&devs);
    }
}

static void created(pg_t *g)
{
    set_state(g, CORRAL__PG_STATE__PG_CREATED, NULL);
    db_bundles(g);
    cr_buf_t where = {0};
    for (int b = 0; b < g->nb; b++)
        cr_buf_printf(&where, "%s%s", b ? "," : "", g->bnode[b] ? g->bnode[b]->id : "?");
    pg_event("pg_created", g, "%d bundle(s) on %s", g->nb, where.s ? where.s : "");
    cr_buf_free(&where);
    answer_waiters(g, 0, NULL);
    if (D.watch.group_created)
        D.watch.group_created(g);
}

/* Back to waiting after a failed reservation: tried again later. */
static void rollback(pg_t *g, const char *why)
{
    release_remote(g, g->state == CORRAL__PG_STATE__PG_PREPARING, why);
    unplace(g);
    g->retry_at = cr_mono_ms() + RETRY_MS;
    set_state(g, CORRAL__PG_STATE__PG_PENDING, why);
    pg_event("pg_rolled_back", g, "%s; nothing is held, trying again", why);
}

/* Reserves g now if the scheduler can; false when it must wait (RETRY)
 * or cannot ever (INFEASIBLE: *infeasible, why). */
static bool try_place(pg_t *g, bool *infeasible, char *why, size_t size)
{
    sched_status_t st = schedule_bundles((uint32_t)g->nb, g->bundles, g->spec->strategy,
                                         g->spec->domain, &g->placement, why, size);
    *infeasible = st == SCHED_INFEASIBLE;
    if (st != SCHED_OK)
        return false;
    const sched_placement_t *p = sched_placement_get(D.cluster, g->placement);
    for (int b = 0; b < g->nb; b++) {
        const sched_alloc_t *al = sched__alloc(p, (uint32_t)b);
        g->bnode[b] = node_of(al->node);
        g->bndevs[b] = sched_alloc_devices(D.cluster, al, g->bdevs[b], MAX_DEVS);
        if (g->bndevs[b] > MAX_DEVS)
            g->bndevs[b] = MAX_DEVS;
    }
    return true;
}

/* Placed: created at once when every bundle is on the head's node, else
 * the first phase starts on the other nodes. */
static void reserve(pg_t *g)
{
    g->ntxn = 0;
    for (int b = 0; b < g->nb; b++) {
        node_t *n = g->bnode[b];
        if (!n || n->local)
            continue;
        bool have = false;
        for (size_t i = 0; i < g->ntxn && !have; i++)
            have = g->txn_nodes[i] == n;
        if (!have)
            g->txn_nodes[g->ntxn++] = n;
    }
    if (g->ntxn == 0) {
        created(g);
        return;
    }
    snprintf(g->txn, sizeof(g->txn), "pg%s-%u", g->idstr, ++g->txn_seq);
    g->votes = 0;
    g->txn_deadline = cr_mono_ms() + TXN_TIMEOUT_MS;
    set_state(g, CORRAL__PG_STATE__PG_PREPARING, "reserving on every node (two-phase)");
    for (size_t i = 0; i < g->ntxn; i++) {
        node_t *n = g->txn_nodes[i];
        Corral__Reservation *rv = cr_calloc((size_t)g->nb, sizeof(*rv));
        Corral__Reservation **rvp = cr_calloc((size_t)g->nb, sizeof(*rvp));
        uint32_t(*devs)[MAX_DEVS] = cr_calloc((size_t)g->nb, sizeof(*devs));
        size_t k = 0;
        for (int b = 0; b < g->nb; b++) {
            if (g->bnode[b] != n)
                continue;
            corral__reservation__init(&rv[k]);
            rv[k].pg_id = g->idstr;
            rv[k].bundle_index = (uint32_t)b;
            rv[k].resources = g->spec->bundles[b]->resources;
            rv[k].n_resources = g->spec->bundles[b]->n_resources;
            for (size_t d = 0; d < g->bndevs[b]; d++)
                devs[k][d] = (uint32_t)g->bdevs[b][d];
            rv[k].devices = devs[k];
            rv[k].n_devices = g->bndevs[b];
            rvp[k] = &rv[k];
            k++;
        }
        Corral__Prepare pr = CORRAL__PREPARE__INIT;
        pr.txn_id = g->txn;
        pr.reservations = rvp;
        pr.n_reservations = k;
        pr.lease_ms = LEASE_MS;
        Corral__Envelope e = CORRAL__ENVELOPE__INIT;
        e.body_case = CORRAL__ENVELOPE__BODY_PREPARE;
        e.prepare = &pr;
        if (!n->conn) {
            free(rv);
            free(rvp);
            free(devs);
            char why[128];
            snprintf(why, sizeof(why), "node %s's agent is not connected", n->id);
            rollback(g, why);
            return;
        }
        send_txn(n, &e);
        free(rv);
        free(rvp);
        free(devs);
    }
}

static pg_t *by_txn(const char *txn)
{
    for (size_t i = 0; i < D.pgs.n; i++)
        if (D.pgs.v[i]->state == CORRAL__PG_STATE__PG_PREPARING &&
            strcmp(D.pgs.v[i]->txn, txn) == 0)
            return D.pgs.v[i];
    return NULL;
}

void pgs_prepare_reply(node_t *n, const Corral__PrepareReply *r)
{
    pg_t *g = by_txn(r->txn_id);
    if (!g) {
        /* a late vote for a transaction already decided: tell it to drop */
        if (r->ok && n->conn) {
            Corral__Abort ab = CORRAL__ABORT__INIT;
            ab.txn_id = r->txn_id;
            ab.reason = "decided already";
            Corral__Envelope e = CORRAL__ENVELOPE__INIT;
            e.body_case = CORRAL__ENVELOPE__BODY_ABORT;
            e.abort = &ab;
            send_txn(n, &e);
        }
        return;
    }
    if (!r->ok) {
        char why[320];
        snprintf(why, sizeof(why), "node %s refused the reservation: %s", n->id,
                 r->reason && r->reason[0] ? r->reason : "no reason given");
        rollback(g, why);
        return;
    }
    if (++g->votes < g->ntxn)
        return;
    for (size_t i = 0; i < g->ntxn; i++) {
        Corral__Commit cm = CORRAL__COMMIT__INIT;
        cm.txn_id = g->txn;
        Corral__Envelope e = CORRAL__ENVELOPE__INIT;
        e.body_case = CORRAL__ENVELOPE__BODY_COMMIT;
        e.commit = &cm;
        send_txn(g->txn_nodes[i], &e);
    }
    created(g);
}

void pgs_txn_done(node_t *n, const Corral__TxnDone *r)
{
    (void)n;
    cr_debug("transaction %s %s", r->txn_id, r->committed ? "committed" : "aborted");
}

void pgs_conn_closed(node_t *n)
{
    for (size_t i = 0; i < D.pgs.n; i++) {
        pg_t *g = D.pgs.v[i];
        if (g->state != CORRAL__PG_STATE__PG_PREPARING)
            continue;
        for (size_t k = 0; k < g->ntxn; k++)
            if (g->txn_nodes[k] == n) {
                char why[160];
                snprintf(why, sizeof(why), "node %s's agent went away during the reservation",
                         n->id);
                rollback(g, why);
                break;
            }
    }
}

void pgs_node_lost(node_t *n)
{
    for (size_t i = 0; i < D.pgs.n; i++) {
        pg_t *g = D.pgs.v[i];
        if (g->state != CORRAL__PG_STATE__PG_CREATED && g->state != CORRAL__PG_STATE__PG_PREPARING)
            continue;
        bool on = false;
        for (int b = 0; b < g->nb && !on; b++)
            on = g->bnode[b] == n;
        if (!on)
            continue;
        char why[160];
        snprintf(why, sizeof(why), "node %s died", n->id);
        if (g->state == CORRAL__PG_STATE__PG_CREATED) {
            /* the others drop their share; the group is reserved again */
            size_t k = 0;
            for (size_t x = 0; x < g->ntxn; x++)
                if (g->txn_nodes[x] != n)
                    g->txn_nodes[k++] = g->txn_nodes[x];
            g->ntxn = k;
            release_remote(g, false, why);
            unplace(g);
            g->retry_at = 0;
            set_state(g, CORRAL__PG_STATE__PG_PENDING, why);
            db_bundles(g);
            pg_event("pg_lost", g, "%s: reserving the group again", why);
        } else {
            rollback(g, why);
        }
    }
}

/* One pass over the pending groups, in order. Reserving a group calls
 * out (a group created at once starts the jobs waiting for it), so its
 * place is found again after: the queue may have moved meanwhile. */
static void pass_once(void)
{
    int64_t now = cr_mono_ms();
    uint64_t freed = D.sched_freed;
    pass_gen++;
    for (size_t i = 0; i < waiting.n && !D.shutting_down; i++) {
        pg_wait_t e = waiting.v[i];
        if (!e.g || now < e.retry_at)
            continue;
        if (e.retry_at) /* its wait is over: pgs_tick asks no more passes for it */
            e.g->retry_at = waiting.v[i].retry_at = 0;
        if (D.sched_freed != freed) {
            freed = D.sched_freed;
            pass_gen++;
        }
        if (e.shape->missed == pass_gen)
            continue; /* refused in this pass already: not read */
        pg_t *g = e.g;
        bool infeasible = false;
        char why[256];
        if (try_place(g, &infeasible, why, sizeof(why))) {
            reserve(g);
            i = wait_find(e.id);
            continue;
        }
        if (!infeasible)
            shape_refused(e.shape, pass_gen, why);
        else if (g->spec->wait_for_nodes)
            wait_reason(why, sizeof(why));
        if (!pg_reason(g) || strcmp(pg_reason(g), why)) /* still PENDING: nothing to record */
            set_reason(g, why);
    }
    if (holes) {
        size_t keep = 0;
        for (size_t i = 0; i < waiting.n; i++)
            if (waiting.v[i].g)
                waiting.v[keep++] = waiting.v[i];
        waiting.n = keep;
        holes = 0;
    }
}

/* A pass is not entered again from inside (pass_run: a group created in
 * it starts jobs, and a job's end asks for a pass). */
void pgs_try_pending(void)
{
    pass_run(&pass, pass_once);
}

void pgs_tick(void)
{
    int64_t now = cr_mono_ms();
    bool retry = false;
    for (size_t i = 0; i < D.pgs.n; i++) {
        pg_t *g = D.pgs.v[i];
        if (g->state == CORRAL__PG_STATE__PG_PREPARING && now > g->txn_deadline) {
            char why[160];
            snprintf(why, sizeof(why), "%zu of %zu node(s) did not answer within %d ms",
                     g->ntxn - g->votes, g->ntxn, TXN_TIMEOUT_MS);
            rollback(g, why);
        }
        retry |= g->state == CORRAL__PG_STATE__PG_PENDING && g->retry_at && now >= g->retry_at;
    }
    if (retry)
        pgs_try_pending();
}

/* ----------------------------------------------------------- lifecycle */

static void pg_free(pg_t *g)
{
    if (g->queued)
        wait_leave(g);
    npreparing -= g->state == CORRAL__PG_STATE__PG_PREPARING;
    for (size_t i = 0; g->tied && i < tied.n; i++)
        if (tied.v[i] == g)
            untie(i);
    free(g->name);
    free(g->reason);
    if (g->spec)
        corral__pg_create__free_unpacked(g->spec, NULL);
    free(g->bundles);
    free(g->bnode);
    free(g->bdevs);
    free(g->bndevs);
    free(g->bjob);
    free(g->txn_nodes);
    CR_VEC_FREE(&g->waiters);
    free(g);
}

void pgs_free(void)
{
    CR_VEC_FREE(&fresh);
    for (size_t i = 0; i < D.pgs.n; i++)
        pg_free(D.pgs.v[i]);
    CR_VEC_FREE(&D.pgs);
    CR_VEC_FREE(&waiting);
    CR_VEC_FREE(&tied);
    shapes_free(&shapes);
}

static char *hex_of(const uint8_t *b, size_t n)
{
    char *h = cr_malloc(2 * n + 1);
    cr_hex_encode(b, n, h);
    return h;
}

/* A group from its spec (copied); NULL with code and why when invalid. */
static pg_t *pg_new(const Corral__PgCreate *s, int *code, char *why, size_t size)
{
    pg_t *g = cr_calloc(1, sizeof(*g));
    size_t len = corral__pg_create__get_packed_size(s);
    uint8_t *buf = cr_malloc(len ? len : 1);
    corral__pg_create__pack(s, buf);
    g->spec = corral__pg_create__unpack(NULL, len, buf);
    free(buf);
    g->name = s->name && s->name[0] ? cr_strdup(s->name) : NULL;
    g->nb = (int)s->n_bundles;
    g->bundles = cr_calloc((size_t)g->nb, sizeof(*g->bundles));
    g->bnode = cr_calloc((size_t)g->nb, sizeof(*g->bnode));
    g->bdevs = cr_calloc((size_t)g->nb, sizeof(*g->bdevs));
    g->bndevs = cr_calloc((size_t)g->nb, sizeof(*g->bndevs));
    g->bjob = cr_calloc((size_t)g->nb, sizeof(*g->bjob));
    g->txn_nodes = cr_calloc((size_t)g->nb, sizeof(*g->txn_nodes));
    g->state = CORRAL__PG_STATE__PG_PENDING;
    *code = 0;
    if ((unsigned)s->strategy > CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD) {
        snprintf(why, size, "strategy %d: expected 0 to 3", (int)s->strategy);
        *code = CR_EINVAL;
    }
    for (int b = 0; b < g->nb && !*code; b++) {
        const Corral__Bundle *bd = s->bundles[b];
        Corral__WorkerSpec ws = CORRAL__WORKER_SPEC__INIT;
        ws.resources = bd->resources;
        ws.n_resources = bd->n_resources;
        char w2[200];
        int err = build_request(&ws, &g->bundles[b].req, w2, sizeof(w2));
        if (err < 0) {
            snprintf(why, size, "bundle %d: %s", b, w2);
            *code = err;
            break;
        }
        char sel[512];
        snprintf(sel, sizeof(sel), "%s%s%s", s->selector ? s->selector : "",
                 s->selector && s->selector[0] && bd->selector && bd->selector[0] ? "," : "",
                 bd->selector ? bd->selector : "");
        if (sel[0]) {
            sched_err_t se;
            if (sched_parse_selector(&D.cluster->labels, sel, &g->bundles[b].sel, &se) < 0) {
                snprintf(why, size, "bundle %d: label selector '%.100s': %.100s", b, sel, se.msg);
                *code = CR_EINVAL;
            }
        }
    }
    if (*code) {
        pg_free(g);
        return NULL;
    }
    return g;
}

static int pg_persist(pg_t *g)
{
    cr_state_bundle_t *bs = cr_calloc((size_t)g->nb, sizeof(*bs));
    char **js = cr_calloc((size_t)g->nb, sizeof(*js));
    size_t len = corral__pg_create__get_packed_size(g->spec);
    uint8_t *pb = cr_malloc(len ? len : 1);
    corral__pg_create__pack(g->spec, pb);
    char *hex = hex_of(pb, len);
    free(pb);
    for (int b = 0; b < g->nb; b++) {
        json_t *o = json_object(), *res = json_object();
        for (size_t k = 0; k < g->spec->bundles[b]->n_resources; k++)
            json_object_set_new(res, g->spec->bundles[b]->resources[k]->name,
                                json_integer(g->spec->bundles[b]->resources[k]->amount));
        json_object_set_new(o, "resources", res);
        if (b == 0) /* the whole request, packed: what a restarted head reads back */
            json_object_set_new(o, "pb", json_string(hex));
        js[b] = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        bs[b].index = b;
        bs[b].resources_json = js[b];
    }
    free(hex);
    static const cr_pg_strategy_t strat[] = {CR_PG_PACK, CR_PG_SPREAD, CR_PG_STRICT_PACK,
                                             CR_PG_STRICT_SPREAD};
    cr_state_pg_t row = {.name = g->name,
                         .strategy = strat[g->spec->strategy & 3],
                         .state = CR_PG_PENDING,
                         .bundles = bs,
                         .n_bundles = (size_t)g->nb};
    int err = cr_state_pg_create(D.st, &row, cr_wall_ms(), &g->id);
    for (int b = 0; b < g->nb; b++)
        free(js[b]);
    free(js);
    free(bs);
    if (err == 0)
        snprintf(g->idstr, sizeof(g->idstr), "pg%lld", (long long)g->id);
    return err;
}

static void pgs_drop(pg_t *g)
{
    for (size_t i = 0; i < D.pgs.n; i++)
        if (D.pgs.v[i] == g) {
            memmove(&D.pgs.v[i], &D.pgs.v[i + 1], (D.pgs.n - i - 1) * sizeof(*D.pgs.v));
            D.pgs.n--;
            break;
        }
    pg_free(g);
}

void pgs_committed(bool ok)
{
    size_t n = fresh.n;
    pg_t **v = fresh.v;
    fresh.v = NULL;
    fresh.n = fresh.cap = 0;
    for (size_t i = 0; !ok && i < n; i++) {
        /* its id was rolled back and its answer is an error: forgotten, as
         * a removal would, so that the id is not handed out twice */
        pg_t *g = v[i];
        if (D.watch.group_removed)
            D.watch.group_removed(g);
        release_remote(g, g->state == CORRAL__PG_STATE__PG_PREPARING,
                       "its creation could not be recorded");
        unplace(g);
        answer_waiters(g, CR_EIO,
                       "the state store could not commit the group's creation: nothing of it "
                       "was kept");
        pgs_drop(g);
    }
    free(v);
    if (!ok && n)
        head_retry();
}

static void h_create(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__PgCreate *s = e->pg_create;
    if (D.shutting_down) {
        cr_conn_reply_error(c, e->id, CR_EAGAIN, "the head is shutting down");
        return;
    }
    if (s->name && s->name[0] && pg_find(s->name)) {
        cr_conn_reply_error(c, e->id, CR_EEXIST,
                            "a placement group named %s exists; remove it first (corral pg "
                            "remove %s) or choose another name",
                            s->name, s->name);
        return;
    }
    int code;
    char why[320];
    pg_t *g = pg_new(s, &code, why, sizeof(why));
    if (!g) {
        cr_conn_reply_error(c, e->id, code, "%s", why);
        return;
    }
    bool infeasible;
    bool ok = try_place(g, &infeasible, why, sizeof(why));
    if (infeasible && s->wait_for_nodes) {
        infeasible = false;
        wait_reason(why, sizeof(why));
    }
    if (infeasible) {
        head_event("infeasible", "placement group %s: %s", g->name ? g->name : "", why);
        cr_conn_reply_error(c, e->id, CR_EINFEASIBLE, "infeasible: cannot reserve %d bundle(s): %s",
                            g->nb, why);
        pg_free(g);
        return;
    }
    int err = pg_persist(g);
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "cannot record the group: %s", cr_state_errmsg(D.st));
        unplace(g);
        pg_free(g);
        return;
    }
    *CR_VEC_PUSH(&D.pgs) = g;
    if (s->bound != CORRAL__PG_BOUND__BOUND_NONE)
        g->owner = c;
    if (cr_state_in_transaction(D.st))
        *CR_VEC_PUSH(&fresh) = g;
    if (s->wait) {
        struct waiter *wt = CR_VEC_PUSH(&g->waiters);
        wt->c = c;
        wt->req = e->id;
    }
    if (g->owner || g->waiters.n)
        tie(g);
    if (ok) {
        reserve(g); /* may answer the waiter at once */
    } else {
        set_state(g, CORRAL__PG_STATE__PG_PENDING, why);
        pg_event("pg_pending", g, "%s", why);
    }
    if (!s->wait)
        answer(c, e->id, g);
}

/* g goes for good (why, for the event): the jobs running in it stop and
 * let go of it, its reservations are released, its waiters answered, its
 * row, its name and its memory freed. The caller retries what waits. */
static void pg_remove(pg_t *g, const char *why)
{
    /* the jobs running in it stop, and hold nothing of it any more */
    if (D.watch.group_removed)
        D.watch.group_removed(g);
    bool preparing = g->state == CORRAL__PG_STATE__PG_PREPARING;
    release_remote(g, preparing, "the group was removed");
    unplace(g);
    answer_waiters(g, CR_EAGAIN, "the placement group was removed before it was created");
    npreparing -= preparing;
    g->state = CORRAL__PG_STATE__PG_REMOVED;
    pg_event("pg_removed", g, "%s", why);
    db_check(cr_state_pg_delete(D.st, g->id));
    /* created in this same turn (its client went at once): not for
     * pgs_committed to look at any more */
    size_t keep = 0;
    for (size_t i = 0; i < fresh.n; i++)
        if (fresh.v[i] != g)
            fresh.v[keep++] = fresh.v[i];
    fresh.n = keep;
    pgs_drop(g);
}

static void h_remove(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__PgRemove *r = e->pg_remove;
    const char *key = r->pg_id && r->pg_id[0] ? r->pg_id : r->name;
    pg_t *g = pg_find(key);
    if (!g) {
        cr_conn_reply_error(c, e->id, CR_ENOENT,
                            "no placement group %s (corral pg list shows them)", key);
        return;
    }
    pg_remove(g, "removed");
    reply_ack(c, e);
    head_retry();
}

void pgs_info_each(void (*fn)(void *ctx, const Corral__PgInfo *info), void *ctx)
{
    uint32_t qpos = 0;
    for (size_t i = 0; i < D.pgs.n; i++) {
        if (D.pgs.v[i]->state == CORRAL__PG_STATE__PG_REMOVED)
            continue;
        qpos += is_pending(D.pgs.v[i]);
        Corral__PgInfo info;
        info_mem_t m;
        info_fill(D.pgs.v[i], &info, &m, is_pending(D.pgs.v[i]) ? qpos : 0);
        fn(ctx, &info);
        info_fini(&m);
    }
}

/* One page (head/page.c): the groups not removed, in id order from the
 * token's id on (D.pgs is in id order). */
static void h_list(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__PgList *q = e->pg_list;
    char msg[256], token[64] = "";
    int64_t from;
    int err = page_parse_id(q->continue_token, "groups", &from, msg, sizeof(msg));
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "%s", msg);
        return;
    }
    size_t n = D.pgs.n, i = 0;
    while (i < n && D.pgs.v[i]->id < from)
        i++;
    uint32_t qpos = 0; /* a pending group's place counts the pages before too */
    for (size_t x = 0; x < i; x++)
        qpos += is_pending(D.pgs.v[x]);
    size_t cap = page_cap(q->limit, n - i);
    Corral__PgInfo *infos = cr_calloc(cap + 1, sizeof(*infos));
    Corral__PgInfo **ptrs = cr_calloc(cap + 1, sizeof(*ptrs));
    info_mem_t *mem = cr_calloc(cap + 1, sizeof(*mem));
    size_t k = 0, budget = page_budget(), used = 0;
    for (; i < n && k < cap; i++) {
        if (D.pgs.v[i]->state == CORRAL__PG_STATE__PG_REMOVED)
            continue;
        qpos += is_pending(D.pgs.v[i]);
        info_fill(D.pgs.v[i], &infos[k], &mem[k], is_pending(D.pgs.v[i]) ? qpos : 0);
        size_t cost = page_item_cost(corral__pg_info__get_packed_size(&infos[k]));
        if (used + cost > budget) {
            info_fini(&mem[k]);
            if (k == 0) {
                cr_conn_reply_error(c, e->id, CR_E2BIG,
                                    "group %s's record alone is larger than the frame limit",
                                    D.pgs.v[i]->idstr);
                goto out;
            }
            break;
        }
        used += cost;
        ptrs[k] = &infos[k];
        k++;
    }
    uint32_t remaining = 0;
    for (size_t x = i; x < n; x++)
        if (D.pgs.v[x]->state != CORRAL__PG_STATE__PG_REMOVED && !remaining++) {
            char key[24]; /* the number: idstr is "pg<id>" */
            snprintf(key, sizeof(key), "%lld", (long long)D.pgs.v[x]->id);
            page_token("groups", key, token, sizeof(token));
        }
    Corral__PgListReply r = CORRAL__PG_LIST_REPLY__INIT;
    r.groups = ptrs;
    r.n_groups = k;
    r.continue_token = token;
    r.remaining = remaining;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_PG_LIST_REPLY;
    a.pg_list_reply = &r;
    reply(c, e, &a);
out:
    for (size_t x = 0; x < k; x++)
        info_fini(&mem[x]);
    free(mem);
    free(ptrs);
    free(infos);
}

void req_pg(cr_conn_t *c, const Corral__Envelope *e)
{
    switch (e->body_case) {
    case CORRAL__ENVELOPE__BODY_PG_CREATE:
        h_create(c, e);
        break;
    case CORRAL__ENVELOPE__BODY_PG_REMOVE:
        h_remove(c, e);
        break;
    default:
        h_list(c, e);
    }
}

/* ------------------------------------------------------------- recovery */

static Corral__PgCreate *spec_of(const cr_state_pg_t *r)
{
    if (r->n_bundles == 0 || !r->bundles[0].resources_json)
        return NULL;
    json_t *o = json_loads(r->bundles[0].resources_json, 0, NULL);
    const char *hex = json_string_value(json_object_get(o, "pb"));
    Corral__PgCreate *s = NULL;
    if (hex) {
        size_t len = strlen(hex) / 2;
        uint8_t *pb = cr_malloc(len + 1);
        if (cr_hex_decode(hex, strlen(hex), pb))
            s = corral__pg_create__unpack(NULL, len, pb);
        free(pb);
    }
    json_decref(o);
    return s;
}

void pgs_recover(void)
{
    cr_state_pg_t *v = NULL;
    size_t n = 0;
    if (cr_state_pg_list(D.st, &v, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (v[i].state == CR_PG_REMOVED)
            continue;
        Corral__PgCreate *s = spec_of(&v[i]);
        int code;
        char why[320];
        pg_t *g = s ? pg_new(s, &code, why, sizeof(why)) : NULL;
        if (s)
            corral__pg_create__free_unpacked(s, NULL);
        if (!g || g->nb != (int)v[i].n_bundles) {
            if (g)
                pg_free(g);
            cr_warn("state: placement group %lld cannot be read back", (long long)v[i].id);
            continue;
        }
        g->id = v[i].id;
        snprintf(g->idstr, sizeof(g->idstr), "pg%lld", (long long)g->id);
        *CR_VEC_PUSH(&D.pgs) = g;
        bool held = v[i].state == CR_PG_CREATED;
        sched_exact_t *x = cr_calloc((size_t)g->nb, sizeof(*x));
        for (int b = 0; b < g->nb && held; b++) {
            const cr_state_bundle_t *sb = &v[i].bundles[b];
            node_t *nd = sb->node_id ? node_by_id(sb->node_id) : NULL;
            if (!nd || nd->state == CORRAL__NODE_STATE__NODE_DEAD) {
                held = false;
                break;
            }
            g->bnode[b] = nd;
            g->bndevs[b] = devs_parse(sb->devices, g->bdevs[b]);
            x[b].node = nd->sn;
            x[b].req = g->bundles[b].req;
            x[b].devs = g->bdevs[b];
            x[b].ndevs = g->bndevs[b];
        }
        if (held && sched_take_exact(D.cluster, (uint32_t)g->nb, x, &g->placement) == 0) {
            g->state = CORRAL__PG_STATE__PG_CREATED;
            for (int b = 0; b < g->nb; b++) {
                node_t *nd = g->bnode[b];
                bool have = nd->local;
                for (size_t k = 0; k < g->ntxn && !have; k++)
                    have = g->txn_nodes[k] == nd;
                if (!have)
                    g->txn_nodes[g->ntxn++] = nd;
            }
            pg_event("recovered", g, "held again after a head restart");
        } else {
            unplace(g);
            set_state(g, CORRAL__PG_STATE__PG_PENDING, "reserving again after a head restart");
            pg_event("recovered", g, "pending again after a head restart");
        }
        free(x);
    }
    cr_state_pg_list_free(v, n);
}
