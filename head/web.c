/* The head's HTTP server (docs/api.md, docs/metrics.md): the REST API
 * under /api/v1/, the Prometheus /metrics and /healthz, served by web/
 * on the head's loop. This file is the head's read API for web/: each
 * handler reads the other modules through their functions (nodes_status,
 * node_fill, jobs_info_each, pgs_info_each, events_each_since), on the
 * loop's thread, between the head's other callbacks, so what it reads is
 * always a state between two messages; it writes nothing.
 *
 * The JSON has the shapes the CLI's --json prints (cli/job_cmd.c,
 * cli/pg_cmd.c: job, node, group, event), checked side by side by
 * tests/cli/web_api.sh, and node descriptions are hw/'s own builder
 * (corral hw --json). */
#include "head/follow.h"
#include "head/head.h"
#include "head/telemetry.h"
#include "hw/topo_view.h"
#include "net/tls.h"
#include "web/web.h"
#include <ctype.h>
#include <stdio.h>
#include <unistd.h>
#include <time.h>

head_counters_t head_counters;

static struct {
    web_t *web;
    char url[320];
    uint8_t token[CR_TOKEN_LEN];
} W;

/* Scheduler decisions, in seconds: the histogram's upper bounds. */
static const double place_le[HEAD_PLACE_BUCKETS] = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
                                                    1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1};

void head_count_placement(int64_t ns)
{
    double s = (double)ns / 1e9;
    for (int i = 0; i < HEAD_PLACE_BUCKETS; i++)
        if (s <= place_le[i])
            head_counters.place_bucket[i]++;
    head_counters.place_count++;
    head_counters.place_sum += s;
}

/* ------------------------------------------------------- the shapes */

static const char *const job_states[] = {"UNKNOWN",   "PENDING", "PLACING", "RUNNING",
                                         "SUCCEEDED", "FAILED",  "STOPPED"};
static const char *const worker_states[] = {"UNKNOWN", "STARTING", "RUNNING", "EXITED",
                                            "FAILED",  "STOPPED",  "LOST"};
static const char *const pg_states[] = {"UNKNOWN", "PENDING", "PREPARING",
                                        "CREATED", "REMOVED", "INFEASIBLE"};
static const char *const strategies[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};
static const char *const restarts[] = {"none", "worker", "gang"};

#define NAME_OF(tab, v) ((unsigned)(v) < CR_ARRAY_SIZE(tab) ? tab[v] : "UNKNOWN")

static double units(int64_t amount)
{
    return (double)amount / (double)CR_QTY_ONE;
}

static json_t *devices_list(const uint32_t *d, size_t n, bool as_string)
{
    if (as_string) { /* the CLI's "0,3,5" */
        cr_buf_t b = {0};
        for (size_t k = 0; k < n; k++)
            cr_buf_printf(&b, "%s%u", k ? "," : "", d[k]);
        json_t *s = json_string(b.s ? b.s : "");
        cr_buf_free(&b);
        return s;
    }
    json_t *a = json_array();
    for (size_t k = 0; k < n; k++)
        json_array_append_new(a, json_integer(d[k]));
    return a;
}

static json_t *worker_json(const Corral__WorkerStatus *w)
{
    json_t *x = json_object();
    json_object_set_new(x, "index", json_integer(w->worker_index));
    json_object_set_new(x, "worker_id", json_string(w->worker_id));
    json_object_set_new(x, "node_id", json_string(w->node_id));
    json_object_set_new(x, "state", json_string(NAME_OF(worker_states, w->state)));
    json_object_set_new(x, "pid", json_integer(w->pid));
    json_object_set_new(x, "exit_code", json_integer(w->exit_code));
    json_object_set_new(x, "signal", json_integer(w->signal));
    json_object_set_new(x, "restarts", json_integer(w->attempt));
    json_object_set_new(x, "devices", devices_list(w->devices, w->n_devices, true));
    json_object_set_new(x, "reason", json_string(w->reason));
    json_object_set_new(x, "output_lost", json_integer((json_int_t)w->output_lost));
    return x;
}

/* brief: as a listing (corral job list --json), without the spec's
 * command and restart policy, which JobList leaves out */
static json_t *job_json(const Corral__JobInfo *j, bool brief)
{
    const Corral__JobSpec *spec = brief ? NULL : j->spec;
    json_t *o = json_object(), *ws = json_array();
    json_object_set_new(o, "job_id", json_string(j->job_id));
    json_object_set_new(o, "name", json_string(j->name));
    json_object_set_new(o, "state", json_string(NAME_OF(job_states, j->state)));
    json_object_set_new(o, "reason", json_string(j->reason));
    json_object_set_new(o, "queue_position", json_integer(j->queue_position));
    json_object_set_new(o, "parent_job", json_string(j->parent_job ? j->parent_job : ""));
    json_object_set_new(o, "exit_code", json_integer(j->exit_code));
    json_object_set_new(o, "submitted_ms", json_integer(j->submitted_ms));
    json_object_set_new(o, "finished_ms", json_integer(j->finished_ms));
    json_object_set_new(o, "restarts", json_integer(j->restarts));
    json_object_set_new(o, "max_restarts", json_integer(spec ? (json_int_t)spec->max_restarts : 0));
    json_object_set_new(o, "restart_policy",
                        json_string(NAME_OF(restarts, spec ? (unsigned)spec->restart : 0)));
    if (spec && spec->worker && spec->worker->n_argv) {
        cr_buf_t cmd = {0};
        for (size_t i = 0; i < spec->worker->n_argv; i++)
            cr_buf_printf(&cmd, "%s%s", i ? " " : "", spec->worker->argv[i]);
        json_object_set_new(o, "command", json_string(cmd.s));
        cr_buf_free(&cmd);
    }
    for (size_t i = 0; i < j->n_workers; i++)
        json_array_append_new(ws, worker_json(j->workers[i]));
    json_object_set_new(o, "workers", ws);
    return o;
}

