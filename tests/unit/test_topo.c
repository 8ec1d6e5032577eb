/* hw/topo: pair relations, the matrix, NUMA nearness, nearest NIC, islands,
 * against hand-written node descriptions in tests/unit/data/topo_*.json
 * modelled on the fixture machines (tests/fixtures/hw/MACHINES.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "hw/topo.h"
#include <stdio.h>
#include <time.h>

static cr_node_t *load(const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/unit/data/%s", CORRAL_SOURCE_DIR, name);
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j)
        fail_msg("%s:%d: %s", path, jerr.line, jerr.text);
    cr_node_t *node = hw_node_new();
    hw_json_error_t err;
    int rc = hw_node_from_json(j, node, &err);
    json_decref(j);
    if (rc)
        fail_msg("%s: at %s: %s", path, err.path, err.msg);
    return node;
}

/* One matrix row as symbols joined by spaces: "X NV18 PIX". */
static void row(const hw_topo_matrix_t *m, size_t i, char *out, size_t size)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t j = 0; j < m->n; j++) {
        char sym[16];
        const hw_topo_cell_t *c = hw_topo_cell(m, i, j);
        len += (size_t)snprintf(out + len, size - len, "%s%s", j ? " " : "",
                                hw_topo_symbol(c->kind, c->count, sym, sizeof(sym)));
        assert_true(len < size);
    }
}

static void assert_row(const hw_topo_matrix_t *m, size_t i, const char *want)
{
    char got[1024];
    row(m, i, got, sizeof(got));
    assert_string_equal(got, want);
}

static void assert_pair(const cr_node_t *node, int a, int b, cr_link_kind_t kind, int count)
{
    int c = -1;
    cr_link_kind_t k = hw_topo_pair(node, a, b, &c);
    if (k != kind || c != count)
        fail_msg("pair(%d,%d): got %s/%d, want %s/%d", a, b, hw_link_kind_name(k), c,
                 hw_link_kind_name(kind), count);
    /* symmetric */
    assert_int_equal(hw_topo_pair(node, b, a, &c), kind);
    assert_int_equal(c, count);
}

/* ---- every PCIe relation, from a synthetic bench with two switch levels ---- */

static void test_pcie_relations(void **state)
{
    cr_node_t *n = load("topo_pcie_mix.json");
    /* below one lower switch: PIX, although a recorded link says SYS */
    assert_pair(n, 0, 1, CR_LINK_PCIE_SWITCH, 0);
    /* across the upper switch into another lower switch */
    assert_pair(n, 0, 2, CR_LINK_PCIE_MULTI, 0);
    assert_pair(n, 1, 2, CR_LINK_PCIE_MULTI, 0);
    /* two root ports of one host bridge */
    assert_pair(n, 0, 3, CR_LINK_PCIE_HOSTBRIDGE, 0);
    /* host bridges of one NUMA node, of two */
    assert_pair(n, 0, 4, CR_LINK_NUMA, 0);
    assert_pair(n, 0, 5, CR_LINK_CPU, 0);
    /* path unknown: NUMA decides */
    assert_pair(n, 6, 0, CR_LINK_NUMA, 0);
    assert_pair(n, 6, 5, CR_LINK_CPU, 0);
    /* path and NUMA unknown: SYS, unless a backend recorded the relation */
    assert_pair(n, 7, 0, CR_LINK_CPU, 0);
    assert_pair(n, 7, 6, CR_LINK_PCIE_SWITCH, 0);
    /* a path without "hb" is unknown, not misread */
    assert_pair(n, 8, 5, CR_LINK_NUMA, 0);
    assert_pair(n, 8, 0, CR_LINK_CPU, 0);
    hw_node_free(n);
}

