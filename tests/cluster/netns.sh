#!/usr/bin/env bash
# A real cut link (issue 5): one agent in its own network namespace, joined
# to the head over a veth pair; taking the link down makes its node SUSPECT
# then DEAD while its worker keeps running on the far side, the gang
# restarts on a node still reachable, and when the link comes back the
# agent rejoins and its stale worker is stopped. Needs root and `ip netns`
# (skipped, 77, otherwise).
NS=crt$$
VH=crh$$ VA=cra$$
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! ip netns add "$NS" 2>/dev/null; then
    echo "skip: needs root and ip netns"
    exit 77
fi
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cnetns
netns_cleanup() {
    cluster_cleanup
    ip link del "$VH" 2>/dev/null
    ip netns del "$NS" 2>/dev/null
}
trap netns_cleanup EXIT
ip link add "$VH" type veth peer name "$VA" netns "$NS" &&
    ip addr add 10.213.0.1/24 dev "$VH" && ip link set "$VH" up &&
    ip netns exec "$NS" ip addr add 10.213.0.2/24 dev "$VA" &&
    ip netns exec "$NS" ip link set "$VA" up && ip netns exec "$NS" ip link set lo up ||
    { echo "FAIL: cannot set up the veth pair"; exit 1; }
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$CORRAL_HOME/cluster.token"
chmod 600 "$CORRAL_HOME/cluster.token"
head_up "$SPECS/cpu-only.yaml" --listen 0.0.0.0 --token-file "$CORRAL_HOME/cluster.token"
PORT=${ADDR##*:}
ip netns exec "$NS" "$CORRAL" start --address "10.213.0.1:$PORT" --token-file "$CORRAL_HOME/cluster.token" \
    --hw-spec "$SPECS/dgx-h100.yaml" --node-id gpu-far --node-ip 10.213.0.2 >/dev/null ||
    { echo "FAIL: the agent in $NS did not join"; exit 1; }
WPIDS="$WPIDS $(agent_pid gpu-far)"
agent_up gpu-near "$SPECS/dgx-h100.yaml" 127.0.0.2
[ "$(node_state gpu-far)" = ALIVE ] && ok "an agent in its own network namespace joined over the veth" ||
    fail "gpu-far: $(node_state gpu-far)"

# a blocker keeps gpu-near busy so that the gang starts on gpu-far
blk=$("$CORRAL" run --gpus 8 --label-selector corral.io/node-id=gpu-near --detach -- sleep 60)
id=$("$CORRAL" run --gpus 8 --max-restarts 1 --restart gang --detach -- sleep 60)
wait_started "$id" 5 && [ "$(status "$id" | jq -r '.workers[0].node_id')" = gpu-far ] &&
    ok "the gang runs on gpu-far" || fail "gang: $(status "$id" | jq -c '[.state,.workers[0].node_id]')"
pid=$(status "$id" | jq -r '.workers[0].pid')
"$CORRAL" job stop "$blk" >/dev/null

ip link set "$VH" down
wait_node gpu-far 5 SUSPECT && ok "link down: gpu-far SUSPECT" || fail "not SUSPECT: $(node_state gpu-far)"
wait_node gpu-far 5 DEAD && ok "then DEAD" || fail "not DEAD: $(node_state gpu-far)"
for _ in $(seq 100); do
    [ "$(status "$id" | jq -r '.workers[0].node_id + " " + .workers[0].state')" = "gpu-near RUNNING" ] && break
    sleep 0.05
done
[ "$(status "$id" | jq -r '.workers[0].node_id')" = gpu-near ] && ok "the gang restarted on gpu-near" ||
    fail "gang after the cut: $(status "$id" | jq -c '{state,reason,w:.workers[0]}')"
kill -0 "$pid" 2>/dev/null && ok "the partitioned worker still runs on the far side" ||
    fail "far worker $pid ended during the partition"

ip link set "$VH" up
wait_node gpu-far 15 ALIVE && ok "link up: gpu-far rejoins" || fail "gpu-far did not rejoin: $(node_state gpu-far)"
for _ in $(seq 200); do gone "$pid" && break; sleep 0.05; done
gone "$pid" && ok "its stale worker was stopped" || fail "stale worker $pid still runs"
"$CORRAL" job stop "$id" >/dev/null
finish
