/* The cluster view: node descriptions reduced to what placement needs,
 * in flat arrays indexed by dense ids, plus the per-label index of nodes
 * and the TPU slices. Built once; afterwards only the dynamic state
 * (free resources, free devices, holds, placements) changes. */
#include "sched_int.h"
#include <stdio.h>

sched_cluster_t *sched_cluster_new(void)
{
    sched_cluster_t *c = cr_calloc(1, sizeof(*c));
    sched_resources_init(&c->res);
    sched_syms_init(&c->labels);
    c->next_id = 1;
    return c;
}

void sched_cluster_free(sched_cluster_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->placements.n; i++)
        free(c->placements.v[i].allocs);
    CR_VEC_FREE(&c->placements);
    for (size_t i = 0; i < c->slices.n; i++)
        free(c->slices.v[i].worker_node);
    CR_VEC_FREE(&c->slices);
    CR_VEC_FREE(&c->nodes);
    CR_VEC_FREE(&c->lab);
    CR_VEC_FREE(&c->dev);
    CR_VEC_FREE(&c->groups);
    CR_VEC_FREE(&c->init_total);
    CR_VEC_FREE(&c->free_slots);
    free(c->total);
    free(c->lindex);
    free(c->lindex_nodes);
    free(c->avail);
    free(c->held);
    free(c->devfree);
    free(c->freemask);
    free(c->alive);
    free(c->sumavail);
    free(c->sumtotal);
    free(c->maxtotal);
    free(c->scratch);
    free(c->scratch2);
    free(c->mark);
    sched_syms_fini(&c->res);
    sched_syms_fini(&c->labels);
    free(c);
}

static int intern_label(sched_cluster_t *c, const char *s)
{
    return sched_syms_intern(&c->labels, s, strlen(s));
}

static void add_label(sched_cluster_t *c, sched_node_t *n, const char *k, const char *v)
{
    int key = intern_label(c, k);
    for (uint32_t i = 0; i < n->nlabels; i++)
        if (c->lab.v[n->label_off + i].key == key)
            return; /* the node's own label wins over a derived one */
    sched_label_t *l = CR_VEC_PUSH(&c->lab);
    l->key = key;
    l->val = intern_label(c, v);
    n->nlabels++;
}

