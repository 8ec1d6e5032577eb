/* The cluster view: node descriptions reduced to what placement needs,
 * in flat arrays indexed by dense ids, plus the per-label index of nodes
 * and the TPU slices. Nodes join (sched_cluster_add) and rejoin with a new
 * description (sched_cluster_replace) at any time: their descriptions go
 * in at once, the arrays and the label index take them in lazily, once,
 * before the next decision or query (sched_cluster_sync), so that many
 * joins one after another cost one rebuild. */
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
    CR_VEC_FREE(&c->repl);
    CR_VEC_FREE(&c->repl_total);
    CR_VEC_FREE(&c->byname);
    CR_VEC_FREE(&c->free_slots);
    free(c->total);
    free(c->lindex);
    free(c->lindex_nodes);
    free(c->avail);
    free(c->held);
    free(c->freelvl);
    free(c->hot);
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

/* Claims worker d->worker_id of slice d->name for node nidx, creating the
 * slice on its first host. */
static int add_slice(sched_cluster_t *c, const cr_domain_t *d, int nidx, sched_node_t *n, char *msg,
                     size_t msz)
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
            sched__fmt(msg, msz, "TPU slice %s: worker count %d does not fit topology %s", d->name,
                       d->worker_count, d->topology);
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
    n->slice = (int32_t)(s - c->slices.v);
    n->slice_worker = d->worker_id;
    return 0;
}

static void unclaim_slices(sched_cluster_t *c, int nidx)
{
    for (size_t i = 0; i < c->slices.n; i++)
        for (int k = 0; k < c->slices.v[i].nworkers; k++)
            if (c->slices.v[i].worker_node[k] == (int32_t)nidx)
                c->slices.v[i].worker_node[k] = -1;
}

/* The node's id (its name) or NULL with msg. */
static const char *node_id(const cr_node_t *node, char *msg, size_t msgsize)
{
    const char *id = node->id[0] ? node->id : node->hostname;
    if (!id[0]) {
        sched__fmt(msg, msgsize, "node without id or hostname");
        return NULL;
    }
    return id;
}

/* Builds node nidx from its description into *n and total[]: its labels,
 * devices and device groups go at the ends of c->lab, c->dev and
 * c->groups, its TPU slice worker is claimed for nidx. On failure nothing
 * is left behind but interned names. */
