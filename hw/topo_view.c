/* The topology as people and programs read it (corral topo, the head's
 * /api/v1/nodes/{id}/topology): names for the devices and NICs of the
 * matrix, their islands and affinities (hw/topo_view.h), and the JSON
 * form, schema corral.topo/v1 (docs/topology.md). Moved from
 * cli/topo_cmd.c so that the CLI and the API print one builder's JSON. */
#include "hw/topo_view.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Column names by resource: what people call the devices. */
static const struct {
    const char *resource, *prefix;
} prefixes[] = {
    {"GPU", "GPU"},
    {"TPU", "TPU"},
    {"neuron_cores", "ND"},
    {"HPU", "HPU"},
};

bool hw_topo_is_instance(const cr_node_t *n, size_t i)
{
    return n->devices.v[i].parent >= 0 && (size_t)n->devices.v[i].parent < n->devices.n;
}

/* A custom resource names its own columns ("widget0") when the name is
 * short and plain; anything else is "DEV". */
const char *hw_topo_prefix_of(const cr_device_t *d)
{
    for (size_t p = 0; p < CR_ARRAY_SIZE(prefixes); p++)
        if (strcmp(d->resource, prefixes[p].resource) == 0)
            return prefixes[p].prefix;
    size_t len = strlen(d->resource);
    bool plain = len >= 1 && len <= 8;
    for (size_t i = 0; i < len && plain; i++)
        plain = (d->resource[i] >= 'a' && d->resource[i] <= 'z') ||
                (d->resource[i] >= 'A' && d->resource[i] <= 'Z') || d->resource[i] == '_';
    return plain ? d->resource : "DEV";
}

void hw_topo_view_init(hw_topo_view_t *v, const cr_node_t *node)
{
    memset(v, 0, sizeof(*v));
    v->node = node;
    hw_topo_matrix(node, &v->m);
    size_t nd = node->devices.n, n = v->m.n;
    v->names = cr_calloc(n ? n : 1, sizeof(*v->names));
    v->rows = cr_calloc(n ? n : 1, sizeof(*v->rows));
    v->island = cr_calloc(nd ? nd : 1, sizeof(*v->island));
    /* physical devices are numbered per prefix, like CUDA indices;
     * MIG instances are named after their GPU */
    for (size_t i = 0; i < nd; i++) {
        if (hw_topo_is_instance(node, i))
            continue;
        const char *pre = hw_topo_prefix_of(&node->devices.v[i]);
        int ord = 0;
        for (size_t k = 0; k < i; k++)
            ord += !hw_topo_is_instance(node, k) &&
                   strcmp(hw_topo_prefix_of(&node->devices.v[k]), pre) == 0;
        snprintf(v->names[i], sizeof(v->names[i]), "%s%d", pre, ord);
        v->rows[v->nrows++] = (int)i;
    }
    v->ndevrows = v->nrows;
    for (size_t i = 0; i < nd; i++) {
        if (!hw_topo_is_instance(node, i))
            continue;
        int p = node->devices.v[i].parent, ord = 0;
        for (size_t k = 0; k < i; k++)
            ord += hw_topo_is_instance(node, k) && node->devices.v[k].parent == p;
        /* copy the parent's name first: it lives in the same array */
        char parent[24];
        cr_strlcpy(parent, v->names[p], sizeof(parent));
        snprintf(v->names[i], sizeof(v->names[i]), "%.16s-mig%d", parent, ord % 1000);
    }
    /* RDMA-capable NICs (the compute fabric) first, then the rest, each
     * in the node's order: the columns a job looks at come first, not the
     * management Ethernet that sorts first by PCI address */
    size_t pos = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < node->nics.n; k++) {
            if (node->nics.v[k].rdma != (pass == 0))
                continue;
            snprintf(v->names[nd + k], sizeof(v->names[nd + k]), "NIC%zu", pos++);
            v->rows[v->nrows++] = (int)(nd + k);
        }
    v->nislands = hw_topo_islands(node, 0, v->island);
}

void hw_topo_view_fini(hw_topo_view_t *v)
{
    hw_topo_matrix_fini(&v->m);
    CR_FREE(v->names);
    CR_FREE(v->rows);
    CR_FREE(v->island);
}

