/* corral conformance, shared between its files:
 *   conformance_cmd.c      the command, the report, NVIDIA's checks
 *   conformance_vendors.c  AMD, Intel, TPU, Neuron and Gaudi: their tools
 *                          run and compared with corral's discovery
 *   conformance_isolation.c  AMD, Intel, TPU, Neuron and Gaudi: the
 *                          runtime under corral's isolation environment
 *   conformance_parse.c    the parsers of those tools' outputs (no I/O;
 *                          tests/fuzz/fuzz_vendor_tools.c feeds them)
 * docs/hardware.md, "Conformance on real hardware". */
#ifndef CORRAL_CLI_CONFORMANCE_H
#define CORRAL_CLI_CONFORMANCE_H

#include "base/base.h"
#include <corral/accel.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum { R_PASS, R_FAIL, R_SKIP, R_INFO } conf_result_t;

typedef struct conf_check {
    char backend[16];
    char name[24]; /* discovery, isolation, topology, telemetry, versions */
    conf_result_t result;
    char *detail;
} conf_check_t;

typedef struct conf_report {
    CR_VEC(conf_check_t) checks;
    bool real; /* read from this machine's hardware, not a fixture */
    char why_not_real[160];
    char sku[32], driver[32], runtime[64];
    bool quiet; /* --json: the lines go to stderr */
} conf_report_t;

