/* corral topo: how this node's devices and NICs are connected, printed the
 * way `nvidia-smi topo -m` prints it for every kind of accelerator, then
 * the islands of fast links, the NUMA nodes, the backends' domains and any
 * TPU slice. The output is deterministic: tests compare it. The JSON form
 * (schema corral.topo/v1) is documented in docs/topology.md. */
#include "cli.h"
#include "hw/topo.h"
#include <stdio.h>

static const char usage_line[] =
    "usage: corral topo [--json] [--spec FILE] [--root DIR] [--node FILE]\n";

static const char help[] =
    "\n"
    "  --json        print the topology as JSON (schema corral.topo/v1)\n"
    "  --spec FILE   the simulated node of a hardware spec (YAML or JSON)\n"
    "  --root DIR    read /sys, /dev and /proc under DIR (also CORRAL_SYSFS_ROOT)\n"
    "  --node FILE   a saved node description (corral hw --json), as it is\n"
    "\n"
    "docs/topology.md explains each symbol.\n";

static void usage(FILE *fp)
{
    fputs(usage_line, fp);
}

/* Column names by resource: what people call the devices. */
static const struct {
    const char *resource, *prefix;
} prefixes[] = {
    {"GPU", "GPU"},
    {"TPU", "TPU"},
    {"neuron_cores", "ND"},
    {"HPU", "HPU"},
};

typedef char name_t[32];

typedef struct view {
    const cr_node_t *node;
    hw_topo_matrix_t m;
    name_t *names; /* per matrix index: devices, then NICs */
    int *rows;     /* the matrix indices shown: physical devices, then NICs */
    size_t nrows, ndevrows;
    int *island; /* per device */
    size_t nislands;
} view_t;

static bool is_instance(const cr_node_t *n, size_t i)
{
    return n->devices.v[i].parent >= 0 && (size_t)n->devices.v[i].parent < n->devices.n;
}

/* A custom resource names its own columns ("widget0") when the name is
 * short and plain; anything else is "DEV". */
static const char *prefix_of(const cr_device_t *d)
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

