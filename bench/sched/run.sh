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
# The curve (issue 18): single-bundle decisions as the fleet grows, the
# same fleet with its GPU node count changed (the 256 TPU slices stay), so
# that a decision's cost is seen not to grow with the cluster.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for total in 2000 10000 30000 100000; do
    gpus=$((total - 1024))
    sed "s/^    count: 10000$/    count: $gpus/" "$cluster" >"$tmp/fleet.yaml"
    grep -q "count: $gpus\$" "$tmp/fleet.yaml" || { echo "bench/sched: cannot resize $cluster" >&2; exit 1; }
    k=$((total / 1000))k
    echo "# curve: $total nodes ($gpus GPU nodes + 1,024 TPU hosts)"
    "${pin[@]}" "$corral" sim --bench --cluster "$tmp/fleet.yaml" |
        awk -v k="$k" '$1 == "figure" && $2 ~ /^sched_single_(decisions|decisions_cpu|decisions_alone|p50|p99)$/ {
            print "figure " $2 "_" k " " $3 " " $4
            if ($2 == "sched_single_decisions") rate = $3
            if ($2 == "sched_single_p99") p99 = $3
        }
        END {
            if (k == "100k") {
                printf "ratio sched_single_decisions_100k_vs_target_200000 %.3f\n", rate / 200000
                printf "ratio sched_single_p99_100k_target_20us_vs_measured %.3f\n", 20 / p99
            }
        }' | tee -a "$tmp/curve"
done
# flatness, in this run: the rate at 100k over the rate at 2k, of the loop
# (decision and random release) and of the decisions alone
awk '$1 == "figure" { v[$2] = $3 }
    END {
        for (i = 0; i < 3; i++) {
            f = i == 0 ? "decisions" : i == 1 ? "decisions_cpu" : "decisions_alone"
            a = v["sched_single_" f "_2k"]; b = v["sched_single_" f "_100k"]
            if (a > 0 && b > 0)
                printf "ratio sched_single_%s_100k_vs_2k %.3f\n", f, b / a
        }
    }' "$tmp/curve"

# the helpers of the build that made $corral (CORRAL=... runs another's)
bench=$(dirname "$corral")/bench
join=$bench/bench_sched_join
if [ -x "$join" ]; then
    echo "# bench_sched_join: 10,000 nodes joining a cluster view in use"
    "${pin[@]}" "$join"
fi

# Instructions and cache misses of one decision at 2k and 100k nodes, which
# do not move with the machine's load (SCHED_CALLGRIND=1; about a minute
# each under valgrind): bench_sched_single makes 20,000 decisions with a
# random release after each, and callgrind counts the decisions alone.
single=$bench/bench_sched_single
if [ "${SCHED_CALLGRIND:-0}" = 1 ] && [ -x "$single" ] && command -v valgrind >/dev/null 2>&1; then
    for total in 2000 100000; do
        gpus=$((total - 1024))
        k=$((total / 1000))k
        sed "s/^    count: 10000$/    count: $gpus/" "$cluster" >"$tmp/fleet.yaml"
        valgrind --tool=callgrind --cache-sim=yes --instr-atstart=no \
            --toggle-collect=timed_decision --callgrind-out-file="$tmp/cg.out" \
            "$single" "$tmp/fleet.yaml" 20000 >/dev/null 2>&1
        # totals line: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
        callgrind_annotate --show=Ir,D1mr,DLmr "$tmp/cg.out" 2>/dev/null |
            awk -v k="$k" '/PROGRAM TOTALS/ {
                gsub(",", ""); gsub(/\([^)]*\)/, ""); $0 = $0
                printf "figure sched_single_instructions_%s %.0f per_decision\n", k, $1 / 20000
                printf "figure sched_single_d1_misses_%s %.1f per_decision\n", k, $2 / 20000
                printf "figure sched_single_ll_misses_%s %.1f per_decision\n", k, $3 / 20000
            }'
    done
fi