/* One check's line: printed at once and kept for --json and --junit. */
void conf_add(conf_report_t *r, const char *backend, const char *name, conf_result_t res,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Whether an executable named tool is on PATH. */
bool conf_have_tool(const char *tool);

/* The output of a fixed command line (no user input goes into it), at
 * most CONF_TOOL_OUTPUT_MAX bytes (more is CR_E2BIG). 0, or
 * CR_EVENDOR when it exits non-zero; out holds what it printed either way. */
#define CONF_TOOL_OUTPUT_MAX (4u << 20)
int conf_run_tool(const char *cmd, cr_buf_t *out);

/* Runs argv in a child, the variables in unset (NULL-terminated; NULL for
 * none) removed from its environment and env's set; its stdout (at most
 * CONF_CHILD_OUTPUT_MAX bytes kept) into out, its stderr to /dev/null.
 * The exit status; 127 when argv[0] could not be run, -1 no child. */
#define CONF_CHILD_OUTPUT_MAX (256u << 10)
int conf_run_with_env(const cr_envlist_t *env, const char *const *unset, char *const argv[],
                      cr_buf_t *out);

/* The interpreter the isolation probes run under: CORRAL_CONFORMANCE_PYTHON,
 * else python3 on PATH. */
const char *conf_python(void);

/* ---- the vendors' tools' outputs, parsed ---- */

#define CONF_VDEV_MAX 1024 /* devices one tool's output may list */
#define CONF_VDEV_LINKS 64 /* peers one device may list */

/* A device as the vendor's tool lists it. */
typedef struct conf_vdev {
    int index;     /* the tool's own number for it (neuron_device, hl-smi index, ...) */
    int id;        /* hl-smi module_id, amd-smi partition_id, neuron-ls nc_count; -1 none */
    char pci[20];  /* "0000:18:00.0" (lower case, domain added when the tool omits it); "" */
    char name[96]; /* the tool's name for it; "" when it gives none */
    int links[CONF_VDEV_LINKS]; /* neuron-ls connected_to: the peers' neuron_device */
    int nlinks;                 /* -1: the tool said null (no peers) */
} conf_vdev_t;

typedef CR_VEC(conf_vdev_t) conf_vdevs_t;

/* Each parser: 0 with the devices appended to out, or CR_EPARSE with why
 * filled (what was expected, naming the field). Formats and where they are
 * documented: tests/fixtures/vendor-tools/README.md. */

/* `neuron-ls --json-output`: an array of objects with neuron_device, bdf,
 * nc_count, connected_to (an array of neuron_device numbers, or null). */
int conf_parse_neuron_ls(const char *text, conf_vdevs_t *out, char *why, size_t why_len);

/* `hl-smi -Q index,module_id,bus_id,name -f csv,noheader`: one line a
 * device, the four fields in that order, ", " between them. */
int conf_parse_hl_smi(const char *text, conf_vdevs_t *out, char *why, size_t why_len);

/* `xpu-smi discovery -j`: {"device_list": [{"device_id", "device_name",
 * "pci_bdf_address", ...}]}. */
int conf_parse_xpu_smi(const char *text, conf_vdevs_t *out, char *why, size_t why_len);

/* `amd-smi list --json`: an array of {"gpu", "bdf", "uuid", "kfd_id",
 * "node_id", "partition_id"}; partition_id "N/A" reads as 0. */
int conf_parse_amd_smi_list(const char *text, conf_vdevs_t *out, char *why, size_t why_len);

/* `amd-smi static --asic --json`: an array of {"gpu", "asic":
 * {"market_name", ...}}; sets the name of the device in devs whose index
 * is "gpu". */
int conf_parse_amd_smi_static(const char *text, conf_vdevs_t *devs, char *why, size_t why_len);

/* `amd-smi topology --json`: an array of {"gpu", "link_type": {"gpu_N":
 * "SELF" | "XGMI" | "PCIE" | ...}, ...}; each device of devs whose index
 * is "gpu" gets its XGMI peers' numbers in links (nlinks -1: not listed). */
int conf_parse_amd_smi_topology(const char *text, conf_vdevs_t *devs, char *why, size_t why_len);

/* `rocm-smi --showbus --json` (older ROCm): {"card0": {"PCI Bus":
 * "0000:05:00.0"}, ...}; other top-level keys ("system") are skipped. */
int conf_parse_rocm_smi_bus(const char *text, conf_vdevs_t *out, char *why, size_t why_len);

/* `tpu-info`'s "TPU Chips" table: a row per chip, its device path
 * (/dev/accelN or /dev/vfio/N: N becomes index) and its type ("TPU v6e
 * chip": "v6e" into name). Other tables are skipped. */
int conf_parse_tpu_info(const char *text, conf_vdevs_t *out, char *why, size_t why_len);

/* The value of key in the GCE metadata's tpu-env attribute, YAML lines
 * "KEY: 'value'" (quotes optional); false when it has none or it does not
 * fit in size. */
bool conf_tpu_env_value(const char *text, const char *key, char *out, size_t size);

/* What an isolation probe's child saw (conformance_isolation.c). */
typedef struct conf_probe {
    bool skip;        /* the framework is not here */
    char why[256];    /* skip: the probe's reason */
    char runtime[64]; /* the framework and its version, one word */
    int count;        /* devices it sees */
    char ids[1024];   /* their PCI addresses, comma-joined; "" when not told */
} conf_probe_t;

/* The probe's output: its line "CORRAL-PROBE ok RUNTIME COUNT IDS" (IDS
 * "-" for none) or "CORRAL-PROBE skip WHY", after whatever the framework
 * printed before it. */
int conf_parse_probe(const char *text, conf_probe_t *out, char *why, size_t why_len);

/* `sycl-ls`: count the Level Zero GPUs ("[level_zero:gpu]..." in oneAPI
 * 2024 and later, "[ext_oneapi_level_zero:gpu:N]" before); runtime
 * "Level-Zero-<the first one's last bracketed version>". */
int conf_parse_sycl_ls(const char *text, conf_probe_t *out, char *why, size_t why_len);

/* `amd-smi version --json`: an array of one object (or the object) with
 * "rocm_version", "amdsmi_library_version" and, in newer releases,
 * "amdgpu_version"; a member missing or "N/A" is "". */
typedef struct conf_amd_versions {
    char rocm[32], library[32], amdgpu[32];
} conf_amd_versions_t;
int conf_parse_amd_smi_version(const char *text, conf_amd_versions_t *out, char *why,
                               size_t why_len);

/* ---- the checks of conformance_vendors.c ---- */

/* discovery (and topology where the tool shows it) for backend amd,
 * intel, tpu, neuron or gaudi; false for a backend it does not know. */
bool conf_vendor_checks(conf_report_t *r, const cr_node_t *n, const char *backend);

/* The versions the backend's tool reports (amd-smi version, hl-smi's
 * driver_version), as INFO lines; the runtime into r->runtime when the
 * isolation probe set none. */
void conf_vendor_versions(conf_report_t *r, const char *backend);

/* ---- the isolation checks of conformance_isolation.c ---- */

/* isolation for backend amd, intel, tpu, neuron or gaudi: children given
 * corral hw --isolate's environment for one device and for two, asked
 * through the backend's framework what they see. */
void conf_isolation_checks(conf_report_t *r, const cr_node_t *n, const char *backend);

#endif
