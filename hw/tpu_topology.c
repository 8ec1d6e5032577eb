/* TPU slice geometry (see tpu.h): the generation table, the valid slice
 * shapes per generation, pod type and topology strings, and the mesh
 * coordinates of each host's chips. Pure: no I/O, no allocation. */
#include "tpu.h"
#include "base/base.h"
#include <stdio.h>
#include <strings.h>

#define TPU_MAX_DIM 1024
#define TPU_MAX_CHIPS (1 << 20)

/* Slice shapes per generation, as Cloud TPU offers them. Where two shapes
 * have the same chip count, the usual one comes first: it is what a pod
 * type alone implies. v4, v5p and tpu7x: xpk's system characteristics
 * (src/xpk/core/system_characteristics.py: one shape per size, which is
 * the shape GKE gives that pod type; in order of size here), which agree
 * with cloud.google.com/tpu/docs/v5p's table (2x2x1 ... 16x16x24, v5p-128
 * = 4x4x4 on 16 hosts) and add tpu7x's one-chip VM 1x1x1. Other 3D shapes
 * of the same generations follow the grid rule of the row (each side a
 * multiple of 4, up to the pod's chips: v4 4096, v5p 8960, tpu7x 9216),
 * and a size no row lists means the most cube-like such shape. v5e/v6e:
 * cloud.google.com/tpu/docs/v5e and v6e (1x1 ... 16x16). */
/* clang-format off */
static const char *const topo_v2[] = {"2x2", "4x4", "4x8", "8x8", "8x16", "16x16", NULL};
static const char *const topo_v3[] = {"2x2",  "4x4",   "4x8",   "8x8",
                                      "8x16", "16x16", "16x32", "32x32", NULL};
static const char *const topo_v4[] = {"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8",
                                      "4x8x8", "8x8x8", "8x8x12", "8x8x16", "8x16x16", NULL};
static const char *const topo_v5p[] = {"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8",
                                       "4x4x12", "4x8x8", "4x4x20", "4x8x12", "4x4x28", "8x8x8",
                                       "4x12x12", "4x8x20", "4x4x44", "8x8x12", "4x4x52",
                                       "4x8x28", "4x12x20", "8x8x16", "4x4x68", "8x12x12",
                                       "4x4x76", "8x8x20", "4x12x28", "4x8x44", "4x4x92",
                                       "8x12x16", "4x20x20", "4x8x52", "12x12x12", "8x8x28",
                                       "4x4x116", "8x12x20", "4x4x124", "8x16x16", "4x12x44",
                                       "4x8x68", "4x20x28", "12x12x16", "4x4x148", "4x8x76",
                                       "4x12x52", "8x16x20", "4x4x164", "8x12x28", "4x4x172",
                                       "8x8x44", "12x12x20", "4x8x92", "4x4x188", "12x16x16",
                                       "4x28x28", "8x20x20", "4x12x68", "8x8x52", "4x4x212",
                                       "12x12x24", "4x20x44", "8x16x28", "4x12x76", "4x8x116",
                                       "4x4x236", "12x16x20", "4x4x244", "4x8x124", "12x12x28",
                                       "16x16x16", "4x20x52", "8x12x44", "8x8x68", "4x12x92",
                                       "8x20x28", "12x16x24", "4x8x148", "12x20x20", "8x8x76",
                                       "4x28x44", "8x12x52", "16x16x20", "12x12x36", "4x8x164",
                                       "12x16x28", "4x20x68", "4x8x172", "4x12x116", "8x16x44",
                                       "12x20x24", "4x28x52", "8x8x92", "4x12x124", "4x8x188",
                                       "4x20x76", "16x16x24", "12x24x24", "16x20x28", NULL};
static const char *const topo_v5e_v6e[] = {"1x1", "2x2", "2x4",  "4x4",   "2x8",
                                           "4x8", "8x8", "8x16", "16x16", NULL};
