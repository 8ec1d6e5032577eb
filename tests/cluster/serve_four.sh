#!/usr/bin/env bash
# corral serve with four replicas (issue 17) of the canned backend
# (tests/serve/canned_backend.py, whose replies say which replica served:
# "from NODE:PORT") on two simulated 8-GPU nodes, with prefix affinity:
# requests sharing a prompt prefix land on one replica; prompts with other
# prefixes go to the replicas holding the fewest prefixes (so four prefixes
# spread over the four); once the prefix's replica is busier than the
# others by more than imbalanced_threshold, power of two choices takes
# over. The router keeps connections to replicas alive (the backends count
# the connections that carried requests). The engines' token counts (their
# replies' usage, a stream's last chunk) reach the router's /metrics, which
# promtool checks.
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cserve4
PY=/usr/bin/python3
BACKEND=$CORRAL_SOURCE_DIR/tests/serve/canned_backend.py
head_up "$SPECS/cpu-only.yaml"
agent_up gpu-a "$SPECS/dgx-h100.yaml" 127.0.0.2
agent_up gpu-b "$SPECS/dgx-h100.yaml" 127.0.0.3
wait_node gpu-a 10 ALIVE && wait_node gpu-b 10 ALIVE || fail "nodes did not join"
T=$(mktemp -d /tmp/corral-cserve4-XXXXXX)
trap 'cluster_cleanup; rm -rf "$T"' EXIT
cat >"$T/four.yaml" <<YAML
name: four
models:
  - model_id: canned
    engine:
      command: [$PY, $BACKEND, --host, "{host}", --port, "{port}"]
    accelerator_type: H100
    resources_per_replica: {GPU: 1, CPU: 1}
    replicas: 4
    max_ongoing_requests: 4
    request_router: {policy: prefix_affinity, imbalanced_threshold: 1}
router: {host: 127.0.0.1, port: 0}
YAML
rstatus() { "$CORRAL" serve status four --json; }
out=$(timeout 180 "$CORRAL" serve deploy "$T/four.yaml" --wait 2>&1); rc=$?
WPIDS="$WPIDS $(jq -r .pid "$CORRAL_HOME/serve/four/state.json")"
[ $rc = 0 ] || fail "deploy: rc=$rc $out"
U="http://127.0.0.1:$(jq -r .port "$CORRAL_HOME/serve/four/state.json")"
st=$(rstatus)
eps=$(jq -r '.models[0].replicas[] | select(.state == "READY") | "\(.host):\(.port)"' <<<"$st")
envs=$(for ep in $eps; do curl -s "http://$ep/env" | jq -c '[.CORRAL_NODE_ID, .CUDA_VISIBLE_DEVICES]'; done)
[ "$(wc -w <<<"$eps")" = 4 ] && [ "$(sort -u <<<"$envs" | wc -l)" = 4 ] && ! grep -q null <<<"$envs" &&
    ok "four replicas READY, each on its own GPU: $(tr '\n' ' ' <<<"$envs")" || fail "four: $st $envs"

# which replica served a chat whose system prompt is $1 and question $2
served_by() {
    curl -s "$U/v1/chat/completions" -d "{\"model\":\"canned\",\"messages\":[{\"role\":\"system\",\"content\":\"$1\"},{\"role\":\"user\",\"content\":\"$2\"}]}" |
        jq -r '.choices[0].message.content' | sed -n 's/.* from \([^ ]*\)$/\1/p'
}
long() { # a system prompt of 400 characters starting with $1
    printf '%s' "$1"; printf 'You are a helpful assistant. %.0s' $(seq 14)
}
P=$(long "Prefix P. ")
for i in $(seq 8); do served_by "$P" "question number $i, please answer it" >>"$T/p.by"; done
[ "$(sort -u "$T/p.by" | wc -l)" = 1 ] && [ -n "$(head -1 "$T/p.by")" ] &&
    ok "prefix affinity: 8 chats sharing a 400-character system prompt all went to $(head -1 "$T/p.by")" ||
    fail "affinity: $(sort "$T/p.by" | uniq -c | tr '\n' ' ')"
PBY=$(head -1 "$T/p.by")
for q in Q1 Q2 Q3; do served_by "$(long "Other prefix $q. ")" "question" >"$T/$q.by"; done
by=$(cat "$T/p.by" "$T/Q1.by" "$T/Q2.by" "$T/Q3.by" | sort -u)
[ "$(wc -l <<<"$by")" = 4 ] && ok "different prefixes spread: P, Q1, Q2, Q3 on four replicas" ||
    fail "spread: P=$PBY Q1=$(cat "$T/Q1.by") Q2=$(cat "$T/Q2.by") Q3=$(cat "$T/Q3.by")"