static void test_pcie_paths(void **state)
{
    const char *sw_a = "hb0/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0";
    const char *sw_b = "hb0/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0";
    assert_int_equal(hw_topo_pcie(sw_a, 0, sw_b, 0), CR_LINK_PCIE_SWITCH);
    /* the path decides over NUMA when both are known */
    assert_int_equal(hw_topo_pcie(sw_a, 0, sw_b, 1), CR_LINK_PCIE_SWITCH);
    /* two functions of one device */
    assert_int_equal(
        hw_topo_pcie("hb0/0000:00:01.0/0000:01:00.0", 0, "hb0/0000:00:01.0/0000:01:00.1", 0),
        CR_LINK_PCIE_SWITCH);
    /* endpoints on the root bus of one host bridge */
    assert_int_equal(hw_topo_pcie("hb0/0000:00:04.0", 0, "hb0/0000:00:05.0", 1),
                     CR_LINK_PCIE_HOSTBRIDGE);
    /* a switch shown as one bridge, two levels deep on one side */
    assert_int_equal(hw_topo_pcie("hb0/rp/sw/a", 0, "hb0/rp/sw/b", 0), CR_LINK_PCIE_SWITCH);
    assert_int_equal(hw_topo_pcie("hb0/rp/sw/sw2/sw3/a", 0, "hb0/rp/sw/b", 0), CR_LINK_PCIE_MULTI);
    assert_int_equal(hw_topo_pcie("hb0/a", 0, "hb1/b", 0), CR_LINK_NUMA);
    assert_int_equal(hw_topo_pcie("hb0/a", 0, "hb1/b", 1), CR_LINK_CPU);
    assert_int_equal(hw_topo_pcie("hb0/a", -1, "hb1/b", -1), CR_LINK_CPU);
    /* unknown or malformed paths fall back to NUMA, then SYS */
    static const char *const bad[] = {"", "hb0", "hb0//x", "hb0/x/", "/hb0/x", "0000:00:01.0/x"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        assert_int_equal(hw_topo_pcie(bad[i], 0, sw_a, 0), CR_LINK_NUMA);
        assert_int_equal(hw_topo_pcie(sw_a, 1, bad[i], 0), CR_LINK_CPU);
    }
    assert_int_equal(hw_topo_pcie(NULL, 0, NULL, 0), CR_LINK_NUMA);
    /* a path deeper than the parser keeps is unknown, not cut short */
    cr_buf_t deep = {0};
    cr_buf_printf(&deep, "hb0");
    for (int i = 0; i < 40; i++)
        cr_buf_printf(&deep, "/b%d", i);
    assert_int_equal(hw_topo_pcie(deep.s, 0, deep.s, 1), CR_LINK_CPU);
    cr_buf_free(&deep);
}

/* Random paths over a small alphabet (so that parts often match): the
 * relation is symmetric, and NUMA only matters across host bridges or for
 * unknown paths. A fixed seed keeps the test repeatable. */
static void test_pcie_random_paths(void **state)
{
    uint32_t seed = 12345;
    int seen[CR_LINK_KIND_COUNT] = {0};
#define RND() (seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff)
    static const char *const parts[] = {"hb0", "hb1", "a", "b", "", "/", "0000:00:01.0"};
    for (int iter = 0; iter < 20000; iter++) {
        char p[2][64];
        for (int s = 0; s < 2; s++) {
            size_t len = 0;
            int np = (int)(RND() % 7);
            p[s][0] = '\0';
            for (int k = 0; k < np; k++)
                len += (size_t)snprintf(p[s] + len, sizeof(p[s]) - len, "%s%s", k ? "/" : "",
                                        parts[k == 0 ? RND() % 2 : RND() % CR_ARRAY_SIZE(parts)]);
        }
        int na = (int)(RND() % 3) - 1, nb = (int)(RND() % 3) - 1;
        cr_link_kind_t ab = hw_topo_pcie(p[0], na, p[1], nb);
        assert_int_equal(ab, hw_topo_pcie(p[1], nb, p[0], na));
        assert_true(ab >= CR_LINK_PCIE_SWITCH && ab <= CR_LINK_CPU);
        seen[ab]++;
        cr_link_kind_t same = hw_topo_pcie(p[0], 0, p[1], 0),
                       apart = hw_topo_pcie(p[0], 0, p[1], 1);
        if (same <= CR_LINK_PCIE_HOSTBRIDGE)
            assert_int_equal(same, apart); /* one host bridge: the path decides */
        else
            assert_true(same == CR_LINK_NUMA && apart == CR_LINK_CPU);
    }
    for (int k = CR_LINK_PCIE_SWITCH; k <= CR_LINK_CPU; k++) /* every relation was drawn */
        assert_true(seen[k] > 0);
#undef RND
}

