/* The intel backend against the intel-max-1100-2 fixture (DRM sysfs, the
 * i915 backport's lmem_total_bytes) and copies of it: the xe driver's
 * per-tile memory, integrated graphics, other vendors' cards, bad files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture_tree.h"
#include <sys/stat.h>

#define PCI "/sys/bus/pci/devices/"

/* Adds a PCI function and a DRM card pointing at it. */
static void add_card(const char *root, const char *card, const char *pci, const char *vendor,
                     const char *device, const char *class_code)
{
    char rel[256], cmd[512];
    snprintf(rel, sizeof(rel), PCI "%s/vendor", pci);
    fixture_tree_write(root, rel, vendor);
    snprintf(rel, sizeof(rel), PCI "%s/device", pci);
    fixture_tree_write(root, rel, device);
    snprintf(rel, sizeof(rel), PCI "%s/class", pci);
    fixture_tree_write(root, rel, class_code);
    snprintf(cmd, sizeof(cmd),
             "mkdir -p sys/class/drm/%s && ln -s ../../../bus/pci/devices/%s "
             "sys/class/drm/%s/device",
             card, pci, card);
    fixture_tree_sh(root, cmd);
}

static void test_devices(void **state)
{
    static const char *const pcis[2] = {"0000:29:00.0", "0000:9a:00.0"};
    fixture_env_t f;
    fixture_open(&f, "intel-max-1100-2");
    cr_node_t *n = fixture_discover(&f, NULL);
    assert_int_equal(n->devices.n, 2);
    assert_int_equal(n->warnings.n, 0);
    for (int i = 0; i < 2; i++) {
        const cr_device_t *d = &n->devices.v[i];
        char id[8];
        snprintf(id, sizeof(id), "%d", i);
        assert_string_equal(d->backend, "intel");
        assert_string_equal(d->vendor, "Intel");
        assert_string_equal(d->resource, "GPU");
        assert_string_equal(d->sku, "Intel-GPU-Max-1100");
        assert_string_equal(d->product, "Intel Data Center GPU Max 1100");
        assert_string_equal(d->pci, pcis[i]);
        assert_int_equal(d->pci_vendor, 0x8086);
        assert_int_equal(d->pci_device, 0x0bda);
        assert_int_equal(d->numa, 0);
        assert_true(d->memory == 48ull << 30);
        assert_int_equal(d->compute_units, 56);
        assert_string_equal(d->isolation_id, id);
        assert_int_equal(d->vendor_index, i);
        assert_int_equal(d->health, CR_HEALTH_OK);
    }
    assert_true(fixture_resource(n, "GPU") == 2 * CR_QTY_ONE);
    assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "Intel-GPU-Max-1100");
    hw_node_free(n);
    fixture_close(&f);
}

static void test_isolation(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "intel-max-1100-2");
    cr_node_t *n = fixture_discover(&f, NULL);
    int devs[] = {1};
    char *v = fixture_isolate(&f, n, devs, 1, "ZE_AFFINITY_MASK");
    assert_string_equal(v, "1");
    free(v);
    v = fixture_isolate(&f, n, devs, 1, "ZE_ENABLE_PCI_ID_DEVICE_ORDER");
    assert_string_equal(v, "1");
    free(v);
    /* Intel's recommended (and Level Zero's default) hierarchy; with one
     * stack per card it numbers devices as COMPOSITE would */
    v = fixture_isolate(&f, n, devs, 1, "ZE_FLAT_DEVICE_HIERARCHY");
    assert_string_equal(v, "FLAT");
    free(v);
    fixture_setenv(&f, "CORRAL_INTEL_HIERARCHY", "COMPOSITE");
    v = fixture_isolate(&f, n, devs, 1, "ZE_FLAT_DEVICE_HIERARCHY");
    assert_string_equal(v, "COMPOSITE");
    free(v);
    int both[] = {1, 0};
    v = fixture_isolate(&f, n, both, 2, "ZE_AFFINITY_MASK");
    assert_string_equal(v, "1,0");
    free(v);
    v = fixture_isolate(&f, n, NULL, 0, "ZE_AFFINITY_MASK");
    assert_string_equal(v, "");
    free(v);
    hw_node_free(n);
    fixture_close(&f);
}

/* A Max 1550 has two stacks: in FLAT, Intel's recommended hierarchy and
 * Level Zero's default, each stack is a root device (Intel oneAPI GPU
 * Optimization Guide, "Exposing the Device Hierarchy" and "FLAT Mode
 * Programming": each stack has its own memory); COMPOSITE on request
 * makes the card one device. The fixture's two Max 1100 cards become
 * Max 1550s (PCI id 0x0bd5) here. */
