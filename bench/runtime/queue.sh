#!/usr/bin/env bash
# Sequential `corral run --gpus 1 -- true` on a head where PENDING jobs
# wait (default 10,000 `--gpus 4`, behind a job that holds 6 of a
# simulated DGX H100's 8 GPUs), against the same on a head where none
# wait, both beside the posix_spawn floor; rounds take turns (floor, idle,
# queued). Each run moves the free GPUs (2, 1, 2) that the waiting jobs'
# reason names, and ends with a pass over the queue: a cost the head pays
# per waiting job shows as the queued rate below the idle one (the ratio
# queued/idle should be 1) and in the head's CPU a run. Each head in a
# CORRAL_HOME of its own under BENCH_DIR (default /tmp).
#
#   bench/runtime/queue.sh                           (PENDING=10000 SEQ=100 ROUNDS=3)
#   CORRAL_BUILD_DIR=/some/old/build bench/runtime/queue.sh   (a before figure)
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
PENDING="${PENDING:-10000}"
SEQ="${SEQ:-100}"
ROUNDS="${ROUNDS:-3}"
FLOOR_N="${FLOOR_N:-500}"
CORRAL="$BUILD/corral"
SPAWN="$SRC/build/bench/bench_runtime_spawn"
command -v jq >/dev/null || { echo "bench/runtime/queue: needs jq (scripts/deps.sh)" >&2; exit 2; }
for f in "$CORRAL" "$BUILD/corrald" "$SPAWN"; do
    [ -x "$f" ] || { echo "bench/runtime/queue: no $f; run make build first" >&2; exit 2; }
done
base="${BENCH_DIR:-/tmp}"
TMP="$(mktemp -d "$base/bench-queue.XXXXXX")"
homes=("$TMP/idle" "$TMP/queued")
cleanup() {
    for h in "${homes[@]}"; do CORRAL_HOME="$h" "$CORRAL" stop >/dev/null 2>&1 || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
note() { echo "note: $*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END{if(NR==0){print "NA";exit} if(NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
seq_of() { setsid -w "$SPAWN" seq "$@"; } # prints N SECONDS PER_SECOND P50_MS
head_ticks() { awk '{print $14 + $15}' "/proc/$(cat "$1/session_latest/corrald.pid")/stat"; }

note "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); PENDING=$PENDING SEQ=$SEQ ROUNDS=$ROUNDS, homes under $base"
for h in "${homes[@]}"; do
    mkdir -p "$h"
    CORRAL_HOME="$h" "$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" --dashboard-port 0 >/dev/null
    CORRAL_HOME="$h" "$CORRAL" run --gpus 6 --detach -- sleep 100000 >/dev/null
    for _ in 1 2 3; do CORRAL_HOME="$h" "$CORRAL" run --gpus 1 -- true; done
done
fill=$(CORRAL_HOME="$TMP/queued" seq_of "$PENDING" "$CORRAL" run --gpus 4 --detach -- true | tail -1)
waiting=$(CORRAL_HOME="$TMP/queued" "$CORRAL" status --json | jq .pending_jobs)
# seq runs a few more first, to warm up
[ "$waiting" -ge "$PENDING" ] || { echo "bench/runtime/queue: $waiting jobs wait, not $PENDING" >&2; exit 1; }
note "filled: $fill (N SECONDS PER_SECOND P50_MS); $waiting jobs wait"
: > "$TMP/floor"; : > "$TMP/idle.r"; : > "$TMP/queued.r"
t0i=$(head_ticks "$TMP/idle"); t0q=$(head_ticks "$TMP/queued")
for r in $(seq "$ROUNDS"); do
    seq_of "$FLOOR_N" --setsid /bin/true >> "$TMP/floor"
    CORRAL_HOME="$TMP/idle" seq_of "$SEQ" "$CORRAL" run --gpus 1 -- true >> "$TMP/idle.r"
    CORRAL_HOME="$TMP/queued" seq_of "$SEQ" "$CORRAL" run --gpus 1 -- true >> "$TMP/queued.r"
    note "round $r: floor $(tail -1 "$TMP/floor" | cut -d' ' -f3)/s, idle $(tail -1 "$TMP/idle.r" | cut -d' ' -f3)/s, queued $(tail -1 "$TMP/queued.r" | cut -d' ' -f3)/s"
done
hz=$(getconf CLK_TCK)
ci=$(awk -v a="$t0i" -v b="$(head_ticks "$TMP/idle")" -v n=$((SEQ * ROUNDS)) -v hz="$hz" 'BEGIN{printf "%.3f", (b - a) * 1000 / hz / n}')
cq=$(awk -v a="$t0q" -v b="$(head_ticks "$TMP/queued")" -v n=$((SEQ * ROUNDS)) -v hz="$hz" 'BEGIN{printf "%.3f", (b - a) * 1000 / hz / n}')
f=$(awk '{print $3}' "$TMP/floor" | median)
a=$(awk '{print $3}' "$TMP/idle.r" | median)
b=$(awk '{print $3}' "$TMP/queued.r" | median)
echo "figure seq_posix_spawn_true $f runs/s"
echo "figure seq_run_gpu1_none_waiting $a runs/s"
echo "figure seq_run_gpu1_${PENDING}_waiting $b runs/s"
echo "figure head_cpu_per_run_none_waiting $ci ms"
echo "figure head_cpu_per_run_${PENDING}_waiting $cq ms"
awk -v a="$a" -v b="$b" -v f="$f" -v k="$PENDING" 'BEGIN{
    printf "ratio seq_run_gpu1_%s_waiting_vs_none %.3f\n", k, b / a
    printf "ratio seq_posix_spawn_true_gpu1_%s_waiting %.3f\n", k, b / f }'
awk -v a="$ci" -v b="$cq" -v k="$PENDING" 'BEGIN{if (a > 0) printf "ratio head_cpu_per_run_%s_waiting_vs_none %.3f\n", k, b / a}'
