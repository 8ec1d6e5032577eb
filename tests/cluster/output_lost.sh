#!/bin/bash
# Output a remote agent could not deliver is counted, not silently gone
# (issue 12): a worker writes 64 MiB on an agent while the head is frozen
# (SIGSTOP) and ends; the head is then killed, so what the agent had queued
# and what was still in the worker's file never reach it. The new head
# that takes over gets the worker's end with the sizes of its files there
# and records the difference: `job status` shows how much output was
# lost, --json as output_lost, and an output_lost event says it. A job
# whose output all arrived has none. No timings: each step waits for a
# state. The count survives a head restart (state.db).
set -u
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cluster-output-lost
T=$TDATA
mkdir -p "$T"
MIB=$((1024 * 1024))
head_up "$SPECS/cpu-only.yaml"
agent_up far "$SPECS/cpu-only.yaml" 127.0.0.2
wait_node far 10 ALIVE || fail "agent far not ALIVE: $(node_state far)"
ON="--label-selector corral.io/node-id=far"

head -c $((4 * MIB)) /dev/urandom >"$T/r4"
"$CORRAL" run $ON -- cat "$T/r4" >"$T/run.out" || fail "remote run"
whole=$("$CORRAL" job list --json | jq -r '.[-1].job_id')
[ "$(status "$whole" | jq '.workers[0].output_lost')" = 0 ] && cmp -s "$T/r4" "$T/run.out" &&
    ok "all 4 MiB arrived: no output lost" || fail "whole job: $(status "$whole" | jq -c .workers)"

head -c $((64 * MIB)) /dev/urandom >"$T/r64"
full=$((64 * MIB + 6))
id=$("$CORRAL" run --detach $ON -- sh -c "echo ready; while [ ! -e $T/go ]; do sleep 0.05; done; cat $T/r64")
wait_started "$id" 20 || fail "job $id did not start"
wpid=$(status "$id" | jq -r '.workers[0].pid')
wait_until "[ \"\$(\"\$CORRAL\" job logs $id)\" = ready ]" 30 || fail "the first line did not arrive"
HPID=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
kill -STOP "$HPID"
touch "$T/go"
agent_file=$CORRAL_HOME/agent_far/logs/job$id-w0.out
wait_until "[ \"\$(stat -c %s $agent_file 2>/dev/null)\" = $full ] && ! kill -0 $wpid 2>/dev/null" 120 &&
    ok "head frozen: the worker wrote its 64 MiB on the agent and ended" ||
    fail "worker file: $(stat -c %s "$agent_file" 2>/dev/null) of $full bytes"
kill -KILL "$HPID"
kill -CONT "$HPID" 2>/dev/null
head_up "$SPECS/cpu-only.yaml"
wait_node far 30 ALIVE || fail "agent far did not rejoin: $(node_state far)"
wait_until "[ \"\$(status $id | jq -r .state)\" = SUCCEEDED ]" 60 || fail "job $id: $(status "$id" | jq -c '{state,reason}')"
lost=$(status "$id" | jq '.workers[0].output_lost')
got=$(stat -c %s "$CORRAL_HOME/session_latest/logs/job$id-w0.out" 2>/dev/null || echo 0)
[ "$lost" -gt 0 ] && [ $((lost + got)) -eq $full ] &&
    ok "the record says $lost bytes were lost; with the $got received that is all $full" ||
    fail "output_lost $lost, received $got, written $full"
"$CORRAL" job status "$id" | grep -q "output lost: .* ($lost bytes) its agent wrote never reached the head" &&
    ok "job status: $("$CORRAL" job status "$id" | grep 'output lost')" || fail "job status: $("$CORRAL" job status "$id")"
"$CORRAL" events --json | jq_true '.[] | select(.kind == "output_lost" and .job_id == $j)' --arg j "$id" &&
    ok "an output_lost event" || fail "no output_lost event"

# the count is the job's record, kept in state.db with the worker: a head
# restarted over the same session still says it (it was in memory only)
HPID=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
kill -KILL "$HPID"
head_up "$SPECS/cpu-only.yaml"
[ "$(status "$id" | jq '.workers[0].output_lost')" = "$lost" ] &&
    "$CORRAL" job status "$id" | grep -q "($lost bytes) its agent wrote never reached the head" &&
    ok "after a head restart the record still says $lost bytes were lost" ||
    fail "after a head restart: $(status "$id" | jq -c .workers)"
[ "$(status "$whole" | jq '.workers[0].output_lost')" = 0 ] &&
    ok "and the whole job still none" || fail "whole job after the restart: $(status "$whole" | jq -c .workers)"
finish
