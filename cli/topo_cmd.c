/* corral topo: how this node's devices and NICs are connected, printed the
 * way `nvidia-smi topo -m` prints it for every kind of accelerator, then
 * the islands of fast links, the NUMA nodes, the backends' domains and any
 * TPU slice. The output is deterministic: tests compare it. The JSON form
 * (schema corral.topo/v1) is documented in docs/topology.md. */
#include "cli.h"
#include "hw/topo_view.h"
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
static void print_matrix(const hw_topo_view_t *v)
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
        hw_topo_affinity(v, i, &cpus, &numa);
        wcpu = strlen(cpus) > wcpu ? strlen(cpus) : wcpu;
    }
    for (size_t r = 0; r < v->nrows; r++)
        for (size_t c = 0; c < v->nrows; c++) {
            size_t len = strlen(
                hw_topo_view_symbol(v, (size_t)v->rows[r], (size_t)v->rows[c], sym, sizeof(sym)));
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
                          hw_topo_view_symbol(v, i, (size_t)v->rows[c], sym, sizeof(sym)));
        const char *cpus;
        int numa;
        hw_topo_affinity(v, i, &cpus, &numa);
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
static unsigned kinds_used(const hw_topo_view_t *v)
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

static void print_legend(const hw_topo_view_t *v)
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

static void print_nics(const hw_topo_view_t *v)
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
            hw_topo_speed_text(x->speed_mbps, s, sizeof(s));
            cr_buf_printf(&b, "%s%s", b.len ? ", " : "", s);
        }
        if (x->pci[0])
            cr_buf_printf(&b, "%s%s", b.len ? ", " : "", x->pci);
        printf("  %s: %s%s%s%s\n", v->names[n->devices.n + k], x->name, b.len ? " (" : "",
               b.len ? b.s : "", b.len ? ")" : "");
        cr_buf_free(&b);
    }
}

static void print_islands(const hw_topo_view_t *v)
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

static void print_numa(const hw_topo_view_t *v)
{
    const cr_node_t *n = v->node;
    int *ids;
    size_t cnt = hw_topo_numa_ids(n, &ids);
    bool unknown = false;
    for (size_t r = 0; r < v->nrows; r++) {
        const char *cpus;
        int numa;
        hw_topo_affinity(v, (size_t)v->rows[r], &cpus, &numa);
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
            hw_topo_affinity(v, (size_t)v->rows[r], &cpus, &numa);
            if (numa == id)
                cr_buf_printf(&b, " %s", v->names[v->rows[r]]);
        }
        if (id >= 0) {
            const char *cpus = hw_topo_numa_cpus(n, id);
            printf("  NUMA %d%s%s%s:%s\n", id, cpus[0] ? " (cpus " : "", cpus, cpus[0] ? ")" : "",
                   b.len ? b.s : " -");
        } else {
            printf("  NUMA unknown:%s\n", b.s);
        }
        cr_buf_free(&b);
    }
    free(ids);
}

static void print_domains(const hw_topo_view_t *v)
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
            if (hw_topo_member_ok(v, d->members[k]))
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

static void print_mesh(const hw_topo_view_t *v, const cr_domain_t *d)
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
        if (!hw_topo_member_ok(v, d->members[k]))
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
                    if (!hw_topo_member_ok(v, d->members[k]))
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
        if (!hw_topo_member_ok(v, d->members[k]))
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

static void print_slices(const hw_topo_view_t *v)
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
            if (!hw_topo_member_ok(v, d->members[k]))
                continue;
            char co[48];
            coords_text(&n->devices.v[d->members[k]], co, sizeof(co));
            printf(" %s %s", v->names[d->members[k]], co);
        }
        printf("%s\n", d->nmembers ? "" : " -");
        print_mesh(v, d);
    }
}

static void print_instances(const hw_topo_view_t *v)
{
    const cr_node_t *n = v->node;
    bool any = false;
    for (size_t i = 0; i < n->devices.n; i++) {
        if (!hw_topo_is_instance(n, i))
            continue;
        if (!any)
            printf("\nMIG instances (each connected as its GPU is):\n\n");
        any = true;
        const cr_device_t *d = &n->devices.v[i];
        printf("  %s: device %zu on %s%s%s\n", v->names[i], i, v->names[d->parent],
               d->mig_profile[0] ? ", " : "", d->mig_profile);
    }
}

static void print_text(const hw_topo_view_t *v)
{
    const cr_node_t *n = v->node;
    cr_buf_t b = {0};
    for (size_t r = 0; r < v->ndevrows; r++) {
        const char *pre = hw_topo_prefix_of(&n->devices.v[v->rows[r]]);
        bool first = true;
        for (size_t q = 0; q < r; q++)
            first &= strcmp(hw_topo_prefix_of(&n->devices.v[v->rows[q]]), pre) != 0;
        if (!first)
            continue;
        size_t cnt = 0;
        for (size_t q = r; q < v->ndevrows; q++)
            cnt += strcmp(hw_topo_prefix_of(&n->devices.v[v->rows[q]]), pre) == 0;
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
    hw_topo_view_t v;
    hw_topo_view_init(&v, node);
    if (json) {
        json_t *j = hw_topo_view_json(&v);
        cli_print_json(j);
        json_decref(j);
    } else {
        print_text(&v);
    }
    hw_topo_view_fini(&v);
    hw_node_free(node);
    return CLI_OK;
}
