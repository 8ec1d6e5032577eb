/* Placement groups: bundles placed all or nothing with a strategy, an
 * optional domain constraint (every bundle inside one value of a label),
 * and TPU slice groups (one bundle per host of whole slices). */
#include "sched_int.h"
#include <stdio.h>

static const char *strategy_name[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};

typedef struct gctx {
    sched_cluster_t *c;
    const sched_config_t *cfg;
    const sched_request_t *req;
    sched_rng_t *rng;
    bool use_hold;
    uint32_t *order;       /* bundles, scarcest resource first */
    sched_alloc_t *allocs; /* by bundle index */
    const int32_t *within; /* domain nodes, NULL: all */
    size_t nwithin;
    uint32_t failed; /* the bundle that did not fit */
} gctx_t;

/* A bundle's weight: its largest share of a cluster-wide total. */
static int64_t scarcity(const sched_cluster_t *c, const sched_resreq_t *q)
{
    int64_t w = 0;
    for (int k = 0; k < q->n; k++) {
        int r = q->id[k];
        sched_sum_t t = r < c->nres ? c->sumtotal[r] : 0;
        int64_t v = t > 0 ? (int64_t)((sched_sum_t)q->qty[k] * 1000000 / t) : INT64_MAX / 2;
        if (v > w)
            w = v;
    }
    return w;
}

