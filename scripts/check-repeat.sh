#!/usr/bin/env bash
# Runs a test group (default: the cluster tests) RUNS times in a row in
# BUILD_DIR with every core kept busy by a CPU burner, to find the tests
# that fail only under load (issue 13). Each burner is bounded by timeout(1)
# and stopped by its PID when this script ends, however it ends.
#   scripts/check-repeat.sh [RUNS] [BUILD_DIR] [CTEST_REGEX]
# Failing runs keep their output in BUILD_DIR/check-repeat/run-N.log.
set -u
runs=${1:-20}
dir=${2:-build}
group=${3:-^cluster_}
burners=${BURNERS:-$(nproc)}
case $runs in '' | *[!0-9]*) echo "check-repeat: RUNS must be a number, not '$runs'" >&2; exit 2 ;; esac
[ -d "$dir" ] || { echo "check-repeat: no build directory '$dir'; run 'make build' first" >&2; exit 2; }
logs=$dir/check-repeat
mkdir -p "$logs"
pids=()
stop_burners() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    pids=()
}
trap stop_burners EXIT
trap 'exit 130' INT TERM
# a burner lives at most as long as the runs could (an hour a run)
for _ in $(seq "$burners"); do
    timeout $((runs * 3600)) sh -c 'while :; do :; done' &
    pids+=($!)
done
echo "check-repeat: $runs run(s) of '$group' in $dir with $burners CPU burner(s) (pids ${pids[*]})"
passed=0
for i in $(seq "$runs"); do
    t0=$(date +%s)
    if ctest --test-dir "$dir" -R "$group" --output-on-failure >"$logs/run-$i.log" 2>&1; then
        passed=$((passed + 1))
        echo "check-repeat: run $i passed ($(($(date +%s) - t0)) s)"
        rm -f "$logs/run-$i.log"
    else
        echo "check-repeat: run $i FAILED ($(($(date +%s) - t0)) s): $logs/run-$i.log"
        grep -E '^FAIL|Failed|\*\*\*' "$logs/run-$i.log" | head -20
    fi
done
echo "check-repeat: $passed/$runs run(s) passed"
[ "$passed" = "$runs" ]