static const char *const topo_v7x[] = {"1x1x1", "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4",
                                       "4x4x8", "4x4x12", "4x8x8", "4x4x20", "4x8x12", "4x4x28",
                                       "8x8x8", "4x12x12", "4x8x20", "4x4x44", "8x8x12",
                                       "4x4x52", "4x8x28", "4x12x20", "8x8x16", "4x4x68",
                                       "8x12x12", "4x4x76", "8x8x20", "4x12x28", "4x8x44",
                                       "4x4x92", "8x12x16", "4x20x20", "4x8x52", "12x12x12",
                                       "8x8x28", "4x4x116", "8x12x20", "4x4x124", "8x16x16",
                                       "4x12x44", "4x8x68", "4x20x28", "12x12x16", "4x4x148",
                                       "4x8x76", "4x12x52", "8x16x20", "4x4x164", "8x12x28",
                                       "4x4x172", "8x8x44", "12x12x20", "4x8x92", "4x4x188",
                                       "12x16x16", "4x28x28", "8x20x20", "4x12x68", "8x8x52",
                                       "4x4x212", "12x12x24", "4x20x44", "8x16x28", "4x12x76",
                                       "4x8x116", "4x4x236", "12x16x20", "4x4x244", "4x8x124",
                                       "12x12x28", "16x16x16", "4x20x52", "8x12x44", "8x8x68",
                                       "4x12x92", "8x20x28", "12x16x24", "4x8x148", "12x20x20",
                                       "8x8x76", "4x28x44", "8x12x52", "16x16x20", "12x12x36",
                                       "4x8x164", "12x16x28", "4x20x68", "4x8x172", "4x12x116",
                                       "8x16x44", "12x20x24", "4x28x52", "8x8x92", "4x12x124",
                                       "4x8x188", "4x20x76", "16x16x24", "12x24x24", "16x16x32",
                                       "16x20x28", "16x24x24", NULL};

static const tpu_gen_t gens[] = {
    {.name = "v2", .sku = "TPU-V2", .pci_device = 0x0027, .cores_per_chip = 2, .hbm_gib = 8,
     .pod_counts_cores = true, .ndims = 2, .topologies = topo_v2},
    {.name = "v3", .sku = "TPU-V3", .pci_device = 0x0027, .cores_per_chip = 2, .hbm_gib = 16,
     .pod_counts_cores = true, .ndims = 2, .topologies = topo_v3},
    {.name = "v4", .sku = "TPU-V4", .pci_device = 0x005e, .cores_per_chip = 2, .hbm_gib = 32,
     .pod_counts_cores = true, .ndims = 3, .topologies = topo_v4, .grid_step = 4,
     .grid_max_chips = 4096},
    {.name = "v5litepod", .alias = "v5e", .sku = "TPU-V5LITEPOD", .pci_device = 0x0063,
     .cores_per_chip = 1, .hbm_gib = 16, .pod_counts_cores = false, .ndims = 2,
     .single_host_chips = 8, .topologies = topo_v5e_v6e},
    {.name = "v5p", .sku = "TPU-V5P", .pci_device = 0x0062, .cores_per_chip = 2, .hbm_gib = 95,
     .pod_counts_cores = true, .ndims = 3, .topologies = topo_v5p, .grid_step = 4,
     .grid_max_chips = 8960},
    {.name = "v6e", .sku = "TPU-V6E", .pci_device = 0x006f, .cores_per_chip = 1, .hbm_gib = 32,
     .pod_counts_cores = false, .ndims = 2, .single_host_chips = 8,
     .topologies = topo_v5e_v6e},
    {.name = "v7x", .alias = "tpu7x", .sku = "TPU-V7X", .pci_device = 0x0076,
     .cores_per_chip = 2, .hbm_gib = 192, .pod_counts_cores = true, .ndims = 3,
     .topologies = topo_v7x, .grid_step = 4, .grid_max_chips = 9216},
};
/* clang-format on */

/* Chips per host of a multi-host slice. */
#define TPU_CHIPS_PER_HOST 4

const tpu_gen_t *tpu_gens(size_t *n)
{
    *n = CR_ARRAY_SIZE(gens);
    return gens;
}