/* ---- direct links: the fastest kind, then the most links ---- */

static void test_fast_links(void **state)
{
    cr_node_t *n = load("topo_pcie_mix.json");
    assert_pair(n, 2, 3, CR_LINK_NVLINK, 6); /* NV2 and NV6 listed: NV6 */
    assert_pair(n, 3, 4, CR_LINK_XGMI, 1);   /* a fabric beats a recorded PIX */
    assert_pair(n, 4, 5, CR_LINK_ICI, 1);    /* kind order: ICI before ROCE */
    assert_true(hw_topo_is_fast(CR_LINK_ROCE));
    assert_false(hw_topo_is_fast(CR_LINK_PCIE_SWITCH));
    assert_false(hw_topo_is_fast(HW_TOPO_SELF));
    hw_node_free(n);
}

static void test_mig_and_bad_indices(void **state)
{
    cr_node_t *n = load("topo_pcie_mix.json");
    assert_pair(n, 9, 10, HW_TOPO_SELF, 0); /* two instances of GPU 0 */
    assert_pair(n, 9, 0, HW_TOPO_SELF, 0);
    assert_pair(n, 9, 1, CR_LINK_PCIE_SWITCH, 0);
    assert_pair(n, 10, 2, CR_LINK_PCIE_MULTI, 0);
    assert_pair(n, 3, 3, HW_TOPO_SELF, 0);
    cr_link_kind_t r0, r9;
    assert_int_equal(hw_topo_nearest_nic(n, 9, &r9), hw_topo_nearest_nic(n, 0, &r0));
    assert_int_equal(r9, r0);
    int c = 7;
    assert_int_equal(hw_topo_pair(n, -1, 0, &c), CR_LINK_CPU);
    assert_int_equal(c, 0);
    assert_int_equal(hw_topo_pair(n, 0, 11, NULL), CR_LINK_CPU);
    assert_int_equal(hw_topo_pair(NULL, 0, 1, NULL), CR_LINK_CPU);
    assert_int_equal(hw_topo_nearest_nic(n, 11, NULL), -1);
    assert_int_equal(hw_topo_nearest_nic(n, -1, NULL), -1);
    hw_node_free(n);
}

/* ---- the matrix agrees with the pair and PCIe functions everywhere ---- */

static const char *const all_nodes[] = {
    "topo_dgx_h100.json",   "topo_pcie_a100.json",  "topo_mi300x.json",
    "topo_tpu_v6e_w0.json", "topo_tpu_v6e_w3.json", "topo_tpu_v5p_w1.json",
    "topo_trn1.json",       "topo_cpu_only.json",   "topo_pcie_mix.json",
};

static void test_matrix_consistent(void **state)
{
    for (size_t f = 0; f < CR_ARRAY_SIZE(all_nodes); f++) {
        cr_node_t *n = load(all_nodes[f]);
        hw_topo_matrix_t m;
        assert_int_equal(hw_topo_matrix(n, &m), 0);
        size_t nd = n->devices.n;
        assert_int_equal(m.ndevices, nd);
        assert_int_equal(m.nnics, n->nics.n);
        assert_int_equal(m.n, nd + n->nics.n);
        for (size_t i = 0; i < m.n; i++) {
            assert_int_equal(hw_topo_cell(&m, i, i)->kind, HW_TOPO_SELF);
            for (size_t j = 0; j < m.n; j++) {
                const hw_topo_cell_t *c = hw_topo_cell(&m, i, j);
                assert_int_equal(c->kind, hw_topo_cell(&m, j, i)->kind);
                assert_int_equal(c->count, hw_topo_cell(&m, j, i)->count);
                if (i < nd && j < nd) {
                    int cnt;
                    cr_link_kind_t k = hw_topo_pair(n, (int)i, (int)j, &cnt);
                    if (k != c->kind || cnt != c->count)
                        fail_msg("%s (%zu,%zu): matrix %s/%d, pair %s/%d", all_nodes[f], i, j,
                                 hw_link_kind_name(c->kind), c->count, hw_link_kind_name(k), cnt);
                } else if (i >= nd && j >= nd && i != j) {
                    const cr_nic_t *a = &n->nics.v[i - nd], *b = &n->nics.v[j - nd];
                    assert_int_equal(c->kind,
                                     hw_topo_pcie(a->pci_path, a->numa, b->pci_path, b->numa));
                }
            }
        }
        hw_topo_matrix_fini(&m);
        assert_null(m.cells);
        hw_topo_matrix_fini(&m); /* safe twice */
        hw_node_free(n);
    }
}

