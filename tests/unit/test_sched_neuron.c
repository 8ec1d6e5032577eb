/* sched/: NeuronCores on a trn1.32xlarge (16 Trainium devices of 2 cores,
 * neuron_cores = 32), tracked by whole devices: requests take q/2 devices,
 * release restores exactly, requests not a multiple of 2 are refused on
 * the node with a reason, and random traffic never over-commits a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "sched/sched.h"
#include "sched/sched_int.h"
#include "hw/hw.h"
#include "sched_fixture.h"
#include <stdio.h>
#include <stdlib.h>

static sched_cluster_t *trn1(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/specs/trn1-32xlarge.yaml", CORRAL_SOURCE_DIR);
    cr_node_t *n = hw_node_new();
    char *err = NULL;
    if (hw_spec_load(path, n, &err))
        fail_msg("load %s: %s", path, err ? err : "?");
    sched_cluster_t *c = sched_cluster_new();
    char msg[160];
    if (sched_cluster_add(c, n, msg, sizeof(msg)))
        fail_msg("add trn1: %s", msg);
    hw_node_free(n);
    assert_int_equal(sched_cluster_finalize(c), 0);
    return c;
}

static uint64_t mask_of(sched_cluster_t *c, const sched_result_t *r)
{
    assert_int_equal(r->status, SCHED_OK);
    const sched_placement_t *p = sched_placement_get(c, r->placement);
    assert_non_null(p);
    return sched__alloc(p, 0)->mask[0];
}

static void test_tracked(void **state)
{
    (void)state;
    sched_cluster_t *c = trn1();
    const sched_node_t *sn = &c->nodes.v[0];
    assert_int_equal(__builtin_popcountll(sn->unitmask[SCHED_R_NEURON_CORES]), 16);
    assert_int_equal(sched__units(sn, SCHED_R_NEURON_CORES), 2);
    assert_int_equal(c->dev.v[sn->dev_off + 5].units, 2);
    sched_cluster_free(c);
}

static void test_whole_devices(void **state)
{
    (void)state;
    sched_cluster_t *c = trn1();
    uint64_t d0 = sched_cluster_digest(c);
    int64_t av0 = AV(c, SCHED_R_NEURON_CORES, 0);
    assert_int_equal(av0, 32 * CR_QTY_ONE);
    sched_result_t r[4];
    uint64_t all = 0;
    for (int i = 0; i < 4; i++) {
        r[i] = sched_fixture_place(c, "neuron_cores=2");
        uint64_t m = mask_of(c, &r[i]);
        assert_int_equal(__builtin_popcountll(m), 1);
        assert_int_equal(m & all, 0); /* distinct devices */
        all |= m;
        int hw[4];
        const sched_alloc_t *a = sched__alloc(sched_placement_get(c, r[i].placement), 0);
        assert_int_equal(sched_alloc_devices(c, a, hw, 4), 1);
        assert_int_equal(hw[0], i); /* lowest index first, ring neighbours */
    }
    assert_int_equal(all, 0xf);
    assert_int_equal(AV(c, SCHED_R_NEURON_CORES, 0), 24 * CR_QTY_ONE);
    for (int i = 0; i < 4; i++)
        assert_int_equal(sched_release(c, r[i].placement), 0);
    assert_int_equal(AV(c, SCHED_R_NEURON_CORES, 0), av0);
    assert_int_equal(sched_cluster_digest(c), d0);
    sched_cluster_free(c);
}

