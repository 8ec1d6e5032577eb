/* Taking given allocations exactly: a restarted head re-reserves what its
 * running workers already hold (the node and devices recorded in
 * state.db), instead of deciding again and landing elsewhere. */
#include "sched_int.h"

/* The bit of node n's device with hardware index hw, or -1. */
static int dev_bit(const sched_cluster_t *c, int n, int hw)
{
    const sched_node_t *sn = &c->nodes.v[n];
    for (int b = 0; b < sn->ndev; b++)
        if (c->dev.v[sn->dev_off + b].hw_index == hw)
            return b;
    return -1;
}

/* Fills al for node n, request q and the devices devs (hardware indices);
 * CR_EAGAIN when they are not free now, CR_EINVAL when they do not match
 * the request. Takes nothing. */
static int exact_alloc(const sched_cluster_t *c, int n, const sched_resreq_t *q, const int *devs,
                       size_t ndevs, sched_alloc_t *al)
{
    const sched_node_t *sn = &c->nodes.v[n];
    memset(al, 0, sizeof(*al));
    al->node = n;
    al->req = *q;
    uint64_t given = 0;
    for (size_t i = 0; i < ndevs; i++) {
        int b = dev_bit(c, n, devs[i]);
        if (b < 0)
            return CR_EINVAL;
        given |= 1ull << b;
    }
    uint64_t used = 0;
    for (int k = 0; k < q->n; k++) {
        int r = q->id[k];
        if (AV(c, r, n) < q->qty[k])
            return CR_EAGAIN;
        if (r >= SCHED_R_PREDEFINED || !sn->unitmask[r])
            continue;
        uint64_t m = given & sn->unitmask[r];
        if (q->qty[k] >= CR_QTY_ONE) {
            int64_t dev = (int64_t)sched__units(sn, r) * CR_QTY_ONE;
            if (__builtin_popcountll(m) != (int)(q->qty[k] / dev))
                return CR_EINVAL;
            if ((m & c->freemask[n]) != m)
                return CR_EAGAIN;
        } else {
            if (__builtin_popcountll(m) != 1)
                return CR_EINVAL;
            if (c->devfree[sn->dev_off + __builtin_ctzll(m)] < q->qty[k])
                return CR_EAGAIN;
        }
        al->mask[k] = m;
        used |= m;
    }
    return used == given ? 0 : CR_EINVAL;
}

static void take(sched_cluster_t *c, const sched_alloc_t *al)
{
    int n = al->node;
    const sched_node_t *sn = &c->nodes.v[n];
    for (int k = 0; k < al->req.n; k++) {
        int r = al->req.id[k];
        AV(c, r, n) -= al->req.qty[k];
        c->sumavail[r] -= al->req.qty[k];
        for (uint64_t s = al->mask[k]; s; s &= s - 1) {
            int b = __builtin_ctzll(s);
            c->devfree[sn->dev_off + b] -=
                al->req.qty[k] >= CR_QTY_ONE ? CR_QTY_ONE : (int32_t)al->req.qty[k];
            c->freemask[n] &= ~(1ull << b);
        }
    }
    sched__lvl_node(c, n);
}

int sched_take_exact(sched_cluster_t *c, uint32_t nallocs, const sched_exact_t *allocs,
                     uint64_t *id)
{
    if (nallocs == 0)
        return CR_EINVAL;
    sched_cluster_sync(c);
    sched_alloc_t *tmp = cr_calloc(nallocs, sizeof(*tmp));
    int err = 0;
    uint32_t taken = 0;
    for (; taken < nallocs; taken++) {
        const sched_exact_t *x = &allocs[taken];
        if (x->node < 0 || (size_t)x->node >= c->nnodes || !c->alive[x->node]) {
            err = CR_EINVAL;
            break;
        }
        if ((err = exact_alloc(c, x->node, &x->req, x->devs, x->ndevs, &tmp[taken])) < 0)
            break;
        take(c, &tmp[taken]); /* later allocations see this one taken */
    }
    if (err < 0) {
        while (taken > 0)
            sched__give(c, &tmp[--taken]);
        free(tmp);
        return err;
    }
    sched_placement_t *p = sched__placement_new(c, nallocs);
    if (nallocs == 1)
        p->one = tmp[0];
    else
        memcpy(p->allocs, tmp, nallocs * sizeof(*tmp));
    free(tmp);
    *id = p->id;
    return 0;
}
