/* Parsers for habanalabs sysfs attributes and the Gaudi data tables. */
#include "gaudi_sysfs.h"
#include <stdio.h>

/* One row per board; device types the driver prints for variants of a
 * generation (GAUDI2B, GAUDI2C, ...) share its facts. */
/* clang-format off */
static const hw_gaudi_type_t types[] = {
    {"GAUDI",     "HL-205",  32ull << 30,  8},
    {"GAUDI SEC", "HL-205",  32ull << 30,  8},
    {"GAUDI2",    "HL-225",  96ull << 30,  24},
    {"GAUDI2B",   "HL-225B", 96ull << 30,  24},
    {"GAUDI2C",   "HL-225C", 96ull << 30,  24},
    {"GAUDI2D",   "HL-225D", 96ull << 30,  24},
    {"GAUDI3",    "HL-325L", 128ull << 30, 64},
};
/* clang-format on */

/* HLS-1: 10 x 100GbE per chip, 7 to peers (1 each). HLS-2 (HLS-Gaudi2):
 * 24 x 100GbE, 21 to peers (3 each). HLS-3: 24 x 200GbE, 21 to peers. */
/* clang-format off */
static const hw_gaudi_fabric_t fabrics[] = {
    {"GAUDI",     8, 1, 12.5},
    {"GAUDI SEC", 8, 1, 12.5},
    {"GAUDI2",    8, 3, 12.5},
    {"GAUDI2B",   8, 3, 12.5},
    {"GAUDI2C",   8, 3, 12.5},
    {"GAUDI2D",   8, 3, 12.5},
    {"GAUDI3",    8, 3, 25.0},
};
/* clang-format on */

static const struct status_row {
    const char *status;
    cr_health_t health;
} statuses[] = {
    {"operational", CR_HEALTH_OK},
    /* transient: the device comes back by itself */
    {"in reset", CR_HEALTH_DEGRADED},
    {"in reset after device release", CR_HEALTH_DEGRADED},
    {"in device creation", CR_HEALTH_DEGRADED},
    /* needs a person or a hard reset */
    {"disabled", CR_HEALTH_UNHEALTHY},
    {"needs reset", CR_HEALTH_UNHEALTHY},
    {"malfunction", CR_HEALTH_UNHEALTHY},
};

int hw_gaudi_parse_module_id(const char *s, int *out, char *why, size_t whysize)
{
    int64_t v;
    if (cr_parse_i64(s, 10, &v) != 0 || v < 0 || v > HW_GAUDI_MODULE_MAX) {
        snprintf(why, whysize, "expected a module id from 0 to %d", HW_GAUDI_MODULE_MAX);
        return CR_EPARSE;
    }
    *out = (int)v;
    return 0;
}

int hw_gaudi_parse_device_type(const char *s, const hw_gaudi_type_t **out, char *why,
                               size_t whysize)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(types); i++)
        if (strcmp(s, types[i].device_type) == 0) {
            *out = &types[i];
            return 0;
        }
    *out = NULL;
    snprintf(why, whysize, "expected a Gaudi device type such as GAUDI2");
    return CR_EPARSE;
}

int hw_gaudi_parse_status(const char *s, cr_health_t *out, char *why, size_t whysize)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(statuses); i++)
        if (strcmp(s, statuses[i].status) == 0) {
            *out = statuses[i].health;
            return 0;
        }
    *out = CR_HEALTH_UNKNOWN;
    snprintf(why, whysize, "expected a device status such as 'operational'");
    return CR_EPARSE;
}

const hw_gaudi_fabric_t *hw_gaudi_fabric_find(const char *device_type, size_t n)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(fabrics); i++)
        if (strcmp(fabrics[i].device_type, device_type) == 0 && fabrics[i].modules == n)
            return &fabrics[i];
    return NULL;
}