static json_t *res_json(Corral__Quantity **tot, size_t nt, Corral__Quantity **fr, size_t nf,
                        Corral__Quantity **rf, size_t nr)
{
    json_t *o = json_object();
    for (size_t i = 0; i < nt; i++) {
        double t = units(tot[i]->amount), f = 0;
        for (size_t k = 0; k < nf; k++)
            if (!strcmp(fr[k]->name, tot[i]->name))
                f = units(fr[k]->amount);
        json_t *x = json_object();
        json_object_set_new(x, "total", json_real(t));
        json_object_set_new(x, "free", json_real(f));
        json_object_set_new(x, "used", json_real(t - f));
        for (size_t k = 0; k < nr; k++)
            if (!strcmp(rf[k]->name, tot[i]->name))
                json_object_set_new(x, "reported_free", json_real(units(rf[k]->amount)));
        json_object_set_new(o, tot[i]->name, x);
    }
    return o;
}

static json_t *node_json(const Corral__NodeInfo *n)
{
    json_t *o = json_object(), *l = json_array();
    json_object_set_new(o, "node_id", json_string(n->node_id));
    json_object_set_new(o, "state", json_string(node_state_name(n->state)));
    json_object_set_new(o, "address", json_string(n->address));
    json_object_set_new(
        o, "resources",
        res_json(n->total, n->n_total, n->free, n->n_free, n->reported_free, n->n_reported_free));
    for (size_t i = 0; i < n->n_labels; i++) {
        char *kv = cr_asprintf("%s=%s", n->labels[i]->key, n->labels[i]->value);
        json_array_append_new(l, json_string(kv));
        free(kv);
    }
    json_object_set_new(o, "labels", l);
    return o;
}

static json_t *pg_json(const Corral__PgInfo *p)
{
    json_t *o = json_object(), *bs = json_array();
    json_object_set_new(o, "pg_id", json_string(p->pg_id));
    json_object_set_new(o, "name", json_string(p->name));
    json_object_set_new(o, "state", json_string(NAME_OF(pg_states, p->state)));
    json_object_set_new(o, "reason", json_string(p->reason));
    json_object_set_new(o, "strategy", json_string(NAME_OF(strategies, p->strategy)));
    json_object_set_new(o, "domain", json_string(p->domain ? p->domain : ""));
    json_object_set_new(o, "queue_position", json_integer(p->queue_position));
    for (size_t i = 0; i < p->n_bundles; i++) {
        const Corral__Bundle *b = p->bundles[i];
        json_t *x = json_object();
        json_object_set_new(x, "index", json_integer((json_int_t)i));
        cr_buf_t res = {0};
        for (size_t k = 0; k < b->n_resources; k++) {
            char q[48];
            sched_format_qty(strcmp(b->resources[k]->name, "memory") == 0 ? SCHED_R_MEMORY : -1,
                             b->resources[k]->amount, q, sizeof(q));
            cr_buf_printf(&res, "%s%s=%s", k ? "," : "", b->resources[k]->name, q);
        }
        json_object_set_new(x, "resources", json_string(res.s ? res.s : ""));
        cr_buf_free(&res);
        json_object_set_new(x, "selector", json_string(b->selector ? b->selector : ""));
        const Corral__BundlePlacement *pl = NULL;
        for (size_t k = 0; k < p->n_placements; k++)
            if (p->placements[k]->bundle_index == i)
                pl = p->placements[k];
        json_object_set_new(x, "node_id", pl ? json_string(pl->node_id) : json_null());
        json_object_set_new(x, "devices",
                            pl ? devices_list(pl->devices, pl->n_devices, false) : json_array());
        json_array_append_new(bs, x);
    }
    json_object_set_new(o, "bundles", bs);
    return o;
}

static json_t *event_json(const Corral__Event *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "seq", json_integer((json_int_t)e->seq));
    json_object_set_new(o, "time_ms", json_integer(e->time_ms));
    json_object_set_new(o, "kind", json_string(e->kind));
    json_object_set_new(o, "job_id", json_string(e->job_id));
    json_object_set_new(o, "node_id", json_string(e->node_id));
    json_object_set_new(o, "message", json_string(e->message));
    return o;
}

/* --------------------------------------------------- who holds what */

/* The devices the running workers of all jobs hold, from the jobs
 * module's own view: (node, device) -> job and worker. */
typedef struct hold {
    char node[64];
    uint32_t dev;
    char job[24];
    char worker[64];
} hold_t;
typedef struct holds {
    CR_VEC(hold_t) v;
    const char *node; /* while asking for one node */
} holds_t;

static void collect_holds(void *ctx, const Corral__JobInfo *j)
{
    holds_t *h = ctx;
    for (size_t i = 0; i < j->n_workers; i++) {
        const Corral__WorkerStatus *w = j->workers[i];
        if (w->state != CORRAL__WORKER_STATE__WORKER_STARTING &&
            w->state != CORRAL__WORKER_STATE__WORKER_RUNNING)
            continue;
        for (size_t k = 0; k < w->n_devices; k++) {
            hold_t *x = CR_VEC_PUSH(&h->v);
            snprintf(x->node, sizeof(x->node), "%s", w->node_id);
            x->dev = w->devices[k];
            snprintf(x->job, sizeof(x->job), "%s", j->job_id);
            snprintf(x->worker, sizeof(x->worker), "%s", w->worker_id);
        }
    }
}

static bool holder(void *ctx, int dev, const char **job, const char **wk)
{
    holds_t *h = ctx;
    for (size_t i = 0; i < h->v.n; i++)
        if (h->v.v[i].dev == (uint32_t)dev && !strcmp(h->v.v[i].node, h->node)) {
            *job = h->v.v[i].job;
            *wk = h->v.v[i].worker;
            return true;
        }
    return false;
}

/* ------------------------------------------------------- the routes */

static void get_health(void *ctx, const web_req_t *rq, web_out_t *out)
{
    out->type = "text/plain";
    cr_buf_printf(&out->body, "ok\n");
}

