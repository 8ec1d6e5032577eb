#!/usr/bin/env bash
# The head's user-space instructions per heartbeat, under callgrind
# (valgrind): a head (cpu-only spec, --heartbeat-ms 1000) and NODES
# (default 400) simulated nodes of bench_cluster_loadgen; once all are
# registered and their first beats acknowledged, the head's counters are
# zeroed, BEAT_S (default 10) seconds of beats run, and the counters are
# dumped: instructions over the beats sent in the window (the tick's turns
# included). Instruction counts do not move with the machine's load, so
# two builds compare on a busy machine:
#   bench/cluster/beat_instructions.sh                       # this tree
#   CORRAL_HEAD_BUILD=/tmp/old/build bench/cluster/beat_instructions.sh
# (this tree's corral and load generator drive the other head). Fewer
# nodes than bench/cluster: under valgrind more miss their handshake
# deadline. Prints `figure head_instructions_per_plain_heartbeat N
# instructions`. KEEP=DIR keeps the callgrind files (callgrind_annotate).
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
B="${CORRAL_BUILD_DIR:-$SRC/build}"
HB="${CORRAL_HEAD_BUILD:-$B}"
NODES="${NODES:-400}" BEAT_S="${BEAT_S:-10}"
command -v callgrind_control >/dev/null || { echo "beat_instructions: needs valgrind" >&2; exit 2; }
for f in "$B/corral" "$HB/corrald" "$B/bench/bench_cluster_loadgen"; do
    [ -x "$f" ] || { echo "beat_instructions: no $f; run make build first" >&2; exit 2; }
done
export CORRAL_HOME=$(mktemp -d /tmp/corral-beatinstr-XXXXXX)
vp="" lg=""
cleanup() {
    [ -n "$lg" ] && kill -TERM "$lg" 2>/dev/null
    [ -n "$vp" ] && kill -TERM "$vp" 2>/dev/null && wait "$vp" 2>/dev/null
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$CORRAL_HOME"/callgrind.out* "$KEEP"/ 2>/dev/null; fi
    rm -rf "$CORRAL_HOME"
}
trap cleanup EXIT
out=$CORRAL_HOME/callgrind.out
valgrind --tool=callgrind --callgrind-out-file="$out" "$HB/corrald" --head --heartbeat-ms 1000 \
    --hw-spec "$SRC/specs/cpu-only.yaml" 2>"$CORRAL_HOME/head.err" &
vp=$!
for _ in $(seq 300); do [ -S "$CORRAL_HOME/session_latest/corrald.sock" ] && break; sleep 0.1; done
[ -S "$CORRAL_HOME/session_latest/corrald.sock" ] || { echo "no head" >&2; cat "$CORRAL_HOME/head.err" >&2; exit 1; }
"$B/corral" hw --spec "$SRC/specs/dgx-h100.yaml" --json >"$CORRAL_HOME/node.json"
"$B/bench/bench_cluster_loadgen" --address "$(cat "$CORRAL_HOME/session_latest/address")" \
    --token-file "$CORRAL_HOME/session_latest/token" --node-json "$CORRAL_HOME/node.json" \
    --nodes "$NODES" --inflight 8 >"$CORRAL_HOME/lg.out" 2>"$CORRAL_HOME/lg.err" &
lg=$!
for _ in $(seq 1800); do grep -q '^registered' "$CORRAL_HOME/lg.out" && break; sleep 0.1; done
grep -q '^registered' "$CORRAL_HOME/lg.out" || { echo "the nodes did not register" >&2; head -3 "$CORRAL_HOME/lg.err" >&2; exit 1; }
sleep 4 # every node's first beat (with its free resources) acknowledged
callgrind_control -z "$vp" >/dev/null 2>&1
b0=$(awk '/^beats/ {s += $3} END {print s + 0}' "$CORRAL_HOME/lg.out")
sleep "$BEAT_S"
b1=$(awk '/^beats/ {s += $3} END {print s + 0}' "$CORRAL_HOME/lg.out")
callgrind_control -d "$vp" >/dev/null 2>&1
for _ in $(seq 300); do [ -f "$out.1" ] && grep -q '^totals:' "$out.1" && break; sleep 0.1; done
ir=$(awk '/^summary:/ {print $2}' "$out.1")
echo "# $((b1 - b0)) beats from $NODES simulated nodes in $BEAT_S s; head $HB/corrald"
awk -v a="$ir" -v n=$((b1 - b0)) 'BEGIN {if (n > 0) printf "figure head_instructions_per_plain_heartbeat %.0f instructions\n", a / n}'
