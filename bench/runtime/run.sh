#!/usr/bin/env bash
# Runtime benchmark (issue 4, "Performance"): corrald on the simulated
# 8-GPU node of specs/dgx-h100.yaml, in a temporary CORRAL_HOME, each
# figure next to its peer measured in the same run:
#   1. gang start-up: from just before `corral run --gpus 1 --workers 8 --
#      STAMP DIR` to the latest of the 8 workers' own start stamps, p50 and
#      p99 over RUNS; against posix_spawn of the same 8 workers (the floor,
#      bench_runtime_spawn gang) timed the same way, the two taking turns;
#      and against torchrun --standalone --nproc_per_node=8 start-up of the
#      same trivial worker script under /usr/bin/python3 when Debian's
#      python3-torch is installed (skipped with a note otherwise);
#   2. sequential `corral run -- true` per second, SEQ runs a round over
#      SEQ_ROUNDS rounds, each started by posix_spawn as the floor's are,
#      against sequential posix_spawn of true (the floor, FLOOR_N a round)
#      and, with BENCH_SLURM=1, Slurm's `srun -n1 true` (SRUN_RUNS a round)
#      on a one-node Slurm started and stopped here
#      with /work/shared/peers/09_slurm_setup.sh and 09_slurm_stop.sh
#      (they install slurm-wlm and munge with apt when missing, run daemons
#      as root);
#   then a read-only request's round trip against a raw Unix-socket
#      ping-pong on the same CPU placement (bench_runtime_rtt);
#   3. the idle head: CPU% over IDLE_S seconds (utime+stime of
#      /proc/PID/stat) and VmRSS, after the runs above;
#   4. the sequential runs on a second corrald on this machine (an agent
#      joined over TCP loopback, as tests/cluster runs them: the head's
#      dispatch to an agent, its spawn and its reports), taking turns with
#      the floor as in 2.; last, since a node that stays in the cluster
#      changes what the sections above measure.
# Timing: bash's $EPOCHREALTIME around the command (no fork in the timed
# window), medians. Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE`
# lines (ratio: corral over the peer named in NAME); notes go to stderr.
#
#   bench/runtime/run.sh                          (make bench-runtime)
#   RUNS=30 SEQ=50 IDLE_S=10 BENCH_SLURM=1 bench/runtime/run.sh
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$SRC/bench/lib-agent.sh"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
RUNS="${RUNS:-30}"
SEQ="${SEQ:-50}"
IDLE_S="${IDLE_S:-10}"
TORCH_RUNS="${TORCH_RUNS:-5}"
SRUN_RUNS="${SRUN_RUNS:-20}"
PEERS="${BENCH_PEERS:-/work/shared/peers}"
CORRAL="$BUILD/corral"
STAMP="$BUILD/bench/bench_runtime_stamp"
SPAWN="$BUILD/bench/bench_runtime_spawn"
# an older build (CORRAL_BUILD_DIR, a before figure): this tree's floor and
# spawner, which the sequential runs need (seq --setsid)
[ "$BUILD" != "$SRC/build" ] && [ -x "$SRC/build/bench/bench_runtime_spawn" ] &&
    SPAWN="$SRC/build/bench/bench_runtime_spawn"
command -v jq >/dev/null || { echo "bench/runtime: needs jq (scripts/deps.sh)" >&2; exit 2; }
PY=/usr/bin/python3
for f in "$CORRAL" "$BUILD/corrald" "$STAMP" "$SPAWN" "$BUILD/bench/bench_runtime_pg"; do
    [ -x "$f" ] || { echo "bench/runtime: no $f; run make build first" >&2; exit 2; }
done

