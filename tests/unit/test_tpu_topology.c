/* hw/tpu_topology.c: generations, pod types, topologies, host blocks and
 * chip coordinates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "hw/tpu.h"
#include "base/base.h"
#include <stdio.h>

static void test_topology_parse(void **state)
{
    tpu_topology_t t;
    assert_int_equal(tpu_topology_parse("4x4", &t), 0);
    assert_int_equal(t.ndims, 2);
    assert_int_equal(t.dims[0], 4);
    assert_int_equal(t.dims[1], 4);
    assert_int_equal(t.dims[2], 1);
    assert_int_equal(tpu_topology_chips(&t), 16);
    assert_int_equal(tpu_topology_parse("2x2x4", &t), 0);
    assert_int_equal(t.ndims, 3);
    assert_int_equal(t.dims[2], 4);
    assert_int_equal(tpu_topology_chips(&t), 16);
    char buf[32];
    tpu_topology_format(&t, buf, sizeof(buf));
    assert_string_equal(buf, "2x2x4");

    static const char *const bad[] = {"",      "4",       "4x",          "x4",   "0x4",     "4X4",
                                      "04x4",  "-1x4",    "4x4 ",        " 4x4", "4x4x4x4", "4,4",
                                      "2x2x0", "99999x2", "1024x1024x2", "4xx4", "4x-4",    "+4x4"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        t.ndims = 99;
        assert_int_equal(tpu_topology_parse(bad[i], &t), CR_EPARSE);
        assert_int_equal(t.ndims, 99); /* untouched on failure */
    }
    assert_int_equal(tpu_topology_parse(NULL, &t), CR_EPARSE);
}

static void check_valid(const char *gen, const char *topo, bool want)
{
    const tpu_gen_t *g = tpu_gen_find(gen);
    tpu_topology_t t;
    assert_non_null(g);
    assert_int_equal(tpu_topology_parse(topo, &t), 0);
    if (tpu_topology_is_valid(g, &t) != want)
        fail_msg("%s %s: expected %s", gen, topo, want ? "valid" : "invalid");
}

static void test_valid_topologies(void **state)
{
    check_valid("v6e", "4x4", true);
    check_valid("v6e", "1x1", true);
    check_valid("v6e", "2x4", true);
    check_valid("v6e", "16x16", true);
    check_valid("v6e", "3x3", false);
    check_valid("v6e", "4x2", false);
    check_valid("v6e", "32x32", false);
    check_valid("v6e", "2x2x1", false); /* v6e is 2D */
    check_valid("v5e", "8x16", true);
    check_valid("v5litepod", "2x2", true);
    check_valid("v5p", "2x2x1", true);
    check_valid("v5p", "2x2x2", true);
    check_valid("v5p", "4x4x4", true); /* the grid rule */
    check_valid("v5p", "16x16x24", true);
    /* xpk's system characteristics list these (v5p-896, v5p-7808,
     * v5p-17920: the whole 8960-chip pod) */
    check_valid("v5p", "4x4x28", true);
    check_valid("v5p", "4x4x244", true);
    check_valid("v5p", "16x20x28", true);
    check_valid("v5p", "4x4x16", true);    /* the grid rule: not listed, same size as 4x8x8 */
    check_valid("v5p", "16x20x32", false); /* more chips than the pod */
    check_valid("v5p", "4x4x6", false);
    check_valid("v5p", "4x4", false);
    check_valid("v4", "12x12x16", true);
    check_valid("v4", "8x16x16", true);  /* xpk: v4-4096 */
    check_valid("v4", "16x16x16", true); /* the 4096-chip pod */
    check_valid("v4", "16x16x20", false);
    check_valid("v3", "32x32", true);
    check_valid("v2", "32x32", false);
    check_valid("v7x", "8x16x16", true);
    check_valid("v7x", "4x4x12", true);   /* xpk: tpu7x-384 */
    check_valid("v7x", "1x1x1", true);    /* xpk: tpu7x-standard-1t */
    check_valid("v7x", "16x24x24", true); /* xpk: the 9216-chip pod */
    check_valid("v7x", "2x2x3", false);

    char list[512];
    tpu_topology_list(tpu_gen_find("v6e"), list, sizeof(list));
    assert_non_null(strstr(list, "4x4"));
    assert_non_null(strstr(list, "16x16"));
    assert_null(strstr(list, "3x3"));
}

