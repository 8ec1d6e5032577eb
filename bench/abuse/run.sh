#!/usr/bin/env bash
# Abuse benchmark (issue 12, "Bounded before and after authentication"):
# corrald on the simulated 8-GPU node of specs/dgx-h100.yaml, in a
# temporary CORRAL_HOME, listening on 127.0.0.1 only. One real client
# (bench_abuse_client: libcorral on the head's Unix socket, connected
# before the load) times cluster-status requests, PAUSE_US apart, in each
# of three phases of the same run (COUNT of them idle; under load, at
# least COUNT and on until the load ends), while the head's VmRSS is
# sampled every 50 ms:
#   1. idle: nothing else;
#   2. frames: 100 unauthenticated TCP clients (bench_abuse_load, bench/abuse/load.c), each
#      sending a frame header announcing 16 MiB and then the 16 MiB, again
#      and again, for FRAMES_S seconds or FRAMES_ROUNDS rounds each;
#   3. idle connections: 20,000 TCP connections that send nothing, opened
#      128 at a time as fast as they complete and held until HOLD_S
#      seconds after the first.
# Goals: the head's RSS under 64 MiB throughout (VmHWM, its peak over the
# whole run, is printed too) and the client's p99 under 10 ms in every
# phase. The head's CPU time in each phase (utime+stime) tells its own
# work from the machine's: the generator shares the CPUs (LOAD_NICE=19
# runs it niced, so that the head and the client come first). Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE` lines
# (ratio: the phase over the idle head); notes go to stderr. Loopback only;
# bounded in count (the generator caps its clients and connections) and time.
# The generator raises its open-file limit (as root it can raise the hard
# limit too); the head raises its own to its hard limit.
#
#   bench/abuse/run.sh                    (make bench-abuse)
#   COUNT=2000 PAUSE_US=1000 FRAMES_S=6 HOLD_S=8 LOAD_NICE=0 bench/abuse/run.sh
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
COUNT="${COUNT:-2000}"
PAUSE_US="${PAUSE_US:-1000}"
CLIENTS="${CLIENTS:-100}"
FRAME="${FRAME:-16777216}"
FRAMES_S="${FRAMES_S:-6}"
FRAMES_ROUNDS="${FRAMES_ROUNDS:-50}"
CONNS="${CONNS:-20000}"
HOLD_S="${HOLD_S:-8}"
LOAD_NICE="${LOAD_NICE:-0}"
CORRAL="$BUILD/corral"
CLIENT="$BUILD/bench/bench_abuse_client"
LOAD="${LOAD:-$BUILD/bench/bench_abuse_load}" # another generator of the same arguments may be given
for f in "$CORRAL" "$BUILD/corrald" "$CLIENT" "$LOAD"; do
    [ -x "$f" ] || { echo "bench/abuse: no $f; run make build first" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "bench/abuse: needs python3 to pick a free port" >&2; exit 2; }