static int cmp_label(const void *a, const void *b)
{
    const sched_label_t *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

static bool is_island(const char *kind)
{
    return strcmp(kind, "nvlink-island") == 0 || strcmp(kind, "xgmi-hive") == 0;
}

/* A physical GPU in MIG mode is not schedulable itself: its instances are. */
static bool schedulable(const cr_node_t *node, size_t i)
{
    const cr_device_t *d = &node->devices.v[i];
    if (d->health == CR_HEALTH_UNHEALTHY)
        return false;
    if (d->parent < 0 && d->mig_enabled)
        for (size_t k = 0; k < node->devices.n; k++)
            if (node->devices.v[k].parent == (int)i)
                return false;
    return true;
}

static int add_slice(sched_cluster_t *c, const cr_domain_t *d, int nidx, char *msg, size_t msz)
{
    int name = intern_label(c, d->name);
    sched_slice_t *s = NULL;
    for (size_t i = 0; i < c->slices.n; i++)
        if (c->slices.v[i].name == name)
            s = &c->slices.v[i];
    if (!s) {
        sched_tpu_topo_t topo;
        sched_err_t err;
        if (sched_parse_tpu_topology(d->topology, &topo, &err)) {
            sched__fmt(msg, msz, "TPU slice %s: topology '%s': %s", d->name, d->topology, err.msg);
            return CR_EINVAL;
        }
        if (d->worker_count <= 0 || d->worker_count > topo.chips) {
            sched__fmt(msg, msz, "TPU slice %s: worker count %d does not fit topology %s",
                     d->name, d->worker_count, d->topology);
            return CR_EINVAL;
        }
        s = CR_VEC_PUSH(&c->slices);
        s->name = name;
        s->accel_type = intern_label(c, d->accelerator_type);
        s->topo = topo;
        s->nworkers = d->worker_count;
        s->worker_node = cr_malloc((size_t)s->nworkers * sizeof(int32_t));
        for (int k = 0; k < s->nworkers; k++)
            s->worker_node[k] = -1;
    }
    if (d->worker_id < 0 || d->worker_id >= s->nworkers) {
        sched__fmt(msg, msz, "TPU slice %s: worker id %d outside 0..%d", d->name, d->worker_id,
                 s->nworkers - 1);
        return CR_EINVAL;
    }
    if (s->worker_node[d->worker_id] >= 0) {
        sched__fmt(msg, msz, "TPU slice %s: two hosts claim worker %d", d->name, d->worker_id);
        return CR_EINVAL;
    }
    s->worker_node[d->worker_id] = nidx;
    c->nodes.v[nidx].slice = (int32_t)(s - c->slices.v);
    c->nodes.v[nidx].slice_worker = d->worker_id;
    return 0;
}

int sched_cluster_add(sched_cluster_t *c, const cr_node_t *node, char *msg, size_t msgsize)
{
    if (c->final) {
        sched__fmt(msg, msgsize, "the cluster view is finalized");
        return CR_EINVAL;
    }
    const char *id = node->id[0] ? node->id : node->hostname;
    if (!id[0]) {
        sched__fmt(msg, msgsize, "node without id or hostname");
        return CR_EINVAL;
    }
    int name = intern_label(c, id);
    for (size_t i = 0; i < c->nodes.n; i++)
        if (c->nodes.v[i].name == name) {
            sched__fmt(msg, msgsize, "node %s added twice", id);
            return CR_EEXIST;
        }
    int64_t total[SCHED_MAX_RES] = {0};
    for (size_t i = 0; i < node->resources.n; i++) {
        const cr_resource_t *r = &node->resources.v[i];
        if (r->amount < 0) {
            sched__fmt(msg, msgsize, "node %s: negative amount of %s", id, r->name);
            return CR_EINVAL;
        }
        int rid = sched_syms_find(&c->res, r->name, strlen(r->name));
        if (rid < 0) {
            if (c->res.n >= SCHED_MAX_RES) {
                sched__fmt(msg, msgsize, "node %s: more than %d resource names", id, SCHED_MAX_RES);
                return CR_EINVAL;
            }
            rid = sched_syms_intern(&c->res, r->name, strlen(r->name));
        }
        total[rid] += r->amount;
    }

    size_t nidx = c->nodes.n, lab0 = c->lab.n, dev0 = c->dev.n, grp0 = c->groups.n;
    sched_node_t *n = CR_VEC_PUSH(&c->nodes);
    n->name = name;
    n->label_off = (uint32_t)lab0;
    n->dev_off = (uint32_t)dev0;
    n->group_off = (uint32_t)grp0;
    n->slice = -1;
    n->slice_worker = -1;
    for (size_t i = 0; i < node->labels.n; i++)
        add_label(c, n, node->labels.v[i].key, node->labels.v[i].value);
    add_label(c, n, "corral.io/node-id", id);

    /* tracked devices: one unit of a unit-instance resource each */
    int local[1024];
    int nlocal = 0;
    for (size_t i = 0; i < node->devices.n && i < CR_ARRAY_SIZE(local); i++) {
        const cr_device_t *d = &node->devices.v[i];
        local[i] = -1;
        int rid = sched_syms_find(&c->res, d->resource, strlen(d->resource));
        if (rid < 0 || !sched_resource_is_unit(rid) || !schedulable(node, i))
            continue;
        if (n->ndev == SCHED_MAX_DEV)
            break;
        sched_dev_t *sd = CR_VEC_PUSH(&c->dev);
        sd->res = (uint8_t)rid;
        sd->numa = (int8_t)(d->numa >= 0 && d->numa < 127 ? d->numa : -1);
        sd->island = -1;
        sd->x = sd->y = sd->z = -1;
        if (d->ncoords >= 2) {
            sd->x = (int16_t)d->coords[0];
            sd->y = (int16_t)d->coords[1];
            sd->z = (int16_t)(d->ncoords > 2 ? d->coords[2] : 0);
        }
        sd->hw_index = (int32_t)i;
        /* a Trainium device holds its NeuronCores: several units */
        sd->units = (uint8_t)(rid == SCHED_R_NEURON_CORES && d->cores > 1 && d->cores < 256
                                  ? d->cores : 1);
        local[i] = n->ndev;
        n->unitmask[rid] |= 1ull << n->ndev;
        n->ndev++;
        nlocal++;
    }
    /* A resource whose total is one unit per tracked device is tracked by
     * device; one whose total is the devices' units (NeuronCores counted per
     * core, the same number on each device) is tracked by whole devices of
     * that many units. Any other total is scheduled by count only. */
    for (int r = 0; r < SCHED_R_PREDEFINED; r++) {
        int cnt = __builtin_popcountll(n->unitmask[r]);
        if (!cnt || total[r] == (int64_t)cnt * CR_QTY_ONE)
            continue;
        int k = -1;
        for (uint64_t s = n->unitmask[r]; s; s &= s - 1) {
            int u = c->dev.v[dev0 + __builtin_ctzll(s)].units;
            k = k < 0 || k == u ? u : 0;
        }
        if (k > 1 && total[r] == (int64_t)cnt * k * CR_QTY_ONE) {
            n->unitsz[r] = (uint8_t)k;
            continue;
        }
        cr_debug("node %s: %s total does not match its %d devices; counted, not tracked",
                 id, c->res.str[r], cnt);
        n->unitmask[r] = 0;
    }
    /* device groups: NVLink islands / xGMI hives, then NUMA nodes */
    uint64_t tracked = 0;
    for (int r = 0; r < SCHED_R_PREDEFINED; r++)
        tracked |= n->unitmask[r];
    for (size_t i = 0; i < node->domains.n; i++) {
        const cr_domain_t *d = &node->domains.v[i];
        if (strcmp(d->kind, "tpu-slice") == 0) {
            int rc = add_slice(c, d, (int)nidx, msg, msgsize);
            if (rc)
                goto fail;
            char wid[16];
            sched__fmt(wid, sizeof(wid), "%d", d->worker_id);
            add_label(c, n, "corral.io/tpu-slice-name", d->name);
            /* the same labels the tpu backend sets on discovered hosts,
             * so that simulated and discovered nodes select alike */
            add_label(c, n, "corral.io/tpu-slice-worker-id", wid);
            add_label(c, n, "corral.io/tpu-slice-topology", d->topology);
            if (d->accelerator_type[0])
                add_label(c, n, "corral.io/tpu-slice-pod-type", d->accelerator_type);
            continue;
        }
        if (strcmp(d->kind, "nvlink-clique") == 0 || strcmp(d->kind, "rack") == 0) {
            add_label(c, n, d->kind[0] == 'r' ? "corral.io/rack" : "corral.io/nvlink-clique",
                      d->name);
            continue;
        }
        if (!is_island(d->kind))
            continue;
        uint64_t m = 0;
        for (size_t k = 0; k < d->nmembers; k++) {
            int hw = d->members[k];
            if (hw >= 0 && (size_t)hw < node->devices.n && hw < (int)CR_ARRAY_SIZE(local) &&
                local[hw] >= 0)
                m |= 1ull << local[hw];
        }
        m &= tracked;
        if (!m || n->nisland == 255)
            continue;
        for (int b = 0; b < n->ndev; b++)
            if (m >> b & 1)
                c->dev.v[dev0 + b].island = n->nisland;
        *CR_VEC_PUSH(&c->groups) = m;
        n->nisland++;
    }
    for (int b = 0; b < n->ndev; b++) {
        int numa = c->dev.v[dev0 + b].numa;
        if (numa < 0)
            continue;
        uint64_t m = 0;
        for (int k = 0; k < n->ndev; k++)
            if (c->dev.v[dev0 + k].numa == numa)
                m |= 1ull << k;
        bool dup = false;
        for (int g = 0; g < n->nnuma; g++)
            dup |= c->groups.v[grp0 + n->nisland + g] == m;
        if (!dup && n->nnuma < 255) {
            *CR_VEC_PUSH(&c->groups) = m;
            n->nnuma++;
        }
    }
    n = &c->nodes.v[nidx];
    qsort(&c->lab.v[lab0], n->nlabels, sizeof(sched_label_t), cmp_label);
    for (int r = 0; r < SCHED_MAX_RES; r++)
        if (total[r] > 0)
            n->resmask |= 1u << r;
    for (int r = 0; r < SCHED_MAX_RES; r++)
        *CR_VEC_PUSH(&c->init_total) = total[r];
    CR_UNUSED(nlocal);
    return 0;
fail:
    /* undo this node: the vectors only grew at their ends */
    c->nodes.n = nidx;
    c->lab.n = lab0;
    c->dev.n = dev0;
    c->groups.n = grp0;
    for (size_t i = 0; i < c->slices.n; i++)
        for (int k = 0; k < c->slices.v[i].nworkers; k++)
            if (c->slices.v[i].worker_node[k] == (int32_t)nidx)
                c->slices.v[i].worker_node[k] = -1;
    return CR_EINVAL;
}

typedef struct triple { int32_t key, val, node; } triple_t;

static int cmp_triple(const void *a, const void *b)
{
    const triple_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->val != y->val)
        return x->val < y->val ? -1 : 1;
    return x->node < y->node ? -1 : x->node > y->node;
}

