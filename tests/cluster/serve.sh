#!/usr/bin/env bash
# corral serve (issue 17) with a canned OpenAI-style backend as the engine
# (tests/serve/canned_backend.py: the router is what is tested) on two
# simulated 8-GPU nodes: a malformed file is placed at FILE:LINE:COL; two
# replicas, each a job on one GPU with its isolation variables; the
# official openai npm client for chat, streaming, completions, models,
# embeddings and the 404 of an unknown model in OpenAI's error shape; curl;
# raw HTTP/1.1 (tests/serve/http_probe.py: pipelining, chunked bodies,
# 100-continue, HTTP/1.0, malformed requests answered in OpenAI's shape);
# power of two choices uses both replicas; 503 with Retry-After once every
# replica is at max_ongoing_requests and the queue is full (and the
# waiting requests hold no thread of the router); kill -9 of a
# replica during a stream ends the stream with an error event and the
# replica is replaced; a request whose replica closes the connection before
# the first byte (or refuses it, just after it died) goes to another;
# API keys; autoscaling up on a burst and down when idle, from zero on the
# first request; a rolling update with no failed request; serve list, logs,
# delete (replicas stopped). Skipped (77)
# without node or the openai client (scripts/node-openai.sh installs it).
command -v node >/dev/null || { echo "skip: no node"; exit 77; }
NP=$("$CORRAL_SOURCE_DIR/scripts/node-openai.sh" 2>/dev/null) || { echo "skip: npm openai not installable"; exit 77; }
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cserve
PY=/usr/bin/python3
BACKEND=$CORRAL_SOURCE_DIR/tests/serve/canned_backend.py
OAI() { NODE_PATH=$NP node "$CORRAL_SOURCE_DIR/tests/serve/openai_client.js" "$@"; }
head_up "$SPECS/cpu-only.yaml"
agent_up gpu-a "$SPECS/dgx-h100.yaml" 127.0.0.2
agent_up gpu-b "$SPECS/dgx-h100.yaml" 127.0.0.3
wait_node gpu-a 10 ALIVE && wait_node gpu-b 10 ALIVE || fail "nodes did not join"
T=$(mktemp -d /tmp/corral-cserve-XXXXXX)
trap 'cluster_cleanup; rm -rf "$T"' EXIT
write_cfg() { # NAME MAXONGOING MAXQUEUED REPLICAS
    cat >"$T/$1.yaml" <<YAML
name: $1
models:
  - model_id: canned
    engine:
      command: [$PY, $BACKEND, --host, "{host}", --port, "{port}"]
      health: /health
    accelerator_type: H100
    resources_per_replica: {GPU: 1, CPU: 1}
    replicas: $4
    max_ongoing_requests: $2
    max_queued_requests: $3
router: {host: 127.0.0.1, port: 0}
YAML
}
rstatus() { "$CORRAL" serve status "$1" --json; }
router_pid() { jq -r .pid "$CORRAL_HOME/serve/$1/state.json"; }
url() { echo "http://127.0.0.1:$(jq -r .port "$CORRAL_HOME/serve/$1/state.json")"; }
# waits up to $3 s for jq filter $2 on the status of $1 to print true
wait_status() {
    for _ in $(seq $(($3 * 10))); do
        [ "$(rstatus "$1" 2>/dev/null | jq "$2" 2>/dev/null)" = true ] && return 0
        sleep 0.1
    done
    return 1
}

# a malformed file: where and what, before anything starts
write_cfg chat 2 2 2
sed 's/max_queued_requests: 2/max_queued_requests: -1/' "$T/chat.yaml" >"$T/bad.yaml"
out=$("$CORRAL" serve deploy "$T/bad.yaml" 2>&1); rc=$?
[ $rc = 2 ] && grep -q "bad.yaml:11:26: models\[0\].max_queued_requests: expected 0 to 1000000, found -1" <<<"$out" &&
    ok "a malformed file: FILE:LINE:COL, the field, what is allowed" || fail "bad file: rc=$rc $out"

out=$(timeout 120 "$CORRAL" serve deploy "$T/chat.yaml" --wait 2>&1); rc=$?
WPIDS="$WPIDS $(router_pid chat)"
[ $rc = 0 ] && grep -q "chat ready" <<<"$out" && ok "deploy --wait: two replicas ready" || fail "deploy: rc=$rc $out"
U=$(url chat)
st=$(rstatus chat)
[ "$(jq '[.models[0].replicas[] | select(.state == "READY")] | length' <<<"$st")" = 2 ] &&
    ok "serve status: 2 replicas READY" || fail "status: $st"

