/* The parsers of the vendors' tools' outputs (cli/conformance_parse.c):
 * the shapes each source shows (tests/fixtures/vendor-tools/README.md),
 * the variants they allow, and refusals that name the field. */
#include "cli/conformance.h"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

static conf_vdevs_t v;
static char why[256];

static int setup(void **state)
{
    (void)state;
    memset(&v, 0, sizeof(v));
    why[0] = '\0';
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    CR_VEC_FREE(&v);
    return 0;
}

static void test_neuron_ls(void **state)
{
    (void)state;
    /* Ray's mocked shape: no PCI domain, connected_to null; numbers as a
     * real capture has them (numa_node a string, ignored) */
    const char *text = "[{\"neuron_device\":0,\"bdf\":\"00:1e.0\",\"connected_to\":null,"
                       "\"nc_count\":2,\"memory_size\":34359738368,\"numa_node\":\"-1\","
                       "\"neuron_processes\":[]},"
                       "{\"neuron_device\":1,\"bdf\":\"0000:10:1D.0\",\"connected_to\":[0, 3],"
                       "\"nc_count\":8}]";
    assert_int_equal(conf_parse_neuron_ls(text, &v, why, sizeof(why)), 0);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.v[0].index, 0);
    assert_string_equal(v.v[0].pci, "0000:00:1e.0");
    assert_int_equal(v.v[0].id, 2);
    assert_int_equal(v.v[0].nlinks, -1);
    assert_string_equal(v.v[1].pci, "0000:10:1d.0");
    assert_int_equal(v.v[1].id, 8);
    assert_int_equal(v.v[1].nlinks, 2);
    assert_int_equal(v.v[1].links[1], 3);
}

static void test_neuron_ls_refusals(void **state)
{
    (void)state;
    assert_int_equal(conf_parse_neuron_ls("{\"neuron_device\":0}", &v, why, sizeof(why)),
                     CR_EPARSE);
    assert_non_null(strstr(why, "not an array"));
    assert_int_equal(
        conf_parse_neuron_ls("[{\"neuron_device\":0,\"bdf\":\"00:1e.0\"}]", &v, why, sizeof(why)),
        CR_EPARSE);
    assert_non_null(strstr(why, "nc_count"));
    assert_int_equal(
        conf_parse_neuron_ls("[{\"neuron_device\":0,\"bdf\":\"00:1e.0\",\"nc_count\":2,"
                             "\"connected_to\":\"1,2\"}]",
                             &v, why, sizeof(why)),
        CR_EPARSE);
    assert_non_null(strstr(why, "connected_to"));
    assert_int_equal(
        conf_parse_neuron_ls("[{\"neuron_device\":0,\"bdf\":\"nowhere\",\"nc_count\":2}]", &v, why,
                             sizeof(why)),
        CR_EPARSE);
    assert_non_null(strstr(why, "bdf"));
    assert_int_equal(conf_parse_neuron_ls("neuron-ls: no devices", &v, why, sizeof(why)),
                     CR_EPARSE);
    assert_non_null(strstr(why, "no JSON"));
}

static void test_hl_smi(void **state)
{
    (void)state;
    const char *text = "0, 2, 0000:19:00.0, HL-225\r\n\n1, 3, 0000:1A:00.0, HL-225\n";
    assert_int_equal(conf_parse_hl_smi(text, &v, why, sizeof(why)), 0);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.v[1].index, 1);
    assert_int_equal(v.v[1].id, 3);
    assert_string_equal(v.v[1].pci, "0000:1a:00.0");
    assert_string_equal(v.v[1].name, "HL-225");
    /* three fields, five fields, a header line: refused, the line shown */
    assert_int_equal(conf_parse_hl_smi("0, 2, 0000:19:00.0\n", &v, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "'0, 2, 0000:19:00.0'"));
    assert_int_equal(conf_parse_hl_smi("0, 2, 0000:19:00.0, HL-225, x\n", &v, why, sizeof(why)),
                     CR_EPARSE);
    assert_int_equal(conf_parse_hl_smi("index, module_id, bus_id, name\n", &v, why, sizeof(why)),
                     CR_EPARSE);
    assert_non_null(strstr(why, "not index, module_id, bus_id, name"));
}