static void view_init(view_t *v, const cr_node_t *node)
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
        if (is_instance(node, i))
            continue;
        const char *pre = prefix_of(&node->devices.v[i]);
        int ord = 0;
        for (size_t k = 0; k < i; k++)
            ord += !is_instance(node, k) && strcmp(prefix_of(&node->devices.v[k]), pre) == 0;
        snprintf(v->names[i], sizeof(v->names[i]), "%s%d", pre, ord);
        v->rows[v->nrows++] = (int)i;
    }
    v->ndevrows = v->nrows;
    for (size_t i = 0; i < nd; i++) {
        if (!is_instance(node, i))
            continue;
        int p = node->devices.v[i].parent, ord = 0;
        for (size_t k = 0; k < i; k++)
            ord += is_instance(node, k) && node->devices.v[k].parent == p;
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

static void view_fini(view_t *v)
{
    hw_topo_matrix_fini(&v->m);
    CR_FREE(v->names);
    CR_FREE(v->rows);
    CR_FREE(v->island);
}

static const char *symbol(const view_t *v, size_t i, size_t j, char *buf, size_t size)
{
    const hw_topo_cell_t *c = hw_topo_cell(&v->m, i, j);
    return hw_topo_symbol(c->kind, c->count, buf, size);
}

static int device_numa(const cr_node_t *n, size_t i)
{
    const cr_device_t *d = &n->devices.v[i];
    return d->numa >= 0 || !is_instance(n, i) ? d->numa : n->devices.v[d->parent].numa;
}

/* Backends fill domains directly; a member that is not a device is
 * skipped rather than trusted. */
static bool member_ok(const view_t *v, int m)
{
    return m >= 0 && (size_t)m < v->node->devices.n;
}

static const char *numa_cpus(const cr_node_t *n, int numa)
{
    for (size_t i = 0; i < n->numa.n; i++)
        if (n->numa.v[i].id == numa)
            return n->numa.v[i].cpus;
    return "";
}

/* CPU and NUMA affinity of a matrix row; a NIC has its NUMA node's CPUs. */
static void affinity(const view_t *v, size_t i, const char **cpus, int *numa)
{
    const cr_node_t *n = v->node;
    if (i < n->devices.n) {
        *cpus = n->devices.v[i].cpus;
        *numa = device_numa(n, i);
    } else {
        *numa = n->nics.v[i - n->devices.n].numa;
        *cpus = *numa >= 0 ? numa_cpus(n, *numa) : "";
    }
}

static void speed_text(uint64_t mbps, char *buf, size_t size)
{
    if (mbps >= 1000 && mbps % 1000 == 0)
        snprintf(buf, size, "%llu Gb/s", (unsigned long long)(mbps / 1000));
    else if (mbps >= 1000)
        snprintf(buf, size, "%.1f Gb/s", (double)mbps / 1000);
    else
        snprintf(buf, size, "%llu Mb/s", (unsigned long long)mbps);
}

/* ---------------- text ---------------- */

/* Prints a line without trailing blanks, so that columns padded for
 * alignment leave nothing behind at the end. */
static void put_line(cr_buf_t *b)
{
    size_t len = b->len;
    while (len && b->s[len - 1] == ' ')
        len--;
    printf("%.*s\n", (int)len, b->s ? b->s : "");
    b->len = 0;
    if (b->s)
        b->s[0] = '\0';
}

/* Each column is as wide as its name or widest symbol (at least 4, the
 * widest fixed symbol), plus two blanks. */
static void print_matrix(const view_t *v)
{
    size_t wname = 0, wcpu = strlen("CPU Affinity");
    size_t *w = cr_calloc(v->nrows, sizeof(*w));
    char sym[16];
    for (size_t r = 0; r < v->nrows; r++) {
        size_t i = (size_t)v->rows[r], len = strlen(v->names[i]);
        wname = len > wname ? len : wname;
        w[r] = len > 4 ? len : 4;
        const char *cpus;
        int numa;
        affinity(v, i, &cpus, &numa);
        wcpu = strlen(cpus) > wcpu ? strlen(cpus) : wcpu;
    }
    for (size_t r = 0; r < v->nrows; r++)
        for (size_t c = 0; c < v->nrows; c++) {
            size_t len =
                strlen(symbol(v, (size_t)v->rows[r], (size_t)v->rows[c], sym, sizeof(sym)));
            w[c] = len > w[c] ? len : w[c];
        }
    cr_buf_t b = {0};
    cr_buf_printf(&b, "%-*s", (int)(wname + 2), "");
    for (size_t c = 0; c < v->nrows; c++)
        cr_buf_printf(&b, "%-*s", (int)(w[c] + 2), v->names[v->rows[c]]);
    cr_buf_printf(&b, "%-*s  NUMA Affinity  GPU NUMA ID", (int)wcpu, "CPU Affinity");
    put_line(&b);
    for (size_t r = 0; r < v->nrows; r++) {
        size_t i = (size_t)v->rows[r];
        cr_buf_printf(&b, "%-*s", (int)(wname + 2), v->names[i]);
        for (size_t c = 0; c < v->nrows; c++)
            cr_buf_printf(&b, "%-*s", (int)(w[c] + 2),
                          symbol(v, i, (size_t)v->rows[c], sym, sizeof(sym)));
        const char *cpus;
        int numa;
        affinity(v, i, &cpus, &numa);
        char nbuf[16], gbuf[16];
        snprintf(nbuf, sizeof(nbuf), numa >= 0 ? "%d" : "N/A", numa);
        /* as nvidia-smi topo -m: the NUMA node that is the GPU's own memory
         * (Grace C2C), N/A where it has none */
        int gnuma = i < v->node->devices.n ? v->node->devices.v[i].memory_numa : -1;
        snprintf(gbuf, sizeof(gbuf), gnuma >= 0 ? "%d" : "N/A", gnuma);
        cr_buf_printf(&b, "%-*s  %-13s  %s", (int)wcpu, cpus[0] ? cpus : "N/A", nbuf, gbuf);
        put_line(&b);
    }
    cr_buf_free(&b);
    free(w);
}

/* Which link kinds the shown matrix uses, as a (1u << kind) mask. */
static unsigned kinds_used(const view_t *v)
{
    unsigned used = 0;
    for (size_t r = 0; r < v->nrows; r++)
        for (size_t c = 0; c < v->nrows; c++) {
            cr_link_kind_t k = hw_topo_cell(&v->m, (size_t)v->rows[r], (size_t)v->rows[c])->kind;
            if ((unsigned)k < CR_LINK_KIND_COUNT)
                used |= 1u << k;
        }
    return used;
}

static void print_legend(const view_t *v)
{
    const hw_topo_legend_t *rows;
    size_t n = hw_topo_legend(&rows);
    unsigned used = kinds_used(v);
    printf("\nLegend:\n\n");
    /* the fabrics only when present; X and the PCIe ladder always, as a
     * reference scale */
    for (size_t i = 0; i < n; i++)
        if (!(rows[i].kinds & HW_TOPO_FAST_KINDS) || (rows[i].kinds & used))
            printf("  %-4s = %s\n", rows[i].symbol, rows[i].text);
}

static void print_nics(const view_t *v)
{
    const cr_node_t *n = v->node;
    if (!n->nics.n)
        return;
    printf("\nNIC Legend:\n\n");
    for (size_t r = v->ndevrows; r < v->nrows; r++) {
        size_t k = (size_t)v->rows[r] - n->devices.n;
        const cr_nic_t *x = &n->nics.v[k];
        cr_buf_t b = {0};
        if (x->rdma)
            cr_buf_printf(&b, "%s%sRDMA", x->rdma_device, x->rdma_device[0] ? ", " : "");
        if (x->speed_mbps) {
            char s[32];
            speed_text(x->speed_mbps, s, sizeof(s));
            cr_buf_printf(&b, "%s%s", b.len ? ", " : "", s);
        }
        if (x->pci[0])
            cr_buf_printf(&b, "%s%s", b.len ? ", " : "", x->pci);
        printf("  %s: %s%s%s%s\n", v->names[n->devices.n + k], x->name, b.len ? " (" : "",
               b.len ? b.s : "", b.len ? ")" : "");
        cr_buf_free(&b);
    }
}

static void print_islands(const view_t *v)
{
    if (!v->ndevrows)
        return;
    printf("\nFast-link islands (devices joined by NVLink, xGMI, ICI, NeuronLink or RoCE):\n\n");
    for (size_t isl = 0; isl < v->nislands; isl++) {
        cr_buf_t b = {0};
        /* the symbols joining members, each named once, in order met */
        char syms[8][16];
        size_t nsyms = 0;
        for (size_t r = 0; r < v->ndevrows; r++) {
            size_t i = (size_t)v->rows[r];
            if ((size_t)v->island[i] != isl)
                continue;
            cr_buf_printf(&b, " %s", v->names[i]);
            for (size_t q = 0; q < r; q++) {
                size_t j = (size_t)v->rows[q];
                const hw_topo_cell_t *c = hw_topo_cell(&v->m, i, j);
                if ((size_t)v->island[j] != isl || !hw_topo_is_fast(c->kind))
                    continue;
                char sym[16];
                hw_topo_symbol(c->kind, c->count, sym, sizeof(sym));
                bool seen = false;
                for (size_t k = 0; k < nsyms && !seen; k++)
                    seen = strcmp(syms[k], sym) == 0;
                if (!seen && nsyms < CR_ARRAY_SIZE(syms))
                    memcpy(syms[nsyms++], sym, sizeof(sym));
            }
        }
        if (b.len) {
            printf("  island %zu:%s (", isl, b.s);
            for (size_t k = 0; k < nsyms; k++)
                printf("%s%s", k ? ", " : "", syms[k]);
            printf("%s)\n", nsyms ? "" : "no fast link");
        }
        cr_buf_free(&b);
    }
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The NUMA nodes to show: the node's own list, then any other id a device
 * or NIC names, ascending. */
static size_t numa_ids(const cr_node_t *n, int **out)
{
    size_t cap = n->numa.n + n->devices.n + n->nics.n + 1, cnt = 0, own = n->numa.n;
    int *ids = cr_malloc(cap * sizeof(int));
    for (size_t i = 0; i < n->numa.n; i++)
        ids[cnt++] = n->numa.v[i].id;
    for (size_t i = 0; i < n->devices.n + n->nics.n; i++) {
        int id = i < n->devices.n ? device_numa(n, i) : n->nics.v[i - n->devices.n].numa;
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

static void print_numa(const view_t *v)
{
    const cr_node_t *n = v->node;
    int *ids;
    size_t cnt = numa_ids(n, &ids);
    bool unknown = false;
    for (size_t r = 0; r < v->nrows; r++) {
        const char *cpus;
        int numa;
        affinity(v, (size_t)v->rows[r], &cpus, &numa);
        unknown |= numa < 0;
    }
    if (cnt || unknown)
        printf("\nNUMA nodes:\n\n");
    for (size_t q = 0; q <= cnt; q++) {
        int id = q < cnt ? ids[q] : -1;
        if (q == cnt && !unknown)
            break;
        cr_buf_t b = {0};
        for (size_t r = 0; r < v->nrows; r++) {
            const char *cpus;
            int numa;
            affinity(v, (size_t)v->rows[r], &cpus, &numa);
            if (numa == id)
                cr_buf_printf(&b, " %s", v->names[v->rows[r]]);
        }
        if (id >= 0) {
            const char *cpus = numa_cpus(n, id);
            printf("  NUMA %d%s%s%s:%s\n", id, cpus[0] ? " (cpus " : "", cpus, cpus[0] ? ")" : "",
                   b.len ? b.s : " -");
        } else {
            printf("  NUMA unknown:%s\n", b.s);
        }
        cr_buf_free(&b);
    }
    free(ids);
}

static void print_domains(const view_t *v)
{
    const cr_node_t *n = v->node;
    bool any = false;
    for (size_t i = 0; i < n->domains.n; i++) {
        const cr_domain_t *d = &n->domains.v[i];
        if (strcmp(d->kind, "tpu-slice") == 0 || strcmp(d->kind, "numa") == 0)
            continue;
        if (!any)
            printf("\nDomains reported by the backends:\n\n");
        any = true;
        printf("  %s %s:", d->kind, d->name[0] ? d->name : "-");
        for (size_t k = 0; k < d->nmembers; k++)
            if (member_ok(v, d->members[k]))
                printf(" %s", v->names[d->members[k]]);
        printf("%s\n", d->nmembers ? "" : " -");
    }
}

/* "4x4" or "2x2x2": dims[0..nd), each 1..64, at most 4096 chips. */
static int parse_topology(const char *s, int dims[3])
{
    int nd = 0;
    long total = 1;
    const char *p = s;
    while (*p) {
        char *end;
        if (nd == 3 || *p < '0' || *p > '9')
            return 0;
        long x = strtol(p, &end, 10);
        if (x < 1 || x > 64 || (*end && *end != 'x'))
            return 0;
        dims[nd++] = (int)x;
        total *= x;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return 0;
    }
    return nd >= 1 && total <= 4096 ? nd : 0;
}

static void print_mesh(const view_t *v, const cr_domain_t *d)
{
    const cr_node_t *n = v->node;
    int dims[3] = {1, 1, 1};
    int nd = parse_topology(d->topology, dims);
    if (!nd) {
        printf("\n  mesh not drawn: topology '%s' is not AxB or AxBxC (at most 64 a side)\n",
               d->topology);
        return;
    }
    size_t w = 1;
    for (size_t k = 0; k < d->nmembers; k++) {
        if (!member_ok(v, d->members[k]))
            continue;
        size_t len = strlen(v->names[d->members[k]]);
        w = len > w ? len : w;
    }
    w += 2;
    int planes = nd == 3 ? dims[2] : 1;
    printf("\n  mesh %s (x across, y down; a name is a chip of this host, '.' one of another "
           "host):\n",
           d->topology);
    cr_buf_t b = {0};
    for (int z = 0; z < planes; z++) {
        printf("\n");
        if (nd == 3)
            printf("  z=%d\n", z);
        cr_buf_printf(&b, "      ");
        for (int x = 0; x < dims[0]; x++) {
            char h[16];
            snprintf(h, sizeof(h), "x%d", x);
            cr_buf_printf(&b, "%-*s", (int)w, h);
        }
        put_line(&b);
        for (int y = 0; y < dims[1]; y++) {
            cr_buf_printf(&b, "  y%-3d", y);
            for (int x = 0; x < dims[0]; x++) {
                const char *cell = ".";
                for (size_t k = 0; k < d->nmembers; k++) {
                    if (!member_ok(v, d->members[k]))
                        continue;
                    const cr_device_t *c = &n->devices.v[d->members[k]];
                    int cx = c->ncoords > 0 ? c->coords[0] : 0;
                    int cy = c->ncoords > 1 ? c->coords[1] : 0;
                    int cz = c->ncoords > 2 ? c->coords[2] : 0;
                    if (c->ncoords && cx == x && cy == y && cz == z)
                        cell = v->names[d->members[k]];
                }
                cr_buf_printf(&b, "%-*s", (int)w, cell);
            }
            put_line(&b);
        }
    }
    cr_buf_free(&b);
    for (size_t k = 0; k < d->nmembers; k++) {
        if (!member_ok(v, d->members[k]))
            continue;
        const cr_device_t *c = &n->devices.v[d->members[k]];
        bool inside = c->ncoords > 0 && c->ncoords <= 3;
        for (int a = 0; a < c->ncoords && a < 3; a++)
            inside &= c->coords[a] < (a < nd ? dims[a] : 1);
        if (!inside)
            printf("  %s is not drawn: its coordinates lie outside the %s mesh\n",
                   v->names[d->members[k]], d->topology);
    }
}

static void coords_text(const cr_device_t *c, char *buf, size_t size)
{
    if (!c->ncoords) {
        snprintf(buf, size, "(?)");
        return;
    }
    size_t len = (size_t)snprintf(buf, size, "(");
    for (int a = 0; a < c->ncoords && a < 3 && len < size; a++)
        len += (size_t)snprintf(buf + len, size - len, "%s%d", a ? "," : "", c->coords[a]);
    if (len < size)
        snprintf(buf + len, size - len, ")");
}

static void print_slices(const view_t *v)
{
    const cr_node_t *n = v->node;
    for (size_t i = 0; i < n->domains.n; i++) {
        const cr_domain_t *d = &n->domains.v[i];
        if (strcmp(d->kind, "tpu-slice") != 0)
            continue;
        printf("\nTPU slice %s:\n\n", d->name[0] ? d->name : "(unnamed)");
        printf("  accelerator type %s, topology %s",
               d->accelerator_type[0] ? d->accelerator_type : "?",
               d->topology[0] ? d->topology : "?");
        if (d->worker_id >= 0)
            printf(", worker %d of %d", d->worker_id, d->worker_count);
        printf("\n  hosts:");
        for (size_t h = 0; h < d->nhosts; h++)
            printf(" %s%s", d->hosts[h], (int)h == d->worker_id ? " (this host)" : "");
        printf("%s\n  this host's chips:", d->nhosts ? "" : " -");
        for (size_t k = 0; k < d->nmembers; k++) {
            if (!member_ok(v, d->members[k]))
                continue;
            char co[48];
            coords_text(&n->devices.v[d->members[k]], co, sizeof(co));
            printf(" %s %s", v->names[d->members[k]], co);
        }
        printf("%s\n", d->nmembers ? "" : " -");
        print_mesh(v, d);
    }
}

static void print_instances(const view_t *v)
{
    const cr_node_t *n = v->node;
    bool any = false;
    for (size_t i = 0; i < n->devices.n; i++) {
        if (!is_instance(n, i))
            continue;
        if (!any)
            printf("\nMIG instances (each connected as its GPU is):\n\n");
        any = true;
        const cr_device_t *d = &n->devices.v[i];
        printf("  %s: device %zu on %s%s%s\n", v->names[i], i, v->names[d->parent],
               d->mig_profile[0] ? ", " : "", d->mig_profile);
    }
}

static void print_text(const view_t *v)
{
    const cr_node_t *n = v->node;
    cr_buf_t b = {0};
    for (size_t r = 0; r < v->ndevrows; r++) {
        const char *pre = prefix_of(&n->devices.v[v->rows[r]]);
        bool first = true;
        for (size_t q = 0; q < r; q++)
            first &= strcmp(prefix_of(&n->devices.v[v->rows[q]]), pre) != 0;
        if (!first)
            continue;
        size_t cnt = 0;
        for (size_t q = r; q < v->ndevrows; q++)
            cnt += strcmp(prefix_of(&n->devices.v[v->rows[q]]), pre) == 0;
        cr_buf_printf(&b, "%s%zu %s", b.len ? ", " : "", cnt, pre);
    }
    printf("node %s (%s): %s, %zu NIC%s%s\n", n->id, n->hostname, b.len ? b.s : "no accelerators",
           n->nics.n, n->nics.n == 1 ? "" : "s",
           n->simulated ? "  [simulated: described by a hardware spec, not discovered]" : "");
    cr_buf_free(&b);
    if (v->nrows) {
        printf("\n");
        print_matrix(v);
        print_legend(v);
        print_nics(v);
    }
    print_instances(v);
    print_islands(v);
    print_numa(v);
    print_domains(v);
    print_slices(v);
}

/* ---------------- JSON ---------------- */

static json_t *names_of(const view_t *v, const int *idx, size_t n)
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

static json_t *to_json(const view_t *v)
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
        json_object_set_new(x, "numa", json_integer(device_numa(n, i)));
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
        if (!is_instance(n, i))
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
        affinity(v, (size_t)v->rows[r], &cpus, &numa);
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
    size_t nids = numa_ids(n, &ids);
    json_t *numa = json_array();
    for (size_t q = 0; q < nids; q++) {
        json_t *x = json_object(), *dv = json_array(), *nv = json_array();
        json_object_set_new(x, "id", json_integer(ids[q]));
        json_object_set_new(x, "cpus", json_string(numa_cpus(n, ids[q])));
        for (size_t r = 0; r < v->nrows; r++) {
            const char *cpus;
            int id;
            affinity(v, (size_t)v->rows[r], &cpus, &id);
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
                if (!member_ok(v, d->members[k]))
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

/* ---------------- the command ---------------- */

static int load_node_file(const char *path, cr_node_t **out)
{
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j) {
        if (jerr.line < 1) /* not read at all: jansson's text names the file */
            fprintf(stderr, "corral topo: %s\n", jerr.text);
        else
            fprintf(stderr,
                    "corral topo: %s:%d:%d: %s (expected a node description as "
                    "`corral hw --json` prints it)\n",
                    path, jerr.line, jerr.column, jerr.text);
        return CR_EPARSE;
    }
    cr_node_t *node = hw_node_new();
    hw_json_error_t err;
    int rc = hw_node_from_json(j, node, &err);
    json_decref(j);
    if (rc) {
        fprintf(stderr, "corral topo: %s: at %s: %s\n", path, err.path[0] ? err.path : "top",
                err.msg);
        hw_node_free(node);
        return rc;
    }
    *out = node;
    return 0;
}

int cli_topo(int argc, char **argv)
{
    bool json = false;
    const char *spec = NULL, *root = NULL, *file = NULL;
    const cli_opt_t opts[] = {
        CLI_FLAG("json", &json),
        CLI_STR("spec", &spec),
        CLI_STR("root", &root),
        CLI_STR("node", &file),
        CLI_END,
    };
    int first = cli_parse_opts("corral topo", opts, argc, argv, usage_line, help, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (first < argc) {
        fprintf(stderr, "corral topo: unexpected argument '%s'\n", argv[first]);
        usage(stderr);
        return CLI_USAGE;
    }
    if ((spec != NULL) + (root != NULL) + (file != NULL) > 1) {
        fprintf(stderr, "corral topo: --spec, --root and --node exclude each other\n");
        usage(stderr);
        return CLI_USAGE;
    }
    cr_node_t *node;
    if (file ? load_node_file(file, &node) : cli_discover(spec, root, &node))
        return CLI_FAIL;
    view_t v;
    view_init(&v, node);
    if (json) {
        json_t *j = to_json(&v);
        cli_print_json(j);
        json_decref(j);
    } else {
        print_text(&v);
    }
    view_fini(&v);
    hw_node_free(node);
    return CLI_OK;
}
