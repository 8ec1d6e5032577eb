#!/usr/bin/env bash
# bench/output (issue 18, "Job output at pipe speed"): MIB MiB of output
# (default 256) from one worker (bench_output gen) through `corral run`,
# each figure beside its peer measured in the same run:
#   1. local: `corral run -- gen MIB | cat >/dev/null` on the head's own
#      node, against the plain pipe `gen MIB | cat >/dev/null`;
#   2. remote: the same on a second corrald (--address, the agent, on
#      loopback as tests/cluster runs them): the worker's file, the agent's
#      forwarding over TCP, the head's copy and the follow to the client;
#      against one TCP loopback stream of MIB MiB (bench_output tcp);
#   the fixed part of each (a run of 1 MiB: the job's start, exit and
#   follow), and the most each ratio could be with it (ceiling); the
#   remote stream alone (the sink's first byte to its last) against the
#   TCP stream, whose own figure runs from its accept to its last byte;
#   and the limit corral's design sets on both: the same writer into a
#   fresh file (`gen MIB > FILE`, its own write time), since a worker
#   writes its output to a file (on a VM that backs guest memory when it is
#   first touched, page-cache writes to new pages are far slower than a
#   pipe: docs/benchmarks.md "Job output");
#   3. FOLLOWERS (default 4) `corral job logs -f` of one local job at once,
#      MB/s of each (the slowest), and the worker's own write time beside
#      that of the same job with no follower (followers must not slow it).
# Timing: bash's $EPOCHREALTIME around each command, median of RUNS
# (default 3). Beside each wall-clock figure, the CPU seconds per GiB that
# every process of the path used (utime+stime: the head's and the agent's
# from /proc/PID/stat, the rest as this shell's children), which a loaded
# machine moves much less than wall time; and the worker's own write time
# into its file (the floor corral's design sets: workers write files).
# Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE` (corral over the
# peer named in NAME); notes go to stderr. Every run checks the byte count
# that arrived.
#   bench/output/run.sh                      (make bench-output)
#   MIB=64 RUNS=5 FOLLOWERS=8 bench/output/run.sh
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$SRC/bench/lib-agent.sh"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
MIB="${MIB:-256}"
RUNS="${RUNS:-3}"
FOLLOWERS="${FOLLOWERS:-4}"
CORRAL="$BUILD/corral"
B="$BUILD/bench/bench_output"
for f in "$CORRAL" "$BUILD/corrald" "$B"; do
    [ -x "$f" ] || { echo "bench/output: no $f; run make build first" >&2; exit 2; }
done
command -v jq >/dev/null || { echo "bench/output: needs jq (scripts/deps.sh)" >&2; exit 2; }

