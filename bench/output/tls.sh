#!/usr/bin/env bash
# bench/output/tls.sh (issue 12, TLS for TCP): what TLS costs an agent's
# link to the head. Two clusters in turn, each a head on loopback and one
# agent (--address, on loopback as tests/cluster runs them): plain TCP
# (the loopback default), then the same with --tls and the agent pinning
# the head's certificate, ROUNDS times in turn (default 3; medians). For
# each: the median wall time of RUNS remote
# `corral run -- true` (submit, place on the agent, start, exit, answer:
# one job's round trips over the link), and the MB/s of MIB MiB of output
# from a worker on the agent through `corral run` (the agent's forwarding
# over the link, the head's copy, the follow to the client), the byte count
# checked, and the CPU seconds per GiB the head and the agent used for it
# (utime + stime from /proc, which load moves much less). Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE` (TLS over
# plain); notes go to stderr. A loaded machine moves the wall times: each
# ratio is of two figures of the same run.
#   bench/output/tls.sh               RUNS=20 MIB=128 ROUNDS=3 bench/output/tls.sh
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
MIB="${MIB:-128}"
RUNS="${RUNS:-20}"
ROUNDS="${ROUNDS:-3}"
CORRAL="$BUILD/corral"
B="$BUILD/bench/bench_output"
for f in "$CORRAL" "$BUILD/corrald" "$B"; do
    [ -x "$f" ] || { echo "bench/output/tls.sh: no $f; run make build first" >&2; exit 2; }
done
TMP="$(mktemp -d /tmp/bench-tls.XXXXXX)"
APID=""
stop_all() {
    [ -n "${CORRAL_HOME:-}" ] || return 0
    [ -n "$APID" ] && kill -TERM "$APID" 2>/dev/null || true
    "$CORRAL" stop >/dev/null 2>&1 || true
    APID=""
}
trap 'stop_all; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
note() { echo "note: $*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END{if(NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.6f\n", b-a}'; }

# CPU seconds (utime + stime) the head and the agent have used
cpu() {
    local tck
    tck=$(getconf CLK_TCK)
    for p in "$@"; do sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}'; done |
        awk -v t="$tck" '{s += $1} END{printf "%.3f\n", s / t}'
}
note "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); MIB=$MIB RUNS=$RUNS ROUNDS=$ROUNDS"
# cluster MODE: one cluster, its figures appended to $TMP/{lat,out,cpu}.MODE
cluster() {
    local mode=$1 tls=() pin=()
    # a fresh home each time, removed after: the next cluster's agent would
    # find this one's output files under the same job ids, and their pages
    # would weigh on its writes
    export CORRAL_HOME="$TMP/home-$mode"
    mkdir -m 700 "$CORRAL_HOME"
    [ "$mode" = tls ] && tls=(--tls)
    # MIB MiB kept whole, above the default 64 MiB bound on worker output
    local logmax=(--worker-log-max "$((MIB * 2 > 64 ? MIB * 2 : 64))M")
    "$CORRAL" start --head --hw-spec "$SRC/specs/cpu-only.yaml" "${tls[@]}" "${logmax[@]}" >/dev/null
    local s=$CORRAL_HOME/session_latest
    [ "$mode" = tls ] && pin=(--tls-fingerprint "$(cat "$s/tls_fingerprint")")
    "$CORRAL" start --address "$(cat "$s/address")" --token-file "$s/token" \
        --hw-spec "$SRC/specs/cpu-only.yaml" --node-id remote --node-ip 127.0.0.1 "${pin[@]}" "${logmax[@]}" >/dev/null
    APID=$(cat "$CORRAL_HOME/agent_remote/corrald.pid")
    local sel=(--label-selector corral.io/node-id=remote) t0 i hpid c0
    "$CORRAL" run "${sel[@]}" -- true # warm
    for i in $(seq "$RUNS"); do
        t0=$EPOCHREALTIME
        "$CORRAL" run "${sel[@]}" -- true
        since "$t0"
    done | median >>"$TMP/lat.$mode"
    hpid=$(cat "$s/corrald.pid")
    c0=$(cpu "$hpid" "$APID")
    t0=$EPOCHREALTIME
    "$CORRAL" run "${sel[@]}" -- "$B" gen "$MIB" | "$B" sink >"$TMP/sink"
    since "$t0" >>"$TMP/out.$mode"
    echo "$(cpu "$hpid" "$APID") $c0" | awk '{printf "%.3f\n", $1 - $2}' >>"$TMP/cpu.$mode"
    [ "$(cut -d' ' -f1 "$TMP/sink")" = $((MIB * 1048576)) ] ||
        { echo "bench/output/tls.sh: $mode: $(cut -d' ' -f1 "$TMP/sink") bytes arrived" >&2; exit 1; }
    stop_all
    rm -rf "$CORRAL_HOME"
}
# plain and TLS in turn, ROUNDS times: load that comes and goes weighs on both
for r in $(seq "$ROUNDS"); do
    cluster plain
    cluster tls
done
for m in plain tls; do
    echo "figure remote_run_true_$m $(median <"$TMP/lat.$m" | awk '{printf "%.1f", $1*1000}') ms"
    echo "figure remote_output_$m $(median <"$TMP/out.$m" | awk -v m="$MIB" '{printf "%.1f", m*1048576/1e6/$1}') MB/s"
    echo "figure remote_output_cpu_$m $(median <"$TMP/cpu.$m" | awk -v m="$MIB" '{printf "%.2f", $1*1024/m}') s/GiB"
done
r() { echo "$(median <"$TMP/$1.plain") $(median <"$TMP/$1.tls")" | awk -v n="$2" '{if ($1 > 0) printf "ratio %s %.2f\n", n, $2/$1}'; }
r lat remote_run_true_tls_vs_plain
r out remote_output_time_tls_vs_plain
r cpu remote_output_cpu_tls_vs_plain