static void check_pod(const char *s, int want_err, const char *gen, int chips)
{
    tpu_pod_type_t p = {0};
    int err = tpu_pod_type_parse(s, &p);
    if (err != want_err)
        fail_msg("%s: got %d, expected %d", s ? s : "(null)", err, want_err);
    if (want_err)
        return;
    assert_string_equal(p.gen->name, gen);
    if (p.chips != chips)
        fail_msg("%s: %d chips, expected %d", s, p.chips, chips);
}

static void test_pod_types(void **state)
{
    /* v5e and v6e count chips; v2, v3, v4, v5p, v7x count TensorCores */
    check_pod("v6e-16", 0, "v6e", 16);
    check_pod("v6e-1", 0, "v6e", 1);
    check_pod("v5litepod-8", 0, "v5litepod", 8);
    check_pod("v5e-4", 0, "v5litepod", 4);
    check_pod("v5p-16", 0, "v5p", 8);
    check_pod("v5p-8", 0, "v5p", 4);
    check_pod("v4-32", 0, "v4", 16);
    check_pod("v3-8", 0, "v3", 4);
    check_pod("tpu7x-16", 0, "v7x", 8);
    check_pod("V6E-16", 0, "v6e", 16);
    check_pod("v5p-15", CR_EINVAL, NULL, 0);
    check_pod("v9-8", CR_ENOENT, NULL, 0);
    check_pod("v6e", CR_EPARSE, NULL, 0);
    check_pod("v6e-", CR_EPARSE, NULL, 0);
    check_pod("-16", CR_EPARSE, NULL, 0);
    check_pod("v6e-16x", CR_EPARSE, NULL, 0);
    check_pod("v6e-016", CR_EPARSE, NULL, 0);
    check_pod("v6e-0", CR_EPARSE, NULL, 0);
    check_pod("v6e--16", CR_EPARSE, NULL, 0);
    check_pod("v 6e-16", CR_EPARSE, NULL, 0);
    check_pod("", CR_EPARSE, NULL, 0);
    check_pod(NULL, CR_EPARSE, NULL, 0);

    char buf[32];
    tpu_pod_type_format(tpu_gen_find("v5p"), 8, buf, sizeof(buf));
    assert_string_equal(buf, "v5p-16");
    tpu_pod_type_format(tpu_gen_find("v6e"), 16, buf, sizeof(buf));
    assert_string_equal(buf, "v6e-16");

    /* a pod type alone implies the usual shape */
    tpu_topology_t t;
    assert_int_equal(tpu_topology_for_chips(tpu_gen_find("v6e"), 16, &t), 0);
    tpu_topology_format(&t, buf, sizeof(buf));
    assert_string_equal(buf, "4x4");
    assert_int_equal(tpu_topology_for_chips(tpu_gen_find("v5p"), 8, &t), 0);
    tpu_topology_format(&t, buf, sizeof(buf));
    assert_string_equal(buf, "2x2x2");
    assert_int_equal(tpu_topology_for_chips(tpu_gen_find("v6e"), 9, &t), CR_ENOENT);

    /* Google's default shape per pod type (cloud.google.com/tpu/docs/v5p,
     * "Topology | Cores | Chips | Hosts": 4x4x4 is 128 cores, 64 chips, 16
     * hosts; 4x4x8 256/128/32; 16x16x24 12288/6144/1536) */
    static const struct {
        const char *pod, *topo;
        int hosts;
    } dflt[] = {
        {"v5p-8", "2x2x1", 1},
        {"v5p-16", "2x2x2", 2},
        {"v5p-64", "2x4x4", 8},
        {"v5p-128", "4x4x4", 16},
        {"v5p-256", "4x4x8", 32},
        {"v5p-512", "4x8x8", 64},
        {"v5p-1024", "8x8x8", 128},
        {"v5p-2048", "8x8x16", 256},
        {"v5p-4096", "8x16x16", 512},
        {"v5p-8192", "16x16x16", 1024},
        {"v5p-12288", "16x16x24", 1536},
        /* xpk's system characteristics (one shape per size) */
        {"v5p-768", "4x8x12", 96},
        {"v5p-1408", "4x4x44", 176},
        {"v5p-17920", "16x20x28", 2240},
        {"v4-4096", "8x16x16", 512},
        {"tpu7x-2", "1x1x1", 1},
        {"tpu7x-8", "2x2x1", 1},
        {"tpu7x-128", "4x4x4", 16},
        {"tpu7x-18432", "16x24x24", 2304},
        /* a size no table lists: the most cube-like shape of the grid rule
         * (v4-8192 is the whole 4096-chip v4 pod) */
        {"v4-8192", "16x16x16", 1024},
        /* v6e/v5e (cloud.google.com/tpu/docs/v6e, v5e: 2x4 8 chips, 4x4 16, 8x8 64) */
        {"v6e-8", "2x4", 1},
        {"v6e-16", "4x4", 4},
        {"v6e-64", "8x8", 16},
        {"v5litepod-256", "16x16", 64},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(dflt); i++) {
        tpu_pod_type_t p;
        tpu_topology_t d;
        assert_int_equal(tpu_pod_type_parse(dflt[i].pod, &p), 0);
        if (tpu_topology_for_chips(p.gen, p.chips, &d) != 0)
            fail_msg("%s: no default topology", dflt[i].pod);
        tpu_topology_format(&d, buf, sizeof(buf));
        if (strcmp(buf, dflt[i].topo) != 0)
            fail_msg("%s: %s, expected %s", dflt[i].pod, buf, dflt[i].topo);
        assert_true(tpu_topology_is_valid(p.gen, &d));
        assert_int_equal(tpu_worker_count(p.gen, &d, 0), dflt[i].hosts);
    }

    /* a refused shape names the nearest valid ones */
    char near[256];
    tpu_topology_nearest(tpu_gen_find("v6e"), 12, near, sizeof(near));
    assert_string_equal(near, "2x4 (8 chips), 4x4 (16 chips), 2x8 (16 chips)");
    tpu_topology_nearest(tpu_gen_find("v6e"), 8, near, sizeof(near));
    assert_string_equal(near, "2x4 (8 chips), 4x4 (16 chips), 2x8 (16 chips)");
    tpu_topology_nearest(tpu_gen_find("v6e"), 512, near, sizeof(near));
    assert_string_equal(near, "16x16 (256 chips)");
    tpu_topology_nearest(tpu_gen_find("v5p"), 100, near, sizeof(near));
    assert_string_equal(near, "4x4x4 (64 chips), 4x4x8 (128 chips)");
}