static void test_xpu_smi(void **state)
{
    (void)state;
    const char *text = "{\"device_list\": [{\"device_id\": 0, \"device_name\": \"Intel(R) Data "
                       "Center GPU Max 1550\", \"device_type\": \"GPU\", \"pci_bdf_address\": "
                       "\"0000:4d:00.0\", \"pci_device_id\": \"0xbd5\", \"uuid\": \"x\", "
                       "\"vendor_name\": \"Intel(R) Corporation\"}]}";
    assert_int_equal(conf_parse_xpu_smi(text, &v, why, sizeof(why)), 0);
    assert_int_equal(v.n, 1);
    assert_string_equal(v.v[0].pci, "0000:4d:00.0");
    assert_string_equal(v.v[0].name, "Intel(R) Data Center GPU Max 1550");
    assert_int_equal(conf_parse_xpu_smi("[]", &v, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "device_list"));
}

static void test_amd_smi(void **state)
{
    (void)state;
    const char *list = "[{\"gpu\": 0, \"bdf\": \"0000:05:00.0\", \"uuid\": \"N/A\", \"kfd_id\": 1, "
                       "\"node_id\": 2, \"partition_id\": \"N/A\"},"
                       "{\"gpu\": 1, \"bdf\": \"0000:05:00.1\", \"uuid\": \"N/A\", \"kfd_id\": 3, "
                       "\"node_id\": 3, \"partition_id\": 1}]";
    assert_int_equal(conf_parse_amd_smi_list(list, &v, why, sizeof(why)), 0);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.v[0].id, 0); /* N/A: not partitioned */
    assert_int_equal(v.v[1].id, 1);
    assert_string_equal(v.v[1].pci, "0000:05:00.1");
    const char *st = "[{\"gpu\": 1, \"asic\": {\"market_name\": \"AMD Instinct MI300X\"}}]";
    assert_int_equal(conf_parse_amd_smi_static(st, &v, why, sizeof(why)), 0);
    assert_string_equal(v.v[0].name, "");
    assert_string_equal(v.v[1].name, "AMD Instinct MI300X");
    assert_int_equal(
        conf_parse_amd_smi_static("[{\"gpu\": 0, \"asic\": {}}]", &v, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "market_name"));
    assert_int_equal(conf_parse_amd_smi_list(
                         "[{\"gpu\": 0, \"bdf\": \"0000:05:00.0\", \"partition_id\": \"x\"}]", &v,
                         why, sizeof(why)),
                     CR_EPARSE);
    assert_non_null(strstr(why, "partition_id"));
}

static void test_amd_smi_topology(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        CR_VEC_PUSH(&v)->index = i;
    const char *text = "[{\"gpu\": 0, \"link_type\": {\"gpu_0\": \"SELF\", \"gpu_1\": \"XGMI\", "
                       "\"gpu_2\": \"PCIE\"}, \"hops\": {\"gpu_0\": 0}},"
                       "{\"gpu\": 1, \"link_type\": {\"gpu_0\": \"XGMI\", \"gpu_1\": \"SELF\"}}]";
    assert_int_equal(conf_parse_amd_smi_topology(text, &v, why, sizeof(why)), 0);
    assert_int_equal(v.v[0].nlinks, 1);
    assert_int_equal(v.v[0].links[0], 1);
    assert_int_equal(v.v[1].nlinks, 1);
    assert_int_equal(v.v[2].nlinks, -1); /* not in the matrix */
    assert_int_equal(conf_parse_amd_smi_topology("[{\"gpu\": 0, \"link_type\": {\"x\": \"XGMI\"}}]",
                                                 &v, why, sizeof(why)),
                     CR_EPARSE);
    assert_non_null(strstr(why, "gpu_N"));
}

