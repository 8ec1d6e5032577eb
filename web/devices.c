/* Device telemetry as metrics and as JSON (docs/metrics.md): each
 * device's backend's telemetry op, read at the time of the scrape on the
 * daemon's loop. A backend without the op, or whose read fails, says so
 * (corral_device_telemetry_available 0, "telemetry": null) instead of
 * zeros. A simulated node's devices have no hardware to read: their
 * telemetry is what the simulation knows (a device a worker holds is
 * busy), labelled simulated="true". */
#include "web/web_int.h"
#include <stdio.h>
#include <stdlib.h>

void web_device_read(const cr_node_t *node, const hw_options_t *hwo, int i, bool held,
                     web_reading_t *r)
{
    const cr_device_t *d = &node->devices.v[i];
    memset(r, 0, sizeof(*r));
    hw_telemetry_init(&r->t);
    r->t.health = d->health;
    r->age_ms = -1;
    if (node->simulated) {
        r->available = true;
        r->t.utilization_pct = held ? 100 : 0;
        return;
    }
    const cr_accel_component_t *c = hw_component_find(d->backend);
    if (!c || !c->telemetry) {
        snprintf(r->why, sizeof(r->why), "the backend reads no telemetry");
        return;
    }
    hw_options_t none = {0};
    cr_hw_env_t env;
    hw_env_from_opts(hwo ? hwo : &none, &env);
    int err = c->telemetry(&env, node, i, &r->t);
    if (err < 0) {
        snprintf(r->why, sizeof(r->why), "%s", cr_strerror(err));
        r->t.health = d->health;
        return;
    }
    r->available = true;
}

typedef web_reading_t reading_t; /* shorter in this file */

typedef struct fam {
    const char *name, *type, *help;
} fam_t;

static const fam_t fams[] = {
    {"corral_device_info", "gauge",
     "1 per device, with its product, PCI address and driver (DCGM: the labels of every field)"},
    {"corral_device_telemetry_available", "gauge",
     "1 when the device's backend read its telemetry for this scrape, 0 when it cannot (then "
     "no reading of that device is exported)"},
    {"corral_device_utilization_percent", "gauge",
     "busy time of the device, percent (DCGM_FI_DEV_GPU_UTIL)"},
    {"corral_device_memory_used_bytes", "gauge",
     "device memory in use, bytes (DCGM_FI_DEV_FB_USED, which is MiB)"},
    {"corral_device_memory_total_bytes", "gauge",
     "device memory, bytes (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE, in MiB there)"},
    {"corral_device_power_watts", "gauge", "power draw, watts (DCGM_FI_DEV_POWER_USAGE)"},
    {"corral_device_temperature_celsius", "gauge",
     "temperature, degrees Celsius (DCGM_FI_DEV_GPU_TEMP)"},
    {"corral_device_ecc_corrected_errors_total", "counter",
     "corrected (single-bit) memory errors since the driver loaded "
     "(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL); absent where the vendor reports none"},
    {"corral_device_ecc_uncorrected_errors_total", "counter",
     "uncorrected (double-bit) memory errors since the driver loaded "
     "(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL); absent where the vendor reports none"},
    {"corral_device_xid_last", "gauge",
     "the last XID error the driver reported, 0 none (DCGM_FI_DEV_XID_ERRORS); absent where the "
     "vendor reports none"},
    {"corral_device_healthy", "gauge",
     "1 when the device is healthy, 0 when not; the health label says which state"},
};

enum {
    F_INFO,
    F_AVAIL,
    F_UTIL,
    F_MEMU,
    F_MEMT,
    F_POWER,
    F_TEMP,
    F_ECC_C,
    F_ECC_U,
    F_XID,
    F_HEALTH,
    F_N
};

