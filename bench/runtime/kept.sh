#!/usr/bin/env bash
# Sequential `corral run -- true` on a head that keeps KEPT finished jobs
# (default 10,000: the head's retention default, where a head that has run
# for a while sits), against the same on a fresh head, both beside the
# posix_spawn floor; rounds take turns (floor, fresh, kept). A cost the
# head pays per job it keeps shows as the kept rate falling below the
# fresh one; the ratio kept/fresh should be 1. Then the same for
# sequential `corral status --json` (what a dashboard or a script polls),
# with the head's CPU a status. Each head in a CORRAL_HOME
# of its own under BENCH_DIR (default /tmp); what creating a file there
# costs is printed too (create_p50.py: 10 us, or up to 1 ms on this VM's
# disk after a cleanup nearby).
#
#   bench/runtime/kept.sh                          (KEPT=10000 SEQ=200 ROUNDS=5)
#   CORRAL_BUILD_DIR=/some/old/build bench/runtime/kept.sh   (a before figure)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/two_heads.sh" kept fresh kept
KEPT="${KEPT:-10000}"
SEQ="${SEQ:-200}"
ROUNDS="${ROUNDS:-5}"
FLOOR_N="${FLOOR_N:-500}"

note "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); KEPT=$KEPT SEQ=$SEQ ROUNDS=$ROUNDS, homes under $base"
for h in "${homes[@]}"; do
    mkdir -p "$h"
    CORRAL_HOME="$h" "$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" >/dev/null
    for _ in 1 2 3; do CORRAL_HOME="$h" "$CORRAL" run -- true; done
done
fill=$(CORRAL_HOME="$TMP/kept" seq_of "$KEPT" "$CORRAL" run -- true)
kept=$(CORRAL_HOME="$TMP/kept" "$CORRAL" job list --json | jq length)
note "filled: $fill (N SECONDS PER_SECOND P50_MS); the head keeps $kept jobs"
take_turns run -- true
cf=${cpu[0]} ck=${cpu[1]}
python3 "$SRC/bench/runtime/create_p50.py" "$TMP/kept/session_latest/logs" kept_log_dir_file_create_p50
f=$(rate_of "$TMP/floor")
a=$(rate_of "$TMP/fresh.r")
b=$(rate_of "$TMP/kept.r")
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
# a status: its counts and holders should not read every job kept
take_turns --quiet status --json
cf=${cpu[0]} ck=${cpu[1]}
a=$(rate_of "$TMP/fresh.r")
b=$(rate_of "$TMP/kept.r")
echo "figure seq_status_fresh_head $a per s"
echo "figure seq_status_kept_$KEPT $b per s"
echo "figure head_cpu_per_status_fresh_head $cf ms"
echo "figure head_cpu_per_status_kept_$KEPT $ck ms"
awk -v a="$a" -v b="$b" -v k="$KEPT" 'BEGIN{printf "ratio seq_status_kept_%s_vs_fresh_head %.3f\n", k, b / a}'
awk -v a="$cf" -v b="$ck" -v k="$KEPT" 'BEGIN{if (a > 0) printf "ratio head_cpu_per_status_kept_%s_vs_fresh_head %.3f\n", k, b / a}'
