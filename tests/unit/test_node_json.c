/* hw/node_json.c: a rich node survives hw_node_to_json / hw_node_from_json
 * unchanged, and a document that does not match the schema is refused with
 * the path of the bad value and what was expected there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture.h"

/* Every kind of field: strings, ints, sizes, hex PCI ids, booleans, health,
 * reals, link kinds; a MIG parent and instance, TPU chips with coords, a TPU
 * slice domain with hosts, links, NICs, fractional resources, warnings. */
static cr_node_t *rich_node(void)
{
    cr_node_t *n = hw_node_new();
    cr_strlcpy(n->id, "rich-01", sizeof(n->id));
    cr_strlcpy(n->hostname, "rich-01.example.com", sizeof(n->hostname));
    *CR_VEC_PUSH(&n->addresses) = cr_strdup("10.1.2.3");
    *CR_VEC_PUSH(&n->addresses) = cr_strdup("fd00::3");
    cr_node_set_label(n, "corral.io/tpu-slice-name", "s1");
    cr_node_set_label(n, "team", "infra");
    cr_platform_t *p = &n->platform;
    cr_strlcpy(p->provider, "gcp", sizeof(p->provider));
    cr_strlcpy(p->region, "us-east5", sizeof(p->region));
    cr_strlcpy(p->zone, "us-east5-b", sizeof(p->zone));
    cr_strlcpy(p->rack, "r7", sizeof(p->rack));
    cr_strlcpy(p->market, "spot", sizeof(p->market));
    cr_strlcpy(p->instance_type, "a3-highgpu-8g", sizeof(p->instance_type));
    cr_strlcpy(p->k8s_node, "gke-pool-1-abcd", sizeof(p->k8s_node));
    cr_strlcpy(n->cpu.model, "AMD EPYC 9654", sizeof(n->cpu.model));
    n->cpu.sockets = 2;
    n->cpu.cores = 192;
    n->cpu.threads = 384;
    for (int i = 0; i < 2; i++) {
        cr_numa_t *nm = CR_VEC_PUSH(&n->numa);
        nm->id = i;
        cr_strlcpy(nm->cpus, i ? "96-191,288-383" : "0-95,192-287", sizeof(nm->cpus));
        nm->memory = 768ull << 30;
    }
    n->memory = 1536ull << 30;

    cr_device_t *g = cr_node_add_device(n); /* 0: a GPU in MIG mode */
    cr_strlcpy(g->backend, "nvidia", sizeof(g->backend));
    cr_strlcpy(g->vendor, "NVIDIA", sizeof(g->vendor));
    cr_strlcpy(g->resource, "GPU", sizeof(g->resource));
    cr_strlcpy(g->sku, "A100-80G", sizeof(g->sku));
    cr_strlcpy(g->product, "NVIDIA A100-SXM4-80GB", sizeof(g->product));
    cr_strlcpy(g->uuid, "GPU-1111", sizeof(g->uuid));
    cr_strlcpy(g->pci, "0000:07:00.0", sizeof(g->pci));
    cr_strlcpy(g->pci_path, "0000:00:01.0/0000:05:00.0/0000:07:00.0", sizeof(g->pci_path));
    g->pci_vendor = 0x10de;
    g->pci_device = 0x20b2;
    g->numa = 0;
    cr_strlcpy(g->cpus, "0-95,192-287", sizeof(g->cpus));
    cr_strlcpy(g->nic, "ib0", sizeof(g->nic));
    g->memory = 81920ull << 20;
    g->compute_units = 108;
    cr_strlcpy(g->compute_capability, "8.0", sizeof(g->compute_capability));
    cr_strlcpy(g->isolation_id, "GPU-1111", sizeof(g->isolation_id));
    g->vendor_index = 0;
    cr_strlcpy(g->driver, "535.183.01", sizeof(g->driver));
    g->health = CR_HEALTH_OK;
    g->mig_enabled = true;

    cr_device_t *m = cr_node_add_device(n); /* 1: its MIG instance */
    cr_strlcpy(m->backend, "nvidia", sizeof(m->backend));
    cr_strlcpy(m->resource, "GPU", sizeof(m->resource));
    cr_strlcpy(m->sku, "A100-80G", sizeof(m->sku));
    cr_strlcpy(m->uuid, "MIG-2222", sizeof(m->uuid));
    cr_strlcpy(m->isolation_id, "MIG-2222", sizeof(m->isolation_id));
    cr_strlcpy(m->mig_profile, "1g.10gb", sizeof(m->mig_profile));
    m->parent = 0;
    m->memory = 9728ull << 20;
    m->compute_units = 14;
    m->health = CR_HEALTH_DEGRADED;
    cr_strlcpy(m->health_reason, "ECC errors: 3 uncorrectable", sizeof(m->health_reason));

    for (int i = 0; i < 2; i++) { /* 2, 3: TPU chips */
        cr_device_t *t = cr_node_add_device(n);
        cr_strlcpy(t->backend, "tpu", sizeof(t->backend));
        cr_strlcpy(t->vendor, "Google", sizeof(t->vendor));
        cr_strlcpy(t->resource, "TPU", sizeof(t->resource));
        cr_strlcpy(t->sku, "TPU-V5P", sizeof(t->sku));
        t->coords[0] = i;
        t->coords[1] = 1;
        t->coords[2] = 3;
        t->ncoords = 3;
        t->cores = 2;
        t->numa = 1;
        t->vendor_index = i;
        t->health = CR_HEALTH_UNHEALTHY;
    }
    assert_int_equal(cr_node_add_link(n, 2, 3, CR_LINK_ICI, 4, 100.25), 0);
    assert_int_equal(cr_node_add_link(n, 0, 2, CR_LINK_CPU, 1, 0), 0);

    cr_domain_t *d = cr_node_add_domain(n, "tpu-slice", "s1");
    cr_strlcpy(d->accelerator_type, "v5p-16", sizeof(d->accelerator_type));
    cr_strlcpy(d->topology, "2x2x2", sizeof(d->topology));
    d->worker_id = 1;
    d->worker_count = 2;
    cr_domain_add_member(d, 2);
    cr_domain_add_member(d, 3);
    cr_domain_add_host(d, "v5p-s1-w0");
    cr_domain_add_host(d, "v5p-s1-w1");
    d = cr_node_add_domain(n, "nvlink-island", "island0");
    cr_domain_add_member(d, 0);

    cr_nic_t *x = CR_VEC_PUSH(&n->nics);
    cr_strlcpy(x->name, "ib0", sizeof(x->name));
    cr_strlcpy(x->pci, "0000:08:00.0", sizeof(x->pci));
    cr_strlcpy(x->pci_path, "0000:00:01.0/0000:05:00.0/0000:08:00.0", sizeof(x->pci_path));
    x->numa = 0;
    x->speed_mbps = 400000;
    x->rdma = true;
    cr_strlcpy(x->rdma_device, "mlx5_0", sizeof(x->rdma_device));
    x = CR_VEC_PUSH(&n->nics);
    cr_strlcpy(x->name, "eth0", sizeof(x->name));
    x->numa = -1;

    cr_node_add_resource(n, "CPU", 384 * CR_QTY_ONE);
    cr_node_add_resource(n, "memory", (int64_t)(1536ll << 30) * CR_QTY_ONE);
    cr_node_add_resource(n, "GPU", CR_QTY_ONE / 4);
    cr_node_add_resource(n, "TPU", 2 * CR_QTY_ONE + 1); /* 2.0001 */
    cr_node_warn(n, "device %d is %s", 1, "degraded");
    n->simulated = true;
    return n;
}

