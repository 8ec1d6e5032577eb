#!/usr/bin/env bash
# corral serve with a real engine (issue 17): llama.cpp's llama-server,
# built from the sources npm's node-llama-cpp ships (scripts/llama-server.sh,
# cached per machine; this test waits for that build, it does not skip it),
# serving a tiny random llama model written at test time
# (scripts/tiny-gguf.py), two replicas on two simulated GPU nodes, each
# with its own GPU in its environment. The official openai client: chat at
# temperature 0 is deterministic and its stream says the same, completions,
# models, the 404 of an unknown model; and a replica killed with -9 is
# replaced. Then four replicas with prefix affinity: chats sharing a system
# prompt go to one of them; the engine's usage reaches the router's metrics.
command -v node >/dev/null || { echo "skip: no node"; exit 77; }
NP=$("$CORRAL_SOURCE_DIR/scripts/node-openai.sh" 2>/dev/null) || { echo "skip: npm openai not installable"; exit 77; }
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cserve-llama
BIN=$("$CORRAL_SOURCE_DIR/scripts/llama-server.sh") && [ -x "$BIN" ] ||
    { fail "llama-server could not be built (scripts/llama-server.sh)"; finish; }
T=$(mktemp -d /tmp/corral-cserve-llama-XXXXXX)
trap 'cluster_cleanup; rm -rf "$T"' EXIT
/usr/bin/python3 "$CORRAL_SOURCE_DIR/scripts/tiny-gguf.py" "$T/tiny.gguf" ||
    { fail "tiny-gguf.py failed"; finish; }
OAI() { NODE_PATH=$NP node "$CORRAL_SOURCE_DIR/tests/serve/openai_client.js" "$@"; }
head_up "$SPECS/cpu-only.yaml"
agent_up gpu-a "$SPECS/dgx-h100.yaml" 127.0.0.2
agent_up gpu-b "$SPECS/dgx-h100.yaml" 127.0.0.3
wait_node gpu-a 10 ALIVE && wait_node gpu-b 10 ALIVE || fail "nodes did not join"
cat >"$T/llm.yaml" <<YAML
name: llm
models:
  - model_id: tiny
    model_source: $T/tiny.gguf
    engine:
      command: [$BIN, -m, "{model_source}", --host, "{host}", --port, "{port}", -np, "2", -c, "1024", -t, "1", --metrics]
      health: /health
      metrics: /metrics
    accelerator_type: H100
    resources_per_replica: {GPU: 1, CPU: 1}
    replicas: 2
    max_ongoing_requests: 2
router: {host: 127.0.0.1, port: 0}
YAML
rstatus() { "$CORRAL" serve status llm --json; }
out=$(timeout 240 "$CORRAL" serve deploy "$T/llm.yaml" --wait 2>&1); rc=$?
WPIDS="$WPIDS $(jq -r .pid "$CORRAL_HOME/serve/llm/state.json")"
[ $rc = 0 ] && ok "two llama-server replicas ready" || fail "deploy: rc=$rc $out $(cat "$CORRAL_HOME/serve/llm/router.log")"
U=http://127.0.0.1:$(jq -r .port "$CORRAL_HOME/serve/llm/state.json")
st=$(rstatus)
bad=
for j in $(jq -r '.models[0].replicas[].job' <<<"$st"); do
    pid=$(status "$j" | jq -r '.workers[0].pid')
    tr '\0' '\n' <"/proc/$pid/environ" | grep -q '^CUDA_VISIBLE_DEVICES=GPU-' || bad="$bad $j"
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx "$T/tiny.gguf" || bad="$bad $j:cmdline"
done
[ -z "$bad" ] && ok "each llama-server got its GPU's CUDA_VISIBLE_DEVICES and the model path" ||
    fail "isolation:$bad"

a=$(OAI "$U/v1" tiny chat); b=$(OAI "$U/v1" tiny chat)
[ "$(jq -r .object <<<"$a")" = chat.completion ] && [ "$(jq -r .content <<<"$a")" != null ] &&
    [ "$(jq -r .content <<<"$a")" = "$(jq -r .content <<<"$b")" ] &&
    ok "openai client: chat, the same at temperature 0 ($(jq -c .content <<<"$a"))" || fail "chat: $a / $b"
s=$(OAI "$U/v1" tiny stream)
[ "$(jq -r .content <<<"$s")" = "$(jq -r .content <<<"$a")" ] && [ "$(jq -r .pieces <<<"$s")" -ge 1 ] &&
    ok "openai client: the stream says the same in $(jq -r .pieces <<<"$s") pieces" || fail "stream: $s vs $a"
a=$(OAI "$U/v1" tiny completion); b=$(OAI "$U/v1" tiny completion)
[ "$(jq -r .object <<<"$a")" = text_completion ] && [ "$a" = "$b" ] && ok "openai client: completion" || fail "completion: $a / $b"
r=$(OAI "$U/v1" tiny models)
[ "$(jq -c .ids <<<"$r")" = '["tiny"]' ] && ok "openai client: models" || fail "models: $r"
r=$(OAI "$U/v1" gpt-4 unknown)
[ "$(jq -r .status <<<"$r")" = 404 ] && [ "$(jq -r .code <<<"$r")" = model_not_found ] &&
    ok "openai client: unknown model, 404" || fail "unknown: $r"
