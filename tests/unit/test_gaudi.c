/* The gaudi backend against the gaudi2-8 fixture (habanalabs accel sysfs
 * class), the attribute parsers, and copies of the fixture with one file
 * broken or one more device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture_tree.h"
#include "hw/gaudi_sysfs.h"
#include "sched_fixture.h"
#include <sys/stat.h>

/* module id -> PCI address and NUMA node, from MACHINES.md */
static const char *const by_module[8] = {"0000:43:00.0", "0000:44:00.0", "0000:19:00.0",
                                         "0000:1a:00.0", "0000:c3:00.0", "0000:c4:00.0",
                                         "0000:9b:00.0", "0000:9c:00.0"};
#define PCI "/sys/bus/pci/devices/"

static void test_parsers(void **state)
{
    char why[128];
    int id;
    assert_int_equal(hw_gaudi_parse_module_id("7", &id, why, sizeof(why)), 0);
    assert_int_equal(id, 7);
    assert_int_equal(hw_gaudi_parse_module_id("-1", &id, why, sizeof(why)), CR_EPARSE);
    assert_int_equal(hw_gaudi_parse_module_id("64", &id, why, sizeof(why)), CR_EPARSE);
    assert_int_equal(hw_gaudi_parse_module_id("2x", &id, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "module id from 0 to 63"));
    const hw_gaudi_type_t *t;
    assert_int_equal(hw_gaudi_parse_device_type("GAUDI2", &t, why, sizeof(why)), 0);
    assert_string_equal(t->product, "HL-225");
    assert_true(t->memory == 96ull << 30);
    assert_int_equal(hw_gaudi_parse_device_type("gaudi2", &t, why, sizeof(why)), CR_EPARSE);
    assert_null(t);
    cr_health_t h;
    assert_int_equal(hw_gaudi_parse_status("operational", &h, why, sizeof(why)), 0);
    assert_int_equal(h, CR_HEALTH_OK);
    assert_int_equal(hw_gaudi_parse_status("in reset", &h, why, sizeof(why)), 0);
    assert_int_equal(h, CR_HEALTH_DEGRADED);
    assert_int_equal(hw_gaudi_parse_status("needs reset", &h, why, sizeof(why)), 0);
    assert_int_equal(h, CR_HEALTH_UNHEALTHY);
    assert_int_equal(hw_gaudi_parse_status("Operational", &h, why, sizeof(why)), CR_EPARSE);
    assert_int_equal(h, CR_HEALTH_UNKNOWN);
    const hw_gaudi_fabric_t *fab = hw_gaudi_fabric_find("GAUDI2", 8);
    assert_non_null(fab);
    assert_int_equal(fab->ports_per_pair, 3);
    assert_null(hw_gaudi_fabric_find("GAUDI2", 4));
}

static void test_devices(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "gaudi2-8");
    cr_node_t *n = fixture_discover(&f, NULL);
    assert_int_equal(n->devices.n, 8);
    assert_int_equal(n->warnings.n, 0);
    for (int i = 0; i < 8; i++) {
        const cr_device_t *d = &n->devices.v[i];
        char id[8];
        snprintf(id, sizeof(id), "%d", i);
        assert_string_equal(d->backend, "gaudi");
        assert_string_equal(d->vendor, "Intel");
        assert_string_equal(d->resource, "HPU");
        assert_string_equal(d->sku, "Gaudi2");
        assert_string_equal(d->product, "HL-225");
        assert_string_equal(d->pci, by_module[i]);
        assert_int_equal(d->pci_vendor, 0x1da3);
        assert_int_equal(d->pci_device, 0x1020);
        assert_int_equal(d->numa, i < 4 ? 0 : 1);
        assert_true(d->memory == 96ull << 30);
        assert_int_equal(d->compute_units, 24);
        assert_string_equal(d->isolation_id, id);
        assert_int_equal(d->vendor_index, i);
        assert_int_equal(hw_device_find(n, "gaudi", i), i);
        assert_string_equal(d->driver, "1.18.0");
        assert_int_equal(d->health, CR_HEALTH_OK);
    }
    assert_true(fixture_resource(n, "HPU") == 8 * CR_QTY_ONE);
    assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "Gaudi2");
    assert_int_equal(n->links.n, 28);
    for (int a = 0; a < 8; a++)
        for (int b = a + 1; b < 8; b++) {
            const cr_link_t *l = hw_node_find_link(n, a, b);
            assert_non_null(l);
            assert_int_equal(l->kind, CR_LINK_ROCE);
            assert_int_equal(l->count, 3);
            assert_true(l->bandwidth_gbps == 37.5);
        }
    hw_node_free(n);
    fixture_close(&f);
}