/* The dashboard (docs/dashboard.md): one page, web/ui/index.html, whose
 * script draws everything from /api/v1; its files come from the binary. */
static void send_asset(web_out_t *out, const char *name)
{
    const web_asset_t *a = web_asset_find(name);
    if (!a) {
        web_out_error(out, 404, "no dashboard file %s (web/ui/; rebuild corral)", name);
        return;
    }
    out->type = a->type;
    cr_buf_append(&out->body, (const char *)a->bytes, a->len);
}

static void get_index(void *ctx, const web_req_t *rq, web_out_t *out)
{
    (void)ctx;
    (void)rq;
    send_asset(out, "index.html");
}

static void get_static(void *ctx, const web_req_t *rq, web_out_t *out)
{
    (void)ctx;
    send_asset(out, rq->args[0]);
}

/* What dispatch.c's Status adds to nodes_status. */
static void fill_counts(Corral__ClusterStatus *s)
{
    s->head_address = D.address ? D.address : "";
    s->pending_jobs = (uint32_t)jobs_count(CR_JOB_PENDING);
    s->running_jobs = (uint32_t)jobs_count(CR_JOB_RUNNING);
    s->pending_groups = (uint32_t)pgs_pending();
}

/* What holds resources and what waits, as corral status --json's
 * "holders" and "holders_not_listed", set on into (dispatch.c's Status
 * gathers the same). */
static void holders_set(json_t *into)
{
    holders_t h = {0};
    jobs_holders(&h);
    pgs_holders(&h);
    json_t *a = json_array();
    for (size_t i = 0; i < h.v.n; i++) {
        const Corral__Holder *x = h.v.v[i];
        json_t *o = json_object();
        json_object_set_new(o, "kind", json_string(x->kind));
        json_object_set_new(o, "id", json_string(x->id));
        json_object_set_new(o, "name", json_string(x->name));
        json_object_set_new(o, "state", json_string(x->state));
        json_object_set_new(o, "reason", json_string(x->reason));
        json_object_set_new(o, "queue_position", json_integer(x->queue_position));
        json_object_set_new(o, "held", json_string(x->held ? x->held : ""));
        json_object_set_new(o, "group", json_string(x->group ? x->group : ""));
        if (!strcmp(x->kind, "group"))
            json_object_set_new(o, "jobs", json_integer(x->jobs));
        json_array_append_new(a, o);
    }
    json_object_set_new(into, "holders", a);
    json_object_set_new(into, "holders_not_listed", json_integer(h.not_listed));
    holders_free(&h);
}

static void get_cluster(void *ctx, const web_req_t *rq, web_out_t *out)
{
    Corral__ClusterStatus s = CORRAL__CLUSTER_STATUS__INIT;
    void *mem;
    nodes_status(&s, &mem);
    fill_counts(&s);
    json_t *o = json_object(), *ns = json_array();
    for (size_t i = 0; i < s.n_nodes; i++)
        json_array_append_new(ns, node_json(s.nodes[i]));
    json_object_set_new(o, "head_address", json_string(s.head_address ? s.head_address : ""));
    json_object_set_new(o, "nodes", ns);
    json_object_set_new(o, "resources", res_json(s.total, s.n_total, s.free, s.n_free, NULL, 0));
    json_object_set_new(o, "pending_jobs", json_integer(s.pending_jobs));
    json_object_set_new(o, "running_jobs", json_integer(s.running_jobs));
    json_object_set_new(o, "pending_groups", json_integer(s.pending_groups));
    holders_set(o);
    nodes_status_free(&s, mem);
    web_out_json(out, 200, o);
}

/* ------------------------------------------------ the overview's summary */

/* What the overview shows, in a size that does not grow with the nodes
 * (docs/api.md "/api/v1/summary"): nodes by state, the resources, each
 * accelerator type's devices, the TPU slices (at most SUMMARY_MAX of them
 * and of types: more are counted, not listed) and what holds or waits.
 * The node table is /api/v1/nodes, paged. */
#define SUMMARY_MAX 256
#define ACCEL_TYPE_LABEL "corral.io/accelerator-type"
#define SLICE_LABEL "corral.io/tpu-slice-name"

typedef struct sum_row {
    int32_t sym; /* the label value's symbol in the scheduler's view; -1: none */
    int rid;
    int64_t total, free;
    size_t nodes;
} sum_row_t;

/* The row of (sym, rid) in rows, added when there is room; NULL when full
 * (*more counts it). */
static sum_row_t *sum_row(sum_row_t *rows, size_t *n, int32_t sym, int rid, size_t *more)
{
    for (size_t i = 0; i < *n; i++)
        if (rows[i].rid == rid && rows[i].sym == sym)
            return &rows[i];
    if (*n == SUMMARY_MAX) {
        (*more)++;
        return NULL;
    }
    rows[*n] = (sum_row_t){.sym = sym, .rid = rid};
    return &rows[(*n)++];
}

