/* TPU slice geometry: generations, pod types ("v6e-16"), topologies ("4x4",
 * "2x2x2"), how a slice splits into hosts and where each chip sits in the
 * mesh. Pure functions over the strings and numbers they are given: no
 * files, no environment, no allocation. The tpu backend uses them to
 * describe a host; the scheduler reuses them to reason about sub-meshes and
 * slices without a TPU in sight.
 *
 * Facts (public, from Cloud TPU documentation and Ray's and JAX's TPU
 * support):
 * - A pod type is "<generation>-<N>". For v2, v3, v4, v5p and v7x N counts
 *   TensorCores (2 per chip): v5p-16 is 8 chips. For v5e (v5litepod) and
 *   v6e N counts chips: v6e-16 is 16 chips.
 * - Multi-host slices have 4 chips per host: a 2x2 block of a 2D mesh, a
 *   2x2x1 block of a 3D one. v5e/v6e slices of at most 8 chips (1x1, 2x2,
 *   2x4) are usually one host holding all of them, but a 2x4 also comes as
 *   two hosts of 4 (xpk: ct6e-standard-4t, 2 VMs, for v6e-8): how many
 *   chips a host has comes from the machine.
 * - Hosts are numbered x-fastest over the grid of host blocks, and chips on
 *   a host x-fastest inside the block (what JAX reports as device coords). */
#ifndef CORRAL_HW_TPU_H
#define CORRAL_HW_TPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TPU_MAX_DIMS 3

typedef struct tpu_gen {
    const char *name;              /* "v6e": how pod types spell it */
    const char *alias;             /* another spelling ("v5e", "tpu7x"), or NULL */
    const char *sku;               /* corral's SKU: "TPU-V6E" */
    uint16_t pci_device;           /* PCI device id under vendor 0x1ae0 */
    int cores_per_chip;            /* TensorCores per chip */
    int hbm_gib;                   /* HBM per chip */
    bool pod_counts_cores;         /* the N of "<gen>-N" counts TensorCores, not chips */
    int ndims;                     /* 2: 2D mesh, 3: 3D torus */
    int single_host_chips;         /* slices of up to this many chips are one host
                                      holding them all (v5e, v6e: 8); 0: none */
    const char *const *topologies; /* the valid slice shapes, NULL-terminated,
                                      the usual one for a chip count first */
    int grid_step;                 /* 3D: also valid, every AxBxC with A, B, C */
    int grid_max_chips;            /*     multiples of grid_step, up to this many chips */
} tpu_gen_t;

typedef struct tpu_topology {
    int ndims;              /* 2 or 3 */
    int dims[TPU_MAX_DIMS]; /* chips along x, y (, z); unused dims are 1 */
} tpu_topology_t;

typedef struct tpu_pod_type {
    const tpu_gen_t *gen;
    int count; /* the N as written */
    int chips; /* chips in the slice */
} tpu_pod_type_t;

/* The generation table, in order; *n gets its length. */
const tpu_gen_t *tpu_gens(size_t *n);
/* A generation by name, case-insensitive: "v6e", "V6E", "TPU-V6E", "v5e",
 * "v5litepod", "tpu7x". NULL when unknown. */
const tpu_gen_t *tpu_gen_find(const char *name);
/* A generation by PCI device id (v2 and v3 share 0x0027: v3 is returned). */
const tpu_gen_t *tpu_gen_by_pci(uint16_t device);

/* Parses "4x4" or "2x2x2" (digits and 'x' only, each dimension 1..1024,
 * at most 2^20 chips). Returns 0 or CR_EPARSE. Says nothing about whether
 * a generation has that shape. */
int tpu_topology_parse(const char *s, tpu_topology_t *out);
/* The same, saying where (*pos, an offset into s) and why (a static
 * phrase) it failed, for messages that point at the bad character. */
int tpu_topology_parse_at(const char *s, tpu_topology_t *out, size_t *pos, const char **why);
/* "4x4", "2x2x2"; buf gets at least 32 bytes. */
void tpu_topology_format(const tpu_topology_t *t, char *buf, size_t size);
int tpu_topology_chips(const tpu_topology_t *t);
bool tpu_topology_equal(const tpu_topology_t *a, const tpu_topology_t *b);
/* Whether g has slices of shape t (its table, or its 3D grid rule). */
bool tpu_topology_is_valid(const tpu_gen_t *g, const tpu_topology_t *t);
/* The valid shapes of g as "1x1, 2x2, ...", for messages. */
void tpu_topology_list(const tpu_gen_t *g, char *buf, size_t size);
/* The default shape of a g slice with that many chips (what a pod type
 * without TPU_TOPOLOGY means): the first table entry with that count, else,
 * for a generation with a 3D grid rule, its most cube-like shape (v5p-128:
 * 4x4x4). Returns 0 or CR_ENOENT. */
int tpu_topology_for_chips(const tpu_gen_t *g, int chips, tpu_topology_t *out);
/* The valid shapes of g nearest to `chips` chips (those of the closest
 * count at or below it and of the closest above), as "2x4 (8 chips), 4x4
 * (16 chips)", for the message that refuses a shape. */
void tpu_topology_nearest(const tpu_gen_t *g, int chips, char *buf, size_t size);

/* Parses "v6e-16", "v5litepod-8", "tpu7x-16". Returns 0, CR_EPARSE (not
 * "<gen>-<N>"), CR_ENOENT (unknown generation) or CR_EINVAL (N is not a
 * whole number of chips). */
int tpu_pod_type_parse(const char *s, tpu_pod_type_t *out);
/* "v6e-16" for a chip count. */
void tpu_pod_type_format(const tpu_gen_t *g, int chips, char *buf, size_t size);

/* The block of chips one host holds in a slice of shape t when each host
 * has host_chips chips (what the machine has; 0: the usual host of that
 * slice: the whole slice for a v5e/v6e slice of up to 8 chips, else 4):
 * the whole slice when host_chips is all its chips, else 2x2 (2D) or
 * 2x2x1 (3D) blocks of 4 chips, which is how a multi-host slice splits,
 * a v6e-8 or v5litepod-8 (2x4) on two 4-chip VMs included. Returns 0 or
 * CR_EINVAL when t does not split into such hosts. */
int tpu_host_bounds(const tpu_gen_t *g, const tpu_topology_t *t, int host_chips,
                    tpu_topology_t *host);
/* Number of hosts of a slice of shape t (host_chips as above), or a
 * negative error. */
int tpu_worker_count(const tpu_gen_t *g, const tpu_topology_t *t, int host_chips);
/* Mesh coordinates of chip `chip` (0-based, the host's own order) of host
 * `worker` in a slice of shape t (host_chips as above). coords[2] is 0 for
 * 2D shapes. Returns 0 or CR_EINVAL when worker or chip is out of range. */
int tpu_chip_coords(const tpu_gen_t *g, const tpu_topology_t *t, int host_chips, int worker,
                    int chip, int coords[TPU_MAX_DIMS]);
/* Whether two chips are ICI neighbours in a mesh (one step along one axis). */
bool tpu_coords_adjacent(const int a[TPU_MAX_DIMS], const int b[TPU_MAX_DIMS]);

#endif
