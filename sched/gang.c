/* A distributed gang's rank order and per-rank environment (gang.h).
 *
 * Authorities, read where each variable is set:
 * - torchrun: torch/distributed/elastic/agent/server/local_elastic_agent.py
 *   (_start_workers: LOCAL_RANK, RANK, GROUP_RANK, ROLE_RANK, ROLE_NAME,
 *   LOCAL_WORLD_SIZE, WORLD_SIZE, GROUP_WORLD_SIZE, ROLE_WORLD_SIZE,
 *   MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
 *   TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, the NCCL async error
 *   handling default 1) and torch/distributed/run.py (OMP_NUM_THREADS=1
 *   when more than one process per node and the user did not set it).
 *   ROLE_NAME is torchrun's default role, "default".
 * - JAX: jax/_src/distributed.py reads JAX_COORDINATOR_ADDRESS from the
 *   environment and nothing else: the process count and id come from
 *   arguments or cluster detection, hence corral.train.jax.initialize().
 * - libtpu's multi-process mesh, as torch_xla's configure_topology()
 *   (torch_xla/_internal/tpu.py) sets it for one process per chip:
 *   TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1; TPU_PROCESS_BOUNDS = the hosts'
 *   bounds times the chips per host (the slice shape in chips);
 *   CLOUD_TPU_TASK_ID = worker id * processes per host + local rank;
 *   TPU_PROCESS_ADDRESSES = every host in worker order, each with the ports
 *   8476 + local rank; TPU_PROCESS_PORT = 8476 + local rank. */
#include "gang.h"
#include "base/base.h"
#include "hw/tpu.h"
#include <stdarg.h>
#include <stdio.h>

typedef struct key {
    int slot, node_pos, dev;
} gang_key_t;