static void get_summary(void *ctx, const web_req_t *rq, web_out_t *out)
{
    Corral__ClusterStatus s = CORRAL__CLUSTER_STATUS__INIT;
    void *mem;
    nodes_totals(&s, &mem); /* syncs the scheduler's view read below */
    fill_counts(&s);
    const sched_cluster_t *c = D.cluster;
    sum_row_t *acc = cr_calloc(SUMMARY_MAX, sizeof(*acc)),
              *sl = cr_calloc(SUMMARY_MAX, sizeof(*sl));
    size_t nacc = 0, nsl = 0, acc_more = 0, sl_more = 0;
    size_t by_state[4] = {0}; /* ALIVE, SUSPECT, DEAD, other */
    /* labels as the scheduler's symbols: an int compare per label, not a
     * string's (10,000 nodes of 20 labels each) */
    int32_t ktype = sched_syms_find(&c->labels, ACCEL_TYPE_LABEL, strlen(ACCEL_TYPE_LABEL)),
            kslice = sched_syms_find(&c->labels, SLICE_LABEL, strlen(SLICE_LABEL));
    for (size_t i = 0; i < D.nodes.n; i++) {
        const node_t *n = D.nodes.v[i];
        bool dead = n->state == CORRAL__NODE_STATE__NODE_DEAD;
        by_state[n->state == CORRAL__NODE_STATE__NODE_ALIVE     ? 0
                 : n->state == CORRAL__NODE_STATE__NODE_SUSPECT ? 1
                 : dead                                         ? 2
                                                                : 3]++;
        const sched_node_t *sn = &c->nodes.v[n->sn];
        int32_t type = -1, slice = -1;
        for (uint32_t k = 0; k < sn->nlabels; k++) {
            const sched_label_t *l = &c->lab.v[sn->label_off + k];
            if (l->key == ktype)
                type = l->val;
            else if (l->key == kslice)
                slice = l->val;
        }
        for (int r = 0; r < c->nres; r++) {
            if (r == SCHED_R_CPU || r == SCHED_R_MEMORY)
                continue;
            int64_t total = c->total[(size_t)r * c->nnodes + (size_t)n->sn];
            if (total <= 0)
                continue;
            sum_row_t *x = sum_row(acc, &nacc, type, r, &acc_more);
            if (!x)
                continue;
            x->total += total;
            x->free += dead ? 0 : c->avail[(size_t)r * c->nnodes + (size_t)n->sn];
            x->nodes++;
        }
        sum_row_t *x = slice >= 0 ? sum_row(sl, &nsl, slice, -1, &sl_more) : NULL;
        if (x)
            x->nodes++;
    }
    json_t *o = json_object(), *st = json_object(), *a = json_array(), *sa = json_array();
    json_object_set_new(o, "head_address", json_string(s.head_address ? s.head_address : ""));
    json_object_set_new(o, "nodes_total", json_integer((json_int_t)D.nodes.n));
    json_object_set_new(st, "ALIVE", json_integer((json_int_t)by_state[0]));
    json_object_set_new(st, "SUSPECT", json_integer((json_int_t)by_state[1]));
    json_object_set_new(st, "DEAD", json_integer((json_int_t)by_state[2]));
    if (by_state[3])
        json_object_set_new(st, "UNKNOWN", json_integer((json_int_t)by_state[3]));
    json_object_set_new(o, "nodes_by_state", st);
    json_object_set_new(o, "resources", res_json(s.total, s.n_total, s.free, s.n_free, NULL, 0));
    for (size_t i = 0; i < nacc; i++) {
        json_t *x = json_object();
        json_object_set_new(
            x, "type",
            json_string(acc[i].sym < 0 ? "none" : sched_syms_name(&c->labels, acc[i].sym)));
        json_object_set_new(x, "resource", json_string(c->res.str[acc[i].rid]));
        json_object_set_new(x, "total", json_real(units(acc[i].total)));
        json_object_set_new(x, "used", json_real(units(acc[i].total - acc[i].free)));
        json_object_set_new(x, "free", json_real(units(acc[i].free)));
        json_object_set_new(x, "nodes", json_integer((json_int_t)acc[i].nodes));
        json_array_append_new(a, x);
    }
    json_object_set_new(o, "accelerators", a);
    json_object_set_new(o, "accelerators_not_listed", json_integer((json_int_t)acc_more));
    for (size_t i = 0; i < nsl; i++) {
        json_t *x = json_object();
        json_object_set_new(x, "name", json_string(sched_syms_name(&c->labels, sl[i].sym)));
        json_object_set_new(x, "hosts", json_integer((json_int_t)sl[i].nodes));
        json_array_append_new(sa, x);
    }
    json_object_set_new(o, "slices", sa);
    json_object_set_new(o, "slices_not_listed", json_integer((json_int_t)sl_more));
    json_object_set_new(o, "pending_jobs", json_integer(s.pending_jobs));
    json_object_set_new(o, "running_jobs", json_integer(s.running_jobs));
    json_object_set_new(o, "pending_groups", json_integer(s.pending_groups));
    holders_set(o);
    free(acc);
    free(sl);
    nodes_status_free(&s, mem);
    web_out_json(out, 200, o);
}

#define PAGE_DEFAULT 100
#define PAGE_MAX 1000

/* ?limit=N&continue=TOKEN: TOKEN is the one the previous page gave (the
 * position after its last node), opaque to clients. */
static void get_nodes(void *ctx, const web_req_t *rq, web_out_t *out)
{
    char why[160];
    uint32_t limit, from = 0;
    if (web_query_u32(rq->in, "limit", PAGE_DEFAULT, 1, PAGE_MAX, &limit, why, sizeof(why)) < 0) {
        web_out_error(out, 400, "%s", why);
        return;
    }
    const char *cont = web_query(rq->in, "continue");
    if (cont) {
        char *end;
        unsigned long v = strtoul(cont, &end, 10);
        if (!cont[0] || *end || cont[0] == '-' || v > D.nodes.n) {
            web_out_error(out, 400, "continue: '%.64s' is not a token a page gave", cont);
            return;
        }
        from = (uint32_t)v;
    }
    /* ?label=k=v: only the nodes with that label (the slice page's hosts) */
    const char *label = web_query(rq->in, "label");
    const char *eq = label ? strchr(label, '=') : NULL;
    if (label && (!eq || eq == label)) {
        web_out_error(out, 400, "label: expected key=value, got '%.64s'", label);
        return;
    }
    json_t *o = json_object(), *a = json_array();
    size_t i = from;
    for (; i < D.nodes.n && json_array_size(a) < limit; i++) {
        if (label) {
            const cr_node_t *d = D.nodes.v[i]->desc;
            bool has = false;
            for (size_t k = 0; k < d->labels.n && !has; k++)
                has = strlen(d->labels.v[k].key) == (size_t)(eq - label) &&
                      !strncmp(d->labels.v[k].key, label, (size_t)(eq - label)) &&
                      !strcmp(d->labels.v[k].value, eq + 1);
            if (!has)
                continue;
        }
        Corral__NodeInfo ni;
        void *mem;
        node_fill(D.nodes.v[i], &ni, &mem, false);
        json_array_append_new(a, node_json(&ni));
        node_fill_free(&ni, mem);
    }
    json_object_set_new(o, "nodes", a);
    json_object_set_new(o, "total", json_integer((json_int_t)D.nodes.n));
    char next[24];
    snprintf(next, sizeof(next), "%zu", i);
    json_object_set_new(o, "continue", i < D.nodes.n ? json_string(next) : json_null());
    web_out_json(out, 200, o);
}