void web_device_metrics(cr_buf_t *b, const cr_node_t *node, const hw_options_t *hwo,
                        web_holder_fn holder, void *ctx)
{
    size_t n = node->devices.n;
    if (!n)
        return;
    reading_t *rd = cr_calloc(n, sizeof(*rd));
    const char **job = cr_calloc(n, sizeof(*job)), **wk = cr_calloc(n, sizeof(*wk));
    char(*idx)[16] = cr_calloc(n, sizeof(*idx));
    for (size_t i = 0; i < n; i++) {
        bool held = holder && holder(ctx, (int)i, &job[i], &wk[i]);
        if (!held)
            job[i] = wk[i] = "";
        web_device_read(node, hwo, (int)i, held, &rd[i]);
        snprintf(idx[i], sizeof(idx[i]), "%d", node->devices.v[i].index);
    }
    const char *sim = node->simulated ? "true" : "false";
    for (int f = 0; f < F_N; f++) {
        web_prom_family(b, fams[f].name, fams[f].type, fams[f].help);
        for (size_t i = 0; i < n; i++) {
            const cr_device_t *d = &node->devices.v[i];
            const reading_t *r = &rd[i];
            const char *l[22] = {"node",     node->id,           "index",  idx[i],   "uuid",
                                 d->uuid,    "accelerator_type", d->sku,   "vendor", d->vendor,
                                 "resource", d->resource,        "job_id", job[i],   "worker_id",
                                 wk[i],      "simulated",        sim};
            size_t nl = 9;
            double v;
            switch (f) {
            case F_INFO:
                l[18] = "product", l[19] = d->product;
                l[20] = "pci", l[21] = d->pci;
                nl = 11;
                v = 1;
                break;
            case F_AVAIL:
                v = r->available;
                break;
            case F_UTIL:
                if (!r->available || r->t.utilization_pct < 0)
                    continue;
                v = r->t.utilization_pct;
                break;
            case F_MEMU:
                if (!r->available || node->simulated)
                    continue;
                v = (double)r->t.memory_used;
                break;
            case F_MEMT:
                if (!d->memory)
                    continue;
                v = (double)d->memory;
                break;
            case F_POWER:
                if (!r->available || r->t.power_w < 0)
                    continue;
                v = r->t.power_w;
                break;
            case F_TEMP:
                if (!r->available || r->t.temperature_c < 0)
                    continue;
                v = r->t.temperature_c;
                break;
            case F_ECC_C:
                if (!r->available || r->t.ecc_corrected < 0)
                    continue;
                v = (double)r->t.ecc_corrected;
                break;
            case F_ECC_U:
                if (!r->available || r->t.ecc_uncorrected < 0)
                    continue;
                v = (double)r->t.ecc_uncorrected;
                break;
            case F_XID:
                if (!r->available || r->t.xid_last < 0)
                    continue;
                v = (double)r->t.xid_last;
                break;
            default:
                l[18] = "health", l[19] = hw_health_name(r->t.health);
                nl = 10;
                v = r->t.health == CR_HEALTH_OK;
                break;
            }
            web_prom_sample(b, fams[f].name, l, nl, v);
        }
    }
    for (size_t i = 0; i < n; i++)
        if (!rd[i].available)
            cr_buf_printf(b, "# device %d of %s: no telemetry: %s\n", node->devices.v[i].index,
                          node->id, rd[i].why);
    free(rd);
    free(job);
    free(wk);
    free(idx);
}

json_t *web_reading_json(const web_reading_t *r, bool simulated)
{
    json_t *t = json_object();
    if (r->t.utilization_pct >= 0)
        json_object_set_new(t, "utilization_percent", json_real(r->t.utilization_pct));
    if (!simulated)
        json_object_set_new(t, "memory_used_bytes", json_integer((json_int_t)r->t.memory_used));
    if (r->t.power_w >= 0)
        json_object_set_new(t, "power_watts", json_real(r->t.power_w));
    if (r->t.temperature_c >= 0)
        json_object_set_new(t, "temperature_celsius", json_real(r->t.temperature_c));
    if (r->t.ecc_corrected >= 0)
        json_object_set_new(t, "ecc_corrected", json_integer(r->t.ecc_corrected));
    if (r->t.ecc_uncorrected >= 0)
        json_object_set_new(t, "ecc_uncorrected", json_integer(r->t.ecc_uncorrected));
    if (r->t.xid_last >= 0)
        json_object_set_new(t, "xid_last", json_integer(r->t.xid_last));
    json_object_set_new(t, "health", json_string(hw_health_name(r->t.health)));
    return t;
}

json_t *web_devices_json(const cr_node_t *node, const hw_options_t *hwo, const web_reading_t *given,
                         web_holder_fn holder, void *ctx)
{
    json_t *a = json_array();
    for (size_t i = 0; i < node->devices.n; i++) {
        const cr_device_t *d = &node->devices.v[i];
        const char *job = NULL, *wk = NULL;
        bool held = holder && holder(ctx, (int)i, &job, &wk);
        json_t *o = json_object();
        json_object_set_new(o, "node_id", json_string(node->id));
        json_object_set_new(o, "index", json_integer(d->index));
        json_object_set_new(o, "uuid", json_string(d->uuid));
        json_object_set_new(o, "vendor", json_string(d->vendor));
        json_object_set_new(o, "resource", json_string(d->resource));
        json_object_set_new(o, "accelerator_type", json_string(d->sku));
        json_object_set_new(o, "product", json_string(d->product));
        json_object_set_new(o, "memory_bytes", json_integer((json_int_t)d->memory));
        json_object_set_new(o, "health", json_string(hw_health_name(d->health)));
        json_object_set_new(o, "simulated", json_boolean(node->simulated));
        json_object_set_new(o, "job_id", held && job ? json_string(job) : json_null());
        json_object_set_new(o, "worker_id", held && wk ? json_string(wk) : json_null());
        if (d->ncoords > 0) {
            json_t *c = json_array();
            for (int k = 0; k < d->ncoords && k < 3; k++)
                json_array_append_new(c, json_integer(d->coords[k]));
            json_object_set_new(o, "coords", c);
        }
        reading_t now;
        const reading_t *r = given ? &given[i] : &now;
        if (!given)
            web_device_read(node, hwo, (int)i, held, &now);
        if (!r->available) {
            json_object_set_new(o, "telemetry", json_null());
            json_object_set_new(o, "telemetry_source", json_string(r->why));
        } else {
            json_object_set_new(o, "telemetry", web_reading_json(r, node->simulated));
            json_object_set_new(o, "telemetry_source",
                                json_string(node->simulated ? "simulated" : d->backend));
            if (r->age_ms >= 0)
                json_object_set_new(o, "telemetry_age_ms", json_integer(r->age_ms));
        }
        json_array_append_new(a, o);
    }
    return a;
}