static void test_rocm_smi(void **state)
{
    (void)state;
    /* rocm_smi.py: JSON_DATA["card<N>"][metric]; getBus in upper case */
    const char *text = "{\"card0\": {\"PCI Bus\": \"0000:E5:00.0\"}, \"system\": {\"Driver "
                       "version\": \"6.8\"}, \"card1\": {\"PCI Bus\": \"0001:0B:00.0\"}}";
    assert_int_equal(conf_parse_rocm_smi_bus(text, &v, why, sizeof(why)), 0);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.v[1].index, 1);
    assert_string_equal(v.v[0].pci, "0000:e5:00.0");
    assert_string_equal(v.v[1].pci, "0001:0b:00.0");
    assert_int_equal(conf_parse_rocm_smi_bus("{\"card0\": {}}", &v, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "PCI Bus"));
}

static void test_tpu_env(void **state)
{
    (void)state;
    char out[16];
    const char *env = "ACCELERATOR_TYPE: 'v6e-16'\nHOST_TOPOLOGY: '9x9'\n  TOPOLOGY: '4x4'\n"
                      "WORKER_ID: 0\n";
    assert_true(conf_tpu_env_value(env, "TOPOLOGY", out, sizeof(out)));
    assert_string_equal(out, "4x4");
    assert_true(conf_tpu_env_value(env, "WORKER_ID", out, sizeof(out)));
    assert_string_equal(out, "0");
    assert_false(conf_tpu_env_value(env, "ZONE", out, sizeof(out)));
    assert_false(conf_tpu_env_value("TOPOLOGY: '4x4\n", "TOPOLOGY", out, sizeof(out)));
    assert_false(conf_tpu_env_value("TOPOLOGY: '123456789012345678'", "TOPOLOGY", out, 8));
}

static void test_tpu_info(void **state)
{
    (void)state;
    const char *text =
        "Libtpu version: 0.0.1\n"
        "TPU Chips\n"
        "\xe2\x94\x8f\xe2\x94\x81\xe2\x94\xb3\xe2\x94\x81\xe2\x94\x93\n"
        "\xe2\x94\x83 Chip          Type          Devices  PID    \xe2\x94\x83\n"
        "\xe2\x94\x82 /dev/accel0 \xe2\x94\x82 TPU v5p chip \xe2\x94\x82 1 \xe2\x94\x82 "
        "None \xe2\x94\x82\n"
        "\xe2\x94\x82 /dev/accel3 \xe2\x94\x82 TPU v5p chip \xe2\x94\x82 1 \xe2\x94\x82 "
        "None \xe2\x94\x82\n"
        "TPU Process Info\n"
        "| /dev/accel0 | 1052 | python |\n";
    assert_int_equal(conf_parse_tpu_info(text, &v, why, sizeof(why)), 0);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.v[1].index, 3);
    assert_string_equal(v.v[1].name, "v5p");
    assert_int_equal(conf_parse_tpu_info("TPU Chips\n| /dev/accelX | TPU v5p chip | 1 |\n", &v, why,
                                         sizeof(why)),
                     CR_EPARSE);
    assert_non_null(strstr(why, "/dev/accelX"));
}

static void test_probe(void **state)
{
    (void)state;
    conf_probe_t p;
    /* a framework's own output first, then the probe's line */
    const char *ok = "WARNING: something\nCORRAL-PROBE ok HIP-6.2.41133 2 "
                     "0000:05:00.0,0000:26:00.0\n";
    assert_int_equal(conf_parse_probe(ok, &p, why, sizeof(why)), 0);
    assert_false(p.skip);
    assert_int_equal(p.count, 2);
    assert_string_equal(p.runtime, "HIP-6.2.41133");
    assert_string_equal(p.ids, "0000:05:00.0,0000:26:00.0");
    assert_int_equal(conf_parse_probe("CORRAL-PROBE ok jax-0.4.35 4 -", &p, why, sizeof(why)), 0);
    assert_string_equal(p.ids, "");
    assert_int_equal(
        conf_parse_probe("CORRAL-PROBE skip JAX is not installed\n", &p, why, sizeof(why)), 0);
    assert_true(p.skip);
    assert_string_equal(p.why, "JAX is not installed");
    assert_int_equal(conf_parse_probe("Traceback (most recent call last):\n", &p, why, sizeof(why)),
                     CR_EPARSE);
    assert_non_null(strstr(why, "CORRAL-PROBE"));
    assert_int_equal(conf_parse_probe("CORRAL-PROBE ok x -3 -", &p, why, sizeof(why)), CR_EPARSE);
    assert_int_equal(conf_parse_probe("CORRAL-PROBE ok x 1 - extra", &p, why, sizeof(why)),
                     CR_EPARSE);
    assert_non_null(strstr(why, "ok RUNTIME COUNT IDS"));
}

