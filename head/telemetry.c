/* The head's device telemetry (head/telemetry.h): every device's latest
 * reading and its last hour in a ring. A remote node's readings come in
 * its agent's heartbeats (only the changed ones, at most once per
 * WEB_TELEMETRY_PERIOD_MS, proto/corral.proto DeviceTelemetry); the
 * head's own node's are read by web.c at each tick. One timer samples
 * every alive node's latest readings into the rings every period, so a
 * chart's points are evenly spaced whatever the agents sent. Memory is
 * bounded: TEL_HISTORY_MAX_BYTES for all rings, a device past it keeps no
 * history; the latest readings are one per device the cluster has. */
#include "head/telemetry.h"
#include <math.h>
#include <stdio.h>

/* One sample: 20 bytes. NaN: unknown; mem_mib UINT32_MAX: unknown. */
typedef struct sample {
    uint32_t t_s; /* wall clock, seconds since the epoch */
    float util, power, temp;
    uint32_t mem_mib;
} sample_t;

typedef struct ring {
    sample_t *v; /* TEL_SLOTS, NULL until the first sample */
    uint32_t next, n;
} ring_t;

typedef struct tnode {
    uint32_t ndev;
    web_reading_t *latest; /* ndev */
    int64_t *at_ms;        /* cr_mono_ms of each latest, 0 none */
    ring_t *rings;         /* ndev */
    bool full;             /* a ring was refused: the bound */
    bool warned;           /* a bad index was logged */
} tnode_t;

static struct {
    CR_VEC(tnode_t *) by_sn; /* by node_t.sn */
    uv_timer_t *timer;
    telemetry_local_fn local;
    size_t bytes;
} T;

static tnode_t *tnode_of(const node_t *n, uint32_t ndev, bool create)
{
    if (n->sn < 0)
        return NULL;
    size_t sn = (size_t)n->sn;
    if (sn >= T.by_sn.n) {
        if (!create)
            return NULL;
        while (T.by_sn.n <= sn)
            *CR_VEC_PUSH(&T.by_sn) = NULL;
    }
    tnode_t *t = T.by_sn.v[sn];
    if (t && (t->ndev >= ndev || !create))
        return t;
    if (!create)
        return NULL;
    if (!t) {
        t = cr_calloc(1, sizeof(*t));
        T.by_sn.v[sn] = t;
    }
    /* grow to ndev (a node re-registered with more devices) */
    t->latest = cr_realloc(t->latest, ndev * sizeof(*t->latest));
    t->at_ms = cr_realloc(t->at_ms, ndev * sizeof(*t->at_ms));
    t->rings = cr_realloc(t->rings, ndev * sizeof(*t->rings));
    for (uint32_t i = t->ndev; i < ndev; i++) {
        memset(&t->latest[i], 0, sizeof(t->latest[i]));
        t->at_ms[i] = 0;
        memset(&t->rings[i], 0, sizeof(t->rings[i]));
    }
    t->ndev = ndev;
    return t;
}

static void reading_from_msg(web_reading_t *r, const Corral__DeviceTelemetry *m)
{
    memset(r, 0, sizeof(*r));
    hw_telemetry_init(&r->t);
    r->available = m->available;
    snprintf(r->why, sizeof(r->why), "%s", m->why ? m->why : "");
    r->t.utilization_pct = m->utilization_pct;
    r->t.memory_used = m->memory_used;
    r->t.power_w = m->power_w;
    r->t.temperature_c = m->temperature_c;
    r->t.health = m->health <= CR_HEALTH_UNHEALTHY ? (cr_health_t)m->health : CR_HEALTH_UNKNOWN;
    r->t.ecc_corrected = m->ecc_corrected;
    r->t.ecc_uncorrected = m->ecc_uncorrected;
    r->t.xid_last = m->xid_last;
}

void telemetry_heartbeat(node_t *n, const Corral__Heartbeat *hb)
{
    if (!hb->n_telemetry)
        return;
    uint32_t ndev = n->ndev ? n->ndev : (uint32_t)n->desc->devices.n;
    tnode_t *t = tnode_of(n, ndev, true);
    if (!t)
        return;
    int64_t now = cr_mono_ms();
    for (size_t i = 0; i < hb->n_telemetry; i++) {
        const Corral__DeviceTelemetry *m = hb->telemetry[i];
        if (m->index >= t->ndev) {
            if (!t->warned)
                cr_warn("node %s: telemetry of device %u, but it has %u; dropped", n->id, m->index,
                        t->ndev);
            t->warned = true;
            continue;
        }
        reading_from_msg(&t->latest[m->index], m);
        t->at_ms[m->index] = now;
    }
}

static float fval(double v)
{
    return v < 0 ? NAN : (float)v;
}

static void ring_push(tnode_t *t, uint32_t i, const web_reading_t *r, bool simulated,
                      uint32_t now_s)
{
    ring_t *g = &t->rings[i];
    if (!g->v) {
        size_t need = (size_t)TEL_SLOTS * sizeof(sample_t);
        if (T.bytes + need > TEL_HISTORY_MAX_BYTES) {
            t->full = true;
            return;
        }
        g->v = cr_malloc(need);
        T.bytes += need;
    }
    sample_t *s = &g->v[g->next];
    s->t_s = now_s;
    if (!r->available) {
        s->util = s->power = s->temp = NAN;
        s->mem_mib = UINT32_MAX;
    } else {
        s->util = fval(r->t.utilization_pct);
        s->power = fval(r->t.power_w);
        s->temp = fval(r->t.temperature_c);
        uint64_t mib = r->t.memory_used >> 20;
        s->mem_mib = simulated ? UINT32_MAX : mib >= UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)mib;
    }
    g->next = (g->next + 1) % TEL_SLOTS;
    if (g->n < TEL_SLOTS)
        g->n++;
}