TMP="$(mktemp -d /tmp/bench-abuse.XXXXXX)"
export CORRAL_HOME="$TMP/home"
unset CORRAL_ADDRESS CORRAL_TOKEN_FILE CORRAL_JOB_TOKEN
mkdir -p "$CORRAL_HOME"
SAMPLER=""
LOADPID=""
cleanup() {
    [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null || true
    [ -n "$LOADPID" ] && kill "$LOADPID" 2>/dev/null || true
    "$CORRAL" stop >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

note() { echo "note: $*" >&2; }
pct() { sort -g | awk -v p="$1" '{a[NR]=$1} END{if(NR==0){print "NA";exit} i=int(p/100*NR+0.999999); if(i<1)i=1; if(i>NR)i=NR; print a[i]}'; }
ratio() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN{if(b>0) printf "ratio %s %.2f\n", n, a/b}'; }
kib() { awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}'; }
rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$PID/status"; }
# the head's utime+stime (fields 14 and 15 after the name's closing parenthesis)
cpu_ticks() { sed 's/.*) //' "/proc/$PID/stat" | awk '{print $12 + $13}'; }

note "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r); COUNT=$COUNT PAUSE_US=$PAUSE_US CLIENTS=$CLIENTS FRAME=$FRAME FRAMES_S=$FRAMES_S CONNS=$CONNS HOLD_S=$HOLD_S LOAD_NICE=$LOAD_NICE"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" --listen 127.0.0.1 --port "$PORT" >&2
PID="$(cat "$CORRAL_HOME/session_latest/corrald.pid")"
note "head pid $PID on 127.0.0.1:$PORT, open-file limit $(awk '/Max open files/{print $4}' /proc/$PID/limits)"

# phase NAME [LOAD ARGS...]: the client's COUNT requests with the load (if
# any) running, the head's RSS sampled meanwhile
phase() {
    local name=$1
    shift
    : >"$TMP/rss_$name"
    (while :; do rss_kib >>"$TMP/rss_$name"; sleep 0.05; done) &
    SAMPLER=$!
    rm -f "$TMP/go" "$TMP/stop"
    if [ $# -gt 0 ]; then # under load: as long as the load lasts
        "$CLIENT" "$COUNT" "$PAUSE_US" "$TMP/go" "$TMP/stop" >"$TMP/lat_$name" &
    else
        "$CLIENT" "$COUNT" "$PAUSE_US" "$TMP/go" >"$TMP/lat_$name" &
    fi
    local cpid=$!
    if [ $# -gt 0 ]; then
        nice -n "$LOAD_NICE" "$LOAD" "$@" >"$TMP/load_$name" 2>"$TMP/load_$name.err" &
        LOADPID=$!
        for _ in $(seq 300); do grep -q ready "$TMP/load_$name.err" 2>/dev/null && break; sleep 0.02; done
    fi
    local cpu0
    cpu0=$(cpu_ticks)
    touch "$TMP/go"
    if [ -n "$LOADPID" ]; then
        wait "$LOADPID" || { echo "bench/abuse: the load generator failed: $(cat "$TMP/load_$name.err")" >&2; exit 1; }
        LOADPID=""
        note "$name load: $(cat "$TMP/load_$name")"
    fi
    touch "$TMP/stop"
    wait "$cpid" || { echo "bench/abuse: the client failed in phase $name" >&2; exit 1; }
    note "$name: $(wc -l <"$TMP/lat_$name") requests"
    echo "figure abuse_${name}_head_cpu $(awk -v a="$cpu0" -v b="$(cpu_ticks)" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz}') s"
    kill "$SAMPLER" 2>/dev/null || true
    wait "$SAMPLER" 2>/dev/null || true
    SAMPLER=""
    kill -0 "$PID" 2>/dev/null || { echo "bench/abuse: the head died in phase $name" >&2; exit 1; }
    local p50 p99 max rss
    p50=$(pct 50 <"$TMP/lat_$name")
    p99=$(pct 99 <"$TMP/lat_$name")
    max=$(pct 100 <"$TMP/lat_$name")
    rss=$(sort -g "$TMP/rss_$name" | tail -1)
    echo "figure abuse_${name}_client_p50 $(awk -v u="$p50" 'BEGIN{printf "%.3f", u/1000}') ms"
    echo "figure abuse_${name}_client_p99 $(awk -v u="$p99" 'BEGIN{printf "%.3f", u/1000}') ms"
    echo "figure abuse_${name}_client_max $(awk -v u="$max" 'BEGIN{printf "%.3f", u/1000}') ms"
    echo "figure abuse_${name}_head_rss_max $(kib "$rss") MiB"
    eval "P99_$name=$p99 RSS_$name=$rss"
}

phase idle
phase frames frames 127.0.0.1 "$PORT" "$CLIENTS" "$FRAME" "$FRAMES_S" "$FRAMES_ROUNDS"
phase conns idle 127.0.0.1 "$PORT" "$CONNS" "$HOLD_S"
hwm=$(awk '/^VmHWM:/{print $2}' "/proc/$PID/status")
echo "figure abuse_head_rss_peak $(kib "$hwm") MiB"
ratio abuse_frames_over_idle_client_p99 "$P99_frames" "$P99_idle"
ratio abuse_conns_over_idle_client_p99 "$P99_conns" "$P99_idle"
ratio abuse_frames_over_idle_head_rss "$RSS_frames" "$RSS_idle"
ratio abuse_conns_over_idle_head_rss "$RSS_conns" "$RSS_idle"
awk -v h="$hwm" -v a="$P99_idle" -v b="$P99_frames" -v c="$P99_conns" 'BEGIN{
    p = a; if (b > p) p = b; if (c > p) p = c
    printf "note: goals: head RSS peak %.1f MiB (goal < 64): %s; client p99 worst %.3f ms (goal < 10): %s\n",
        h/1024, h < 65536 ? "met" : "MISSED", p/1000, p < 10000 ? "met" : "MISSED"}' >&2