/* The whole description of node id (a remote one's from state.db), NULL
 * with the answer given. */
static cr_node_t *node_desc(const char *id, node_t **np, web_out_t *out)
{
    node_t *n = node_by_id(id);
    if (!n) {
        web_out_error(out, 404, "no node %.100s ('corral nodes' lists them)", id);
        return NULL;
    }
    *np = n;
    Corral__NodeInfo ni;
    void *mem;
    node_fill(n, &ni, &mem, true);
    json_error_t je;
    json_t *j = ni.node_json ? json_loads(ni.node_json, 0, &je) : NULL;
    node_fill_free(&ni, mem);
    cr_node_t *d = hw_node_new();
    hw_json_error_t he;
    if (!j || hw_node_from_json(j, d, &he) < 0) {
        json_decref(j);
        hw_node_free(d);
        web_out_error(out, 500, "node %s: its description cannot be read back", id);
        return NULL;
    }
    json_decref(j);
    return d;
}

static void get_node(void *ctx, const web_req_t *rq, web_out_t *out)
{
    node_t *n;
    cr_node_t *d = node_desc(rq->args[0], &n, out);
    if (!d)
        return;
    web_out_json(out, 200, hw_node_to_json(d));
    hw_node_free(d);
}

static void get_topology(void *ctx, const web_req_t *rq, web_out_t *out)
{
    node_t *n;
    cr_node_t *d = node_desc(rq->args[0], &n, out);
    if (!d)
        return;
    web_out_json(out, 200, hw_topo_to_json(d));
    hw_node_free(d);
}

/* The devices of node n (d its description) into a: the head's own read
 * now, a remote node's as its agent last sent them (telemetry.c). */
static void node_devices(node_t *n, const cr_node_t *d, holds_t *h, json_t *a)
{
    h->node = n->id;
    web_reading_t *given = n->local ? NULL : telemetry_latest(n, d->devices.n);
    json_t *v = web_devices_json(d, &D.hwo, given, holder, h);
    free(given);
    json_array_extend(a, v);
    json_decref(v);
}

/* /api/v1/nodes/{id}/telemetry?since=MS: the head's last hour of the
 * node's devices (telemetry.c), from since (wall clock, ms) on. */
static void get_telemetry(void *ctx, const web_req_t *rq, web_out_t *out)
{
    node_t *n = node_by_id(rq->args[0]);
    if (!n) {
        web_out_error(out, 404, "no node %.100s ('corral nodes' lists them)", rq->args[0]);
        return;
    }
    int64_t since = 0;
    const char *s = web_query(rq->in, "since");
    if (s) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (!s[0] || *end || errno || v < 0) {
            web_out_error(out, 400, "since: expected milliseconds since the epoch, got '%.64s'", s);
            return;
        }
        since = v;
    }
    web_out_json(out, 200, telemetry_history_json(n, since));
}

/* The head's own node's readings, for telemetry.c's history. */
static void local_readings(web_reading_t *out, size_t n)
{
    holds_t h = {.node = D.self->id};
    jobs_info_each(NULL, collect_holds, &h);
    for (size_t i = 0; i < n && i < D.node->devices.n; i++) {
        const char *job, *wk;
        web_device_read(D.node, &D.hwo, (int)i, holder(&h, (int)i, &job, &wk), &out[i]);
    }
    CR_VEC_FREE(&h.v);
}

static void get_devices(void *ctx, const web_req_t *rq, web_out_t *out)
{
    holds_t h = {0};
    jobs_info_each(NULL, collect_holds, &h);
    json_t *a = json_array();
    if (rq->nargs) { /* /nodes/{id}/devices */
        node_t *n;
        cr_node_t *d = node_desc(rq->args[0], &n, out);
        if (!d) {
            json_decref(a);
            CR_VEC_FREE(&h.v);
            return;
        }
        node_devices(n, d, &h, a);
        hw_node_free(d);
    } else {
        for (size_t i = 0; i < D.nodes.n; i++) {
            node_t *n = D.nodes.v[i];
            if (!n->ndev && !n->local && !n->desc->devices.n)
                continue;
            web_out_t scratch = {0};
            cr_node_t *d = n->slim ? node_desc(n->id, &n, &scratch) : n->desc;
            web_out_fini(&scratch);
            if (!d)
                continue;
            node_devices(n, d, &h, a);
            if (d != n->desc)
                hw_node_free(d);
        }
    }
    CR_VEC_FREE(&h.v);
    json_t *o = json_object();
    json_object_set_new(o, "devices", a);
    web_out_json(out, 200, o);
}

typedef struct jobs_ctx {
    json_t *a;
    bool brief;
} jobs_ctx_t;

static void add_job(void *ctx, const Corral__JobInfo *j)
{
    jobs_ctx_t *c = ctx;
    json_array_append_new(c->a, job_json(j, c->brief));
}

static void get_jobs(void *ctx, const web_req_t *rq, web_out_t *out)
{
    jobs_ctx_t c = {.a = json_array(), .brief = true};
    jobs_info_each(rq->who == WEB_WHO_JOB ? rq->job_id : NULL, add_job, &c);
    json_t *o = json_object();
    json_object_set_new(o, "jobs", c.a);
    web_out_json(out, 200, o);
}