int sched_cluster_finalize(sched_cluster_t *c)
{
    if (c->final)
        return CR_EINVAL;
    size_t nn = c->nodes.n;
    c->final = true;
    c->nnodes = nn;
    /* rows only for the resources some node has */
    int maxr = 0;
    for (size_t n = 0; n < nn; n++)
        for (int r = 0; r < SCHED_MAX_RES; r++)
            if (c->init_total.v[n * SCHED_MAX_RES + r] > 0 && r + 1 > maxr)
                maxr = r + 1;
    c->nres = maxr;
    size_t cells = (size_t)(maxr ? maxr : 1) * (nn ? nn : 1);
    /* SoA: the scan over nodes for one resource reads one contiguous row */
    c->total = cr_calloc(cells, sizeof(int64_t));
    c->avail = cr_calloc(cells, sizeof(int64_t));
    c->held = cr_calloc(cells, sizeof(int64_t));
    c->sumavail = cr_calloc(SCHED_MAX_RES, sizeof(sched_sum_t));
    c->sumtotal = cr_calloc(SCHED_MAX_RES, sizeof(sched_sum_t));
    c->maxtotal = cr_calloc(SCHED_MAX_RES, sizeof(int64_t));
    for (size_t n = 0; n < nn; n++)
        for (int r = 0; r < maxr; r++) {
            int64_t t = c->init_total.v[n * SCHED_MAX_RES + r];
            c->total[(size_t)r * nn + n] = c->avail[(size_t)r * nn + n] = t;
            c->sumavail[r] += t;
            c->sumtotal[r] += t;
            if (t > c->maxtotal[r])
                c->maxtotal[r] = t;
        }
    CR_VEC_FREE(&c->init_total);
    c->devfree = cr_malloc((c->dev.n ? c->dev.n : 1) * sizeof(int32_t));
    for (size_t d = 0; d < c->dev.n; d++)
        c->devfree[d] = CR_QTY_ONE;
    c->freemask = cr_calloc(nn ? nn : 1, sizeof(uint64_t));
    c->alive = cr_malloc(nn ? nn : 1);
    for (size_t n = 0; n < nn; n++) {
        const sched_node_t *sn = &c->nodes.v[n];
        for (int r = 0; r < SCHED_R_PREDEFINED; r++)
            c->freemask[n] |= sn->unitmask[r];
        c->alive[n] = 1;
    }
    c->scratch = cr_malloc((nn ? nn : 1) * sizeof(int32_t));
    c->scratch2 = cr_malloc((nn ? nn : 1) * sizeof(int32_t));
    c->mark = cr_calloc(nn ? nn : 1, 1);

    /* label index: (key, val) -> nodes, sorted */
    size_t nt = c->lab.n;
    triple_t *t = cr_malloc((nt ? nt : 1) * sizeof(*t));
    size_t k = 0;
    for (size_t n = 0; n < nn; n++)
        for (uint32_t i = 0; i < c->nodes.v[n].nlabels; i++) {
            const sched_label_t *l = &c->lab.v[c->nodes.v[n].label_off + i];
            t[k++] = (triple_t){l->key, l->val, (int32_t)n};
        }
    qsort(t, k, sizeof(*t), cmp_triple);
    c->lindex_nodes = cr_malloc((k ? k : 1) * sizeof(int32_t));
    c->lindex = cr_malloc((k ? k : 1) * sizeof(sched_lindex_t));
    c->nlindex = 0;
    for (size_t i = 0; i < k; i++) {
        if (!i || t[i].key != t[i - 1].key || t[i].val != t[i - 1].val)
            c->lindex[c->nlindex++] = (sched_lindex_t){t[i].key, t[i].val, (uint32_t)i, 0};
        c->lindex[c->nlindex - 1].n++;
        c->lindex_nodes[i] = t[i].node;
    }
    free(t);
    return 0;
}

