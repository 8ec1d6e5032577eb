/* Topology queries: how two devices are connected, the device x device
 * matrix `corral topo` prints, the devices near a NUMA node, the NIC near a
 * device and the islands of fast links. Pure functions of the node
 * description; the rules are in hw/topo.h and docs/topology.md. */
#include "topo.h"
#include <stdio.h>

/* Parts of a pci_path: "hb0", then bridges, then the endpoint. Paths are
 * at most 160 characters in the node description; longer or deeper ones
 * are treated as unknown rather than cut short, so no relation is guessed
 * from a partial path. */
#define MAX_PARTS 32
#define MAX_PATH 1024

typedef struct endpoint {
    const char *path;
    int numa;
    int n; /* parts; 0 when the path is unknown */
    unsigned short off[MAX_PARTS], len[MAX_PARTS];
} endpoint_t;

static void endpoint_init(endpoint_t *e, const char *path, int numa)
{
    e->path = path;
    e->numa = numa;
    e->n = 0;
    if (!path || strncmp(path, "hb", 2) != 0)
        return;
    int n = 0;
    size_t start = 0;
    for (size_t i = 0;; i++) {
        if (i >= MAX_PATH)
            return;
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (i == start || n == MAX_PARTS)
            return;
        e->off[n] = (unsigned short)start;
        e->len[n] = (unsigned short)(i - start);
        n++;
        if (!path[i])
            break;
        start = i + 1;
    }
    if (n >= 2) /* a host bridge and the endpoint at least */
        e->n = n;
}

static bool part_eq(const endpoint_t *a, const endpoint_t *b, int i)
{
    return a->len[i] == b->len[i] &&
           memcmp(a->path + a->off[i], b->path + b->off[i], a->len[i]) == 0;
}

static cr_link_kind_t numa_relation(int a, int b)
{
    return a >= 0 && a == b ? CR_LINK_NUMA : CR_LINK_CPU;
}

/* nvidia-smi's PIX counts a PCIe switch as one bridge although Linux and
 * hwloc show its upstream and downstream ports as separate bridges: two
 * endpoints below one switch meet at its upstream port, each one
 * downstream port away. So the test is the distance from the meeting
 * point, not the number of bridge entries in between. */
static cr_link_kind_t relate(const endpoint_t *a, const endpoint_t *b)
{
    if (!a->n || !b->n)
        return numa_relation(a->numa, b->numa);
    if (!part_eq(a, b, 0))
        return numa_relation(a->numa, b->numa);
    int na = a->n - 2, nb = b->n - 2; /* bridges of each */
    int k = 0;
    while (k < na && k < nb && part_eq(a, b, k + 1))
        k++;
    if (k == 0)
        return CR_LINK_PCIE_HOSTBRIDGE;
    return na - k <= 1 && nb - k <= 1 ? CR_LINK_PCIE_SWITCH : CR_LINK_PCIE_MULTI;
}

cr_link_kind_t hw_topo_pcie(const char *path_a, int numa_a, const char *path_b, int numa_b)
{
    endpoint_t a, b;
    endpoint_init(&a, path_a, numa_a);
    endpoint_init(&b, path_b, numa_b);
    return relate(&a, &b);
}

bool hw_topo_is_fast(cr_link_kind_t kind)
{
    return (unsigned)kind < CR_LINK_PCIE_SWITCH;
}

/* A MIG instance is placed where its GPU is. */
static int phys(const cr_node_t *node, int i)
{
    int p = node->devices.v[i].parent;
    return p >= 0 && (size_t)p < node->devices.n ? p : i;
}

static void device_endpoint(const cr_node_t *node, int i, endpoint_t *e)
{
    const cr_device_t *d = &node->devices.v[phys(node, i)];
    int numa = d->numa >= 0 ? d->numa : node->devices.v[i].numa;
    endpoint_init(e, d->pci_path, numa);
}

/* The enum lists the fabrics fastest first; within a kind, more links
 * win. */
static bool better(cr_link_kind_t k, int count, const hw_topo_cell_t *best)
{
    return k < best->kind || (k == best->kind && count > best->count);
}

static bool link_ok(const cr_node_t *node, const cr_link_t *l)
{
    return l->a >= 0 && l->b >= 0 && (size_t)l->a < node->devices.n &&
           (size_t)l->b < node->devices.n && (unsigned)l->kind < CR_LINK_KIND_COUNT;
}

