#!/usr/bin/env bash
# A mixed cluster on one machine (issue 5): four hosts of one TPU v6e 4x4
# slice (4 chips each), two DGX-class GPU nodes, and the head on a CPU-only
# node. A slice gang lands on the slice and nowhere else, worker 0 on the
# slice's worker 0; STRICT_SPREAD across the GPU nodes; a wrong token is
# refused and logged; an agent-port flood of malformed frames disturbs
# nobody.
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cmixed
head_up "$SPECS/cpu-only.yaml"
for w in 0 1 2 3; do agent_up "tpu-w$w" "$SPECS/tpu-v6e-4x4-w$w.yaml" "127.0.0.$((10 + w))"; done
agent_up gpu-a "$SPECS/dgx-h100.yaml" 127.0.0.2
agent_up gpu-b "$SPECS/dgx-h100.yaml" 127.0.0.3
[ "$("$CORRAL" nodes --json | jq '[.[] | select(.state == "ALIVE")] | length')" = 7 ] &&
    ok "7 nodes ALIVE" || fail "nodes: $("$CORRAL" nodes)"
[ "$("$CORRAL" status --json | jq '.resources.TPU.total')" = 16 ] && ok "16 TPU chips in the cluster" ||
    fail "status: $("$CORRAL" status --json | jq -c .resources)"

# the slice gang: 4 workers x 4 chips, one per host of one slice
out=$("$CORRAL" run --tpus 4 --workers 4 --placement STRICT_SPREAD --domain corral.io/tpu-slice-name \
    -- sh -c 'echo "$CORRAL_NODE_ID chips=$TPU_VISIBLE_CHIPS"' 2>&1); rc=$?
# a worker given every chip of its host needs no TPU_VISIBLE_CHIPS (docs/hardware.md)
hosts=$(sed -n 's/^\[[0-9]\] \(tpu-w[0-3]\) chips=$/\1/p' <<<"$out" | sort -u | wc -l)
[ $rc -eq 0 ] && [ "$hosts" = 4 ] && ok "slice gang: 4 workers on the 4 slice hosts, all 4 chips each" ||
    fail "slice gang: rc=$rc $out"
grep -q "^\[0\] tpu-w0 " <<<"$out" && ok "worker 0 on the slice's worker 0" || fail "worker 0: $out"
! grep -q "gpu-\|cpu-01" <<<"$out" && ok "nothing of it elsewhere" || fail "elsewhere: $out"
# five hosts' worth cannot be one slice: said so
out=$("$CORRAL" run --tpus 4 --workers 5 --placement STRICT_SPREAD --domain corral.io/tpu-slice-name -- true 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qi "cannot\|infeasible" <<<"$out" && ok "a 5-host slice gang is refused with the reason" ||
    fail "5 hosts: rc=$rc $out"

# STRICT_SPREAD across the GPU nodes, by label
out=$("$CORRAL" run --gpus 1 --workers 2 --placement STRICT_SPREAD \
    --label-selector corral.io/accelerator-type=H100 -- sh -c 'echo $CORRAL_NODE_ID' 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(sed 's/^\[[0-9]\] //' <<<"$out" | sort | tr '\n' ' ')" = "gpu-a gpu-b " ] &&
    ok "STRICT_SPREAD GPU gang on gpu-a and gpu-b" || fail "spread: rc=$rc $out"

# a worker on a joined agent reaches the head over TCP with its job
# credential: its own job's status is served, the node list refused
out=$("$CORRAL" run --gpus 1 --label-selector corral.io/node-id=gpu-b -- sh -c \
    '"$1" job status "$CORRAL_JOB_ID" >/dev/null && echo own=ok; "$1" nodes 2>&1 | grep -c "node_list needs the cluster token"; echo "addr=$CORRAL_ADDRESS"' \
    sh "$CORRAL" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "own=ok" <<<"$out" && grep -Eq '^(\[0\] )?1$' <<<"$out" && grep -q "addr=$ADDR$" <<<"$out" &&
    ok "a remote worker's job credential: own status served over TCP, the node list refused" ||
    fail "remote job credential: rc=$rc $out"

# heartbeats carry the free resources the agent counts: the same as the head's
gpu_free() { "$CORRAL" nodes --json | jq -c '.[] | select(.node_id == "gpu-a") | .resources.GPU | [.free, .reported_free]'; }
id=$("$CORRAL" run --detach --gpus 2 --label-selector corral.io/node-id=gpu-a -- sleep 30)
got=; for i in $(seq 50); do got=$(gpu_free); [ "$got" = "[6,6]" ] && break; sleep 0.1; done
[ "$got" = "[6,6]" ] && ok "gpu-a's agent reports 6 GPUs free while 2 run, as the head counts" ||
    fail "reported free while running: $got"
"$CORRAL" job stop "$id" >/dev/null
got=; for i in $(seq 50); do got=$(gpu_free); [ "$got" = "[8,8]" ] && break; sleep 0.1; done
[ "$got" = "[8,8]" ] && ok "and 8 once the job is stopped" || fail "reported free after stop: $got"

# a wrong token is refused and logged
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$CORRAL_HOME/bad.token"; chmod 600 "$CORRAL_HOME/bad.token"
out=$("$CORRAL" start --address "$ADDR" --token-file "$CORRAL_HOME/bad.token" --hw-spec "$SPECS/cpu-only.yaml" --node-id intruder 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "refused this agent's token" <<<"$out" && ok "an agent with a wrong token is refused" ||
    fail "wrong token: rc=$rc $out"
grep -q "refused .*agent" "$CORRAL_HOME"/session_latest/logs/corrald.log &&
    ok "the head logged the refusal" || fail "no refusal in the head's log"
[ -z "$(node_state intruder)" ] && ok "the intruder is no node" || fail "intruder: $(node_state intruder)"

# a flood of malformed frames on the head's TCP port
port=${ADDR##*:}
for i in $(seq 200); do
    { printf '\x00\x00\x00\x10garbagegarbage!!'; head -c 64 /dev/urandom; } > /dev/tcp/127.0.0.1/$port 2>/dev/null
done &
flood=$!
out=$("$CORRAL" run --gpus 1 -- sh -c 'echo still here' 2>&1); rc=$?
wait $flood
[ $rc -eq 0 ] && grep -q "still here" <<<"$out" && ok "jobs run during the flood" || fail "during flood: $out"
sleep $(awk "BEGIN{print $DEAD/1000}")
[ "$("$CORRAL" nodes --json | jq '[.[] | select(.state == "ALIVE")] | length')" = 7 ] &&
    ok "every node still ALIVE after the flood" || fail "after flood: $("$CORRAL" nodes --json | jq -c '[.[]|{node_id,state}]')"
! "$CORRAL" events --json | grep -q '"kind":"node_drift"' && ok "no agent ever counted less free than the head" ||
    fail "drift: $("$CORRAL" events --json | grep node_drift)"
finish