const tpu_gen_t *tpu_gen_find(const char *name)
{
    if (!name)
        return NULL;
    if (strncasecmp(name, "TPU-", 4) == 0)
        name += 4;
    for (size_t i = 0; i < CR_ARRAY_SIZE(gens); i++)
        if (strcasecmp(name, gens[i].name) == 0 ||
            (gens[i].alias && strcasecmp(name, gens[i].alias) == 0))
            return &gens[i];
    return NULL;
}

const tpu_gen_t *tpu_gen_by_pci(uint16_t device)
{
    const tpu_gen_t *found = NULL;
    /* the last row wins: v3 over v2 for their shared id */
    for (size_t i = 0; i < CR_ARRAY_SIZE(gens); i++)
        if (gens[i].pci_device == device)
            found = &gens[i];
    return found;
}

/* A decimal in [1, max] at *p, moving *p past it; -1 when there is none. */
static int parse_dim(const char **p, int max)
{
    const char *s = *p;
    long v = 0;
    if (*s < '0' || *s > '9' || *s == '0')
        return -1;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s - '0');
        if (v > max)
            return -1;
        s++;
    }
    *p = s;
    return (int)v;
}

int tpu_topology_parse_at(const char *s, tpu_topology_t *out, size_t *pos, const char **why)
{
    size_t p_ = 0;
    const char *w_ = NULL;
    if (!pos)
        pos = &p_;
    if (!why)
        why = &w_;
    *pos = 0;
    if (!s) {
        *why = "no topology given";
        return CR_EPARSE;
    }
    tpu_topology_t t = {.ndims = 0, .dims = {1, 1, 1}};
    long chips = 1;
    size_t i = 0;
    for (;;) {
        *pos = i;
        if (t.ndims == TPU_MAX_DIMS) {
            *why = "at most 3 dimensions";
            return CR_EPARSE;
        }
        if (s[i] < '0' || s[i] > '9') {
            *why = "expected a dimension (a number)";
            return CR_EPARSE;
        }
        if (s[i] == '0') {
            *why = "a dimension must be a number from 1, without leading zeros";
            return CR_EPARSE;
        }
        long v = 0;
        while (s[i] >= '0' && s[i] <= '9') {
            v = v * 10 + (s[i] - '0');
            if (v > TPU_MAX_DIM) {
                *why = "dimension larger than 1024";
                return CR_EPARSE;
            }
            i++;
        }
        t.dims[t.ndims++] = (int)v;
        chips *= v;
        if (chips > TPU_MAX_CHIPS) {
            *pos = 0;
            *why = "more chips than any TPU slice has (over 2^20)";
            return CR_EPARSE;
        }
        if (s[i] == '\0')
            break;
        if (s[i] != 'x') {
            *pos = i;
            *why = "expected 'x' between dimensions";
            return CR_EPARSE;
        }
        i++;
    }
    if (t.ndims < 2) {
        *pos = 0;
        *why = "a topology has 2 or 3 dimensions, such as 4x4 or 2x2x2";
        return CR_EPARSE;
    }
    *out = t;
    return 0;
}

int tpu_topology_parse(const char *s, tpu_topology_t *out)
{
    return tpu_topology_parse_at(s, out, NULL, NULL);
}

void tpu_topology_format(const tpu_topology_t *t, char *buf, size_t size)
{
    if (t->ndims == 3)
        snprintf(buf, size, "%dx%dx%d", t->dims[0], t->dims[1], t->dims[2]);
    else
        snprintf(buf, size, "%dx%d", t->dims[0], t->dims[1]);
}

int tpu_topology_chips(const tpu_topology_t *t)
{
    int n = 1;
    for (int i = 0; i < t->ndims; i++)
        n *= t->dims[i];
    return n;
}