/* Best direct link and best recorded PCIe-class link between physical
 * devices a and b; "none" is kind HW_TOPO_SELF in either. */
static void scan_links(const cr_node_t *node, int a, int b, hw_topo_cell_t *fast,
                       hw_topo_cell_t *rec)
{
    fast->kind = rec->kind = HW_TOPO_SELF;
    fast->count = rec->count = 0;
    for (size_t i = 0; i < node->links.n; i++) {
        const cr_link_t *l = &node->links.v[i];
        if (!link_ok(node, l))
            continue;
        int la = phys(node, l->a), lb = phys(node, l->b);
        if (!((la == a && lb == b) || (la == b && lb == a)))
            continue;
        hw_topo_cell_t *t = hw_topo_is_fast(l->kind) ? fast : rec;
        if (better(l->kind, l->count, t)) {
            t->kind = l->kind;
            t->count = l->count;
        }
    }
}

/* Two distinct physical devices without a direct link: the path relation
 * when both paths are known, else what a backend recorded, else NUMA. */
static cr_link_kind_t pcie_pair(const endpoint_t *ea, const endpoint_t *eb,
                                const hw_topo_cell_t *rec)
{
    if ((!ea->n || !eb->n) && rec->kind != HW_TOPO_SELF)
        return rec->kind;
    return relate(ea, eb);
}

cr_link_kind_t hw_topo_pair(const cr_node_t *node, int a, int b, int *count)
{
    cr_link_kind_t kind = CR_LINK_CPU;
    int c = 0;
    if (!node || a < 0 || b < 0 || (size_t)a >= node->devices.n || (size_t)b >= node->devices.n)
        goto out;
    int pa = phys(node, a), pb = phys(node, b);
    if (pa == pb) {
        kind = HW_TOPO_SELF;
        goto out;
    }
    hw_topo_cell_t fast, rec;
    scan_links(node, pa, pb, &fast, &rec);
    if (fast.kind != HW_TOPO_SELF) {
        kind = fast.kind;
        c = fast.count;
        goto out;
    }
    endpoint_t ea, eb;
    device_endpoint(node, a, &ea);
    device_endpoint(node, b, &eb);
    kind = pcie_pair(&ea, &eb, &rec);
out:
    if (count)
        *count = c;
    return kind;
}

int hw_topo_matrix(const cr_node_t *node, hw_topo_matrix_t *m)
{
    memset(m, 0, sizeof(*m));
    if (!node)
        return CR_EINVAL;
    size_t nd = node->devices.n, n = nd + node->nics.n;
    m->ndevices = nd;
    m->nnics = node->nics.n;
    m->n = n;
    m->cells = cr_calloc(n ? n * n : 1, sizeof(*m->cells));
    endpoint_t *ep = cr_malloc((n ? n : 1) * sizeof(*ep));
    for (size_t i = 0; i < nd; i++)
        device_endpoint(node, (int)i, &ep[i]);
    for (size_t k = 0; k < node->nics.n; k++)
        endpoint_init(&ep[nd + k], node->nics.v[k].pci_path, node->nics.v[k].numa);

    /* One pass over the links into per-pair tables of physical devices,
     * so that the matrix costs O(n^2 + links), not O(n^2 * links). */
    hw_topo_cell_t *fast = cr_malloc((nd ? nd * nd : 1) * sizeof(*fast));
    hw_topo_cell_t *rec = cr_malloc((nd ? nd * nd : 1) * sizeof(*rec));
    for (size_t i = 0; i < nd * nd; i++) {
        fast[i] = (hw_topo_cell_t){HW_TOPO_SELF, 0};
        rec[i] = (hw_topo_cell_t){HW_TOPO_SELF, 0};
    }
    for (size_t i = 0; i < node->links.n; i++) {
        const cr_link_t *l = &node->links.v[i];
        if (!link_ok(node, l))
            continue;
        size_t a = (size_t)phys(node, l->a), b = (size_t)phys(node, l->b);
        if (a == b)
            continue;
        hw_topo_cell_t *t = hw_topo_is_fast(l->kind) ? fast : rec;
        if (better(l->kind, l->count, &t[a * nd + b]))
            t[a * nd + b] = t[b * nd + a] = (hw_topo_cell_t){l->kind, l->count};
    }

    for (size_t i = 0; i < n; i++) {
        m->cells[i * n + i] = (hw_topo_cell_t){HW_TOPO_SELF, 0};
        for (size_t j = i + 1; j < n; j++) {
            hw_topo_cell_t c = {CR_LINK_CPU, 0};
            if (j < nd) {
                size_t pi = (size_t)phys(node, (int)i), pj = (size_t)phys(node, (int)j);
                if (pi == pj)
                    c.kind = HW_TOPO_SELF;
                else if (fast[pi * nd + pj].kind != HW_TOPO_SELF)
                    c = fast[pi * nd + pj];
                else
                    c.kind = pcie_pair(&ep[i], &ep[j], &rec[pi * nd + pj]);
            } else {
                c.kind = relate(&ep[i], &ep[j]);
            }
            m->cells[i * n + j] = m->cells[j * n + i] = c;
        }
    }
    free(rec);
    free(fast);
    free(ep);
    return 0;
}

