/* Placement of one bundle: the feasibility check, the device-set choice
 * inside a node, the single-bundle policies, release and node loss.
 * Nothing here allocates on the single-bundle path. */
#include "sched_int.h"
#include <stdio.h>

void sched__fmt(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* ---- feasibility ---- */

uint32_t sched__reqmask(const sched_resreq_t *q)
{
    uint32_t m = 0;
    for (int k = 0; k < q->n; k++)
        m |= 1u << q->id[k];
    return m;
}

static int held_whole(const sched_cluster_t *c, int n, int r, int64_t dev)
{
    int64_t h = HELD(c, r, n);
    return (int)((h + dev - 1) / dev);
}

/* Devices of several units (a Trainium device of 2 NeuronCores) are taken
 * whole: a request on such a node must be a multiple of a device's units.
 * Sharing a device by a fraction would split its cores between two runtimes
 * that both see them, so such a request is refused on that node instead. */
bool sched__granule_ok(const sched_cluster_t *c, int n, int r, int64_t qty)
{
    const sched_node_t *sn = &c->nodes.v[n];
    int u = sched__units(sn, r);
    return u == 1 || qty % ((int64_t)u * CR_QTY_ONE) == 0;
}

bool sched__fits_now(const sched_cluster_t *c, int n, const sched_resreq_t *q, bool use_hold)
{
    const sched_node_t *sn = &c->nodes.v[n];
    for (int k = 0; k < q->n; k++) {
        int r = q->id[k];
        int64_t qty = q->qty[k];
        if (r >= c->nres)
            return false;
        int64_t a = AV(c, r, n) - (use_hold ? HELD(c, r, n) : 0);
        if (a < qty)
            return false;
        if (r >= SCHED_R_PREDEFINED || !sn->unitmask[r])
            continue;
        uint64_t m = sn->unitmask[r];
        int64_t dev = (int64_t)sched__units(sn, r) * CR_QTY_ONE;
        if (!sched__granule_ok(c, n, r, qty))
            return false;
        int wf =
            __builtin_popcountll(c->freemask[n] & m) - (use_hold ? held_whole(c, n, r, dev) : 0);
        if (qty >= CR_QTY_ONE) {
            if (wf < qty / dev)
                return false;
            if (sched__has_rules(sn, r) &&
                !sched__rules_pool(c, n, r, (int)(qty / dev), c->freemask[n] & m))
                return false;
            continue;
        }
        if (wf >= 1)
            continue;
        bool ok = false;
        for (uint64_t s = m & ~c->freemask[n]; s && !ok; s &= s - 1)
            ok = c->devfree[sn->dev_off + __builtin_ctzll(s)] >= qty;
        if (!ok)
            return false;
    }
    return true;
}

/* Whether the vendor's rules (sched__rules_pool) leave no device set of
 * node n, free or not, for qty of resource r. */
static bool rules_refuse(const sched_cluster_t *c, int n, int r, int64_t qty)
{
    const sched_node_t *sn = &c->nodes.v[n];
    if (r >= SCHED_R_PREDEFINED || qty < CR_QTY_ONE || !sched__has_rules(sn, r))
        return false;
    int k = (int)(qty / (sched__units(sn, r) * CR_QTY_ONE));
    return !sched__rules_pool(c, n, r, k, sn->unitmask[r]);
}

bool sched__fits_ever(const sched_cluster_t *c, int n, const sched_resreq_t *q)
{
    if (!c->alive[n])
        return false;
    for (int k = 0; k < q->n; k++) {
        int r = q->id[k];
        if (r >= c->nres || TOT(c, r, n) < q->qty[k] || !sched__granule_ok(c, n, r, q->qty[k]) ||
            rules_refuse(c, n, r, q->qty[k]))
            return false;
    }
    return true;
}

/* Utilization of the node's most used requested resource after placing q,
 * in permille. */
int sched__util_after(const sched_cluster_t *c, int n, const sched_resreq_t *q)
{
    int u = 0;
    for (int k = 0; k < q->n; k++) {
        int r = q->id[k];
        int64_t t = TOT(c, r, n);
        int64_t used = t - AV(c, r, n) + q->qty[k];
        /* 128-bit only where the product needs it (a division of those
         * took a tenth of a decision) */
        int v =
            used <= INT64_MAX / 1000 ? (int)(used * 1000 / t) : (int)((sched_sum_t)used * 1000 / t);
        if (v > u)
            u = v;
    }
    return u;
}

/* ---- device-set choice ---- */

static uint64_t lowest_k(uint64_t m, int k)
{
    uint64_t out = 0;
    for (; k > 0 && m; k--) {
        out |= m & -m;
        m &= m - 1;
    }
    return out;
}

static int dev_at(const sched_cluster_t *c, const sched_node_t *sn, uint64_t m, int x, int y, int z)
{
    for (; m; m &= m - 1) {
        int b = __builtin_ctzll(m);
        const sched_dev_t *d = &c->dev.v[sn->dev_off + b];
        if (d->x == x && d->y == y && d->z == z)
            return b;
    }
    return -1;
}

/* A free axis-aligned box of k chips (1, 1x2, 2x2, 2x4), lowest origin first. */
static uint64_t tpu_box(const sched_cluster_t *c, const sched_node_t *sn, uint64_t free, int k)
{
    int dx, dy;
    if (!sched_tpu_submesh(k, &dx, &dy))
        return 0;
    for (uint64_t o = free; o; o &= o - 1) {
        const sched_dev_t *d = &c->dev.v[sn->dev_off + __builtin_ctzll(o)];
        if (d->x < 0)
            return 0;
        for (int orient = 0; orient < 2; orient++) {
            int ax = orient ? dy : dx, ay = orient ? dx : dy;
            uint64_t box = 0;
            for (int i = 0; i < ax && box != ~0ull; i++)
                for (int j = 0; j < ay; j++) {
                    int b = dev_at(c, sn, free, d->x + i, d->y + j, d->z);
                    if (b < 0) {
                        box = ~0ull;
                        break;
                    }
                    box |= 1ull << b;
                }
            if (box != ~0ull)
                return box;
        }
    }
    return 0;
}

/* Best fit among groups: the group with the fewest free devices that still
 * holds k, so that bigger groups stay whole. */
static uint64_t best_group(const uint64_t *groups, int ng, uint64_t pool, int k)
{
    uint64_t best = pool;
    int bestn = 65;
    for (int g = 0; g < ng; g++) {
        uint64_t f = groups[g] & pool;
        int pc = __builtin_popcountll(f);
        if (pc >= k && pc < bestn) {
            bestn = pc;
            best = f;
        }
    }
    return best;
}

/* The vendor's rules on which devices one worker may hold together, for k
 * whole devices out of pool: a MIG instance goes alone (k == 1), and then
 * only when no whole GPU is in the pool, so that GPU=1 means a whole GPU
 * while one is free; where the node has exact sets (Gaudi modules), k > 1
 * takes the first set of k that lies in the pool. Returns the devices to
 * choose among, exactly the set where sets apply, or 0 when the rules
 * leave none. */
uint64_t sched__rules_pool(const sched_cluster_t *c, int n, int r, int k, uint64_t pool)
{
    const sched_node_t *sn = &c->nodes.v[n];
    if (pool & sn->solomask) {
        uint64_t whole = pool & ~sn->solomask;
        if (k > 1 || whole)
            pool = whole;
    }
    if (k > 1 && sn->nset && r == sn->set_res) {
        const uint64_t *g = &c->groups.v[sn->group_off + sn->nisland + sn->nnuma];
        for (int i = 0; i < sn->nset; i++)
            if (g[i] && __builtin_popcountll(g[i]) == k && (g[i] & pool) == g[i])
                return g[i];
        return 0;
    }
    return __builtin_popcountll(pool) >= k ? pool : 0;
}

uint64_t sched__choose_whole(const sched_cluster_t *c, int n, int r, int k)
{
    const sched_node_t *sn = &c->nodes.v[n];
    uint64_t free = sched__rules_pool(c, n, r, k, c->freemask[n] & sn->unitmask[r]);
    if (__builtin_popcountll(free) < k)
        return 0;
    if (r == SCHED_R_TPU && k > 1) {
        uint64_t box = tpu_box(c, sn, free, k);
        if (box)
            return box;
    }
    const uint64_t *g = &c->groups.v[sn->group_off];
    uint64_t pool = best_group(g, sn->nisland, free, k);
    pool = best_group(g + sn->nisland, sn->nnuma, pool, k);
    return lowest_k(pool, k);
}

/* A fraction goes onto the shared device it fits best, before a free
 * device is split. */
int sched__choose_frac(const sched_cluster_t *c, int n, int r, int64_t qty)
{
    const sched_node_t *sn = &c->nodes.v[n];
    uint64_t m = sn->unitmask[r];
    int best = -1;
    int32_t bestf = CR_QTY_ONE + 1;
    for (uint64_t s = m & ~c->freemask[n]; s; s &= s - 1) {
        int b = __builtin_ctzll(s);
        int32_t f = c->devfree[sn->dev_off + b];
        if (f >= qty && f < bestf) {
            bestf = f;
            best = b;
        }
    }
    if (best >= 0)
        return best;
    uint64_t free = c->freemask[n] & m;
    return free ? __builtin_ctzll(free) : -1;
}

/* ---- taking and giving back ---- */

int sched__take(sched_cluster_t *c, int n, const sched_resreq_t *q, sched_alloc_t *al)
{
    const sched_node_t *sn = &c->nodes.v[n];
    memset(al, 0, sizeof(*al));
    al->node = n;
    al->req = *q;
    /* choose every device set first: different resources never share devices */
    for (int k = 0; k < q->n; k++) {
        int r = q->id[k];
        if (r >= SCHED_R_PREDEFINED || !sn->unitmask[r])
            continue;
        if (!sched__granule_ok(c, n, r, q->qty[k]))
            return CR_EAGAIN;
        if (q->qty[k] >= CR_QTY_ONE) {
            int64_t dev = (int64_t)sched__units(sn, r) * CR_QTY_ONE;
            al->mask[k] = sched__choose_whole(c, n, r, (int)(q->qty[k] / dev));
            if (!al->mask[k])
                return CR_EAGAIN;
        } else {
            int b = sched__choose_frac(c, n, r, q->qty[k]);
            if (b < 0)
                return CR_EAGAIN;
            al->mask[k] = 1ull << b;
        }
    }
    for (int k = 0; k < q->n; k++) {
        int r = q->id[k];
        AV(c, r, n) -= q->qty[k];
        c->sumavail[r] -= q->qty[k];
        for (uint64_t s = al->mask[k]; s; s &= s - 1) {
            int b = __builtin_ctzll(s);
            c->devfree[sn->dev_off + b] -=
                q->qty[k] >= CR_QTY_ONE ? CR_QTY_ONE : (int32_t)q->qty[k];
            c->freemask[n] &= ~(1ull << b);
        }
        sched__lvl_res(c, r, n);
    }
    return 0;
}

void sched__give(sched_cluster_t *c, const sched_alloc_t *al)
{
    int n = al->node;
    if (!c->alive[n])
        return; /* a lost node was reset when it was lost */
    const sched_node_t *sn = &c->nodes.v[n];
    for (int k = 0; k < al->req.n; k++) {
        int r = al->req.id[k];
        AV(c, r, n) += al->req.qty[k];
        c->sumavail[r] += al->req.qty[k];
        for (uint64_t s = al->mask[k]; s; s &= s - 1) {
            int b = __builtin_ctzll(s);
            int32_t *f = &c->devfree[sn->dev_off + b];
            *f += al->req.qty[k] >= CR_QTY_ONE ? CR_QTY_ONE : (int32_t)al->req.qty[k];
            if (*f == CR_QTY_ONE)
                c->freemask[n] |= 1ull << b;
        }
        sched__lvl_res(c, r, n);
    }
}

sched_placement_t *sched__placement_new(sched_cluster_t *c, uint32_t nallocs)
{
    uint32_t slot;
    if (c->free_slots.n)
        slot = c->free_slots.v[--c->free_slots.n];
    else {
        CR_VEC_PUSH(&c->placements);
        slot = (uint32_t)(c->placements.n - 1);
    }
    sched_placement_t *p = &c->placements.v[slot];
    p->id = (c->next_id++ << 32) | slot;
    p->nallocs = nallocs;
    p->allocs = nallocs > 1 ? cr_malloc(nallocs * sizeof(sched_alloc_t)) : NULL;
    return p;
}

size_t sched_alloc_devices(const sched_cluster_t *c, const sched_alloc_t *a, int *out, size_t max)
{
    const sched_node_t *sn = &c->nodes.v[a->node];
    uint64_t all = 0;
    for (int k = 0; k < a->req.n; k++)
        all |= a->mask[k];
    size_t n = 0;
    for (; all; all &= all - 1, n++)
        if (n < max)
            out[n] = c->dev.v[sn->dev_off + __builtin_ctzll(all)].hw_index;
    return n;
}

const sched_placement_t *sched_placement_get(const sched_cluster_t *c, uint64_t id)
{
    uint32_t slot = (uint32_t)(id & 0xffffffffu);
    if (!id || slot >= c->placements.n || c->placements.v[slot].id != id)
        return NULL;
    return &c->placements.v[slot];
}

void sched__placement_drop(sched_cluster_t *c, sched_placement_t *p)
{
    CR_FREE(p->allocs);
    p->id = 0;
    p->nallocs = 0;
    *CR_VEC_PUSH(&c->free_slots) = (uint32_t)(p - c->placements.v);
}

int sched_release(sched_cluster_t *c, uint64_t id)
{
    sched_placement_t *p = (sched_placement_t *)sched_placement_get(c, id);
    if (!p)
        return CR_ENOENT;
    for (uint32_t a = 0; a < p->nallocs; a++)
        sched__give(c, sched__alloc(p, a));
    sched__placement_drop(c, p);
    return 0;
}

static void node_reset(sched_cluster_t *c, int n, bool alive)
{
    const sched_node_t *sn = &c->nodes.v[n];
    for (int r = 0; r < c->nres; r++) {
        if (c->alive[n]) {
            c->sumavail[r] -= AV(c, r, n);
            c->sumtotal[r] -= TOT(c, r, n);
        }
        AV(c, r, n) = TOT(c, r, n);
        if (alive) {
            c->sumavail[r] += TOT(c, r, n);
            c->sumtotal[r] += TOT(c, r, n);
        }
    }
    c->freemask[n] = 0;
    for (int b = 0; b < sn->ndev; b++) {
        c->devfree[sn->dev_off + b] = CR_QTY_ONE;
        c->freemask[n] |= 1ull << b;
    }
    c->alive[n] = alive;
    sched__lvl_node(c, n);
    for (int r = 0; r < c->nres; r++) {
        c->maxtotal[r] = 0;
        for (size_t m = 0; m < c->nnodes; m++)
            if (c->alive[m] && TOT(c, r, m) > c->maxtotal[r])
                c->maxtotal[r] = TOT(c, r, m);
    }
}

size_t sched_node_lost(sched_cluster_t *c, int node, uint64_t *ids, size_t max)
{
    sched_cluster_sync(c);
    if (node < 0 || (size_t)node >= c->nnodes || !c->alive[node])
        return 0;
    node_reset(c, node, false);
    size_t cnt = 0;
    for (size_t i = 0; i < c->placements.n; i++) {
        sched_placement_t *p = &c->placements.v[i];
        if (!p->id)
            continue;
        bool on = false;
        for (uint32_t a = 0; a < p->nallocs && !on; a++)
            on = sched__alloc(p, a)->node == node;
        if (!on)
            continue;
        if (cnt < max)
            ids[cnt] = p->id;
        cnt++;
        for (uint32_t a = 0; a < p->nallocs; a++)
            sched__give(c, sched__alloc(p, a));
        sched__placement_drop(c, p);
    }
    return cnt;
}

int sched_node_restore(sched_cluster_t *c, int node)
{
    sched_cluster_sync(c);
    if (node < 0 || (size_t)node >= c->nnodes)
        return CR_EINVAL;
    if (c->alive[node])
        return 0;
    node_reset(c, node, true);
    return 0;
}

int sched_node_cordon(sched_cluster_t *c, int node, bool on)
{
    sched_cluster_sync(c);
    if (node < 0 || (size_t)node >= c->nnodes || !c->alive[node])
        return CR_EINVAL;
    c->alive[node] = on ? SCHED_CORDONED : SCHED_ALIVE;
    return 0;
}

/* ---- candidates ---- */

/* The nodes a selector can match, from the label index: the smallest list
 * of an `=` or `in` term. Returns the count, with *list NULL meaning every
 * node. */
size_t sched__candidates(sched_cluster_t *c, const sched_selector_t *sel, int32_t *buf,
                         const int32_t **list)
{
    *list = NULL;
    size_t best = c->nnodes;
    int bt = -1;
    for (int i = 0; i < sel->n; i++) {
        const sched_term_t *t = &sel->t[i];
        if (t->op != SCHED_OP_EQ && t->op != SCHED_OP_IN)
            continue;
        size_t cnt = 0;
        for (int k = 0; k < t->nvals; k++) {
            const sched_lindex_t *e = sched__lindex_find(c, t->key, t->vals[k]);
            cnt += e ? e->n : 0;
        }
        if (cnt < best || bt < 0) {
            best = cnt;
            bt = i;
        }
    }
    if (bt < 0)
        return c->nnodes;
    const sched_term_t *t = &sel->t[bt];
    if (t->nvals == 1) {
        const sched_lindex_t *e = sched__lindex_find(c, t->key, t->vals[0]);
        *list = e ? &c->lindex_nodes[e->off] : buf;
        return e ? e->n : 0;
    }
    size_t cnt = 0;
    for (int k = 0; k < t->nvals; k++) {
        const sched_lindex_t *e = sched__lindex_find(c, t->key, t->vals[k]);
        if (e) {
            memcpy(buf + cnt, &c->lindex_nodes[e->off], e->n * sizeof(int32_t));
            cnt += e->n;
        }
    }
    *list = buf;
    return cnt;
}

/* ---- single-bundle policies ---- */

static int spread_thr(const sched_config_t *cfg);
static inline int score_thr(int thr, int mode, int u);

int sched__score(const sched_cluster_t *c, const sched_config_t *cfg, int mode, int n,
                 const sched_resreq_t *q)
{
    return score_thr(spread_thr(cfg), mode, sched__util_after(c, n, q));
}

size_t sched__sample_limit(const sched_cluster_t *c, const sched_config_t *cfg)
{
    if (cfg && cfg->max_scored > 0)
        return (size_t)cfg->max_scored;
    /* Like Kubernetes' percentageOfNodesToScore: in a big cluster, score a
     * rotating sample of feasible nodes rather than all of them: 1% of
     * them, at least SCHED_SAMPLE_MIN. Unlike it, the sample stops growing
     * at SCHED_SAMPLE_MAX (its adaptive percentage still scores 5% of
     * 100,000 nodes), so a decision costs the same at 13,000 nodes and at
     * 100,000; up to 12,800 nodes the sample is what it always was, which
     * keeps the packing and fragmentation `corral sim` reports on the
     * example traces. */
    if (c->nnodes <= 2 * SCHED_SAMPLE_MIN)
        return c->nnodes;
    size_t s = c->nnodes / 100;
    return s < SCHED_SAMPLE_MIN ? SCHED_SAMPLE_MIN : s > SCHED_SAMPLE_MAX ? SCHED_SAMPLE_MAX : s;
}

/* A request's rows in the arrays, looked up once per decision. */
typedef struct pickreq {
    int n;
    int rid[SCHED_REQ_MAX];
    int64_t qty[SCHED_REQ_MAX];
    const int64_t *tot[SCHED_REQ_MAX], *av[SCHED_REQ_MAX], *held[SCHED_REQ_MAX];
} pickreq_t;

/* Bits set in m, without the libgcc call __builtin_popcountll makes on
 * x86-64 without -mpopcnt. */
static inline int popc64(uint64_t m)
{
    m = m - ((m >> 1) & 0x5555555555555555ull);
    m = (m & 0x3333333333333333ull) + ((m >> 2) & 0x3333333333333333ull);
    m = (m + (m >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (int)((m * 0x0101010101010101ull) >> 56);
}

/* sched__fits_ever, sched__fits_now and sched__util_after in one pass, for
 * a node none of whose requested resources has devices of several units
 * or vendor rules (sn->slowmask), alive and not excluded: -2 when it can
 * never take the request, -1 when not now, else the utilization after
 * placing it, as sched__util_after gives it. The most used resource is
 * found by cross-multiplying (exact in 128 bits), so one division is made
 * where sched__util_after makes one per resource. */
static int fit_fast(const sched_cluster_t *c, int n, const sched_hot_t *hn, const pickreq_t *p,
                    bool use_hold)
{
    int res = 0;            /* -1 once a resource does not fit now */
    int64_t bu = 0, bt = 1; /* the largest used / total so far */
    for (int k = 0; k < p->n; k++) {
        int64_t qty = p->qty[k], t = p->tot[k][n];
        if (t < qty)
            return -2; /* never, whatever else does not fit now */
        if (res)
            continue;
        int r = p->rid[k];
        int64_t h = use_hold && p->held[k] ? p->held[k][n] : 0, av = p->av[k][n];
        if (av - h < qty) {
            res = -1;
            continue;
        }
        /* the node's devices of r: it has devices of one unit resource at
         * most here (those of two are in slowmask) */
        if (r == hn->devres) {
            uint64_t fm = c->freemask[n] & hn->devmask;
            /* whole devices wanted: the request's, and those held */
            int64_t want = (qty >= CR_QTY_ONE ? qty / CR_QTY_ONE : 1) +
                           (h ? (h + CR_QTY_ONE - 1) / CR_QTY_ONE : 0);
            if (want == 1 ? !fm : popc64(fm) < want) {
                bool ok = false;
                /* a fraction fits a shared device with room */
                for (uint64_t s = qty < CR_QTY_ONE ? hn->devmask & ~c->freemask[n] : 0; s && !ok;
                     s &= s - 1)
                    ok = c->devfree[c->nodes.v[n].dev_off + __builtin_ctzll(s)] >= qty;
                if (!ok) {
                    res = -1;
                    continue;
                }
            }
        }
        int64_t used = t - av + qty;
        if ((sched_sum_t)used * bt > (sched_sum_t)bu * t) {
            bu = used;
            bt = t;
        }
    }
    if (res)
        return res;
    return bu <= INT64_MAX / 1000 ? (int)(bu * 1000 / bt) : (int)((sched_sum_t)bu * 1000 / bt);
}

static int spread_thr(const sched_config_t *cfg)
{
    return (cfg && cfg->spread_threshold_pct > 0 ? cfg->spread_threshold_pct : 50) * 10;
}

static inline int score_thr(int thr, int mode, int u)
{
    switch (mode) {
    case SCORE_HYBRID:
        return u <= thr ? 1000 + u : 1000 - u;
    case SCORE_SPREAD:
        return 1000 - u;
    default:
        return 1000 + u; /* SCORE_PACK: most used first */
    }
}

/* A cordoned node in the scan: 1 when it could ever take b (so that b
 * waits rather than being refused), out of the scan's loop. */
__attribute__((noinline, cold)) static int cordoned_ever(sched_cluster_t *c, int n,
                                                         const sched_bundle_t *b)
{
    return (!b->sel.n || sched_selector_match(c, &b->sel, n)) && sched__fits_ever(c, n, &b->req);
}

int sched__pick(sched_cluster_t *c, const sched_config_t *cfg, sched_rng_t *rng,
                const sched_bundle_t *b, int mode, bool use_hold, const uint8_t *exclude,
                const int32_t *within, size_t nwithin, int *ever)
{
    int topk = cfg && cfg->top_k > 1 ? cfg->top_k : 1;
    if (topk > 16)
        topk = 16;
    int kn[16], ks[16], nk = 0;
    const int32_t *list;
    size_t cnt = within ? nwithin : sched__candidates(c, &b->sel, c->scratch2, &list);
    if (within)
        list = within;
    uint32_t rm = sched__reqmask(&b->req);
    size_t limit = sched__sample_limit(c, cfg), found = 0;
    /* hybrid starts at the node it chose last (packing sticks), spread
     * just after it (ties rotate) */
    size_t start = list || !cnt ? 0 : (c->cursor + (mode == SCORE_SPREAD)) % cnt;
    /* The free-capacity index: a node whose free quantity of a requested
     * resource is below the request's bit length cannot take it now, and
     * is passed over on a byte per resource, without its record (in a
     * cluster 60% full most nodes next to the last choice are full). It
     * counts what is free beside held capacity, so only where holds
     * count. It never passes over a node that fits, so the nodes scored,
     * and the choice, are those of a scan without it. One resource is
     * looked at, a device resource where the request names one (devices
     * run out first), which costs a byte compare per node. */
    const uint8_t *lv = NULL;
    uint8_t need = 0;
    int kf = 0;
    while (kf < b->req.n - 1 && !sched_resource_is_unit(b->req.id[kf]))
        kf++;
    if (!sched_resource_is_unit(b->req.id[kf]))
        kf = 0;
    size_t lvs = (size_t)c->nres; /* node-major: a node's levels lie together */
    if (use_hold && b->req.n && b->req.id[kf] < c->nres) {
        lv = &c->freelvl[b->req.id[kf]];
        need = sched__level(b->req.qty[kf]);
    }
    pickreq_t pr = {.n = b->req.n};
    bool fast = true;
    for (int k = 0; k < b->req.n; k++) {
        int r = b->req.id[k];
        if (r >= c->nres) {
            fast = false;
            break;
        }
        pr.rid[k] = r;
        pr.qty[k] = b->req.qty[k];
        pr.tot[k] = &c->total[(size_t)r * c->nnodes];
        pr.av[k] = &c->avail[(size_t)r * c->nnodes];
        /* no cell held anywhere: nothing to read (held is then all 0) */
        pr.held[k] = c->nheld ? &c->held[(size_t)r * c->nnodes] : NULL;
    }
    int thr = spread_thr(cfg);
    size_t passed = 0;
    /* The scan moves on from where the last decision landed, so the nodes
     * up to where the last whole-cluster scan stopped were read by it and
     * are in the cache; the new ones, a few dozen, come after it, where
     * each would wait for memory. Ask for the SCHED_PREFETCH nodes after
     * that point now (a cache line of each row), so that they arrive
     * while the scan goes over the nodes it read before. */
#if SCHED_PREFETCH
    if (!list && cnt >= 2 * SCHED_PREFETCH) {
        size_t f0 = c->scan_end + 1 < cnt ? c->scan_end + 1 : 0;
        for (size_t f = f0; f < f0 + SCHED_PREFETCH && f + 8 <= cnt; f += 8) {
            __builtin_prefetch(&c->hot[f]);
            __builtin_prefetch(&c->hot[f + 4]);
            __builtin_prefetch(&c->freemask[f]);
            for (int k = 0; k < pr.n && fast; k++) {
                __builtin_prefetch(&pr.tot[k][f]);
                __builtin_prefetch(&pr.av[k][f]);
            }
            if (lv)
                __builtin_prefetch(&lv[f * lvs]);
        }
    }
#endif
    *ever = 0;
    size_t i;
    for (i = 0; i < cnt; i++) {
        size_t j = start + i;
        if (j >= cnt)
            j -= cnt;
        int n = list ? list[j] : (int)j;
        if (lv && lv[(size_t)n * lvs] < need) {
            passed++;
            continue;
        }
        const sched_hot_t *hn = &c->hot[n];
        if ((rm & ~hn->resmask) || !c->alive[n] || (exclude && exclude[n]))
            continue;
        if (__builtin_expect(c->alive[n] != SCHED_ALIVE, 0)) {
            *ever += cordoned_ever(c, n, b); /* not now, but it may take it again */
            continue;
        }
        if (b->sel.n && !sched_selector_match(c, &b->sel, n))
            continue;
        int s;
        if (fast && !(rm & hn->slowmask)) {
            int u = fit_fast(c, n, hn, &pr, use_hold);
            if (u == -2)
                continue;
            (*ever)++;
            if (u < 0)
                continue;
            s = score_thr(thr, mode, u);
        } else {
            if (!sched__fits_ever(c, n, &b->req))
                continue;
            (*ever)++;
            if (!sched__fits_now(c, n, &b->req, use_hold))
                continue;
            s = sched__score(c, cfg, mode, n, &b->req);
        }
        int pos = nk;
        while (pos > 0 && ks[pos - 1] < s)
            pos--;
        if (pos < topk) {
            int last = nk < topk ? nk : topk - 1;
            for (int q = last; q > pos; q--) {
                kn[q] = kn[q - 1];
                ks[q] = ks[q - 1];
            }
            kn[pos] = n;
            ks[pos] = s;
            if (nk < topk)
                nk++;
            /* the best so far is likely the one taken: its description
             * (device groups, device offset), which the scan no longer
             * reads, is asked for while the scan goes on */
            if (pos == 0) {
                __builtin_prefetch(&c->nodes.v[n]);
                __builtin_prefetch((const char *)&c->nodes.v[n] + sizeof(sched_node_t) - 1);
            }
        }
        if (++found >= limit)
            break;
    }
    if (!list && cnt)
        c->scan_end = (uint32_t)((start + (i < cnt ? i : cnt - 1)) % cnt);
    if (!nk && passed) {
        /* nothing fits now: count the nodes that could ever take it among
         * those the index passed over too, so that RETRY and INFEASIBLE
         * stay exact */
        *ever = 0;
        for (size_t m = 0; m < cnt; m++) {
            int n = list ? list[m] : (int)m;
            if (!(rm & ~c->nodes.v[n].resmask) && c->alive[n] && !(exclude && exclude[n]) &&
                (!b->sel.n || sched_selector_match(c, &b->sel, n)) &&
                sched__fits_ever(c, n, &b->req))
                (*ever)++;
        }
    }
    if (!nk)
        return -1;
    int pick = nk > 1 && rng ? (int)(sched_rng_next(rng) % (uint64_t)nk) : 0;
    return kn[pick];
}

/* ---- explanations ---- */

static void fmt_q(const sched_cluster_t *c, int r, int64_t q, char *buf, size_t size)
{
    char v[48];
    sched_format_qty(r, q, v, sizeof(v));
    sched__fmt(buf, size, "%s=%s", sched_syms_name(&c->res, r), v);
}

/* Why no node can take bundle b (ever, or now), for a person. */
/* Why node n's vendor rules refuse want (a request of resource r). */
static void rules_why(const sched_cluster_t *c, int n, int r, const char *want, char *out,
                      size_t size)
{
    const sched_node_t *sn = &c->nodes.v[n];
    const char *name = sched_node_name(c, n);
    if (sn->nset && sn->set_res == r) {
        char sizes[64] = "";
        size_t len = 0;
        uint64_t seen = 0;
        const uint64_t *g = &c->groups.v[sn->group_off + sn->nisland + sn->nnuma];
        for (int i = 0; i < sn->nset; i++) {
            int pc = __builtin_popcountll(g[i]);
            if (!g[i] || (seen >> pc & 1))
                continue;
            seen |= 1ull << pc;
            len += (size_t)snprintf(sizes + len, len < sizeof(sizes) ? sizeof(sizes) - len : 0,
                                    "%s%d", len ? ", " : "", pc);
        }
        sched__fmt(out, size,
                   "%s on %s: its vendor runs more than one of these devices in one process only "
                   "as one of its module sets (of %s devices); ask for 1 or a set's size",
                   want, name, len ? sizes : "none left whole");
        return;
    }
    int whole = __builtin_popcountll(sn->unitmask[r] & ~sn->solomask);
    sched__fmt(out, size,
               "%s on %s: its %d MIG instances go one to a worker and never beside a whole GPU "
               "(NVIDIA's MIG user guide), and it has %d whole GPU%s",
               want, name, __builtin_popcountll(sn->unitmask[r] & sn->solomask), whole,
               whole == 1 ? "" : "s");
}

void sched__explain(sched_cluster_t *c, const sched_bundle_t *b, bool now, bool use_hold, char *out,
                    size_t size)
{
    for (int k = 0; k < b->req.n; k++) {
        int r = b->req.id[k];
        if (r >= c->nres || c->sumtotal[r] == 0) {
            sched__fmt(out, size, "no node offers %s", sched_syms_name(&c->res, r));
            return;
        }
    }
    size_t match = 0, cordoned = 0;
    int closest = -1, closest_k = 0, a_cordoned = -1;
    int64_t best_ratio = -1;
    int64_t maxtot[SCHED_REQ_MAX];
    int maxnode[SCHED_REQ_MAX];
    for (int k = 0; k < SCHED_REQ_MAX; k++) {
        maxtot[k] = -1;
        maxnode[k] = -1;
    }
    for (size_t n = 0; n < c->nnodes; n++) {
        if (!c->alive[n] || (b->sel.n && !sched_selector_match(c, &b->sel, (int)n)))
            continue;
        match++;
        for (int k = 0; k < b->req.n; k++) {
            int64_t t = b->req.id[k] < c->nres ? TOT(c, b->req.id[k], n) : 0;
            if (t > maxtot[k]) {
                maxtot[k] = t;
                maxnode[k] = (int)n;
            }
        }
        if (!now || !sched__fits_ever(c, (int)n, &b->req))
            continue;
        if (c->alive[n] == SCHED_CORDONED) {
            if (!cordoned++)
                a_cordoned = (int)n;
            continue;
        }
        /* closeness: the worst requested resource's free share */
        int64_t ratio = INT64_MAX;
        int worst = 0;
        for (int k = 0; k < b->req.n; k++) {
            int r = b->req.id[k];
            int64_t a = AV(c, r, n) - (use_hold ? HELD(c, r, n) : 0);
            int64_t v = (int64_t)((sched_sum_t)(a < 0 ? 0 : a) * 1000 / b->req.qty[k]);
            if (v < ratio) {
                ratio = v;
                worst = k;
            }
        }
        if (ratio > best_ratio) {
            best_ratio = ratio;
            closest = (int)n;
            closest_k = worst;
        }
    }
    cr_buf_t sel = {0};
    if (b->sel.n)
        sched_format_selector(&c->labels, &b->sel, &sel);
    if (!match) {
        if (b->sel.n)
            sched__fmt(out, size, "no alive node matches selector %s", sel.s);
        else
            sched__fmt(out, size, "no alive node");
        goto out;
    }
    char want[80], have[80];
    if (!now) {
        for (int k = 0; k < b->req.n; k++) {
            if (maxtot[k] >= b->req.qty[k])
                continue;
            fmt_q(c, b->req.id[k], b->req.qty[k], want, sizeof(want));
            fmt_q(c, b->req.id[k], maxtot[k], have, sizeof(have));
            sched__fmt(out, size, "no node%s%s has %s in total: the largest, %s, has %s",
                       b->sel.n ? " matching " : "", b->sel.n ? sel.s : "", want,
                       sched_node_name(c, maxnode[k]), have);
            goto out;
        }
        /* a node with enough in total but devices of several units, or
         * whose vendor's rules keep the request from it */
        for (size_t n = 0; n < c->nnodes; n++) {
            if (!c->alive[n] || (b->sel.n && !sched_selector_match(c, &b->sel, (int)n)))
                continue;
            for (int k = 0; k < b->req.n; k++) {
                int r = b->req.id[k];
                if (r >= c->nres || TOT(c, r, n) < b->req.qty[k])
                    continue;
                if (!sched__granule_ok(c, (int)n, r, b->req.qty[k])) {
                    sched__fmt(out, size, "%s requests on %s must be whole devices of %d %s",
                               sched_syms_name(&c->res, r), sched_node_name(c, (int)n),
                               sched__units(&c->nodes.v[n], r),
                               r == SCHED_R_NEURON_CORES ? "cores" : "units");
                    goto out;
                }
                if (rules_refuse(c, (int)n, r, b->req.qty[k])) {
                    fmt_q(c, r, b->req.qty[k], want, sizeof(want));
                    rules_why(c, (int)n, r, want, out, size);
                    goto out;
                }
            }
        }
        cr_buf_t all = {0};
        sched_format_resources(&c->res, &b->req, &all);
        sched__fmt(out, size, "no single node%s%s has all of %s", b->sel.n ? " matching " : "",
                   b->sel.n ? sel.s : "", all.s);
        cr_buf_free(&all);
        goto out;
    }
    if (closest < 0 && cordoned == 1) {
        sched__fmt(out, size,
                   "the node that could take it, %s, is cordoned: its agent is not connected (it "
                   "takes work again once back)",
                   sched_node_name(c, a_cordoned));
        goto out;
    }
    if (closest < 0 && cordoned) {
        sched__fmt(out, size,
                   "the %zu nodes that could take it (%s, ...) are cordoned: their agents are not "
                   "connected (they take work again once back)",
                   cordoned, sched_node_name(c, a_cordoned));
        goto out;
    }
    if (closest < 0) {
        sched__fmt(out, size, "no node can take it now");
        goto out;
    }
    int r = b->req.id[closest_k];
    int64_t a = AV(c, r, closest);
    fmt_q(c, r, b->req.qty[closest_k], want, sizeof(want));
    fmt_q(c, r, a, have, sizeof(have));
    if (use_hold && HELD(c, r, closest) > 0 && a >= b->req.qty[closest_k])
        sched__fmt(out, size,
                   "%s wanted; the closest node, %s, has %s free but held for a "
                   "waiting gang",
                   want, sched_node_name(c, closest), have);
    else if (a >= b->req.qty[closest_k])
        sched__fmt(out, size,
                   "%s wanted; the closest node, %s, has %s free but not on whole "
                   "devices",
                   want, sched_node_name(c, closest), have);
    else
        sched__fmt(out, size, "no node has %s free now: the closest, %s, has %s free", want,
                   sched_node_name(c, closest), have);
out:
    cr_buf_free(&sel);
}

/* ---- the entry point ---- */

static int result(sched_result_t *out, sched_status_t st)
{
    out->status = st;
    return 0;
}

int sched__schedule_one(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                        sched_rng_t *rng, bool use_hold, sched_result_t *out)
{
    const sched_bundle_t *b = &req->bundles[0];
    int ever = 0, n = -1;
    if (req->policy == SCHED_NODE_AFFINITY) {
        int a = req->affinity_node;
        if (a < 0 || (size_t)a >= c->nnodes) {
            sched__fmt(out->reason, sizeof(out->reason), "node affinity: no node %d", a);
            if (!req->affinity_soft)
                return result(out, SCHED_INFEASIBLE);
        } else if (!sched__fits_ever(c, a, &b->req) ||
                   (b->sel.n && !sched_selector_match(c, &b->sel, a))) {
            if (!req->affinity_soft) {
                if (!c->alive[a])
                    sched__fmt(out->reason, sizeof(out->reason), "node affinity: node %s is lost",
                               sched_node_name(c, a));
                else {
                    char why[200];
                    sched_bundle_t one = *b;
                    sched_selector_t s;
                    s.n = 1;
                    s.t[0] =
                        (sched_term_t){.key = sched_syms_find(&c->labels, "corral.io/node-id", 17),
                                       .op = SCHED_OP_EQ,
                                       .nvals = 1,
                                       .vals = {c->nodes.v[a].name}};
                    one.sel = s;
                    sched__explain(c, &one, false, use_hold, why, sizeof(why));
                    sched__fmt(out->reason, sizeof(out->reason), "node affinity to %s: %s",
                               sched_node_name(c, a), why);
                }
                return result(out, SCHED_INFEASIBLE);
            }
        } else if (c->alive[a] == SCHED_ALIVE && sched__fits_now(c, a, &b->req, use_hold)) {
            n = a;
        } else if (!req->affinity_soft && c->alive[a] == SCHED_CORDONED) {
            sched__fmt(out->reason, sizeof(out->reason),
                       "node affinity to %s: it is cordoned (its agent is not connected)",
                       sched_node_name(c, a));
            return result(out, SCHED_RETRY);
        } else if (!req->affinity_soft) {
            char why[200];
            sched_bundle_t one = *b;
            one.sel.n = 1;
            one.sel.t[0] =
                (sched_term_t){.key = sched_syms_find(&c->labels, "corral.io/node-id", 17),
                               .op = SCHED_OP_EQ,
                               .nvals = 1,
                               .vals = {c->nodes.v[a].name}};
            sched__explain(c, &one, true, use_hold, why, sizeof(why));
            sched__fmt(out->reason, sizeof(out->reason), "node affinity to %s: %s",
                       sched_node_name(c, a), why);
            return result(out, SCHED_RETRY);
        }
    }
    if (n < 0) {
        /* cheap answers first: no alive node is big enough, or the whole
         * cluster has too little free */
        bool now_short = false;
        for (int k = 0; k < b->req.n; k++) {
            int r = b->req.id[k];
            if (r >= c->nres || c->maxtotal[r] < b->req.qty[k]) {
                sched__explain(c, b, false, use_hold, out->reason, sizeof(out->reason));
                return result(out, SCHED_INFEASIBLE);
            }
            now_short |= c->sumavail[r] < b->req.qty[k];
        }
        if (now_short && !b->sel.n && cfg && cfg->quiet)
            return result(out, SCHED_RETRY);
        n = sched__pick(c, cfg, rng, b, req->policy == SCHED_SPREAD ? SCORE_SPREAD : SCORE_HYBRID,
                        use_hold, NULL, NULL, 0, &ever);
    }
    if (n < 0) {
        if (ever == 0 || !cfg || !cfg->quiet)
            sched__explain(c, b, ever > 0, use_hold, out->reason, sizeof(out->reason));
        return result(out, ever > 0 ? SCHED_RETRY : SCHED_INFEASIBLE);
    }
    sched_alloc_t al;
    if (sched__take(c, n, &b->req, &al)) {
        sched__fmt(out->reason, sizeof(out->reason),
                   "internal: node %s passed the check but "
                   "its devices did not",
                   sched_node_name(c, n));
        return result(out, SCHED_RETRY);
    }
    sched_placement_t *p = sched__placement_new(c, 1);
    p->one = al;
    c->cursor = (uint32_t)n;
    out->placement = p->id;
    out->reason[0] = '\0';
    return result(out, SCHED_OK);
}

int sched__validate(const sched_cluster_t *c, const sched_request_t *req, char *msg, size_t size)
{
    if (!c->final) {
        sched__fmt(msg, size, "the cluster view is not finalized");
        return CR_EINVAL;
    }
    if (req->tpu.on) {
        if (req->tpu.nslices < 1 || req->tpu.nslices > 4096) {
            sched__fmt(msg, size, "a TPU slice group needs 1 to 4096 slices");
            return CR_EINVAL;
        }
        if (req->tpu.chips_per_host <= 0 ||
            sched_check_unit_qty(SCHED_R_TPU, (int64_t)req->tpu.chips_per_host * CR_QTY_ONE, msg,
                                 size)) {
            sched__fmt(msg, size, "chips per host must be 1, 2, 4 or 8");
            return CR_EINVAL;
        }
        if (req->tpu.topo.chips <= 0 || req->tpu.topo.chips % req->tpu.chips_per_host) {
            sched__fmt(msg, size, "topology of %d chips is not a whole number of %d-chip hosts",
                       req->tpu.topo.chips, req->tpu.chips_per_host);
            return CR_EINVAL;
        }
        return 0;
    }
    if (req->nbundles == 0 || !req->bundles) {
        sched__fmt(msg, size, "a request needs at least one bundle");
        return CR_EINVAL;
    }
    if (req->nbundles > SCHED_MAX_BUNDLES) {
        sched__fmt(msg, size, "more than %d bundles", SCHED_MAX_BUNDLES);
        return CR_EINVAL;
    }
    for (uint32_t i = 0; i < req->nbundles; i++) {
        const sched_resreq_t *q = &req->bundles[i].req;
        if (q->n > SCHED_REQ_MAX) {
            sched__fmt(msg, size, "bundle %u: too many resources", i);
            return CR_EINVAL;
        }
        for (int k = 0; k < q->n; k++) {
            if (q->qty[k] <= 0 || q->id[k] >= SCHED_MAX_RES) {
                sched__fmt(msg, size, "bundle %u: quantity of %s must be positive", i,
                           sched_syms_name(&c->res, q->id[k]));
                return CR_EINVAL;
            }
            for (int j = 0; j < k; j++)
                if (q->id[j] == q->id[k]) {
                    sched__fmt(msg, size, "bundle %u: %s given twice", i,
                               sched_syms_name(&c->res, q->id[k]));
                    return CR_EINVAL;
                }
            char why[128];
            if (sched_check_unit_qty(q->id[k], q->qty[k], why, sizeof(why))) {
                sched__fmt(msg, size, "bundle %u: %s", i, why);
                return CR_EINVAL;
            }
        }
    }
    return 0;
}

int sched_schedule(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                   sched_rng_t *rng, sched_result_t *out)
{
    return sched__schedule(c, cfg, req, rng, true, out);
}

int sched__schedule(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                    sched_rng_t *rng, bool use_hold, sched_result_t *out)
{
    out->placement = 0;
    out->reason[0] = '\0';
    sched_cluster_sync(c);
    int rc = sched__validate(c, req, out->reason, sizeof(out->reason));
    if (rc) {
        out->status = SCHED_INFEASIBLE;
        return rc;
    }
    if (req->tpu.on)
        return sched__place_tpu(c, cfg, req, rng, use_hold, out);
    if (req->nbundles == 1 && req->domain_key < 0)
        return sched__schedule_one(c, cfg, req, rng, use_hold, out);
    return sched__place_group(c, cfg, req, rng, use_hold, out);
}

uint64_t *sched_fill_gpus(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                          sched_rng_t *rng, unsigned percent, size_t *n)
{
    size_t target = (size_t)(c->sumtotal[SCHED_R_GPU] / CR_QTY_ONE) * percent / 100;
    uint64_t *live = cr_malloc((target + 1) * sizeof(*live));
    size_t nlive = 0;
    while (nlive < target) {
        sched_result_t out;
        sched_schedule(c, cfg, req, rng, &out);
        if (out.status != SCHED_OK)
            break;
        live[nlive++] = out.placement;
    }
    *n = nlive;
    return live;
}