static void test_isolation(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "gaudi2-8");
    cr_node_t *n = fixture_discover(&f, NULL);
    int devs[] = {hw_device_find(n, "gaudi", 7), hw_device_find(n, "gaudi", 6)};
    char *v = fixture_isolate(&f, n, devs, 2, "HABANA_VISIBLE_MODULES");
    assert_string_equal(v, "7,6");
    free(v);
    /* modules 5 and 0 are no set Intel supports in one process (Intel
     * Gaudi docs, "Multiple Workloads on a Single Docker": 2-Gaudi sets
     * 0,1 2,3 4,5 6,7; 4-Gaudi sets 0,1,2,3 4,5,6,7) */
    hw_options_t o = fixture_options(&f);
    cr_envlist_t env = {0};
    char *msg = NULL;
    int bad[] = {hw_device_find(n, "gaudi", 5), hw_device_find(n, "gaudi", 0)};
    assert_int_equal(hw_isolate(&o, n, bad, 2, &env, &msg), CR_EINVAL);
    assert_non_null(strstr(msg, "module sets (modules 0-1, modules 2-3, modules 4-5, modules 6-7, "
                                "modules 0-3, modules 4-7, modules 0-7)"));
    free(msg);
    int three[] = {0, 1, 2};
    assert_int_equal(hw_isolate(&o, n, three, 3, &env, &msg), CR_EINVAL);
    free(msg);
    cr_envlist_free(&env);
    v = fixture_isolate(&f, n, NULL, 0, "HABANA_VISIBLE_MODULES");
    assert_string_equal(v, "");
    free(v);
    hw_node_free(n);
    fixture_close(&f);
}

/* A bad module_id turns that device off; the box still has 8 modules, so
 * the other 7 keep their links. */
static void test_broken_module_id(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "gaudi2-8");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_write(root, PCI "0000:19:00.0/module_id", "two\n");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 7);
    assert_int_equal(n->warnings.n, 1);
    assert_int_equal(
        fixture_count_warnings(n, "/sys/class/accel/accel0/device/module_id", "accel0 is off"), 1);
    assert_int_equal(fixture_count_warnings(n, "'two'", "module id from 0 to"), 1);
    assert_int_equal(hw_device_find(n, "gaudi", 2), -1);
    assert_int_equal(n->links.n, 21);
    assert_true(fixture_resource(n, "HPU") == 7 * CR_QTY_ONE);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

static void test_duplicate_module_and_bad_addr(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "gaudi2-8");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_write(root, PCI "0000:1a:00.0/module_id", "2\n");         /* accel1 claims 2 too */
    fixture_tree_write(root, PCI "0000:9b:00.0/pci_addr", "0000:9b:00\n"); /* accel4 */
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 6);
    assert_int_equal(n->warnings.n, 2);
    assert_int_equal(fixture_count_warnings(n, "accel1/device/module_id", "module 2 is also"), 1);
    assert_int_equal(fixture_count_warnings(n, "accel4/device/pci_addr", "expected a PCI address"),
                     1);
    assert_string_equal(n->devices.v[hw_device_find(n, "gaudi", 2)].pci, "0000:19:00.0");
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* status grades health; an unknown one is a warning, not an exclusion. */
static void test_status(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "gaudi2-8");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_write(root, PCI "0000:1a:00.0/status", "needs reset\n"); /* module 3 */
    fixture_tree_write(root, PCI "0000:c3:00.0/status", "on fire\n");     /* module 4 */
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 8);
    const cr_device_t *d3 = &n->devices.v[3], *d4 = &n->devices.v[4];
    assert_int_equal(d3->health, CR_HEALTH_UNHEALTHY);
    assert_string_equal(d3->health_reason, "status: needs reset");
    assert_int_equal(d4->health, CR_HEALTH_UNKNOWN);
    assert_int_equal(fixture_count_warnings(n, "accel6/device/status", "'on fire'"), 1);
    assert_int_equal(fixture_count_warnings(n, "device 3 (Gaudi2) is unhealthy", NULL), 1);
    assert_true(fixture_resource(n, "HPU") == 7 * CR_QTY_ONE);
    /* telemetry reads the status as it is now */
    const cr_accel_component_t *c = hw_component_find("gaudi");
    cr_hw_env_t env = {.root = root, .getenv = fixture_getenv, .getenv_ctx = &f};
    cr_telemetry_t t;
    assert_int_equal(c->telemetry(&env, n, 3, &t), 0);
    assert_int_equal(t.health, CR_HEALTH_UNHEALTHY);
    fixture_tree_write(root, PCI "0000:1a:00.0/status", "operational\n");
    assert_int_equal(c->telemetry(&env, n, 3, &t), 0);
    assert_int_equal(t.health, CR_HEALTH_OK);
    assert_true(t.utilization_pct == -1);
    assert_int_equal(c->telemetry(&env, n, 4, &t), 0);
    assert_int_equal(t.health, CR_HEALTH_UNKNOWN);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* Other accel drivers' devices are not ours; the older habanalabs class
 * names the same devices, which count once. */