static int node_build(sched_cluster_t *c, const cr_node_t *node, int nidx, int name, const char *id,
                      sched_node_t *n, int64_t *total, char *msg, size_t msgsize)
{
    memset(total, 0, SCHED_MAX_RES * sizeof(int64_t));
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

    size_t lab0 = c->lab.n, dev0 = c->dev.n, grp0 = c->groups.n;
    memset(n, 0, sizeof(*n));
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
        sd->units =
            (uint8_t)(rid == SCHED_R_NEURON_CORES && d->cores > 1 && d->cores < 256 ? d->cores : 1);
        local[i] = n->ndev;
        /* CUDA sees one MIG device per process, and never beside a whole
         * GPU (NVIDIA MIG user guide, "CUDA Device Enumeration") */
        if (d->parent >= 0 && d->mig_profile[0])
            n->solomask |= 1ull << n->ndev;
        n->unitmask[rid] |= 1ull << n->ndev;
        n->ndev++;
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
        cr_debug("node %s: %s total does not match its %d devices; counted, not tracked", id,
                 c->res.str[r], cnt);
        n->unitmask[r] = 0;
    }
    /* device groups: NVLink islands / xGMI hives, then NUMA nodes */
    uint64_t tracked = 0;
    for (int r = 0; r < SCHED_R_PREDEFINED; r++)
        tracked |= n->unitmask[r];
    for (size_t i = 0; i < node->domains.n; i++) {
        const cr_domain_t *d = &node->domains.v[i];
        if (strcmp(d->kind, "tpu-slice") == 0) {
            int rc = add_slice(c, d, nidx, n, msg, msgsize);
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
    /* the vendor's device sets, after islands and NUMA nodes */
    for (size_t i = 0; i < node->domains.n; i++) {
        const cr_domain_t *d = &node->domains.v[i];
        if (strcmp(d->kind, "module-set") != 0)
            continue;
        uint64_t m = 0;
        bool whole = d->nmembers > 0;
        for (size_t k = 0; k < d->nmembers; k++) {
            int hw = d->members[k];
            if (hw >= 0 && (size_t)hw < node->devices.n && hw < (int)CR_ARRAY_SIZE(local) &&
                local[hw] >= 0)
                m |= 1ull << local[hw];
            else
                whole = false;
        }
        if (n->nset == 255)
            continue;
        for (size_t k = 0; k < d->nmembers && !n->set_res; k++) {
            int hw = d->members[k];
            if (hw >= 0 && (size_t)hw < node->devices.n && hw < (int)CR_ARRAY_SIZE(local) &&
                local[hw] >= 0)
                n->set_res = c->dev.v[dev0 + local[hw]].res;
        }
        /* a set with a device that cannot be scheduled stays, empty: the
         * node still takes only whole sets, and that one is not among them */
        *CR_VEC_PUSH(&c->groups) = whole ? m & tracked : 0;
        n->nset++;
    }
    qsort(&c->lab.v[lab0], n->nlabels, sizeof(sched_label_t), cmp_label);
    for (int r = 0; r < SCHED_MAX_RES; r++)
        if (total[r] > 0)
            n->resmask |= 1u << r;
    for (int r = 0; r < SCHED_R_PREDEFINED; r++)
        if (n->unitmask[r] && (sched__units(n, r) > 1 || sched__has_rules(n, r)))
            n->slowmask |= 1u << r;
    return 0;
fail:
    /* undo this node: the vectors only grew at their ends */
    c->lab.n = lab0;
    c->dev.n = dev0;
    c->groups.n = grp0;
    unclaim_slices(c, nidx);
    return CR_EINVAL;
}

static int byname(const sched_cluster_t *c, int name)
{
    return name >= 0 && (size_t)name < c->byname.n ? c->byname.v[name] : -1;
}

int sched_cluster_add(sched_cluster_t *c, const cr_node_t *node, char *msg, size_t msgsize)
{
    const char *id = node_id(node, msg, msgsize);
    if (!id)
        return CR_EINVAL;
    if (c->nodes.n >= INT32_MAX / 2) {
        sched__fmt(msg, msgsize, "node %s: too many nodes", id);
        return CR_EINVAL;
    }
    int name = intern_label(c, id);
    if (byname(c, name) >= 0) {
        sched__fmt(msg, msgsize, "node %s added twice", id);
        return CR_EEXIST;
    }
    int64_t total[SCHED_MAX_RES];
    sched_node_t n;
    int nidx = (int)c->nodes.n;
    int rc = node_build(c, node, nidx, name, id, &n, total, msg, msgsize);
    if (rc)
        return rc;
    *CR_VEC_PUSH(&c->nodes) = n;
    for (int r = 0; r < SCHED_MAX_RES; r++)
        *CR_VEC_PUSH(&c->init_total) = total[r];
    while (c->byname.n <= (size_t)name)
        *CR_VEC_PUSH(&c->byname) = -1;
    c->byname.v[name] = nidx;
    c->dirty = c->final;
    return 0;
}

int sched_cluster_replace(sched_cluster_t *c, int node, const cr_node_t *desc, char *msg,
                          size_t msgsize)
{
    if (node < 0 || (size_t)node >= c->nodes.n) {
        sched__fmt(msg, msgsize, "no node %d in the cluster view", node);
        return CR_EINVAL;
    }
    const char *old = sched_node_name(c, node);
    /* joined nodes not yet synced are alive */
    if (!c->final || (size_t)node >= c->nnodes || c->alive[node]) {
        sched__fmt(msg, msgsize,
                   "node %s is in use; mark it lost (sched_node_lost) before "
                   "replacing its description",
                   old);
        return CR_EAGAIN;
    }
    const char *id = node_id(desc, msg, msgsize);
    if (!id)
        return CR_EINVAL;
    if (strcmp(id, old) != 0) {
        sched__fmt(msg, msgsize, "node %s cannot take the description of node %s", old, id);
        return CR_EINVAL;
    }
    sched_node_t *cur = &c->nodes.v[node];
    sched_node_t was = *cur;
    if (was.slice >= 0)
        c->slices.v[was.slice].worker_node[was.slice_worker] = -1;
    int64_t total[SCHED_MAX_RES];
    sched_node_t n;
    int rc = node_build(c, desc, node, was.name, id, &n, total, msg, msgsize);
    if (rc) {
        if (was.slice >= 0)
            c->slices.v[was.slice].worker_node[was.slice_worker] = node;
        return rc;
    }
    c->nodes.v[node] = n;
    c->dead_lab += was.nlabels;
    c->dead_dev += was.ndev;
    c->dead_grp += (size_t)was.nisland + was.nnuma + was.nset;
    *CR_VEC_PUSH(&c->repl) = node;
    for (int r = 0; r < SCHED_MAX_RES; r++)
        *CR_VEC_PUSH(&c->repl_total) = total[r];
    c->dirty = true;
    return 0;
}

typedef struct triple {
    int32_t key, val, node;
} triple_t;

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
    c->final = true;
    c->sumavail = cr_calloc(SCHED_MAX_RES, sizeof(sched_sum_t));
    c->sumtotal = cr_calloc(SCHED_MAX_RES, sizeof(sched_sum_t));
    c->maxtotal = cr_calloc(SCHED_MAX_RES, sizeof(int64_t));
    c->dirty = true;
    sched_cluster_sync(c);
    return 0;
}

