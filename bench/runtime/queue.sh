#!/usr/bin/env bash
# Sequential `corral run --gpus 1 -- true` on a head where PENDING jobs
# wait (default 10,000 `--gpus 4`, behind a job that holds 6 of a
# simulated DGX H100's 8 GPUs), against the same on a head where none
# wait, both beside the posix_spawn floor; rounds take turns (floor, idle,
# queued). Each run moves the free GPUs (2, 1, 2) that the waiting jobs'
# reason names, and ends with a pass over the queue: a cost the head pays
# per waiting job shows as the queued rate below the idle one (the ratio
# queued/idle should be 1) and in the head's CPU a run. KIND=groups: the
# waiting are placement groups of one GPU=4 bundle instead. Each head in a
# CORRAL_HOME of its own under BENCH_DIR (default /tmp).
#
#   bench/runtime/queue.sh                           (PENDING=10000 SEQ=100 ROUNDS=3)
#   KIND=groups bench/runtime/queue.sh
#   CORRAL_BUILD_DIR=/some/old/build bench/runtime/queue.sh   (a before figure)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/two_heads.sh" queue idle queued
PENDING="${PENDING:-10000}"
SEQ="${SEQ:-100}"
ROUNDS="${ROUNDS:-3}"
FLOOR_N="${FLOOR_N:-500}"

note "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); PENDING=$PENDING SEQ=$SEQ ROUNDS=$ROUNDS, homes under $base"
for h in "${homes[@]}"; do
    mkdir -p "$h"
    CORRAL_HOME="$h" "$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" --dashboard-port 0 >/dev/null
    CORRAL_HOME="$h" "$CORRAL" run --gpus 6 --detach -- sleep 100000 >/dev/null
    for _ in 1 2 3; do CORRAL_HOME="$h" "$CORRAL" run --gpus 1 -- true; done
done
KIND="${KIND:-jobs}"
case $KIND in
jobs)
    fill=$(CORRAL_HOME="$TMP/queued" seq_of "$PENDING" "$CORRAL" run --gpus 4 --detach -- true | tail -1)
    waiting=$(CORRAL_HOME="$TMP/queued" "$CORRAL" status --json | jq .pending_jobs)
    ;;
groups)
    fill=$(CORRAL_HOME="$TMP/queued" "$SRC/build/bench/bench_runtime_pg" queue "$PENDING" GPU=4)
    waiting=$(CORRAL_HOME="$TMP/queued" "$CORRAL" pg list --json | jq '[.[] | select(.state == "PENDING")] | length')
    ;;
*) echo "bench/runtime/queue: KIND is jobs or groups, not $KIND" >&2; exit 2 ;;
esac
# seq runs a few more first, to warm up
[ "$waiting" -ge "$PENDING" ] || { echo "bench/runtime/queue: $waiting $KIND wait, not $PENDING" >&2; exit 1; }
note "filled: $fill; $waiting $KIND wait"
take_turns run --gpus 1 -- true
ci=${cpu[0]} cq=${cpu[1]}
f=$(rate_of "$TMP/floor")
a=$(rate_of "$TMP/idle.r")
b=$(rate_of "$TMP/queued.r")
echo "figure seq_posix_spawn_true $f runs/s"
echo "figure seq_run_gpu1_none_waiting $a runs/s"
echo "figure seq_run_gpu1_${PENDING}_${KIND}_waiting $b runs/s"
echo "figure head_cpu_per_run_none_waiting $ci ms"
echo "figure head_cpu_per_run_${PENDING}_${KIND}_waiting $cq ms"
awk -v a="$a" -v b="$b" -v f="$f" -v k="${PENDING}_$KIND" 'BEGIN{
    printf "ratio seq_run_gpu1_%s_waiting_vs_none %.3f\n", k, b / a
    printf "ratio seq_posix_spawn_true_gpu1_%s_waiting %.3f\n", k, b / f }'
awk -v a="$ci" -v b="$cq" -v k="${PENDING}_$KIND" 'BEGIN{if (a > 0) printf "ratio head_cpu_per_run_%s_waiting_vs_none %.3f\n", k, b / a}'
