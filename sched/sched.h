/* sched: the scheduling core of corral, a pure library.
 *
 * Given a cluster view (node descriptions with free resources) and a
 * request, decide where it goes, which devices it gets, or why it cannot
 * go. No I/O, no clocks: randomness comes from a caller-owned generator and
 * time from the caller. Everything is indexed by dense integer ids and kept
 * in flat arrays, so that one decision allocates nothing.
 *
 * Quantities are fixed point, CR_QTY_ONE (10000) per unit, never floats.
 * Ownership: a cluster owns its nodes, indexes and state; requests and
 * results are caller-owned values. */
#ifndef CORRAL_SCHED_H
#define CORRAL_SCHED_H

#include <corral/accel.h>
#include "base/base.h"

#define SCHED_MAX_RES 32 /* resource ids per cluster */
#define SCHED_MAX_DEV 64 /* tracked devices per node (one uint64_t mask) */
#define SCHED_REQ_MAX 8  /* resources in one bundle */
#define SCHED_SEL_MAX 8  /* terms in one selector */
#define SCHED_SEL_VALS 8 /* values in one in/notin term */
#define SCHED_MAX_BUNDLES 4096

__extension__ typedef __int128 sched_sum_t;

/* ---- errors with a position (parsers) ---- */
typedef struct sched_err {
    int pos; /* byte offset of the bad character, -1 none */
    char msg[160];
} sched_err_t;

/* ---- interning: strings to dense ids ---- */
typedef struct sched_syms {
    char **str;     /* id -> string */
    uint32_t *hash; /* id -> hash */
    size_t n, cap;
    int32_t *slots; /* open addressing, -1 empty */
    size_t nslots;
} sched_syms_t;
void sched_syms_init(sched_syms_t *s);
void sched_syms_fini(sched_syms_t *s);
/* Returns the id of s[0..len), adding it when absent. */
int sched_syms_intern(sched_syms_t *s, const char *str, size_t len);
/* Returns the id or -1 when absent. */
int sched_syms_find(const sched_syms_t *s, const char *str, size_t len);
static inline const char *sched_syms_name(const sched_syms_t *s, int id)
{
    return id >= 0 && (size_t)id < s->n ? s->str[id] : "?";
}

/* ---- resources ---- */
enum {
    SCHED_R_CPU = 0,
    SCHED_R_MEMORY,
    SCHED_R_GPU,
    SCHED_R_TPU,
    SCHED_R_NEURON_CORES,
    SCHED_R_HPU,
    SCHED_R_PREDEFINED
};
/* Fills a table with the predefined names first (CPU, memory, GPU, ...). */
void sched_resources_init(sched_syms_t *res);
/* The predefined name that name (len bytes) is in another case ("gpu":
 * "GPU"), for "did you mean GPU?"; NULL when it is none's. */
const char *sched_resource_suggest(const char *name, size_t len);
/* Whether a resource's units are devices (GPU, TPU, neuron_cores, HPU). */
bool sched_resource_is_unit(int rid);

typedef struct sched_resreq {
    uint8_t n;
    uint8_t id[SCHED_REQ_MAX];
    int64_t qty[SCHED_REQ_MAX]; /* fixed point, > 0 */
} sched_resreq_t;

/* Parses a quantity: "2", "0.5", "64Gi", "1.5T", "512Mi" into fixed
 * point. Binary (Ki..Ei) and decimal (k, K, M, G, T, P, E) suffixes. */
int sched_parse_qty(const char *s, size_t len, int64_t *out, sched_err_t *err);
/* Parses "GPU=2,CPU=8,memory=64Gi". Unknown names are interned (custom
 * resources); unit-instance rules are checked. Errors point at the bad
 * character. */
int sched_parse_resources(sched_syms_t *res, const char *s, sched_resreq_t *out, sched_err_t *err);
/* Checks the unit-instance rules of one (resource, quantity). */
int sched_check_unit_qty(int rid, int64_t qty, char *msg, size_t msgsize);
/* "GPU=2,CPU=8,memory=64Gi" back (quantities in the shortest exact form). */
void sched_format_resources(const sched_syms_t *res, const sched_resreq_t *r, cr_buf_t *out);
void sched_format_qty(int rid, int64_t q, char *buf, size_t size);