bool tpu_topology_equal(const tpu_topology_t *a, const tpu_topology_t *b)
{
    if (a->ndims != b->ndims)
        return false;
    for (int i = 0; i < a->ndims; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

bool tpu_topology_is_valid(const tpu_gen_t *g, const tpu_topology_t *t)
{
    if (!g || t->ndims != g->ndims)
        return false;
    for (const char *const *s = g->topologies; *s; s++) {
        tpu_topology_t v;
        if (tpu_topology_parse(*s, &v) == 0 && tpu_topology_equal(&v, t))
            return true;
    }
    if (g->grid_step <= 0)
        return false;
    for (int i = 0; i < t->ndims; i++)
        if (t->dims[i] % g->grid_step != 0)
            return false;
    return tpu_topology_chips(t) <= g->grid_max_chips;
}

void tpu_topology_list(const tpu_gen_t *g, char *buf, size_t size)
{
    size_t off = 0;
    if (size)
        buf[0] = '\0';
    for (const char *const *s = g->topologies; *s && off < size; s++) {
        int n = snprintf(buf + off, size - off, "%s%s", off ? ", " : "", *s);
        if (n < 0)
            break;
        off += (size_t)n;
    }
    if (g->grid_step > 0 && off < size)
        snprintf(buf + off, size - off, ", and AxBxC with each a multiple of %d, up to %d chips",
                 g->grid_step, g->grid_max_chips);
}

/* The most cube-like AxBxC (A <= B <= C) of g's grid rule with that many
 * chips: the smallest longest side, then the smallest middle one. */
static int grid_for_chips(const tpu_gen_t *g, int chips, tpu_topology_t *out)
{
    int st = g->grid_step, best = 0;
    if (st <= 0 || chips > g->grid_max_chips || chips % (st * st * st) != 0)
        return CR_ENOENT;
    for (int a = st; a * a * a <= chips; a += st)
        for (int b = a; a * b * b <= chips; b += st) {
            if (chips % (a * b) != 0)
                continue;
            int c = chips / (a * b);
            if (c < b || c % st != 0)
                continue;
            if (!best || c < out->dims[2] || (c == out->dims[2] && b < out->dims[1])) {
                *out = (tpu_topology_t){.ndims = 3, .dims = {a, b, c}};
                best = 1;
            }
        }
    return best ? 0 : CR_ENOENT;
}

int tpu_topology_for_chips(const tpu_gen_t *g, int chips, tpu_topology_t *out)
{
    for (const char *const *s = g->topologies; *s; s++) {
        tpu_topology_t v;
        if (tpu_topology_parse(*s, &v) == 0 && tpu_topology_chips(&v) == chips) {
            *out = v;
            return 0;
        }
    }
    return grid_for_chips(g, chips, out);
}

void tpu_topology_nearest(const tpu_gen_t *g, int chips, char *buf, size_t size)
{
    /* the closest chip count below or at `chips` and the closest above */
    int below = 0, above = 0;
    for (const char *const *s = g->topologies; *s; s++) {
        tpu_topology_t v;
        if (tpu_topology_parse(*s, &v) != 0)
            continue;
        int n = tpu_topology_chips(&v);
        if (n <= chips && n > below)
            below = n;
        if (n > chips && (!above || n < above))
            above = n;
    }
    tpu_topology_t grid;
    if (grid_for_chips(g, chips, &grid) == 0)
        below = chips;
    size_t off = 0;
    if (size)
        buf[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        int want = pass ? above : below;
        if (!want)
            continue;
        bool listed = false;
        for (const char *const *s = g->topologies; *s && off < size; s++) {
            tpu_topology_t v;
            if (tpu_topology_parse(*s, &v) != 0 || tpu_topology_chips(&v) != want)
                continue;
            int n = snprintf(buf + off, size - off, "%s%s (%d chips)", off ? ", " : "", *s, want);
            off += n > 0 ? (size_t)n : 0;
            listed = true;
        }
        if (!listed && tpu_topology_for_chips(g, want, &grid) == 0 && off < size) {
            char t[32];
            tpu_topology_format(&grid, t, sizeof(t));
            int n = snprintf(buf + off, size - off, "%s%s (%d chips)", off ? ", " : "", t, want);
            off += n > 0 ? (size_t)n : 0;
        }
    }
}

int tpu_pod_type_parse(const char *s, tpu_pod_type_t *out)
{
    if (!s)
        return CR_EPARSE;
    const char *dash = strrchr(s, '-');
    char gen[24];
    if (!dash || dash == s || (size_t)(dash - s) >= sizeof(gen))
        return CR_EPARSE;
    memcpy(gen, s, (size_t)(dash - s));
    gen[dash - s] = '\0';
    const char *p = dash + 1;
    int count = parse_dim(&p, TPU_MAX_CHIPS);
    if (count < 0 || *p != '\0')
        return CR_EPARSE;
    for (const char *c = gen; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
            return CR_EPARSE;
    const tpu_gen_t *g = tpu_gen_find(gen);
    if (!g)
        return CR_ENOENT;
    int per = g->pod_counts_cores ? g->cores_per_chip : 1;
    if (count % per != 0)
        return CR_EINVAL;
    out->gen = g;
    out->count = count;
    out->chips = count / per;
    return 0;
}

void tpu_pod_type_format(const tpu_gen_t *g, int chips, char *buf, size_t size)
{
    snprintf(buf, size, "%s-%d", g->name, g->pod_counts_cores ? chips * g->cores_per_chip : chips);
}

int tpu_host_bounds(const tpu_gen_t *g, const tpu_topology_t *t, int host_chips,
                    tpu_topology_t *host)
{
    int chips = tpu_topology_chips(t);
    if (host_chips <= 0) /* the usual host: all of a small slice, else 4 chips */
        host_chips = chips <= g->single_host_chips || chips <= TPU_CHIPS_PER_HOST
                         ? chips
                         : TPU_CHIPS_PER_HOST;
    if (host_chips == chips && (chips <= g->single_host_chips || chips <= TPU_CHIPS_PER_HOST)) {
        *host = *t;
        return 0;
    }
    /* a multi-host slice: 2x2 (2D) or 2x2x1 (3D) blocks of 4 chips, also
     * for a v6e-8 / v5litepod-8 (2x4) on two 4-chip VMs (xpk's
     * ct6e-standard-4t for v6e-8 has 2 VMs) */
    tpu_topology_t h = {.ndims = t->ndims, .dims = {2, 2, 1}};
    if (host_chips != TPU_CHIPS_PER_HOST || chips < TPU_CHIPS_PER_HOST)
        return CR_EINVAL;
    for (int i = 0; i < t->ndims; i++)
        if (t->dims[i] % h.dims[i] != 0)
            return CR_EINVAL;
    *host = h;
    return 0;
}

int tpu_worker_count(const tpu_gen_t *g, const tpu_topology_t *t, int host_chips)
{
    tpu_topology_t h;
    int err = tpu_host_bounds(g, t, host_chips, &h);
    return err ? err : tpu_topology_chips(t) / tpu_topology_chips(&h);
}

int tpu_chip_coords(const tpu_gen_t *g, const tpu_topology_t *t, int host_chips, int worker,
                    int chip, int coords[TPU_MAX_DIMS])
{
    tpu_topology_t h;
    int err = tpu_host_bounds(g, t, host_chips, &h);
    if (err)
        return err;
    int nworkers = tpu_topology_chips(t) / tpu_topology_chips(&h);
    if (worker < 0 || worker >= nworkers || chip < 0 || chip >= tpu_topology_chips(&h))
        return CR_EINVAL;
    /* both the host grid and the chips inside a block go x fastest */
    int w = worker, c = chip;
    for (int i = 0; i < TPU_MAX_DIMS; i++) {
        if (i >= t->ndims) {
            coords[i] = 0;
            continue;
        }
        int blocks = t->dims[i] / h.dims[i];
        coords[i] = (w % blocks) * h.dims[i] + c % h.dims[i];
        w /= blocks;
        c /= h.dims[i];
    }
    return 0;
}

bool tpu_coords_adjacent(const int a[TPU_MAX_DIMS], const int b[TPU_MAX_DIMS])
{
    int dist = 0;
    for (int i = 0; i < TPU_MAX_DIMS; i++)
        dist += a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
    return dist == 1;
}
