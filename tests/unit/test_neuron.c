/* The neuron backend against the trn1.32xlarge fixture, its sysfs parsers,
 * NEURON_RT_VISIBLE_CORES, and odd sysfs files in a copy of the fixture. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "tests/unit/fixture.h"
#include "hw/neuron_sysfs.h"

static cr_node_t *discover(fixture_env_t *f)
{
    hw_options_t o = fixture_options(f);
    o.no_host = true;
    cr_node_t *node = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &node, &msg), 0);
    assert_null(msg);
    return node;
}

static size_t warnings_with(const cr_node_t *n, const char *a, const char *b)
{
    size_t k = 0;
    for (size_t i = 0; i < n->warnings.n; i++)
        k += strstr(n->warnings.v[i], a) && (!b || strstr(n->warnings.v[i], b));
    return k;
}

static int degree(const cr_node_t *n, int dev)
{
    int k = 0;
    for (size_t i = 0; i < n->links.n; i++)
        k += n->links.v[i].a == dev || n->links.v[i].b == dev;
    return k;
}

static const char *const buses[] = {"10", "20", "90", "a0"};
static const char *const slots[] = {"1c", "1d", "1e", "1f"};

static void test_trn1(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "trn1-32xlarge");
    cr_node_t *n = discover(&f);
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(n->devices.n, 16);
    for (int i = 0; i < 16; i++) {
        const cr_device_t *d = &n->devices.v[i];
        char buf[32];
        assert_string_equal(d->backend, "neuron");
        assert_string_equal(d->vendor, "AWS");
        assert_string_equal(d->resource, "neuron_cores");
        assert_string_equal(d->sku, "Trainium");
        assert_string_equal(d->product, "Trainium1");
        assert_int_equal(d->cores, 2);
        assert_int_equal(d->memory, 32ull << 30);
        assert_int_equal(d->vendor_index, i);
        snprintf(buf, sizeof(buf), "%d-%d", 2 * i, 2 * i + 1);
        assert_string_equal(d->isolation_id, buf);
        snprintf(buf, sizeof(buf), "0000:%s:%s.0", buses[i / 4], slots[i % 4]);
        assert_string_equal(d->pci, buf);
        assert_int_equal(d->pci_device, 0x7264);
        assert_int_equal(d->numa, i < 8 ? 0 : 1);
    }
    /* a 4x4 torus: (r, c) links to (r +- 1, c) and (r, c +- 1), wrapping */
    assert_int_equal(n->links.n, 32);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(degree(n, i), 4);
        int r = i / 4, c = i % 4;
        int nb[4] = {((r + 1) % 4) * 4 + c, ((r + 3) % 4) * 4 + c, r * 4 + (c + 1) % 4,
                     r * 4 + (c + 3) % 4};
        for (int k = 0; k < 4; k++) {
            const cr_link_t *l = hw_node_find_link(n, i, nb[k]);
            assert_non_null(l);
            assert_int_equal(l->kind, CR_LINK_NEURONLINK);
        }
    }
    assert_null(hw_node_find_link(n, 0, 5)); /* no diagonal */
    assert_int_equal(n->domains.n, 1);
    assert_string_equal(n->domains.v[0].kind, "neuron-ring");
    assert_int_equal(n->domains.v[0].nmembers, 16);
    assert_int_equal(n->resources.n, 1);
    assert_string_equal(n->resources.v[0].name, "neuron_cores");
    assert_int_equal(n->resources.v[0].amount, 32 * CR_QTY_ONE);
    assert_string_equal(cr_node_get_label(n, "corral.io/accelerator-type"), "Trainium");
    hw_node_free(n);
    fixture_close(&f);
}

static void check_isolate(fixture_env_t *f, const cr_node_t *n, const int *devs, size_t nd,
                          const char *want)
{
    hw_options_t o = fixture_options(f);
    o.no_host = true;
    cr_envlist_t e = {0};
    assert_int_equal(hw_isolate(&o, n, devs, nd, &e, NULL), 0);
    const char *v = cr_envlist_get(&e, "NEURON_RT_VISIBLE_CORES");
    assert_non_null(v);
    assert_string_equal(v, want);
    assert_int_equal(e.vars.n, 1);
    cr_envlist_free(&e);
}

static void test_isolation(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "trn1-32xlarge");
    cr_node_t *n = discover(&f);
    int a[] = {0, 1}, b[] = {0, 3}, c[] = {2}, d[] = {15, 14}, e[] = {1, 0, 2, 5};
    check_isolate(&f, n, a, 2, "0-3");
    check_isolate(&f, n, b, 2, "0,1,6,7");
    check_isolate(&f, n, c, 1, "4-5");
    check_isolate(&f, n, d, 2, "28-31");
    check_isolate(&f, n, e, 4, "0,1,2,3,4,5,10,11");
    check_isolate(&f, n, NULL, 0, "");
    int all[16];
    for (int i = 0; i < 16; i++)
        all[i] = i;
    check_isolate(&f, n, all, 16, "0-31");
    hw_node_free(n);
    fixture_close(&f);
}