[ "$(served_by "$(long "Other prefix Q2. ")" "another question")" = "$(cat "$T/Q2.by")" ] &&
    [ "$(served_by "$P" "one more")" = "$PBY" ] && ok "each prefix stays on its replica" ||
    fail "sticky: $(served_by "$(long "Other prefix Q2. ")" "x") vs $(cat "$T/Q2.by")"
hits=$(curl -s "$U/metrics" | sed -n 's/^corral_serve_prefix_hits_total{model="canned"} //p')
[ "${hits:-0}" -ge 9 ] && ok "/metrics: $hits prefix hits" || fail "prefix hits: $hits"

# the prefix's replica busy: beyond imbalanced_threshold (1), others take it
for i in 1 2 3 4; do
    curl -s "$U/v1/chat/completions" -d "{\"model\":\"canned\",\"test_delay_s\":6,\"messages\":[{\"role\":\"system\",\"content\":\"$P\"},{\"role\":\"user\",\"content\":\"slow $i\"}]}" |
        jq -r '.choices[0].message.content' | sed -n 's/.* from \([^ ]*\)$/\1/p' >>"$T/busy.by" &
done
wait
[ "$(wc -l <"$T/busy.by")" = 4 ] && [ "$(grep -cvx "$PBY" "$T/busy.by")" -ge 1 ] && [ "$(grep -cx "$PBY" "$T/busy.by")" -ge 1 ] &&
    ok "4 slow chats of one prefix at once: $(grep -cx "$PBY" "$T/busy.by") on its replica, the rest elsewhere" ||
    fail "imbalance: $(sort "$T/busy.by" | uniq -c | tr '\n' ' ') (prefix on $PBY)"

# keep-alive: the router sends many requests on few connections
for _ in $(seq 20); do curl -s -o /dev/null "$U/v1/completions" -d '{"model":"canned","prompt":"x"}'; done
stats=$(for ep in $eps; do curl -s "http://$ep/stats"; done | jq -s '{requests: (map(.requests) | add), conns: (map(.post_connections) | add)}')
reqs=$(jq .requests <<<"$stats"); conns=$(jq .conns <<<"$stats")
reused=$(curl -s "$U/metrics" | sed -n 's/^corral_serve_upstream_reused_total{model="canned"} //p')
[ "$reqs" -ge 30 ] && [ $((conns * 2)) -le "$reqs" ] && [ "${reused:-0}" -ge 20 ] &&
    ok "keep-alive: the replicas took $reqs requests on $conns connections ($reused reused)" ||
    fail "keep-alive: $stats reused=$reused"

# token counts from the engines' usage
metric() { curl -s "$U/metrics" | sed -n "s/^corral_serve_$1_total{model=\"canned\"} //p"; }
p0=$(metric prompt_tokens); c0=$(metric completion_tokens); n0=$(metric usage_replies)
curl -s -o /dev/null "$U/v1/completions" -d '{"model":"canned","prompt":"one two three four five","max_tokens":3}'
[ "$(metric prompt_tokens)" = $((p0 + 5)) ] && [ "$(metric completion_tokens)" = $((c0 + 3)) ] &&
    ok "/metrics: a reply's usage counted (5 prompt, 3 completion tokens)" ||
    fail "usage: $p0/$c0 -> $(metric prompt_tokens)/$(metric completion_tokens)"
out=$(curl -sN "$U/v1/chat/completions" -d '{"model":"canned","stream":true,"max_tokens":6,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"two words"}]}')
[ "$(grep '^data: ' <<<"$out" | tail -1)" = "data: [DONE]" ] && grep -q '"usage"' <<<"$out" &&
    [ "$(metric prompt_tokens)" = $((p0 + 7)) ] && [ "$(metric completion_tokens)" = $((c0 + 9)) ] &&
    ok "/metrics: a stream's final usage chunk counted (2 prompt, 6 completion tokens)" ||
    fail "stream usage: $(metric prompt_tokens)/$(metric completion_tokens) $out"
curl -sN -o /dev/null "$U/v1/chat/completions" -d '{"model":"canned","stream":true,"messages":[{"role":"user","content":"x"}]}'
[ "$(metric usage_replies)" = $((n0 + 2)) ] && [ "$(metric prompt_tokens)" = $((p0 + 7)) ] &&
    ok "/metrics: a stream without usage adds no tokens" || fail "no usage: $(metric usage_replies) vs $n0"
if command -v promtool >/dev/null; then
    curl -s "$U/metrics" >"$T/router.prom"
    promtool check metrics <"$T/router.prom" >"$T/lint" 2>&1 && ok "promtool check metrics: the router's" ||
        fail "promtool: $(cat "$T/lint")"
fi
"$CORRAL" serve delete four >/dev/null || fail "delete"
finish
