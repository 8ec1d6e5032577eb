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
        awk -v k="$k" '$1 == "figure" && $2 ~ /^sched_single_(decisions|decisions_cpu|p50|p99)$/ {
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
# (a decision and a random release, in wall and in CPU time), and of a
# decision alone (its median time at 2k over its median time at 100k; the
# median, because on a shared machine a mean counts preemptions)
awk '$1 == "figure" { v[$2] = $3 }
    END {
        split("decisions decisions_cpu", f, " ")
        for (i = 1; i <= 2; i++) {
            a = v["sched_single_" f[i] "_2k"]; b = v["sched_single_" f[i] "_100k"]
            if (a > 0 && b > 0)
                printf "ratio sched_single_%s_100k_vs_2k %.3f\n", f[i], b / a
        }
        a = v["sched_single_p50_2k"]; b = v["sched_single_p50_100k"]
        if (a > 0 && b > 0)
            printf "ratio sched_single_decision_p50_2k_vs_100k %.3f\n", a / b
    }' "$tmp/curve"

# the helpers of the build that made $corral (CORRAL=... runs another's)
bench=$(dirname "$corral")/bench
join=$bench/bench_sched_join
if [ -x "$join" ]; then
    echo "# bench_sched_join: 10,000 nodes joining a cluster view in use"
    "${pin[@]}" "$join"
fi

# Instructions and cache misses of one decision, and of the random release
# after it, at 2k and 100k nodes, which do not move with the machine's load
# (SCHED_CALLGRIND=1; a few minutes under valgrind): bench_sched_single
# makes SCHED_CALLGRIND_WARM decisions (default 100,000) that the simulated
# caches see but are not counted, so that the counts are the steady
# state's rather than a cold cache's, then 20,000 counted. The last-level
# cache simulated is 32 MiB, 16-way (one Zen 5 CCD's L3; valgrind would
# take the 512 MiB this VM reports, which holds every node).
single=$bench/bench_sched_single
if [ "${SCHED_CALLGRIND:-0}" = 1 ] && [ -x "$single" ] && command -v valgrind >/dev/null 2>&1; then
    warm=${SCHED_CALLGRIND_WARM:-100000}
    for total in 2000 100000; do
        gpus=$((total - 1024))
        k=$((total / 1000))k
        sed "s/^    count: 10000$/    count: $gpus/" "$cluster" >"$tmp/fleet.yaml"
        valgrind --tool=callgrind --cache-sim=yes --LL=33554432,16,64 --instr-atstart=no \
            --toggle-collect=timed_decision --toggle-collect=timed_release \
            --callgrind-out-file="$tmp/cg.out" "$single" "$tmp/fleet.yaml" 20000 "$warm" >/dev/null 2>&1
        # inclusive lines of the two timed functions: Ir D1mr DLmr
        callgrind_annotate --inclusive=yes --show=Ir,D1mr,DLmr "$tmp/cg.out" 2>/dev/null |
            awk -v k="$k" '/timed_(decision|release) \[/ {
                what = $0 ~ /timed_decision/ ? "single" : "release"
                gsub(",", ""); gsub(/\([^)]*\)/, ""); $0 = $0
                printf "figure sched_%s_instructions_%s %.0f per_decision\n", what, k, $1 / 20000
                printf "figure sched_%s_d1_misses_%s %.1f per_decision\n", what, k, $2 / 20000
                printf "figure sched_%s_ll_misses_%s %.2f per_decision\n", what, k, $3 / 20000
            }'
    done
fi
