#!/usr/bin/env bash
# A real cut link (issue 5): one agent in its own network namespace, joined
# to the head over a veth pair; taking the link down makes its node SUSPECT
# then DEAD while its worker keeps running on the far side, the gang
# restarts on a node still reachable, and when the link comes back the
# agent rejoins and its stale worker is stopped. A distributed gang over
# the head (on --listen 0.0.0.0, no --node-ip) and the far agent gets a
# MASTER_ADDR both can reach, never loopback, and (with /usr/bin/python3's
# torch) its gloo ranks meet there. Needs root and `ip netns` (skipped, 77,
# otherwise).
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
head_up "$SPECS/cpu-only.yaml" --listen 0.0.0.0 --token-file "$CORRAL_HOME/cluster.token" \
    --labels zone=z1,corral.io/tpu-slice-worker-id=0
PORT=${ADDR##*:}
ip netns exec "$NS" "$CORRAL" start --address "10.213.0.1:$PORT" --token-file "$CORRAL_HOME/cluster.token" \
    $TLSOPT --hw-spec "$SPECS/dgx-h100.yaml" --node-id gpu-far --node-ip 10.213.0.2 \
    --labels zone=z1,corral.io/tpu-slice-worker-id=1 >/dev/null ||
    { echo "FAIL: the agent in $NS did not join"; exit 1; }
WPIDS="$WPIDS $(agent_pid gpu-far)"
agent_up gpu-near "$SPECS/dgx-h100.yaml" 127.0.0.2 --labels zone=z2
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
wait_node gpu-far 10 SUSPECT && ok "link down: gpu-far SUSPECT" || fail "not SUSPECT: $(node_state gpu-far)"
wait_node gpu-far 15 DEAD && ok "then DEAD" || fail "not DEAD: $(node_state gpu-far)"
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

# a gang over the head and gpu-far (zone z1; their slice worker ids put
# rank 0 on the head): MASTER_ADDR is the head as gpu-far reaches it. The
# head has no --node-ip and listens on 0.0.0.0: the address gpu-far
# connected to, 10.213.0.1, never 127.0.0.1
out=$("$CORRAL" train --workers 2 --resources-per-worker CPU=1 --placement STRICT_SPREAD --domain zone -- \
    sh -c 'echo "r=$RANK node=$CORRAL_NODE_ID master=$MASTER_ADDR"' 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^\[rank 0\] r=0 node=cpu-01 master=10.213.0.1$" <<<"$out" &&
    grep -q "^\[rank 1\] r=1 node=gpu-far master=10.213.0.1$" <<<"$out" &&
    ok "gang over the head (rank 0, --listen 0.0.0.0) and gpu-far: MASTER_ADDR 10.213.0.1 for both" ||
    fail "master addr: rc=$rc $out"
# torch's store at that address, reached from across the veth (gloo's own
# pairs would use each host's name, which the namespace shares: not this)
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    out=$("$CORRAL" train --workers 2 --resources-per-worker CPU=1 --placement STRICT_SPREAD --domain zone -- \
        /usr/bin/python3 -c 'import os, datetime, torch.distributed as d
r = int(os.environ["RANK"])
s = d.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), 2, r == 0, datetime.timedelta(seconds=30))
s.set("from%d" % r, os.environ["CORRAL_NODE_ID"])
print("rank", r, "sees", s.get("from%d" % (1 - r)).decode())' 2>&1); rc=$?
    [ $rc -eq 0 ] && grep -q "^\[rank 0\] rank 0 sees gpu-far$" <<<"$out" &&
        grep -q "^\[rank 1\] rank 1 sees cpu-01$" <<<"$out" &&
        ok "torch's TCPStore on the head at MASTER_ADDR: both ranks meet across the veth" ||
        fail "store across: rc=$rc $out"
fi
finish