static char *dump(const json_t *j)
{
    return json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
}

static void test_round_trip(void **state)
{
    cr_node_t *n = rich_node();
    json_t *j1 = hw_node_to_json(n);
    cr_node_t *back = hw_node_new();
    hw_json_error_t err;
    int rc = hw_node_from_json(j1, back, &err);
    if (rc)
        fail_msg("%s: %s", err.path, err.msg);
    json_t *j2 = hw_node_to_json(back);
    char *s1 = dump(j1), *s2 = dump(j2);
    assert_string_equal(s1, s2);
    assert_true(json_equal(j1, j2));

    /* the JSON says what the struct said, in the documented forms */
    const json_t *d0 = json_array_get(json_object_get(j1, "devices"), 0);
    assert_string_equal(json_string_value(json_object_get(d0, "pci_vendor")), "0x10de");
    assert_int_equal(json_integer_value(json_object_get(d0, "memory")), 81920ll << 20);
    assert_true(json_is_true(json_object_get(d0, "mig_enabled")));
    const json_t *res = json_object_get(j1, "resources");
    assert_true(json_is_integer(json_object_get(res, "CPU")));
    assert_float_equal(json_real_value(json_object_get(res, "GPU")), 0.25, 1e-12);

    /* and the reloaded struct is the original, field by field */
    assert_int_equal(back->devices.n, 4);
    assert_int_equal(back->devices.v[1].parent, 0);
    assert_string_equal(back->devices.v[1].mig_profile, "1g.10gb");
    assert_int_equal(back->devices.v[1].health, CR_HEALTH_DEGRADED);
    assert_int_equal(back->devices.v[1].vendor_index, -1);
    assert_int_equal(back->devices.v[3].ncoords, 3);
    assert_int_equal(back->devices.v[3].coords[0], 1);
    assert_int_equal(back->devices.v[3].coords[2], 3);
    assert_int_equal(back->links.v[0].kind, CR_LINK_ICI);
    assert_float_equal(back->links.v[0].bandwidth_gbps, 100.25, 0);
    assert_int_equal(back->domains.v[0].worker_id, 1);
    assert_int_equal(back->domains.v[0].nhosts, 2);
    assert_string_equal(back->domains.v[0].hosts[1], "v5p-s1-w1");
    assert_int_equal(back->domains.v[1].worker_id, -1);
    assert_int_equal(back->nics.v[1].numa, -1);
    assert_int_equal(back->resources.v[1].amount, (int64_t)(1536ll << 30) * CR_QTY_ONE);
    assert_int_equal(back->resources.v[3].amount, 2 * CR_QTY_ONE + 1);
    assert_string_equal(back->platform.k8s_node, "gke-pool-1-abcd");
    assert_true(back->simulated);
    assert_int_equal(back->warnings.n, 1);

    free(s1);
    free(s2);
    json_decref(j1);
    json_decref(j2);
    hw_node_free(back);
    hw_node_free(n);
}