/* ---- the fixture machines, row by row as nvidia-smi would print them ---- */

static void test_dgx_h100(void **state)
{
    cr_node_t *n = load("topo_dgx_h100.json");
    hw_topo_matrix_t m;
    hw_topo_matrix(n, &m);
    /* NICs: ib0 (sw0), ib1 (sw1), ib2 (sw2), ib3 (sw3), eno1 (numa 0) */
    assert_row(&m, 0, "X NV18 NV18 NV18 NV18 NV18 NV18 NV18 PIX NODE SYS SYS NODE");
    assert_row(&m, 3, "NV18 NV18 NV18 X NV18 NV18 NV18 NV18 NODE PIX SYS SYS NODE");
    assert_row(&m, 5, "NV18 NV18 NV18 NV18 NV18 X NV18 NV18 SYS SYS PIX NODE SYS");
    assert_row(&m, 8, "PIX PIX NODE NODE SYS SYS SYS SYS X NODE SYS SYS NODE");
    assert_row(&m, 12, "NODE NODE NODE NODE SYS SYS SYS SYS NODE NODE SYS SYS X");
    assert_int_equal(hw_topo_cell(&m, 0, 7)->kind, CR_LINK_NVSWITCH);
    for (int d = 0; d < 8; d++) {
        cr_link_kind_t r;
        assert_int_equal(hw_topo_nearest_nic(n, d, &r), d / 2);
        assert_int_equal(r, CR_LINK_PCIE_SWITCH);
    }
    int island[8];
    assert_int_equal(hw_topo_islands(n, 0, island), 1);
    for (int d = 0; d < 8; d++)
        assert_int_equal(island[d], 0);
    /* NVLink only: no xGMI here, so eight islands of one */
    assert_int_equal(hw_topo_islands(n, 1u << CR_LINK_XGMI, island), 8);
    assert_int_equal(island[7], 7);
    hw_topo_matrix_fini(&m);
    hw_node_free(n);
}

static void test_pcie_a100(void **state)
{
    cr_node_t *n = load("topo_pcie_a100.json");
    hw_topo_matrix_t m;
    hw_topo_matrix(n, &m);
    assert_row(&m, 0, "X NV12 SYS SYS NODE");
    assert_row(&m, 1, "NV12 X SYS SYS NODE");
    assert_row(&m, 2, "SYS SYS X NV12 SYS");
    assert_row(&m, 4, "NODE NODE SYS SYS X");
    int island[4];
    assert_int_equal(hw_topo_islands(n, 0, island), 2);
    assert_int_equal(island[0], 0);
    assert_int_equal(island[1], 0);
    assert_int_equal(island[2], 1);
    assert_int_equal(island[3], 1);
    /* the only NIC is nearest to all, even across the CPU interconnect */
    cr_link_kind_t r;
    assert_int_equal(hw_topo_nearest_nic(n, 3, &r), 0);
    assert_int_equal(r, CR_LINK_CPU);
    int order[4];
    size_t local;
    assert_int_equal(hw_topo_near_numa(n, 1, order, &local), 4);
    assert_int_equal(local, 2);
    assert_int_equal(order[0], 2);
    assert_int_equal(order[1], 3);
    assert_int_equal(order[2], 0);
    assert_int_equal(order[3], 1);
    hw_topo_matrix_fini(&m);
    hw_node_free(n);
}

