#!/usr/bin/env bash
# bench/serve/e2e.sh (issue 17): a real engine behind the router. One
# replica of llama.cpp's llama-server (scripts/llama-server.sh, the tiny
# random model of scripts/tiny-gguf.py; ENGINE=canned: the Python canned
# backend instead) placed by `corral serve deploy` on a head's own node.
#   engine start   the engine alone, started by hand: time until its health
#                  check answers 200 (the part of a replacement that is the
#                  engine's, not corral's)
#   replacement    KILLS times (default 5): kill -9 of the replica's
#                  process, then a chat request through the router at once;
#                  the time until it is answered (it waits in the router's
#                  queue for the new replica) and until `serve status`
#                  shows a new READY replica
#   streaming      ROUNDS (default 20) chat streams of TOKENS (default 64)
#                  tokens, alternating direct to the replica and through the
#                  router (bench/serve/e2e_stream.py): median time to the
#                  first token and tokens/s after it, both in the same run
# Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE`.
#   bench/serve/e2e.sh
#   ENGINE=canned KILLS=10 bench/serve/e2e.sh
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
CORRAL="$BUILD/corral"
ENGINE="${ENGINE:-llama}"
KILLS="${KILLS:-5}"
ROUNDS="${ROUNDS:-20}"
TOKENS="${TOKENS:-64}"
PY=/usr/bin/python3
export CORRAL_HOME=$(mktemp -d /tmp/corral-bench-e2e-XXXXXX)
T=$(mktemp -d /tmp/corral-bench-e2e-t-XXXXXX)
EPID=
cleanup() {
    [ -n "$EPID" ] && kill "$EPID" 2>/dev/null || true
    "$CORRAL" serve delete e2e >/dev/null 2>&1 || true
    "$CORRAL" stop >/dev/null 2>&1 || true
    rm -rf "$CORRAL_HOME" "$T"
}
trap cleanup EXIT
freeport() { $PY -c "import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
if [ "$ENGINE" = llama ]; then
    BIN=$("$SRC/scripts/llama-server.sh" 2>/dev/null) && [ -x "$BIN" ] ||
        { echo "bench/serve/e2e: llama-server is not built yet (scripts/llama-server.sh)" >&2; exit 77; }
    $PY "$SRC/scripts/tiny-gguf.py" "$T/tiny.gguf" >/dev/null
    MODEL=tiny
    CMD="[$BIN, -m, \"{model_source}\", --host, \"{host}\", --port, \"{port}\", -np, \"2\", -c, \"1024\", -t, \"1\"]"
    engine_argv() { echo "$BIN -m $T/tiny.gguf --host 127.0.0.1 --port $1 -np 2 -c 1024 -t 1"; }
else
    MODEL=canned
    CMD="[$PY, $SRC/tests/serve/canned_backend.py, --host, \"{host}\", --port, \"{port}\"]"
    engine_argv() { echo "$PY $SRC/tests/serve/canned_backend.py --host 127.0.0.1 --port $1"; }
fi
"$CORRAL" start --head --hw-spec "$SRC/specs/cpu-only.yaml" >/dev/null
cat >"$T/e2e.yaml" <<YAML
name: e2e
models:
  - model_id: $MODEL
    model_source: $T/tiny.gguf
    engine: {command: $CMD, health: /health}
    resources_per_replica: {CPU: 1}
    replicas: 1
    health_check_period_s: 0.1
router: {host: 127.0.0.1, port: 0}
YAML
"$CORRAL" serve deploy "$T/e2e.yaml" --wait >/dev/null
RPORT=$(jq -r .port "$CORRAL_HOME/serve/e2e/state.json")
st() { "$CORRAL" serve status e2e --json; }
# the engine alone
for _ in 1 2 3; do
    p=$(freeport)
    t0=$(now_ms)
    $(engine_argv "$p") >/dev/null 2>&1 &
    EPID=$!
    until curl -sf -o /dev/null "http://127.0.0.1:$p/health"; do sleep 0.01; done
    echo $(($(now_ms) - t0)) >>"$T/start"
    kill "$EPID"; wait "$EPID" 2>/dev/null || true; EPID=
done
echo "figure serve_engine_start_${ENGINE} $(median <"$T/start") ms"
# replacement after kill -9
REQ="{\"model\":\"$MODEL\",\"max_tokens\":4,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
for _ in $(seq "$KILLS"); do
    s=$(st)
    port=$(jq -r '.models[0].replicas[0].port' <<<"$s")
    pid=$("$CORRAL" job status "$(jq -r '.models[0].replicas[0].job' <<<"$s")" --json | jq -r '.workers[0].pid')
    t0=$(now_ms)
    kill -9 "$pid"
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$RPORT/v1/chat/completions" -d "$REQ")
    t1=$(now_ms)
    [ "$code" = 200 ] || { echo "bench/serve/e2e: the request after the kill answered $code" >&2; exit 1; }
    until [ "$(st | jq -r ".models[0].replicas[0] | .state == \"READY\" and .port != $port")" = true ]; do sleep 0.01; done
    t2=$(now_ms)
    echo $((t1 - t0)) >>"$T/served"
    echo $((t2 - t0)) >>"$T/ready"
done
echo "figure serve_replace_first_reply_${ENGINE} $(median <"$T/served") ms"
echo "figure serve_replace_ready_${ENGINE} $(median <"$T/ready") ms"
# streaming end to end, direct and through the router in the same run
EP=$(st | jq -r '.models[0].replicas[0] | "\(.host):\(.port)"')
out=$($PY "$SRC/bench/serve/e2e_stream.py" "$MODEL" "$TOKENS" "$ROUNDS" "direct=$EP" "router=127.0.0.1:$RPORT")
for t in direct router; do
    echo "figure serve_e2e_${t}_ttft $(awk -v t=$t '$1 == t && $2 == "ttft_ms" {print $3}' <<<"$out") ms"
    echo "figure serve_e2e_${t}_tokens_per_s $(awk -v t=$t '$1 == t && $2 == "tokens_per_s" {print $3}' <<<"$out") tokens/s"
done
echo "ratio serve_e2e_router_over_direct_ttft $(awk '$2 == "ttft_ms" {v[$1] = $3} END {printf "%.2f", v["router"] / v["direct"]}' <<<"$out")"
echo "ratio serve_e2e_router_over_direct_tokens_per_s $(awk '$2 == "tokens_per_s" {v[$1] = $3} END {printf "%.2f", v["router"] / v["direct"]}' <<<"$out")"
echo "bench/serve/e2e: $ENGINE, $KILLS kills, $ROUNDS x $TOKENS-token streams, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)" >&2