static void order_bundles(const sched_cluster_t *c, const sched_request_t *req, uint32_t *order)
{
    uint32_t n = req->nbundles;
    int64_t *w = cr_malloc(n * sizeof(int64_t));
    for (uint32_t i = 0; i < n; i++) {
        order[i] = i;
        w[i] = scarcity(c, &req->bundles[i].req);
    }
    /* insertion sort on ties keeps bundle order: stable and deterministic */
    for (uint32_t i = 1; i < n; i++) {
        uint32_t x = order[i];
        uint32_t j = i;
        while (j > 0 && w[order[j - 1]] < w[x]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    free(w);
}

/* Sums the bundles' requests; false when they name too many resources. */
static bool aggregate(const sched_request_t *req, sched_resreq_t *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (uint32_t i = 0; i < req->nbundles; i++) {
        const sched_resreq_t *q = &req->bundles[i].req;
        for (int k = 0; k < q->n; k++) {
            int j = 0;
            while (j < sum->n && sum->id[j] != q->id[k])
                j++;
            if (j == sum->n) {
                if (sum->n == SCHED_REQ_MAX)
                    return false;
                sum->id[sum->n++] = q->id[k];
            }
            if (q->qty[k] > INT64_MAX - sum->qty[j])
                return false;
            sum->qty[j] += q->qty[k];
        }
    }
    return true;
}

static void undo(gctx_t *g, uint32_t placed)
{
    while (placed > 0) {
        uint32_t b = g->order[--placed];
        sched__give(g->c, &g->allocs[b]);
        g->c->mark[g->allocs[b].node] = 0;
    }
}

static bool all_selectors(const sched_cluster_t *c, const sched_request_t *req, int n)
{
    for (uint32_t i = 0; i < req->nbundles; i++)
        if (req->bundles[i].sel.n && !sched_selector_match(c, &req->bundles[i].sel, n))
            return false;
    return true;
}

/* STRICT_PACK: every bundle on the one node that fits them all best. */
static bool place_strict_pack(gctx_t *g)
{
    sched_cluster_t *c = g->c;
    sched_resreq_t sum;
    if (!aggregate(g->req, &sum))
        return false;
    size_t cnt = g->within ? g->nwithin : c->nnodes;
    /* one selector for all bundles (the usual case): the sampled pick */
    bool same_sel = true;
    for (uint32_t i = 1; i < g->req->nbundles && same_sel; i++)
        same_sel =
            memcmp(&g->req->bundles[i].sel, &g->req->bundles[0].sel, sizeof(sched_selector_t)) == 0;
    sched_bundle_t agg = {.req = sum, .sel = g->req->bundles[0].sel};
    for (int attempt = 0; attempt < 4; attempt++) {
        int best = -1, bests = -1, ever;
        if (same_sel)
            best = sched__pick(c, g->cfg, NULL, &agg, SCORE_HYBRID, g->use_hold, c->mark, g->within,
                               g->nwithin, &ever);
        else
            for (size_t i = 0; i < cnt; i++) {
                int n = g->within ? g->within[i] : (int)i;
                if (c->alive[n] != SCHED_ALIVE || c->mark[n] ||
                    !sched__fits_now(c, n, &sum, g->use_hold) || !all_selectors(c, g->req, n))
                    continue;
                int sc = sched__score(c, g->cfg, SCORE_HYBRID, n, &sum);
                if (sc > bests) {
                    bests = sc;
                    best = n;
                }
            }
        if (best < 0)
            break;
        uint32_t placed = 0;
        for (; placed < g->req->nbundles; placed++) {
            uint32_t b = g->order[placed];
            if (sched__take(c, best, &g->req->bundles[b].req, &g->allocs[b]))
                break;
        }
        if (placed == g->req->nbundles)
            return true;
        while (placed > 0) {
            uint32_t b = g->order[--placed];
            sched__give(c, &g->allocs[b]);
        }
        c->mark[best] = 2; /* devices did not line up: try the next node */
    }
    return false;
}

static bool place_each(gctx_t *g)
{
    sched_cluster_t *c = g->c;
    sched_strategy_t st = g->req->strategy;
    uint32_t placed = 0;
    for (; placed < g->req->nbundles; placed++) {
        uint32_t b = g->order[placed];
        const sched_bundle_t *bd = &g->req->bundles[b];
        int n = -1, ever;
        if (st == SCHED_PACK) {
            /* the nodes this group already uses come first */
            for (uint32_t p = 0; p < placed && n < 0; p++) {
                int m = g->allocs[g->order[p]].node;
                if (sched__fits_now(c, m, &bd->req, g->use_hold) &&
                    (!bd->sel.n || sched_selector_match(c, &bd->sel, m)))
                    n = m;
            }
            if (n < 0)
                n = sched__pick(c, g->cfg, g->rng, bd, SCORE_PACK, g->use_hold, NULL, g->within,
                                g->nwithin, &ever);
        } else {
            n = sched__pick(c, g->cfg, g->rng, bd, SCORE_SPREAD, g->use_hold, c->mark, g->within,
                            g->nwithin, &ever);
            if (n < 0 && st == SCHED_SPREAD_PG)
                n = sched__pick(c, g->cfg, g->rng, bd, SCORE_SPREAD, g->use_hold, NULL, g->within,
                                g->nwithin, &ever);
        }
        if (n < 0 || sched__take(c, n, &bd->req, &g->allocs[b])) {
            g->failed = b;
            undo(g, placed);
            return false;
        }
        c->mark[n] = 1;
    }
    for (uint32_t p = 0; p < placed; p++)
        c->mark[g->allocs[p].node] = 0;
    return true;
}

static bool place_in(gctx_t *g)
{
    bool ok;
    if (g->req->strategy == SCHED_STRICT_PACK || g->req->strategy == SCHED_PACK) {
        ok = place_strict_pack(g);
        /* clear the nodes strict pack skipped */
        if (!g->within)
            memset(g->c->mark, 0, g->c->nnodes);
        else
            for (size_t i = 0; i < g->nwithin; i++)
                g->c->mark[g->within[i]] = 0;
        if (ok || g->req->strategy == SCHED_STRICT_PACK)
            return ok;
    }
    return place_each(g);
}

/* Could the group ever fit within the nodes of g (ignoring what is used)? */
static bool same_req(const sched_resreq_t *a, const sched_resreq_t *b)
{
    if (a->n != b->n)
        return false;
    for (int k = 0; k < a->n; k++)
        if (a->id[k] != b->id[k] || a->qty[k] != b->qty[k])
            return false;
    return true;
}

/* How many bundles of q node n could hold were it empty (a bound: whole
 * devices can only lower it). */
static int64_t node_capacity(const sched_cluster_t *c, int n, const sched_resreq_t *q)
{
    int64_t cap = INT64_MAX;
    for (int k = 0; k < q->n; k++) {
        int64_t fit = q->id[k] < c->nres ? TOT(c, q->id[k], n) / q->qty[k] : 0;
        if (fit < cap)
            cap = fit;
    }
    return cap;
}

/* The whole group against the total of the alive nodes, every bundle
 * fitting somewhere being not enough (nine one-GPU bundles on one 8-GPU
 * node): for bundles that are all alike, how many the nodes could hold
 * at once; for mixed ones, their sum against the sum of the totals. Both
 * are bounds, so a group refused here can never be placed as the cluster
 * stands; one that passes may still not be (bin packing decides). */
static bool fits_capacity(gctx_t *g, char *why, size_t size)
{
    sched_cluster_t *c = g->c;
    const sched_request_t *req = g->req;
    size_t cnt = g->within ? g->nwithin : c->nnodes;
    bool alike = true;
    for (uint32_t b = 1; b < req->nbundles && alike; b++)
        alike = same_req(&req->bundles[b].req, &req->bundles[0].req);
    if (alike) {
        const sched_bundle_t *b0 = &req->bundles[0];
        int64_t room = 0;
        size_t nodes = 0;
        for (size_t i = 0; i < cnt && room < req->nbundles; i++) {
            int n = g->within ? g->within[i] : (int)i;
            if (!c->alive[n] || (b0->sel.n && !sched_selector_match(c, &b0->sel, n)))
                continue;
            int64_t cap = node_capacity(c, n, &b0->req);
            if (cap > 0)
                nodes++;
            room += req->strategy == SCHED_STRICT_SPREAD && cap > 1 ? 1 : cap;
        }
        if (room >= req->nbundles)
            return true;
        cr_buf_t r = {0};
        sched_format_resources(&c->res, &b0->req, &r);
        sched__fmt(why, size,
                   "%u bundles of %s never fit at once: the %zu alive node(s) that can take one "
                   "hold at most %lld in total",
                   req->nbundles, r.s ? r.s : "-", nodes, (long long)room);
        cr_buf_free(&r);
        return false;
    }
    sched_resreq_t sum;
    if (!aggregate(req, &sum))
        return true; /* too many names to sum: leave it to placement */
    for (int k = 0; k < sum.n; k++) {
        int r = sum.id[k];
        int64_t tot = 0;
        for (size_t i = 0; i < cnt && r < c->nres; i++) {
            int n = g->within ? g->within[i] : (int)i;
            if (c->alive[n] && __builtin_add_overflow(tot, TOT(c, r, n), &tot))
                tot = INT64_MAX;
        }
        if (tot < sum.qty[k]) {
            char want[48], have[48];
            sched_format_qty(r, sum.qty[k], want, sizeof(want));
            sched_format_qty(r, tot, have, sizeof(have));
            sched__fmt(why, size, "the bundles need %s=%s in all; the alive nodes have %s",
                       sched_syms_name(&c->res, r), want, have);
            return false;
        }
    }
    return true;
}

static bool ever_fits(gctx_t *g, char *why, size_t size)
{
    sched_cluster_t *c = g->c;
    const sched_request_t *req = g->req;
    size_t cnt = g->within ? g->nwithin : c->nnodes;
    if (req->strategy == SCHED_STRICT_PACK) {
        sched_resreq_t sum;
        if (aggregate(req, &sum))
            for (size_t i = 0; i < cnt; i++) {
                int n = g->within ? g->within[i] : (int)i;
                if (sched__fits_ever(c, n, &sum) && all_selectors(c, req, n))
                    return true;
            }
        cr_buf_t b = {0};
        sched_format_resources(&c->res, &sum, &b);
        sched__fmt(why, size, "STRICT_PACK needs one node with %s", b.s);
        cr_buf_free(&b);
        return false;
    }
    size_t distinct = 0;
    for (size_t i = 0; i < cnt; i++) {
        int n = g->within ? g->within[i] : (int)i;
        bool any = false;
        for (uint32_t b = 0; b < req->nbundles && !any; b++)
            any = sched__fits_ever(c, n, &req->bundles[b].req) &&
                  (!req->bundles[b].sel.n || sched_selector_match(c, &req->bundles[b].sel, n));
        distinct += any;
    }
    for (uint32_t b = 0; b < req->nbundles; b++) {
        bool any = false;
        for (size_t i = 0; i < cnt && !any; i++) {
            int n = g->within ? g->within[i] : (int)i;
            any = sched__fits_ever(c, n, &req->bundles[b].req) &&
                  (!req->bundles[b].sel.n || sched_selector_match(c, &req->bundles[b].sel, n));
        }
        if (!any) {
            char e[200];
            sched__explain(c, &req->bundles[b], false, false, e, sizeof(e));
            sched__fmt(why, size, "bundle %u: %s", b, e);
            return false;
        }
    }
    if (req->strategy == SCHED_STRICT_SPREAD && distinct < req->nbundles) {
        sched__fmt(why, size, "STRICT_SPREAD needs %u distinct nodes; only %zu can take a bundle",
                   req->nbundles, distinct);
        return false;
    }
    return fits_capacity(g, why, size);
}

static int group_result(gctx_t *g, sched_result_t *out)
{
    sched_placement_t *p = sched__placement_new(g->c, g->req->nbundles);
    if (g->req->nbundles == 1)
        p->one = g->allocs[0];
    else
        memcpy(p->allocs, g->allocs, g->req->nbundles * sizeof(sched_alloc_t));
    out->placement = p->id;
    out->status = SCHED_OK;
    return 0;
}

/* The domains of a key: each value's nodes, in the label index. */
typedef struct dom {
    uint32_t ix; /* lindex entry */
    int64_t leftover;
} dom_t;

static int place_domains(gctx_t *g, sched_result_t *out)
{
    sched_cluster_t *c = g->c;
    const sched_request_t *req = g->req;
    size_t nd;
    const sched_lindex_t *first = sched__lindex_key(c, req->domain_key, &nd);
    const char *key = sched_syms_name(&c->labels, req->domain_key);
    if (!first) {
        sched__fmt(out->reason, sizeof(out->reason), "no node has the label %s", key);
        out->status = SCHED_INFEASIBLE;
        return 0;
    }
    sched_resreq_t sum;
    if (!aggregate(req, &sum)) {
        sched__fmt(out->reason, sizeof(out->reason),
                   "the group names more than 8 resources, or its total is too large");
        out->status = SCHED_INFEASIBLE;
        return 0;
    }
    /* the scarcest resource decides which domain fits best */
    int key_k = 0;
    int64_t keyw = -1;
    for (int k = 0; k < sum.n; k++) {
        int r = sum.id[k];
        sched_sum_t t = r < c->nres ? c->sumtotal[r] : 0;
        int64_t w = t > 0 ? (int64_t)((sched_sum_t)sum.qty[k] * 1000000 / t) : INT64_MAX;
        if (w > keyw) {
            keyw = w;
            key_k = k;
        }
    }
    dom_t *doms = cr_malloc(nd * sizeof(dom_t));
    size_t nok = 0, never = 0;
    int64_t best_total = -1, best_free = -1;
    size_t best_total_d = 0, best_free_d = 0;
    for (size_t d = 0; d < nd; d++) {
        const sched_lindex_t *e = first + d;
        /* 64-bit sums that saturate: only the ranking uses them */
        int64_t tot[SCHED_REQ_MAX], av[SCHED_REQ_MAX];
        for (int k = 0; k < sum.n; k++)
            tot[k] = av[k] = 0;
        for (uint32_t i = 0; i < e->n; i++) {
            int n = c->lindex_nodes[e->off + i];
            if (!c->alive[n])
                continue;
            for (int k = 0; k < sum.n; k++) {
                int r = sum.id[k];
                if (r >= c->nres)
                    continue;
                if (__builtin_add_overflow(tot[k], TOT(c, r, n), &tot[k]))
                    tot[k] = INT64_MAX;
                int64_t a = c->alive[n] != SCHED_ALIVE
                                ? 0 /* cordoned: nothing now */
                                : AV(c, r, n) - (g->use_hold ? HELD(c, r, n) : 0);
                if (a > 0 && __builtin_add_overflow(av[k], a, &av[k]))
                    av[k] = INT64_MAX;
            }
        }
        bool ever = true, now = true;
        for (int k = 0; k < sum.n; k++) {
            ever &= tot[k] >= sum.qty[k];
            now &= av[k] >= sum.qty[k];
        }
        if (tot[key_k] > best_total) {
            best_total = tot[key_k];
            best_total_d = d;
        }
        if (ever) {
            never++;
            if (av[key_k] > best_free) {
                best_free = av[key_k];
                best_free_d = d;
            }
        }
        if (ever && now)
            doms[nok++] = (dom_t){(uint32_t)(e - c->lindex), av[key_k] - sum.qty[key_k]};
    }
    /* best fit: least leftover first, so that bigger domains stay whole */
    for (size_t i = 1; i < nok; i++) {
        dom_t x = doms[i];
        size_t j = i;
        while (j > 0 && doms[j - 1].leftover > x.leftover) {
            doms[j] = doms[j - 1];
            j--;
        }
        doms[j] = x;
    }
    for (size_t i = 0; i < nok; i++) {
        const sched_lindex_t *e = &c->lindex[doms[i].ix];
        g->within = &c->lindex_nodes[e->off];
        g->nwithin = e->n;
        if (place_in(g)) {
            free(doms);
            return group_result(g, out);
        }
    }
    free(doms);
    char want[80], have[80];
    char v[48];
    sched_format_qty(sum.id[key_k], sum.qty[key_k], v, sizeof(v));
    sched__fmt(want, sizeof(want), "%s=%s", sched_syms_name(&c->res, sum.id[key_k]), v);
    if (!never) {
        sched_format_qty(sum.id[key_k], best_total, v, sizeof(v));
        sched__fmt(have, sizeof(have), "%s=%s", sched_syms_name(&c->res, sum.id[key_k]), v);
        sched__fmt(out->reason, sizeof(out->reason),
                   "no %s domain is large enough for %s: the largest, %s, has %s in total", key,
                   want, sched_syms_name(&c->labels, first[best_total_d].val), have);
        out->status = SCHED_INFEASIBLE;
        return 0;
    }
    sched_format_qty(sum.id[key_k], best_free, v, sizeof(v));
    sched__fmt(have, sizeof(have), "%s=%s", sched_syms_name(&c->res, sum.id[key_k]), v);
    sched__fmt(out->reason, sizeof(out->reason),
               "no %s domain has room for the group (%s) now: the closest, %s, has %s free", key,
               want, sched_syms_name(&c->labels, first[best_free_d].val), have);
    out->status = SCHED_RETRY;
    return 0;
}

int sched__place_group(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                       sched_rng_t *rng, bool use_hold, sched_result_t *out)
{
    gctx_t g = {.c = c, .cfg = cfg, .req = req, .rng = rng, .use_hold = use_hold};
    g.order = cr_malloc(req->nbundles * sizeof(uint32_t));
    g.allocs = cr_calloc(req->nbundles, sizeof(sched_alloc_t));
    order_bundles(c, req, g.order);
    int rc = 0;
    if (req->domain_key >= 0) {
        rc = place_domains(&g, out);
        goto out;
    }
    if (place_in(&g)) {
        rc = group_result(&g, out);
        goto out;
    }
    char why[200];
    if (!ever_fits(&g, why, sizeof(why))) {
        sched__fmt(out->reason, sizeof(out->reason), "%s group of %u bundles: %s",
                   strategy_name[req->strategy], req->nbundles, why);
        out->status = SCHED_INFEASIBLE;
        goto out;
    }
    if (req->strategy == SCHED_STRICT_PACK) {
        sched_resreq_t sum;
        aggregate(req, &sum);
        sched_bundle_t one = {.req = sum};
        sched__explain(c, &one, true, use_hold, why, sizeof(why));
    } else {
        sched__explain(c, &req->bundles[g.failed], true, use_hold, why, sizeof(why));
    }
    sched__fmt(out->reason, sizeof(out->reason), "%s group of %u bundles, bundle %u: %s",
               strategy_name[req->strategy], req->nbundles, g.failed, why);
    out->status = SCHED_RETRY;
out:
    free(g.order);
    free(g.allocs);
    return rc;
}

/* ---- TPU slice groups ---- */

static bool same_topo(const sched_tpu_topo_t *a, const sched_tpu_topo_t *b)
{
    if (a->ndims != b->ndims)
        return false;
    for (int i = 0; i < a->ndims; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

static void topo_str(const sched_tpu_topo_t *t, char *buf, size_t size)
{
    if (t->ndims == 3)
        sched__fmt(buf, size, "%dx%dx%d", t->dims[0], t->dims[1], t->dims[2]);
    else
        sched__fmt(buf, size, "%dx%d", t->dims[0], t->dims[1]);
}

int sched__place_tpu(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                     sched_rng_t *rng, bool use_hold, sched_result_t *out)
{
    CR_UNUSED(cfg);
    CR_UNUSED(rng);
    int hosts = req->tpu.topo.chips / req->tpu.chips_per_host;
    int nslices = req->tpu.nslices;
    sched_resreq_t q = req->tpu.extra;
    char topo[32], gen[48] = "";
    topo_str(&req->tpu.topo, topo, sizeof(topo));
    if (req->tpu.gen >= 0)
        sched__fmt(gen, sizeof(gen), " (%s)", sched_syms_name(&c->labels, req->tpu.gen));
    int k = 0;
    while (k < q.n && q.id[k] != SCHED_R_TPU)
        k++;
    if (k == q.n) {
        if (q.n == SCHED_REQ_MAX) {
            sched__fmt(out->reason, sizeof(out->reason), "too many resources per host");
            out->status = SCHED_INFEASIBLE;
            return CR_EINVAL;
        }
        q.n++;
    }
    q.id[k] = SCHED_R_TPU;
    q.qty[k] = (int64_t)req->tpu.chips_per_host * CR_QTY_ONE;

    const char *genname = req->tpu.gen >= 0 ? sched_syms_name(&c->labels, req->tpu.gen) : NULL;
    int32_t *chosen = cr_malloc((size_t)nslices * sizeof(int32_t));
    int nchosen = 0, nmatch = 0, best = -1, bestfree = -1, rc = 0;
    int32_t last_type = -1;
    bool last_ok = false;
    for (size_t s = 0; s < c->slices.n && nchosen < nslices; s++) {
        const sched_slice_t *sl = &c->slices.v[s];
        if (!same_topo(&sl->topo, &req->tpu.topo) || sl->nworkers != hosts)
            continue;
        if (genname && sl->accel_type != last_type) {
            /* slices share a few accelerator types: compare strings once */
            last_type = sl->accel_type;
            last_ok = cr_str_has_prefix(sched_syms_name(&c->labels, sl->accel_type), genname);
        }
        if (genname && !last_ok)
            continue;
        nmatch++;
        int nfree = 0;
        for (int w = 0; w < hosts; w++) {
            int n = sl->worker_node[w];
            if (n >= 0 && c->alive[n] == SCHED_ALIVE && sched__fits_now(c, n, &q, use_hold))
                nfree++;
        }
        if (nfree == hosts)
            chosen[nchosen++] = (int32_t)s;
        else if (nfree > bestfree) {
            bestfree = nfree;
            best = (int)s;
        }
    }
    if (nchosen < nslices) {
        /* count all matching slices, to tell INFEASIBLE from RETRY */
        int total = 0;
        for (size_t s = 0; s < c->slices.n; s++) {
            const sched_slice_t *sl = &c->slices.v[s];
            if (same_topo(&sl->topo, &req->tpu.topo) && sl->nworkers == hosts &&
                (!genname ||
                 cr_str_has_prefix(sched_syms_name(&c->labels, sl->accel_type), genname)))
                total++;
        }
        out->status = total < nslices ? SCHED_INFEASIBLE : SCHED_RETRY;
        if (total == 0)
            sched__fmt(out->reason, sizeof(out->reason),
                       "no slice of topology %s%s with %d hosts of %d chips in the cluster", topo,
                       gen, hosts, req->tpu.chips_per_host);
        else if (total < nslices)
            sched__fmt(out->reason, sizeof(out->reason),
                       "%d slices of topology %s%s wanted; the cluster has %d", nslices, topo, gen,
                       total);
        else if (nslices == 1)
            sched__fmt(out->reason, sizeof(out->reason),
                       "no free slice of topology %s%s: slice %s has %d of %d hosts free", topo,
                       gen, sched_syms_name(&c->labels, c->slices.v[best].name), bestfree, hosts);
        else
            sched__fmt(out->reason, sizeof(out->reason),
                       "%d of %d slices of topology %s%s free; the next best, %s, has %d of %d "
                       "hosts free",
                       nchosen, nslices, topo, gen,
                       best >= 0 ? sched_syms_name(&c->labels, c->slices.v[best].name) : "-",
                       bestfree < 0 ? 0 : bestfree, hosts);
        goto out;
    }
    uint32_t nb = (uint32_t)(nslices * hosts);
    sched_placement_t *p = sched__placement_new(c, nb);
    sched_alloc_t *al = nb == 1 ? &p->one : p->allocs;
    uint32_t done = 0;
    for (int s = 0; s < nslices; s++)
        for (int w = 0; w < hosts; w++, done++)
            if (sched__take(c, c->slices.v[chosen[s]].worker_node[w], &q, &al[done]))
                goto undo;
    out->placement = p->id;
    out->status = SCHED_OK;
    goto out;
undo:
    while (done > 0)
        sched__give(c, &al[--done]);
    sched__placement_drop(c, p);
    sched__fmt(out->reason, sizeof(out->reason), "internal: a free slice's chips did not line up");
    out->status = SCHED_RETRY;
out:
    free(chosen);
    return rc;
}
