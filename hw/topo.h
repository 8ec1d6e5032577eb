/* hw/topo.h: topology queries over a node description (hw/topo.c).
 *
 * Pure functions of a cr_node_t: no file reads, no globals, no clocks.
 * What connects two devices is, in this order: their fastest direct link
 * (NVLink, xGMI, ICI, NeuronLink, RoCE) from node->links, else the PCIe
 * relation derived from both pci_path values and NUMA nodes (the way
 * `nvidia-smi topo -m` classifies it), else a PCIe relation a backend
 * recorded as a link, else NODE or SYS from the NUMA nodes alone.
 *
 * pci_path reads "hb<N>/<bridge>/.../<device>": the host bridge, every PCI
 * bridge below it (root port, switch ports) by bus id, then the endpoint.
 * A path that does not start with "hb" or has an empty part is unknown.
 *
 * A MIG instance (parent >= 0) stands for its physical GPU: two instances
 * of one GPU are HW_TOPO_SELF to each other. See docs/topology.md. */
#ifndef CORRAL_HW_TOPO_H
#define CORRAL_HW_TOPO_H

#include "hw.h"

/* What a device is to itself (the "X" of the matrix). */
#define HW_TOPO_SELF ((cr_link_kind_t)CR_LINK_KIND_COUNT)
/* The direct device-to-device fabrics: NVLink through RoCE. */
#define HW_TOPO_FAST_KINDS ((1u << CR_LINK_PCIE_SWITCH) - 1u)

/* True for the direct fabrics (cr_link_kind_t below CR_LINK_PCIE_SWITCH). */
bool hw_topo_is_fast(cr_link_kind_t kind);

/* The PCIe relation of two endpoints given their pci_path and NUMA node
 * (-1 unknown): PIX when they meet below a root port with at most one
 * bridge (a switch's downstream port) on each side of the meeting point,
 * PXB when they meet below a root port further away, PHB when they meet
 * only at their common host bridge, NODE across host bridges of one NUMA
 * node, SYS otherwise. An unknown path gives NODE or SYS from the NUMA
 * nodes alone. */
cr_link_kind_t hw_topo_pcie(const char *path_a, int numa_a, const char *path_b, int numa_b);

/* The matrix cell symbol: "X", "NV18", "XGMI", "ICI", "NL", "ROCE", "PIX",
 * "PXB", "PHB", "NODE", "SYS" (nvidia-smi topo -m's alphabet, extended).
 * Writes into buf and returns it. */
const char *hw_topo_symbol(cr_link_kind_t kind, int count, char *buf, size_t size);

/* The legend: one row per symbol, in the order people read them (X,
 * the fabrics, then PCIe from nearest to farthest). kinds is the mask of
 * link kinds (1u << kind) the row explains; 0 for X. */
typedef struct hw_topo_legend {
    const char *symbol; /* "NV#" */
    unsigned kinds;
    const char *text;
} hw_topo_legend_t;
size_t hw_topo_legend(const hw_topo_legend_t **rows);

/* One cell: the link kind (or HW_TOPO_SELF) and its count (links of a
 * direct fabric; 0 for PCIe relations). */
typedef struct hw_topo_cell {
    cr_link_kind_t kind;
    int count;
} hw_topo_cell_t;

/* Every endpoint to every other: rows and columns are node->devices in
 * order (index i), then node->nics (index ndevices + k). */
typedef struct hw_topo_matrix {
    size_t ndevices, nnics, n;
    hw_topo_cell_t *cells; /* n * n, row major, symmetric */
} hw_topo_matrix_t;

/* Fills m (the caller's, uninitialized) from node: O(n^2 + links). Free
 * it with hw_topo_matrix_fini. Returns 0, or CR_EINVAL without a node. */
int hw_topo_matrix(const cr_node_t *node, hw_topo_matrix_t *m);
void hw_topo_matrix_fini(hw_topo_matrix_t *m);
static inline const hw_topo_cell_t *hw_topo_cell(const hw_topo_matrix_t *m, size_t i, size_t j)
{
    return &m->cells[i * m->n + j];
}

/* Devices ordered by nearness to NUMA node numa: those on it, then those
 * whose NUMA node is unknown, then the rest; each group by index. Writes
 * node->devices.n indices to out and, when nlocal is given, how many are
 * on numa itself. Returns node->devices.n. */
size_t hw_topo_near_numa(const cr_node_t *node, int numa, int *out, size_t *nlocal);

/* The NIC nearest device dev: the best PCIe relation (PIX before PXB ...
 * before SYS); within one relation the NIC sharing more of the device's
 * pci_path (it branches off lower in the tree), then an RDMA-capable NIC,
 * then the faster one, then the lowest index. hw/host.c fills
 * cr_device_t.nic by the same order. Returns the index into node->nics, or -1 when dev is
 * not a device or the node has no NIC. relation (optional) gets the
 * relation to it. */
int hw_topo_nearest_nic(const cr_node_t *node, int dev, cr_link_kind_t *relation);

/* Connected components of the links whose kind is in the mask kinds
 * ((1u << kind) bits; 0 means HW_TOPO_FAST_KINDS). island[i] (for every
 * device) gets its component, numbered from 0 in the order of each
 * component's lowest device index; a device without such a link is an
 * island of its own, and a MIG instance is in its GPU's island. Returns
 * the number of islands. */
size_t hw_topo_islands(const cr_node_t *node, unsigned kinds, int *island);

#endif