void hw_topo_matrix_fini(hw_topo_matrix_t *m)
{
    if (!m)
        return;
    CR_FREE(m->cells);
    m->n = m->ndevices = m->nnics = 0;
}

/* ---- symbols and the legend: one row per fact ---- */

static const struct {
    const char *symbol;
    bool counted; /* "NV18": the count is part of the symbol */
} symbols[CR_LINK_KIND_COUNT + 1] = {
    [CR_LINK_NVLINK] = {"NV", true},
    [CR_LINK_NVSWITCH] = {"NV", true},
    [CR_LINK_XGMI_SAME_GPU] = {"PART", false},
    [CR_LINK_XGMI] = {"XGMI", false},
    [CR_LINK_ICI] = {"ICI", false},
    [CR_LINK_NEURONLINK] = {"NL", false},
    [CR_LINK_ROCE] = {"ROCE", false},
    [CR_LINK_PCIE_SWITCH] = {"PIX", false},
    [CR_LINK_PCIE_MULTI] = {"PXB", false},
    [CR_LINK_PCIE_HOSTBRIDGE] = {"PHB", false},
    [CR_LINK_NUMA] = {"NODE", false},
    [CR_LINK_CPU] = {"SYS", false},
    [CR_LINK_KIND_COUNT] = {"X", false},
};

const char *hw_topo_symbol(cr_link_kind_t kind, int count, char *buf, size_t size)
{
    if ((unsigned)kind > CR_LINK_KIND_COUNT)
        snprintf(buf, size, "?");
    else if (symbols[kind].counted && count > 0)
        snprintf(buf, size, "%s%d", symbols[kind].symbol, count);
    else
        snprintf(buf, size, "%s", symbols[kind].symbol);
    return buf;
}

#define K(kind) (1u << (kind))
static const hw_topo_legend_t legend[] = {
    {"X", 0, "the device itself"},
    {"NV#", K(CR_LINK_NVLINK) | K(CR_LINK_NVSWITCH),
     "NVLink: # links bonded together, directly or through NVSwitches"},
    {"PART", K(CR_LINK_XGMI_SAME_GPU),
     "partitions of one AMD GPU (CPX, DPX): its on-package Infinity Fabric"},
    {"XGMI", K(CR_LINK_XGMI), "AMD Infinity Fabric (xGMI) link, one hop"},
    {"ICI", K(CR_LINK_ICI), "TPU inter-chip interconnect: neighbours in the slice mesh"},
    {"NL", K(CR_LINK_NEURONLINK), "AWS NeuronLink between Neuron devices"},
    {"ROCE", K(CR_LINK_ROCE), "Gaudi on-chip RoCE ports wired module to module"},
    {"PIX", K(CR_LINK_PCIE_SWITCH),
     "PCIe through at most one PCIe switch (or one device's functions)"},
    {"PXB", K(CR_LINK_PCIE_MULTI),
     "PCIe through several PCIe switches, without reaching a host bridge"},
    {"PHB", K(CR_LINK_PCIE_HOSTBRIDGE), "PCIe through a host bridge (the CPU's PCIe root complex)"},
    {"NODE", K(CR_LINK_NUMA), "PCIe plus the fabric between host bridges of one NUMA node"},
    {"SYS", K(CR_LINK_CPU),
     "PCIe plus the CPU interconnect between NUMA nodes (UPI, Infinity Fabric)"},
};
#undef K

