#!/usr/bin/env bash
# A node whose agent is gone takes nothing new (docs/cluster.md
# "Membership"): stopped with SIGTERM, its agent's connection closes and
# the node is SUSPECT until dead-after; meanwhile the scheduler leaves it
# cordoned, so a job only it could take waits and says why, and a batch of
# placement groups goes to the head's node at once, where before each was
# reserved on the gone node, failed for want of a connection and tried
# there again until the node was dead. An agent that joins again opens it,
# and the job that waited for it runs there.
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" ccordon
head_up "$SPECS/cpu-only.yaml"
agent_up r "$SPECS/cpu-only.yaml" 127.0.0.2
wait_node r 30 ALIVE || fail "agent r: $("$CORRAL" nodes)"
pid=$(agent_pid r)
kill -TERM "$pid"
for _ in $(seq 200); do gone "$pid" && break; sleep 0.05; done
gone "$pid" || fail "agent $pid did not stop"
wait_node r 10 SUSPECT || fail "r: $(node_state r)"
id=$("$CORRAL" run --detach --label-selector corral.io/node-id=r -- true | awk '{print $NF}')
js=$(status "$id")
[ "$(jq -r .state <<<"$js")" = PENDING ] && grep -q "r, is cordoned: its agent is not connected" <<<"$(jq -r .reason <<<"$js")" &&
    ok "a job for r waits: $(jq -r .reason <<<"$js")" || fail "job for r: $(jq -c '{state,reason}' <<<"$js")"
# 20 groups of one bundle (half a CPU) each: every one created, on the head's node,
# while r is still SUSPECT (dead-after is 10 s)
HEADNODE=$("$CORRAL" nodes --json | jq -r '.[] | select(.node_id != "r") | .node_id')
for i in $(seq 20); do
    "$CORRAL" pg create "g$i" --bundles 'CPU=0.5' --strategy SPREAD >/dev/null ||
        fail "pg create g$i"
done
list=$("$CORRAL" pg list --json)
created=$(jq '[.[] | select(.state == "CREATED")] | length' <<<"$list")
onhead=$(jq --arg h "$HEADNODE" '[.[] | select(.bundles[0].node_id == $h)] | length' <<<"$list")
[ "$created" -eq 20 ] && [ "$onhead" -eq 20 ] && [ "$(node_state r)" = SUSPECT ] &&
    ok "20 groups created on $HEADNODE while r is SUSPECT" ||
    fail "groups: $created created, $onhead on $HEADNODE, r $(node_state r): $(jq -c '.[0]' <<<"$list")"
# a new agent for r joins (a new incarnation): the old one's share is given
# back while r is dead for a moment, and the job that waited for r is not
# refused in that moment; it runs on r
agent_up r "$SPECS/cpu-only.yaml" 127.0.0.2
wait_node r 30 ALIVE || fail "r again: $(node_state r)"
for _ in $(seq 300); do
    st=$(status "$id" | jq -r .state)
    case $st in SUCCEEDED | FAILED | STOPPED) break ;; esac
    sleep 0.05
done
js=$(status "$id")
[ "$(jq -r .state <<<"$js")" = SUCCEEDED ] && ok "the job that waited for r ran on it after r came back" ||
    fail "job for r after r came back: $(jq -c '{state,reason}' <<<"$js")"
"$CORRAL" run --label-selector corral.io/node-id=r -- true >/dev/null && ok "r takes a job again" ||
    fail "a job on r after it joined again"
finish
