#!/usr/bin/env bash
# Gang start-up benchmark: time from "start 8 workers" to all 8 running
# (each worker writes a byte to a FIFO the driver reads), for corral's
# launcher (agent/launch.c) against plain posix_spawn of the same 8
# processes (the floor) and posix_spawn with a session per worker, measured
# in the same run, the arms taking turns within each round. Done with the
# default binding (closest) and with --bind none. The node is the simulated
# 8-GPU node of tests/unit/data/launch_dgx8.json, its GPUs spread over the
# CPUs this machine has. Prints `figure NAME VALUE UNIT` and
# `ratio NAME VALUE` lines (ratio: corral over the peer named in NAME).
#
#   bench/launch/run.sh                 (make bench-launch builds first)
#   RUNS=200 WORKERS=8 bench/launch/run.sh
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
RUNS="${RUNS:-100}"
WORKERS="${WORKERS:-8}"
DRIVER="$BUILD/bench/bench_launch"
READY="$BUILD/bench/bench_launch_ready"
for f in "$DRIVER" "$READY"; do
    [ -x "$f" ] || { echo "bench/launch: no $f; run make build first" >&2; exit 2; }
done
echo "note: $(nproc) CPUs online ($(cat /sys/devices/system/cpu/online)), sched_autogroup_enabled=$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo n/a), $RUNS rounds of $WORKERS workers" >&2
for bind in closest none; do
    "$DRIVER" "$READY" "$SRC/tests/unit/data/launch_dgx8.json" "$RUNS" "$WORKERS" "$bind"
done