const char *hw_topo_view_symbol(const hw_topo_view_t *v, size_t i, size_t j, char *buf, size_t size)
{
    const hw_topo_cell_t *c = hw_topo_cell(&v->m, i, j);
    return hw_topo_symbol(c->kind, c->count, buf, size);
}

int hw_topo_device_numa(const cr_node_t *n, size_t i)
{
    const cr_device_t *d = &n->devices.v[i];
    return d->numa >= 0 || !hw_topo_is_instance(n, i) ? d->numa : n->devices.v[d->parent].numa;
}

/* Backends fill domains directly; a member that is not a device is
 * skipped rather than trusted. */
bool hw_topo_member_ok(const hw_topo_view_t *v, int m)
{
    return m >= 0 && (size_t)m < v->node->devices.n;
}

const char *hw_topo_numa_cpus(const cr_node_t *n, int numa)
{
    for (size_t i = 0; i < n->numa.n; i++)
        if (n->numa.v[i].id == numa)
            return n->numa.v[i].cpus;
    return "";
}

/* CPU and NUMA affinity of a matrix row; a NIC has its NUMA node's CPUs. */
void hw_topo_affinity(const hw_topo_view_t *v, size_t i, const char **cpus, int *numa)
{
    const cr_node_t *n = v->node;
    if (i < n->devices.n) {
        *cpus = n->devices.v[i].cpus;
        *numa = hw_topo_device_numa(n, i);
    } else {
        *numa = n->nics.v[i - n->devices.n].numa;
        *cpus = *numa >= 0 ? hw_topo_numa_cpus(n, *numa) : "";
    }
}