static void test_other_accel_and_legacy_class(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "gaudi2-8");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_write(root, PCI "0000:00:0b.0/vendor", "0x8086\n"); /* an NPU */
    fixture_tree_write(root, PCI "0000:00:0b.0/device", "0x7d1d\n");
    fixture_tree_write(root, PCI "0000:00:0b.0/class", "0x120000\n");
    fixture_tree_sh(root,
                    "mkdir sys/class/accel/accel8 && ln -s ../../../bus/pci/devices/0000:00:0b.0 "
                    "sys/class/accel/accel8/device");
    fixture_tree_sh(root, "mkdir -p sys/class/habanalabs && for i in 0 1 2 3 4 5 6 7; do "
                          "mkdir sys/class/habanalabs/hl$i && cp -P sys/class/accel/accel$i/device "
                          "sys/class/habanalabs/hl$i/device; done");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 8);
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(n->links.n, 28);
    /* only the legacy class */
    fixture_tree_sh(root, "rm -r sys/class/accel");
    hw_node_free(n);
    n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 8);
    assert_string_equal(n->devices.v[0].pci, by_module[0]);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* The all-to-all fabric is a fact about 8-module boxes only. */
static void test_half_box_has_no_fabric(void **state)
{
    fixture_env_t f;
    char root[64];
    fixture_open(&f, "gaudi2-8");
    fixture_tree_copy(&f, root, sizeof(root));
    fixture_tree_sh(root,
                    "rm -r sys/class/accel/accel4 sys/class/accel/accel5 sys/class/accel/accel6 "
                    "sys/class/accel/accel7");
    cr_node_t *n = fixture_discover(&f, root);
    assert_int_equal(n->devices.n, 4);
    assert_int_equal(n->links.n, 0);
    hw_node_free(n);
    fixture_tree_remove(root);
    fixture_close(&f);
}

/* The module sets as domains, and the scheduler choosing among them. */
/* The module ids a placement gave, as a bit mask. */
static unsigned placed_modules(sched_cluster_t *c, const cr_node_t *n, const sched_result_t *r)
{
    int ids[8];
    size_t k = sched_fixture_devices(c, r, ids, 8);
    unsigned m = 0;
    for (size_t i = 0; i < k; i++)
        m |= 1u << n->devices.v[ids[i]].vendor_index;
    return m;
}

static void test_module_sets(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "gaudi2-8");
    cr_node_t *n = fixture_discover(&f, NULL);
    size_t nsets = 0;
    for (size_t i = 0; i < n->domains.n; i++)
        nsets += strcmp(n->domains.v[i].kind, "module-set") == 0;
    assert_int_equal(nsets, 7);
    sched_cluster_t *c = sched_fixture_cluster(n);
    sched_result_t r = sched_fixture_place(c, "HPU=3");
    assert_int_equal(r.status, SCHED_INFEASIBLE);
    assert_non_null(strstr(r.reason, "module sets (of 2, 4, 8 devices)"));
    /* a pair, then a quad: the first free set of the size, in the table's
     * order; the quad 0-3 is broken by the pair, so 4-7 */
    r = sched_fixture_place(c, "HPU=2");
    assert_int_equal(placed_modules(c, n, &r), 0x03);
    r = sched_fixture_place(c, "HPU=4");
    assert_int_equal(placed_modules(c, n, &r), 0xf0);
    r = sched_fixture_place(c, "HPU=2");
    assert_int_equal(placed_modules(c, n, &r), 0x0c);
    /* nothing whole is left for 2; 1 is any module (none left either) */
    assert_int_equal(sched_fixture_place(c, "HPU=2").status, SCHED_RETRY);
    assert_int_equal(sched_fixture_place(c, "HPU=8").status, SCHED_RETRY);
    sched_cluster_free(c);
    /* one module unhealthy: its pair, quad and the eight are not offered,
     * the others are */
    n->devices.v[hw_device_find(n, "gaudi", 6)].health = CR_HEALTH_UNHEALTHY;
    cr_node_add_resource(n, "HPU", -CR_QTY_ONE); /* as discovery counts it */
    c = sched_fixture_cluster(n);
    assert_int_equal(sched_fixture_place(c, "HPU=8").status, SCHED_INFEASIBLE);
    r = sched_fixture_place(c, "HPU=4");
    assert_int_equal(placed_modules(c, n, &r), 0x0f);
    r = sched_fixture_place(c, "HPU=2");
    assert_int_equal(placed_modules(c, n, &r), 0x30);
    r = sched_fixture_place(c, "HPU=1");
    assert_int_equal(placed_modules(c, n, &r), 0x80);
    sched_cluster_free(c);
    hw_node_free(n);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parsers),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_isolation),
        cmocka_unit_test(test_broken_module_id),
        cmocka_unit_test(test_duplicate_module_and_bad_addr),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_other_accel_and_legacy_class),
        cmocka_unit_test(test_half_box_has_no_fabric),
        cmocka_unit_test(test_module_sets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
