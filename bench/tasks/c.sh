#!/usr/bin/env bash
# bench/tasks, the C half (issue 15 "Performance"): actor calls from C
# through include/corral/tasks.h on a head started here (a temporary
# CORRAL_HOME, the simulated node of specs/tpu-v6e-4x4-w0.yaml), beside
# a raw Unix-socket ping-pong between two processes measured in the same
# run (bench/tasks/bench_tasks_c.c says how, the two taking turns):
#   figure tasks_c_unix_pingpong_rtt_us   the floor, median round trip
#   figure tasks_c_actor_sync_rtt_us      corral_actor_call + corral_get, median
#   ratio  tasks_c_actor_sync_vs_pingpong the two (goal: at most 2)
#   figure tasks_c_actor_async_per_s      ASYNC calls submitted, then all got
#                                         (median of ROUNDS; goal: 200,000/s)
#   figure tasks_c_actor_async_{owner,actor}_cpu_us  CPU time per async call
#                                         of the owner (both threads) and of
#                                         the actor (what load moves least)
#
#   bench/tasks/c.sh                    SYNC=20000 ASYNC=200000 ROUNDS=5
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
SYNC="${SYNC:-20000}"
ASYNC="${ASYNC:-200000}"
ROUNDS="${ROUNDS:-5}"
CORRAL="$BUILD/corral"
BENCH="$BUILD/bench/bench_tasks_c"
for f in "$CORRAL" "$BUILD/corrald" "$BENCH"; do
    [ -x "$f" ] || { echo "bench/tasks/c.sh: no $f; run make build first" >&2; exit 2; }
done
TMP="$(mktemp -d /tmp/bench-tasks-c.XXXXXX)"
export CORRAL_HOME="$TMP/home"
mkdir -p "$CORRAL_HOME"
cleanup() {
    "$CORRAL" stop >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
"$CORRAL" start --head --hw-spec "$SRC/specs/tpu-v6e-4x4-w0.yaml" >/dev/null
echo "bench/tasks (C): SYNC=$SYNC ASYNC=$ASYNC ROUNDS=$ROUNDS; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
out=$(cd "$TMP" && CORRAL_LOG_LEVEL=error "$BENCH" "$SYNC" "$ASYNC" "$ROUNDS")
pp=$(awk '$1 == "pingpong" {print $2}' <<<"$out")
sync=$(awk '$1 == "actor_sync" {print $2}' <<<"$out")
async=$(awk '$1 == "actor_async" {print $2}' <<<"$out")
[ -n "$pp" ] && [ -n "$sync" ] && [ -n "$async" ] || { echo "bench/tasks/c.sh: $out" >&2; exit 1; }
echo "$out" | sed 's/^/  raw: /' >&2
echo "figure tasks_c_unix_pingpong_rtt_us $pp us"
echo "figure tasks_c_actor_sync_rtt_us $sync us"
echo "ratio tasks_c_actor_sync_vs_pingpong $(awk -v a="$sync" -v b="$pp" 'BEGIN {printf "%.2f", a / b}')"
echo "figure tasks_c_actor_async_per_s $async calls/s"
cpu=$(awk '$1 == "actor_async_cpu" {print $2, $3}' <<<"$out")
[ -z "$cpu" ] || {
    echo "figure tasks_c_actor_async_owner_cpu_us $(cut -d' ' -f1 <<<"$cpu") us/call"
    echo "figure tasks_c_actor_async_actor_cpu_us $(cut -d' ' -f2 <<<"$cpu") us/call"
}
