/* Cluster and trace files for `corral sim`: YAML (or JSON, which YAML
 * reads too) with templates and counts, so that a 10,000-node cluster is a
 * few lines. Every error names the file, the place in it and what was
 * expected there. */
#include "sched_int.h"
#include "hw/hw.h" /* hw_node_new/free: the node description, not discovery */
#include <libfyaml.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#define MAX_NODES 1000000
#define MAX_ARRIVALS 10000000u

typedef struct fctx {
    const char *path;
    char **errmsg;
    size_t max_nodes;
    char *own; /* the file's text: the document points into it */
} fctx_t;

/* off: a byte offset inside the scalar to add to its column (a resource
 * string's bad character), or 0. */
static int vferr(fctx_t *f, struct fy_node *n, int off, const char *fmt, va_list ap)
{
    char what[256];
    vsnprintf(what, sizeof(what), fmt, ap);
    char *where = n ? fy_node_get_path(n) : NULL;
    int line = 0, col = 0;
    struct fy_token *t = n ? fy_node_get_scalar_token(n) : NULL;
    const struct fy_mark *m = t ? fy_token_start_mark(t) : NULL;
    if (m) {
        line = m->line + 1;
        col = m->column + 1 + off;
    }
    free(*f->errmsg);
    if (line)
        *f->errmsg = cr_asprintf("%s:%d:%d: %s: %s", f->path, line, col, where ? where : "/", what);
    else
        *f->errmsg = cr_asprintf("%s: %s: %s", f->path, where ? where : "/", what);
    free(where);
    return CR_ESCHEMA;
}

