/* The KFD topology's sysfs `properties` files (amdkfd, /sys/class/kfd/kfd/
 * topology/nodes/N/{properties, io_links/M/properties, mem_banks/M/properties}):
 * one "<key> <unsigned decimal>" pair a line. Private to the amd backend;
 * hw/kfd.c parses them, tests/fuzz/fuzz_kfd_*.c fuzz them. */
#ifndef CORRAL_HW_AMD_KFD_H
#define CORRAL_HW_AMD_KFD_H

#include "base/base.h"

#define HW_KFD_KEY_MAX 48 /* longest key kept, NUL included */
#define HW_KFD_MAX_KEYS 256

/* io_link type of an xGMI (Infinity Fabric) link; 2 is PCIe. */
#define HW_KFD_IOLINK_XGMI 11

typedef struct hw_kfd_kv {
    char key[HW_KFD_KEY_MAX];
    uint64_t value;
} hw_kfd_kv_t;

typedef struct hw_kfd_props {
    hw_kfd_kv_t *v;
    size_t n, cap;
} hw_kfd_props_t;

/* Parses text[0..len) into out (empty on entry; free it with
 * hw_kfd_props_free, also after a failure). Returns 0 or CR_EPARSE with
 * why saying which line and what was expected there. */
int hw_kfd_props_parse(const char *text, size_t len, hw_kfd_props_t *out, char *why,
                       size_t whysize);
bool hw_kfd_props_get(const hw_kfd_props_t *p, const char *key, uint64_t *out);
void hw_kfd_props_free(hw_kfd_props_t *p);

/* A topology node. CPU nodes have simd_count 0; GPU nodes must have the
 * keys the amd backend needs (simd_per_cu, vendor_id, device_id,
 * location_id). Absent optional keys read as 0. */
typedef struct hw_kfd_node {
    uint64_t cpu_cores_count, simd_count, simd_per_cu;
    uint64_t vendor_id, device_id, location_id, domain;
    uint64_t drm_render_minor, gfx_target_version, num_xcc;
    uint64_t unique_id, hive_id;
    bool has_drm_render_minor;
} hw_kfd_node_t;

typedef struct hw_kfd_iolink {
    uint64_t type, node_from, node_to, weight;
    uint64_t min_bandwidth, max_bandwidth; /* MB/s, 0 unknown */
} hw_kfd_iolink_t;

typedef struct hw_kfd_membank {
    uint64_t heap_type, size_in_bytes;
} hw_kfd_membank_t;

/* Parse one properties file into the typed view; CR_EPARSE with why on a
 * malformed file, a missing required key or a value out of range. */
int hw_kfd_node_parse(const char *text, size_t len, hw_kfd_node_t *out, char *why, size_t whysize);
int hw_kfd_iolink_parse(const char *text, size_t len, hw_kfd_iolink_t *out, char *why,
                        size_t whysize);
int hw_kfd_membank_parse(const char *text, size_t len, hw_kfd_membank_t *out, char *why,
                         size_t whysize);

/* An amdgpu RAS error count file, /sys/bus/pci/devices/BDF/ras/
 * <block>_err_count (the kernel's amdgpu_ras.c, amdgpu_ras_sysfs_read;
 * Documentation/gpu/amdgpu/ras.rst "RAS Error Count sysfs Interface"):
 * "ue: N\nce: N\n", and for the memory controller (umc) a third line
 * "de: N" (deferred) since Linux 6.8. Lines of other keys are skipped.
 * Returns 0 with the uncorrectable and correctable counts, or CR_EPARSE
 * with why when either is missing or a line is malformed. */
int hw_amd_ras_parse(const char *text, size_t len, uint64_t *ue, uint64_t *ce, char *why,
                     size_t whysize);

#endif