static int cmp_key(const void *a, const void *b)
{
    const gang_key_t *x = a, *y = b;
    if (x->node_pos != y->node_pos)
        return x->node_pos < y->node_pos ? -1 : 1;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

void sched_gang_order(const sched_gang_slot_t *slots, int n, int *order)
{
    if (n <= 0)
        return;
    bool by_worker = true;
    for (int i = 0; i < n; i++)
        by_worker &= slots[i].slice_worker >= 0;
    gang_key_t *k = cr_calloc((size_t)n, sizeof(*k));
    for (int i = 0; i < n; i++) {
        int first = i; /* the node's first slot */
        for (int p = 0; p < i; p++)
            if (slots[p].node == slots[i].node) {
                first = p;
                break;
            }
        /* a node's position: its slice worker id (then its first slot,
         * should two nodes claim one id), else its first slot */
        k[i].node_pos = by_worker ? slots[i].slice_worker * n + first : first;
        k[i].dev = slots[i].first_dev >= 0 ? slots[i].first_dev : 0;
        k[i].slot = i;
    }
    qsort(k, (size_t)n, sizeof(*k), cmp_key);
    for (int r = 0; r < n; r++)
        order[r] = k[r].slot;
    free(k);
}

bool sched_addr_is_local_only(const char *a)
{
    return !a || !*a || strncmp(a, "127.", 4) == 0 || strcmp(a, "::1") == 0 ||
           strcmp(a, "localhost") == 0 || strcmp(a, "0.0.0.0") == 0 || strcmp(a, "::") == 0;
}

/* Where rank r sits: its node's index in rank order, its local rank, its
 * node's size; and the gang's node count. */
typedef struct where {
    int node_rank, local_rank, local_size, nnodes;
} where_t;

static where_t where_of(const sched_gang_t *g, int r)
{
    where_t w = {0};
    for (int i = 0; i < g->n; i++) {
        if (i == 0 || g->slots[i].node != g->slots[i - 1].node)
            w.nnodes++;
        if (g->slots[i].node != g->slots[r].node)
            continue;
        if (!w.local_size)
            w.node_rank = w.nnodes - 1;
        if (i < r)
            w.local_rank++;
        w.local_size++;
    }
    return w;
}

static int set(cr_envlist_t *out, const char *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set(cr_envlist_t *out, const char *k, const char *fmt, ...)
{
    char v[320]; /* numbers, a host name and a port */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(v, sizeof(v), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(v))
        return CR_EINVAL;
    return cr_envlist_set(out, k, v);
}

/* A default the job may have set itself (torchrun leaves those alone). */
static int set_default(const sched_gang_t *g, cr_envlist_t *out, const char *k, const char *v)
{
    if (g->job_env && cr_envlist_get(g->job_env, k))
        return 0;
    return cr_envlist_set(out, k, v);
}

/* The hosts of the gang in rank order ("a,b"), each once; with ports, each
 * host with `ports` ports from SCHED_TPU_PROCESS_PORT ("a:8476,a:8477,..."). */
static char *host_list(const sched_gang_t *g, int ports)
{
    cr_buf_t b = {0};
    cr_buf_append(&b, "", 0);
    for (int i = 0; i < g->n; i++) {
        if (i && g->slots[i].node == g->slots[i - 1].node)
            continue;
        const char *a = g->slots[i].addr ? g->slots[i].addr : "?";
        if (!ports)
            cr_buf_printf(&b, "%s%s", b.len ? "," : "", a);
        for (int p = 0; p < ports; p++)
            cr_buf_printf(&b, "%s%s:%d", b.len ? "," : "", a, SCHED_TPU_PROCESS_PORT + p);
    }
    return b.s;
}

/* Whether the gang is one process per chip of a whole multi-host slice,
 * the same number on every host: then its processes form one libtpu mesh. */
static bool is_slice_mesh(const sched_gang_t *g, tpu_topology_t *t, int nnodes)
{
    if (!g->tpu || !g->tpu_topology || nnodes < 2 || tpu_topology_parse(g->tpu_topology, t) != 0)
        return false;
    if (tpu_topology_chips(t) != g->n || g->n % nnodes != 0)
        return false;
    for (int i = 0; i < g->n; i++) {
        if (g->slots[i].ndevs != 1)
            return false;
        if (where_of(g, i).local_size != g->n / nnodes)
            return false;
    }
    return true;
}

int sched_gang_env(const sched_gang_t *g, int rank, cr_envlist_t *out)
{
    if (rank < 0 || rank >= g->n)
        return CR_EINVAL;
    where_t w = where_of(g, rank);
    const char *master = g->slots[0].addr ? g->slots[0].addr : "127.0.0.1";
    int err = 0;
    /* torchrun's LocalElasticAgent, one role ("default") */
    err = err ? err : set(out, "MASTER_ADDR", "%s", master);
    err = err ? err : set(out, "MASTER_PORT", "%u", g->master_port);
    err = err ? err : set(out, "RANK", "%d", rank);
    err = err ? err : set(out, "WORLD_SIZE", "%d", g->n);
    err = err ? err : set(out, "LOCAL_RANK", "%d", w.local_rank);
    err = err ? err : set(out, "LOCAL_WORLD_SIZE", "%d", w.local_size);
    err = err ? err : set(out, "GROUP_RANK", "%d", w.node_rank);
    err = err ? err : set(out, "GROUP_WORLD_SIZE", "%d", w.nnodes);
    err = err ? err : set(out, "ROLE_RANK", "%d", rank);
    err = err ? err : set(out, "ROLE_NAME", "%s", "default");
    err = err ? err : set(out, "ROLE_WORLD_SIZE", "%d", g->n);
    err = err ? err : set(out, "TORCHELASTIC_RESTART_COUNT", "%d", g->restart_count);
    err = err ? err : set(out, "TORCHELASTIC_MAX_RESTARTS", "%d", g->max_restarts);
    err = err ? err : set(out, "TORCHELASTIC_RUN_ID", "%s", g->run_id ? g->run_id : "none");
    /* the torch 2 name and the torch 1.x one, 1 unless the job says */
    err = err ? err : set_default(g, out, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    err = err ? err : set_default(g, out, "NCCL_ASYNC_ERROR_HANDLING", "1");
    if (!err && w.local_size > 1) /* torchrun: nproc_per_node > 1 */
        err = set_default(g, out, "OMP_NUM_THREADS", "1");
    /* corral's older names for the node's place */
    err = err ? err : set(out, "NODE_RANK", "%d", w.node_rank);
    err = err ? err : set(out, "NNODES", "%d", w.nnodes);
    /* JAX: the coordinator on a port of its own */
    err = err ? err : set(out, "JAX_COORDINATOR_ADDRESS", "%s:%u", master, g->jax_port);
    err = err ? err : set(out, "JAX_PROCESS_ID", "%d", rank);
    err = err ? err : set(out, "JAX_NUM_PROCESSES", "%d", g->n);
    if (err || !g->tpu)
        return err;

    /* the slice: hosts in worker-id order, this host's place among them */
    char *hosts = host_list(g, 0);
    err = set(out, "TPU_WORKER_ID", "%d", w.node_rank);
    err = err ? err : cr_envlist_set(out, "TPU_WORKER_HOSTNAMES", hosts);
    free(hosts);
    tpu_topology_t t;
    if (err || !is_slice_mesh(g, &t, w.nnodes))
        return err;
    /* one process per chip of a multi-host slice: one libtpu mesh of them all */
    char *addrs = host_list(g, w.local_size);
    err = cr_envlist_set(out, "TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1");
    err = err ? err : set(out, "TPU_PROCESS_BOUNDS", "%d,%d,%d", t.dims[0], t.dims[1], t.dims[2]);
    /* the older names the backend's isolation also sets, kept equal */
    err = err ? err : cr_envlist_set(out, "TPU_CHIPS_PER_HOST_BOUNDS", "1,1,1");
    err = err ? err : set(out, "TPU_HOST_BOUNDS", "%d,%d,%d", t.dims[0], t.dims[1], t.dims[2]);
    err = err ? err : cr_envlist_set(out, "TPU_PROCESS_ADDRESSES", addrs);
    err = err ? err : set(out, "TPU_PROCESS_PORT", "%d", SCHED_TPU_PROCESS_PORT + w.local_rank);
    err =
        err ? err : set(out, "CLOUD_TPU_TASK_ID", "%d", w.node_rank * w.local_size + w.local_rank);
    free(addrs);
    return err;
}
