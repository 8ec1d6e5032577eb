/* hw/sku.c: the built-in type table against the authorities it follows,
 * Ray's type names as aliases (in labels and selectors), and SKU files
 * loaded at the start of discovery (day-zero SKUs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <corral/accel.h>
#include "fixture_tree.h"
#include "sched/sched.h"

/* Ray's amd_product_dict (python/ray/_private/accelerators/amd_gpu.py):
 * every Instinct id, its Ray name, and corral's canonical type. */
static const struct {
    uint16_t device;
    const char *ray, *sku;
} ray_amd[] = {
    {0x66a1, "AMD-Instinct-MI50", "MI50"},           {0x738c, "AMD-Instinct-MI100", "MI100"},
    {0x7408, "AMD-Instinct-MI250X", "MI250X"},       {0x740c, "AMD-Instinct-MI250X-MI250", "MI250"},
    {0x740f, "AMD-Instinct-MI210", "MI210"},         {0x74a0, "AMD-Instinct-MI300A", "MI300A"},
    {0x74a1, "AMD-Instinct-MI300X-OAM", "MI300X"},   {0x74a2, "AMD-Instinct-MI308X-OAM", "MI308X"},
    {0x74a9, "AMD-Instinct-MI300X-HF", "MI300X-HF"}, {0x74a5, "AMD-Instinct-MI325X-OAM", "MI325X"},
    {0x75a0, "AMD-Instinct-MI350X-OAM", "MI350X"},   {0x75a3, "AMD-Instinct-MI355X-OAM", "MI355X"},
};

static void test_ray_amd_table(void **state)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(ray_amd); i++) {
        const char *sku = cr_accel_sku_by_pci(0x1002, ray_amd[i].device);
        if (!sku || strcmp(sku, ray_amd[i].sku) != 0)
            fail_msg("1002:%04x: %s, want %s", ray_amd[i].device, sku ? sku : "nothing",
                     ray_amd[i].sku);
        assert_string_equal(hw_sku_canonical(ray_amd[i].ray), ray_amd[i].sku);
        assert_string_equal(hw_sku_canonical(ray_amd[i].sku), ray_amd[i].sku);
    }
    /* Ray's AMD_INSTINCT_MI308x constant drops the -OAM of its table */
    assert_string_equal(hw_sku_canonical("AMD-Instinct-MI308X"), "MI308X");
}

/* NVML's product names (nvmlDeviceGetName) of the parts on the roadmap,
 * and the other new parts, by name. */
static void test_names(void **state)
{
    static const char *const cases[][2] = {
        {"NVIDIA B200", "B200"},
        {"NVIDIA GB200", "GB200"},
        {"NVIDIA B300 SXM6 AC", "B300"},
        {"NVIDIA GB300", "GB300"},
        {"NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell"},
        {"NVIDIA H100 80GB HBM3", "H100"},
        {"AWS Trainium3", "Trainium3"},
        {"trn2.48xlarge", "Trainium2"},
        {"HL-325L", "Gaudi3"},
        {"AMD Instinct MI355X", "MI355X"},
        {"AMD Instinct MI300X HF", "MI300X"},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(cases); i++) {
        const char *sku = cr_accel_sku_by_name(cases[i][0]);
        if (!sku || strcmp(sku, cases[i][1]) != 0)
            fail_msg("'%s': %s, want %s", cases[i][0], sku ? sku : "nothing", cases[i][1]);
    }
    assert_string_equal(cr_accel_sku_by_pci(0x1da3, 0x1060), "Gaudi3");
    assert_string_equal(cr_accel_sku_by_pci(0x1ae0, 0x0076), "TPU-V7X");
    assert_null(cr_accel_sku_by_name("Matrox G200"));
}