const sched_lindex_t *sched__lindex_find(const sched_cluster_t *c, int key, int val)
{
    size_t lo = 0, hi = c->nlindex;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const sched_lindex_t *e = &c->lindex[mid];
        if (e->key < key || (e->key == key && e->val < val))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < c->nlindex && c->lindex[lo].key == key && c->lindex[lo].val == val)
        return &c->lindex[lo];
    return NULL;
}

/* The first index entry with this key (its values follow), or NULL. */
const sched_lindex_t *sched__lindex_key(const sched_cluster_t *c, int key, size_t *count)
{
    size_t lo = 0, hi = c->nlindex;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->lindex[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t e = lo;
    while (e < c->nlindex && c->lindex[e].key == key)
        e++;
    *count = e - lo;
    return e > lo ? &c->lindex[lo] : NULL;
}

int sched_cluster_find_node(const sched_cluster_t *c, const char *name)
{
    int id = sched_syms_find(&c->labels, name, strlen(name));
    if (id < 0)
        return -1;
    for (size_t i = 0; i < c->nodes.n; i++)
        if (c->nodes.v[i].name == id)
            return (int)i;
    return -1;
}

const char *sched_node_name(const sched_cluster_t *c, int n)
{
    return sched_syms_name(&c->labels, c->nodes.v[n].name);
}

int sched_node_label(const sched_cluster_t *c, int n, int key)
{
    const sched_node_t *sn = &c->nodes.v[n];
    const sched_label_t *l = &c->lab.v[sn->label_off];
    size_t lo = 0, hi = sn->nlabels;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (l[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sn->nlabels && l[lo].key == key ? l[lo].val : -1;
}

bool sched_selector_match(const sched_cluster_t *c, const sched_selector_t *sel, int n)
{
    for (int i = 0; i < sel->n; i++) {
        const sched_term_t *t = &sel->t[i];
        int v = sched_node_label(c, n, t->key);
        bool in = false;
        for (int k = 0; k < t->nvals; k++)
            in |= t->vals[k] == v;
        bool ok;
        switch (t->op) {
        case SCHED_OP_EQ:
        case SCHED_OP_IN: ok = v >= 0 && in; break;
        case SCHED_OP_NE:
        case SCHED_OP_NOTIN: ok = v < 0 || !in; break;
        case SCHED_OP_EXISTS: ok = v >= 0; break;
        default: ok = v < 0; break;
        }
        if (!ok)
            return false;
    }
    return true;
}

uint64_t sched_cluster_digest(const sched_cluster_t *c)
{
    uint64_t h = 1469598103934665603ull;
#define MIX(x) (h = (h ^ (uint64_t)(x)) * 1099511628211ull)
    size_t cells = (size_t)c->nres * c->nnodes;
    for (size_t i = 0; i < cells; i++) {
        MIX(c->avail[i]);
        MIX(c->held[i]);
    }
    for (size_t d = 0; d < c->dev.n; d++)
        MIX(c->devfree[d]);
    for (size_t n = 0; n < c->nnodes; n++) {
        MIX(c->freemask[n]);
        MIX(c->alive[n]);
    }
#undef MIX
    return h;
}

int sched_cluster_check(const sched_cluster_t *c, char *msg, size_t msgsize)
{
    size_t nn = c->nnodes;
    int64_t *used = cr_calloc((size_t)SCHED_MAX_RES * (nn ? nn : 1), sizeof(int64_t));
    int rc = CR_EINVAL;
    for (size_t p = 0; p < c->placements.n; p++) {
        const sched_placement_t *pl = &c->placements.v[p];
        if (!pl->id)
            continue;
        for (uint32_t a = 0; a < pl->nallocs; a++) {
            const sched_alloc_t *al = sched__alloc(pl, a);
            for (int k = 0; k < al->req.n; k++)
                used[(size_t)al->req.id[k] * nn + al->node] += al->req.qty[k];
        }
    }
    for (size_t n = 0; n < nn; n++) {
        const sched_node_t *sn = &c->nodes.v[n];
        for (int r = 0; r < c->nres; r++) {
            size_t i = (size_t)r * nn + n;
            if (c->avail[i] < 0 || c->avail[i] > c->total[i]) {
                sched__fmt(msg, msgsize, "node %s: %s avail %lld outside 0..%lld",
                         sched_node_name(c, (int)n), c->res.str[r], (long long)c->avail[i],
                         (long long)c->total[i]);
                goto out;
            }
            if (c->alive[n] && c->avail[i] + used[i] != c->total[i]) {
                sched__fmt(msg, msgsize, "node %s: %s avail %lld + used %lld != total %lld",
                         sched_node_name(c, (int)n), c->res.str[r], (long long)c->avail[i],
                         (long long)used[i], (long long)c->total[i]);
                goto out;
            }
            if (r < SCHED_R_PREDEFINED && sn->unitmask[r]) {
                int64_t s = 0;
                for (int b = 0; b < sn->ndev; b++)
                    if (sn->unitmask[r] >> b & 1)
                        s += c->devfree[sn->dev_off + b];
                s *= sched__units(sn, r);
                if (s != c->avail[i]) {
                    sched__fmt(msg, msgsize, "node %s: %s device free sum %lld != avail %lld",
                             sched_node_name(c, (int)n), c->res.str[r], (long long)s,
                             (long long)c->avail[i]);
                    goto out;
                }
            }
        }
        for (int b = 0; b < sn->ndev; b++) {
            int32_t f = c->devfree[sn->dev_off + b];
            if (f < 0 || f > CR_QTY_ONE || ((c->freemask[n] >> b & 1) != (f == CR_QTY_ONE))) {
                sched__fmt(msg, msgsize, "node %s: device %d free %d, mask disagrees",
                         sched_node_name(c, (int)n), b, f);
                goto out;
            }
        }
    }
    rc = 0;
out:
    free(used);
    return rc;
}

static size_t syms_memory(const sched_syms_t *s)
{
    size_t b = s->cap * (sizeof(char *) + sizeof(uint32_t)) + s->nslots * sizeof(int32_t);
    for (size_t i = 0; i < s->n; i++)
        b += strlen(s->str[i]) + 1;
    return b;
}

size_t sched_cluster_memory(const sched_cluster_t *c)
{
    size_t nn = c->nnodes ? c->nnodes : 1;
    size_t b = sizeof(*c) + syms_memory(&c->res) + syms_memory(&c->labels);
    b += c->nodes.cap * sizeof(sched_node_t) + c->lab.cap * sizeof(sched_label_t) +
         c->dev.cap * sizeof(sched_dev_t) + c->groups.cap * sizeof(uint64_t);
    for (size_t i = 0; i < c->slices.n; i++)
        b += sizeof(sched_slice_t) + (size_t)c->slices.v[i].nworkers * sizeof(int32_t);
    b += 3 * (size_t)(c->nres ? c->nres : 1) * nn * sizeof(int64_t); /* total, avail, held */
    b += c->nlindex * sizeof(sched_lindex_t) + c->lab.n * sizeof(int32_t);
    b += c->dev.n * sizeof(int32_t) + nn * (sizeof(uint64_t) + 1 + 2 * sizeof(int32_t) + 1);
    b += c->placements.cap * sizeof(sched_placement_t) + c->free_slots.cap * sizeof(uint32_t);
    for (size_t i = 0; i < c->placements.n; i++)
        if (c->placements.v[i].nallocs > 1)
            b += c->placements.v[i].nallocs * sizeof(sched_alloc_t);
    return b;
}