TMP="$(mktemp -d /tmp/bench-output.XXXXXX)"
export CORRAL_HOME="$TMP/home"
mkdir -p "$CORRAL_HOME"
APID=""
cleanup() {
    [ -n "$APID" ] && kill -TERM "$APID" 2>/dev/null || true
    "$CORRAL" stop >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

note() { echo "note: $*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END{if(NR==0){print "NA";exit} if(NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.6f\n", b-a}'; }
mbs() { awk -v m="$MIB" -v s="$1" 'BEGIN{printf "%.1f", m*1048576/1e6/s}'; }
figure() { echo "figure $1 $(mbs "$2") MB/s"; }
ratio() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN{if(a>0) printf "ratio %s %.2f\n", n, b/a}'; }
BYTES=$((MIB * 1048576))
# checks that file $1 (bench_output sink's "BYTES SECONDS") saw every byte
whole() {
    local got
    got=$(cut -d' ' -f1 "$1")
    [ "$got" = "$BYTES" ] || { echo "bench/output: $2: $got of $BYTES bytes arrived" >&2; exit 1; }
}

note "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r); MIB=$MIB RUNS=$RUNS FOLLOWERS=$FOLLOWERS"
# each worker's MIB MiB is kept whole (the default bound, 64 MiB per file,
# would drop the oldest part of a file a follower has not read yet)
LOGMAX=(--worker-log-max "$((MIB * 2 > 64 ? MIB * 2 : 64))M")
# A head and a second corrald (the remote agent) in an empty CORRAL_HOME,
# the ones before stopped and their files removed. Each round of
# measurements starts so (KEEP_FILES=1: one cluster and every file kept
# to the end): on this VM guest memory that was not touched recently costs
# a hypervisor fault per page when a file's page cache first takes it
# (about 500 MB/s against about 5,000 for pages freed a moment before),
# and with every round's files kept, each later round's writers, corral's
# and the fresh-file peer's, reached further into such memory while the
# pipe and TCP peers touch none (docs/benchmarks.md "Job output").
cluster_up() {
    if [ -n "$APID" ]; then
        kill -TERM "$APID" 2>/dev/null || true
        for _ in $(seq 100); do [ -e "/proc/$APID" ] || break; sleep 0.05; done
        "$CORRAL" stop >/dev/null 2>&1 || true
        rm -rf "$CORRAL_HOME"
        mkdir -p "$CORRAL_HOME"
    fi
    "$CORRAL" start --head --hw-spec "$SRC/specs/cpu-only.yaml" "${LOGMAX[@]}" >&2
    LOCAL=$("$CORRAL" nodes --json | jq -r '.[0].node_id')
    bench_agent_up bench-remote "${LOGMAX[@]}"
    HPID=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
}
# before a round: the last round's files gone (KEEP_FILES=1: kept)
round_start() {
    [ "${KEEP_FILES:-0}" = 1 ] && return 0
    rm -f "$TMP"/fresh*
    cluster_up >/dev/null 2>&1
}
cluster_up
TCK=$(getconf CLK_TCK)
# CPU seconds so far into CPU: this shell's children (`times`, run here,
# not in a subshell), the head, the agent
cpu_now() {
    times >"$TMP/times"
    CPU=$(tail -1 "$TMP/times" | awk -v t="$TCK" -v h="$(awk '{print $14+$15}' /proc/$HPID/stat)" \
        -v a="$(awk '{print $14+$15}' /proc/$APID/stat)" \
        '{gsub(/[ms]/," ",$1); gsub(/[ms]/," ",$2); split($1,u," "); split($2,s," ");
          printf "%.3f\n", u[1]*60+u[2]+s[1]*60+s[2]+(h+a)/t}')
}
cpu_mark() { cpu_now; C0=$CPU; }
# CPU seconds per GiB since cpu_mark, into GIB
cpu_gib() {
    cpu_now
    GIB=$(awk -v a="$C0" -v b="$CPU" -v m="$MIB" 'BEGIN{printf "%.3f\n", (b-a)*1024/m}')
}

# the fixed part of a `corral run` on node $1 (its job's submission,
# placement, start, exit and the end of its follow), with 1 MiB of output:
# FIX gets its SECONDS
fixed_on() {
    local t0
    t0=$EPOCHREALTIME
    "$CORRAL" run --label-selector "corral.io/node-id=$1" -- "$B" gen 1 | "$B" sink >"$TMP/fsink"
    FIX=$(since "$t0")
    [ "$(cut -d' ' -f1 "$TMP/fsink")" = 1048576 ] || { echo "bench/output: fixed run on $1: $(cat "$TMP/fsink")" >&2; exit 1; }
}

# one timed run of `corral run` on node $1 into the sink: RES gets
# "SECONDS CPU/GIB WORKER_SECONDS STREAM_SECONDS" (the last: the sink's,
# from its first byte to its last)
run_on() {
    local t0 s
    cpu_mark
    t0=$EPOCHREALTIME
    "$CORRAL" run --label-selector "corral.io/node-id=$1" -- "$B" gen "$MIB" "$TMP/wk1.s" |
        "$B" sink >"$TMP/sink"
    s=$(since "$t0")
    cpu_gib
    whole "$TMP/sink" "corral run on $1"
    RES="$s $GIB $(cat "$TMP/wk1.s") $(cut -d' ' -f2 "$TMP/sink")"
}

: >"$TMP/pipe"; : >"$TMP/local"; : >"$TMP/tcp"; : >"$TMP/remote"; : >"$TMP/fwrite"; : >"$TMP/fixed"
for r in $(seq 0 "$RUNS"); do # run 0 warms up
    [ "$r" = 0 ] || round_start
    cpu_mark
    t0=$EPOCHREALTIME
    "$B" gen "$MIB" | "$B" sink >"$TMP/sink"
    p=$(since "$t0")
    cpu_gib
    p="$p $GIB"
    whole "$TMP/sink" pipe
    # kept to the round's end, as the workers' files are
    "$B" gen "$MIB" "$TMP/fw.s" >"$TMP/fresh$r"
    run_on "$LOCAL"
    l=$RES
    cpu_mark
    "$B" tcp "$MIB" >"$TMP/tcp1"
    cpu_gib
    t="$(cat "$TMP/tcp1") $GIB"
    run_on bench-remote
    m=$RES
    fixed_on "$LOCAL"
    fx=$FIX
    fixed_on bench-remote
    fx="$fx $FIX"
    [ "$r" = 0 ] && continue
    # each round's seconds, CPU s/GiB, worker and stream seconds
    note "round $r: pipe $p | local $l | tcp $t | remote $m | fixed $fx"
    echo "$fx" >>"$TMP/fixed"
    echo "$p" >>"$TMP/pipe"; echo "$l" >>"$TMP/local"; echo "$t" >>"$TMP/tcp"; echo "$m" >>"$TMP/remote"
    cat "$TMP/fw.s" >>"$TMP/fwrite"
done
col() { cut -d' ' -f"$2" "$TMP/$1" | median; }
P=$(col pipe 1); L=$(col local 1); T=$(col tcp 1); M=$(col remote 1)
figure output_pipe "$P"
figure output_local "$L"
ratio output_local_vs_pipe "$L" "$P"
figure output_local_worker "$(col local 3)"
F=$(col fwrite 1)
figure output_file_write "$F"
ratio output_local_vs_file_write "$L" "$F"
echo "figure output_pipe_cpu $(col pipe 2) s/GiB"
echo "figure output_local_cpu $(col local 2) s/GiB"
figure output_tcp "$T"
figure output_remote "$M"
ratio output_remote_vs_tcp "$M" "$T"
figure output_remote_worker "$(col remote 3)"
echo "figure output_tcp_cpu $(col tcp 2) s/GiB"
echo "figure output_remote_cpu $(col remote 2) s/GiB"
# what bounds the ratios besides the stream: a job's fixed cost (a run of
# 1 MiB), and the most each ratio could be were the stream as fast as its
# peer (peer time / (peer time + fixed cost))
FXL=$(col fixed 1); FXR=$(col fixed 2)
echo "figure output_local_fixed $FXL s"
echo "figure output_remote_fixed $FXR s"
echo "figure output_local_stream $(mbs "$(col local 4)") MB/s"
echo "figure output_remote_stream $(mbs "$(col remote 4)") MB/s"
# stream against stream: the TCP peer's seconds run from its accept to its
# last byte (no process start, no connect), the sink's from its first byte
# to its last (no submission, start or exit of the job)
ratio output_remote_stream_vs_tcp "$(col remote 4)" "$T"
awk -v p="$P" -v f="$FXL" 'BEGIN{printf "ratio output_local_ceiling_vs_pipe %.2f\n", p/(p+f)}'
awk -v t="$T" -v f="$FXR" 'BEGIN{printf "ratio output_remote_ceiling_vs_tcp %.2f\n", t/(t+f)}'

# --- FOLLOWERS of one job: the worker waits for GO, so all are following
# (from offset 0) before its first byte
: >"$TMP/fol"; : >"$TMP/wk"; : >"$TMP/file"
for r in $(seq 1 "$RUNS"); do
    round_start
    # the same worker with no follower: its write time into its log file
    rm -f "$TMP/file.s"
    "$CORRAL" run --detach --label-selector "corral.io/node-id=$LOCAL" -- "$B" gen "$MIB" "$TMP/file.s" >/dev/null
    for _ in $(seq 600); do [ -s "$TMP/file.s" ] && break; sleep 0.05; done
    cat "$TMP/file.s" >>"$TMP/file"
    rm -f "$TMP/go" "$TMP/wk.s"
    id=$("$CORRAL" run --detach --label-selector "corral.io/node-id=$LOCAL" -- sh -c \
        "while [ ! -e $TMP/go ]; do sleep 0.01; done; exec $B gen $MIB $TMP/wk.s")
    pids=""
    for i in $(seq "$FOLLOWERS"); do
        "$CORRAL" job logs -f "$id" | "$B" sink >"$TMP/f$i" &
        pids="$pids $!"
    done
    sleep 1 # each follower connected and looked at the empty file
    t0=$EPOCHREALTIME
    touch "$TMP/go"
    for p in $pids; do wait "$p"; done
    since "$t0" >>"$TMP/fol"
    for i in $(seq "$FOLLOWERS"); do whole "$TMP/f$i" "follower $i"; done
    cat "$TMP/wk.s" >>"$TMP/wk"
done
F=$(median <"$TMP/fol"); W=$(median <"$TMP/wk"); FL=$(median <"$TMP/file")
figure "output_local_${FOLLOWERS}followers" "$F"
ratio "output_local_${FOLLOWERS}followers_vs_pipe" "$F" "$P"
echo "figure output_worker_${FOLLOWERS}followers $W s"
echo "figure output_worker_unfollowed $FL s"
ratio "output_worker_${FOLLOWERS}followers_vs_unfollowed" "$FL" "$W"