/* ---- label selectors ---- */
typedef enum sched_op {
    SCHED_OP_EQ = 0,
    SCHED_OP_NE,
    SCHED_OP_IN,
    SCHED_OP_NOTIN,
    SCHED_OP_EXISTS,
    SCHED_OP_NOTEXISTS
} sched_op_t;

typedef struct sched_term {
    int32_t key; /* label symbol id */
    uint8_t op, nvals;
    int32_t vals[SCHED_SEL_VALS];
} sched_term_t;

typedef struct sched_selector {
    uint8_t n;
    sched_term_t t[SCHED_SEL_MAX];
} sched_selector_t;

/* Parses "k=v,k!=v,k in (a,b),k notin (a,b),k,k exists,!k" (ANDed) with
 * keys and values interned in labels. A selector that can never match
 * (a=1,a=2; k,!k) is an error too. */
int sched_parse_selector(sched_syms_t *labels, const char *s, sched_selector_t *out,
                         sched_err_t *err);
void sched_format_selector(const sched_syms_t *labels, const sched_selector_t *sel, cr_buf_t *out);

/* ---- TPU topologies ---- */
typedef struct sched_tpu_topo {
    int ndims;
    int dims[3];
    int chips;
} sched_tpu_topo_t;
/* "4x4", "2x2x2", "8x16": 2 or 3 dims, each 1..256, at most 65536 chips. */
int sched_parse_tpu_topology(const char *s, sched_tpu_topo_t *out, sched_err_t *err);
/* A valid per-host sub-mesh for k chips: 1, 1x2, 2x2, 2x4. Returns false
 * when k is not one of them. */
bool sched_tpu_submesh(int k, int *dx, int *dy);

/* ---- the cluster view ---- */
typedef struct sched_dev {
    uint8_t res; /* resource id */
    int8_t numa;
    int16_t island;   /* NVLink island / xGMI hive on this node, -1 none */
    int16_t x, y, z;  /* mesh coordinates, -1 none */
    int32_t hw_index; /* index in the node description */
    uint8_t units;    /* units of its resource it holds: NeuronCores, else 1 */
} sched_dev_t;

typedef struct sched_node {
    int32_t name;                /* label symbol of the node id */
    uint32_t label_off, nlabels; /* into cluster->lab, sorted by key */
    uint32_t dev_off;            /* into cluster->dev */
    uint16_t ndev;
    uint8_t nisland, nnuma; /* device groups, islands then NUMA nodes, in cluster->groups */
    uint8_t nset;           /* then the vendor's exact device sets (Gaudi module sets): a
                             * request of more than one device takes exactly one of them */
    uint8_t set_res;        /* the resource of the devices in those sets */
    uint32_t group_off;
    int32_t slice; /* TPU slice index, -1 none */
    int32_t slice_worker;
    uint32_t resmask;                      /* resources with total > 0 */
    uint32_t slowmask;                     /* unit resources whose devices hold several units or
                                            * come with vendor rules (MIG, module sets): the
                                            * single-bundle scan leaves them to sched__fits_* */
    uint64_t unitmask[SCHED_R_PREDEFINED]; /* tracked devices of each unit resource */
    uint8_t unitsz[SCHED_R_PREDEFINED];    /* units per tracked device (0, 1: one);
                                            * requests take whole devices of them */
    uint64_t solomask; /* devices a worker gets alone, one at most (MIG instances) */
} sched_node_t;

/* What the single-bundle scan reads of a node's description, 16 bytes a
 * node in their own array (sched_cluster_t.hot), so that the scan, which
 * moves on by about 18 nodes a decision in a cluster 60% used, brings a
 * quarter of a cache line a node into the cache rather than the 112 bytes
 * of sched_node_t. Derived from sched_node_t when a node is added or
 * replaced (sched_cluster_sync). */
typedef struct sched_hot {
    uint32_t resmask; /* sched_node_t.resmask */
    uint8_t slowmask; /* sched_node_t.slowmask, and every unit resource with
                       * tracked devices where the node has devices of two */
    uint8_t devres;   /* the unit resource of its tracked devices, 0xff none or
                       * several (then they are in slowmask) */
    uint16_t pad;
    uint64_t devmask; /* sched_node_t.unitmask[devres] */
} sched_hot_t;

