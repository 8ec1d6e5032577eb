#!/usr/bin/env bash
# bench/cluster: one head (corrald --head, cpu-only spec, --heartbeat-ms
# 1000, default suspect/dead) under N simulated nodes joining over TCP, one
# connection each, from one load generator process (bench_cluster_loadgen:
# the nodes say corral.io/simulated=true; nothing runs on them), N = 1000
# then 10000, a fresh head each. Per N:
#   - time for all N to register, heartbeat acks per second
#   - the head's CPU% (utime+stime, /proc/PID/stat) over a window after
#     registration, its RSS (VmRSS) and RSS per node ((RSS_N - RSS_idle)/N),
#     and how often it was woken per beat in the window (its voluntary
#     context switches, /proc/PID/status)
#   - time to place a 64-bundle STRICT_SPREAD placement group (CREATED,
#     through the two-phase reservation the simulated nodes answer)
#   - time until the head answers `corral nodes` after all N disconnect at once
#   - time to detect a dead node: one simulated node stops beating (its
#     connection stays open): from its last beat to the head's node_dead
#     event's time (followed with `corral events -f`, so no probe's own
#     cost counts)
# With N above what one process may open (the open-file limit), or
# LOADGENS=K, the N nodes come from K load generators (prefixes sim, sim1,
# sim2, ...: sim-00000 stays the one that goes silent). The hard limit is
# raised to N + 1000 first where the shell may (root), so that the head,
# which raises its own limit to the hard one at start, can hold N.
# Per-heartbeat cost: the head's CPU time over the window divided by the
# beats the load generators sent in it (the head acknowledges only beats
# that carry a change, so acks no longer count beats).
# Then 100 real agent processes (corrald --address, cpu-only spec) started
# in a loop: time until `corral nodes` shows 101 ALIVE.
# Prints `figure NAME VALUE UNIT` lines. No peer is measured in the same run,
# so there is no ratio line. Run with `make bench-cluster` (after `make build`).
# Environment: NS="1000 10000" (sizes), WINDOW=10 (CPU window, s),
# AGENTS=100 (real agents; 0 skips).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
corral=${CORRAL:-$root/build/corral}
corrald=${CORRALD:-$root/build/corrald}
loadgen=$root/build/bench/bench_cluster_loadgen
NS=${NS:-"1000 10000"}
WINDOW=${WINDOW:-10}
AGENTS=${AGENTS:-100}
for b in "$corral" "$corrald" "$loadgen"; do
    if [ ! -x "$b" ]; then
        echo "bench/cluster: $b is not built; run 'make build' first" >&2
        exit 1
    fi
done
for t in jq awk; do
    command -v $t >/dev/null || { echo "bench/cluster: needs $t" >&2; exit 1; }
done
maxn=0
for n in $NS; do [ "$n" -gt "$maxn" ] && maxn=$n; done
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt $((maxn + 1000)) ]; then
    ulimit -Hn $((maxn + 1000)) 2>/dev/null || true
fi
ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((maxn + 100)) ]; then
    echo "bench/cluster: $maxn connections need more than $(ulimit -n) file descriptors" \
        "in the head; raise the hard limit (ulimit -Hn, as root)" >&2
    exit 1
fi
fdmax=$(ulimit -n)
[ "$fdmax" = unlimited ] && fdmax=1000000
export CORRAL_HOME=$(mktemp -d /tmp/corral-bench-cluster.XXXXXX)
tck=$(getconf CLK_TCK)
LG_PIDS="" AGENT_PIDS="" EV_PID=""
cleanup() {
    [ -n "$EV_PID" ] && kill -TERM "$EV_PID" 2>/dev/null
    for p in $LG_PIDS; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $AGENT_PIDS; do kill -TERM "$p" 2>/dev/null || true; done
    "$corral" stop >/dev/null 2>&1 || true
    rm -rf "$CORRAL_HOME"
}
trap cleanup EXIT
ms() { echo $(($(date +%s%N) / 1000000)); }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# times the head went to sleep and was woken (voluntary context switches)
wakeups() { awk '/^voluntary_ctxt_switches:/ {print $2}' "/proc/$1/status"; }
head_up() {
    "$corral" start --head --hw-spec "$root/specs/cpu-only.yaml" --heartbeat-ms 1000 >/dev/null
    HPID=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
    ADDR=$(cat "$CORRAL_HOME/session_latest/address")
    TOKEN=$CORRAL_HOME/session_latest/token
}
head_down() {
    for _ in $(seq 10); do "$corral" stop >/dev/null 2>&1 && break; sleep 1; done
    rm -rf "$CORRAL_HOME"/session_*
}