static void test_parsers(void **state)
{
    int v = -1;
    assert_int_equal(neuron_parse_core_count("2", &v), 0);
    assert_int_equal(v, 2);
    assert_int_equal(neuron_parse_core_count(" 8\n", &v), 0);
    assert_int_equal(v, 8);
    assert_int_equal(neuron_parse_core_count("0", &v), CR_ERANGE);
    assert_int_equal(neuron_parse_core_count("65", &v), CR_ERANGE);
    assert_int_equal(neuron_parse_core_count("two", &v), CR_EPARSE);
    assert_int_equal(neuron_parse_core_count("2 3", &v), CR_EPARSE);
    assert_int_equal(neuron_parse_core_count("-2", &v), CR_EPARSE);
    assert_int_equal(neuron_parse_core_count("", &v), CR_EPARSE);
    assert_int_equal(neuron_parse_core_count(NULL, &v), CR_EPARSE);

    int ids[8];
    assert_int_equal(neuron_parse_connected("12, 3, 4, 1", ids, 8), 4);
    assert_int_equal(ids[0], 12);
    assert_int_equal(ids[3], 1);
    assert_int_equal(neuron_parse_connected("", ids, 8), 0);
    assert_int_equal(neuron_parse_connected("\n", ids, 8), 0);
    assert_int_equal(neuron_parse_connected("1 2", ids, 8), 2);
    assert_int_equal(neuron_parse_connected("1,2\n", ids, 8), 2);
    assert_int_equal(neuron_parse_connected("1,,2", ids, 8), CR_EPARSE);
    assert_int_equal(neuron_parse_connected("1, 1", ids, 8), CR_EPARSE);
    assert_int_equal(neuron_parse_connected("1, ", ids, 8), CR_EPARSE);
    assert_int_equal(neuron_parse_connected(",1", ids, 8), CR_EPARSE);
    assert_int_equal(neuron_parse_connected("1x", ids, 8), CR_EPARSE);
    assert_int_equal(neuron_parse_connected("a", ids, 8), CR_EPARSE);
    assert_int_equal(neuron_parse_connected("64", ids, 8), CR_ERANGE);
    assert_int_equal(neuron_parse_connected("1, 2, 3", ids, 2), CR_ERANGE);

    int lo, hi;
    assert_int_equal(neuron_parse_core_range("4-5", &lo, &hi), 0);
    assert_int_equal(lo, 4);
    assert_int_equal(hi, 5);
    assert_int_equal(neuron_parse_core_range("7", &lo, &hi), 0);
    assert_int_equal(hi, 7);
    assert_int_equal(neuron_parse_core_range("5-4", &lo, &hi), CR_EPARSE);
    assert_int_equal(neuron_parse_core_range("4-", &lo, &hi), CR_EPARSE);
    assert_int_equal(neuron_parse_core_range("", &lo, &hi), CR_EPARSE);
    assert_int_equal(neuron_parse_core_range("4,5", &lo, &hi), CR_EPARSE);

    struct {
        int cores[8];
        size_t n;
        const char *want;
    } fmt[] = {
        {{3, 0, 1, 2}, 4, "0-3"}, {{0, 1, 6, 7}, 4, "0,1,6,7"}, {{5}, 1, "5"}, {{0}, 0, ""},
        {{2, 1, 1, 2}, 4, "1-2"}, {{9, 4}, 2, "4,9"},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(fmt); i++) {
        cr_buf_t b = {0};
        neuron_format_cores(fmt[i].cores, fmt[i].n, &b);
        assert_string_equal(b.s, fmt[i].want);
        cr_buf_free(&b);
    }
}

/* A copy of the fixture to spoil. */
static void copy_fixture(char *dir, fixture_env_t *f)
{
    char cmd[1200];
    strcpy(dir, "/tmp/corral-neuron-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd), "cp -a '%s/tests/fixtures/hw/trn1-32xlarge/root/.' '%s/'",
             CORRAL_SOURCE_DIR, dir);
    assert_int_equal(system(cmd), 0);
    memset(f, 0, sizeof(*f));
    strcpy(f->root, dir);
}