out=$(curl -sN "$U/v1/chat/completions" -d '{"model":"tiny","stream":true,"max_tokens":4,"temperature":0,"messages":[{"role":"user","content":"hi"}]}')
[ "$(grep '^data: ' <<<"$out" | tail -1)" = "data: [DONE]" ] && ok "curl: llama-server's stream through the router ends with [DONE]" ||
    fail "curl stream: $out"

# a replica killed is replaced
st=$(rstatus)
vport=$(jq -r '.models[0].replicas[0].port' <<<"$st")
kill -9 "$(status "$(jq -r '.models[0].replicas[0].job' <<<"$st")" | jq -r '.workers[0].pid')"
for _ in $(seq 600); do
    st=$(rstatus)
    [ "$(jq -r '.models[0].replicas[0].state' <<<"$st")" = READY ] &&
        [ "$(jq -r '.models[0].replicas[0].port' <<<"$st")" != "$vport" ] && break
    sleep 0.1
done
[ "$(jq -r '.models[0].replicas[0].state' <<<"$st")" = READY ] && [ "$(jq -r '.models[0].replicas[0].port' <<<"$st")" != "$vport" ] &&
    ok "kill -9 of a llama-server: replaced, ready again" || fail "replace: $st"
r=$(OAI "$U/v1" tiny chat)
[ "$(jq -r .object <<<"$r")" = chat.completion ] && ok "and serving" || fail "after replace: $r"
"$CORRAL" serve delete llm >/dev/null || fail "delete"

# four replicas with prefix affinity: chats sharing a long system prompt go
# to one llama-server (its prompt cache), counted by the router per
# replica; the engine's own usage reaches /metrics
sed -e 's/^name: llm/name: llm4/' -e 's/replicas: 2/replicas: 4/' \
    -e 's/max_ongoing_requests: 2/max_ongoing_requests: 2\n    request_router: {policy: prefix_affinity}/' \
    "$T/llm.yaml" >"$T/llm4.yaml"
out=$(timeout 300 "$CORRAL" serve deploy "$T/llm4.yaml" --wait 2>&1); rc=$?
WPIDS="$WPIDS $(jq -r .pid "$CORRAL_HOME/serve/llm4/state.json")"
[ $rc = 0 ] && [ "$("$CORRAL" serve status llm4 --json | jq '[.models[0].replicas[] | select(.state == "READY")] | length')" = 4 ] &&
    ok "four llama-server replicas ready" || fail "deploy llm4: rc=$rc $out"
U4=http://127.0.0.1:$(jq -r .port "$CORRAL_HOME/serve/llm4/state.json")
reqs() { "$CORRAL" serve status llm4 --json | jq -c '[.models[0].replicas[].requests]'; }
metric() { curl -s "$U4/metrics" | sed -n "s/^corral_serve_$1_total{model=\"tiny\"} //p"; }
SYS=$(printf 'You are a helpful assistant who answers briefly. %.0s' $(seq 8))
before=$(reqs); p0=$(metric prompt_tokens); c0=$(metric completion_tokens)
pt=0 ct=0
for i in $(seq 6); do
    r=$(curl -s "$U4/v1/chat/completions" -d "{\"model\":\"tiny\",\"max_tokens\":4,\"temperature\":0,\"messages\":[{\"role\":\"system\",\"content\":\"$SYS\"},{\"role\":\"user\",\"content\":\"question $i\"}]}")
    pt=$((pt + $(jq -r '.usage.prompt_tokens // 0' <<<"$r"))); ct=$((ct + $(jq -r '.usage.completion_tokens // 0' <<<"$r")))
done
after=$(reqs)
grew=$(jq -n --argjson a "$before" --argjson b "$after" '[range(0; $b | length) | $b[.] - ($a[.] // 0) | select(. > 0)]')
[ "$(jq -c . <<<"$grew")" = "[6]" ] && ok "prefix affinity: 6 chats sharing a system prompt on one of four llama-servers ($before -> $after)" ||
    fail "affinity: $before -> $after"
[ "$pt" -gt 0 ] && [ "$(metric prompt_tokens)" = $((p0 + pt)) ] && [ "$(metric completion_tokens)" = $((c0 + ct)) ] &&
    ok "/metrics: llama-server's usage counted ($pt prompt, $ct completion tokens)" ||
    fail "tokens: +$pt/+$ct expected, $p0/$c0 -> $(metric prompt_tokens)/$(metric completion_tokens)"
p0=$(metric prompt_tokens)
out=$(curl -sN "$U4/v1/chat/completions" -d '{"model":"tiny","stream":true,"max_tokens":4,"temperature":0,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}')
su=$(grep '^data: {' <<<"$out" | sed 's/^data: //' | jq -r 'select(.usage != null) | .usage.prompt_tokens' | tail -1)
[ "$(grep '^data: ' <<<"$out" | tail -1)" = "data: [DONE]" ] && [ "$(metric prompt_tokens)" = $((p0 + ${su:-0})) ] &&
    ok "/metrics: a stream's usage (${su:-none in the stream}) counted as the engine sent it" ||
    fail "stream usage: ${su:-none} $p0 -> $(metric prompt_tokens)"
"$CORRAL" serve delete llm4 >/dev/null || fail "delete llm4"
finish
