#!/usr/bin/env bash
# Tasks and actors benchmark (issue 15, "Performance"): corral's Python
# runtime on a head started here on the simulated 16-CPU node of
# specs/cpu-only.yaml (a private CORRAL_HOME), measured by bench/tasks/bench.py
# with /usr/bin/python3 as Ray's ray_perf.py measures Ray:
#   (a) tasks async: submit 1,000 no-op tasks, then get all;
#   (b) sync task round trip, get(f.remote()) in a loop;
#   (c) actor calls sync and (d) async (submit 5,000, then get all);
#   (e) corral.put and corral.get of a 100 MB numpy array on one node, and
#       memcpy's bandwidth (numpy.copyto into a touched array) in the same run;
#   (f) a fresh actor ready: A.remote() to its first method's result.
# Dask (Debian's python3-distributed, installed here through scripts/deps.sh
# when missing and run as root) is measured in the same run by
# $BENCH_PEERS/07_dask.py, the peers' own method (LocalCluster of 2 worker
# processes of 1 thread; client.map then wait; submit().result() in a loop;
# an actor's increment() sync and async). Ray's published figures (64 vCPUs,
# its ray_perf.py) are printed beside as context, not measured.
# If bench/tasks/c.sh exists (the C API's figures), it runs too.
# Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE` lines (ratio: corral
# over the peer named); notes go to stderr.
#
#   bench/tasks/run.sh                          (make bench-tasks)
#   RUNS=3 DASK=0 bench/tasks/run.sh            (fewer runs; no Dask)
#   DASK_RUNS=5 bench/tasks/run.sh              (Dask's runs: 3 by default)
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
PEERS="${BENCH_PEERS:-/work/shared/peers}"
export RUNS="${RUNS:-5}"
DASK="${DASK:-1}"
DASK_RUNS="${DASK_RUNS:-3}"   # Dask is slow here: its part takes minutes
PY=/usr/bin/python3
CORRAL="$BUILD/corral"
for f in "$CORRAL" "$BUILD/corrald" "$BUILD/python/corral/_core.abi3.so"; do
    [ -e "$f" ] || { echo "bench/tasks: no $f; run make build first" >&2; exit 2; }
done
"$PY" -c 'import numpy, cloudpickle' 2>/dev/null ||
    { echo "bench/tasks: $PY lacks numpy or cloudpickle (scripts/deps.sh installs them)" >&2; exit 2; }

TMP="$(mktemp -d /tmp/bench-tasks.XXXXXX)"
export CORRAL_HOME="$TMP/home"
mkdir -p "$CORRAL_HOME"
cleanup() {
    "$CORRAL" stop >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
note() { echo "note: $*" >&2; }
ratio() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN{if(b>0) printf "ratio %s %.2f\n", n, a/b}'; }
# the value of metric $2 in the JSON lines of file $1
val() { "$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["metric"] == sys.argv[2]:
        print("%.6g" % d["value"])' "$1" "$2"; }

note "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r); RUNS=$RUNS"
"$CORRAL" start --head --hw-spec "$SRC/specs/cpu-only.yaml" >&2
export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}" CORRAL_BUILD_DIR="$BUILD"
(cd "$TMP" && "$PY" "$SRC/bench/tasks/bench.py") >"$TMP/corral.jsonl"
"$CORRAL" stop >/dev/null 2>&1 || true
C="$TMP/corral.jsonl"
"$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print("figure %s %.6g %s" % (d["metric"], d["value"], d["unit"]))
    print("note: %s: %s; samples %s" % (d["metric"], d["note"],
          " ".join("%.4g" % x for x in d["samples"] or [])), file=sys.stderr)' "$C"
ratio put_py_vs_memcpy "$(val "$C" put_py_gbps)" "$(val "$C" memcpy_py_gbps)"
ratio get_py_vs_memcpy "$(val "$C" get_py_gbps)" "$(val "$C" memcpy_py_gbps)"

# --- Dask, the same run -------------------------------------------------------
if [ "$DASK" = 1 ] && ! "$PY" -c 'import distributed' 2>/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        CORRAL_DEPS_SERVE=0 "$SRC/scripts/deps.sh" python3-distributed >&2 || true
    fi
fi
if [ "$DASK" != 1 ]; then
    note "Dask not measured (DASK=$DASK)"
elif [ ! -f "$PEERS/07_dask.py" ]; then
    note "Dask not measured: no $PEERS/07_dask.py (BENCH_PEERS)"
elif ! "$PY" -c 'import distributed' 2>/dev/null; then
    note "Dask not measured: $PY has no distributed (apt-get install python3-distributed, or run as root)"
else
    # the same task counts as corral's figures above
    D="$TMP/dask.jsonl"
    # (what it measured before a failure or DASK_TIMEOUT still counts)
    RUNS=$DASK_RUNS N=1000 SEQ=200 ACT_SYNC=1000 ACT_ASYNC=5000 timeout "${DASK_TIMEOUT:-900}" \
        "$PY" "$PEERS/07_dask.py" >"$D" 2>"$TMP/dask.err" ||
        note "Dask did not finish (rc $?): $(tail -3 "$TMP/dask.err")"
    if [ -s "$D" ]; then
        for m in dask_map_async dask_seq_roundtrip_rate dask_actor_sync_rate dask_actor_async_rate; do
            v=$(val "$D" $m)
            [ -n "$v" ] && echo "figure ${m}_per_s $v 1/s"
        done
        ratio tasks_py_async_vs_dask "$(val "$C" tasks_py_async_per_s)" "$(val "$D" dask_map_async)"
        ratio tasks_py_sync_vs_dask "$(val "$C" tasks_py_sync_per_s)" "$(val "$D" dask_seq_roundtrip_rate)"
        ratio actor_py_sync_vs_dask "$(val "$C" actor_py_sync_per_s)" "$(val "$D" dask_actor_sync_rate)"
        ratio actor_py_async_vs_dask "$(val "$C" actor_py_async_per_s)" "$(val "$D" dask_actor_async_rate)"
    fi
fi

# --- Ray's published figures (context: 64 vCPUs, not this machine) ------------
# python/ray/_private/ray_perf.py's single-client figures, as Ray publishes
# them in its release benchmarks
note "Ray (published, 64 vCPUs): tasks async 8040/s, tasks sync 981/s, actor calls sync 2012/s, actor calls async 8664/s"
echo "figure ray_published_tasks_async_per_s 8040 1/s"
echo "figure ray_published_tasks_sync_per_s 981 1/s"
echo "figure ray_published_actor_sync_per_s 2012 1/s"
echo "figure ray_published_actor_async_per_s 8664 1/s"
ratio tasks_py_async_vs_ray_published "$(val "$C" tasks_py_async_per_s)" 8040
ratio tasks_py_sync_vs_ray_published "$(val "$C" tasks_py_sync_per_s)" 981
ratio actor_py_sync_vs_ray_published "$(val "$C" actor_py_sync_per_s)" 2012
ratio actor_py_async_vs_ray_published "$(val "$C" actor_py_async_per_s)" 8664

# --- the C API's figures, when that part is built ------------------------------
if [ -x "$SRC/bench/tasks/c.sh" ]; then
    "$SRC/bench/tasks/c.sh"
elif [ -f "$SRC/bench/tasks/c.sh" ]; then
    bash "$SRC/bench/tasks/c.sh"
fi