static void test_mi300x(void **state)
{
    cr_node_t *n = load("topo_mi300x.json");
    hw_topo_matrix_t m;
    hw_topo_matrix(n, &m);
    assert_row(&m, 0, "X XGMI XGMI XGMI XGMI XGMI XGMI XGMI PIX NODE NODE NODE SYS SYS SYS SYS");
    assert_row(&m, 6, "XGMI XGMI XGMI XGMI XGMI XGMI X XGMI SYS SYS SYS SYS NODE NODE PIX NODE");
    for (int d = 0; d < 8; d++)
        assert_int_equal(hw_topo_nearest_nic(n, d, NULL), d);
    int island[8];
    assert_int_equal(hw_topo_islands(n, 1u << CR_LINK_XGMI, island), 1);
    assert_int_equal(hw_topo_islands(n, 1u << CR_LINK_NVLINK, island), 8);
    hw_topo_matrix_fini(&m);
    hw_node_free(n);
}

static void test_tpu_hosts(void **state)
{
    cr_node_t *n = load("topo_tpu_v6e_w0.json");
    hw_topo_matrix_t m;
    hw_topo_matrix(n, &m);
    /* a 2x2 corner: ICI to the mesh neighbours, the diagonal over PCIe */
    assert_row(&m, 0, "X ICI ICI PHB PHB");
    assert_row(&m, 1, "ICI X PHB ICI PHB");
    assert_row(&m, 3, "PHB ICI ICI X PHB");
    int island[4];
    assert_int_equal(hw_topo_islands(n, 0, island), 1);
    hw_topo_matrix_fini(&m);
    hw_node_free(n);

    n = load("topo_tpu_v5p_w1.json");
    hw_topo_matrix(n, &m);
    assert_row(&m, 0, "X ICI ICI PHB PHB");
    hw_topo_matrix_fini(&m);
    hw_node_free(n);
}

static void test_trn1_torus(void **state)
{
    cr_node_t *n = load("topo_trn1.json");
    assert_pair(n, 0, 1, CR_LINK_NEURONLINK, 1);
    assert_pair(n, 0, 4, CR_LINK_NEURONLINK, 1);
    assert_pair(n, 0, 3, CR_LINK_NEURONLINK, 1);  /* wraps around the row */
    assert_pair(n, 0, 12, CR_LINK_NEURONLINK, 1); /* wraps around the column */
    assert_pair(n, 0, 2, CR_LINK_PCIE_HOSTBRIDGE, 0);
    assert_pair(n, 0, 5, CR_LINK_NUMA, 0);
    assert_pair(n, 0, 10, CR_LINK_CPU, 0);
    cr_link_kind_t r;
    /* nics: ens32, efa0 (bus 10), efa1 (bus 20), ..., efa4 (bus 90) */
    assert_int_equal(hw_topo_nearest_nic(n, 0, &r), 1);
    assert_int_equal(r, CR_LINK_PCIE_HOSTBRIDGE);
    assert_int_equal(hw_topo_nearest_nic(n, 5, NULL), 2);
    assert_int_equal(hw_topo_nearest_nic(n, 9, NULL), 5);
    int island[16];
    assert_int_equal(hw_topo_islands(n, 0, island), 1);
    hw_node_free(n);
}

/* ---- the tie rules ---- */

static void test_nearest_nic_ties(void **state)
{
    cr_node_t *n = load("topo_pcie_mix.json");
    cr_link_kind_t r;
    /* nics: ib0 (100G), ib1 (200G, same card), eth9 (400G, no RDMA), ib9
     * (100G RDMA), eth10, eth11 (identical, NUMA 1) */
    assert_int_equal(hw_topo_nearest_nic(n, 0, &r), 1); /* both PXB, both RDMA: faster */
    assert_int_equal(r, CR_LINK_PCIE_MULTI);
    assert_int_equal(hw_topo_nearest_nic(n, 4, &r), 3); /* both PHB: RDMA before speed */
    assert_int_equal(r, CR_LINK_PCIE_HOSTBRIDGE);
    assert_int_equal(hw_topo_nearest_nic(n, 5, &r), 4); /* a full tie: lowest index */
    assert_int_equal(r, CR_LINK_PCIE_HOSTBRIDGE);
    assert_int_equal(hw_topo_nearest_nic(n, 6, &r), 1); /* path unknown, NUMA 0: NODE */
    assert_int_equal(r, CR_LINK_NUMA);
    assert_int_equal(hw_topo_nearest_nic(n, 7, &r), 1); /* nothing known: SYS to all */
    assert_int_equal(r, CR_LINK_CPU);
    hw_node_free(n);
}