# each replica a job on one GPU of a node, isolated as any job
envs=$(for ep in $(jq -r '.models[0].replicas[] | "\(.host):\(.port)"' <<<"$st"); do
    curl -s "http://$ep/env" | jq -c '[.CORRAL_NODE_ID, .CUDA_VISIBLE_DEVICES, .RANK]'; done)
[ "$(wc -l <<<"$envs")" = 2 ] && ! grep -q null <<<"$envs" && [ "$(sort -u <<<"$envs" | wc -l)" = 2 ] &&
    grep -qx '\["gpu-[ab]","GPU-[^,]*","0"\]' <<<"$(head -1 <<<"$envs")" &&
    ok "each replica has its own GPU (CUDA_VISIBLE_DEVICES): $(tr '\n' ' ' <<<"$envs")" ||
    fail "isolation: $envs"

# the official client
r=$(OAI "$U/v1" canned chat)
[ "$(jq -r .object <<<"$r")" = chat.completion ] && jq -r .content <<<"$r" | grep -q "^w0 w1 .* from gpu-[ab]:" &&
    ok "openai client: chat" || fail "chat: $r"
r=$(OAI "$U/v1" canned stream)
[ "$(jq -r .pieces <<<"$r")" = 9 ] && jq -r .content <<<"$r" | grep -q "^w0 w1 w2 w3 w4 w5 w6 w7 from gpu-[ab]:" &&
    ok "openai client: a stream, its 9 pieces in order" || fail "stream: $r"
r=$(OAI "$U/v1" canned completion)
[ "$(jq -r .object <<<"$r")" = text_completion ] && ok "openai client: completion" || fail "completion: $r"
r=$(OAI "$U/v1" canned models)
[ "$(jq -c .ids <<<"$r")" = '["canned"]' ] && ok "openai client: models" || fail "models: $r"
r=$(OAI "$U/v1" canned embedding)
[ "$(jq -r .dims <<<"$r")" = 3 ] && ok "openai client: embeddings" || fail "embedding: $r"
r=$(OAI "$U/v1" no-such-model unknown)
[ "$(jq -r .status <<<"$r")" = 404 ] && [ "$(jq -r .code <<<"$r")" = model_not_found ] &&
    [ "$(jq -r .name <<<"$r")" = NotFoundError ] && jq -r .message <<<"$r" | grep -q "no-such-model" &&
    ok "openai client: unknown model is a 404 NotFoundError, code model_not_found" || fail "unknown: $r"
out=$(curl -s -w '\n%{http_code}' "$U/v1/chat/completions" -d '{"messages":[]}')
[ "$(tail -1 <<<"$out")" = 400 ] && head -1 <<<"$out" | jq_true '.error.code == "missing_model"' &&
    ok "curl: no model is a 400 in OpenAI's shape" || fail "no model: $out"
head -c $((17 << 20)) /dev/zero | tr '\0' ' ' >"$T/big"
out=$(curl -s -w '\n%{http_code}' "$U/v1/completions" --data-binary @"$T/big")
[ "$(tail -1 <<<"$out")" = 413 ] && head -1 <<<"$out" | jq_true '.error.code == "request_too_large"' &&
    ok "curl: a body over 16 MiB is a 413" || fail "big body: $(tail -c 300 <<<"$out")"
rm -f "$T/big"
out=$(curl -sN "$U/v1/completions" -d '{"model":"canned","prompt":"x","stream":true,"max_tokens":3}')
[ "$(grep -c '^data: ' <<<"$out")" = 5 ] && [ "$(grep '^data: ' <<<"$out" | tail -1)" = "data: [DONE]" ] &&
    ok "curl: a completion stream ends with data: [DONE]" || fail "curl stream: $out"
# what curl and the client do not send: the router's own HTTP/1.1 parsing
out=$(timeout 60 $PY "$CORRAL_SOURCE_DIR/tests/serve/http_probe.py" 127.0.0.1 "${U##*:}" 2>&1)
want="pipelined: 200:list 200:text_completion 200:ok
chunked: 200 text_completion
expect: 100 200 text_completion
http10: 200 text_completion closed
stream: 200 chunked 7 True 200
bad garbage: 400 bad_request closed
bad version: 505 bad_request closed
bad smuggle: 400 bad_request closed
bad te: 501 bad_request closed
bad badchunk: 400 invalid_body closed
bad bigheader: 431 bad_request closed
bad toolarge: 413 request_too_large closed
health after: 200"
[ "$out" = "$want" ] &&
    ok "raw HTTP/1.1: pipelined, chunked, 100-continue, HTTP/1.0, kept after a stream; bad requests get OpenAI-shaped 4xx/5xx and the router stays up" ||
    fail "raw HTTP: $(diff <(echo "$want") <(echo "$out"))"

