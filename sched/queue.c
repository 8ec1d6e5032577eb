/* The queue: pending requests by priority, then age. A gang (a group of
 * several bundles, or a TPU slice group) that has waited past hold_after
 * gets the capacity it needs held for it: it picks its target nodes as if
 * they were empty, and from then on other work may use only what is left
 * on those nodes beyond the gang's need. As running work finishes, the
 * freed capacity stays for the gang until it fits. */
#include "sched_int.h"
#include <stdio.h>

void sched_queue_init(sched_queue_t *q, int64_t hold_after)
{
    memset(q, 0, sizeof(*q));
    q->hold_after = hold_after;
}

static void hold_apply(sched_cluster_t *c, const sched_qentry_t *e, int sign)
{
    for (uint32_t i = 0; i < e->nhold; i++) {
        const sched_alloc_t *a = &e->hold[i];
        for (int k = 0; k < a->req.n; k++) {
            int64_t *h = &HELD(c, a->req.id[k], a->node);
            c->nheld -= *h != 0;
            *h += sign * a->req.qty[k];
            c->nheld += *h != 0;
        }
        sched__lvl_node(c, a->node);
    }
}

static void entry_fini(sched_queue_t *q, sched_cluster_t *c, sched_qentry_t *e)
{
    CR_UNUSED(q);
    if (e->nhold && c)
        hold_apply(c, e, -1);
    free(e->hold);
    free(e->req.bundles);
    memset(e, 0, sizeof(*e));
}

void sched_queue_fini(sched_queue_t *q, sched_cluster_t *c)
{
    for (size_t i = 0; i < q->q.n; i++)
        entry_fini(q, c, &q->q.v[i]);
    CR_VEC_FREE(&q->q);
}

int sched_queue_push(sched_queue_t *q, uint64_t key, int priority, int64_t now,
                     const sched_request_t *req)
{
    if (!req->tpu.on && (req->nbundles == 0 || req->nbundles > SCHED_MAX_BUNDLES))
        return CR_EINVAL;
    sched_qentry_t *e = CR_VEC_PUSH(&q->q);
    e->key = key;
    e->priority = priority;
    e->seq = q->seq++;
    e->enqueued = now;
    e->req = *req;
    if (!req->tpu.on) {
        e->req.bundles = cr_malloc(req->nbundles * sizeof(sched_bundle_t));
        memcpy(e->req.bundles, req->bundles, req->nbundles * sizeof(sched_bundle_t));
    } else {
        e->req.bundles = NULL;
        e->req.nbundles = 0;
    }
    return 0;
}

size_t sched_queue_len(const sched_queue_t *q)
{
    return q->q.n;
}

