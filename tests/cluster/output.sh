#!/bin/bash
# Output of a worker on a remote agent in bulk (issue 18): 64 MiB through
# `corral run` arrive whole and in order (a checksum); while the head does
# not read (stopped with SIGSTOP), the agent holds a bounded queue of
# output (its RSS) and the rest waits in the worker's file; once the head
# reads again every byte reaches the follower before the job's end. No
# timings: each step waits for a state.
set -u
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cluster-output
SUSPECT=30000 DEAD=60000 # the head is stopped for a while below
T=$TDATA
mkdir -p "$T"
MIB=$((1024 * 1024))
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# 128 MiB per worker must arrive whole: above the default bound on worker
# output files (64 MiB, --worker-log-max; tests/cli/output_rotation.sh)
head_up "$SPECS/cpu-only.yaml" --worker-log-max 256M
HPID=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
# under ASan freed buffers wait in a quarantine (256 MiB by default) and
# would count as the agent's growth below: keep it small
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4"
agent_up far "$SPECS/cpu-only.yaml" 127.0.0.2 --worker-log-max 256M
wait_node far 10 ALIVE || fail "agent far not ALIVE: $(node_state far)"
APID=$(agent_pid far)
ON="--label-selector corral.io/node-id=far"

# 1. 64 MiB of random bytes from the remote worker, whole and in order
head -c $((64 * MIB)) /dev/urandom >"$T/r64"
want=$(sha256sum <"$T/r64" | cut -d' ' -f1)
"$CORRAL" run $ON -- sh -c "echo \$CORRAL_NODE_ID >&2; cat $T/r64" >"$T/run.out" 2>"$T/run.err"; rc=$?
got=$(sha256sum <"$T/run.out" | cut -d' ' -f1)
[ $rc -eq 0 ] && [ "$got" = "$want" ] && grep -qx far "$T/run.err" &&
    ok "remote run: 64 MiB whole and in order (sha256)" ||
    fail "remote run: rc=$rc $(wc -c <"$T/run.out") bytes, sha256 $got want $want $(head -c 300 "$T/run.err")"

# 2. the head stops reading: the agent's queue is bounded
cat "$T/r64" "$T/r64" >"$T/r128"
want128=$({ echo ready; cat "$T/r128"; } | sha256sum | cut -d' ' -f1)
id=$("$CORRAL" run --detach $ON -- sh -c "echo ready; while [ ! -e $T/go ]; do sleep 0.05; done; cat $T/r128")
"$CORRAL" job logs -f "$id" >"$T/f.out" 2>"$T/f.err" &
fpid=$!
WPIDS="$WPIDS $fpid"
wait_until "grep -qx ready $T/f.out" 60 || fail "follower did not see the first line: $(cat "$T/f.err")"
rss0=$(rss_kib "$APID")
kill -STOP "$HPID"
touch "$T/go"
full=$((128 * MIB + 6))
out_size() { find "$CORRAL_HOME/agent_far/logs" -name '*.out' -size +1M -exec stat -c %s {} + 2>/dev/null | sort -n | tail -1; }
wait_until "[ \"\$(out_size)\" = $full ]" 120 &&
    ok "head stopped: the remote worker wrote its 128 MiB meanwhile" ||
    fail "head stopped: the worker's file has $(out_size) of $full bytes"
rss1=$(rss_kib "$APID")
grow=$(((rss1 - rss0) / 1024))
# bound: the forwarding queue (4 MiB), the read buffer, malloc's slack;
# without one the agent would hold most of the 128 MiB
[ $grow -lt 40 ] && ok "head stopped: the agent's RSS grew ${grow} MiB (bounded queue)" ||
    fail "head stopped: the agent's RSS grew from $rss0 to $rss1 KiB"
kill -CONT "$HPID"
wait_until "! kill -0 $fpid 2>/dev/null" 120
wait "$fpid"; rc=$?
got=$(sha256sum <"$T/f.out" | cut -d' ' -f1)
[ $rc -eq 0 ] && [ "$got" = "$want128" ] &&
    ok "head back: the follower got all 128 MiB whole and in order, then the job's end" ||
    fail "head back: rc=$rc $(wc -c <"$T/f.out") bytes $(head -c 300 "$T/f.err")"
[ "$(status "$id" | jq -r .state)" = SUCCEEDED ] && ok "head back: the job SUCCEEDED" ||
    fail "job $id is $(status "$id" | jq -r .state)"
finish
