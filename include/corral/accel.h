/* corral accelerator backend ABI and the node description it fills.
 *
 * A backend is one `const cr_accel_component_t` with designated
 * initializers. Built-in backends are compiled in; external ones are shared
 * objects on CORRAL_PLUGIN_PATH that export the symbol named by
 * CR_ACCEL_COMPONENT_SYMBOL. The loader refuses a component whose
 * abi_version differs from CR_ACCEL_ABI_VERSION or that lacks a required
 * operation (probe, isolate). See docs/vendor-checklist.md.
 *
 * Ownership: the node and everything in it belong to the caller of probe;
 * a backend adds to it only through the cr_node_add_* functions below,
 * which copy what they are given. */
#ifndef CORRAL_ACCEL_H
#define CORRAL_ACCEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bump on any change to a struct in this header or to an operation's
 * signature. Version 1: corral 0.1. Version 3: cr_telemetry_t gained the
 * error counts (ecc_corrected, ecc_uncorrected, xid_last). */
#define CR_ACCEL_ABI_VERSION 3
#define CR_ACCEL_COMPONENT_SYMBOL "corral_accel_component"

/* Fixed-point quantities: 1 unit = CR_QTY_ONE (1/10000 resolution). */
#define CR_QTY_ONE 10000LL

typedef enum cr_health {
    CR_HEALTH_UNKNOWN = 0,
    CR_HEALTH_OK,
    CR_HEALTH_DEGRADED,
    CR_HEALTH_UNHEALTHY,
} cr_health_t;

typedef enum cr_link_kind {
    CR_LINK_NVLINK = 0,      /* direct NVLink (bridge or point-to-point) */
    CR_LINK_NVSWITCH,        /* NVLink through NVSwitch */
    CR_LINK_XGMI_SAME_GPU,   /* between partitions of one AMD GPU (CPX, DPX): on-package */
    CR_LINK_XGMI,            /* AMD Infinity Fabric between GPUs */
    CR_LINK_ICI,             /* TPU inter-chip interconnect */
    CR_LINK_NEURONLINK,      /* AWS NeuronLink */
    CR_LINK_ROCE,            /* Gaudi on-chip RoCE ports between modules */
    CR_LINK_PCIE_SWITCH,     /* same PCIe switch (PIX) */
    CR_LINK_PCIE_MULTI,      /* several PCIe switches, no host bridge (PXB) */
    CR_LINK_PCIE_HOSTBRIDGE, /* through one host bridge (PHB) */
    CR_LINK_NUMA,            /* between host bridges of one NUMA node (NODE) */
    CR_LINK_CPU,             /* across the CPU interconnect, e.g. UPI (SYS) */
    CR_LINK_KIND_COUNT
} cr_link_kind_t;

typedef struct cr_device {
    int index;         /* position in node->devices, dense from 0 */
    char backend[16];  /* "nvidia", "amd", "tpu", ... */
    char vendor[16];   /* "NVIDIA", "AMD", "Google", "AWS", "Intel" */
    char resource[24]; /* "GPU", "TPU", "neuron_cores", "HPU" */
    char sku[32];      /* canonical type: "H100", "MI300X", "TPU-V6E" */
    char product[96];  /* the vendor's own name for it */
    char uuid[96];
    char pci[20];       /* "0000:18:00.0", "" when not PCI */
    char pci_path[160]; /* bridges from the root, '/'-separated, then pci */
    uint16_t pci_vendor, pci_device;
    int numa;                   /* NUMA node, -1 unknown */
    char cpus[192];             /* cpulist local to the device, "" unknown */
    char nic[32];               /* nearest NIC's name, "" unknown */
    uint64_t memory;            /* bytes */
    int compute_units;          /* SMs, CUs, TensorCores, NeuronCores */
    int cores;                  /* schedulable cores inside (NeuronCores), 0 n/a */
    char compute_capability[8]; /* "9.0" for CUDA, "" otherwise */
    char isolation_id[96];      /* what goes into the isolation variable */
    int vendor_index;           /* the vendor's index (CUDA index, module id, ...) */
    int coords[3];              /* mesh coordinates (TPU chips) */
    int ncoords;                /* 0 when the device has none */
    char driver[32];            /* driver version */
    cr_health_t health;
    char health_reason[96];
    int parent;           /* a MIG instance's physical GPU index, else -1 */
    bool mig_enabled;     /* MIG mode on (physical GPU) */
    char mig_profile[24]; /* "1g.10gb" for a MIG instance */
    int partition;        /* a partition's index in its physical GPU (AMD CPX: 0..7),
                             else -1; partitions share the GPU's PCI address */
    int memory_numa;      /* the NUMA node the device's own memory is (Grace C2C:
                             nvidia-smi topo -m's "GPU NUMA ID"), else -1 */
} cr_device_t;