typedef struct sched_label {
    int32_t key, val;
} sched_label_t;

typedef struct sched_slice {
    int32_t name;       /* label symbol */
    int32_t accel_type; /* label symbol, "v6e-16" */
    sched_tpu_topo_t topo;
    int32_t nworkers;
    int32_t *worker_node; /* worker id -> node, -1 missing */
} sched_slice_t;

/* An index entry: the nodes having label key=val. */
typedef struct sched_lindex {
    int32_t key, val;
    uint32_t off, n; /* into cluster->lindex_nodes */
} sched_lindex_t;

typedef struct sched_alloc {
    int32_t node;
    sched_resreq_t req;
    uint64_t mask[SCHED_REQ_MAX]; /* devices taken for each entry (unit resources) */
} sched_alloc_t;

typedef struct sched_placement {
    uint64_t id; /* 0: free slot */
    uint32_t nallocs;
    sched_alloc_t one;     /* the single bundle, without an allocation */
    sched_alloc_t *allocs; /* in bundle order, when nallocs > 1 */
} sched_placement_t;

static inline const sched_alloc_t *sched__alloc(const sched_placement_t *p, uint32_t i)
{
    return p->nallocs == 1 ? &p->one : &p->allocs[i];
}

typedef struct sched_cluster {
    sched_syms_t res;    /* resource names */
    sched_syms_t labels; /* label keys and values, node names */
    CR_VEC(sched_node_t) nodes;
    CR_VEC(sched_label_t) lab;
    CR_VEC(sched_dev_t) dev;
    CR_VEC(uint64_t) groups;
    CR_VEC(sched_slice_t) slices;
    CR_VEC(int64_t) init_total; /* node * SCHED_MAX_RES, for nodes nnodes.. */
    bool final;
    /* Nodes joined or replaced since the arrays were last brought up to
     * date: nodes.v[nnodes..] are joined (their totals in init_total),
     * repl lists replaced nodes (totals in repl_total). sched__sync()
     * applies them before the next decision or query. */
    bool dirty;
    CR_VEC(int32_t) repl;
    CR_VEC(int64_t) repl_total;
    size_t ndevstate;                    /* devices with a devfree entry */
    size_t dead_lab, dead_dev, dead_grp; /* left behind by replaced nodes */
    CR_VEC(int32_t) byname;              /* label symbol of a node id -> node, -1 */
    int nres;                            /* resource ids with a row in the arrays */
    size_t nnodes;                       /* nodes in the arrays (see sched_cluster_sync) */
    /* static, SoA: total[r * nnodes + n] */
    int64_t *total;
    /* label index: sorted by (key, val) */
    sched_lindex_t *lindex;
    size_t nlindex;
    int32_t *lindex_nodes;
    /* dynamic state */
    int64_t *avail; /* avail[r * nnodes + n] */
    int64_t *held;  /* reserved for a held gang, same shape */
    size_t nheld;   /* cells of held that are not 0 (none: held is not read) */
    /* free-capacity index, one byte a cell, node-major (freelvl[n * nres +
     * r], so that a release writes one line): the bit length of avail -
     * held (0 when none is free), so that a decision passes over a node
     * that cannot take a request by reading a byte (sched__level, LVL) */
    uint8_t *freelvl;
    sched_hot_t *hot;   /* per node: what the scan reads of its description */
    int32_t *devfree;   /* per device, fixed point, 0..CR_QTY_ONE */
    uint64_t *freemask; /* per node: devices fully free */
    /* per node: 0 lost, SCHED_ALIVE, or SCHED_CORDONED (sched_node_cordon):
     * counted as alive everywhere but in what is placed now */
    uint8_t *alive;
    /* cluster-wide sums per resource over alive nodes: memory in fixed
     * point over 10,000 nodes does not fit 64 bits */
    sched_sum_t *sumavail;
    sched_sum_t *sumtotal;
    int64_t *maxtotal;                    /* per resource: the largest alive node's total */
    CR_VEC(sched_placement_t) placements; /* slot = id & 0xffffffff */
    CR_VEC(uint32_t) free_slots;
    uint64_t next_id;
    uint32_t cursor;   /* hybrid policy: where the last decision landed */
    uint32_t scan_end; /* where the last scan of every node stopped (what to prefetch) */
    int32_t *scratch;  /* nnodes ints for candidate lists */
    int32_t *scratch2;
    uint8_t *mark; /* nnodes bytes, kept zero between decisions */
} sched_cluster_t;

