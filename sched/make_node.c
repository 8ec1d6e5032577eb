/* Synthetic node descriptions from a few numbers, for tests and for the
 * cluster files of `corral sim`: what a real node of that shape would
 * report (devices, islands, NUMA, TPU mesh coordinates, slice domain). */
#include "sched_int.h"
#include <stdio.h>

int sched_make_node(const sched_node_spec_t *sp, cr_node_t *node, char *msg, size_t msgsize)
{
    cr_strlcpy(node->id, sp->name, sizeof(node->id));
    cr_strlcpy(node->hostname, sp->name, sizeof(node->hostname));
    node->simulated = true;
    if (sp->ndev < 0 || sp->ndev > SCHED_MAX_DEV) {
        sched__fmt(msg, msgsize, "devices must be 0..%d", SCHED_MAX_DEV);
        return CR_EINVAL;
    }
    if (sp->cpus > 0)
        cr_node_add_resource(node, "CPU", (int64_t)sp->cpus * CR_QTY_ONE);
    if (sp->memory > 0) {
        if (sp->memory > (uint64_t)(INT64_MAX / CR_QTY_ONE)) {
            sched__fmt(msg, msgsize, "memory too large");
            return CR_EINVAL;
        }
        cr_node_add_resource(node, "memory", (int64_t)sp->memory * CR_QTY_ONE);
    }
    int numa = sp->numa > 0 ? sp->numa : 1;
    bool tpu = sp->resource && strcmp(sp->resource, "TPU") == 0;
    sched_tpu_topo_t topo = {0};
    int bx = 1, by = 1;
    if (sp->slice) {
        sched_err_t err;
        if (!sp->topology || sched_parse_tpu_topology(sp->topology, &topo, &err)) {
            sched__fmt(msg, msgsize, "slice %s: bad topology '%s'", sp->slice,
                       sp->topology ? sp->topology : "");
            return CR_EINVAL;
        }
        if (!tpu || !sched_tpu_submesh(sp->ndev, &bx, &by) || topo.dims[0] % bx ||
            topo.dims[1] % by) {
            sched__fmt(msg, msgsize, "slice %s: %d chips per host do not tile %s", sp->slice,
                       sp->ndev, sp->topology);
            return CR_EINVAL;
        }
        if (sp->worker_count != topo.chips / sp->ndev || sp->worker_id < 0 ||
            sp->worker_id >= sp->worker_count) {
            sched__fmt(msg, msgsize,
                       "slice %s: worker %d of %d does not fit %s with %d chips a "
                       "host",
                       sp->slice, sp->worker_id, sp->worker_count, sp->topology, sp->ndev);
            return CR_EINVAL;
        }
    }
    int nbx = sp->slice ? topo.dims[0] / bx : 1, nby = sp->slice ? topo.dims[1] / by : 1;
    int x0 = bx * (sp->worker_id % nbx), y0 = by * ((sp->worker_id / nbx) % nby);
    int z0 = sp->worker_id / (nbx * nby);
    for (int i = 0; i < sp->ndev; i++) {
        cr_device_t *d = cr_node_add_device(node);
        cr_strlcpy(d->resource, sp->resource ? sp->resource : "GPU", sizeof(d->resource));
        cr_strlcpy(d->sku, sp->sku ? sp->sku : "", sizeof(d->sku));
        cr_strlcpy(d->backend, "sim", sizeof(d->backend));
        d->numa = i * numa / sp->ndev;
        d->vendor_index = i;
        d->health = CR_HEALTH_OK;
        sched__fmt(d->isolation_id, sizeof(d->isolation_id), "%d", i);
        if (tpu) {
            d->ncoords = 3;
            d->coords[0] = x0 + i % bx;
            d->coords[1] = y0 + i / bx;
            d->coords[2] = z0;
        }
    }
    if (sp->ndev > 0)
        cr_node_add_resource(node, sp->resource ? sp->resource : "GPU",
                             (int64_t)sp->ndev * CR_QTY_ONE);
    if (sp->island > 0) {
        for (int s = 0, k = 0; s < sp->ndev; s += sp->island, k++) {
            char name[32];
            sched__fmt(name, sizeof(name), "island%d", k);
            cr_domain_t *d = cr_node_add_domain(node, "nvlink-island", name);
            for (int i = s; i < s + sp->island && i < sp->ndev; i++)
                cr_domain_add_member(d, i);
        }
    }
    if (sp->slice) {
        cr_domain_t *d = cr_node_add_domain(node, "tpu-slice", sp->slice);
        cr_strlcpy(d->topology, sp->topology, sizeof(d->topology));
        cr_strlcpy(d->accelerator_type, sp->accel_type ? sp->accel_type : "",
                   sizeof(d->accelerator_type));
        d->worker_id = sp->worker_id;
        d->worker_count = sp->worker_count;
        for (int i = 0; i < sp->ndev; i++)
            cr_domain_add_member(d, i);
    }
    if (sp->sku && *sp->sku)
        cr_node_set_label(node, "corral.io/accelerator-type", sp->sku);
    if (sp->labels && *sp->labels) {
        char *dup = cr_strdup(sp->labels), *save = NULL;
        for (char *kv = strtok_r(dup, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(kv, '=');
            if (!eq || eq == kv) {
                sched__fmt(msg, msgsize, "label '%s' is not key=value", kv);
                free(dup);
                return CR_EINVAL;
            }
            *eq = '\0';
            cr_node_set_label(node, cr_strtrim(kv), cr_strtrim(eq + 1));
        }
        free(dup);
    }
    return 0;
}
