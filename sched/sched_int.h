/* sched: what the module's files share and nobody else needs. */
#ifndef CORRAL_SCHED_INT_H
#define CORRAL_SCHED_INT_H

#include "sched.h"

#define AV(c, r, n) ((c)->avail[(size_t)(r) * (c)->nnodes + (size_t)(n)])
#define TOT(c, r, n) ((c)->total[(size_t)(r) * (c)->nnodes + (size_t)(n)])
#define HELD(c, r, n) ((c)->held[(size_t)(r) * (c)->nnodes + (size_t)(n)])
#define LVL(c, r, n) ((c)->freelvl[(size_t)(n) * (size_t)(c)->nres + (size_t)(r)])

/* The free-capacity index's level of a quantity: its bit length, 0 for
 * none. A node whose free quantity q can hold a request of qty > 0 has
 * sched__level(q) >= sched__level(qty), so a node below that level is
 * passed over without a look at its record. */
static inline uint8_t sched__level(int64_t q)
{
    return q <= 0 ? 0 : (uint8_t)(64 - __builtin_clzll((uint64_t)q));
}
/* Brings node n's level of resource r up to date after its avail or held
 * changed. Held is read only where some cell of it is not 0. */
static inline void sched__lvl_res(sched_cluster_t *c, int r, int n)
{
    LVL(c, r, n) = sched__level(AV(c, r, n) - (c->nheld ? HELD(c, r, n) : 0));
}
/* The same for every resource of node n. */
static inline void sched__lvl_node(sched_cluster_t *c, int n)
{
    for (int r = 0; r < c->nres; r++)
        sched__lvl_res(c, r, n);
}
/* Every node's levels (after a relayout, or a bulk change of avail). */
void sched__lvl_all(sched_cluster_t *c);

/* Feasible nodes scored per single-bundle decision in a cluster of more
 * than 200: 1% of the nodes within these bounds (sched__sample_limit). */
#define SCHED_SAMPLE_MIN 100
#define SCHED_SAMPLE_MAX 128

/* How many nodes past where the last scan stopped a single-bundle
 * decision asks for before it scans (0: none, for comparison:
 * -DSCHED_PREFETCH=0). The scan moves on by about 18 nodes a decision in
 * bench/sched's cluster 60% used. */
#ifndef SCHED_PREFETCH
#define SCHED_PREFETCH 32
#endif

/* Units of resource r per tracked device of node sn: 1 but for devices
 * holding several (a Trainium device of 2 NeuronCores). */
static inline int sched__units(const sched_node_t *sn, int r)
{
    return r < SCHED_R_PREDEFINED && sn->unitmask[r] && sn->unitsz[r] > 1 ? sn->unitsz[r] : 1;
}

/* sched_cluster_sync for functions that take a const view: the view's
 * contents do not change, only how they are laid out. */
static inline void sched__sync(const sched_cluster_t *c)
{
    if (c->dirty)
        sched_cluster_sync((sched_cluster_t *)c);
}

/* snprintf into a reason: truncation is fine for words meant for people. */
void sched__fmt(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

enum { SCORE_HYBRID, SCORE_SPREAD, SCORE_PACK };

uint32_t sched__reqmask(const sched_resreq_t *q);
bool sched__fits_now(const sched_cluster_t *c, int n, const sched_resreq_t *q, bool use_hold);
bool sched__fits_ever(const sched_cluster_t *c, int n, const sched_resreq_t *q);
bool sched__granule_ok(const sched_cluster_t *c, int n, int r, int64_t qty);
int sched__util_after(const sched_cluster_t *c, int n, const sched_resreq_t *q);
uint64_t sched__choose_whole(const sched_cluster_t *c, int n, int r, int k);
/* What the vendor lets one worker hold together, out of pool (place.c). */
uint64_t sched__rules_pool(const sched_cluster_t *c, int n, int r, int k, uint64_t pool);
/* Whether node n has such rules for resource r. */
static inline bool sched__has_rules(const sched_node_t *sn, int r)
{
    return (sn->solomask & sn->unitmask[r]) || (sn->nset && sn->set_res == r);
}
int sched__choose_frac(const sched_cluster_t *c, int n, int r, int64_t qty);
int sched__take(sched_cluster_t *c, int n, const sched_resreq_t *q, sched_alloc_t *al);
void sched__give(sched_cluster_t *c, const sched_alloc_t *al);
sched_placement_t *sched__placement_new(sched_cluster_t *c, uint32_t nallocs);
/* Frees the slot without giving anything back. */
void sched__placement_drop(sched_cluster_t *c, sched_placement_t *p);
size_t sched__candidates(sched_cluster_t *c, const sched_selector_t *sel, int32_t *buf,
                         const int32_t **list);
int sched__score(const sched_cluster_t *c, const sched_config_t *cfg, int mode, int n,
                 const sched_resreq_t *q);
size_t sched__sample_limit(const sched_cluster_t *c, const sched_config_t *cfg);
/* The best node for bundle b (-1 none); *ever counts nodes that could
 * ever take it. exclude: nodes to skip (may be NULL). */
int sched__pick(sched_cluster_t *c, const sched_config_t *cfg, sched_rng_t *rng,
                const sched_bundle_t *b, int mode, bool use_hold, const uint8_t *exclude,
                const int32_t *within, size_t nwithin, int *ever);
void sched__explain(sched_cluster_t *c, const sched_bundle_t *b, bool now, bool use_hold, char *out,
                    size_t size);
int sched__validate(const sched_cluster_t *c, const sched_request_t *req, char *msg, size_t size);
int sched__schedule(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                    sched_rng_t *rng, bool use_hold, sched_result_t *out);
int sched__schedule_one(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                        sched_rng_t *rng, bool use_hold, sched_result_t *out);
int sched__place_group(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                       sched_rng_t *rng, bool use_hold, sched_result_t *out);
int sched__place_tpu(sched_cluster_t *c, const sched_config_t *cfg, const sched_request_t *req,
                     sched_rng_t *rng, bool use_hold, sched_result_t *out);

/* sched_cluster_load with a cap on the node count (fuzzing). */
int sched__cluster_load(const char *path, const char *data, size_t len, size_t max_nodes,
                        sched_cluster_t **out, char **errmsg);

#endif
