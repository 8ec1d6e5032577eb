/* hw/topo_view.h: the topology of a node as corral topo shows it
 * (hw/topo_view.c): the matrix with names for its rows (GPU0.., NIC0..),
 * the islands of fast links, CPU and NUMA affinity, and the JSON form
 * (schema corral.topo/v1, docs/topology.md) that `corral topo --json` and
 * the head's /api/v1/nodes/{id}/topology both print. */
#ifndef CORRAL_HW_TOPO_VIEW_H
#define CORRAL_HW_TOPO_VIEW_H

#include "hw/topo.h"
#include <jansson.h>

typedef char name_t[32];

typedef struct hw_topo_view {
    const cr_node_t *node;
    hw_topo_matrix_t m;
    name_t *names; /* per matrix index: devices, then NICs */
    int *rows;     /* the matrix indices shown: physical devices, then NICs */
    size_t nrows, ndevrows;
    int *island; /* per device */
    size_t nislands;
} hw_topo_view_t;

void hw_topo_view_init(hw_topo_view_t *v, const cr_node_t *node);
void hw_topo_view_fini(hw_topo_view_t *v);
/* A MIG instance (its parent a device of the node). */
bool hw_topo_is_instance(const cr_node_t *n, size_t i);
/* What people call a device of this resource: "GPU", "TPU", "ND", ... */
const char *hw_topo_prefix_of(const cr_device_t *d);
const char *hw_topo_view_symbol(const hw_topo_view_t *v, size_t i, size_t j, char *buf,
                                size_t size);
int hw_topo_device_numa(const cr_node_t *n, size_t i);
bool hw_topo_member_ok(const hw_topo_view_t *v, int m);
const char *hw_topo_numa_cpus(const cr_node_t *n, int numa);
void hw_topo_affinity(const hw_topo_view_t *v, size_t i, const char **cpus, int *numa);
void hw_topo_speed_text(uint64_t mbps, char *buf, size_t size);
/* The NUMA ids to show, ascending, into *out (malloc'ed): how many. */
size_t hw_topo_numa_ids(const cr_node_t *n, int **out);
json_t *hw_topo_view_json(const hw_topo_view_t *v);
/* The node's topology as corral topo --json prints it (caller decrefs). */
json_t *hw_topo_to_json(const cr_node_t *node);

#endif