static void get_job(void *ctx, const web_req_t *rq, web_out_t *out)
{
    bool workers = ctx != NULL;
    const char *id = rq->args[0];
    if (rq->who == WEB_WHO_JOB && strcmp(id, rq->job_id) != 0) {
        web_out_error(out, 403, "a job credential may read only its own job (%s), not %.32s",
                      rq->job_id, id);
        return;
    }
    jobs_ctx_t c = {.a = json_array()};
    jobs_info_each(id, add_job, &c);
    if (json_array_size(c.a) == 0) {
        json_decref(c.a);
        web_out_error(out, 404, "no job %.32s ('corral job list' lists them)", id);
        return;
    }
    json_t *job = json_incref(json_array_get(c.a, 0));
    json_decref(c.a);
    if (workers) { /* {"job_id", "workers"}: the job's workers alone */
        json_t *o = json_object();
        json_object_set(o, "job_id", json_object_get(job, "job_id"));
        json_object_set(o, "workers", json_object_get(job, "workers"));
        json_decref(job);
        job = o;
    }
    web_out_json(out, 200, job);
}

typedef struct pgs_ctx {
    json_t *a;
    const char *only;
} pgs_ctx_t;

static void add_pg(void *ctx, const Corral__PgInfo *p)
{
    pgs_ctx_t *c = ctx;
    if (c->only && strcmp(c->only, p->pg_id) && strcmp(c->only, p->name))
        return;
    json_array_append_new(c->a, pg_json(p));
}

static void get_pgs(void *ctx, const web_req_t *rq, web_out_t *out)
{
    pgs_ctx_t c = {.a = json_array(), .only = rq->nargs ? rq->args[0] : NULL};
    pgs_info_each(add_pg, &c);
    if (c.only) {
        if (!json_array_size(c.a)) {
            json_decref(c.a);
            web_out_error(out, 404, "no placement group %.100s", c.only);
            return;
        }
        json_t *o = json_incref(json_array_get(c.a, 0));
        json_decref(c.a);
        web_out_json(out, 200, o);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "groups", c.a);
    web_out_json(out, 200, o);
}

typedef struct ev_ctx {
    json_t *a;
    const char *job; /* a job credential's: its events only */
    uint32_t limit;
} ev_ctx_t;

static void add_event(void *ctx, const Corral__Event *e)
{
    ev_ctx_t *c = ctx;
    json_array_append_new(c->a, event_json(e));
}

static int since_of(const web_req_t *rq, uint64_t *since, web_out_t *out)
{
    const char *s = web_query(rq->in, "since");
    *since = 0;
    if (!s)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!s[0] || *end || s[0] == '-' || errno) {
        web_out_error(out, 400, "since: expected an event's seq, got '%.64s'", s);
        return -1;
    }
    *since = v;
    return 0;
}

static void get_events(void *ctx, const web_req_t *rq, web_out_t *out)
{
    char why[160];
    ev_ctx_t c = {.job = rq->who == WEB_WHO_JOB ? rq->job_id : NULL};
    uint64_t since;
    if (web_query_u32(rq->in, "limit", 1000, 1, 100000, &c.limit, why, sizeof(why)) < 0) {
        web_out_error(out, 400, "%s", why);
        return;
    }
    if (since_of(rq, &since, out) < 0)
        return;
    /* the newest limit: only those are read (a job credential's, its
     * job's newest through state.db's index on the job) */
    c.a = json_array();
    if (c.job) {
        events_each_of_job(c.job, since, c.limit, true, add_event, &c);
    } else {
        uint64_t from = events_newest((size_t)c.limit + 1);
        events_each_since(from > since ? from : since, 0, add_event, &c);
    }
    json_t *o = json_object();
    json_object_set_new(o, "events", c.a);
    web_out_json(out, 200, o);
}

/* ---- /api/v1/events/stream: Server-Sent Events ---- */

#define SSE_KEEPALIVE_MS 15000
#define SSE_PENDING_MAX (1 << 20)

typedef struct sse {
    uint64_t seq; /* the last event queued */
    char job[WEB_ID_MAX + 1];
    cr_buf_t pending;
    size_t off;
    int64_t last_ms;
} sse_t;

static void sse_event(void *ctx, const Corral__Event *e)
{
    sse_t *s = ctx;
    if (s->pending.len - s->off > SSE_PENDING_MAX || e->seq <= s->seq)
        return; /* the rest next time, from s->seq */
    s->seq = e->seq;
    if (s->job[0] && strcmp(s->job, e->job_id) != 0)
        return;
    json_t *j = event_json(e);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    /* the kind is the SSE event name: kinds are words ("started") */
    char kind[32];
    size_t k = 0;
    for (const char *p = e->kind; *p && k + 1 < sizeof(kind); p++)
        if (isalnum((unsigned char)*p) || *p == '_' || *p == '-')
            kind[k++] = *p;
    kind[k] = '\0';
    cr_buf_printf(&s->pending, "id: %llu\nevent: %s\ndata: %s\n\n", (unsigned long long)e->seq,
                  k ? kind : "event", text ? text : "{}");
    free(text);
}

static ssize_t sse_read(void *ctx, char *buf, size_t size)
{
    sse_t *s = ctx;
    if (D.shutting_down)
        return -1;
    if (s->off == s->pending.len) {
        s->off = s->pending.len = 0;
        if (D.st && s->job[0]) /* a job credential's: its job's, through the index */
            events_each_of_job(s->job, s->seq, EVENTS_PUMP_MAX, false, sse_event, s);
        else if (D.st)
            events_each_since(s->seq, EVENTS_PUMP_MAX, sse_event, s);
        int64_t now = cr_mono_ms();
        if (!s->pending.len && now - s->last_ms >= SSE_KEEPALIVE_MS)
            cr_buf_printf(&s->pending, ": keepalive\n\n");
        if (!s->pending.len)
            return 0;
        s->last_ms = now;
    }
    size_t n = s->pending.len - s->off;
    if (n > size)
        n = size;
    memcpy(buf, s->pending.s + s->off, n);
    s->off += n;
    return (ssize_t)n;
}

static void sse_free(void *ctx)
{
    sse_t *s = ctx;
    cr_buf_free(&s->pending);
    free(s);
}