# power of two choices: both replicas take requests
for _ in $(seq 20); do curl -s -o /dev/null "$U/v1/completions" -d '{"model":"canned","prompt":"x"}'; done
st=$(rstatus chat)
[ "$(jq '[.models[0].replicas[] | select(.requests > 0)] | length' <<<"$st")" = 2 ] &&
    ok "both replicas served requests: $(jq -c '[.models[0].replicas[].requests]' <<<"$st")" || fail "p2c: $st"

# capacity 2 x 2 ongoing + 2 queued; the next is refused with Retry-After
threads() { awk '/^Threads:/ {print $2}' "/proc/$(router_pid chat)/status"; }
idle_threads=$(threads)
for i in 1 2 3 4 5 6; do
    curl -s -o /dev/null -w '%{http_code}\n' "$U/v1/completions" \
        -d '{"model":"canned","prompt":"x","test_delay_s":3}' >>"$T/slow.codes" &
done
wait_status chat '.models[0].queued == 2 and ([.models[0].replicas[].ongoing] | add) == 4' 20 ||
    fail "the slow requests did not fill the replicas and the queue: $(rstatus chat)"
# the router's loops hold the 6 waiting requests: no thread each
busy_threads=$(threads)
[ "$busy_threads" -lt $((idle_threads + 3)) ] &&
    ok "6 requests at replicas or queued: the router has $busy_threads threads ($idle_threads idle)" ||
    fail "a thread per waiting request? $busy_threads threads with 6 requests, $idle_threads idle"
out=$(curl -s -i "$U/v1/completions" -d '{"model":"canned","prompt":"x"}' | tr -d '\r')
grep -q "^HTTP/1.1 503" <<<"$out" && grep -q "^Retry-After: 1$" <<<"$out" &&
    grep -q '"code":"overloaded"' <<<"$out" && ok "queue full: 503 with Retry-After" || fail "503: $out"
wait
[ "$(sort -u "$T/slow.codes")" = 200 ] && ok "the 4 ongoing and 2 queued requests all completed" ||
    fail "slow: $(cat "$T/slow.codes")"

# kill -9 of the replica serving a stream
curl -sN "$U/v1/chat/completions" -d '{"model":"canned","stream":true,"max_tokens":40,"test_delay_s":0.25,"messages":[]}' \
    >"$T/stream.out" &
spid=$!
wait_status chat '[.models[0].replicas[] | select(.ongoing == 1)] | length == 1' 20 || fail "the stream did not start"
st=$(rstatus chat)
victim=$(jq -r '.models[0].replicas[] | select(.ongoing == 1) | .replica' <<<"$st")
vjob=$(jq -r ".models[0].replicas[$victim].job" <<<"$st")
vport=$(jq -r ".models[0].replicas[$victim].port" <<<"$st")
vpid=$(status "$vjob" | jq -r '.workers[0].pid')
[ -n "$vpid" ] && [ "$vpid" -gt 0 ] && kill -9 "$vpid"
wait $spid
grep -q '^data: {"error":{.*"code":"replica_lost"' "$T/stream.out" && ! grep -q '\[DONE\]' "$T/stream.out" &&
    ok "kill -9 mid-stream: the stream ends with an error event" || fail "stream after kill: $(tail -3 "$T/stream.out")"
wait_status chat "([.models[0].replicas[] | select(.state == \"READY\")] | length == 2) and .models[0].replicas[$victim].port != $vport" 30 &&
    ok "the killed replica was replaced (a new process, a new port, READY)" || fail "not replaced: $(rstatus chat)"

# a replica dies while idle: requests sent right after all succeed
st=$(rstatus chat)
vpid=$(status "$(jq -r '.models[0].replicas[0].job' <<<"$st")" | jq -r '.workers[0].pid')
kill -9 "$vpid"
codes=$(for _ in $(seq 10); do curl -s -o /dev/null -w '%{http_code} ' "$U/v1/completions" -d '{"model":"canned","prompt":"x"}'; done)
[ "$(tr ' ' '\n' <<<"$codes" | sort -u | tr -d '\n')" = 200 ] && ok "requests right after a replica died: all 200 ($codes)" ||
    fail "after death: $codes"