static void test_sycl_ls(void **state)
{
    (void)state;
    conf_probe_t p;
    /* oneAPI 2024 and later; the OpenCL GPU lines are not counted */
    const char *now = "[level_zero:gpu][level_zero:0] Intel(R) oneAPI Unified Runtime over "
                      "Level-Zero, Intel(R) Data Center GPU Max 1100 12.60.7 [1.3.29735]\n"
                      "[opencl:gpu][opencl:0] Intel(R) OpenCL Graphics, Intel(R) Data Center GPU "
                      "Max 1100 OpenCL 3.0 NEO  [24.22.29735.27]\n"
                      "[opencl:cpu][opencl:1] Intel(R) OpenCL, Intel(R) Xeon(R) [2024.18.6]\n";
    assert_int_equal(conf_parse_sycl_ls(now, &p, why, sizeof(why)), 0);
    assert_int_equal(p.count, 1);
    assert_string_equal(p.runtime, "Level-Zero-1.3.29735");
    /* before: [ext_oneapi_level_zero:gpu:N] */
    const char *before = "[ext_oneapi_level_zero:gpu:0] Intel(R) Level-Zero, Intel(R) Data Center "
                         "GPU Max 1100 1.3 [1.3.26241]\n"
                         "[ext_oneapi_level_zero:gpu:1] Intel(R) Level-Zero, Intel(R) Data Center "
                         "GPU Max 1100 1.3 [1.3.26241]\n";
    assert_int_equal(conf_parse_sycl_ls(before, &p, why, sizeof(why)), 0);
    assert_int_equal(p.count, 2);
    assert_int_equal(conf_parse_sycl_ls("", &p, why, sizeof(why)), 0);
    assert_int_equal(p.count, 0);
    assert_string_equal(p.runtime, "sycl-ls");
}

static void test_amd_smi_version(void **state)
{
    (void)state;
    conf_amd_versions_t a;
    /* amdsmi_cli/amdsmi_commands.py, version: an array of one object */
    const char *text = "[{\"tool\": \"AMDSMI Tool\", \"version\": \"24.6.3+9578815\", "
                       "\"amdsmi_library_version\": \"24.6.3\", \"rocm_version\": \"6.2.4\"}]";
    assert_int_equal(conf_parse_amd_smi_version(text, &a, why, sizeof(why)), 0);
    assert_string_equal(a.rocm, "6.2.4");
    assert_string_equal(a.library, "24.6.3");
    assert_string_equal(a.amdgpu, ""); /* older releases print none */
    assert_int_equal(conf_parse_amd_smi_version("{\"rocm_version\": \"N/A\", \"amdgpu_version\": "
                                                "\"6.8.5\"}",
                                                &a, why, sizeof(why)),
                     0);
    assert_string_equal(a.rocm, "");
    assert_string_equal(a.amdgpu, "6.8.5");
    assert_int_equal(conf_parse_amd_smi_version("[1]", &a, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "not an object"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_neuron_ls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_neuron_ls_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hl_smi, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xpu_smi, setup, teardown),
        cmocka_unit_test_setup_teardown(test_amd_smi, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tpu_info, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rocm_smi, setup, teardown),
        cmocka_unit_test_setup_teardown(test_amd_smi_topology, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tpu_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sycl_ls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_amd_smi_version, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