typedef struct cr_link {
    int a, b; /* device indices, a < b */
    cr_link_kind_t kind;
    int count;             /* lanes or links (NV18: 18) */
    double bandwidth_gbps; /* one direction, GB/s; 0 unknown */
} cr_link_t;

typedef struct cr_domain {
    char kind[24]; /* "nvlink-island", "xgmi-hive", "numa", "tpu-slice",
                      "nvlink-clique", "neuron-ring", "rack" */
    char name[64];
    int *members; /* device indices on this node */
    size_t nmembers;
    /* TPU slice only */
    char accelerator_type[32]; /* "v6e-16" */
    char topology[16];         /* "4x4" */
    int worker_id, worker_count;
    char **hosts;
    size_t nhosts;
} cr_domain_t;

typedef struct cr_nic {
    char name[32];
    char pci[20];
    char pci_path[160];
    int numa;
    uint64_t speed_mbps;
    bool rdma;
    char rdma_device[32]; /* "mlx5_0" */
} cr_nic_t;

typedef struct cr_numa {
    int id;
    char cpus[256];  /* cpulist */
    uint64_t memory; /* bytes */
} cr_numa_t;

typedef struct cr_kv {
    char *key;
    char *value;
} cr_kv_t;

typedef struct cr_resource {
    char name[32];
    int64_t amount; /* fixed point, CR_QTY_ONE per unit */
} cr_resource_t;

typedef struct cr_platform {
    char provider[32]; /* "gcp", "aws", "azure", "onprem", "" */
    char region[32], zone[48], rack[48], market[16];
    char instance_type[48];
    char k8s_node[128];
} cr_platform_t;

#define CR__VEC(T)                                                                                 \
    struct {                                                                                       \
        T *v;                                                                                      \
        size_t n, cap;                                                                             \
    }

typedef struct cr_node {
    char id[64];
    char hostname[128];
    CR__VEC(char *) addresses;
    CR__VEC(cr_kv_t) labels;
    cr_platform_t platform;
    struct {
        char model[96];
        int sockets, cores, threads;
    } cpu;
    CR__VEC(cr_numa_t) numa;
    uint64_t memory; /* bytes */
    CR__VEC(cr_device_t) devices;
    CR__VEC(cr_link_t) links;
    CR__VEC(cr_domain_t) domains;
    CR__VEC(cr_nic_t) nics;
    CR__VEC(cr_resource_t) resources;
    CR__VEC(char *) warnings; /* what discovery found suspicious, one line each */
    bool simulated;
} cr_node_t;

/* Environment pairs a worker must get. */
typedef struct cr_envlist {
    CR__VEC(cr_kv_t) vars;
} cr_envlist_t;

/* One device's reading. The caller presets every field to "unknown"
 * (-1, health UNKNOWN, memory_used 0) before the telemetry op runs; a
 * backend sets what its vendor reports and leaves the rest. */
typedef struct cr_telemetry {
    double utilization_pct; /* -1 unknown */
    uint64_t memory_used;   /* bytes */
    double power_w;         /* -1 unknown */
    double temperature_c;   /* -1 unknown */
    cr_health_t health;
    /* Memory errors since the driver loaded (NVML's volatile counters,
     * amdgpu's RAS counts), -1 when the vendor reports none: corrected
     * (single-bit, DCGM's SBE) and uncorrected (double-bit, DBE). */
    int64_t ecc_corrected;
    int64_t ecc_uncorrected;
    /* The last XID-style error the driver reported since this process
     * began reading (0: none yet), -1 when the vendor reports none. */
    int64_t xid_last;
} cr_telemetry_t;