/* Within one relation, the NIC that branches off lower in the PCI tree
 * wins, before RDMA and speed (as hw/host.c picks cr_device_t.nic). */
static void test_nearest_nic_depth(void **state)
{
    cr_node_t *n = hw_node_new();
    cr_device_t *d = cr_node_add_device(n);
    cr_strlcpy(d->pci_path, "hb0/rp/up1/dn1a/upA/dnA0/dev", sizeof(d->pci_path));
    d->numa = 0;
    static const struct {
        const char *path;
        bool rdma;
        uint64_t speed;
    } nics[] = {
        {"hb0/rp/up1/dn1c/upC/dnC0/nicx", true, 400000},         /* PXB, 3 parts shared */
        {"hb0/rp/up1/dn1a/upA/dnA2/upD/dnD0/nicy", false, 1000}, /* PXB, 5 parts shared */
    };
    for (size_t k = 0; k < CR_ARRAY_SIZE(nics); k++) {
        cr_nic_t *x = CR_VEC_PUSH(&n->nics);
        cr_strlcpy(x->pci_path, nics[k].path, sizeof(x->pci_path));
        x->numa = 0;
        x->rdma = nics[k].rdma;
        x->speed_mbps = nics[k].speed;
    }
    cr_link_kind_t r;
    assert_int_equal(hw_topo_nearest_nic(n, 0, &r), 1);
    assert_int_equal(r, CR_LINK_PCIE_MULTI);
    /* the relation still comes first: a PIX NIC beats the deeper PXB one */
    cr_nic_t *x = CR_VEC_PUSH(&n->nics);
    cr_strlcpy(x->pci_path, "hb0/rp/up1/dn1a/upA/dnA1/nicz", sizeof(x->pci_path));
    assert_int_equal(hw_topo_nearest_nic(n, 0, &r), 2);
    assert_int_equal(r, CR_LINK_PCIE_SWITCH);
    hw_node_free(n);
}

static void test_near_numa(void **state)
{
    cr_node_t *n = load("topo_pcie_mix.json");
    int out[11];
    size_t local = 99;
    /* device 7's NUMA node is unknown; 9 and 10 are MIG instances of 0 */
    static const int want1[] = {5, 8, 7, 0, 1, 2, 3, 4, 6, 9, 10};
    assert_int_equal(hw_topo_near_numa(n, 1, out, &local), 11);
    assert_int_equal(local, 2);
    assert_memory_equal(out, want1, sizeof(want1));
    static const int want0[] = {0, 1, 2, 3, 4, 6, 9, 10, 7, 5, 8};
    assert_int_equal(hw_topo_near_numa(n, 0, out, &local), 11);
    assert_int_equal(local, 8);
    assert_memory_equal(out, want0, sizeof(want0));
    static const int wantx[] = {7, 0, 1, 2, 3, 4, 5, 6, 8, 9, 10};
    assert_int_equal(hw_topo_near_numa(n, -1, out, NULL), 11);
    assert_memory_equal(out, wantx, sizeof(wantx));
    hw_node_free(n);
}

static void test_islands(void **state)
{
    cr_node_t *n = load("topo_pcie_mix.json");
    int island[11];
    /* fabrics: 2-3 NVLink, 3-4 xGMI, 4-5 ICI and RoCE; 9, 10 are in 0 */
    static const int want[] = {0, 1, 2, 2, 2, 2, 3, 4, 5, 0, 0};
    assert_int_equal(hw_topo_islands(n, 0, island), 6);
    assert_memory_equal(island, want, sizeof(want));
    static const int want_xgmi[] = {0, 1, 2, 3, 3, 4, 5, 6, 7, 0, 0};
    assert_int_equal(hw_topo_islands(n, 1u << CR_LINK_XGMI, island), 8);
    assert_memory_equal(island, want_xgmi, sizeof(want_xgmi));
    /* recorded PCIe links count when asked for */
    static const int want_pix[] = {0, 1, 2, 3, 3, 4, 5, 5, 6, 0, 0};
    assert_int_equal(hw_topo_islands(n, 1u << CR_LINK_PCIE_SWITCH, island), 7);
    assert_memory_equal(island, want_pix, sizeof(want_pix));
    hw_node_free(n);
}

