#!/usr/bin/env bash
# bench/sched: the scheduling core on the 10,000-node example fleet
# (examples/clusters/fleet-10k.yaml: 10,000 8-GPU nodes + 256 TPU v6e 4x4
# slices), on one core. Prints `figure NAME VALUE UNIT` and `ratio NAME
# VALUE` lines. Ray's placement-group figure is its published number, not
# measured here. Run with `make bench-sched` (after `make build`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
corral=${CORRAL:-$root/build/corral}
cluster=${CLUSTER:-$root/examples/clusters/fleet-10k.yaml}
if [ ! -x "$corral" ]; then
    echo "bench/sched: $corral is not built; run 'make build' first" >&2
    exit 1
fi
pin=()
if command -v taskset >/dev/null 2>&1; then
    pin=(taskset -c 0)
fi
echo "# corral sim --bench --cluster $cluster (pinned: ${pin[*]:-no})"
"${pin[@]}" "$corral" sim --bench --cluster "$cluster"
join=$root/build/bench/bench_sched_join
if [ -x "$join" ]; then
    echo "# bench_sched_join: 10,000 nodes joining a cluster view in use"
    "${pin[@]}" "$join"
fi
