/* The head's device telemetry (docs/api.md "Telemetry", docs/cluster.md
 * "Telemetry"): the latest reading of every device of every node (the
 * head's own read here, a remote node's as its agent sent it in a
 * heartbeat) and the last hour of them, one sample per
 * WEB_TELEMETRY_PERIOD_MS per device in a ring, for the dashboard's charts.
 * Owned by telemetry.c; nodes.c hands it the heartbeats, web.c reads it. */
#ifndef CORRAL_HEAD_TELEMETRY_H
#define CORRAL_HEAD_TELEMETRY_H

#include "head/head.h"
#include "web/web.h"

#define TEL_HISTORY_S 3600 /* an hour */
#define TEL_SLOTS (TEL_HISTORY_S * 1000 / WEB_TELEMETRY_PERIOD_MS)
/* The bound on all rings together: a ring is TEL_SLOTS samples of 20
 * bytes (14,400 bytes), so this keeps the hour of 4,660 devices; devices
 * past it keep their latest reading but no history (the API says so). */
#define TEL_HISTORY_MAX_BYTES (64u << 20)

/* The readings hb carries, of node n (a remote one). Bad indices are
 * dropped with one log line per node. */
void telemetry_heartbeat(node_t *n, const Corral__Heartbeat *hb);
/* The sampling timer on D.loop (unreferenced); local fills the head's own
 * node's readings (n of them) at each tick. */
typedef void (*telemetry_local_fn)(web_reading_t *out, size_t n);
void telemetry_start(telemetry_local_fn local);
/* Stops the timer (closed through the loop) and frees the rest. */
void telemetry_stop(void);
/* The latest reading of each of n's ndev devices as an array the caller
 * frees; a device without one is unavailable with why saying so. */
web_reading_t *telemetry_latest(const node_t *n, size_t ndev);
/* n's history since since_ms (wall clock), as docs/api.md shows. */
json_t *telemetry_history_json(const node_t *n, int64_t since_ms);
/* Bytes the rings hold now (corral_telemetry_history_bytes). */
size_t telemetry_history_bytes(void);

#endif