static void test_generations(void **state)
{
    assert_string_equal(tpu_gen_by_pci(0x006f)->sku, "TPU-V6E");
    assert_string_equal(tpu_gen_by_pci(0x0062)->sku, "TPU-V5P");
    assert_string_equal(tpu_gen_by_pci(0x0063)->sku, "TPU-V5LITEPOD");
    assert_string_equal(tpu_gen_by_pci(0x005e)->sku, "TPU-V4");
    assert_string_equal(tpu_gen_by_pci(0x0027)->sku, "TPU-V3");
    assert_null(tpu_gen_by_pci(0x1234));
    assert_ptr_equal(tpu_gen_find("TPU-V6E"), tpu_gen_find("v6e"));
    assert_null(tpu_gen_find("v8"));
    assert_int_equal(tpu_gen_find("v5p")->cores_per_chip, 2);
    assert_int_equal(tpu_gen_find("v6e")->cores_per_chip, 1);
    /* every generation's own table entries are valid shapes of it */
    size_t n;
    const tpu_gen_t *gens = tpu_gens(&n);
    assert_true(n >= 6);
    for (size_t i = 0; i < n; i++)
        for (const char *const *s = gens[i].topologies; *s; s++) {
            tpu_topology_t t;
            assert_int_equal(tpu_topology_parse(*s, &t), 0);
            assert_true(tpu_topology_is_valid(&gens[i], &t));
            assert_int_equal(t.ndims, gens[i].ndims);
        }
}