size_t hw_topo_legend(const hw_topo_legend_t **rows)
{
    *rows = legend;
    return CR_ARRAY_SIZE(legend);
}

/* ---- nearness ---- */

static int device_numa(const cr_node_t *node, size_t i)
{
    int numa = node->devices.v[i].numa;
    return numa >= 0 ? numa : node->devices.v[phys(node, (int)i)].numa;
}

size_t hw_topo_near_numa(const cr_node_t *node, int numa, int *out, size_t *nlocal)
{
    size_t n = 0, local = 0;
    /* rank 0: on numa; 1: unknown (may be near); 2: known to be elsewhere */
    for (int rank = 0; rank < 3; rank++) {
        for (size_t i = 0; i < node->devices.n; i++) {
            int dn = device_numa(node, i);
            int r = numa >= 0 && dn == numa ? 0 : dn < 0 ? 1 : 2;
            if (r == rank)
                out[n++] = (int)i;
        }
        if (rank == 0)
            local = n;
    }
    if (nlocal)
        *nlocal = local;
    return n;
}

/* How many leading parts two known paths share: within one relation, a
 * NIC that branches off lower in the tree is nearer. */
static int shared_parts(const endpoint_t *a, const endpoint_t *b)
{
    int k = 0;
    while (k < a->n && k < b->n && part_eq(a, b, k))
        k++;
    return k;
}

int hw_topo_nearest_nic(const cr_node_t *node, int dev, cr_link_kind_t *relation)
{
    int best = -1, best_shared = 0;
    cr_link_kind_t best_rel = CR_LINK_CPU;
    if (!node || dev < 0 || (size_t)dev >= node->devices.n)
        goto out;
    endpoint_t ed;
    device_endpoint(node, dev, &ed);
    for (size_t k = 0; k < node->nics.n; k++) {
        const cr_nic_t *x = &node->nics.v[k];
        endpoint_t en;
        endpoint_init(&en, x->pci_path, x->numa);
        cr_link_kind_t r = relate(&ed, &en);
        int shared = shared_parts(&ed, &en);
        /* a key compared field by field: relation, depth, RDMA, speed;
         * the first NIC listed keeps a full tie */
        int cmp = best < 0 ? 1 : (r < best_rel) - (r > best_rel);
        if (!cmp)
            cmp = (shared > best_shared) - (shared < best_shared);
        if (!cmp)
            cmp = (int)x->rdma - (int)node->nics.v[best].rdma;
        if (!cmp)
            cmp = (x->speed_mbps > node->nics.v[best].speed_mbps) -
                  (x->speed_mbps < node->nics.v[best].speed_mbps);
        if (cmp > 0) {
            best = (int)k;
            best_rel = r;
            best_shared = shared;
        }
    }
out:
    if (relation)
        *relation = best_rel;
    return best;
}

/* ---- islands: union-find over the links ---- */

static int uf_find(int *up, int i)
{
    while (up[i] != i) {
        up[i] = up[up[i]];
        i = up[i];
    }
    return i;
}

static void uf_join(int *up, int a, int b)
{
    a = uf_find(up, a);
    b = uf_find(up, b);
    /* the lower index is the root, so roots are each island's minimum */
    if (a < b)
        up[b] = a;
    else if (b < a)
        up[a] = b;
}

size_t hw_topo_islands(const cr_node_t *node, unsigned kinds, int *island)
{
    size_t nd = node->devices.n;
    if (!kinds)
        kinds = HW_TOPO_FAST_KINDS;
    if (!nd)
        return 0;
    int *up = cr_malloc(nd * sizeof(*up));
    for (size_t i = 0; i < nd; i++)
        up[i] = (int)i;
    for (size_t i = 0; i < nd; i++)
        uf_join(up, (int)i, phys(node, (int)i));
    for (size_t i = 0; i < node->links.n; i++) {
        const cr_link_t *l = &node->links.v[i];
        if (link_ok(node, l) && (kinds & (1u << l->kind)))
            uf_join(up, l->a, l->b);
    }
    size_t count = 0;
    for (size_t i = 0; i < nd; i++) {
        int r = uf_find(up, (int)i);
        /* roots are minima, so a root is met before any other member */
        island[i] = r == (int)i ? (int)count++ : island[r];
    }
    free(up);
    return count;
}