sched_cluster_t *sched_cluster_new(void);
void sched_cluster_free(sched_cluster_t *c);
/* Adds a node description (copied as the scheduler needs it). Fails with
 * CR_EINVAL and msg when the node cannot be represented, CR_EEXIST when a
 * node of that id is there already. Before sched_cluster_finalize it
 * builds the view; after it the node joins the view in use: alive and
 * all free, nothing else changes. Its index is the previous node count.
 * The arrays and label index take joined nodes in lazily, once, before the
 * next decision or query (sched_cluster_sync). */
int sched_cluster_add(sched_cluster_t *c, const cr_node_t *node, char *msg, size_t msgsize);
/* Builds the indexes. Nodes may still be added after (see above). */
int sched_cluster_finalize(sched_cluster_t *c);
/* A new description for a node that rejoins (a new incarnation of its
 * agent; its devices, labels and resources may differ). Only while the
 * node is lost (sched_node_lost), so that nothing is placed on it:
 * otherwise CR_EAGAIN and msg. The description must carry the node's id
 * (CR_EINVAL otherwise). The node stays lost; sched_node_restore brings it
 * back all free with the new description. Capacity a queue holds on the
 * node stays held until the queue lets it go. */
int sched_cluster_replace(sched_cluster_t *c, int node, const cr_node_t *desc, char *msg,
                          size_t msgsize);
/* Brings the arrays (nnodes, total, avail, held, devfree, freemask, alive,
 * the label index) up to date with joined and replaced nodes. Every
 * decision and query does it itself; call it only before reading those
 * fields directly. Cheap when nothing changed. */
void sched_cluster_sync(sched_cluster_t *c);
/* Nodes in the view, joined ones included (c->nnodes may lag until sync). */
size_t sched_cluster_nodes(const sched_cluster_t *c);
int sched_cluster_find_node(const sched_cluster_t *c, const char *name);
const char *sched_node_name(const sched_cluster_t *c, int n);
/* The label value of node n for key, or -1. */
int sched_node_label(const sched_cluster_t *c, int n, int key);
bool sched_selector_match(const sched_cluster_t *c, const sched_selector_t *sel, int n);
/* A digest of the dynamic state: equal states give equal digests. */
uint64_t sched_cluster_digest(const sched_cluster_t *c);
/* Checks the state's invariants (no over-commit, sums agree); 0 or CR_EINVAL with why. */
int sched_cluster_check(const sched_cluster_t *c, char *msg, size_t msgsize);

/* internal: the label index */
const sched_lindex_t *sched__lindex_find(const sched_cluster_t *c, int key, int val);
const sched_lindex_t *sched__lindex_key(const sched_cluster_t *c, int key, size_t *count);