/* chip c of host w of a 2D slice made of 4-chip hosts is at (x, y) */
static void coords_of4(const char *gen, const char *topo, int w, int c, int x, int y)
{
    tpu_topology_t t;
    int co[3] = {-1, -1, -1};
    assert_int_equal(tpu_topology_parse(topo, &t), 0);
    assert_int_equal(tpu_chip_coords(tpu_gen_find(gen), &t, 4, w, c, co), 0);
    if (co[0] != x || co[1] != y)
        fail_msg("%s %s worker %d chip %d: (%d,%d), expected (%d,%d)", gen, topo, w, c, co[0],
                 co[1], x, y);
}

static void test_hosts(void **state)
{
    tpu_topology_t t, h;
    char buf[32];
    assert_int_equal(tpu_topology_parse("4x4", &t), 0);
    assert_int_equal(tpu_host_bounds(tpu_gen_find("v6e"), &t, 0, &h), 0);
    tpu_topology_format(&h, buf, sizeof(buf));
    assert_string_equal(buf, "2x2");
    assert_int_equal(tpu_worker_count(tpu_gen_find("v6e"), &t, 0), 4);
    /* v6e slices up to 8 chips are one host */
    assert_int_equal(tpu_topology_parse("2x4", &t), 0);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v6e"), &t, 0), 1);
    assert_int_equal(tpu_topology_parse("1x1", &t), 0);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v6e"), &t, 0), 1);
    assert_int_equal(tpu_topology_parse("2x8", &t), 0);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v6e"), &t, 0), 4);
    assert_int_equal(tpu_topology_parse("2x2x2", &t), 0);
    assert_int_equal(tpu_host_bounds(tpu_gen_find("v5p"), &t, 0, &h), 0);
    tpu_topology_format(&h, buf, sizeof(buf));
    assert_string_equal(buf, "2x2x1");
    assert_int_equal(tpu_worker_count(tpu_gen_find("v5p"), &t, 0), 2);
    assert_int_equal(tpu_topology_parse("4x4x4", &t), 0);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v5p"), &t, 0), 16);
    /* chips per host come from the machine: a v6e-8 / v5litepod-8 (2x4) as
     * two hosts of 4 chips (xpk's system characteristics: ct6e-standard-4t,
     * 2 VMs for v6e-8; GKE runs it), or one host of 8 */
    assert_int_equal(tpu_topology_parse("2x4", &t), 0);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v6e"), &t, 4), 2);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v5litepod"), &t, 4), 2);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v6e"), &t, 8), 1);
    assert_int_equal(tpu_host_bounds(tpu_gen_find("v6e"), &t, 4, &h), 0);
    tpu_topology_format(&h, buf, sizeof(buf));
    assert_string_equal(buf, "2x2");
    coords_of4("v6e", "2x4", 1, 0, 0, 2);
    coords_of4("v6e", "2x4", 1, 3, 1, 3);
    /* hosts of 8 chips do not make a multi-host v6e slice; nor 3 chips */
    assert_int_equal(tpu_topology_parse("4x4", &t), 0);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v6e"), &t, 8), CR_EINVAL);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v6e"), &t, 3), CR_EINVAL);
    /* a shape that does not split into 2x2 blocks */
    assert_int_equal(tpu_topology_parse("3x3", &t), 0);
    assert_int_equal(tpu_worker_count(tpu_gen_find("v2"), &t, 0), CR_EINVAL);
}