/* The rich node with one value replaced (path "devices[1].numa" style, as a
 * JSON pointer made of keys and indices), expected to fail. */
static void expect_error(const char *what, json_t *doc, const char *path, const char *msg)
{
    cr_node_t *n = hw_node_new();
    hw_json_error_t err;
    int rc = hw_node_from_json(doc, n, &err);
    hw_node_free(n);
    if (rc != CR_ESCHEMA)
        fail_msg("%s: accepted (rc %d)", what, rc);
    if (strcmp(err.path, path) != 0 || strncmp(err.msg, msg, strlen(msg)) != 0)
        fail_msg("%s:\n  got  %s: %s\n  want %s: %s...", what, err.path, err.msg, path, msg);
}

static json_t *rich_json(void)
{
    cr_node_t *n = rich_node();
    json_t *j = hw_node_to_json(n);
    hw_node_free(n);
    return j;
}

static json_t *dev(json_t *j, size_t i)
{
    return json_array_get(json_object_get(j, "devices"), i);
}

static void test_schema_errors(void **state)
{
    json_t *j;

    j = rich_json();
    json_object_set_new(j, "bogus", json_true());
    expect_error("unknown top field", j, "bogus",
                 "unknown field 'bogus'; expected one of: schema, id, hostname, simulated, "
                 "addresses, labels, platform, cpu, memory, resources, devices, links, domains, "
                 "nics, warnings");
    json_decref(j);

    j = rich_json();
    json_object_set_new(dev(j, 2), "colour", json_string("red"));
    expect_error("unknown device field", j, "devices[2].colour",
                 "unknown field 'colour'; expected one of: index, backend, vendor, resource, sku, "
                 "product, uuid, pci, pci_path, pci_vendor, pci_device, numa, cpus, nic, memory, "
                 "compute_units, cores, compute_capability, isolation_id, vendor_index, driver, "
                 "health, health_reason, parent, mig_enabled, mig_profile, partition, memory_numa, "
                 "coords");
    json_decref(j);

    j = rich_json();
    json_object_set_new(dev(j, 1), "numa", json_string("zero"));
    expect_error("string for int", j, "devices[1].numa", "expected a whole number, found a string");
    json_decref(j);

    j = rich_json();
    json_object_set_new(json_array_get(json_object_get(j, "nics"), 0), "rdma", json_integer(1));
    expect_error("int for bool", j, "nics[0].rdma", "expected true or false, found a number");
    json_decref(j);

    j = rich_json();
    json_object_set_new(dev(j, 0), "memory", json_string("lots"));
    expect_error("bad size", j, "devices[0].memory",
                 "expected a size such as 80Gi, 512MiB or a number of bytes, found 'lots'");
    json_decref(j);

    j = rich_json();
    json_object_set_new(dev(j, 0), "pci_vendor", json_string("0x1ffff"));
    expect_error("pci id too wide", j, "devices[0].pci_vendor", "expected a 16-bit PCI id");
    json_decref(j);

    j = rich_json();
    json_object_set_new(dev(j, 0), "health", json_string("fine"));
    expect_error("health", j, "devices[0].health",
                 "expected one of unknown, ok, degraded, unhealthy");
    json_decref(j);

    j = rich_json();
    json_object_set_new(dev(j, 3), "index", json_integer(7));
    expect_error("index", j, "devices[3].index", "device index 7 does not match its position 3");
    json_decref(j);

    j = rich_json();
    json_object_set_new(dev(j, 0), "parent", json_integer(1));
    expect_error("parent", j, "devices[0].parent", "parent 1 must name an earlier device");
    json_decref(j);

    j = rich_json();
    json_object_set_new(dev(j, 2), "coords", json_pack("[i,i,i,i]", 0, 0, 0, 0));
    expect_error("coords", j, "devices[2].coords", "expected a list of at most 3 whole numbers");
    json_decref(j);

    j = rich_json();
    json_object_set_new(json_array_get(json_object_get(j, "links"), 1), "b", json_integer(4));
    expect_error("link out of range", j, "links[1]",
                 "a and b must be two different device indices below 4");
    json_decref(j);

    j = rich_json();
    json_object_set_new(json_array_get(json_object_get(j, "links"), 0), "kind",
                        json_string("warp"));
    expect_error("link kind", j, "links[0].kind", "expected a link kind: one of nvlink, nvswitch");
    json_decref(j);

    j = rich_json();
    json_array_append_new(
        json_object_get(json_array_get(json_object_get(j, "domains"), 0), "members"),
        json_integer(9));
    expect_error("domain member", j, "domains[0].members[2]", "expected a device index below 4");
    json_decref(j);

    j = rich_json();
    json_array_append_new(
        json_object_get(json_array_get(json_object_get(j, "domains"), 0), "hosts"),
        json_integer(9));
    expect_error("domain host", j, "domains[0].hosts[2]", "expected a string, found a number");
    json_decref(j);

    j = rich_json();
    json_object_set_new(json_object_get(j, "resources"), "GPU", json_real(0.00001));
    expect_error("resource precision", j, "resources.GPU", "quantity 1e-05 has more than 4");
    json_decref(j);

    j = rich_json();
    json_object_set_new(json_object_get(j, "labels"), "corral.io/n", json_integer(8));
    expect_error("label type", j, "labels.corral.io/n", "a label value must be a string");
    json_decref(j);

    j = rich_json();
    json_object_set_new(j, "schema", json_string("corral.node/v2"));
    expect_error("schema version", j, "schema", "expected \"corral.node/v1\"");
    json_decref(j);

    j = rich_json();
    json_object_set_new(json_object_get(j, "cpu"), "numa_nodes", json_string("two"));
    expect_error("numa list", j, "cpu.numa_nodes", "expected a list, found a string");
    json_decref(j);

    j = json_array();
    expect_error("not a mapping", j, "", "a node description must be a mapping, found a list");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_schema_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