static void get_stream(void *ctx, const web_req_t *rq, web_out_t *out)
{
    uint64_t since;
    if (since_of(rq, &since, out) < 0)
        return;
    sse_t *s = cr_calloc(1, sizeof(*s));
    s->seq = since;
    if (!web_query(rq->in, "since")) /* from now on: after the newest, none read */
        s->seq = events_newest(1);
    if (rq->who == WEB_WHO_JOB)
        snprintf(s->job, sizeof(s->job), "%s", rq->job_id);
    cr_buf_printf(&s->pending, ": corral events from seq %llu\n\n", (unsigned long long)s->seq);
    s->last_ms = cr_mono_ms();
    out->status = 200;
    out->type = "text/event-stream";
    out->stream = sse_read;
    out->stream_ctx = s;
    out->stream_free = sse_free;
}

/* ---- /metrics ---- */

static void metric1(cr_buf_t *b, const char *name, const char *type, const char *help, double v)
{
    web_prom_family(b, name, type, help);
    web_prom_sample(b, name, NULL, 0, v);
}

static void get_metrics(void *ctx, const web_req_t *rq, web_out_t *out)
{
    cr_buf_t *b = &out->body;
    out->type = "text/plain; version=0.0.4; charset=utf-8";
    static const Corral__NodeState states[] = {CORRAL__NODE_STATE__NODE_ALIVE,
                                               CORRAL__NODE_STATE__NODE_SUSPECT,
                                               CORRAL__NODE_STATE__NODE_DEAD};
    web_prom_family(b, "corral_nodes", "gauge", "nodes the head knows, by state");
    for (size_t s = 0; s < CR_ARRAY_SIZE(states); s++) {
        size_t n = 0;
        for (size_t i = 0; i < D.nodes.n; i++)
            n += D.nodes.v[i]->state == states[s];
        const char *l[] = {"state", node_state_name(states[s])};
        web_prom_sample(b, "corral_nodes", l, 1, (double)n);
    }
    Corral__ClusterStatus s = CORRAL__CLUSTER_STATUS__INIT;
    void *mem;
    nodes_totals(&s, &mem); /* not a NodeInfo per node: 10,000 cost 10 ms a scrape */
    fill_counts(&s);
    web_prom_family(b, "corral_resource_capacity", "gauge",
                    "resources of the alive nodes, in units (bytes for memory)");
    for (size_t i = 0; i < s.n_total; i++) {
        const char *l[] = {"resource", s.total[i]->name};
        web_prom_sample(b, "corral_resource_capacity", l, 1, units(s.total[i]->amount));
    }
    web_prom_family(b, "corral_resource_used", "gauge",
                    "resources held by workers and placement groups, in units");
    for (size_t i = 0; i < s.n_total; i++) {
        double f = 0;
        for (size_t k = 0; k < s.n_free; k++)
            if (!strcmp(s.free[k]->name, s.total[i]->name))
                f = units(s.free[k]->amount);
        const char *l[] = {"resource", s.total[i]->name};
        web_prom_sample(b, "corral_resource_used", l, 1, units(s.total[i]->amount) - f);
    }
    metric1(b, "corral_jobs_pending", "gauge", "jobs waiting for resources", s.pending_jobs);
    metric1(b, "corral_jobs_running", "gauge", "jobs running", s.running_jobs);
    metric1(b, "corral_placement_groups_pending", "gauge", "placement groups waiting",
            s.pending_groups);
    nodes_status_free(&s, mem);
    web_prom_family(b, "corral_placement_seconds", "histogram",
                    "time of one scheduler decision (a job's gang or a group's bundles)");
    for (int i = 0; i < HEAD_PLACE_BUCKETS; i++) {
        char le[32];
        snprintf(le, sizeof(le), "%g", place_le[i]);
        const char *l[] = {"le", le};
        web_prom_sample(b, "corral_placement_seconds_bucket", l, 1,
                        (double)head_counters.place_bucket[i]);
    }
    const char *inf[] = {"le", "+Inf"};
    web_prom_sample(b, "corral_placement_seconds_bucket", inf, 1,
                    (double)head_counters.place_count);
    web_prom_sample(b, "corral_placement_seconds_sum", NULL, 0, head_counters.place_sum);
    web_prom_sample(b, "corral_placement_seconds_count", NULL, 0,
                    (double)head_counters.place_count);
    metric1(b, "corral_heartbeats_total", "counter", "heartbeats received from agents",
            (double)head_counters.heartbeats);
    cr_raw_stats_t rs;
    cr_net_raw_stats(&rs);
    web_prom_family(b, "corral_output_raw_bytes_total", "counter",
                    "job output sent and received in raw log chunks (docs/protocol.md)");
    const char *rl[][2] = {{"way", "sent"}, {"way", "received"}};
    double rv[] = {(double)rs.sent, (double)rs.received};
    for (size_t i = 0; i < 2; i++)
        web_prom_sample(b, "corral_output_raw_bytes_total", rl[i], 1, rv[i]);
    metric1(b, "corral_output_sendfile_bytes_total", "counter",
            "of the raw bytes sent, those sent to followers by sendfile(2) from the head's files, "
            "never copied by the head",
            (double)rs.sent_kernel);
    metric1(b, "corral_output_relayed_bytes_total", "counter",
            "remote job output sent to followers as it arrived, not read back from the head's copy",
            (double)follow_relayed());
    metric1(b, "corral_state_commits_total", "counter",
            "group commits of state.db (one per loop turn that changed something)",
            (double)head_counters.commits);
    metric1(b, "corral_state_commit_failures_total", "counter",
            "group commits that failed (their turn's answers were errors)",
            (double)head_counters.commit_failures);
    metric1(b, "corral_telemetry_history_bytes", "gauge",
            "memory the head's telemetry history holds (at most 64 MiB, docs/api.md)",
            (double)telemetry_history_bytes());
    if (D.self) { /* the head's own node: its in-process agent */
        holds_t h = {.node = D.self->id};
        jobs_info_each(NULL, collect_holds, &h);
        web_device_metrics(b, D.node, &D.hwo, holder, &h);
        CR_VEC_FREE(&h.v);
    }
}