/* Ray's names in labels and selectors; the label value stays canonical. */
static void test_aliases(void **state)
{
    cr_node_t *n = hw_node_new();
    cr_strlcpy(n->id, "mi", sizeof(n->id));
    cr_node_set_label(n, "corral.io/accelerator-type", "AMD-Instinct-MI300X-OAM");
    assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "MI300X");
    cr_node_set_label(n, "other", "AMD-Instinct-MI300X-OAM"); /* other keys as written */
    assert_string_equal(cr_node_get_label(n, "other"), "AMD-Instinct-MI300X-OAM");
    const char *fam[8];
    assert_int_equal(hw_sku_expand("Intel-GAUDI", fam, 8), 3);
    assert_string_equal(fam[0], "Gaudi");
    assert_string_equal(fam[2], "Gaudi3");
    assert_null(hw_sku_canonical("Intel-GAUDI")); /* a family, not one type */
    assert_int_equal(hw_sku_expand("no-such-chip", fam, 8), 0);

    sched_cluster_t *c = sched_cluster_new();
    char msg[160];
    assert_int_equal(sched_cluster_add(c, n, msg, sizeof(msg)), 0);
    cr_node_t *g = hw_node_new();
    cr_strlcpy(g->id, "gaudi", sizeof(g->id));
    cr_node_set_label(g, "corral.io/accelerator-type", "Gaudi2");
    assert_int_equal(sched_cluster_add(c, g, msg, sizeof(msg)), 0);
    assert_int_equal(sched_cluster_finalize(c), 0);
    static const struct {
        const char *sel, *formatted;
        bool mi, gaudi;
    } cases[] = {
        {"corral.io/accelerator-type=AMD-Instinct-MI300X-OAM", "corral.io/accelerator-type=MI300X",
         true, false},
        {"corral.io/accelerator-type=Intel-GAUDI",
         "corral.io/accelerator-type in (Gaudi,Gaudi2,Gaudi3)", false, true},
        {"corral.io/accelerator-type!=Intel-GAUDI",
         "corral.io/accelerator-type notin (Gaudi,Gaudi2,Gaudi3)", true, false},
        {"corral.io/accelerator-type in (AMD-Instinct-MI300X-OAM,MI300X,H100)",
         "corral.io/accelerator-type in (MI300X,H100)", true, false},
        {"corral.io/accelerator-type=MI300X", "corral.io/accelerator-type=MI300X", true, false},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(cases); i++) {
        sched_selector_t sel;
        sched_err_t e;
        assert_int_equal(sched_parse_selector(&c->labels, cases[i].sel, &sel, &e), 0);
        cr_buf_t b = {0};
        sched_format_selector(&c->labels, &sel, &b);
        assert_string_equal(b.s, cases[i].formatted);
        cr_buf_free(&b);
        assert_int_equal(sched_selector_match(c, &sel, 0), cases[i].mi);
        assert_int_equal(sched_selector_match(c, &sel, 1), cases[i].gaudi);
    }
    sched_cluster_free(c);
    hw_node_free(n);
    hw_node_free(g);
}

/* ---- SKU files ---- */

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* A chip corral has never heard of, named by a file: discovery of the
 * mi300x-8 fixture with its GPUs' device id changed to one no table has. */
