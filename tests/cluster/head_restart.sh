#!/usr/bin/env bash
# Head kill -9 and restart with jobs running on agents (issue 5): the agents
# keep their workers running through the outage, reconnect with backoff,
# report them, and the new head adopts them (same pids), losing no
# acknowledged job; a job submitted just before the kill is still there. A
# worker that ends while the head is frozen, its WorkerExit never read,
# still has its exit code recorded: the agent keeps every change until a
# heartbeat that carried it is acknowledged, and reports it on rejoining.
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" crestart
head_up "$SPECS/cpu-only.yaml"
agent_up gpu-a "$SPECS/dgx-h100.yaml" 127.0.0.2
agent_up gpu-b "$SPECS/dgx-h100.yaml" 127.0.0.3
# the workers end when the test says (a file), not after a time the restart
# may outlast on a loaded machine
GATE=$TDATA/gate # the workers look: not in CORRAL_HOME, hidden from them
id=$("$CORRAL" run --gpus 2 --workers 2 --placement STRICT_SPREAD --detach -- \
    sh -c "echo start \$CORRAL_NODE_ID; while [ ! -e $GATE ]; do sleep 0.1; done; echo end \$CORRAL_NODE_ID" |
    awk '{print $NF}')
wait_job "$id" RUNNING 30 || fail "job $id did not run"
for _ in $(seq 100); do # both remote workers reported started (pids known)
    [ "$(status "$id" | jq '[.workers[] | select(.state == "RUNNING" and .pid > 0)] | length')" = 2 ] && break
    sleep 0.05
done
pids=$(status "$id" | jq -r '[.workers[].pid] | join(",")')
nodes=$(status "$id" | jq -r '[.workers[].node_id] | sort | join(",")')
[ "$nodes" = "gpu-a,gpu-b" ] && ok "STRICT_SPREAD gang on gpu-a and gpu-b" || fail "nodes: $nodes"
id2=$("$CORRAL" run --gpus 8 --workers 2 --detach -- true | awk '{print $NF}') # waits: GPUs busy
hpid=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
kill -KILL "$hpid"
sleep 0.5
for p in ${pids//,/ }; do kill -0 "$p" 2>/dev/null || fail "worker $p died with the head"; done
ok "workers keep running while the head is down"
head_up "$SPECS/cpu-only.yaml"
wait_node gpu-a 30 ALIVE && wait_node gpu-b 30 ALIVE && ok "both agents reconnected to the new head" ||
    fail "agents: $("$CORRAL" nodes)"
js=$(status "$id")
[ "$(jq -r .state <<<"$js")" = RUNNING ] && [ "$(jq -r '[.workers[].pid] | join(",")' <<<"$js")" = "$pids" ] &&
    ok "job $id RUNNING with the same worker pids ($pids)" || fail "after restart: $js"
"$CORRAL" events | grep -q "still runs on gpu-" && ok "event: workers adopted from the agents' reports" ||
    fail "no adopted event"
[ "$(status "$id2" | jq -r .state)" != "" ] && ok "job $id2 submitted before the kill is known" ||
    fail "job $id2 lost"
touch "$GATE"
wait_job "$id" SUCCEEDED 30 && ok "job $id SUCCEEDED (its exit codes came from the agents)" ||
    fail "job $id: $(status "$id" | jq -c '{state,reason}')"
out=$("$CORRAL" job logs "$id")
grep -q "^\[[01]\] end gpu-a" <<<"$out" && grep -q "^\[[01]\] end gpu-b" <<<"$out" &&
    ok "output of both remote workers, from both sides of the restart" || fail "logs: $out"
wait_job "$id2" SUCCEEDED 30 && ok "job $id2 ran once the GPUs were free" ||
    fail "job $id2: $(status "$id2" | jq -c '{state,reason}')"
# a worker ends while the head is frozen: its WorkerExit dies unread with
# the head, the change it was comes back with the agent's Register
# (the worker ends when the test says, once the head is frozen: under load
# its start may take longer than any fixed sleep)
GATE3=$TDATA/gate3
id3=$("$CORRAL" run --detach --label-selector corral.io/node-id=gpu-a -- \
    sh -c "while [ ! -e $GATE3 ]; do sleep 0.05; done; exit 7" | awk '{print $NF}')
wait_started "$id3" 60 || fail "job $id3 did not start"
pid3=$(status "$id3" | jq -r '.workers[0].pid')
hpid=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
kill -STOP "$hpid"
touch "$GATE3"
for _ in $(seq 600); do kill -0 "$pid3" 2>/dev/null || break; sleep 0.05; done
kill -0 "$pid3" 2>/dev/null && fail "the worker of job $id3 (pid $pid3) did not end"
sleep 0.3 # the agent's WorkerExit goes to the frozen head's socket
kill -KILL "$hpid"
sleep 0.2
head_up "$SPECS/cpu-only.yaml"
wait_job "$id3" FAILED 30
js=$(status "$id3")
[ "$(jq -r .exit_code <<<"$js")" = 7 ] && [ "$(jq -r '.workers[0].state' <<<"$js")" = EXITED ] &&
    ok "job $id3: exit code 7 from a WorkerExit the old head never read" ||
    fail "job $id3 after the frozen head: $(jq -c '{state,reason,exit_code,w:.workers[0].state}' <<<"$js")"
finish