/* ---- random numbers: injected ---- */
typedef struct sched_rng {
    uint64_t s;
} sched_rng_t;
static inline uint64_t sched_rng_next(sched_rng_t *r)
{
    /* splitmix64: small, fast, and good enough for tie-breaks */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- requests and results ---- */
typedef enum sched_policy {
    SCHED_HYBRID = 0,
    SCHED_SPREAD,
    SCHED_NODE_AFFINITY,
} sched_policy_t;

typedef enum sched_strategy {
    SCHED_PACK = 0,
    SCHED_SPREAD_PG,
    SCHED_STRICT_PACK,
    SCHED_STRICT_SPREAD,
} sched_strategy_t;

typedef enum sched_status { SCHED_OK = 0, SCHED_RETRY, SCHED_INFEASIBLE } sched_status_t;

typedef struct sched_bundle {
    sched_resreq_t req;
    sched_selector_t sel;
} sched_bundle_t;
/* Whether two bundles ask the same (the parts in use compared: a queue's
 * alike requests, head/jobs.c and head/pgs.c). */
bool sched_bundle_same(const sched_bundle_t *a, const sched_bundle_t *b);

typedef struct sched_request {
    uint32_t nbundles; /* 1 for a single bundle */
    sched_bundle_t *bundles;
    sched_policy_t policy; /* single bundle */
    int32_t affinity_node; /* SCHED_NODE_AFFINITY */
    bool affinity_soft;
    sched_strategy_t strategy; /* groups */
    int32_t domain_key;        /* label symbol, -1 none */
    /* TPU slice group: nbundles/bundles are ignored and generated */
    struct {
        bool on;
        int32_t gen; /* label symbol of "v6e", or -1 any */
        sched_tpu_topo_t topo;
        int chips_per_host;
        int nslices;
        sched_resreq_t extra; /* per host, besides the chips */
    } tpu;
} sched_request_t;

typedef struct sched_config {
    int top_k;                /* hybrid: random pick among the k best (>= 1) */
    int spread_threshold_pct; /* hybrid: pack until a node is this used (50) */
    int max_scored;           /* feasible nodes scored per decision, 0: auto */
    bool quiet;               /* RETRY results carry no reason (saves a scan) */
} sched_config_t;

typedef struct sched_result {
    sched_status_t status;
    uint64_t placement; /* id when OK */
    char reason[256];   /* RETRY / INFEASIBLE: why, for people */
} sched_result_t;

/* Decides and, when OK, takes the resources. Allocates nothing on the
 * single-bundle path. */
int sched_schedule(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                   sched_rng_t *rng, sched_result_t *out);
/* Schedules req over and over until percent % of the cluster's GPUs are taken
 * or it fits no more: the steady state the benchmarks start from (`corral
 * sim --bench`, bench/sched). Returns the placements (malloc'ed, room for
 * one more), *n of them. */
uint64_t *sched_fill_gpus(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                          sched_rng_t *rng, unsigned percent, size_t *n);
/* Returns exactly what placement id took. CR_ENOENT when unknown. */
int sched_release(sched_cluster_t *c, uint64_t id);
const sched_placement_t *sched_placement_get(const sched_cluster_t *c, uint64_t id);
/* The devices an allocation took, as indices into its node description's
 * devices (what hw_isolate takes), in ascending order. Returns the count
 * (which may exceed max; only max are written). */
size_t sched_alloc_devices(const sched_cluster_t *c, const sched_alloc_t *a, int *out, size_t max);
/* One allocation to take exactly: node, what it asks, and the devices
 * (hardware indices, as sched_alloc_devices gives) it holds. */
typedef struct sched_exact {
    int node;
    sched_resreq_t req;
    const int *devs;
    size_t ndevs;
} sched_exact_t;
/* Takes these allocations as one placement (*id), all or none: what a
 * restarted head holds again for the workers it adopts. CR_EAGAIN when a
 * resource or device is not free now, CR_EINVAL when the devices do not
 * match the request or a node is unknown or lost. */
int sched_take_exact(sched_cluster_t *c, uint32_t nallocs, const sched_exact_t *allocs,
                     uint64_t *id);
/* Marks node dead; its placements are removed, their ids written to ids
 * (up to max) and the count returned. Other nodes of those placements
 * get their share back. */
size_t sched_node_lost(sched_cluster_t *c, int node, uint64_t *ids, size_t max);
/* Brings a lost node back, all free. */
int sched_node_restore(sched_cluster_t *c, int node);
/* on: nothing new is placed on the node, as Kubernetes taints an
 * unreachable node NoSchedule; what it holds stays, and it still counts
 * for whether a request could ever fit (such a request waits rather than
 * being refused). The head cordons a node while its agent is not
 * connected. off: it takes work again. A lost node is not cordoned
 * (restored, it comes back open); CR_EINVAL for one unknown or lost. */
#define SCHED_ALIVE 1
#define SCHED_CORDONED 2
int sched_node_cordon(sched_cluster_t *c, int node, bool on);

/* ---- the queue ---- */
typedef struct sched_qentry {
    uint64_t key;        /* caller's id */
    int priority;        /* higher first */
    uint64_t seq;        /* arrival order */
    int64_t enqueued;    /* caller's clock */
    sched_request_t req; /* owned (bundles copied) */
    bool holding;        /* capacity is held for it while it waits */
    sched_alloc_t *hold;
    uint32_t nhold;
} sched_qentry_t;

typedef struct sched_queue {
    CR_VEC(sched_qentry_t) q;
    uint64_t seq;
    int64_t hold_after; /* a gang waiting this long gets capacity held */
    /* Optional: called before each decision and once after the last, so
     * that a caller can time decisions (the library reads no clock). */
    void (*on_decision)(void *ctx);
    void *on_decision_ctx;
    uint64_t decisions; /* scheduling calls made */
} sched_queue_t;

typedef void (*sched_queue_cb)(void *ctx, uint64_t key, const sched_result_t *res);
void sched_queue_init(sched_queue_t *q, int64_t hold_after);
void sched_queue_fini(sched_queue_t *q, sched_cluster_t *c);
/* Copies req. */
int sched_queue_push(sched_queue_t *q, uint64_t key, int priority, int64_t now,
                     const sched_request_t *req);
/* Tries pending requests in order (priority, then age); calls cb for each
 * placed (OK) or INFEASIBLE one and removes it. Returns the number placed. */
size_t sched_queue_run(sched_queue_t *q, sched_cluster_t *c, const sched_config_t *cfg,
                       sched_rng_t *rng, int64_t now, sched_queue_cb cb, void *ctx);
size_t sched_queue_len(const sched_queue_t *q);

/* Bytes the cluster view holds (its arrays and tables). */
size_t sched_cluster_memory(const sched_cluster_t *c);

/* Fragmentation: of the fully free devices (unit resources) on alive
 * nodes, how many sit on nodes where none of the pending requests could
 * go now. Sets *free_devices to the number of fully free devices. */
size_t sched_fragmentation(const sched_cluster_t *c, const sched_request_t *const *pending,
                           size_t npending, size_t *free_devices);
/* Share of a resource in use on alive nodes, in permille (0 if none). */
int sched_used_permille(const sched_cluster_t *c, int rid);

/* ---- cluster and trace files (corral sim) ---- */
/* A stream of like requests in a trace: count arrivals, `every` apart. */
typedef struct sched_stream {
    double at, every;
    uint32_t count;
    double dur_min, dur_max; /* uniform between, in seconds */
    int priority;
    sched_request_t req; /* bundles owned */
} sched_stream_t;

typedef struct sched_trace {
    CR_VEC(sched_stream_t) streams;
    uint64_t seed;
    double hold_after; /* seconds */
} sched_trace_t;

/* Loads a cluster file (YAML or JSON: templates, counts, TPU slices) into
 * a new finalized cluster. On failure *errmsg (malloc'ed) says
 * "FILE: WHERE: what was expected". data may be NULL (read path). */
int sched_cluster_load(const char *path, const char *data, size_t len, sched_cluster_t **out,
                       char **errmsg);
/* Loads a trace against cluster c (names are interned there). */
int sched_trace_load(const char *path, const char *data, size_t len, sched_cluster_t *c,
                     sched_trace_t *out, char **errmsg);
void sched_trace_fini(sched_trace_t *t);

/* ---- synthetic nodes (tests, corral sim) ---- */
typedef struct sched_node_spec {
    const char *name;
    int cpus;             /* CPU resource */
    uint64_t memory;      /* bytes */
    const char *resource; /* "GPU", "TPU", ... NULL: none */
    const char *sku;
    int ndev;
    int island;         /* devices per NVLink island / xGMI hive, 0 none */
    int numa;           /* NUMA nodes the devices are spread over, 0: 1 */
    const char *labels; /* "k=v,k=v" */
    /* TPU slice membership */
    const char *slice, *topology, *accel_type;
    int worker_id, worker_count;
} sched_node_spec_t;
/* Fills an empty node (hw_node_new) from spec. CR_EINVAL with msg when
 * the spec is inconsistent. */
int sched_make_node(const sched_node_spec_t *spec, cr_node_t *node, char *msg, size_t msgsize);

#endif
