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
# Prints `figure head_instructions_fixed_workload N instructions`.
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
B="${CORRAL_BUILD_DIR:-$SRC/build}"
command -v valgrind >/dev/null || { echo "bench/runtime/instructions: needs valgrind" >&2; exit 2; }
for f in "$B/corral" "$B/corrald"; do
    [ -x "$f" ] || { echo "bench/runtime/instructions: no $f; run make build first" >&2; exit 2; }
done
export CORRAL_HOME=$(mktemp -d /tmp/corral-instr-XXXXXX)
vp=""
cleanup() {
    [ -n "$vp" ] && kill -TERM "$vp" 2>/dev/null && wait "$vp" 2>/dev/null
    rm -rf "$CORRAL_HOME"
}
trap cleanup EXIT
out=$CORRAL_HOME/callgrind.out
valgrind --tool=callgrind --callgrind-out-file="$out" "$B/corrald" --head \
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
"$B/corral" stop >/dev/null
wait "$vp"
vp=""
ir=$(awk '/^summary:/ {print $2}' "$out")
echo "figure head_instructions_fixed_workload $ir instructions"
