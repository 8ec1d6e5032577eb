/* The head's event log (`corral events`, docs/runtime.md): what happened
 * to jobs, nodes and groups, appended to state.db in the turn's
 * transaction and logged; the EventsRequest answer and the events that
 * follow.c pushes to followers. */
#include "head/head.h"
#include "head/follow.h"
#include <stdio.h>

const char *node_name(void)
{
    return D.self ? D.self->id : "head";
}

void event_v(const char *kind, int64_t job_id, const char *node, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    cr_state_event_t ev = {.time_ms = cr_wall_ms(),
                           .kind = (char *)kind,
                           .job_id = job_id,
                           .node_id = (char *)node,
                           .message = msg};
    int64_t id = 0;
    if (D.st && cr_state_event_append(D.st, &ev, &id) < 0)
        cr_warn("events: %s", cr_state_errmsg(D.st));
    else if (id > D.event_last_id)
        D.event_last_id = id;
    if (job_id)
        cr_info("%s job %lld: %s", kind, (long long)job_id, msg);
    else
        cr_info("%s: %s", kind, msg);
}

void head_event(const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    event_v(kind, 0, node_name(), fmt, ap);
    va_end(ap);
}

void event_node(const char *kind, const node_t *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    event_v(kind, 0, n->id, fmt, ap);
    va_end(ap);
}

/* Ids are given in order (AUTOINCREMENT), so the newest keep are those
 * above the newest id less keep; fewer when job retention took some. One
 * range delete on the primary key per tick that has anything to take:
 * the first after a start takes what an earlier head left over. */
void events_retention(void)
{
    int64_t keep = D.keep_events ? D.keep_events : CR_KEEP_EVENTS_DEFAULT;
    int64_t upto = D.event_last_id - keep;
    if (!D.st || upto <= D.event_trimmed_to)
        return;
    if (cr_state_event_trim(D.st, upto) < 0) {
        cr_warn("events: %s", cr_state_errmsg(D.st));
        return;
    }
    D.event_trimmed_to = upto;
}

void req_events(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__EventsRequest *q = e->events_request;
    char msg[256], token[64] = "";
    int64_t from;
    int err = page_parse_id(q->continue_token, "events", &from, msg, sizeof(msg));
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "%s", msg);
        return;
    }
    int64_t after = from ? from - 1 : (int64_t)q->since_seq, newest;
    /* the newest limit (a later page, a token, goes on to the end): only
     * those, and at most a page of them, are read, not the whole log
     * after the cursor (100,000 events by default: 50 ms of the head's
     * loop for `corral events --limit 5`) */
    if (!from && q->limit) {
        if ((err = cr_state_event_newest(D.st, (size_t)q->limit + 1, &newest)) < 0) {
            cr_conn_reply_error(c, e->id, err, "%s", cr_state_errmsg(D.st));
            return;
        }
        if (newest > after)
            after = newest;
    }
    size_t want = page_items(q->page_limit);
    cr_state_event_t *v = NULL;
    size_t n = 0;
    if ((err = cr_state_event_list(D.st, after, want, &v, &n)) < 0) {
        cr_conn_reply_error(c, e->id, err, "%s", cr_state_errmsg(D.st));
        return;
    }
    Corral__Event *evs = cr_calloc(n + 1, sizeof(*evs));
    Corral__Event **p = cr_calloc(n + 1, sizeof(*p));
    char(*ids)[24] = cr_calloc(n + 1, sizeof(*ids));
    size_t budget = page_budget(), used = 0, i;
    for (i = 0; i < n; i++) {
        Corral__Event *ev = &evs[i];
        corral__event__init(ev);
        ev->seq = (uint64_t)v[i].id;
        ev->time_ms = v[i].time_ms;
        ev->kind = v[i].kind;
        if (v[i].job_id)
            snprintf(ids[i], sizeof(ids[i]), "%lld", (long long)v[i].job_id);
        ev->job_id = ids[i];
        ev->node_id = v[i].node_id ? v[i].node_id : "";
        ev->message = v[i].message ? v[i].message : "";
        size_t cost = page_item_cost(corral__event__get_packed_size(ev));
        if (used + cost > budget && i > 0)
            break; /* (events are bounded far below a frame: the first always fits) */
        used += cost;
        p[i] = ev;
    }
    /* a full read may have left some: counted, not read */
    size_t total = n;
    if (n == want && !q->follow && cr_state_event_count(D.st, after, &total) < 0)
        total = n;
    if (i < total && !q->follow) {
        char key[24];
        snprintf(key, sizeof(key), "%lld", (long long)(i < n ? v[i].id : v[n - 1].id + 1));
        page_token("events", key, token, sizeof(token));
    }
    Corral__EventList r = CORRAL__EVENT_LIST__INIT;
    r.events = p;
    r.n_events = i;
    r.continue_token = token;
    r.remaining = q->follow ? 0 : (uint32_t)(total - i);
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_EVENT_LIST;
    a.event_list = &r;
    reply(c, e, &a);
    /* then each new event (and, following, the rest of a long backlog),
     * pushed by head/follow.c */
    if (q->follow)
        follow_events_add(c, e->id, i > 0 ? (uint64_t)v[i - 1].id : (uint64_t)after);
    free(ids);
    free(p);
    free(evs);
    cr_state_event_list_free(v, n);
}

uint64_t events_newest(size_t k)
{
    int64_t id = 0;
    if (!D.st || cr_state_event_newest(D.st, k, &id) < 0)
        return 0;
    return id > 0 ? (uint64_t)id : 0;
}

/* v's events to emit, as Corral__Events borrowing v's strings; frees v */
static size_t emit_all(cr_state_event_t *v, size_t n,
                       void (*emit)(void *ctx, const Corral__Event *ev), void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        char id[24] = "";
        if (v[i].job_id)
            snprintf(id, sizeof(id), "%lld", (long long)v[i].job_id);
        Corral__Event ev = CORRAL__EVENT__INIT;
        ev.seq = (uint64_t)v[i].id;
        ev.time_ms = v[i].time_ms;
        ev.kind = v[i].kind;
        ev.job_id = id;
        ev.node_id = v[i].node_id ? v[i].node_id : "";
        ev.message = v[i].message ? v[i].message : "";
        emit(ctx, &ev);
    }
    cr_state_event_list_free(v, n);
    return n;
}

size_t events_each_since(uint64_t since_seq, size_t limit,
                         void (*emit)(void *ctx, const Corral__Event *ev), void *ctx)
{
    cr_state_event_t *v = NULL;
    size_t n = 0;
    if (cr_state_event_list(D.st, (int64_t)since_seq, limit, &v, &n) < 0)
        return 0;
    return emit_all(v, n, emit, ctx);
}

size_t events_each_of_job(const char *job_id, uint64_t since_seq, size_t limit, bool newest,
                          void (*emit)(void *ctx, const Corral__Event *ev), void *ctx)
{
    int64_t id;
    cr_state_event_t *v = NULL;
    size_t n = 0;
    if (!D.st || cr_parse_i64(job_id, 10, &id) != 0 || id <= 0 ||
        cr_state_event_list_job(D.st, id, (int64_t)since_seq, limit, newest, &v, &n) < 0)
        return 0;
    return emit_all(v, n, emit, ctx);
}
