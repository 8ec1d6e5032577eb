/* The habanalabs driver's sysfs attributes (/sys/class/accel/accel<n>/
 * device/, older drivers /sys/class/habanalabs/hl<n>/device/) and the facts
 * about each Gaudi generation, as data. Private to the gaudi backend;
 * tests/fuzz/fuzz_gaudi_attrs.c fuzzes the parsers. */
#ifndef CORRAL_HW_GAUDI_SYSFS_H
#define CORRAL_HW_GAUDI_SYSFS_H

#include <corral/accel.h>
#include "base/base.h"

/* Largest module id we accept: an HLS box has 8 modules, numbered 0-7;
 * the margin is for larger boards we have not seen. */
#define HW_GAUDI_MODULE_MAX 63

/* What corral knows about one device_type. */
typedef struct hw_gaudi_type {
    const char *device_type; /* as the driver prints it: "GAUDI2" */
    const char *product;     /* the board: "HL-225" */
    uint64_t memory;         /* HBM bytes */
    int tpcs;                /* tensor processor cores (compute units) */
} hw_gaudi_type_t;

/* The scale-up fabric of a whole box: every module wired to every other
 * through on-chip RoCE ports, when the box holds `modules` of `device_type`. */
typedef struct hw_gaudi_fabric {
    const char *device_type;
    size_t modules;
    int ports_per_pair;
    double gbps_per_port; /* one direction, GB/s */
} hw_gaudi_fabric_t;

/* These take a file's trimmed contents and return 0 or CR_EPARSE with
 * why saying what was expected. */
int hw_gaudi_parse_module_id(const char *s, int *out, char *why, size_t whysize);
int hw_gaudi_parse_device_type(const char *s, const hw_gaudi_type_t **out, char *why,
                               size_t whysize);
/* An unknown status string is CR_EPARSE with *out CR_HEALTH_UNKNOWN. */
int hw_gaudi_parse_status(const char *s, cr_health_t *out, char *why, size_t whysize);
/* The fabric for n modules of one type, or NULL when there is none. */
const hw_gaudi_fabric_t *hw_gaudi_fabric_find(const char *device_type, size_t n);

#endif
