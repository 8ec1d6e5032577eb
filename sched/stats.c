/* Cluster-wide figures for `corral sim`: utilization and fragmentation. */
#include "sched_int.h"

int sched_used_permille(const sched_cluster_t *c, int rid)
{
    sched__sync(c);
    if (rid < 0 || rid >= c->nres || c->sumtotal[rid] <= 0)
        return 0;
    return (int)((c->sumtotal[rid] - c->sumavail[rid]) * 1000 / c->sumtotal[rid]);
}

static bool tpu_slice_free(const sched_cluster_t *c, const sched_request_t *r, int s)
{
    const sched_slice_t *sl = &c->slices.v[s];
    int hosts = r->tpu.topo.chips / r->tpu.chips_per_host;
    if (sl->nworkers != hosts || sl->topo.chips != r->tpu.topo.chips)
        return false;
    sched_resreq_t q = {
        .n = 1, .id = {SCHED_R_TPU}, .qty = {(int64_t)r->tpu.chips_per_host * CR_QTY_ONE}};
    for (int w = 0; w < hosts; w++) {
        int n = sl->worker_node[w];
        if (n < 0 || c->alive[n] != SCHED_ALIVE || !sched__fits_now(c, n, &q, false))
            return false;
    }
    return true;
}

size_t sched_fragmentation(const sched_cluster_t *c, const sched_request_t *const *pending,
                           size_t npending, size_t *free_devices)
{
    sched__sync(c);
    size_t frag = 0, nfree = 0;
    for (size_t n = 0; n < c->nnodes; n++) {
        if (!c->alive[n])
            continue;
        const sched_node_t *sn = &c->nodes.v[n];
        int f = __builtin_popcountll(c->freemask[n]);
        if (!f)
            continue;
        nfree += (size_t)f;
        bool usable = false;
        for (size_t p = 0; p < npending && !usable; p++) {
            const sched_request_t *r = pending[p];
            if (r->tpu.on) {
                usable = sn->slice >= 0 && tpu_slice_free(c, r, sn->slice);
                continue;
            }
            for (uint32_t b = 0; b < r->nbundles && !usable; b++)
                usable =
                    sched__fits_now(c, (int)n, &r->bundles[b].req, false) &&
                    (!r->bundles[b].sel.n || sched_selector_match(c, &r->bundles[b].sel, (int)n));
        }
        if (!usable)
            frag += (size_t)f;
    }
    *free_devices = nfree;
    return frag;
}
