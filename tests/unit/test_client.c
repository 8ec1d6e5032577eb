/* client/client.c without a head: the PgCreate it builds from a
 * corral_pg_spec_t (and what it refuses to send), resource parsing,
 * strategy names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "client/client_int.h"
#include <stdio.h>

/* Packs e, unpacks and validates it as the head would. */
static Corral__Envelope *round_trip(const Corral__Envelope *e, char *why, size_t size)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(cr_msg_pack(e, 0, &buf, &len), 0);
    Corral__Envelope *back = cr_msg_unpack(buf + CR_FRAME_HDR, len - CR_FRAME_HDR, why, size);
    free(buf);
    return back;
}

static void test_pg_create_built(void **state)
{
    corral_bundle_spec_t b[] = {{.resources = "GPU=1,CPU=2,memory=8Gi", .selector = "zone=a"},
                                {.resources = "GPU=0.5"}};
    corral_pg_spec_t spec = {.name = "train",
                             .bundles = b,
                             .nbundles = 2,
                             .strategy = CORRAL_STRICT_SPREAD,
                             .selector = "gpu.product in (H100,H200)",
                             .domain = "corral.io/tpu-slice-name",
                             .wait = 1};
    char why[256] = "";
    Corral__PgCreate *r = cr__pg_create_build(&spec, why, sizeof(why));
    assert_non_null(r);
    assert_string_equal(r->name, "train");
    assert_int_equal(r->strategy, CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD);
    assert_string_equal(r->selector, "gpu.product in (H100,H200)");
    assert_string_equal(r->domain, "corral.io/tpu-slice-name");
    assert_true(r->wait);
    assert_int_equal(r->n_bundles, 2);
    assert_int_equal(r->bundles[0]->n_resources, 3);
    assert_string_equal(r->bundles[0]->resources[0]->name, "GPU");
    assert_int_equal(r->bundles[0]->resources[0]->amount, CR_QTY_ONE);
    assert_string_equal(r->bundles[0]->resources[1]->name, "CPU");
    assert_int_equal(r->bundles[0]->resources[1]->amount, 2 * CR_QTY_ONE);
    assert_string_equal(r->bundles[0]->resources[2]->name, "memory");
    assert_int_equal(r->bundles[0]->resources[2]->amount, (int64_t)8 * (1 << 30) * CR_QTY_ONE);
    assert_string_equal(r->bundles[0]->selector, "zone=a");
    assert_string_equal(r->bundles[1]->selector, "");
    assert_int_equal(r->bundles[1]->n_resources, 1);
    assert_int_equal(r->bundles[1]->resources[0]->amount, CR_QTY_ONE / 2);

    /* what the head receives passes its validation unchanged */
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 7;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_CREATE;
    e.pg_create = r;
    Corral__Envelope *back = round_trip(&e, why, sizeof(why));
    assert_non_null(back);
    assert_int_equal(back->body_case, CORRAL__ENVELOPE__BODY_PG_CREATE);
    assert_int_equal(back->pg_create->n_bundles, 2);
    assert_int_equal(back->pg_create->strategy, CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD);
    cr_msg_free(back);
    cr__pg_create_free(r);
}

static void test_pg_create_defaults(void **state)
{
    corral_bundle_spec_t b = {.resources = "TPU=4"};
    corral_pg_spec_t spec = {.bundles = &b, .nbundles = 1};
    char why[256];
    Corral__PgCreate *r = cr__pg_create_build(&spec, why, sizeof(why));
    assert_non_null(r);
    assert_string_equal(r->name, "");
    assert_int_equal(r->strategy, CORRAL__STRATEGY__STRATEGY_PACK);
    assert_false(r->wait);
    assert_string_equal(r->selector, "");
    assert_string_equal(r->domain, "");
    assert_int_equal(corral_pg_spec_check(&spec, why, sizeof(why)), 0);
    cr__pg_create_free(r);
}