TMP="$(mktemp -d /tmp/bench-runtime.XXXXXX)"
export CORRAL_HOME="$TMP/home"
mkdir -p "$CORRAL_HOME"
slurm_up=0
APID=""
cleanup() {
    [ -n "$APID" ] && kill -TERM "$APID" 2>/dev/null || true
    "$CORRAL" stop >/dev/null 2>&1 || true
    if [ "$slurm_up" = 1 ]; then "$PEERS/09_slurm_stop.sh" >&2 || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

note() { echo "note: $*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END{if(NR==0){print "NA";exit} if(NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# nearest-rank percentile P of the numbers on stdin
pct() { sort -g | awk -v p="$1" '{a[NR]=$1} END{if(NR==0){print "NA";exit} i=int(p/100*NR+0.999999); if(i<1)i=1; if(i>NR)i=NR; print a[i]}'; }
# ms from T0 ($EPOCHREALTIME, "S.US") to the latest stamp ("S NS") in DIR;
# fails unless exactly N stamps are there
latest_ms() {
    local t0="$1" dir="$2" n="$3"
    [ "$(ls "$dir" | wc -l)" = "$n" ] || { echo "bench/runtime: $(ls "$dir" | wc -l) of $n workers stamped in $dir" >&2; return 1; }
    cat "$dir"/* | awk -v t0="$t0" 'BEGIN{split(t0,a,"."); s0=a[1]; us0=a[2]+0}
        {ms=($1-s0)*1000 + $2/1e6 - us0/1e3; if(NR==1||ms>m) m=ms} END{printf "%.3f\n", m}'
}
ratio() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN{if(b>0) printf "ratio %s %.2f\n", n, a/b}'; }

note "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r); RUNS=$RUNS SEQ=$SEQ IDLE_S=$IDLE_S"
"$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" >&2
PID="$(cat "$CORRAL_HOME/session_latest/corrald.pid")"

# --- 1. gang of 8 ---------------------------------------------------------
: > "$TMP/gang_corral"; : > "$TMP/gang_floor"
for r in $(seq -2 "$RUNS"); do                    # runs -2..0 are warm-ups
    d="$TMP/g$r"; mkdir "$d" "$d.f"
    t0=$EPOCHREALTIME; "$CORRAL" run --gpus 1 --workers 8 -- "$STAMP" "$d" >/dev/null
    c=$(latest_ms "$t0" "$d" 8)
    t0=$EPOCHREALTIME; "$SPAWN" gang 8 "$STAMP" "$d.f"
    f=$(latest_ms "$t0" "$d.f" 8)
    if [ "$r" -gt 0 ]; then echo "$c" >> "$TMP/gang_corral"; echo "$f" >> "$TMP/gang_floor"; fi
    rm -rf "$d" "$d.f"
done
c50=$(median < "$TMP/gang_corral"); c99=$(pct 99 < "$TMP/gang_corral")
f50=$(median < "$TMP/gang_floor"); f99=$(pct 99 < "$TMP/gang_floor")
echo "figure gang8_start_corral_p50 $c50 ms"
echo "figure gang8_start_corral_p99 $c99 ms"
echo "figure gang8_start_posix_spawn_p50 $f50 ms"
echo "figure gang8_start_posix_spawn_p99 $f99 ms"
echo "figure gang8_start_over_floor_p50 $(awk -v a="$c50" -v b="$f50" 'BEGIN{printf "%.3f", a-b}') ms"
ratio gang8_start_posix_spawn_p50 "$c50" "$f50"
ratio gang8_start_posix_spawn_p99 "$c99" "$f99"

if "$PY" -c 'import torch' >/dev/null 2>&1 && command -v torchrun >/dev/null; then
    # the worker stamps from Python, first line of the script (after the
    # interpreter's start-up, which any Python worker pays)
    cat > "$TMP/stamp.py" <<'PYEOF'
import os, sys, time
t = time.time_ns()
with open(os.path.join(sys.argv[1], str(os.getpid())), "w") as f:
    f.write("%d %09d\n" % (t // 10**9, t % 10**9))
PYEOF
    : > "$TMP/gang_torchrun"; : > "$TMP/gang_corral_py"
    for r in $(seq 0 "$TORCH_RUNS"); do           # run 0 is a warm-up
        d="$TMP/t$r"; mkdir "$d" "$d.c"
        t0=$EPOCHREALTIME
        (cd "$TMP" && torchrun --standalone --nproc_per_node=8 --redirects 2 --tee 2 "$TMP/stamp.py" "$d" >/dev/null 2>&1)
        t=$(latest_ms "$t0" "$d" 8)
        t0=$EPOCHREALTIME; "$CORRAL" run --gpus 1 --workers 8 -- "$PY" "$TMP/stamp.py" "$d.c" >/dev/null
        c=$(latest_ms "$t0" "$d.c" 8)
        if [ "$r" -gt 0 ]; then echo "$t" >> "$TMP/gang_torchrun"; echo "$c" >> "$TMP/gang_corral_py"; fi
        rm -rf "$d" "$d.c"
    done
    t50=$(median < "$TMP/gang_torchrun"); p50=$(median < "$TMP/gang_corral_py")
    echo "figure gang8_start_python_corral_p50 $p50 ms"
    echo "figure gang8_start_python_torchrun_p50 $t50 ms"
    ratio gang8_start_python_torchrun_p50 "$p50" "$t50"
else
    note "torchrun skipped: Debian's python3-torch is not installed for $PY (apt-get install -y python3-torch)"
fi

# --- 2. sequential `corral run -- true` -----------------------------------
# Every side is started the same way: SEQ runs in a row by
# bench_runtime_spawn seq (posix_spawn, then wait), itself in a session of
# its own (setsid -w); the floor's children (`true`) each in a session of
# their own too (--setsid), as corral's workers (setsid) and Slurm's steps
# are. With the kernel's autogroup a session is a CPU-share unit: the
# floor's children sharing the bench's session got less CPU on a loaded
# machine than corral's workers, each in its own (bench/train/run.sh met
# the same bias). Until 2026-12-05 corral's and srun's runs came from a
# bash loop instead, whose fork of bash costs more than posix_spawn (2x
# to 3x a spawn of true on the VM of issue 18), a cost the floor did not
# pay. SEQ_ROUNDS rounds take turns (floor, corral, srun); the figures are
# the rounds' medians.
SEQ_ROUNDS="${SEQ_ROUNDS:-5}"
FLOOR_N="${FLOOR_N:-200}"
TRUE=/bin/true   # corral runs `true` through PATH; the floor needs a path
seq_of() { setsid -w "$SPAWN" seq "$@"; } # prints N SECONDS PER_SECOND P50_MS
for _ in 1 2 3; do "$CORRAL" run -- true; done
if [ "${BENCH_SLURM:-0}" = 1 ]; then
    slurm_up=1
    "$PEERS/09_slurm_setup.sh" >&2
    export SLURM_CONF=/tmp/bench-peers-slurm/etc/slurm.conf
    srun -n1 true; srun -n1 true                  # warm-up
else
    note "srun skipped: set BENCH_SLURM=1 to start a one-node Slurm here (installs slurm-wlm and munge with apt, runs daemons as root)"
fi
: > "$TMP/seq_floor"; : > "$TMP/seq_corral"; : > "$TMP/seq_srun"
for r in $(seq "$SEQ_ROUNDS"); do
    seq_of "$FLOOR_N" --setsid "$TRUE" >> "$TMP/seq_floor"
    seq_of "$SEQ" "$CORRAL" run -- true >> "$TMP/seq_corral"
    [ "$slurm_up" = 1 ] && seq_of "$SRUN_RUNS" srun -n1 true >> "$TMP/seq_srun"
    note "sequential round $r: floor $(tail -1 "$TMP/seq_floor" | cut -d' ' -f3)/s, corral $(tail -1 "$TMP/seq_corral" | cut -d' ' -f3)/s$([ "$slurm_up" = 1 ] && echo ", srun $(tail -1 "$TMP/seq_srun" | cut -d' ' -f3)/s"), load $(cut -d' ' -f1 /proc/loadavg)"
done
rate=$(awk '{print $3}' "$TMP/seq_corral" | median)
lat=$(awk '{print $4}' "$TMP/seq_corral" | median)
floor=$(awk '{print $3}' "$TMP/seq_floor" | median)
echo "figure seq_run_true_corral $rate runs/s"
echo "figure seq_run_true_corral_latency_p50 $lat ms"
echo "figure seq_posix_spawn_true $floor runs/s"
echo "figure seq_posix_spawn_true_latency_p50 $(awk '{print $4}' "$TMP/seq_floor" | median) ms"
ratio seq_posix_spawn_true "$rate" "$floor"
# Each run's worker gets two new files in the session's logs/ (its .out and
# .err, renamed from spares made ahead: docs/workers.md "Logs"), which the
# floor does not pay; what a creation there costs now (create_p50.py)
"$PY" "$SRC/bench/runtime/create_p50.py" "$CORRAL_HOME/session_latest/logs" seq_log_dir_file_create_p50
if [ "$slurm_up" = 1 ]; then
    "$PEERS/09_slurm_stop.sh" >&2; slurm_up=0
    s50=$(awk '{print $4}' "$TMP/seq_srun" | median)
    srate=$(awk '{print $3}' "$TMP/seq_srun" | median)
    echo "figure seq_srun_true_latency_p50 $s50 ms"
    echo "figure seq_srun_true $srate runs/s"
    ratio seq_srun_true "$rate" "$srate"
fi

# --- placement groups created and removed through libcorral ----------------
# Ray's own measure ("placement group create/removal" of `ray
# microbenchmark`, its published 765/s): 100 groups of one bundle of a tiny
# custom resource created without waiting, waited on together, removed;
# here the same with corral_pg_create_many / corral_pg_remove_many, 100
# groups of CPU=0.001 each (Ray is not installed here: 765/s is context,
# not a peer of this run). Then one group at a time, each create and remove
# a round trip, from one client and from PG_CLIENTS at once (the head's
# group commit shares commits between them); the round trip of a request
# that writes nothing is the transport's floor.
PG_S="${PG_S:-3}"
PG_CLIENTS="${PG_CLIENTS:-8}"
PG_BATCH="${PG_BATCH:-100}"
"$BUILD/bench/bench_runtime_pg" "$PG_S" CPU=0.001 "$PG_BATCH" > "$TMP/pgb"
echo "figure pg_create_remove_batch${PG_BATCH} $(awk '/pg_cycles/{c=$2} /pg_seconds/{s=$2} END{printf "%.0f", c/s}' "$TMP/pgb") per_s"
"$BUILD/bench/bench_runtime_pg" "$PG_S" > "$TMP/pg1"
echo "figure pg_create_remove_1_client $(awk '/pg_cycles/{c=$2} /pg_seconds/{s=$2} END{printf "%.0f", c/s}' "$TMP/pg1") per_s"
echo "figure request_round_trips_1_client $(awk '/rt_calls/{c=$2} /rt_seconds/{s=$2} END{printf "%.0f", c/s}' "$TMP/pg1") per_s"
for i in $(seq "$PG_CLIENTS"); do "$BUILD/bench/bench_runtime_pg" "$PG_S" > "$TMP/pgp$i" & done
wait
echo "figure pg_create_remove_${PG_CLIENTS}_clients $(cat "$TMP"/pgp* | awk -v s="$PG_S" '/pg_cycles/{c+=$2} END{printf "%.0f", c/s}') per_s"

# --- a read-only request beside the raw Unix-socket round trip (issue 18) --
# bench_runtime_rtt: RTT_N JobStatus requests of one job on one libcorral
# connection, and a 64-byte ping-pong over a Unix socketpair between two
# processes (the floor), on the same CPU placement: the head (taskset -p)
# and the client both on CPU 0, then the head on CPU 0 and the client on
# CPU 1 (the floor's two sides likewise). A wakeup across CPUs costs an
# interprocessor interrupt and a cold cache on both sides; on a loaded
# machine the scheduler's placement is otherwise whatever it is.
RTT_N="${RTT_N:-5000}"
RTT="$BUILD/bench/bench_runtime_rtt"
[ -x "$RTT" ] || RTT="$SRC/build/bench/bench_runtime_rtt" # an older build: this tree's client
if [ -x "$RTT" ] && command -v taskset >/dev/null; then
    ncpu=$(nproc)
    aff0=$(taskset -p "$PID" | awk '{print $NF}')
    taskset -p 1 "$PID" >/dev/null
    for place in same cross; do
        cb=0; [ "$place" = cross ] && cb=$((ncpu > 1 ? 1 : 0))
        f=$("$RTT" floor "$RTT_N" 0 "$cb" | awk '{print $3}')
        h=$("$RTT" head "$RTT_N" "$cb" job | awk '{print $3}')
        echo "figure read_request_rtt_${place}_cpu_p50 $h us"
        echo "figure unix_socket_pingpong_${place}_cpu_p50 $f us"
        ratio "unix_socket_pingpong_${place}_cpu" "$h" "$f"
    done
    taskset -p "$aff0" "$PID" >/dev/null
else
    note "request round trip skipped: no bench_runtime_rtt or no taskset"
fi

# --- 3. the idle head -----------------------------------------------------
cpu_ticks() { awk '{print $14+$15}' "/proc/$PID/stat"; }
HZ=$(getconf CLK_TCK)
sleep 1
k0=$(cpu_ticks); t0=$EPOCHREALTIME
sleep "$IDLE_S"
k1=$(cpu_ticks); t1=$EPOCHREALTIME
echo "figure idle_head_cpu $(awk -v a="$k0" -v b="$k1" -v s="$t0" -v e="$t1" -v hz="$HZ" 'BEGIN{printf "%.3f", (b-a)/hz/(e-s)*100}') %"
echo "figure idle_head_rss $(awk '/^VmRSS/{printf "%.1f", $2/1024}' "/proc/$PID/status") MiB"

# --- 4. sequential runs on an agent -----------------------------------------
bench_agent_up bench-remote
ON_REMOTE=(--label-selector corral.io/node-id=bench-remote)
for _ in 1 2 3; do "$CORRAL" run "${ON_REMOTE[@]}" -- true; done
: > "$TMP/rseq_floor"; : > "$TMP/rseq_corral"
for r in $(seq "$SEQ_ROUNDS"); do
    seq_of "$FLOOR_N" --setsid "$TRUE" >> "$TMP/rseq_floor"
    seq_of "$SEQ" "$CORRAL" run "${ON_REMOTE[@]}" -- true >> "$TMP/rseq_corral"
    note "sequential round $r on the agent: floor $(tail -1 "$TMP/rseq_floor" | cut -d' ' -f3)/s, corral $(tail -1 "$TMP/rseq_corral" | cut -d' ' -f3)/s, load $(cut -d' ' -f1 /proc/loadavg)"
done
rrate=$(awk '{print $3}' "$TMP/rseq_corral" | median)
echo "figure seq_run_true_remote $rrate runs/s"
echo "figure seq_run_true_remote_latency_p50 $(awk '{print $4}' "$TMP/rseq_corral" | median) ms"
ratio seq_posix_spawn_true_remote "$rrate" "$(awk '{print $3}' "$TMP/rseq_floor" | median)"