/* ---------------------------------------------------- start and stop */

/* A worker's CORRAL_JOB_TOKEN as a Bearer: true for a credential of the
 * cluster's token whose worker runs at that attempt (as the protocol
 * accepts it: jobs_scope_current), with its job, parsed as the protocol
 * parses them (net/auth.c cr_job_token_parse). */
static bool job_bearer(void *ctx, const char *text, char *job_id, size_t size)
{
    cr_job_scope_t s;
    uint8_t cred[CR_TOKEN_LEN], want[CR_TOKEN_LEN];
    if (cr_job_token_parse(text, &s, cred) < 0)
        return false;
    cr_job_credential(W.token, &s, want);
    bool ok = web_key_equal(cred, want, CR_TOKEN_LEN);
    memset(want, 0, sizeof(want));
    char why[160];
    if (ok && !jobs_scope_current(&s, why, sizeof(why))) {
        cr_info("dashboard: a job credential of job %s refused: %s", s.job_id, why);
        ok = false;
    }
    if (ok)
        snprintf(job_id, size, "%s", s.job_id);
    return ok;
}

static const web_route_t routes[] = {
    {"GET", "/healthz", WEB_PUBLIC, get_health, NULL},
    {"GET", "/metrics", 0, get_metrics, NULL},
    {"GET", "/", 0, get_index, NULL},
    {"GET", "/static/*", 0, get_static, NULL},
    {"GET", "/api/v1/cluster", 0, get_cluster, NULL},
    {"GET", "/api/v1/summary", 0, get_summary, NULL},
    {"GET", "/api/v1/nodes", 0, get_nodes, NULL},
    {"GET", "/api/v1/nodes/{}", 0, get_node, NULL},
    {"GET", "/api/v1/nodes/{}/topology", 0, get_topology, NULL},
    {"GET", "/api/v1/nodes/{}/devices", 0, get_devices, NULL},
    {"GET", "/api/v1/nodes/{}/telemetry", 0, get_telemetry, NULL},
    {"GET", "/api/v1/devices", 0, get_devices, NULL},
    {"GET", "/api/v1/jobs", WEB_JOB, get_jobs, NULL},
    {"GET", "/api/v1/jobs/{}", WEB_JOB, get_job, NULL},
    {"GET", "/api/v1/jobs/{}/workers", WEB_JOB, get_job, (void *)1},
    {"GET", "/api/v1/pgs", 0, get_pgs, NULL},
    {"GET", "/api/v1/pgs/{}", 0, get_pgs, NULL},
    {"GET", "/api/v1/events", WEB_JOB, get_events, NULL},
    {"GET", "/api/v1/events/stream", WEB_JOB, get_stream, NULL},
};

int head_web_start(const char *host, int port, const uint8_t token[CR_TOKEN_LEN], const char *cert,
                   const char *key, const char *cert_file)
{
    char why[512];
    char *stale = cr_asprintf("%s/dashboard", D.session); /* a dead head's, taken over */
    unlink(stale);
    free(stale);
    memcpy(W.token, token, CR_TOKEN_LEN);
    web_config_t wc = {.loop = &D.loop,
                       .who = "dashboard",
                       .host = host,
                       .port = (uint16_t)port,
                       .token = token,
                       .login = true,
                       .job_bearer = job_bearer,
                       .tls_cert_pem = cert,
                       .tls_key_pem = key};
    W.web = web_new(&wc, why, sizeof(why));
    if (!W.web) {
        fprintf(stderr, "corrald: %s\n", why);
        return CR_EIO;
    }
    head_web_routes(W.web);
    telemetry_start(local_readings);
    if (web_listen(W.web, why, sizeof(why)) < 0) {
        fprintf(stderr, "corrald: %s\n", why);
        web_free(W.web);
        W.web = NULL;
        return CR_EIO;
    }
    const char *h = host && host[0] ? host : "127.0.0.1";
    char name[256] = "";
    if (!strcmp(h, "0.0.0.0") || !strcmp(h, "::")) { /* every address: a name to reach it by */
        if (D.node_ip && D.node_ip[0])
            h = D.node_ip;
        else if (gethostname(name, sizeof(name) - 1) == 0 && name[0] &&
                 strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") ==
                     strlen(name))
            h = name; /* the certificate the head makes names it (head/session.c) */
    }
    snprintf(W.url, sizeof(W.url), "%s://%s%s%s:%d/", cert ? "https" : "http",
             strchr(h, ':') ? "[" : "", h, strchr(h, ':') ? "]" : "", web_port(W.web));
    /* the URL with the login token: the session's, for 'corral dashboard' */
    char *text = cr_asprintf("%s?token=%s\n", W.url, web_login_token(W.web));
    int e = session_write("dashboard", text);
    free(text);
    fprintf(stderr, "corrald: dashboard on %s\n", W.url);
    if (cert) { /* how a browser, curl or Prometheus trusts it (corral start says it) */
        const cr_tls_ops_t *t = cr_tls_load(why, sizeof(why));
        uint8_t fp[CR_TLS_FP_LEN];
        char text2[96] = "?";
        if (t && t->fingerprint(cert, strlen(cert), fp, why, sizeof(why)) == 0)
            cr_tls_fp_format(fp, text2, sizeof(text2));
        fprintf(stderr, "corrald: dashboard certificate %s in %s\n", text2, cert_file);
    }
    return e;
}

void head_web_routes(web_t *w)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(routes); i++)
        web_route_add(w, &routes[i]);
}

void head_web_stop(void)
{
    telemetry_stop();
    web_free(W.web);
    W.web = NULL;
    memset(W.token, 0, sizeof(W.token));
    if (D.session) {
        char *p = cr_asprintf("%s/dashboard", D.session);
        unlink(p);
        free(p);
    }
}
