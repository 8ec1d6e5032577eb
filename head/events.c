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
    if (D.st && cr_state_event_append(D.st, &ev, NULL) < 0)
        cr_warn("events: %s", cr_state_errmsg(D.st));
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

void req_events(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__EventsRequest *q = e->events_request;
    cr_state_event_t *v = NULL;
    size_t n = 0;
    int err = cr_state_event_list(D.st, (int64_t)q->since_seq, 0, &v, &n);
    if (err < 0) {
        cr_conn_reply_error(c, e->id, err, "%s", cr_state_errmsg(D.st));
        return;
    }
    size_t first = q->limit && n > q->limit ? n - q->limit : 0; /* the newest */
    Corral__Event *evs = cr_calloc(n + 1, sizeof(*evs));
    Corral__Event **p = cr_calloc(n + 1, sizeof(*p));
    char(*ids)[24] = cr_calloc(n + 1, sizeof(*ids));
    for (size_t i = first; i < n; i++) {
        Corral__Event *ev = &evs[i - first];
        corral__event__init(ev);
        ev->seq = (uint64_t)v[i].id;
        ev->time_ms = v[i].time_ms;
        ev->kind = v[i].kind;
        if (v[i].job_id)
            snprintf(ids[i], sizeof(ids[i]), "%lld", (long long)v[i].job_id);
        ev->job_id = ids[i];
        ev->node_id = v[i].node_id ? v[i].node_id : "";
        ev->message = v[i].message ? v[i].message : "";
        p[i - first] = ev;
    }
    Corral__EventList r = CORRAL__EVENT_LIST__INIT;
    r.events = p;
    r.n_events = n - first;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_EVENT_LIST;
    a.event_list = &r;
    reply(c, e, &a);
    if (q->follow) /* then each new event, pushed by daemon/follow.c */
        follow_events_add(c, e->id, n ? (uint64_t)v[n - 1].id : q->since_seq);
    free(ids);
    free(p);
    free(evs);
    cr_state_event_list_free(v, n);
}

size_t events_each_since(uint64_t since_seq, void (*emit)(void *ctx, const Corral__Event *ev),
                         void *ctx)
{
    cr_state_event_t *v = NULL;
    size_t n = 0;
    if (cr_state_event_list(D.st, (int64_t)since_seq, 0, &v, &n) < 0)
        return 0;
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