static void test_day_zero_sku(void **state)
{
    fixture_env_t f;
    char root[64], dir[64];
    fixture_open(&f, "mi300x-8");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_sh(root, "for p in sys/class/kfd/kfd/topology/nodes/*/properties; do "
                          "sed -i 's/^device_id 29857$/device_id 30135/' $p; done");
    snprintf(dir, sizeof(dir), "/tmp/corral-skus-XXXXXX");
    assert_non_null(mkdtemp(dir));
    fixture_setenv(&f, "CORRAL_SKU_DIR", dir);
    /* before the file: the type is unknown */
    cr_node_t *n = fixture_discover(&f, root);
    assert_string_equal(n->devices.v[0].sku, "");
    hw_node_free(n);
    write_file(dir, "10-mi450.yaml",
               "# a vendor's day-zero row\n"
               "skus:\n"
               "  - sku: MI450X\n"
               "    pci: [\"1002:75b7\"]\n"
               "    names: [\"MI450X\"]\n"
               "    aliases: [AMD-Instinct-MI450X-OAM]\n");
    write_file(dir, "README", "not a SKU file: ignored\n");
    n = fixture_discover(&f, root);
    assert_int_equal(n->warnings.n, 0);
    for (size_t i = 0; i < 8; i++)
        assert_string_equal(n->devices.v[i].sku, "MI450X");
    assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "MI450X");
    assert_string_equal(hw_sku_canonical("AMD-Instinct-MI450X-OAM"), "MI450X");
    hw_node_free(n);
    /* a file row comes before the built-in table (a vendor's correction) */
    write_file(dir, "20-rename.yaml", "skus:\n  - {sku: MI300X-OAM, pci: [\"1002:74a1\"]}\n");
    cr_hw_env_t env = {.root = "/", .getenv = fixture_getenv, .getenv_ctx = &f};
    size_t rows;
    assert_int_equal(hw_skus_load(&env, NULL, &rows), 0);
    assert_int_equal(rows, 2);
    assert_string_equal(cr_accel_sku_by_pci(0x1002, 0x74a1), "MI300X-OAM");
    /* a bad file adds nothing, says where and what, and leaves the rest */
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"skus:\n  - sku: MI999\n    pci: [\"1002-75b0\"]\n",
         "/30-bad.yaml:3:11: skus[0].pci[0]: expected a PCI vendor:device id of 4 hex digits"},
        {"skus:\n  - sku: MI999\n    colour: red\n    pci: [\"1002:75b0\"]\n",
         "/30-bad.yaml:3:5: skus[0].colour: unknown field 'colour'; expected one of: sku, pci, "
         "names, aliases"},
        {"skus:\n  - pci: [\"1002:75b0\"]\n", "/30-bad.yaml:2:5: skus[0]: expected 'sku:'"},
        {"skus:\n  - sku: MI 999\n    names: [x]\n", "/30-bad.yaml:2:10: skus[0].sku: 'MI 999' is "
                                                     "not a type name"},
        {"skus:\n  - sku: MI999\n", "/30-bad.yaml:2:5: skus[0]: SKU MI999 says nothing to "
                                    "recognise it by"},
        {"sku: [\n", "/30-bad.yaml:2:1: YAML syntax error"},
        {"skus: 3\n", "/30-bad.yaml:1:7: skus: expected a list of SKUs, found a number"},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        write_file(dir, "30-bad.yaml", bad[i].text);
        n = hw_node_new();
        assert_int_not_equal(hw_skus_load(&env, n, &rows), 0);
        assert_int_equal(rows, 2);
        assert_int_equal(n->warnings.n, 1);
        if (!strstr(n->warnings.v[0], bad[i].want))
            fail_msg("case %zu: '%s' lacks '%s'", i, n->warnings.v[0], bad[i].want);
        assert_true(cr_str_has_prefix(n->warnings.v[0], "SKU file skipped: /tmp/corral-skus-"));
        hw_node_free(n);
    }
    fixture_tree_remove(root);
    fixture_tree_remove(dir);
    /* no directory: the built-in table only */
    assert_int_equal(hw_skus_load(&env, NULL, &rows), 0);
    assert_int_equal(rows, 0);
    assert_string_equal(cr_accel_sku_by_pci(0x1002, 0x74a1), "MI300X");
    fixture_close(&f);
}

/* Pins the vendor half of the PCI match (cr_accel_sku_by_pci compares the
 * vendor id too): a device id is only unique within its vendor, so the same
 * number under another vendor is not that accelerator. */
static void test_by_pci_needs_the_vendor(void **state)
{
    assert_string_equal(cr_accel_sku_by_pci(0x10de, 0x2330), "H100");
    assert_string_equal(cr_accel_sku_by_pci(0x1002, 0x74a1), "MI300X");
    assert_null(cr_accel_sku_by_pci(0x1002, 0x2330));
    assert_null(cr_accel_sku_by_pci(0x8086, 0x2330));
    assert_null(cr_accel_sku_by_pci(0x10de, 0x74a1));
    assert_null(cr_accel_sku_by_pci(0x10de, 0x0000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ray_amd_table),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_aliases),
        cmocka_unit_test(test_day_zero_sku),
        cmocka_unit_test(test_by_pci_needs_the_vendor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