void hw_topo_speed_text(uint64_t mbps, char *buf, size_t size)
{
    if (mbps >= 1000 && mbps % 1000 == 0)
        snprintf(buf, size, "%llu Gb/s", (unsigned long long)(mbps / 1000));
    else if (mbps >= 1000)
        snprintf(buf, size, "%.1f Gb/s", (double)mbps / 1000);
    else
        snprintf(buf, size, "%llu Mb/s", (unsigned long long)mbps);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The NUMA nodes to show: the node's own list, then any other id a device
 * or NIC names, ascending. */
size_t hw_topo_numa_ids(const cr_node_t *n, int **out)
{
    size_t cap = n->numa.n + n->devices.n + n->nics.n + 1, cnt = 0, own = n->numa.n;
    int *ids = cr_malloc(cap * sizeof(int));
    for (size_t i = 0; i < n->numa.n; i++)
        ids[cnt++] = n->numa.v[i].id;
    for (size_t i = 0; i < n->devices.n + n->nics.n; i++) {
        int id = i < n->devices.n ? hw_topo_device_numa(n, i) : n->nics.v[i - n->devices.n].numa;
        bool seen = id < 0;
        for (size_t k = 0; k < cnt && !seen; k++)
            seen = ids[k] == id;
        if (!seen)
            ids[cnt++] = id;
    }
    qsort(ids + own, cnt - own, sizeof(int), cmp_int);
    *out = ids;
    return cnt;
}

/* ---------------- JSON ---------------- */

static json_t *names_of(const hw_topo_view_t *v, const int *idx, size_t n)
{
    json_t *a = json_array();
    for (size_t k = 0; k < n; k++)
        json_array_append_new(
            a, json_string(idx[k] >= 0 && (size_t)idx[k] < v->m.n ? v->names[idx[k]] : "?"));
    return a;
}

static json_t *ints_of(const int *idx, size_t n)
{
    json_t *a = json_array();
    for (size_t k = 0; k < n; k++)
        json_array_append_new(a, json_integer(idx[k]));
    return a;
}

json_t *hw_topo_view_json(const hw_topo_view_t *v)
{
    const cr_node_t *n = v->node;
    size_t nd = n->devices.n;
    char sym[16];
    json_t *o = json_object();
    json_object_set_new(o, "schema", json_string("corral.topo/v1"));
    json_object_set_new(o, "node", json_string(n->id));
    json_object_set_new(o, "hostname", json_string(n->hostname));
    json_object_set_new(o, "simulated", json_boolean(n->simulated));
    json_object_set_new(o, "names", names_of(v, v->rows, v->nrows));

    json_t *devs = json_array();
    for (size_t r = 0; r < v->ndevrows; r++) {
        size_t i = (size_t)v->rows[r];
        const cr_device_t *d = &n->devices.v[i];
        cr_link_kind_t rel;
        int nic = hw_topo_nearest_nic(n, (int)i, &rel);
        json_t *x = json_object();
        json_object_set_new(x, "name", json_string(v->names[i]));
        json_object_set_new(x, "index", json_integer((json_int_t)i));
        json_object_set_new(x, "resource", json_string(d->resource));
        json_object_set_new(x, "sku", json_string(d->sku));
        json_object_set_new(x, "pci", json_string(d->pci));
        json_object_set_new(x, "pci_path", json_string(d->pci_path));
        json_object_set_new(x, "numa", json_integer(hw_topo_device_numa(n, i)));
        json_object_set_new(x, "gpu_numa_id",
                            d->memory_numa >= 0 ? json_integer(d->memory_numa) : json_null());
        json_object_set_new(x, "cpus", json_string(d->cpus));
        json_object_set_new(x, "island", json_integer(v->island[i]));
        json_object_set_new(x, "nearest_nic",
                            nic >= 0 ? json_string(v->names[nd + (size_t)nic]) : json_null());
        json_object_set_new(x, "nearest_nic_relation",
                            nic >= 0 ? json_string(hw_topo_symbol(rel, 0, sym, sizeof(sym)))
                                     : json_null());
        json_array_append_new(devs, x);
    }
    json_object_set_new(o, "devices", devs);

    json_t *mig = json_array();
    for (size_t i = 0; i < nd; i++) {
        if (!hw_topo_is_instance(n, i))
            continue;
        json_t *x = json_object();
        json_object_set_new(x, "name", json_string(v->names[i]));
        json_object_set_new(x, "index", json_integer((json_int_t)i));
        json_object_set_new(x, "parent", json_string(v->names[n->devices.v[i].parent]));
        json_object_set_new(x, "profile", json_string(n->devices.v[i].mig_profile));
        json_array_append_new(mig, x);
    }
    json_object_set_new(o, "mig_instances", mig);

    json_t *nics = json_array();
    for (size_t r = v->ndevrows; r < v->nrows; r++) {
        size_t k = (size_t)v->rows[r] - nd;
        const cr_nic_t *x = &n->nics.v[k];
        json_t *j = json_object();
        json_object_set_new(j, "name", json_string(v->names[nd + k]));
        json_object_set_new(j, "interface", json_string(x->name));
        json_object_set_new(j, "rdma", json_boolean(x->rdma));
        json_object_set_new(j, "rdma_device", json_string(x->rdma_device));
        json_object_set_new(j, "speed_mbps", json_integer((json_int_t)x->speed_mbps));
        json_object_set_new(j, "pci", json_string(x->pci));
        json_object_set_new(j, "pci_path", json_string(x->pci_path));
        json_object_set_new(j, "numa", json_integer(x->numa));
        json_array_append_new(nics, j);
    }
    json_object_set_new(o, "nics", nics);

    json_t *matrix = json_array(), *kinds = json_array(), *counts = json_array();
    for (size_t r = 0; r < v->nrows; r++) {
        json_t *mr = json_array(), *kr = json_array(), *cr = json_array();
        for (size_t c = 0; c < v->nrows; c++) {
            const hw_topo_cell_t *cell =
                hw_topo_cell(&v->m, (size_t)v->rows[r], (size_t)v->rows[c]);
            json_array_append_new(
                mr, json_string(hw_topo_symbol(cell->kind, cell->count, sym, sizeof(sym))));
            json_array_append_new(
                kr,
                json_string(cell->kind == HW_TOPO_SELF ? "self" : hw_link_kind_name(cell->kind)));
            json_array_append_new(cr, json_integer(cell->count));
        }
        json_array_append_new(matrix, mr);
        json_array_append_new(kinds, kr);
        json_array_append_new(counts, cr);
    }
    json_object_set_new(o, "matrix", matrix);
    json_object_set_new(o, "kinds", kinds);
    json_object_set_new(o, "counts", counts);

    json_t *aff = json_array();
    for (size_t r = 0; r < v->nrows; r++) {
        const char *cpus;
        int numa;
        hw_topo_affinity(v, (size_t)v->rows[r], &cpus, &numa);
        json_t *x = json_object();
        json_object_set_new(x, "cpus", json_string(cpus));
        json_object_set_new(x, "numa", json_integer(numa));
        json_array_append_new(aff, x);
    }
    json_object_set_new(o, "affinity", aff);

    const hw_topo_legend_t *rows;
    size_t nl = hw_topo_legend(&rows);
    json_t *legend = json_object();
    for (size_t i = 0; i < nl; i++)
        json_object_set_new(legend, rows[i].symbol, json_string(rows[i].text));
    json_object_set_new(o, "legend", legend);

    json_t *islands = json_array();
    int *members = cr_calloc(nd ? nd : 1, sizeof(int));
    for (size_t isl = 0; isl < v->nislands; isl++) {
        size_t cnt = 0;
        for (size_t r = 0; r < v->ndevrows; r++)
            if ((size_t)v->island[v->rows[r]] == isl)
                members[cnt++] = v->rows[r];
        if (!cnt)
            continue;
        json_t *x = json_object();
        json_object_set_new(x, "members", names_of(v, members, cnt));
        json_object_set_new(x, "indices", ints_of(members, cnt));
        json_array_append_new(islands, x);
    }
    free(members);
    json_object_set_new(o, "islands", islands);

    int *ids;
    size_t nids = hw_topo_numa_ids(n, &ids);
    json_t *numa = json_array();
    for (size_t q = 0; q < nids; q++) {
        json_t *x = json_object(), *dv = json_array(), *nv = json_array();
        json_object_set_new(x, "id", json_integer(ids[q]));
        json_object_set_new(x, "cpus", json_string(hw_topo_numa_cpus(n, ids[q])));
        for (size_t r = 0; r < v->nrows; r++) {
            const char *cpus;
            int id;
            hw_topo_affinity(v, (size_t)v->rows[r], &cpus, &id);
            if (id == ids[q])
                json_array_append_new(r < v->ndevrows ? dv : nv, json_string(v->names[v->rows[r]]));
        }
        json_object_set_new(x, "devices", dv);
        json_object_set_new(x, "nics", nv);
        json_array_append_new(numa, x);
    }
    free(ids);
    json_object_set_new(o, "numa", numa);

    json_t *doms = json_array();
    for (size_t i = 0; i < n->domains.n; i++) {
        const cr_domain_t *d = &n->domains.v[i];
        json_t *x = json_object();
        json_object_set_new(x, "kind", json_string(d->kind));
        json_object_set_new(x, "name", json_string(d->name));
        json_object_set_new(x, "members", names_of(v, d->members, d->nmembers));
        json_object_set_new(x, "indices", ints_of(d->members, d->nmembers));
        if (strcmp(d->kind, "tpu-slice") == 0) {
            json_object_set_new(x, "accelerator_type", json_string(d->accelerator_type));
            json_object_set_new(x, "topology", json_string(d->topology));
            json_object_set_new(x, "worker_id", json_integer(d->worker_id));
            json_object_set_new(x, "worker_count", json_integer(d->worker_count));
            json_t *hosts = json_array();
            for (size_t h = 0; h < d->nhosts; h++)
                json_array_append_new(hosts, json_string(d->hosts[h]));
            json_object_set_new(x, "hosts", hosts);
            json_t *chips = json_array();
            for (size_t k = 0; k < d->nmembers; k++) {
                if (!hw_topo_member_ok(v, d->members[k]))
                    continue;
                const cr_device_t *c = &n->devices.v[d->members[k]];
                json_t *cj = json_object(), *co = json_array();
                for (int a = 0; a < c->ncoords && a < 3; a++)
                    json_array_append_new(co, json_integer(c->coords[a]));
                json_object_set_new(cj, "name", json_string(v->names[d->members[k]]));
                json_object_set_new(cj, "coords", co);
                json_array_append_new(chips, cj);
            }
            json_object_set_new(x, "chips", chips);
        }
        json_array_append_new(doms, x);
    }
    json_object_set_new(o, "domains", doms);
    return o;
}

json_t *hw_topo_to_json(const cr_node_t *node)
{
    hw_topo_view_t v;
    hw_topo_view_init(&v, node);
    json_t *j = hw_topo_view_json(&v);
    hw_topo_view_fini(&v);
    return j;
}