static void coords_of(const char *gen, const char *topo, int w, int c, int x, int y, int z)
{
    tpu_topology_t t;
    int co[3] = {-1, -1, -1};
    assert_int_equal(tpu_topology_parse(topo, &t), 0);
    assert_int_equal(tpu_chip_coords(tpu_gen_find(gen), &t, 0, w, c, co), 0);
    if (co[0] != x || co[1] != y || co[2] != z)
        fail_msg("%s %s worker %d chip %d: (%d,%d,%d), expected (%d,%d,%d)", gen, topo, w, c, co[0],
                 co[1], co[2], x, y, z);
}

static void test_coords(void **state)
{
    /* MACHINES.md: host wK of v6e 4x4 holds x in {2(K%2), +1}, y in {2(K/2), +1} */
    coords_of("v6e", "4x4", 0, 0, 0, 0, 0);
    coords_of("v6e", "4x4", 0, 1, 1, 0, 0);
    coords_of("v6e", "4x4", 0, 2, 0, 1, 0);
    coords_of("v6e", "4x4", 1, 0, 2, 0, 0);
    coords_of("v6e", "4x4", 2, 1, 1, 2, 0);
    coords_of("v6e", "4x4", 3, 3, 3, 3, 0);
    /* v5p 2x2x2: host wK holds z = K */
    coords_of("v5p", "2x2x2", 1, 0, 0, 0, 1);
    coords_of("v5p", "2x2x2", 1, 3, 1, 1, 1);
    /* a single 8-chip v6e host: x fastest over its 2x4 block */
    coords_of("v6e", "2x4", 0, 5, 1, 2, 0);

    /* every shape of every generation: each chip of the slice exactly once */
    size_t n;
    const tpu_gen_t *gens = tpu_gens(&n);
    for (size_t i = 0; i < n; i++) {
        for (const char *const *s = gens[i].topologies; *s; s++) {
            tpu_topology_t t, h;
            assert_int_equal(tpu_topology_parse(*s, &t), 0);
            if (tpu_host_bounds(&gens[i], &t, 0, &h) != 0)
                continue;
            int chips = tpu_topology_chips(&t), per = tpu_topology_chips(&h);
            int workers = tpu_worker_count(&gens[i], &t, 0);
            assert_int_equal(workers * per, chips);
            unsigned char *seen = cr_calloc((size_t)chips, 1);
            for (int w = 0; w < workers; w++)
                for (int c = 0; c < per; c++) {
                    int co[3];
                    assert_int_equal(tpu_chip_coords(&gens[i], &t, 0, w, c, co), 0);
                    for (int d = 0; d < 3; d++)
                        assert_true(co[d] >= 0 && co[d] < t.dims[d]);
                    int lin = co[0] + t.dims[0] * (co[1] + t.dims[1] * co[2]);
                    assert_int_equal(seen[lin], 0);
                    seen[lin] = 1;
                }
            free(seen);
        }
    }
    tpu_topology_t t;
    int co[3];
    assert_int_equal(tpu_topology_parse("4x4", &t), 0);
    assert_int_equal(tpu_chip_coords(tpu_gen_find("v6e"), &t, 0, 4, 0, co), CR_EINVAL);
    assert_int_equal(tpu_chip_coords(tpu_gen_find("v6e"), &t, 0, 0, 4, co), CR_EINVAL);
    assert_int_equal(tpu_chip_coords(tpu_gen_find("v6e"), &t, 0, -1, 0, co), CR_EINVAL);

    int a[3] = {0, 0, 0}, b[3] = {1, 0, 0}, c[3] = {1, 1, 0}, d[3] = {0, 0, 1};
    assert_true(tpu_coords_adjacent(a, b));
    assert_true(tpu_coords_adjacent(a, d));
    assert_false(tpu_coords_adjacent(a, c));
    assert_false(tpu_coords_adjacent(a, a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topology_parse), cmocka_unit_test(test_valid_topologies),
        cmocka_unit_test(test_pod_types),      cmocka_unit_test(test_generations),
        cmocka_unit_test(test_hosts),          cmocka_unit_test(test_coords),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
