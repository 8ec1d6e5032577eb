/* A distributed gang's ranks and environment (corral train): from where its
 * workers were placed, the rank order and, per rank, the variables of
 * torchrun's contract, JAX's and a TPU slice's, the multi-process mesh of a
 * slice run one process per chip included (docs/train.md says where each
 * value comes from). Pure: the caller gives the placement as data and gets
 * strings back; no I/O, no clocks. The head calls it where it starts a
 * gang's workers. */
#ifndef CORRAL_SCHED_GANG_H
#define CORRAL_SCHED_GANG_H

#include <corral/accel.h>
#include <stdbool.h>
#include <stdint.h>

/* libtpu's first process port (TPU_PROCESS_PORT): torch_xla's
 * configure_topology() and LeaderWorkerSet's TpuProcessDefaultPort use
 * 8476 and give local process i the port 8476 + i. */
#define SCHED_TPU_PROCESS_PORT 8476

/* One worker of the gang where it was placed. */
typedef struct sched_gang_slot {
    int node;         /* the node's key: slots with the same key share a node */
    const char *addr; /* the address the other nodes reach that node at */
    int slice_worker; /* the node's corral.io/tpu-slice-worker-id, -1 none */
    int first_dev;    /* the lowest device index it was given, -1 none */
    int ndevs;        /* how many devices it was given */
} sched_gang_slot_t;

/* The rank order of n slots: order[r] is the slot that gets rank r. Ranks
 * are contiguous per node (torchrun: RANK = the node's base + LOCAL_RANK),
 * whatever order the placement made (a SPREAD group alternates nodes).
 * Nodes come in the order of their slice worker id when every slot has
 * one (a gang on one TPU slice: rank order follows TPU_WORKER_ID, never
 * the order agents joined), else in the order of their first slot; inside
 * a node, slots go by their first device, then by slot. */
void sched_gang_order(const sched_gang_slot_t *slots, int n, int *order);

typedef struct sched_gang {
    const sched_gang_slot_t *slots; /* in rank order (sched_gang_order) */
    int n;
    const char *run_id;          /* TORCHELASTIC_RUN_ID: the job's id */
    uint32_t master_port;        /* MASTER_PORT: torch's store on rank 0's node */
    uint32_t jax_port;           /* JAX's coordinator on rank 0's node, not MASTER_PORT */
    int restart_count;           /* gang restarts so far */
    int max_restarts;            /* the job's limit */
    const cr_envlist_t *job_env; /* what the job sets itself: never overridden */
    bool tpu;                    /* the workers' devices are TPU chips */
    const char *tpu_topology;    /* the slice's shape ("4x4"), NULL when unknown */
} sched_gang_t;

/* The variables of rank `rank`, added to out. Returns 0, or CR_EINVAL when
 * rank is out of range. */
int sched_gang_env(const sched_gang_t *g, int rank, cr_envlist_t *out);

/* Whether an address is a loopback or wildcard one ("127.x", "::1",
 * "localhost", "0.0.0.0", "::", empty): not one another node can use. */
bool sched_addr_is_local_only(const char *addr);

#endif