static void spoil(const char *dir, const char *path, const char *text)
{
    char full[1200];
    snprintf(full, sizeof(full), "%s%s", dir, path);
    if (!text) {
        char cmd[1300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", full);
        assert_int_equal(system(cmd), 0);
        return;
    }
    FILE *fp = fopen(full, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void drop(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

#define NDEV "/sys/devices/virtual/neuron_device"

static void test_bad_core_count(void **state)
{
    char dir[64];
    fixture_env_t f;
    copy_fixture(dir, &f);
    spoil(dir, NDEV "/neuron3/core_count", "two\n");
    cr_node_t *n = discover(&f);
    assert_int_equal(n->warnings.n, 1);
    assert_int_equal(warnings_with(n, "neuron3/core_count", "left out"), 1);
    assert_int_equal(n->devices.n, 15);
    /* the devices after it keep their core numbers */
    assert_int_equal(n->devices.v[3].vendor_index, 4);
    assert_string_equal(n->devices.v[3].isolation_id, "8-9");
    assert_string_equal(n->devices.v[3].pci, "0000:20:1c.0");
    assert_int_equal(n->resources.v[0].amount, 30 * CR_QTY_ONE);
    /* the torus without neuron3: its 4 links are gone */
    assert_int_equal(n->links.n, 28);
    hw_node_free(n);
    fixture_close(&f);
    drop(dir);
}

static void test_bad_connected(void **state)
{
    char dir[64];
    fixture_env_t f;
    copy_fixture(dir, &f);
    spoil(dir, NDEV "/neuron5/connected_devices", "1, x, 6\n");
    spoil(dir, NDEV "/neuron0/connected_devices", "12, 3, 40, 1\n");
    cr_node_t *n = discover(&f);
    assert_int_equal(n->warnings.n, 2);
    assert_int_equal(warnings_with(n, "neuron5/connected_devices", "device ids"), 1);
    assert_int_equal(warnings_with(n, "neuron0/connected_devices", "40"), 1);
    assert_int_equal(n->devices.n, 16);
    /* the neighbours still name both ends, so the torus survives */
    assert_int_equal(n->links.n, 32);
    hw_node_free(n);
    fixture_close(&f);
    drop(dir);
}

static void test_missing_pci(void **state)
{
    char dir[64];
    fixture_env_t f;
    copy_fixture(dir, &f);
    spoil(dir, "/sys/bus/pci/devices/0000:90:1c.0", NULL);
    cr_node_t *n = discover(&f);
    assert_int_equal(warnings_with(n, "PCI", "left out"), 1);
    assert_int_equal(n->devices.n, 16);
    assert_string_equal(n->devices.v[0].pci, "");
    /* the SKU still comes from the driver's device name */
    assert_string_equal(n->devices.v[0].sku, "Trainium");
    hw_node_free(n);
    fixture_close(&f);
    drop(dir);

    /* no driver at all: nothing, quietly */
    copy_fixture(dir, &f);
    spoil(dir, NDEV, NULL);
    n = discover(&f);
    assert_int_equal(n->devices.n, 0);
    assert_int_equal(n->warnings.n, 0);
    hw_node_free(n);
    fixture_close(&f);
    drop(dir);
}

static void test_trainium2_logical_cores(void **state)
{
    char dir[64];
    fixture_env_t f;
    copy_fixture(dir, &f);
    char path[128];
    for (int i = 0; i < 16; i++) {
        snprintf(path, sizeof(path), NDEV "/neuron%d/core_count", i);
        spoil(dir, path, "8");
        snprintf(path, sizeof(path), NDEV "/neuron%d/info/architecture/device_name", i);
        spoil(dir, path, "Trainium2\n");
    }
    /* without PCI ids the driver's name says Trainium2 */
    spoil(dir, "/sys/bus/pci", NULL);
    cr_node_t *n = discover(&f);
    assert_int_equal(n->devices.n, 16);
    assert_string_equal(n->devices.v[1].sku, "Trainium2");
    assert_int_equal(n->devices.v[1].compute_units, 8);
    assert_int_equal(n->devices.v[1].cores, 4); /* LNC=2 by default */
    assert_string_equal(n->devices.v[1].isolation_id, "4-7");
    hw_node_free(n);
    fixture_setenv(&f, "NEURON_LOGICAL_NC_CONFIG", "1");
    n = discover(&f);
    assert_int_equal(n->devices.v[1].cores, 8);
    assert_string_equal(n->devices.v[1].isolation_id, "8-15");
    hw_node_free(n);
    fixture_close(&f);
    drop(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trn1),
        cmocka_unit_test(test_isolation),
        cmocka_unit_test(test_parsers),
        cmocka_unit_test(test_bad_core_count),
        cmocka_unit_test(test_bad_connected),
        cmocka_unit_test(test_missing_pci),
        cmocka_unit_test(test_trainium2_logical_cores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