static void expect_refused(const corral_pg_spec_t *spec, const char *says)
{
    char why[256] = "";
    assert_null(cr__pg_create_build(spec, why, sizeof(why)));
    if (!strstr(why, says))
        fail_msg("expected '%s' in '%s'", says, why);
    why[0] = '\0';
    assert_int_equal(corral_pg_spec_check(spec, why, sizeof(why)), CR_EINVAL);
    assert_non_null(strstr(why, says));
}

static void test_pg_create_refused(void **state)
{
    corral_pg_spec_t none = {.name = "x"};
    expect_refused(&none, "at least one bundle");
    corral_bundle_spec_t empty[] = {{.resources = "GPU=1"}, {.resources = ""}};
    corral_pg_spec_t e = {.bundles = empty, .nbundles = 2};
    expect_refused(&e, "bundle 1 asks for no resource");
    corral_bundle_spec_t bad[] = {{.resources = "GPU=one"}};
    corral_pg_spec_t b = {.bundles = bad, .nbundles = 1};
    expect_refused(&b, "bundle 0: resources: GPU=one");
    corral_bundle_spec_t noname[] = {{.resources = "=1"}};
    corral_pg_spec_t n = {.bundles = noname, .nbundles = 1};
    expect_refused(&n, "expected NAME=AMOUNT");
    corral_bundle_spec_t zero[] = {{.resources = "GPU=0"}};
    corral_pg_spec_t z = {.bundles = zero, .nbundles = 1};
    expect_refused(&z, "GPU=0 reserves nothing");
    corral_bundle_spec_t ok[] = {{.resources = "GPU=1"}};
    corral_pg_spec_t s = {.bundles = ok, .nbundles = 1, .strategy = (corral_strategy_t)9};
    expect_refused(&s, "unknown strategy");
}

static void test_parse_resources(void **state)
{
    Corral__Quantity *q[SCHED_REQ_MAX];
    size_t n;
    char why[256];
    assert_int_equal(cr__parse_resources(NULL, q, &n, why, sizeof(why)), 0);
    assert_int_equal(n, 0);
    assert_int_equal(cr__parse_resources("CPU=1.5,neuron_cores=2", q, &n, why, sizeof(why)), 0);
    assert_int_equal(n, 2);
    assert_int_equal(q[0]->amount, CR_QTY_ONE * 3 / 2);
    assert_string_equal(q[1]->name, "neuron_cores");
    cr__quantities_free(q, n);
    /* a failure leaves nothing to free (ASan says so) */
    assert_int_equal(cr__parse_resources("CPU=1,GPU", q, &n, why, sizeof(why)), CR_EINVAL);
    assert_int_equal(n, 0);
    assert_non_null(strstr(why, "'GPU'"));
}

static void test_strategy_names(void **state)
{
    corral_strategy_t s;
    assert_int_equal(corral_strategy_parse("spread", &s), 0);
    assert_int_equal(s, CORRAL_SPREAD);
    assert_int_equal(corral_strategy_parse("strict-pack", &s), 0);
    assert_int_equal(s, CORRAL_STRICT_PACK);
    assert_int_equal(corral_strategy_parse("STRICT_SPREAD", &s), 0);
    assert_int_equal(s, CORRAL_STRICT_SPREAD);
    assert_int_equal(corral_strategy_parse("PACKED", &s), CR_EINVAL);
    assert_int_equal(corral_strategy_parse("", &s), CR_EINVAL);
    assert_int_equal(corral_strategy_parse("STRICT_SPREAD_AND_MORE_THAN_32_CHARS", &s), CR_EINVAL);
    for (int i = CORRAL_PACK; i <= CORRAL_STRICT_SPREAD; i++) {
        assert_int_equal(corral_strategy_parse(corral_strategy_name(i), &s), 0);
        assert_int_equal(s, i);
    }
    /* the API's values are the protocol's */
    assert_int_equal(CORRAL_STRICT_SPREAD, CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD);
    assert_int_equal(CORRAL_BIND_NONE, CORRAL__BIND__BIND_NONE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pg_create_built),   cmocka_unit_test(test_pg_create_defaults),
        cmocka_unit_test(test_pg_create_refused), cmocka_unit_test(test_parse_resources),
        cmocka_unit_test(test_strategy_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