size_t sched_cluster_nodes(const sched_cluster_t *c)
{
    return c->nodes.n;
}

/* Moves the labels, devices and groups of live nodes to the front of
 * their vectors, dropping what replaced nodes left behind. */
static void compact(sched_cluster_t *c)
{
    size_t lab = 0, dev = 0, grp = 0;
    for (size_t i = 0; i < c->nodes.n; i++) {
        sched_node_t *n = &c->nodes.v[i];
        size_t ng = (size_t)n->nisland + n->nnuma + n->nset;
        memmove(&c->lab.v[lab], &c->lab.v[n->label_off], n->nlabels * sizeof(sched_label_t));
        memmove(&c->dev.v[dev], &c->dev.v[n->dev_off], n->ndev * sizeof(sched_dev_t));
        memmove(&c->devfree[dev], &c->devfree[n->dev_off], n->ndev * sizeof(int32_t));
        memmove(&c->groups.v[grp], &c->groups.v[n->group_off], ng * sizeof(uint64_t));
        n->label_off = (uint32_t)lab;
        n->dev_off = (uint32_t)dev;
        n->group_off = (uint32_t)grp;
        lab += n->nlabels;
        dev += n->ndev;
        grp += ng;
    }
    c->lab.n = lab;
    c->dev.n = c->ndevstate = dev;
    c->groups.n = grp;
    c->dead_lab = c->dead_dev = c->dead_grp = 0;
}

/* Rebuilds the label index: the entries of the nodes in `fresh` (joined
 * or replaced) are dropped and their labels merged in, in (key, val,
 * node) order, as a sort of every node's labels would give. */
static void lindex_merge(sched_cluster_t *c, const uint8_t *fresh, size_t from)
{
    size_t nt = 0, nf = 0;
    for (size_t n = 0; n < c->nodes.n; n++) {
        nt += c->nodes.v[n].nlabels;
        if (n >= from || fresh[n])
            nf += c->nodes.v[n].nlabels;
    }
    triple_t *t = cr_malloc((nf ? nf : 1) * sizeof(*t));
    size_t k = 0;
    for (size_t n = 0; n < c->nodes.n; n++) {
        if (n < from && !fresh[n])
            continue;
        for (uint32_t i = 0; i < c->nodes.v[n].nlabels; i++) {
            const sched_label_t *l = &c->lab.v[c->nodes.v[n].label_off + i];
            t[k++] = (triple_t){l->key, l->val, (int32_t)n};
        }
    }
    qsort(t, k, sizeof(*t), cmp_triple);
    int32_t *nodes = cr_malloc((nt ? nt : 1) * sizeof(int32_t));
    sched_lindex_t *ix = cr_malloc((nt ? nt : 1) * sizeof(sched_lindex_t));
    size_t nix = 0, out = 0, ti = 0, e = 0, j = 0;
    for (;;) {
        /* the next kept old triple */
        while (e < c->nlindex &&
               (j >= c->lindex[e].n || fresh[c->lindex_nodes[c->lindex[e].off + j]])) {
            if (j >= c->lindex[e].n) {
                e++;
                j = 0;
            } else {
                j++;
            }
        }
        triple_t x;
        if (e < c->nlindex) {
            x = (triple_t){c->lindex[e].key, c->lindex[e].val,
                           c->lindex_nodes[c->lindex[e].off + j]};
            if (ti < k && cmp_triple(&t[ti], &x) < 0)
                x = t[ti++];
            else
                j++;
        } else if (ti < k) {
            x = t[ti++];
        } else {
            break;
        }
        if (!nix || ix[nix - 1].key != x.key || ix[nix - 1].val != x.val)
            ix[nix++] = (sched_lindex_t){x.key, x.val, (uint32_t)out, 0};
        ix[nix - 1].n++;
        nodes[out++] = x.node;
    }
    free(t);
    free(c->lindex);
    free(c->lindex_nodes);
    c->lindex = ix;
    c->lindex_nodes = nodes;
    c->nlindex = nix;
}