static int cmp_entry(const void *a, const void *b)
{
    const sched_qentry_t *x = a, *y = b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static bool is_gang(const sched_request_t *r)
{
    return r->tpu.on || r->nbundles > 1;
}

/* Where the gang would go if its candidate nodes were empty: the capacity
 * view is the cluster with every alive node free, other holds kept. */
static void hold_start(sched_cluster_t *c, const sched_config_t *cfg, sched_qentry_t *e)
{
    sched_cluster_sync(c); /* before the copies: the decision must not relayout */
    size_t cells = (size_t)c->nres * c->nnodes;
    int64_t *av = cr_malloc((cells ? cells : 1) * sizeof(int64_t));
    int32_t *df = cr_malloc((c->dev.n ? c->dev.n : 1) * sizeof(int32_t));
    uint64_t *fm = cr_malloc((c->nnodes ? c->nnodes : 1) * sizeof(uint64_t));
    sched_sum_t sa[SCHED_MAX_RES];
    memcpy(av, c->avail, cells * sizeof(int64_t));
    memcpy(df, c->devfree, c->dev.n * sizeof(int32_t));
    memcpy(fm, c->freemask, c->nnodes * sizeof(uint64_t));
    memcpy(sa, c->sumavail, sizeof(sa));
    uint32_t cursor = c->cursor;
    for (size_t n = 0; n < c->nnodes; n++) {
        if (!c->alive[n])
            continue;
        const sched_node_t *sn = &c->nodes.v[n];
        for (int r = 0; r < c->nres; r++)
            AV(c, r, n) = TOT(c, r, n);
        c->freemask[n] = 0;
        for (int b = 0; b < sn->ndev; b++) {
            c->devfree[sn->dev_off + b] = CR_QTY_ONE;
            c->freemask[n] |= 1ull << b;
        }
    }
    sched__lvl_all(c);
    sched_result_t res;
    sched__schedule(c, cfg, &e->req, NULL, true, &res);
    if (res.status == SCHED_OK) {
        const sched_placement_t *p = sched_placement_get(c, res.placement);
        e->nhold = p->nallocs;
        e->hold = cr_malloc(p->nallocs * sizeof(sched_alloc_t));
        for (uint32_t i = 0; i < p->nallocs; i++)
            e->hold[i] = *sched__alloc(p, i);
        sched__placement_drop(c, (sched_placement_t *)p);
    }
    memcpy(c->avail, av, cells * sizeof(int64_t));
    memcpy(c->devfree, df, c->dev.n * sizeof(int32_t));
    memcpy(c->freemask, fm, c->nnodes * sizeof(uint64_t));
    memcpy(c->sumavail, sa, sizeof(sa));
    sched__lvl_all(c);
    c->cursor = cursor;
    free(av);
    free(df);
    free(fm);
    if (e->nhold)
        hold_apply(c, e, +1);
    e->holding = true;
}

/* A request's shape: requests of one shape fail alike within a pass,
 * since a pass only takes resources. */
static uint64_t shape_hash(const sched_request_t *r)
{
    uint64_t h = 1469598103934665603ull;
#define MIX(x) (h = (h ^ (uint64_t)(x)) * 1099511628211ull)
    MIX(r->nbundles);
    MIX(r->policy);
    MIX(r->affinity_node);
    MIX(r->affinity_soft);
    MIX(r->strategy);
    MIX(r->domain_key);
    MIX(r->tpu.on);
    if (r->tpu.on) {
        MIX(r->tpu.gen);
        MIX(r->tpu.topo.chips);
        for (int i = 0; i < r->tpu.topo.ndims; i++)
            MIX(r->tpu.topo.dims[i]);
        MIX(r->tpu.chips_per_host);
        MIX(r->tpu.nslices);
        for (int k = 0; k < r->tpu.extra.n; k++) {
            MIX(r->tpu.extra.id[k]);
            MIX(r->tpu.extra.qty[k]);
        }
    }
    for (uint32_t b = 0; b < r->nbundles; b++) {
        const sched_bundle_t *bd = &r->bundles[b];
        for (int k = 0; k < bd->req.n; k++) {
            MIX(bd->req.id[k]);
            MIX(bd->req.qty[k]);
        }
        for (int t = 0; t < bd->sel.n; t++) {
            MIX(bd->sel.t[t].key);
            MIX(bd->sel.t[t].op);
            for (int v = 0; v < bd->sel.t[t].nvals; v++)
                MIX(bd->sel.t[t].vals[v]);
        }
    }
#undef MIX
    return h;
}

size_t sched_queue_run(sched_queue_t *q, sched_cluster_t *c, const sched_config_t *cfg,
                       sched_rng_t *rng, int64_t now, sched_queue_cb cb, void *ctx)
{
    sched_cluster_sync(c);
    qsort(q->q.v, q->q.n, sizeof(sched_qentry_t), cmp_entry);
    size_t placed = 0, w = 0;
    uint64_t failed[32];
    int nfailed = 0;
    for (size_t i = 0; i < q->q.n; i++) {
        sched_qentry_t *e = &q->q.v[i];
        sched_result_t res;
        uint64_t shape = 0;
        if (!e->holding) {
            shape = shape_hash(&e->req);
            bool skip = false;
            for (int k = 0; k < nfailed && !skip; k++)
                skip = failed[k] == shape;
            if (skip && !(is_gang(&e->req) && now - e->enqueued >= q->hold_after)) {
                q->q.v[w++] = *e;
                continue;
            }
        }
        if (q->on_decision)
            q->on_decision(q->on_decision_ctx);
        q->decisions++;
        /* a holding gang may use what is held for it, and only that */
        if (e->nhold)
            hold_apply(c, e, -1);
        sched__schedule(c, cfg, &e->req, rng, true, &res);
        if (e->nhold)
            hold_apply(c, e, +1);
        if (res.status == SCHED_RETRY && is_gang(&e->req) && !e->holding &&
            now - e->enqueued >= q->hold_after)
            hold_start(c, cfg, e);
        if (res.status == SCHED_RETRY) {
            if (!e->holding && nfailed < (int)CR_ARRAY_SIZE(failed))
                failed[nfailed++] = shape;
            q->q.v[w++] = *e;
            continue;
        }
        placed += res.status == SCHED_OK;
        if (cb)
            cb(ctx, e->key, &res);
        entry_fini(q, c, e);
    }
    q->q.n = w;
    if (q->on_decision)
        q->on_decision(q->on_decision_ctx);
    return placed;
}