static void on_tick(uv_timer_t *h)
{
    (void)h;
    uint32_t now_s = (uint32_t)(cr_wall_ms() / 1000);
    if (D.self && T.local && D.node->devices.n) { /* the head's own node, read now */
        tnode_t *t = tnode_of(D.self, (uint32_t)D.node->devices.n, true);
        if (t) {
            T.local(t->latest, t->ndev);
            for (uint32_t i = 0; i < t->ndev; i++)
                t->at_ms[i] = cr_mono_ms();
        }
    }
    for (size_t sn = 0; sn < T.by_sn.n; sn++) {
        tnode_t *t = T.by_sn.v[sn];
        node_t *n = node_of((int)sn);
        if (!t || !n || n->state != CORRAL__NODE_STATE__NODE_ALIVE)
            continue; /* a gap in its charts while it is not alive */
        bool simulated = n->desc && n->desc->simulated;
        for (uint32_t i = 0; i < t->ndev; i++)
            if (t->at_ms[i])
                ring_push(t, i, &t->latest[i], simulated, now_s);
    }
}

void telemetry_start(telemetry_local_fn local)
{
    T.local = local;
    if (T.timer)
        return;
    T.timer = cr_calloc(1, sizeof(*T.timer));
    uv_timer_init(&D.loop, T.timer);
    uv_unref((uv_handle_t *)T.timer);
    on_tick(T.timer); /* a first sample now: charts start with a point */
    uv_timer_start(T.timer, on_tick, WEB_TELEMETRY_PERIOD_MS, WEB_TELEMETRY_PERIOD_MS);
}

static void timer_closed(uv_handle_t *h)
{
    free(h);
}

void telemetry_stop(void)
{
    if (T.timer) {
        uv_timer_stop(T.timer);
        uv_close((uv_handle_t *)T.timer, timer_closed);
        T.timer = NULL;
    }
    for (size_t sn = 0; sn < T.by_sn.n; sn++) {
        tnode_t *t = T.by_sn.v[sn];
        if (!t)
            continue;
        for (uint32_t i = 0; i < t->ndev; i++)
            free(t->rings[i].v);
        free(t->rings);
        free(t->latest);
        free(t->at_ms);
        free(t);
    }
    CR_VEC_FREE(&T.by_sn);
    T.bytes = 0;
}

web_reading_t *telemetry_latest(const node_t *n, size_t ndev)
{
    web_reading_t *v = cr_calloc(ndev ? ndev : 1, sizeof(*v));
    tnode_t *t = tnode_of(n, 0, false);
    int64_t now = cr_mono_ms();
    for (size_t i = 0; i < ndev; i++) {
        hw_telemetry_init(&v[i].t);
        if (t && i < t->ndev && t->at_ms[i]) {
            v[i] = t->latest[i];
            v[i].age_ms = now - t->at_ms[i];
        } else {
            snprintf(v[i].why, sizeof(v[i].why),
                     "no telemetry from its agent yet (it sends it in a heartbeat every %d s "
                     "when it changes)",
                     WEB_TELEMETRY_PERIOD_MS / 1000);
            v[i].age_ms = -1;
        }
    }
    return v;
}

/* A float sample as JSON, to the thousandth it was read at (a float's
 * 652.3 is 652.2999877...). */
static json_t *num_or_null(float v)
{
    return isnan(v) ? json_null() : json_real(round((double)v * 1000.0) / 1000.0);
}

json_t *telemetry_history_json(const node_t *n, int64_t since_ms)
{
    json_t *o = json_object(), *devs = json_array();
    json_object_set_new(o, "node_id", json_string(n->id));
    json_object_set_new(o, "period_ms", json_integer(WEB_TELEMETRY_PERIOD_MS));
    json_object_set_new(o, "history_s", json_integer(TEL_HISTORY_S));
    tnode_t *t = tnode_of(n, 0, false);
    for (uint32_t i = 0; t && i < t->ndev; i++) {
        const ring_t *g = &t->rings[i];
        json_t *d = json_object(), *tm = json_array(), *u = json_array(), *m = json_array(),
               *p = json_array(), *c = json_array();
        json_object_set_new(d, "index", json_integer(i));
        json_object_set_new(d, "history", json_boolean(g->v != NULL || !t->full));
        if (!g->v && t->full)
            json_object_set_new(d, "why",
                                json_string("the head's telemetry history is full "
                                            "(TEL_HISTORY_MAX_BYTES); only the latest reading "
                                            "is kept"));
        for (uint32_t k = 0; g->v && k < g->n; k++) {
            const sample_t *s = &g->v[(g->next + TEL_SLOTS - g->n + k) % TEL_SLOTS];
            if ((int64_t)s->t_s * 1000 < since_ms)
                continue;
            json_array_append_new(tm, json_integer((json_int_t)s->t_s * 1000));
            json_array_append_new(u, num_or_null(s->util));
            json_array_append_new(m, s->mem_mib == UINT32_MAX
                                         ? json_null()
                                         : json_integer((json_int_t)s->mem_mib << 20));
            json_array_append_new(p, num_or_null(s->power));
            json_array_append_new(c, num_or_null(s->temp));
        }
        json_object_set_new(d, "time_ms", tm);
        json_object_set_new(d, "utilization_percent", u);
        json_object_set_new(d, "memory_used_bytes", m);
        json_object_set_new(d, "power_watts", p);
        json_object_set_new(d, "temperature_celsius", c);
        json_array_append_new(devs, d);
    }
    json_object_set_new(o, "devices", devs);
    return o;
}

size_t telemetry_history_bytes(void)
{
    return T.bytes;
}
