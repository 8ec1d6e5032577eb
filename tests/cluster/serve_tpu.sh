#!/usr/bin/env bash
# corral serve on the four hosts of a simulated TPU v6e 4x4 slice (issue
# 17): a replica is a whole slice (placement: one bundle of 4 chips per
# host, topology 4x4), its four workers placed all or nothing on one slice,
# worker 0 on the slice's worker 0, which serves (the canned backend); the
# other workers get the slice's variables too. The engine's isolation
# variables are checked through the backend's /env.
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cserve-tpu
PY=/usr/bin/python3
BACKEND=$CORRAL_SOURCE_DIR/tests/serve/canned_backend.py
head_up "$SPECS/cpu-only.yaml"
# the hosts join out of worker id order
for w in 2 0 3 1; do agent_up "tpu-w$w" "$SPECS/tpu-v6e-4x4-w$w.yaml" "127.0.0.$((20 + w))"; done
for w in 0 1 2 3; do wait_node "tpu-w$w" 10 ALIVE || fail "tpu-w$w did not join"; done
T=$(mktemp -d /tmp/corral-cserve-tpu-XXXXXX)
trap 'cluster_cleanup; rm -rf "$T"' EXIT
cat >"$T/tpu.yaml" <<YAML
name: slice
models:
  - model_id: canned
    engine:
      # worker 0 serves; the others stand by as a multi-host engine's would
      command: [sh, -c, 'echo "worker \$RANK tw=\$TPU_WORKER_ID hosts=\$TPU_WORKER_HOSTNAMES"; if [ "\$RANK" = 0 ]; then exec $PY $BACKEND --host {host} --port {port}; else exec sleep 100000; fi']
    accelerator_type: TPU-V6E
    placement:
      bundles: [{TPU: 4}, {TPU: 4}, {TPU: 4}, {TPU: 4}]
      strategy: STRICT_SPREAD
      topology: 4x4
    replicas: 1
router: {host: 127.0.0.1, port: 0}
YAML
out=$(timeout 120 "$CORRAL" serve deploy "$T/tpu.yaml" --wait 2>&1); rc=$?
WPIDS="$WPIDS $(jq -r .pid "$CORRAL_HOME/serve/slice/state.json")"
[ $rc = 0 ] && ok "a whole-slice replica ready" || fail "deploy: rc=$rc $out $(cat "$CORRAL_HOME/serve/slice/router.log")"
st=$("$CORRAL" serve status slice --json)
r=$(jq -c '.models[0].replicas[0] | [.state, .node, .host]' <<<"$st")
[ "$r" = '["READY","tpu-w0","127.0.0.20"]' ] && ok "the replica serves from the slice's worker 0: $r" || fail "replica: $st"
ep=$(jq -r '.models[0].replicas[0] | "\(.host):\(.port)"' <<<"$st")
# a whole host's chips: no TPU_VISIBLE_CHIPS (libtpu's default is the host)
e=$(curl -s "http://$ep/env" | jq -c '[.RANK, .WORLD_SIZE, .TPU_VISIBLE_CHIPS, .TPU_WORKER_ID, .CORRAL_NODE_ID, (.TPU_WORKER_HOSTNAMES | split(",") | length)]')
[ "$e" = '["0","4",null,"0","tpu-w0",4]' ] &&
    ok "worker 0's engine: RANK 0 of 4, TPU_WORKER_ID 0, the slice's 4 hosts, the whole host's chips" || fail "env: $e"
job=$(jq -r '.models[0].replicas[0].job' <<<"$st")
logs=$("$CORRAL" job logs --no-prefix "$job" 2>&1)
bad=
for w in 0 1 2 3; do grep -q "^worker $w tw=$w hosts=..*$" <<<"$logs" || bad="$bad $w"; done
[ -z "$bad" ] && [ "$(status "$job" | jq -r '[.workers[].node_id] | join(",")')" = tpu-w0,tpu-w1,tpu-w2,tpu-w3 ] &&
    ok "the four workers on the four hosts in slice order, each with its TPU_WORKER_ID" ||
    fail "workers:$bad $logs $(status "$job" | jq -c '[.workers[].node_id]')"
r=$(curl -s "http://127.0.0.1:$(jq -r .port <<<"$st")/v1/chat/completions" -d '{"model":"canned","messages":[]}')
jq -r '.choices[0].message.content' <<<"$r" | grep -q "from tpu-w0:" && ok "served through the router" || fail "chat: $r"
"$CORRAL" serve delete slice >/dev/null && [ "$(status "$job" | jq -r .state)" = STOPPED ] &&
    ok "deleted: the slice's job STOPPED" || fail "delete: $(status "$job" | jq -r .state)"
finish