node_json=$CORRAL_HOME/node.json
"$corral" hw --spec "$root/specs/dgx-h100.yaml" --json >"$node_json"
bundles=$(for _ in $(seq 64); do printf 'CPU=1;'; done)
bundles=${bundles%;}
echo "# bench/cluster on $(nproc) CPU(s), $(uname -r); head: cpu-only spec, heartbeat 1000 ms," \
    "suspect 3000 ms, dead 10000 ms (defaults)"
echo "# simulated nodes: $(jq -r .id "$node_json") description ($(wc -c <"$node_json") bytes" \
    "of JSON) under ids sim-NNNNN, labelled corral.io/simulated=true"

for n in $NS; do
    head_up
    sleep 1
    rss0=$(rss_kib "$HPID")
    out=$CORRAL_HOME/loadgen.$n.out
    # load generators: as many as the open-file limit asks for, or LOADGENS
    k=${LOADGENS:-$(((n + fdmax - 201) / (fdmax - 200)))}
    [ "$k" -ge 1 ] || k=1
    LG_PIDS="" outs=""
    for g in $(seq 0 $((k - 1))); do
        pre=sim; [ "$g" -gt 0 ] && pre=sim$g
        cnt=$((n / k + (g < n % k ? 1 : 0)))
        o=$out; [ "$g" -gt 0 ] && o=$out.$g
        "$loadgen" --address "$ADDR" --token-file "$TOKEN" --node-json "$node_json" --nodes "$cnt" \
            --prefix "$pre" --inflight 48 >"$o" 2>"$o.err" &
        LG_PIDS="$LG_PIDS $!" outs="$outs $o"
    done
    LG_PID=${LG_PIDS# }; LG_PID=${LG_PID%% *} # the first: its sim-00000 goes silent
    for _ in $(seq $((3000 + n / 40))); do # 300 s, and 1 s more per 400 nodes
        all=1
        for o in $outs; do grep -q '^registered' "$o" || all=0; done
        [ "$all" = 1 ] && break
        for p in $LG_PIDS; do
            kill -0 "$p" 2>/dev/null || { echo "bench/cluster: a loadgen died:" >&2; cat "$out"*.err >&2; exit 1; }
        done
        sleep 0.1
    done
    [ "$all" = 1 ] || { echo "bench/cluster: $n nodes did not register in $((300 + n / 400)) s" >&2; cat "$out"*.err >&2; exit 1; }
    reg_ms=$(cat $outs | awk '/^registered/ {if ($3 > m) m = $3} END {print m}')
    echo "figure cluster_register_${n}_nodes $reg_ms ms"
    echo "# $k load generator process(es), $((n / k)) nodes each or one more"
    sleep 2 # the first beats of every node
    c0=$(cpu_ticks "$HPID") t0=$(ms) w0=$(wakeups "$HPID")
    b0=$(cat $outs | awk '/^beats/ {s += $3} END {print s + 0}')
    sleep "$WINDOW"
    c1=$(cpu_ticks "$HPID") t1=$(ms) w1=$(wakeups "$HPID")
    b1=$(cat $outs | awk '/^beats/ {s += $3} END {print s + 0}')
    rss=$(rss_kib "$HPID")
    cpu=$(awk -v d=$((c1 - c0)) -v tck="$tck" -v ms=$((t1 - t0)) 'BEGIN {printf "%.1f", 100 * d / tck / (ms / 1000)}')
    echo "figure cluster_head_cpu_${n}_nodes_1hz $cpu %"
    echo "figure cluster_head_rss_idle $((rss0 / 1024)) MiB"
    echo "figure cluster_head_rss_${n}_nodes $((rss / 1024)) MiB"
    echo "figure cluster_head_rss_per_node_${n} $(awk -v a="$rss" -v b="$rss0" -v n="$n" 'BEGIN {printf "%.1f", (a - b) / n}') KiB"
    beats=$(awk -v b=$((b1 - b0)) -v ms=$((t1 - t0)) 'BEGIN {printf "%.0f", b / (ms / 1000)}')
    echo "figure cluster_heartbeats_${n}_nodes $beats beats/s"
    echo "figure cluster_head_wakeups_per_heartbeat_${n}_nodes $(awk -v w=$((w1 - w0)) -v b=$((b1 - b0)) 'BEGIN {if (b > 0) printf "%.3f", w / b; else print "NA"}') wakeups"
    echo "figure cluster_head_cpu_per_heartbeat_${n}_nodes $(awk -v d=$((c1 - c0)) -v tck="$tck" -v b=$((b1 - b0)) 'BEGIN {if (b > 0) printf "%.2f", 1e6 * d / tck / b; else print "NA"}') us"
    # acks per second: the whole seconds of the window so far (not the first)
    acks=$(cat $outs | awk '/^acks/ {if ($2 > 1) {s[$2] += $3}} END {k = 0; t = 0; for (i in s) {t += s[i]; k++} if (k) printf "%.0f", t / k; else print 0}')
    echo "# heartbeat acks: $acks/s (only beats that carry a change are acknowledged)"

    # a 64-host gang's placement group, until CREATED
    p0=$(ms)
    pg=$("$corral" pg create g64 --bundles "$bundles" --strategy STRICT_SPREAD --json 2>&1) || true
    p1=$(ms)
    st=$(jq -r .state <<<"$pg" 2>/dev/null || echo "?")
    hosts=$(jq -r '[.bundles[].node_id] | unique | length' <<<"$pg" 2>/dev/null || echo "?")
    if [ "$st" = CREATED ]; then
        echo "figure cluster_pg64_strict_spread_${n}_nodes $((p1 - p0)) ms"
    else
        echo "# pg g64 not CREATED ($st): $(head -c 300 <<<"$pg")"
    fi
    echo "# pg g64: $st on $hosts distinct nodes (time includes the corral CLI's connect)"
    "$corral" pg remove g64 >/dev/null 2>&1 || true

    # a dead node: sim-00000 stops beating. The head's own node_dead event
    # (its time_ms, followed by one `corral events -f`, started before)
    # against the wall clock of the node's last beat: the head's detection,
    # not a probe's polling.
    ev=$CORRAL_HOME/events.$n
    "$corral" events -f --json --limit 1 >"$ev" 2>/dev/null &
    EV_PID=$!
    sleep 1
    kill -USR1 "$LG_PID"
    d0=$(ms) dead=""
    while [ $(($(ms) - d0)) -lt 30000 ]; do
        line=$(grep '"node_dead"' "$ev" | grep '"sim-00000"' | head -1 || true)
        [ -n "$line" ] && { dead=1; break; }
        sleep 0.1
    done
    kill -TERM "$EV_PID" 2>/dev/null || true
    wait "$EV_PID" 2>/dev/null || true
    if [ -n "$dead" ]; then
        since=$(awk '/^silenced/ {print $3}' "$out")
        last=$(awk '/^silenced/ {print $4}' "$out")
        at=$(jq -r .time_ms <<<"$line")
        dead=$((at - last))
        echo "figure cluster_dead_detect_${n}_nodes $dead ms"
        echo "# from its last beat ($since ms before it went silent) to the head's node_dead" \
            "event; dead-after is 10000 ms: $((dead - 10000)) ms after it"
    else
        echo "# sim-00000 not DEAD within 30 s of its last beat"
    fi
    # every simulated node disconnects at once: until the head answers again
    for p in $LG_PIDS; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $LG_PIDS; do wait "$p" || true; done
    LG_PIDS=""
    s0=$(ms)
    until "$corral" nodes --json >/dev/null 2>&1; do sleep 0.05; done
    echo "figure cluster_${n}_disconnects_until_answering $(($(ms) - s0)) ms"
    for o in $outs; do echo "# loadgen: $(grep '^summary' "$o")"; done
    if [ -s "$out.err" ]; then echo "# loadgen stderr: $(head -3 "$out.err" | tr '\n' ' ')"; fi
    head_down
done

if [ "$AGENTS" -gt 0 ]; then
    head_up
    a0=$(ms)
    for i in $(seq "$AGENTS"); do
        "$corrald" --address "$ADDR" --hw-spec "$root/specs/cpu-only.yaml" --node-id "a$i" \
            --token-file "$TOKEN" >/dev/null 2>&1 &
        AGENT_PIDS="$AGENT_PIDS $!"
    done
    a1=$(ms)
    want=$((AGENTS + 1)) joined=""
    while [ $(($(ms) - a0)) -lt 60000 ]; do
        alive=$("$corral" nodes --json | jq '[.[] | select(.state == "ALIVE")] | length')
        [ "$alive" = "$want" ] && { joined=$(($(ms) - a0)); break; }
        sleep 0.1
    done
    echo "# $AGENTS corrald agents started in $((a1 - a0)) ms (the loop)"
    if [ -n "$joined" ]; then
        echo "figure cluster_${AGENTS}_real_agents_joined $joined ms"
    else
        echo "# only $alive of $want nodes ALIVE after 60 s"
    fi
    for p in $AGENT_PIDS; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $AGENT_PIDS; do wait "$p" 2>/dev/null || true; done
    AGENT_PIDS=""
    head_down
fi