static void test_zero_devices(void **state)
{
    cr_node_t *n = load("topo_cpu_only.json");
    hw_topo_matrix_t m;
    assert_int_equal(hw_topo_matrix(n, &m), 0);
    assert_int_equal(m.ndevices, 0);
    assert_int_equal(m.n, 1);
    assert_int_equal(hw_topo_cell(&m, 0, 0)->kind, HW_TOPO_SELF);
    hw_topo_matrix_fini(&m);
    int out[1] = {-5};
    size_t local = 9;
    assert_int_equal(hw_topo_near_numa(n, 0, out, &local), 0);
    assert_int_equal(local, 0);
    assert_int_equal(out[0], -5);
    assert_int_equal(hw_topo_islands(n, 0, out), 0);
    cr_link_kind_t r = CR_LINK_NVLINK;
    assert_int_equal(hw_topo_nearest_nic(n, 0, &r), -1);
    assert_int_equal(r, CR_LINK_CPU);
    assert_int_equal(hw_topo_pair(n, 0, 1, NULL), CR_LINK_CPU);
    hw_node_free(n);

    /* nothing at all */
    n = hw_node_new();
    assert_int_equal(hw_topo_matrix(n, &m), 0);
    assert_int_equal(m.n, 0);
    hw_topo_matrix_fini(&m);
    hw_node_free(n);
    assert_int_equal(hw_topo_matrix(NULL, &m), CR_EINVAL);
}

static void test_symbols_and_legend(void **state)
{
    static const char *const want[CR_LINK_KIND_COUNT + 1] = {"NV18", "NV18", "PART", "XGMI", "ICI",
                                                             "NL",   "ROCE", "PIX",  "PXB",  "PHB",
                                                             "NODE", "SYS",  "X"};
    char buf[16];
    for (int k = 0; k <= CR_LINK_KIND_COUNT; k++)
        assert_string_equal(hw_topo_symbol((cr_link_kind_t)k, 18, buf, sizeof(buf)), want[k]);
    assert_string_equal(hw_topo_symbol(CR_LINK_NVLINK, 0, buf, sizeof(buf)), "NV");
    assert_string_equal(hw_topo_symbol(CR_LINK_NVLINK, 4, buf, sizeof(buf)), "NV4");
    assert_string_equal(hw_topo_symbol((cr_link_kind_t)99, 1, buf, sizeof(buf)), "?");
    /* every kind is explained by exactly one legend row, and X by one */
    const hw_topo_legend_t *rows;
    size_t nrows = hw_topo_legend(&rows);
    unsigned seen = 0;
    int self_rows = 0;
    for (size_t i = 0; i < nrows; i++) {
        assert_int_equal(seen & rows[i].kinds, 0);
        seen |= rows[i].kinds;
        self_rows += rows[i].kinds == 0;
        assert_true(strlen(rows[i].text) > 10);
        if (rows[i].kinds) {
            int k = __builtin_ctz(rows[i].kinds);
            char sym[16];
            hw_topo_symbol((cr_link_kind_t)k, 0, sym, sizeof(sym));
            assert_true(cr_str_has_prefix(rows[i].symbol, sym));
        }
    }
    assert_int_equal(seen, (1u << CR_LINK_KIND_COUNT) - 1);
    assert_int_equal(self_rows, 1);
}

/* ---- speed: a 72-GPU node (NVL72-sized) with every pair on NVSwitch ---- */