static void test_max1550_hierarchy(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "intel-max-1100-2");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_sh(root, "for d in sys/bus/pci/devices/*/device; do echo 0x0bd5 > $d; done");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 4);
    assert_int_equal(n->warnings.n, 0);
    static const char *const pcis[2] = {"0000:29:00.0", "0000:9a:00.0"};
    for (int i = 0; i < 4; i++) {
        const cr_device_t *d = &n->devices.v[i];
        char id[8], product[64];
        snprintf(id, sizeof(id), "%d", i);
        snprintf(product, sizeof(product), "Intel Data Center GPU Max 1550 (stack %d)", i % 2);
        assert_string_equal(d->sku, "Intel-GPU-Max-1550");
        assert_string_equal(d->product, product);
        assert_string_equal(d->pci, pcis[i / 2]);
        assert_int_equal(d->partition, i % 2);
        assert_string_equal(d->isolation_id, id);
        assert_int_equal(d->compute_units, 64);
        assert_true(d->memory == 24ull << 30); /* the card's 48 GiB in two stacks */
    }
    int devs[] = {3, 2};
    char *v = fixture_isolate(&f, n, devs, 2, "ZE_AFFINITY_MASK");
    assert_string_equal(v, "3,2");
    free(v);
    v = fixture_isolate(&f, n, devs, 2, "ZE_FLAT_DEVICE_HIERARCHY");
    assert_string_equal(v, "FLAT");
    free(v);
    hw_node_free(n);
    fixture_setenv(&f, "CORRAL_INTEL_HIERARCHY", "COMPOSITE");
    n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 2);
    assert_string_equal(n->devices.v[1].product, "Intel Data Center GPU Max 1550");
    assert_string_equal(n->devices.v[1].isolation_id, "1");
    assert_int_equal(n->devices.v[1].partition, -1);
    assert_int_equal(n->devices.v[1].compute_units, 128);
    v = fixture_isolate(&f, n, devs + 1, 0, "ZE_FLAT_DEVICE_HIERARCHY");
    assert_string_equal(v, "COMPOSITE");
    free(v);
    hw_node_free(n);
    fixture_setenv(&f, "CORRAL_INTEL_HIERARCHY", "flat-ish");
    n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 4);
    assert_int_equal(fixture_count_warnings(n, "CORRAL_INTEL_HIERARCHY=flat-ish", "using FLAT"), 1);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* The xe driver has no lmem_total_bytes but one physical_vram_size_bytes
 * per tile on the PCI device. */
static void test_xe_tiles(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "intel-max-1100-2");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_sh(root, "rm sys/class/drm/card*/lmem_total_bytes");
    fixture_tree_write(root, PCI "0000:29:00.0/tile0/physical_vram_size_bytes", "25769803776\n");
    fixture_tree_write(root, PCI "0000:29:00.0/tile1/physical_vram_size_bytes", "25769803776\n");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 2);
    assert_int_equal(n->warnings.n, 0);
    assert_true(n->devices.v[0].memory == 48ull << 30);
    assert_true(n->devices.v[1].memory == 0); /* nothing published: unknown */
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* Integrated graphics (always 0000:00:02.0) is counted in Level Zero's PCI
 * order but not listed; a BMC's VGA and connectors are not ours. */
static void test_igpu_and_foreign_cards(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "intel-max-1100-2");
    fixture_tree_copy(&f, root, sizeof(root));
    add_card(root, "card2", "0000:00:02.0", "0x8086", "0x4680", "0x030000");
    add_card(root, "card3", "0000:03:00.0", "0x1a03", "0x2000", "0x030000");
    add_card(root, "card4", "0000:05:00.0", "0x8086", "0x1572", "0x020000"); /* a NIC */
    fixture_tree_sh(root, "mkdir sys/class/drm/card0-DP-1");
    /* a card whose PCI files are missing altogether is nobody's */
    fixture_tree_sh(root,
                    "mkdir -p sys/class/drm/card5 && ln -s ../../../bus/pci/devices/0000:07:00.0 "
                    "sys/class/drm/card5/device");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 2);
    assert_int_equal(n->warnings.n, 0);
    assert_string_equal(n->devices.v[0].pci, "0000:29:00.0");
    assert_string_equal(n->devices.v[0].isolation_id, "1");
    assert_string_equal(n->devices.v[1].isolation_id, "2");
    int devs[] = {0};
    char *v = fixture_isolate(&f, n, devs, 1, "ZE_AFFINITY_MASK");
    assert_string_equal(v, "1");
    free(v);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

static void test_broken_files(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "intel-max-1100-2");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_write(root, "/sys/class/drm/card0/lmem_total_bytes", "lots\n");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 1);
    assert_int_equal(n->warnings.n, 1);
    assert_int_equal(fixture_count_warnings(n, "/sys/class/drm/card0/lmem_total_bytes",
                                            "expected a size in bytes"),
                     1);
    assert_int_equal(fixture_count_warnings(n, "card0 (GPU 0) is off", NULL), 1);
    /* the other card keeps its Level Zero index */
    assert_string_equal(n->devices.v[0].isolation_id, "1");
    hw_node_free(n);
    fixture_tree_write(root, "/sys/class/drm/card0/lmem_total_bytes", "51539607552\n");
    fixture_tree_write(root, PCI "0000:9a:00.0/class", "display\n");
    n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 1);
    assert_int_equal(n->warnings.n, 1);
    assert_int_equal(fixture_count_warnings(n, PCI "0000:9a:00.0/class", "expected a 24-bit hex"),
                     1);
    assert_string_equal(n->devices.v[0].pci, "0000:29:00.0");
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices),      cmocka_unit_test(test_isolation),
        cmocka_unit_test(test_xe_tiles),     cmocka_unit_test(test_igpu_and_foreign_cards),
        cmocka_unit_test(test_broken_files), cmocka_unit_test(test_max1550_hierarchy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
