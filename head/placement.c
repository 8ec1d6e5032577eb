/* The head's use of the scheduler (sched/): a worker spec as a resource
 * request, a gang's or a group's bundles placed on the cluster view, the
 * strategies, device lists as state.db keeps them, and the shapes of the
 * requests that wait (head.h). Shared by jobs.c and pgs.c. */
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

/* ------------------------------------------------------------ shapes */

static uint64_t last_reason_seq;

uint64_t reason_seq_next(void)
{
    return ++last_reason_seq;
}

static uint64_t shape_hash(Corral__Strategy strategy, const char *domain, int nb,
                           const sched_bundle_t *bundles)
{
    int32_t s = (int32_t)strategy;
    uint64_t h = cr_hash_bytes(CR_HASH_SEED, &s, sizeof(s));
    h = cr_hash_bytes(h, domain, strlen(domain) + 1);
    h = cr_hash_bytes(h, &nb, sizeof(nb));
    for (int i = 0; i < nb; i++) {
        const sched_bundle_t *b = &bundles[i];
        h = cr_hash_bytes(h, &b->req.n, sizeof(b->req.n));
        for (int k = 0; k < b->req.n; k++) {
            h = cr_hash_bytes(h, &b->req.id[k], sizeof(b->req.id[k]));
            h = cr_hash_bytes(h, &b->req.qty[k], sizeof(b->req.qty[k]));
        }
        h = cr_hash_bytes(h, &b->sel.n, sizeof(b->sel.n));
        for (int k = 0; k < b->sel.n; k++) {
            const sched_term_t *t = &b->sel.t[k];
            h = cr_hash_bytes(h, &t->key, sizeof(t->key));
            h = cr_hash_bytes(h, &t->op, sizeof(t->op));
            h = cr_hash_bytes(h, &t->nvals, sizeof(t->nvals));
            h = cr_hash_bytes(h, t->vals, t->nvals * sizeof(t->vals[0]));
        }
    }
    return h;
}

static bool shape_is(const shape_t *s, uint64_t h, Corral__Strategy strategy, const char *domain,
                     int nb, const sched_bundle_t *bundles)
{
    if (s->hash != h || s->strategy != strategy || s->nb != nb || strcmp(s->domain, domain))
        return false;
    for (int i = 0; i < nb; i++)
        if (!sched_bundle_same(&s->b[i], &bundles[i]))
            return false;
    return true;
}

static void shapes_grow(shapes_t *t)
{
    size_t cap = t->cap ? t->cap * 2 : 64;
    shape_t **tab = cr_calloc(cap, sizeof(*tab));
    for (size_t i = 0; i < t->cap; i++)
        for (shape_t *s = t->tab[i], *next; s; s = next) {
            next = s->next;
            s->next = tab[s->hash & (cap - 1)];
            tab[s->hash & (cap - 1)] = s;
        }
    free(t->tab);
    t->tab = tab;
    t->cap = cap;
}

shape_t *shape_get(shapes_t *t, Corral__Strategy strategy, const char *domain, int nb,
                   const sched_bundle_t *bundles)
{
    domain = domain ? domain : "";
    uint64_t h = shape_hash(strategy, domain, nb, bundles);
    for (shape_t *s = t->cap ? t->tab[h & (t->cap - 1)] : NULL; s; s = s->next)
        if (shape_is(s, h, strategy, domain, nb, bundles)) {
            s->refs++;
            return s;
        }
    if (t->n >= t->cap)
        shapes_grow(t);
    shape_t *s = cr_calloc(1, sizeof(*s));
    s->hash = h;
    s->strategy = strategy;
    s->domain = cr_strdup(domain);
    s->nb = nb;
    s->b = cr_malloc((size_t)nb * sizeof(*s->b));
    memcpy(s->b, bundles, (size_t)nb * sizeof(*s->b));
    s->refs = 1;
    s->next = t->tab[h & (t->cap - 1)];
    t->tab[h & (t->cap - 1)] = s;
    t->n++;
    return s;
}

void shape_put(shapes_t *t, shape_t *s)
{
    if (--s->refs)
        return;
    shape_t **p = &t->tab[s->hash & (t->cap - 1)];
    while (*p != s)
        p = &(*p)->next;
    *p = s->next;
    t->n--;
    free(s->domain);
    free(s->b);
    free(s);
}

void shape_refused(shape_t *s, uint64_t gen, const char *why)
{
    s->missed = gen;
    cr_strlcpy(s->why, why, sizeof(s->why));
    s->why_seq = reason_seq_next();
}

void pass_run(pass_t *p, void (*once)(void))
{
    if (p->in) {
        p->again = true;
        return;
    }
    p->in = true;
    do {
        p->again = false;
        once();
    } while (p->again);
    p->in = false;
}

void shapes_free(shapes_t *t)
{
    for (size_t i = 0; i < t->cap; i++)
        for (shape_t *s = t->tab[i], *next; s; s = next) {
            next = s->next;
            free(s->domain);
            free(s->b);
            free(s);
        }
    free(t->tab);
    t->tab = NULL;
    t->cap = t->n = 0;
}