static int ferr(fctx_t *f, struct fy_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int ferr(fctx_t *f, struct fy_node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vferr(f, n, 0, fmt, ap);
    va_end(ap);
    return rc;
}

static int ferr_at(fctx_t *f, struct fy_node *n, int off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int ferr_at(fctx_t *f, struct fy_node *n, int off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vferr(f, n, off, fmt, ap);
    va_end(ap);
    return rc;
}

/* libfyaml reports a syntax error as "SOURCE:LINE:COL: error: MSG" through
 * the diagnostic output; keep the first one. */
typedef struct diagcap {
    char first[256];
} diagcap_t;

static void diag_out(struct fy_diag *diag, void *user, const char *buf, size_t len)
{
    diagcap_t *d = user;
    CR_UNUSED(diag);
    if (d->first[0] || !memmem(buf, len, ": error: ", 9))
        return;
    if (len >= sizeof(d->first))
        len = sizeof(d->first) - 1;
    memcpy(d->first, buf, len);
    d->first[len] = '\0';
}

/* The offset of the first byte that is not UTF-8 text (or a NUL), or -1.
 * libfyaml 0.7.12 loops forever on some invalid UTF-8 (a '%' directive
 * followed by a truncated sequence), so nothing else reaches it. */
static long bad_utf8(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char ch = s[i];
        size_t n = ch < 0x80             ? 1
                   : (ch & 0xe0) == 0xc0 ? 2
                   : (ch & 0xf0) == 0xe0 ? 3
                   : (ch & 0xf8) == 0xf0 ? 4
                                         : 0;
        if (!ch || !n || i + n > len || (n == 2 && ch < 0xc2) || (n == 4 && ch > 0xf4))
            return (long)i;
        for (size_t k = 1; k < n; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return (long)i;
        if ((n == 3 && ch == 0xe0 && s[i + 1] < 0xa0) ||
            (n == 4 && ch == 0xf0 && s[i + 1] < 0x90) ||
            (n == 3 && ch == 0xed && s[i + 1] >= 0xa0) ||
            (n == 4 && ch == 0xf4 && s[i + 1] >= 0x90))
            return (long)i;
        i += n;
    }
    return -1;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    cr_buf_t b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0 && b.len < (64u << 20))
        cr_buf_append(&b, chunk, n);
    fclose(fp);
    if (!b.s)
        cr_buf_append(&b, "", 0);
    *len = b.len;
    return b.s;
}

static struct fy_document *load_doc(fctx_t *f, const char *data, size_t len)
{
    char *own = NULL;
    if (!data) {
        data = own = read_all(f->path, &len);
        if (!data) {
            free(*f->errmsg);
            *f->errmsg = cr_asprintf("%s: cannot read the file", f->path);
            return NULL;
        }
    }
    long bad = bad_utf8((const unsigned char *)data, len);
    if (bad >= 0) {
        int line = 1, col = 1;
        for (long i = 0; i < bad; i++, col++)
            if (data[i] == '\n')
                line++, col = 0;
        free(*f->errmsg);
        *f->errmsg = cr_asprintf("%s:%d:%d: not UTF-8 text (byte 0x%02x)", f->path, line, col,
                                 (unsigned char)data[bad]);
        free(own);
        return NULL;
    }
    diagcap_t cap = {{0}};
    struct fy_diag_cfg dcfg;
    fy_diag_cfg_default(&dcfg);
    dcfg.fp = NULL;
    dcfg.output_fn = diag_out;
    dcfg.user = &cap;
    dcfg.colorize = false;
    dcfg.show_source = false;
    dcfg.show_position = true;
    dcfg.show_type = false;
    dcfg.show_module = false;
    struct fy_diag *diag = fy_diag_create(&dcfg);
    struct fy_parse_cfg cfg = {.flags = FYPCF_QUIET, .diag = diag};
    struct fy_document *d = fy_document_build_from_string(&cfg, data, len);
    if (!d || !fy_document_root(d)) {
        free(*f->errmsg);
        char *e = strstr(cap.first, ": error: ");
        int line = 0, col = 0;
        if (e) {
            /* walk back over ":LINE:COL" */
            *e = '\0';
            char *c2 = strrchr(cap.first, ':');
            if (c2) {
                col = atoi(c2 + 1);
                *c2 = '\0';
                char *c1 = strrchr(cap.first, ':');
                line = c1 ? atoi(c1 + 1) : 0;
            }
            char *nl = strchr(e + 9, '\n');
            if (nl)
                *nl = '\0';
        }
        if (e && line > 0)
            *f->errmsg = cr_asprintf("%s:%d:%d: %s", f->path, line, col, e + 9);
        else
            *f->errmsg = cr_asprintf("%s: empty, or not YAML or JSON", f->path);
        if (d)
            fy_document_destroy(d);
        d = NULL;
    }
    if (diag)
        fy_diag_destroy(diag);
    if (d)
        f->own = own;
    else
        free(own);
    return d;
}

static void doc_free(fctx_t *f, struct fy_document *d)
{
    if (d)
        fy_document_destroy(d);
    CR_FREE(f->own);
}

/* A scalar as a NUL-terminated string in buf. */
static int scalar(fctx_t *f, struct fy_node *n, char *buf, size_t size)
{
    size_t len;
    const char *s = fy_node_get_type(n) == FYNT_SCALAR ? fy_node_get_scalar(n, &len) : NULL;
    if (!s)
        return ferr(f, n, "expected a value, not a list or mapping");
    if (len >= size)
        return ferr(f, n, "value longer than %zu characters", size - 1);
    memcpy(buf, s, len);
    buf[len] = '\0';
    return 0;
}

static int get_int(fctx_t *f, struct fy_node *n, int64_t lo, int64_t hi, int64_t *out)
{
    char buf[64];
    int rc = scalar(f, n, buf, sizeof(buf));
    if (rc)
        return rc;
    if (cr_parse_i64(buf, 10, out) || *out < lo || *out > hi)
        return ferr(f, n, "expected a whole number from %lld to %lld, found '%s'", (long long)lo,
                    (long long)hi, buf);
    return 0;
}

static int get_num(fctx_t *f, struct fy_node *n, double lo, double hi, double *out)
{
    char buf[64];
    int rc = scalar(f, n, buf, sizeof(buf));
    if (rc)
        return rc;
    char *end;
    *out = strtod(buf, &end);
    if (end == buf || *end || !isfinite(*out) || *out < lo || *out > hi)
        return ferr(f, n, "expected a number from %g to %g, found '%s'", lo, hi, buf);
    return 0;
}

/* ---- templates in names and labels: {i} {i/N} {i%N} {s} {w} ---- */

static int expand(fctx_t *f, struct fy_node *at, const char *tmpl, int64_t i, int64_t s, int64_t w,
                  char *out, size_t size)
{
    size_t o = 0;
    for (const char *p = tmpl; *p;) {
        if (*p != '{') {
            if (o + 1 >= size)
                return ferr(f, at, "expanded name longer than %zu characters", size - 1);
            out[o++] = *p++;
            continue;
        }
        const char *close = strchr(p, '}');
        if (!close || close - p < 2)
            return ferr(f, at, "unterminated '{' in '%s'", tmpl);
        char var = p[1];
        int64_t v = var == 'i' ? i : var == 's' ? s : var == 'w' ? w : -1;
        if (v < 0 || (var != 'i' && var != 's' && var != 'w'))
            return ferr(f, at, "unknown variable in '%s' (use {i}, {i/N}, {i%%N}, {s}, {w})", tmpl);
        if (p[2] == '/' || p[2] == '%') {
            char num[24];
            size_t nl = (size_t)(close - p - 3);
            if (nl == 0 || nl >= sizeof(num))
                return ferr(f, at, "expected a number after '%c' in '%s'", p[2], tmpl);
            memcpy(num, p + 3, nl);
            num[nl] = '\0';
            int64_t d;
            if (cr_parse_i64(num, 10, &d) || d <= 0)
                return ferr(f, at, "expected a positive number after '%c' in '%s'", p[2], tmpl);
            v = p[2] == '/' ? v / d : v % d;
        } else if (p + 2 != close) {
            return ferr(f, at, "unexpected text in '{...}' of '%s'", tmpl);
        }
        int k = snprintf(out + o, size - o, "%lld", (long long)v);
        if (k < 0 || (size_t)k >= size - o)
            return ferr(f, at, "expanded name longer than %zu characters", size - 1);
        o += (size_t)k;
        p = close + 1;
    }
    out[o] = '\0';
    return 0;
}

/* ---- cluster files ---- */

typedef struct nspec {
    int64_t cpus;
    uint64_t memory;
    char resource[24], sku[32];
    int64_t devices, island, numa;
    struct fy_node *labels[2]; /* template's, then the group's */
} nspec_t;

static int parse_spec_field(fctx_t *f, const char *key, struct fy_node *v, nspec_t *s, int lvl,
                            bool *known)
{
    *known = true;
    char buf[64];
    int rc = 0;
    if (strcmp(key, "cpus") == 0)
        rc = get_int(f, v, 0, 1 << 20, &s->cpus);
    else if (strcmp(key, "devices") == 0)
        rc = get_int(f, v, 0, SCHED_MAX_DEV, &s->devices);
    else if (strcmp(key, "island") == 0)
        rc = get_int(f, v, 0, SCHED_MAX_DEV, &s->island);
    else if (strcmp(key, "numa") == 0)
        rc = get_int(f, v, 0, 64, &s->numa);
    else if (strcmp(key, "resource") == 0)
        rc = scalar(f, v, s->resource, sizeof(s->resource));
    else if (strcmp(key, "sku") == 0)
        rc = scalar(f, v, s->sku, sizeof(s->sku));
    else if (strcmp(key, "memory") == 0) {
        int64_t q;
        sched_err_t e;
        if (!(rc = scalar(f, v, buf, sizeof(buf)))) {
            if (sched_parse_qty(buf, strlen(buf), &q, &e))
                return ferr(f, v, "memory: %s at byte %d", e.msg, e.pos);
            if (q % CR_QTY_ONE)
                return ferr(f, v, "memory must be a whole number of bytes");
            s->memory = (uint64_t)(q / CR_QTY_ONE);
        }
    } else if (strcmp(key, "labels") == 0) {
        if (fy_node_get_type(v) != FYNT_MAPPING)
            return ferr(f, v, "labels: expected a mapping of key: value");
        s->labels[lvl] = v;
    } else
        *known = false;
    return rc;
}

static int add_labels(fctx_t *f, struct fy_node *map, cr_node_t *node, int64_t i, int64_t sl,
                      int64_t w)
{
    void *it = NULL;
    struct fy_node_pair *p;
    while ((p = fy_node_mapping_iterate(map, &it))) {
        char k[256], v[256], ev[256];
        int rc = scalar(f, fy_node_pair_key(p), k, sizeof(k));
        if (!rc)
            rc = scalar(f, fy_node_pair_value(p), v, sizeof(v));
        if (!rc)
            rc = expand(f, fy_node_pair_value(p), v, i, sl, w, ev, sizeof(ev));
        if (rc)
            return rc;
        cr_node_set_label(node, k, ev);
    }
    return 0;
}

static int make_one(fctx_t *f, sched_cluster_t *c, struct fy_node *at, const nspec_t *s,
                    const char *name, int64_t i, int64_t sl, int64_t w, const char *slice,
                    const char *topo, const char *type, int workers)
{
    cr_node_t *node = hw_node_new();
    char msg[200];
    sched_node_spec_t sp = {.name = name,
                            .cpus = (int)s->cpus,
                            .memory = s->memory,
                            .resource = s->resource[0] ? s->resource : NULL,
                            .sku = s->sku,
                            .ndev = (int)s->devices,
                            .island = (int)s->island,
                            .numa = (int)s->numa,
                            .slice = slice,
                            .topology = topo,
                            .accel_type = type,
                            .worker_id = (int)w,
                            .worker_count = workers};
    int rc = sched_make_node(&sp, node, msg, sizeof(msg));
    if (rc) {
        rc = ferr(f, at, "node %s: %s", name, msg);
        goto out;
    }
    for (int l = 0; l < 2; l++)
        if (s->labels[l] && (rc = add_labels(f, s->labels[l], node, i, sl, w)))
            goto out;
    if ((rc = sched_cluster_add(c, node, msg, sizeof(msg))))
        rc = ferr(f, at, "node %s: %s", name, msg);
out:
    hw_node_free(node);
    return rc;
}

static int load_group(fctx_t *f, sched_cluster_t *c, struct fy_node *g, struct fy_node *templates,
                      size_t gi)
{
    if (fy_node_get_type(g) != FYNT_MAPPING)
        return ferr(f, g, "expected a mapping (template, count, name, ...)");
    nspec_t s = {0};
    struct fy_node *tn = fy_node_mapping_lookup_by_string(g, "template", FY_NT);
    if (tn) {
        char tname[128];
        int rc = scalar(f, tn, tname, sizeof(tname));
        if (rc)
            return rc;
        struct fy_node *t =
            templates ? fy_node_mapping_lookup_by_string(templates, tname, FY_NT) : NULL;
        if (!t || fy_node_get_type(t) != FYNT_MAPPING)
            return ferr(f, tn, "no template named '%s'", tname);
        void *it = NULL;
        struct fy_node_pair *p;
        while ((p = fy_node_mapping_iterate(t, &it))) {
            char k[64];
            bool known;
            if ((rc = scalar(f, fy_node_pair_key(p), k, sizeof(k))) ||
                (rc = parse_spec_field(f, k, fy_node_pair_value(p), &s, 0, &known)))
                return rc;
            if (!known)
                return ferr(f, fy_node_pair_key(p),
                            "unknown template field '%s' (cpus, memory, "
                            "resource, sku, devices, island, numa, labels)",
                            k);
        }
    }
    int64_t count = 1, slices = 0;
    char name[128] = "", topo[32] = "", type[32] = "", slice_name[128] = "";
    snprintf(name, sizeof(name), "g%zu-{i}", gi);
    void *it = NULL;
    struct fy_node_pair *p;
    int rc;
    while ((p = fy_node_mapping_iterate(g, &it))) {
        char k[64];
        struct fy_node *v = fy_node_pair_value(p);
        bool known;
        if ((rc = scalar(f, fy_node_pair_key(p), k, sizeof(k))))
            return rc;
        if (strcmp(k, "template") == 0)
            continue;
        if (strcmp(k, "count") == 0)
            rc = get_int(f, v, 1, (int64_t)f->max_nodes, &count);
        else if (strcmp(k, "slices") == 0)
            rc = get_int(f, v, 1, (int64_t)f->max_nodes, &slices);
        else if (strcmp(k, "name") == 0)
            rc = scalar(f, v, name, sizeof(name));
        else if (strcmp(k, "topology") == 0)
            rc = scalar(f, v, topo, sizeof(topo));
        else if (strcmp(k, "accelerator_type") == 0)
            rc = scalar(f, v, type, sizeof(type));
        else if (strcmp(k, "slice_name") == 0)
            rc = scalar(f, v, slice_name, sizeof(slice_name));
        else if ((rc = parse_spec_field(f, k, v, &s, 1, &known)) == 0 && !known)
            return ferr(f, fy_node_pair_key(p),
                        "unknown field '%s' (template, count, name, "
                        "slices, topology, accelerator_type, slice_name, cpus, memory, "
                        "resource, sku, devices, island, numa, labels)",
                        k);
        if (rc)
            return rc;
    }
    if (s.island && s.devices % s.island)
        return ferr(f, g, "island of %lld does not divide %lld devices", (long long)s.island,
                    (long long)s.devices);
    if (!slices) {
        if (topo[0])
            return ferr(f, g, "topology given without slices");
        if (c->nodes.n + (size_t)count > f->max_nodes)
            return ferr(f, g, "more than %zu nodes", f->max_nodes);
        for (int64_t i = 0; i < count; i++) {
            char nm[128];
            if ((rc = expand(f, g, name, i, 0, 0, nm, sizeof(nm))) ||
                (rc = make_one(f, c, g, &s, nm, i, 0, 0, NULL, NULL, NULL, 0)))
                return rc;
        }
        return 0;
    }
    sched_tpu_topo_t t;
    sched_err_t e;
    if (sched_parse_tpu_topology(topo, &t, &e))
        return ferr(f, g, "topology '%s': %s", topo, e.msg);
    if (s.devices <= 0 || t.chips % s.devices)
        return ferr(f, g, "topology %s (%d chips) is not a whole number of %lld-chip hosts", topo,
                    t.chips, (long long)s.devices);
    int hosts = t.chips / (int)s.devices;
    if (c->nodes.n + (size_t)slices * (size_t)hosts > f->max_nodes)
        return ferr(f, g, "more than %zu nodes", f->max_nodes);
    if (!slice_name[0])
        snprintf(slice_name, sizeof(slice_name), "g%zu-s{s}", gi);
    for (int64_t sl = 0, i = 0; sl < slices; sl++) {
        char sn[128];
        if ((rc = expand(f, g, slice_name, i, sl, 0, sn, sizeof(sn))))
            return rc;
        for (int w = 0; w < hosts; w++, i++) {
            char nm[128];
            if ((rc = expand(f, g, name, i, sl, w, nm, sizeof(nm))) ||
                (rc = make_one(f, c, g, &s, nm, i, sl, w, sn, topo, type, hosts)))
                return rc;
        }
    }
    return 0;
}

int sched_cluster_load(const char *path, const char *data, size_t len, sched_cluster_t **out,
                       char **errmsg)
{
    return sched__cluster_load(path, data, len, MAX_NODES, out, errmsg);
}

int sched__cluster_load(const char *path, const char *data, size_t len, size_t max_nodes,
                        sched_cluster_t **out, char **errmsg)
{
    fctx_t f = {path, errmsg, max_nodes, NULL};
    *errmsg = NULL;
    *out = NULL;
    struct fy_document *d = load_doc(&f, data, len);
    if (!d)
        return CR_EPARSE;
    sched_cluster_t *c = sched_cluster_new();
    int rc;
    struct fy_node *root = fy_document_root(d);
    if (fy_node_get_type(root) != FYNT_MAPPING) {
        rc = ferr(&f, root, "expected a mapping with 'nodes' (and optional 'templates')");
        goto fail;
    }
    struct fy_node *templates = fy_node_mapping_lookup_by_string(root, "templates", FY_NT);
    struct fy_node *nodes = fy_node_mapping_lookup_by_string(root, "nodes", FY_NT);
    if (templates && fy_node_get_type(templates) != FYNT_MAPPING) {
        rc = ferr(&f, templates, "templates: expected a mapping of name: fields");
        goto fail;
    }
    if (!nodes || fy_node_get_type(nodes) != FYNT_SEQUENCE) {
        rc = ferr(&f, nodes ? nodes : root, "nodes: expected a list of node groups");
        goto fail;
    }
    void *it = NULL;
    struct fy_node *g;
    size_t gi = 0;
    while ((g = fy_node_sequence_iterate(nodes, &it)))
        if ((rc = load_group(&f, c, g, templates, gi++)))
            goto fail;
    if (!c->nodes.n) {
        rc = ferr(&f, nodes, "the cluster has no nodes");
        goto fail;
    }
    for (size_t s = 0; s < c->slices.n; s++)
        for (int w = 0; w < c->slices.v[s].nworkers; w++)
            if (c->slices.v[s].worker_node[w] < 0) {
                rc = ferr(&f, nodes, "TPU slice %s has no worker %d",
                          sched_syms_name(&c->labels, c->slices.v[s].name), w);
                goto fail;
            }
    sched_cluster_finalize(c);
    doc_free(&f, d);
    *out = c;
    return 0;
fail:
    sched_cluster_free(c);
    doc_free(&f, d);
    return rc;
}

/* ---- trace files ---- */

static const char *strategies[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};

static int get_resources(fctx_t *f, sched_cluster_t *c, struct fy_node *v, sched_resreq_t *q)
{
    char buf[512];
    int rc = scalar(f, v, buf, sizeof(buf));
    if (rc)
        return rc;
    sched_err_t e;
    if (sched_parse_resources(&c->res, buf, q, &e))
        return ferr_at(f, v, e.pos > 0 ? e.pos : 0, "resources '%s': %s", buf, e.msg);
    return 0;
}

static int get_selector(fctx_t *f, sched_cluster_t *c, struct fy_node *v, sched_selector_t *s)
{
    char buf[1024];
    int rc = scalar(f, v, buf, sizeof(buf));
    if (rc)
        return rc;
    sched_err_t e;
    if (sched_parse_selector(&c->labels, buf, s, &e))
        return ferr_at(f, v, e.pos > 0 ? e.pos : 0, "selector '%s': %s", buf, e.msg);
    return 0;
}

static int get_duration(fctx_t *f, struct fy_node *v, double *lo, double *hi)
{
    char buf[64];
    int rc = scalar(f, v, buf, sizeof(buf));
    if (rc)
        return rc;
    char *dots = strstr(buf, "..");
    if (dots)
        *dots = '\0'; /* "60." alone would read as a number */
    char *end;
    *lo = strtod(buf, &end);
    if (end == buf || *end != '\0')
        goto bad;
    *hi = *lo;
    if (dots) {
        *hi = strtod(dots + 2, &end);
        if (end == dots + 2 || *end)
            goto bad;
    }
    if (!isfinite(*lo) || !isfinite(*hi) || *lo < 0 || *hi < *lo || *hi > 1e9)
        goto bad;
    return 0;
bad:
    if (dots)
        *dots = '.';
    return ferr(f, v,
                "expected a duration in seconds (60) or a range (30..90) from 0 to 1e9, "
                "found '%s'",
                buf);
}

static int load_group_req(fctx_t *f, sched_cluster_t *c, struct fy_node *g, sched_request_t *r)
{
    if (fy_node_get_type(g) != FYNT_MAPPING)
        return ferr(f, g, "group: expected a mapping (bundles, resources, strategy, ...)");
    int64_t nb = 1;
    sched_bundle_t b;
    memset(&b, 0, sizeof(b));
    r->strategy = SCHED_PACK;
    void *it = NULL;
    struct fy_node_pair *p;
    int rc;
    while ((p = fy_node_mapping_iterate(g, &it))) {
        char k[64], buf[256];
        struct fy_node *v = fy_node_pair_value(p);
        if ((rc = scalar(f, fy_node_pair_key(p), k, sizeof(k))))
            return rc;
        if (strcmp(k, "bundles") == 0)
            rc = get_int(f, v, 0, SCHED_MAX_BUNDLES, &nb);
        else if (strcmp(k, "resources") == 0)
            rc = get_resources(f, c, v, &b.req);
        else if (strcmp(k, "selector") == 0)
            rc = get_selector(f, c, v, &b.sel);
        else if (strcmp(k, "domain") == 0) {
            if (!(rc = scalar(f, v, buf, sizeof(buf))))
                r->domain_key = sched_syms_intern(&c->labels, buf, strlen(buf));
        } else if (strcmp(k, "strategy") == 0) {
            if ((rc = scalar(f, v, buf, sizeof(buf))))
                return rc;
            size_t s = 0;
            while (s < CR_ARRAY_SIZE(strategies) && strcmp(strategies[s], buf) != 0)
                s++;
            if (s == CR_ARRAY_SIZE(strategies))
                return ferr(f, v,
                            "strategy: expected PACK, SPREAD, STRICT_PACK or "
                            "STRICT_SPREAD, found '%s'",
                            buf);
            r->strategy = (sched_strategy_t)s;
        } else
            return ferr(f, fy_node_pair_key(p),
                        "unknown group field '%s' (bundles, resources, "
                        "selector, strategy, domain)",
                        k);
        if (rc)
            return rc;
    }
    if (nb == 0)
        return ferr(f, g, "a group needs at least one bundle");
    r->nbundles = (uint32_t)nb;
    r->bundles = cr_malloc((size_t)nb * sizeof(sched_bundle_t));
    for (int64_t i = 0; i < nb; i++)
        r->bundles[i] = b;
    return 0;
}

static int load_tpu_req(fctx_t *f, sched_cluster_t *c, struct fy_node *g, sched_request_t *r)
{
    if (fy_node_get_type(g) != FYNT_MAPPING)
        return ferr(f, g, "tpu: expected a mapping (generation, topology, chips_per_host, ...)");
    r->tpu.on = true;
    r->tpu.gen = -1;
    r->tpu.nslices = 1;
    r->tpu.chips_per_host = 4;
    bool have_topo = false;
    void *it = NULL;
    struct fy_node_pair *p;
    int rc;
    while ((p = fy_node_mapping_iterate(g, &it))) {
        char k[64], buf[64];
        struct fy_node *v = fy_node_pair_value(p);
        int64_t n;
        if ((rc = scalar(f, fy_node_pair_key(p), k, sizeof(k))))
            return rc;
        if (strcmp(k, "generation") == 0) {
            if (!(rc = scalar(f, v, buf, sizeof(buf))))
                r->tpu.gen = sched_syms_intern(&c->labels, buf, strlen(buf));
        } else if (strcmp(k, "topology") == 0) {
            sched_err_t e;
            if (!(rc = scalar(f, v, buf, sizeof(buf)))) {
                if (sched_parse_tpu_topology(buf, &r->tpu.topo, &e))
                    return ferr(f, v, "topology '%s': %s", buf, e.msg);
                have_topo = true;
            }
        } else if (strcmp(k, "chips_per_host") == 0) {
            if (!(rc = get_int(f, v, 1, 8, &n))) {
                if (n != 1 && n != 2 && n != 4 && n != 8)
                    return ferr(f, v, "chips_per_host must be 1, 2, 4 or 8");
                r->tpu.chips_per_host = (int)n;
            }
        } else if (strcmp(k, "slices") == 0) {
            if (!(rc = get_int(f, v, 1, 4096, &n)))
                r->tpu.nslices = (int)n;
        } else if (strcmp(k, "resources") == 0) {
            rc = get_resources(f, c, v, &r->tpu.extra);
        } else
            return ferr(f, fy_node_pair_key(p),
                        "unknown tpu field '%s' (generation, topology, "
                        "chips_per_host, slices, resources)",
                        k);
        if (rc)
            return rc;
    }
    if (!have_topo)
        return ferr(f, g, "tpu: a topology is required");
    if (r->tpu.topo.chips % r->tpu.chips_per_host)
        return ferr(f, g, "tpu: %d chips are not a whole number of %d-chip hosts",
                    r->tpu.topo.chips, r->tpu.chips_per_host);
    return 0;
}

static int load_stream(fctx_t *f, sched_cluster_t *c, struct fy_node *sn, sched_stream_t *s)
{
    if (fy_node_get_type(sn) != FYNT_MAPPING)
        return ferr(f, sn, "expected a mapping (at, count, every, resources | group | tpu, ...)");
    s->count = 1;
    s->dur_min = s->dur_max = 60;
    s->req.domain_key = -1;
    s->req.affinity_node = -1;
    sched_bundle_t b;
    memset(&b, 0, sizeof(b));
    int kinds = 0;
    void *it = NULL;
    struct fy_node_pair *p;
    int rc;
    while ((p = fy_node_mapping_iterate(sn, &it))) {
        char k[64], buf[64];
        struct fy_node *v = fy_node_pair_value(p);
        int64_t n;
        if ((rc = scalar(f, fy_node_pair_key(p), k, sizeof(k))))
            return rc;
        if (strcmp(k, "at") == 0)
            rc = get_num(f, v, 0, 1e9, &s->at);
        else if (strcmp(k, "every") == 0)
            rc = get_num(f, v, 0, 1e9, &s->every);
        else if (strcmp(k, "count") == 0) {
            if (!(rc = get_int(f, v, 1, MAX_ARRIVALS, &n)))
                s->count = (uint32_t)n;
        } else if (strcmp(k, "priority") == 0) {
            if (!(rc = get_int(f, v, -1000000, 1000000, &n)))
                s->priority = (int)n;
        } else if (strcmp(k, "duration") == 0)
            rc = get_duration(f, v, &s->dur_min, &s->dur_max);
        else if (strcmp(k, "resources") == 0) {
            rc = get_resources(f, c, v, &b.req);
            kinds |= 1;
        } else if (strcmp(k, "selector") == 0) {
            rc = get_selector(f, c, v, &b.sel);
            kinds |= 1;
        } else if (strcmp(k, "policy") == 0) {
            if ((rc = scalar(f, v, buf, sizeof(buf))))
                return rc;
            if (strcmp(buf, "hybrid") == 0)
                s->req.policy = SCHED_HYBRID;
            else if (strcmp(buf, "spread") == 0)
                s->req.policy = SCHED_SPREAD;
            else
                return ferr(f, v, "policy: expected hybrid or spread, found '%s'", buf);
        } else if (strcmp(k, "group") == 0) {
            if (kinds & 2)
                return ferr(f, v, "group given twice");
            rc = load_group_req(f, c, v, &s->req);
            kinds |= 2;
        } else if (strcmp(k, "tpu") == 0) {
            if (kinds & 4)
                return ferr(f, v, "tpu given twice");
            rc = load_tpu_req(f, c, v, &s->req);
            kinds |= 4;
        } else
            return ferr(f, fy_node_pair_key(p),
                        "unknown field '%s' (at, count, every, "
                        "duration, priority, resources, selector, policy, group, tpu)",
                        k);
        if (rc)
            return rc;
    }
    if (kinds != 1 && kinds != 2 && kinds != 4)
        return ferr(f, sn, "give exactly one of: resources (with selector, policy), group, tpu");
    if (kinds == 1) {
        s->req.nbundles = 1;
        s->req.bundles = cr_malloc(sizeof(sched_bundle_t));
        s->req.bundles[0] = b;
    }
    char msg[200];
    if (sched__validate(c, &s->req, msg, sizeof(msg)))
        return ferr(f, sn, "%s", msg);
    return 0;
}

void sched_trace_fini(sched_trace_t *t)
{
    for (size_t i = 0; i < t->streams.n; i++)
        free(t->streams.v[i].req.bundles);
    CR_VEC_FREE(&t->streams);
}

int sched_trace_load(const char *path, const char *data, size_t len, sched_cluster_t *c,
                     sched_trace_t *out, char **errmsg)
{
    fctx_t f = {path, errmsg, MAX_NODES, NULL};
    *errmsg = NULL;
    memset(out, 0, sizeof(*out));
    out->seed = 1;
    out->hold_after = 60;
    struct fy_document *d = load_doc(&f, data, len);
    if (!d)
        return CR_EPARSE;
    int rc;
    struct fy_node *root = fy_document_root(d);
    if (fy_node_get_type(root) != FYNT_MAPPING) {
        rc = ferr(&f, root, "expected a mapping with 'requests'");
        goto fail;
    }
    void *it = NULL;
    struct fy_node_pair *p;
    struct fy_node *reqs = NULL;
    while ((p = fy_node_mapping_iterate(root, &it))) {
        char k[64];
        struct fy_node *v = fy_node_pair_value(p);
        if ((rc = scalar(&f, fy_node_pair_key(p), k, sizeof(k))))
            goto fail;
        if (strcmp(k, "seed") == 0) {
            int64_t s;
            if ((rc = get_int(&f, v, 0, INT64_MAX, &s)))
                goto fail;
            out->seed = (uint64_t)s;
        } else if (strcmp(k, "hold_after") == 0) {
            if ((rc = get_num(&f, v, 0, 1e9, &out->hold_after)))
                goto fail;
        } else if (strcmp(k, "requests") == 0) {
            reqs = v;
        } else {
            rc =
                ferr(&f, fy_node_pair_key(p), "unknown field '%s' (seed, hold_after, requests)", k);
            goto fail;
        }
    }
    if (!reqs || fy_node_get_type(reqs) != FYNT_SEQUENCE) {
        rc = ferr(&f, reqs ? reqs : root, "requests: expected a list of request streams");
        goto fail;
    }
    it = NULL;
    struct fy_node *sn;
    uint64_t total = 0;
    while ((sn = fy_node_sequence_iterate(reqs, &it))) {
        sched_stream_t *s = CR_VEC_PUSH(&out->streams);
        if ((rc = load_stream(&f, c, sn, s)))
            goto fail;
        total += s->count;
        if (total > MAX_ARRIVALS) {
            rc = ferr(&f, sn, "more than %u requests in all", MAX_ARRIVALS);
            goto fail;
        }
    }
    doc_free(&f, d);
    return 0;
fail:
    sched_trace_fini(out);
    doc_free(&f, d);
    return rc;
}