/* What a backend reads the world through: files under root, the
 * environment through getenv (never the process environment directly). */
typedef struct cr_hw_env {
    const char *root; /* "/" or a fixture tree */
    const char *(*getenv)(void *ctx, const char *name);
    void *getenv_ctx;
    const char *spec_path; /* sim backend: the hardware spec file */
} cr_hw_env_t;

typedef struct cr_accel_component {
    unsigned abi_version;              /* CR_ACCEL_ABI_VERSION */
    const char *name;                  /* unique: "nvidia" */
    const char *resource;              /* "GPU" */
    const char *const *isolation_vars; /* NULL-terminated */
    int priority;                      /* higher probes first */
    unsigned flags;                    /* CR_ACCEL_F_* */
    /* Required. Adds the devices, links, domains, labels and resources it
     * finds. Returns 0 (also when nothing is found) or a negative error, in
     * which case the caller drops whatever the backend added. */
    int (*probe)(const cr_hw_env_t *env, cr_node_t *node);
    /* Required. Fills out with the variables a worker given the devices
     * devs[0..ndevs) (indices into node->devices, all of this backend)
     * must see. */
    int (*isolate)(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out);
    /* Optional. */
    int (*telemetry)(const cr_hw_env_t *env, const cr_node_t *node, int dev, cr_telemetry_t *out);
} cr_accel_component_t;

/* The probe calls foreign code (a vendor library): run it in a child
 * process so that a crash there cannot take the caller down. */
#define CR_ACCEL_F_PROBE_ISOLATED 0x1u

/* ---- what backends call to fill the node (copying their arguments) ---- */
const char *cr_hw_getenv(const cr_hw_env_t *env, const char *name);
cr_device_t *cr_node_add_device(cr_node_t *node); /* zeroed, index set, numa/parent/partition/
                                                     memory_numa -1 */
int cr_node_add_link(cr_node_t *node, int a, int b, cr_link_kind_t kind, int count,
                     double bandwidth_gbps);
cr_domain_t *cr_node_add_domain(cr_node_t *node, const char *kind, const char *name);
void cr_domain_add_member(cr_domain_t *d, int device);
void cr_domain_add_host(cr_domain_t *d, const char *host);
int cr_node_set_label(cr_node_t *node, const char *key, const char *value);
const char *cr_node_get_label(const cr_node_t *node, const char *key);
/* Adds amount (fixed point) to a resource, creating it at 0 first. */
void cr_node_add_resource(cr_node_t *node, const char *name, int64_t amount);
void cr_node_warn(cr_node_t *node, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cr_envlist_set(cr_envlist_t *env, const char *key, const char *value);
/* cr_envlist_set of each of src's variables in order (a later one wins),
 * in time linear in both lists (a submitter's environment may hold tens
 * of thousands: set one by one, each looking through the list, that was
 * seconds of the head's loop a worker). A bad name or a NULL value is
 * left out, and the result is then CR_EINVAL. */
int cr_envlist_merge(cr_envlist_t *dst, const cr_envlist_t *src);
/* The common isolate: sets var to the isolation ids of devs[0..ndevs)
 * joined with ',' (a device without one by its index; "" for no device).
 * Returns CR_ENODEV for an index out of range, CR_EINVAL for an id that
 * contains ','. */
int cr_isolate_ids(cr_envlist_t *out, const char *var, const cr_node_t *node, const int *devs,
                   size_t ndevs);
const char *cr_envlist_get(const cr_envlist_t *env, const char *key);
void cr_envlist_free(cr_envlist_t *env);

/* Canonical accelerator type for a PCI id or product name, from corral's
 * table; NULL when unknown. */
const char *cr_accel_sku_by_pci(uint16_t vendor, uint16_t device);
const char *cr_accel_sku_by_name(const char *product);

#ifdef __cplusplus
}
#endif
#endif