wait_status chat '[.models[0].replicas[] | select(.state == "READY")] | length == 2' 30 || fail "not back to 2 READY"

# a replica that closes the connection before its first byte: the request
# goes to the other one (each of 10 would hit it half the time)
cport=$(rstatus chat | jq -r '.models[0].replicas[0].port')
codes=$(for _ in $(seq 10); do curl -s -o /dev/null -w '%{http_code} ' "$U/v1/completions" \
    -d "{\"model\":\"canned\",\"prompt\":\"x\",\"test_close_port\":$cport}"; done)
[ "$(tr ' ' '\n' <<<"$codes" | sort -u | tr -d '\n')" = 200 ] &&
    [ "$(curl -s "$U/metrics" | sed -n 's/^corral_serve_retries_total{model="canned"} //p')" -ge 1 ] &&
    ok "closed before the first byte: retried on the other replica, all 200 ($codes)" || fail "retry: $codes"
wait_status chat '[.models[0].replicas[] | select(.state == "READY")] | length == 2' 30 || fail "not back to 2 READY"

# the router's own metrics
m=$(curl -s "$U/metrics")
grep -q '^corral_serve_requests_total{model="canned"} [1-9]' <<<"$m" && grep -q '^corral_serve_rejected_total{model="canned"} 1$' <<<"$m" &&
    grep -q '^corral_serve_ttfb_seconds_count{model="canned"} [1-9]' <<<"$m" &&
    grep -q '^corral_serve_replica_requests_total{model="canned",replica="1"} [1-9]' <<<"$m" &&
    ok "/metrics: requests, rejections, time to first byte, per replica" || fail "metrics: $m"

# API keys
printf '# keys\nsecret-1\nsecret-2\n' >"$T/keys"
chmod 600 "$T/keys"
write_cfg keyed 2 2 1
out=$(timeout 120 "$CORRAL" serve deploy "$T/keyed.yaml" --api-key-file "$T/keys" --wait 2>&1) || fail "keyed deploy: $out"
WPIDS="$WPIDS $(router_pid keyed)"
K=$(url keyed)
code=$(curl -s -o "$T/401" -w '%{http_code}' "$K/v1/models")
[ "$code" = 401 ] && jq_true '.error.code == "invalid_api_key"' <"$T/401" &&
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' "$K/v1/models")" = 401 ] &&
    ok "API keys: none or a wrong one is a 401" || fail "401: $code $(cat "$T/401")"
r=$(OAI "$K/v1" canned chat secret-2)
[ "$(jq -r .object <<<"$r")" = chat.completion ] && ok "API keys: the openai client with a listed key" || fail "key: $r"
out=$("$CORRAL" serve list)
grep -q "^chat  *http://127.0.0.1:" <<<"$out" && grep -q "^keyed " <<<"$out" && ok "serve list: both" || fail "list: $out"
"$CORRAL" serve delete keyed >/dev/null || fail "delete keyed"

# autoscaling: a burst above target_ongoing_requests adds a replica (up to
# max), and once idle for downscale_delay_s it drains and goes
cat >"$T/auto.yaml" <<YAML
name: auto
models:
  - model_id: canned
    engine: {command: [$PY, $BACKEND, --host, "{host}", --port, "{port}"]}
    resources_per_replica: {GPU: 1}
    replicas: {min: 1, max: 2}
    autoscaling: {target_ongoing_requests: 1, upscale_delay_s: 0, downscale_delay_s: 3}
    max_ongoing_requests: 4
router: {host: 127.0.0.1, port: 0}
YAML
out=$(timeout 120 "$CORRAL" serve deploy "$T/auto.yaml" --wait 2>&1) || fail "auto deploy: $out"
WPIDS="$WPIDS $(router_pid auto)"
A=$(url auto)
[ "$(rstatus auto | jq '.models[0].replicas | length')" = 1 ] || fail "auto: not one replica at first: $(rstatus auto)"
for _ in 1 2 3 4; do
    curl -s -o /dev/null -w '%{http_code}\n' "$A/v1/completions" -d '{"model":"canned","prompt":"x","test_delay_s":6}' >>"$T/auto.codes" &
done
wait_status auto '[.models[0].replicas[] | select(.state == "READY")] | length == 2' 60 &&
    ok "autoscaling: 4 ongoing on 1 replica (target 1) started a second" || fail "no scale-up: $(rstatus auto)"