static void test_multiples_prefer_numa(void **state)
{
    (void)state;
    sched_cluster_t *c = trn1();
    uint64_t d0 = sched_cluster_digest(c);
    sched_result_t r = sched_fixture_place(c, "neuron_cores=4");
    assert_int_equal(mask_of(c, &r), 0x3);
    sched_result_t big =
        sched_fixture_place(c, "neuron_cores=10"); /* 5 devices: NUMA 0 still holds them */
    assert_int_equal(mask_of(c, &big), 0x7c);
    /* NUMA 0 has one device left: 2 devices come from NUMA 1, together */
    sched_result_t r2 = sched_fixture_place(c, "neuron_cores=4");
    assert_int_equal(mask_of(c, &r2), 0x300);
    /* one device still fits NUMA 0's last one (best fit) */
    sched_result_t r3 = sched_fixture_place(c, "neuron_cores=2");
    assert_int_equal(mask_of(c, &r3), 0x80);
    assert_int_equal(sched_release(c, r.placement), 0);
    assert_int_equal(sched_release(c, big.placement), 0);
    assert_int_equal(sched_release(c, r2.placement), 0);
    assert_int_equal(sched_release(c, r3.placement), 0);
    assert_int_equal(sched_cluster_digest(c), d0);
    sched_cluster_free(c);
}

static void test_part_device_refused(void **state)
{
    (void)state;
    sched_cluster_t *c = trn1();
    uint64_t d0 = sched_cluster_digest(c);
    static const char *const bad[] = {"neuron_cores=3", "neuron_cores=1", "neuron_cores=0.5"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        sched_result_t r = sched_fixture_place(c, bad[i]);
        assert_int_equal(r.status, SCHED_INFEASIBLE);
        assert_string_equal(r.reason,
                            "neuron_cores requests on trn1-01 must be whole devices of 2 cores");
    }
    assert_int_equal(sched_cluster_digest(c), d0);
    /* more than the node has in total keeps its usual reason */
    sched_result_t r = sched_fixture_place(c, "neuron_cores=34");
    assert_int_equal(r.status, SCHED_INFEASIBLE);
    assert_non_null(strstr(r.reason, "in total"));
    /* all 16 devices, then nothing is left: retry, not infeasible */
    sched_result_t all = sched_fixture_place(c, "neuron_cores=32");
    assert_int_equal(mask_of(c, &all), 0xffff);
    r = sched_fixture_place(c, "neuron_cores=2");
    assert_int_equal(r.status, SCHED_RETRY);
    assert_int_equal(sched_release(c, all.placement), 0);
    assert_int_equal(sched_cluster_digest(c), d0);
    sched_cluster_free(c);
}

static void test_property_random(void **state)
{
    (void)state;
    sched_cluster_t *c = trn1();
    uint64_t d0 = sched_cluster_digest(c);
    sched_rng_t rng = {42};
    uint64_t ids[64], masks[64];
    int live = 0;
    uint64_t used = 0;
    for (int step = 0; step < 3000; step++) {
        if (live && (live == 64 || sched_rng_next(&rng) % 3 == 0)) {
            int i = (int)(sched_rng_next(&rng) % (uint64_t)live);
            assert_int_equal(sched_release(c, ids[i]), 0);
            used &= ~masks[i];
            ids[i] = ids[live - 1];
            masks[i] = masks[live - 1];
            live--;
        } else {
            int q = 1 + (int)(sched_rng_next(&rng) % 8);
            char res[32];
            snprintf(res, sizeof(res), "neuron_cores=%d", q);
            sched_result_t r = sched_fixture_place(c, res);
            int freedev = 16 - __builtin_popcountll(used);
            if (q % 2) {
                assert_int_equal(r.status, SCHED_INFEASIBLE);
                continue;
            }
            if (q / 2 > freedev) {
                assert_int_equal(r.status, SCHED_RETRY);
                continue;
            }
            uint64_t m = mask_of(c, &r);
            assert_int_equal(__builtin_popcountll(m), q / 2);
            assert_int_equal(m & used, 0); /* never a device twice */
            used |= m;
            ids[live] = r.placement;
            masks[live++] = m;
        }
        assert_int_equal(AV(c, SCHED_R_NEURON_CORES, 0),
                         (int64_t)(32 - 2 * __builtin_popcountll(used)) * CR_QTY_ONE);
    }
    while (live)
        assert_int_equal(sched_release(c, ids[--live]), 0);
    assert_int_equal(sched_cluster_digest(c), d0);
    sched_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tracked),
        cmocka_unit_test(test_whole_devices),
        cmocka_unit_test(test_multiples_prefer_numa),
        cmocka_unit_test(test_part_device_refused),
        cmocka_unit_test(test_property_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
