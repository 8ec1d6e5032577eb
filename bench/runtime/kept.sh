#!/usr/bin/env bash
# Sequential `corral run -- true` on a head that keeps KEPT finished jobs
# (default 10,000: the head's retention default, where a head that has run
# for a while sits), against the same on a fresh head, both beside the
# posix_spawn floor; rounds take turns (floor, fresh, kept). A cost the
# head pays per job it keeps shows as the kept rate falling below the
# fresh one; the ratio kept/fresh should be 1. Each head in a CORRAL_HOME
# of its own under BENCH_DIR (default /tmp); what creating a file there
# costs is printed too (create_p50.py: 10 us, or up to 1 ms on this VM's
# disk after a cleanup nearby).
#
#   bench/runtime/kept.sh                          (KEPT=10000 SEQ=200 ROUNDS=5)
#   CORRAL_BUILD_DIR=/some/old/build bench/runtime/kept.sh   (a before figure)
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
KEPT="${KEPT:-10000}"
SEQ="${SEQ:-200}"
ROUNDS="${ROUNDS:-5}"
FLOOR_N="${FLOOR_N:-500}"
CORRAL="$BUILD/corral"
SPAWN="$SRC/build/bench/bench_runtime_spawn"
command -v jq >/dev/null || { echo "bench/runtime/kept: needs jq (scripts/deps.sh)" >&2; exit 2; }
for f in "$CORRAL" "$BUILD/corrald" "$SPAWN"; do
    [ -x "$f" ] || { echo "bench/runtime/kept: no $f; run make build first" >&2; exit 2; }
done
base="${BENCH_DIR:-/tmp}"
TMP="$(mktemp -d "$base/bench-kept.XXXXXX")"
homes=("$TMP/fresh" "$TMP/kept")
cleanup() {
    for h in "${homes[@]}"; do CORRAL_HOME="$h" "$CORRAL" stop >/dev/null 2>&1 || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
note() { echo "note: $*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END{if(NR==0){print "NA";exit} if(NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
seq_of() { setsid -w "$SPAWN" seq "$@"; } # prints N SECONDS PER_SECOND P50_MS
# the CPU time (user + system, in clock ticks) the head of CORRAL_HOME $1 has used
head_ticks() { awk '{print $14 + $15}' "/proc/$(cat "$1/session_latest/corrald.pid")/stat"; }

note "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); KEPT=$KEPT SEQ=$SEQ ROUNDS=$ROUNDS, homes under $base"
for h in "${homes[@]}"; do
    mkdir -p "$h"
    CORRAL_HOME="$h" "$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" >/dev/null
    for _ in 1 2 3; do CORRAL_HOME="$h" "$CORRAL" run -- true; done
done
fill=$(CORRAL_HOME="$TMP/kept" seq_of "$KEPT" "$CORRAL" run -- true)
kept=$(CORRAL_HOME="$TMP/kept" "$CORRAL" job list --json | jq length)
note "filled: $fill (N SECONDS PER_SECOND P50_MS); the head keeps $kept jobs"
: > "$TMP/floor"; : > "$TMP/fresh.r"; : > "$TMP/kept.r"
t0f=$(head_ticks "$TMP/fresh"); t0k=$(head_ticks "$TMP/kept")
for r in $(seq "$ROUNDS"); do
    seq_of "$FLOOR_N" --setsid /bin/true >> "$TMP/floor"
    CORRAL_HOME="$TMP/fresh" seq_of "$SEQ" "$CORRAL" run -- true >> "$TMP/fresh.r"
    CORRAL_HOME="$TMP/kept" seq_of "$SEQ" "$CORRAL" run -- true >> "$TMP/kept.r"
    note "round $r: floor $(tail -1 "$TMP/floor" | cut -d' ' -f3)/s, fresh $(tail -1 "$TMP/fresh.r" | cut -d' ' -f3)/s, kept $(tail -1 "$TMP/kept.r" | cut -d' ' -f3)/s"
done
hz=$(getconf CLK_TCK)
cf=$(awk -v a="$t0f" -v b="$(head_ticks "$TMP/fresh")" -v n=$((SEQ * ROUNDS)) -v hz="$hz" 'BEGIN{printf "%.3f", (b - a) * 1000 / hz / n}')
ck=$(awk -v a="$t0k" -v b="$(head_ticks "$TMP/kept")" -v n=$((SEQ * ROUNDS)) -v hz="$hz" 'BEGIN{printf "%.3f", (b - a) * 1000 / hz / n}')
python3 "$SRC/bench/runtime/create_p50.py" "$TMP/kept/session_latest/logs" kept_log_dir_file_create_p50
f=$(awk '{print $3}' "$TMP/floor" | median)
a=$(awk '{print $3}' "$TMP/fresh.r" | median)
b=$(awk '{print $3}' "$TMP/kept.r" | median)
echo "figure seq_posix_spawn_true $f runs/s"
echo "figure seq_run_true_fresh_head $a runs/s"
echo "figure seq_run_true_kept_$KEPT $b runs/s"
# the head's own CPU a run (its retention's sweeps included), which moves
# less with the host's speed than the rates do
echo "figure head_cpu_per_run_fresh_head $cf ms"
echo "figure head_cpu_per_run_kept_$KEPT $ck ms"
awk -v a="$a" -v b="$b" -v f="$f" -v k="$KEPT" 'BEGIN{
    printf "ratio seq_run_true_kept_%s_vs_fresh_head %.3f\n", k, b / a
    printf "ratio seq_posix_spawn_true_kept_%s %.3f\n", k, b / f
    printf "ratio seq_posix_spawn_true_fresh_head %.3f\n", a / f }'
awk -v a="$cf" -v b="$ck" -v k="$KEPT" 'BEGIN{if (a > 0) printf "ratio head_cpu_per_run_kept_%s_vs_fresh_head %.3f\n", k, b / a}'
