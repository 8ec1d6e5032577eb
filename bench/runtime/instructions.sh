#!/usr/bin/env bash
# Instructions the head executes for one fixed workload, under callgrind
# (valgrind): a head on the simulated 8-GPU node of specs/dgx-h100.yaml, 40
# `corral run -- true`, 5 gangs of 8 one-GPU workers, 10 placement groups of
# two GPU bundles created and removed, one job list and one status, then
# `corral stop`. Instruction counts do not move with the machine's load
# (they move by a few tenths of a percent between runs: the tick's turns),
# so two builds compare on a busy machine, e.g. before and after a change:
#   bench/runtime/instructions.sh                 # this tree's build/
#   CORRAL_BUILD_DIR=/tmp/old/build bench/runtime/instructions.sh
# Then two phases counted apart (callgrind_control dumps the counters
# between them), in the same head (issue 18):
#   - READS (default 1000) read-only requests, a JobStatus each, on one
#     libcorral connection (bench_runtime_rtt head): instructions per
#     request, the connect and the tick's turns meanwhile included;
#   - heartbeats: NODES (default 100) simulated nodes of bench/cluster's
#     load generator beat at 1 Hz for BEAT_S (default 10) seconds after
#     their registration: the head's instructions over that window per
#     beat sent in it (its tick's turns included: head CPU / beats).
# Prints `figure head_instructions_fixed_workload N instructions` (the
# workload above, the head's start and stop, not the two phases),
# `figure head_instructions_per_read_request N instructions` and
# `figure head_instructions_per_heartbeat N instructions`.
# A build without bench_runtime_rtt or bench_cluster_loadgen (an older
# tree) gets the first figure only.
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
B="${CORRAL_BUILD_DIR:-$SRC/build}"
# the head's build, when another (an older tree) is measured with this
# tree's clients and load generator: CORRAL_HEAD_BUILD=/tmp/old/build
HB="${CORRAL_HEAD_BUILD:-$B}"
command -v valgrind >/dev/null || { echo "bench/runtime/instructions: needs valgrind" >&2; exit 2; }
for f in "$B/corral" "$HB/corrald"; do
    [ -x "$f" ] || { echo "bench/runtime/instructions: no $f; run make build first" >&2; exit 2; }
done
export CORRAL_HOME=$(mktemp -d /tmp/corral-instr-XXXXXX)
vp=""
# KEEP=DIR keeps the callgrind files there (callgrind_annotate them)
cleanup() {
    [ -n "$vp" ] && kill -TERM "$vp" 2>/dev/null && wait "$vp" 2>/dev/null
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$CORRAL_HOME"/callgrind.out* "$KEEP"/ 2>/dev/null; fi
    rm -rf "$CORRAL_HOME"
}
trap cleanup EXIT
out=$CORRAL_HOME/callgrind.out
# valgrind cannot follow the clone(CLONE_VM | CLONE_VFORK) that starts a
# root agent's worker in its namespace (agent/launch.c): as root, the head
# runs without CAP_SYS_ADMIN, so its workers are spawned with posix_spawn
# and not hidden (the daemon's log says so), and the figures leave the
# namespace's setns out
NOADMIN=""
[ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && NOADMIN="setpriv --bounding-set=-sys_admin"
$NOADMIN valgrind --tool=callgrind --callgrind-out-file="$out" "$HB/corrald" --head \
    --hw-spec "$SRC/specs/dgx-h100.yaml" 2>"$CORRAL_HOME/head.err" &
vp=$!
for _ in $(seq 300); do [ -S "$CORRAL_HOME/session_latest/corrald.sock" ] && break; sleep 0.1; done
[ -S "$CORRAL_HOME/session_latest/corrald.sock" ] || { echo "no head" >&2; cat "$CORRAL_HOME/head.err" >&2; exit 1; }
for _ in $(seq 40); do "$B/corral" run -- true >/dev/null; done
for _ in $(seq 5); do "$B/corral" run --gpus 1 --workers 8 -- true >/dev/null; done
for i in $(seq 10); do
    "$B/corral" pg create "g$i" --bundles 'GPU=1;GPU=1' >/dev/null
    "$B/corral" pg remove "g$i" >/dev/null
done
"$B/corral" job list >/dev/null
"$B/corral" status >/dev/null
READS="${READS:-1000}" NODES="${NODES:-100}" BEAT_S="${BEAT_S:-10}"
RTT="$B/bench/bench_runtime_rtt" LG="$B/bench/bench_cluster_loadgen"
# dumps the counters (callgrind_control -d writes OUT.N and zeroes them);
# IR: what the part just ended counted
ndumps=0 IR=0
dump() {
    ndumps=$((ndumps + 1))
    callgrind_control -d "$vp" >/dev/null 2>&1
    for _ in $(seq 300); do
        [ -f "$out.$ndumps" ] && grep -q '^totals:' "$out.$ndumps" && break
        sleep 0.1
    done
    IR=$(awk '/^summary:/ {print $2}' "$out.$ndumps")
}
per_read="" per_beat=""
if [ -x "$RTT" ] && [ -x "$LG" ] && command -v callgrind_control >/dev/null; then
    dump
    "$RTT" head "$READS" -1 job >/dev/null
    dump; ir_reads=$IR
    per_read=$(awk -v a="$ir_reads" -v n="$READS" 'BEGIN {printf "%.0f", a / (n + 100)}')
    "$B/corral" hw --spec "$SRC/specs/dgx-h100.yaml" --json >"$CORRAL_HOME/node.json"
    "$LG" --address "$(cat "$CORRAL_HOME/session_latest/address")" \
        --token-file "$CORRAL_HOME/session_latest/token" --node-json "$CORRAL_HOME/node.json" \
        --nodes "$NODES" --inflight 32 >"$CORRAL_HOME/lg.out" 2>"$CORRAL_HOME/lg.err" &
    lg=$!
    for _ in $(seq 600); do grep -q '^registered' "$CORRAL_HOME/lg.out" && break; sleep 0.1; done
    sleep 3 # every node's first beat (with its free resources) acknowledged
    dump; d_reg=$IR
    b0=$(awk '/^beats/ {s += $3} END {print s + 0}' "$CORRAL_HOME/lg.out")
    sleep "$BEAT_S"
    b1=$(awk '/^beats/ {s += $3} END {print s + 0}' "$CORRAL_HOME/lg.out")
    dump; ir_beats=$IR
    kill -TERM "$lg"; wait "$lg" || true
    per_beat=$(awk -v a="$ir_beats" -v n=$((b1 - b0)) 'BEGIN {if (n > 0) printf "%.0f", a / n}')
    echo "note: $((b1 - b0)) beats from $NODES simulated nodes in the window" >&2
    dump; d_disc=$IR # their registration and disconnect are not counted below
    ir_skip=$((ir_reads + d_reg + ir_beats + d_disc))
fi
"$B/corral" stop >/dev/null
wait "$vp"
vp=""
total=0
for f in "$out" "$out".*; do
    [ -f "$f" ] && total=$((total + $(awk '/^summary:/ {print $2}' "$f")))
done
ir=$((total - ${ir_skip:-0}))
echo "figure head_instructions_fixed_workload $ir instructions"
[ -n "$per_read" ] && echo "figure head_instructions_per_read_request $per_read instructions"
[ -n "$per_beat" ] && echo "figure head_instructions_per_heartbeat $per_beat instructions"
exit 0
