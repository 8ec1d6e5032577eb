/* The head's use of the scheduler (sched/): a worker spec as a resource
 * request, a gang's or a group's bundles placed on the cluster view, the
 * strategies, and device lists as state.db keeps them. Shared by jobs.c
 * and pgs.c. */
#include "head/head.h"
#include <time.h>
#include <stdio.h>

void devs_format(const int *devs, size_t n, cr_buf_t *out)
{
    for (size_t i = 0; i < n; i++)
        cr_buf_printf(out, "%s%d", i ? "," : "", devs[i]);
}

size_t devs_parse(const char *s, int *devs)
{
    size_t n = 0;
    for (const char *p = s; p && *p && n < MAX_DEVS;) {
        char *end;
        long d = strtol(p, &end, 10);
        if (end == p)
            break;
        devs[n++] = (int)d;
        if (*end != ',')
            break;
        p = end + 1;
    }
    return n;
}

sched_strategy_t strategy_of(Corral__Strategy s)
{
    switch (s) {
    case CORRAL__STRATEGY__STRATEGY_SPREAD:
        return SCHED_SPREAD_PG;
    case CORRAL__STRATEGY__STRATEGY_STRICT_PACK:
        return SCHED_STRICT_PACK;
    case CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD:
        return SCHED_STRICT_SPREAD;
    default:
        return SCHED_PACK;
    }
}

sched_status_t schedule_bundles(uint32_t n, sched_bundle_t *bundles, Corral__Strategy strategy,
                                const char *domain, uint64_t *placement, char *why, size_t size)
{
    int key = -1;
    if (domain && domain[0]) {
        key = sched_syms_find(&D.cluster->labels, domain, strlen(domain));
        if (key < 0) {
            snprintf(why, size, "no node has the label %s", domain);
            return SCHED_INFEASIBLE;
        }
    }
    sched_request_t r = {.nbundles = n,
                         .bundles = bundles,
                         .policy = SCHED_HYBRID,
                         .strategy = strategy_of(strategy),
                         .domain_key = key,
                         .affinity_node = -1};
    sched_result_t res;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int err = sched_schedule(D.cluster, &D.scfg, &r, &D.rng, &res);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    head_count_placement((int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec));
    if (err < 0) {
        snprintf(why, size, "scheduler error: %s", cr_strerror(err));
        return SCHED_INFEASIBLE;
    }
    if (res.status == SCHED_OK)
        *placement = res.placement;
    snprintf(why, size, "%s", res.reason);
    return res.status;
}

/* A reason the alive nodes can never meet, for a request that waits for
 * nodes to join: said as what it waits for. */
void wait_reason(char *why, size_t size)
{
    char *was = cr_strdup(why);
    snprintf(why, size, "waiting for nodes to join: %s", was);
    free(was);
}

/* Parses a worker's resources into one bundle request; CR_EINFEASIBLE
 * with why for names no node has. */
int build_request(const Corral__WorkerSpec *ws, sched_resreq_t *req, char *why, size_t size)
{
    memset(req, 0, sizeof(*req));
    sched_cluster_sync(D.cluster); /* resources of nodes that joined since */
    if (ws->n_resources > SCHED_REQ_MAX) {
        snprintf(why, size, "at most %d resources per worker", SCHED_REQ_MAX);
        return CR_EINVAL;
    }
    for (size_t i = 0; i < ws->n_resources; i++) {
        const Corral__Quantity *q = ws->resources[i];
        int rid = sched_syms_find(&D.cluster->res, q->name, strlen(q->name));
        if (rid < 0 || rid >= D.cluster->nres) {
            snprintf(why, size, "no node has resource %s", q->name);
            return CR_EINFEASIBLE;
        }
        if (q->amount <= 0) {
            snprintf(why, size, "resource %s: amount must be positive", q->name);
            return CR_EINVAL;
        }
        if (sched_check_unit_qty(rid, q->amount, why, size) < 0)
            return CR_EINVAL;
        for (int k = 0; k < req->n; k++)
            if (req->id[k] == rid) {
                snprintf(why, size, "resource %s is named twice", q->name);
                return CR_EINVAL;
            }
        req->id[req->n] = (uint8_t)rid;
        req->qty[req->n++] = q->amount;
    }
    if (req->n == 0) { /* nothing asked: one CPU, so the worker counts */
        int rid = sched_syms_find(&D.cluster->res, "CPU", 3);
        if (rid >= 0 && rid < D.cluster->nres) {
            req->id[0] = (uint8_t)rid;
            req->qty[0] = CR_QTY_ONE;
            req->n = 1;
        }
    }
    return 0;
}

void bundles_held(const sched_bundle_t *b, int n, cr_buf_t *out)
{
    sched_resreq_t sum = {0};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < b[i].req.n; k++) {
            int s = 0;
            while (s < sum.n && sum.id[s] != b[i].req.id[k])
                s++;
            if (s == sum.n) {
                if (sum.n == SCHED_REQ_MAX)
                    continue; /* more kinds than a request holds: the first ones said */
                sum.id[sum.n++] = b[i].req.id[k];
            }
            sum.qty[s] += b[i].req.qty[k];
        }
    if (sum.n)
        sched_format_resources(&D.cluster->res, &sum, out);
}

Corral__Holder *holder_new(holders_t *h, const char *kind, const char *id, const char *name,
                           const char *state, const char *reason)
{
    Corral__Holder *o = cr_malloc(sizeof(*o));
    corral__holder__init(o);
    o->kind = cr_strdup(kind);
    o->id = cr_strdup(id);
    o->name = cr_strdup(name ? name : "");
    o->state = cr_strdup(state);
    o->reason = cr_strdup(reason ? reason : "");
    o->held = cr_strdup(""); /* every string malloc'ed: free_unpacked frees them */
    o->group = cr_strdup("");
    *CR_VEC_PUSH(&h->v) = o;
    return o;
}

void holders_free(holders_t *h)
{
    for (size_t i = 0; i < h->v.n; i++)
        corral__holder__free_unpacked(h->v.v[i], NULL);
    CR_VEC_FREE(&h->v);
}