void sched__lvl_all(sched_cluster_t *c)
{
    for (size_t n = 0; n < c->nnodes; n++)
        sched__lvl_node(c, (int)n);
}

static void *grow(void *p, size_t n, size_t elem)
{
    return cr_realloc(p, (n ? n : 1) * elem);
}

/* Node n's entry of the scan's array (sched_hot_t), from its description. */
static void hot_node(sched_cluster_t *c, size_t n)
{
    const sched_node_t *sn = &c->nodes.v[n];
    sched_hot_t h = {.resmask = sn->resmask, .slowmask = (uint8_t)sn->slowmask, .devres = 0xff};
    uint8_t devs = 0; /* the resources that have devices */
    for (int r = 0; r < SCHED_R_PREDEFINED; r++)
        if (sn->unitmask[r]) {
            devs |= (uint8_t)(1u << r);
            h.devres = (uint8_t)r;
            h.devmask = sn->unitmask[r];
        }
    if (devs & (devs - 1)) {
        /* devices of two resources: the general checks take them */
        h.slowmask |= devs;
        h.devres = 0xff;
        h.devmask = 0;
    }
    c->hot[n] = h;
}

void sched_cluster_sync(sched_cluster_t *c)
{
    if (!c->final || !c->dirty)
        return;
    size_t old = c->nnodes, nn = c->nodes.n;
    int onres = c->nres, nres = c->nres;
    for (size_t i = 0; i < c->init_total.n; i++)
        if (c->init_total.v[i] > 0 && (int)(i % SCHED_MAX_RES) + 1 > nres)
            nres = (int)(i % SCHED_MAX_RES) + 1;
    for (size_t i = 0; i < c->repl_total.n; i++)
        if (c->repl_total.v[i] > 0 && (int)(i % SCHED_MAX_RES) + 1 > nres)
            nres = (int)(i % SCHED_MAX_RES) + 1;

    /* total, avail, held: SoA rows of nn, the old cells kept */
    if (nn != old || nres != onres || !c->total) {
        size_t cells = (size_t)(nres ? nres : 1) * (nn ? nn : 1);
        int64_t **arr[3] = {&c->total, &c->avail, &c->held};
        for (int a = 0; a < 3; a++) {
            int64_t *v = cr_calloc(cells, sizeof(int64_t));
            if (old)
                for (int r = 0; r < onres; r++)
                    memcpy(&v[(size_t)r * nn], &(*arr[a])[(size_t)r * old], old * sizeof(int64_t));
            free(*arr[a]);
            *arr[a] = v;
        }
        /* the free-capacity index, node-major: its stride is nres, so old
         * nodes' levels are made again from avail and held (new nodes'
         * are 0, as their avail and held are) */
        free(c->freelvl);
        c->freelvl = cr_calloc(cells, 1);
        c->nnodes = nn;
        c->nres = nres;
        for (size_t n = 0; n < old; n++)
            sched__lvl_node(c, (int)n);
        c->hot = grow(c->hot, nn, sizeof(sched_hot_t));
        c->freemask = grow(c->freemask, nn, sizeof(uint64_t));
        c->alive = grow(c->alive, nn, 1);
        c->mark = grow(c->mark, nn, 1);
        free(c->scratch);
        free(c->scratch2);
        c->scratch = cr_malloc((nn ? nn : 1) * sizeof(int32_t));
        c->scratch2 = cr_malloc((nn ? nn : 1) * sizeof(int32_t));
    }
    /* joined nodes: alive, all free */
    for (size_t n = old; n < nn; n++) {
        const sched_node_t *sn = &c->nodes.v[n];
        for (int r = 0; r < nres; r++) {
            int64_t t = c->init_total.v[(n - old) * SCHED_MAX_RES + (size_t)r];
            TOT(c, r, n) = AV(c, r, n) = t;
            c->sumavail[r] += t;
            c->sumtotal[r] += t;
            if (t > c->maxtotal[r])
                c->maxtotal[r] = t;
        }
        c->freemask[n] = 0;
        for (int r = 0; r < SCHED_R_PREDEFINED; r++)
            c->freemask[n] |= sn->unitmask[r];
        c->alive[n] = 1;
        c->mark[n] = 0;
        sched__lvl_node(c, (int)n);
        hot_node(c, n);
    }
    CR_VEC_FREE(&c->init_total);
    /* replaced nodes: lost, so out of the sums, and all free */
    uint8_t *fresh = cr_calloc(nn ? nn : 1, 1);
    for (size_t i = 0; i < c->repl.n; i++) {
        int n = c->repl.v[i];
        const sched_node_t *sn = &c->nodes.v[n];
        for (int r = 0; r < nres; r++)
            TOT(c, r, n) = AV(c, r, n) = c->repl_total.v[i * SCHED_MAX_RES + (size_t)r];
        c->freemask[n] = sn->ndev ? ~0ull >> (64 - sn->ndev) : 0;
        sched__lvl_node(c, n);
        hot_node(c, (size_t)n);
        fresh[n] = 1;
    }
    CR_VEC_FREE(&c->repl);
    CR_VEC_FREE(&c->repl_total);
    /* new devices are free */
    if (c->dev.n != c->ndevstate || !c->devfree) {
        c->devfree = grow(c->devfree, c->dev.n, sizeof(int32_t));
        for (size_t d = c->ndevstate; d < c->dev.n; d++)
            c->devfree[d] = CR_QTY_ONE;
        c->ndevstate = c->dev.n;
    }
    if (c->dead_lab > 1024 && c->dead_lab > c->lab.n / 2)
        compact(c);
    lindex_merge(c, fresh, old);
    free(fresh);
    c->dirty = false;
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
    return byname(c, sched_syms_find(&c->labels, name, strlen(name)));
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
        case SCHED_OP_IN:
            ok = v >= 0 && in;
            break;
        case SCHED_OP_NE:
        case SCHED_OP_NOTIN:
            ok = v < 0 || !in;
            break;
        case SCHED_OP_EXISTS:
            ok = v >= 0;
            break;
        default:
            ok = v < 0;
            break;
        }
        if (!ok)
            return false;
    }
    return true;
}

