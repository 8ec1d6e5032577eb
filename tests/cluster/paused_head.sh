#!/usr/bin/env bash
# A paused head is not a dead cluster (issue 12, docs/cluster.md
# "Membership"): a head stopped with SIGSTOP for several dead-after periods
# and then continued hears nothing meanwhile, but its agents kept beating;
# it notices its own stall and gives every node a fresh grace period, so a
# healthy agent stays ALIVE and its job keeps running with its worker.
# And a node that is declared dead but rejoins within its job's restart
# window lets a --max-restarts gang that no other node can hold restart
# there, rather than failing for good.
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

# --- a node lost and back within the restart window -----------------------
kill -STOP "$(agent_pid gpu-a)"
wait_node gpu-a 10 DEAD && ok "gpu-a DEAD while its agent is stopped" || fail "gpu-a $(node_state gpu-a)"
for _ in $(seq 100); do
    [ "$(status "$id" | jq -r .state)" = PENDING ] && break
    sleep 0.05
done
js=$(status "$id")
[ "$(jq -r .state <<<"$js")" = PENDING ] && jq -r .reason <<<"$js" | grep -q "rejoin" &&
    ok "its gang waits for a node to rejoin: $(jq -r .reason <<<"$js")" || fail "job while gpu-a is dead: $js"
kill -CONT "$(agent_pid gpu-a)"
wait_node gpu-a 10 ALIVE || fail "gpu-a did not rejoin"
wait_started "$id" 10 && ok "the gang restarted on gpu-a when it rejoined" ||
    fail "not restarted after the rejoin: $(status "$id") $("$CORRAL" events | tail -6)"
js=$(status "$id")
[ "$(jq -r .restarts <<<"$js")" = 1 ] && [ "$(jq -r '.workers[0].node_id' <<<"$js")" = gpu-a ] &&
    [ "$(jq -r '.workers[0].pid' <<<"$js")" != "$wpid" ] &&
    ok "restarts 1, on gpu-a, a new worker" || fail "after the rejoin: $js $("$CORRAL" events | tail -12)"
for _ in $(seq 100); do gone "$wpid" && break; sleep 0.05; done
gone "$wpid" && ok "the stale worker (pid $wpid) was stopped" || fail "stale worker $wpid still runs"
"$CORRAL" job stop "$id" >/dev/null
wait_job "$id" STOPPED 10 || fail "job $id not stopped"
finish