wait
[ "$(sort -u "$T/auto.codes")" = 200 ] || fail "burst: $(cat "$T/auto.codes")"
wait_status auto '([.models[0].replicas[] | select(.state == "READY")] | length == 1) and .models[0].replicas[1].state == "NONE"' 60 &&
    ok "autoscaling: idle, back to min (the second drained and stopped)" || fail "no scale-down: $(rstatus auto)"
"$CORRAL" serve delete auto >/dev/null || fail "delete auto"

# min: 0: no replica until a request comes; the first one waits for it
sed -e 's/^name: auto/name: zero/' -e 's/replicas: {min: 1, max: 2}/replicas: {min: 0, max: 1}/' \
    -e 's/downscale_delay_s: 3/downscale_delay_s: 600/' "$T/auto.yaml" >"$T/zero.yaml"
out=$(timeout 120 "$CORRAL" serve deploy "$T/zero.yaml" --wait 2>&1) || fail "zero deploy: $out"
WPIDS="$WPIDS $(router_pid zero)"
n0=$(rstatus zero | jq '[.models[0].replicas[] | select(.state != "NONE")] | length')
r=$(curl -s "$(url zero)/v1/chat/completions" -d '{"model":"canned","messages":[]}')
[ "$n0" = 0 ] && jq -r '.choices[0].message.content' <<<"$r" | grep -q "from gpu-[ab]:" &&
    ok "min 0: no replica until the first request, which waited for one" || fail "zero: $n0 $r"
"$CORRAL" serve delete zero >/dev/null || fail "delete zero"

# a rolling update (a deploy of a changed file): replaced one at a time,
# no request failing meanwhile
sed 's|"{port}"\]|"{port}", --tag, v2]|' "$T/chat.yaml" >"$T/chat2.yaml"
old_jobs=$(rstatus chat | jq -r '.models[0].replicas[].job')
(while [ ! -f "$T/rolled" ]; do
    curl -s -o /dev/null -w '%{http_code}\n' "$U/v1/completions" -d '{"model":"canned","prompt":"x"}'
done >"$T/roll.codes") &
rl=$!
out=$(timeout 120 "$CORRAL" serve deploy "$T/chat2.yaml" 2>&1); rc=$?
touch "$T/rolled"
wait $rl
tags=$(for _ in 1 2 3 4 5 6; do curl -s "$U/v1/completions" -d '{"model":"canned","prompt":"x"}' | jq -r '.choices[0].text'; done)
bad=
for j in $old_jobs; do [ "$(status "$j" | jq -r .state)" = STOPPED ] || bad="$bad $j"; done
[ $rc = 0 ] && grep -q "chat updated (rolling)" <<<"$out" && [ "$(sort -u "$T/roll.codes")" = 200 ] &&
    [ "$(grep -c ' v2$' <<<"$tags")" = 6 ] && [ -z "$bad" ] &&
    [ "$(rstatus chat | jq '[.models[0].replicas[] | select(.state == "READY")] | length')" = 2 ] &&
    ok "rolling update: the new command on both replicas, the old jobs stopped, $(wc -l <"$T/roll.codes") requests meanwhile all 200" ||
    fail "rolling: rc=$rc $out codes=$(sort "$T/roll.codes" | uniq -c | tr '\n' ' ') tags=$tags old=$bad"
sed 's/^name: auto/name: chat/' "$T/auto.yaml" >"$T/chat3.yaml"
out=$("$CORRAL" serve deploy "$T/chat3.yaml" 2>&1); rc=$?
[ $rc = 1 ] && grep -q "a rolling update changes engines, sources and resources only" <<<"$out" &&
    ok "a redeploy that changes the router's limits is refused, saying to delete first" || fail "refused: rc=$rc $out"

# logs, delete
out=$("$CORRAL" serve logs chat --replica 1)
grep -q "^corral-serve-endpoint 0 127.0.0.[23] [0-9]*$" <<<"$out" && ok "serve logs: the replica's output" || fail "logs: $out"
jobs=$(rstatus chat | jq -r '.models[0].replicas[].job')
rpid=$(router_pid chat)
out=$("$CORRAL" serve delete chat 2>&1) || fail "delete: $out"
bad=
for j in $jobs; do [ "$(status "$j" | jq -r .state)" = STOPPED ] || bad="$bad $j"; done
[ -z "$bad" ] && gone "$rpid" && ! "$CORRAL" serve status chat 2>/dev/null &&
    ok "serve delete: the router gone, its replicas' jobs STOPPED" || fail "delete: $bad $out"
finish