uint64_t sched_cluster_digest(const sched_cluster_t *c)
{
    sched__sync(c);
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
    sched__sync(c);
    size_t nn = c->nnodes;
    int64_t *used = cr_calloc((size_t)SCHED_MAX_RES * (nn ? nn : 1), sizeof(int64_t));
    int rc = CR_EINVAL;
    size_t nheld = 0;
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
            if (LVL(c, r, n) != sched__level(c->avail[i] - c->held[i])) {
                sched__fmt(msg, msgsize,
                           "node %s: %s free-capacity level %d, but avail %lld - held %lld",
                           sched_node_name(c, (int)n), c->res.str[r], LVL(c, r, n),
                           (long long)c->avail[i], (long long)c->held[i]);
                goto out;
            }
            if (c->held[i])
                nheld++;
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
        const sched_hot_t *h = &c->hot[n];
        bool mixed = h->devres == 0xff && (h->slowmask & ~sn->slowmask);
        if (h->resmask != sn->resmask || (h->slowmask & sn->slowmask) != sn->slowmask ||
            (h->devres != 0xff
                 ? h->devres >= SCHED_R_PREDEFINED || sn->unitmask[h->devres] != h->devmask
                 : !mixed && h->devmask)) {
            sched__fmt(msg, msgsize, "node %s: the scan's copy of its description disagrees",
                       sched_node_name(c, (int)n));
            goto out;
        }
    }
    if (nheld != c->nheld) {
        sched__fmt(msg, msgsize, "%zu held cells are not 0, %zu counted", nheld, c->nheld);
        goto out;
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
    sched__sync(c);
    size_t nn = c->nnodes ? c->nnodes : 1;
    size_t b = sizeof(*c) + syms_memory(&c->res) + syms_memory(&c->labels);
    b += c->nodes.cap * sizeof(sched_node_t) + c->lab.cap * sizeof(sched_label_t) +
         c->dev.cap * sizeof(sched_dev_t) + c->groups.cap * sizeof(uint64_t);
    for (size_t i = 0; i < c->slices.n; i++)
        b += sizeof(sched_slice_t) + (size_t)c->slices.v[i].nworkers * sizeof(int32_t);
    b += 3 * (size_t)(c->nres ? c->nres : 1) * nn * sizeof(int64_t); /* total, avail, held */
    b += (size_t)(c->nres ? c->nres : 1) * nn;                       /* freelvl */
    b += nn * sizeof(sched_hot_t);
    b += c->nlindex * sizeof(sched_lindex_t) + c->lab.n * sizeof(int32_t);
    b += c->dev.n * sizeof(int32_t) + nn * (sizeof(uint64_t) + 1 + 2 * sizeof(int32_t) + 1);
    b += c->placements.cap * sizeof(sched_placement_t) + c->free_slots.cap * sizeof(uint32_t);
    b += c->byname.cap * sizeof(int32_t);
    for (size_t i = 0; i < c->placements.n; i++)
        if (c->placements.v[i].nallocs > 1)
            b += c->placements.v[i].nallocs * sizeof(sched_alloc_t);
    return b;
}