static cr_node_t *make_big(int ngpu, int nnic)
{
    cr_node_t *n = hw_node_new();
    for (int i = 0; i < ngpu; i++) {
        cr_device_t *d = cr_node_add_device(n);
        cr_strlcpy(d->resource, "GPU", sizeof(d->resource));
        int sw = i / 4, numa = i < ngpu / 2 ? 0 : 1;
        snprintf(d->pci_path, sizeof(d->pci_path),
                 "hb%d/0000:%02x:01.0/0000:%02x:00.0/0000:%02x:%02x.0/0000:%02x:00.0", sw, sw * 8,
                 sw * 8 + 1, sw * 8 + 2, i % 4, sw * 8 + 3 + i % 4);
        d->numa = numa;
    }
    for (int a = 0; a < ngpu; a++)
        for (int b = a + 1; b < ngpu; b++)
            assert_int_equal(cr_node_add_link(n, a, b, CR_LINK_NVSWITCH, 18, 900), 0);
    for (int k = 0; k < nnic; k++) {
        cr_nic_t *x = CR_VEC_PUSH(&n->nics);
        int sw = k * (ngpu / 4) / nnic;
        snprintf(x->name, sizeof(x->name), "ib%d", k);
        snprintf(x->pci_path, sizeof(x->pci_path),
                 "hb%d/0000:%02x:01.0/0000:%02x:00.0/0000:%02x:07.0/0000:%02x:00.0", sw, sw * 8,
                 sw * 8 + 1, sw * 8 + 2, sw * 8 + 7);
        x->numa = sw < ngpu / 8 ? 0 : 1;
        x->rdma = true;
    }
    return n;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_speed_72(void **state)
{
    cr_node_t *n = make_big(72, 8);
    hw_topo_matrix_t m;
    double best = 1e9;
    for (int run = 0; run < 20; run++) {
        double t0 = now_ms();
        hw_topo_matrix(n, &m);
        double t = now_ms() - t0;
        if (t < best)
            best = t;
        if (run < 19)
            hw_topo_matrix_fini(&m);
    }
    assert_int_equal(m.n, 80);
    assert_int_equal(hw_topo_cell(&m, 0, 71)->kind, CR_LINK_NVSWITCH);
    assert_int_equal(hw_topo_cell(&m, 0, 71)->count, 18);
    assert_int_equal(hw_topo_cell(&m, 0, 72)->kind, CR_LINK_PCIE_SWITCH);
    assert_int_equal(hw_topo_cell(&m, 71, 72)->kind, CR_LINK_CPU);
    hw_topo_matrix_fini(&m);
    int island[72];
    double islands_ms = 1e9;
    for (int run = 0; run < 20; run++) { /* the best of 20, as for the matrix */
        double t0 = now_ms();
        assert_int_equal(hw_topo_islands(n, 0, island), 1);
        double t = now_ms() - t0;
        if (t < islands_ms)
            islands_ms = t;
    }
    /* the budget is 1 ms (even at -O0); sanitizers get slack, and the
     * minimum of 20 runs keeps a busy machine from failing it */
#if defined(__SANITIZE_ADDRESS__)
    const double budget = 10.0;
#else
    const double budget = 1.0;
#endif
    print_message("72 GPUs + 8 NICs: matrix %.3f ms, islands %.3f ms (best of 20 each)\n", best,
                  islands_ms);
    assert_true(best < budget);
    assert_true(islands_ms < budget);
    hw_node_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pcie_relations),
        cmocka_unit_test(test_pcie_paths),
        cmocka_unit_test(test_pcie_random_paths),
        cmocka_unit_test(test_fast_links),
        cmocka_unit_test(test_mig_and_bad_indices),
        cmocka_unit_test(test_matrix_consistent),
        cmocka_unit_test(test_dgx_h100),
        cmocka_unit_test(test_pcie_a100),
        cmocka_unit_test(test_mi300x),
        cmocka_unit_test(test_tpu_hosts),
        cmocka_unit_test(test_trn1_torus),
        cmocka_unit_test(test_nearest_nic_ties),
        cmocka_unit_test(test_nearest_nic_depth),
        cmocka_unit_test(test_near_numa),
        cmocka_unit_test(test_islands),
        cmocka_unit_test(test_zero_devices),
        cmocka_unit_test(test_symbols_and_legend),
        cmocka_unit_test(test_speed_72),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
