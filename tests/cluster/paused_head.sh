#!/usr/bin/env bash
# A paused head is not a dead cluster (issue 12, docs/cluster.md
# "Membership"): a head stopped with SIGSTOP for several dead-after periods
# and then continued hears nothing meanwhile, but its agents kept beating;
# it notices its own stall and gives every node a fresh grace period, so a
# healthy agent stays ALIVE and its job keeps running with its worker.
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cpause
head_up "$SPECS/cpu-only.yaml"
agent_up gpu-a "$SPECS/dgx-h100.yaml" 127.0.0.2
id=$("$CORRAL" run --gpus 8 --max-restarts 3 --detach -- sleep 120 | awk '{print $NF}')
wait_started "$id" 10 || fail "job $id did not run"
wpid=$(status "$id" | jq -r '.workers[0].pid')
hpid=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
# three dead-after periods and more without a tick of the head
kill -STOP "$hpid"
sleep $((DEAD * 3 / 1000 + 1))
kill -CONT "$hpid"
# the agent beats every $HB ms: a few dead-after periods after the pause
# it must still be ALIVE, heard since
sleep $((DEAD * 2 / 1000 + 1))
st=$(node_state gpu-a)
[ "$st" = ALIVE ] && ok "gpu-a ALIVE after the head's pause" ||
    fail "gpu-a $st after the head's pause: $("$CORRAL" events | grep -E 'gpu-a|stall')"
js=$(status "$id")
[ "$(jq -r .state <<<"$js")" = RUNNING ] && [ "$(jq -r .restarts <<<"$js")" = 0 ] &&
    [ "$(jq -r '.workers[0].pid' <<<"$js")" = "$wpid" ] && ! gone "$wpid" &&
    ok "its job runs on, same worker (pid $wpid), no restart" || fail "job after the pause: $js"
"$CORRAL" events | grep -q "head_stalled.*fresh grace period" && ok "event: the head's stall" ||
    fail "no head_stalled event: $("$CORRAL" events | tail -5)"
"$CORRAL" events | grep -q "node_dead" && fail "a node was declared dead: $("$CORRAL" events | grep node_dead)"
"$CORRAL" job stop "$id" >/dev/null
wait_job "$id" STOPPED 10 || fail "job $id not stopped"
finish
