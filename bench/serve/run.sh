#!/usr/bin/env bash
# bench/serve (issue 17): the router's overhead. One replica, a trivial
# backend (bench_serve_canned: a canned chat completion on libmicrohttpd),
# placed by `corral serve deploy` on a head's own node; wrk (Debian's) POSTs
# a chat request for DUR seconds (default 10) over CONNS connections
# (default 64), in the same run to:
#   direct  the backend itself
#   nginx   Debian's nginx as a reverse proxy to it (its default proxying:
#           HTTP/1.0 upstream, a connection per request)
#   nginx_keepalive  nginx keeping upstream connections (keepalive 64,
#           HTTP/1.1 upstream)
#   router_close  corral's router with router.upstream_keepalive: 0 (a
#           connection per request: the router before its pool), to its
#           own replica of the same backend
#   router  corral's router keeping connections (upstream_keepalive: 64)
# Then STREAMS (default 1000) concurrent chat streams through a router
# (bench/serve/streams.py) and its peak RSS.
# Prints `figure NAME VALUE UNIT` (requests/s, p50 and p99 latency, the
# router's RSS after its run) and `ratio NAME VALUE` (router over nginx).
#   bench/serve/run.sh            (make bench-serve)
#   DUR=30 CONNS=256 bench/serve/run.sh
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
DUR="${DUR:-10}"
CONNS="${CONNS:-64}"
CORRAL="$BUILD/corral"
# the peers, from Debian through scripts/deps.sh (as root; else it says what is missing)
if ! command -v wrk >/dev/null || ! { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; }; then
    "$SRC/scripts/deps.sh" wrk nginx-light >&2 || true
fi
for t in wrk nginx; do command -v $t >/dev/null || [ -x /usr/sbin/$t ] ||
    { echo "bench/serve: needs $t (scripts/deps.sh wrk nginx-light, as root)" >&2; exit 77; }; done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
export CORRAL_HOME=$(mktemp -d /tmp/corral-bench-serve-XXXXXX)
T=$(mktemp -d /tmp/corral-bench-serve-t-XXXXXX)
cleanup() {
    "$CORRAL" serve delete bench >/dev/null 2>&1 || true
    "$CORRAL" serve delete bench0 >/dev/null 2>&1 || true
    "$CORRAL" serve delete streams >/dev/null 2>&1 || true
    [ -f "$T/nginx.pid" ] && kill "$(cat "$T/nginx.pid")" 2>/dev/null || true
    "$CORRAL" stop >/dev/null 2>&1 || true
    rm -rf "$CORRAL_HOME" "$T"
}
trap cleanup EXIT
"$CORRAL" start --head --hw-spec "$SRC/specs/cpu-only.yaml" >/dev/null
cat >"$T/bench.yaml" <<YAML
name: bench
models:
  - model_id: canned
    engine: {command: [$BUILD/bench/bench_serve_canned, --host, "{host}", --port, "{port}"]}
    resources_per_replica: {CPU: 1}
    replicas: 1
    max_ongoing_requests: 100000
    max_queued_requests: 100000
router: {host: 127.0.0.1, port: 0, upstream_keepalive: 64}
YAML
sed -e 's/^name: bench/name: bench0/' -e 's/upstream_keepalive: 64/upstream_keepalive: 0/' \
    "$T/bench.yaml" >"$T/bench0.yaml"
"$CORRAL" serve deploy "$T/bench.yaml" --wait >/dev/null
"$CORRAL" serve deploy "$T/bench0.yaml" --wait >/dev/null
st=$("$CORRAL" serve status bench --json)
EP=$(jq -r '.models[0].replicas[0] | "\(.host):\(.port)"' <<<"$st")
RPORT=$(jq -r .port <<<"$st")
R0PORT=$("$CORRAL" serve status bench0 --json | jq -r .port)
RPID=$(jq -r .pid "$CORRAL_HOME/serve/bench/state.json")
freeport() { /usr/bin/python3 -c "import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])"; }
NPORT=$(freeport)
NKPORT=$(freeport)
mkdir -p "$T/ngx"
cat >"$T/nginx.conf" <<NGX
worker_processes 2;
pid $T/nginx.pid;
error_log $T/nginx.err;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $T/ngx/body; proxy_temp_path $T/ngx/proxy;
    fastcgi_temp_path $T/ngx/fcgi; uwsgi_temp_path $T/ngx/uwsgi; scgi_temp_path $T/ngx/scgi;
    upstream be { server $EP; }
    server { listen 127.0.0.1:$NPORT; location / { proxy_pass http://be; } }
    upstream bek { server $EP; keepalive 64; }
    server { listen 127.0.0.1:$NKPORT; location / { proxy_pass http://bek;
        proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
NGX
"$NGINX" -c "$T/nginx.conf" -p "$T"
cat >"$T/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"canned","messages":[{"role":"user","content":"hi"}]}'
wrk.headers["Content-Type"] = "application/json"
LUA
ms() { # wrk's latency text (123.45us, 1.2ms, 2s) in ms
    awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'
}
declare -A RPS P50
for target in direct nginx nginx_keepalive router_close router; do
    case $target in
    direct) url=http://$EP ;;
    nginx) url=http://127.0.0.1:$NPORT ;;
    nginx_keepalive) url=http://127.0.0.1:$NKPORT ;;
    router_close) url=http://127.0.0.1:$R0PORT ;;
    router) url=http://127.0.0.1:$RPORT ;;
    esac
    out=$(wrk -t2 -c"$CONNS" -d"${DUR}s" --latency -s "$T/post.lua" "$url/v1/chat/completions")
    if grep -q "Non-2xx" <<<"$out"; then echo "bench/serve: $target answered errors: $out" >&2; exit 1; fi
    RPS[$target]=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    P50[$target]=$(ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
    p99=$(ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
    echo "figure serve_${target}_rps ${RPS[$target]} req/s"
    echo "figure serve_${target}_p50 ${P50[$target]} ms"
    echo "figure serve_${target}_p99 $p99 ms"
done
echo "figure serve_router_rss $(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' /proc/$RPID/status) MiB"
echo "ratio serve_router_over_nginx_rps $(awk -v a="${RPS[router]}" -v b="${RPS[nginx]}" 'BEGIN {printf "%.2f", a / b}')"
echo "ratio serve_router_over_nginx_p50 $(awk -v a="${P50[router]}" -v b="${P50[nginx]}" 'BEGIN {printf "%.2f", a / b}')"
echo "ratio serve_router_over_nginx_keepalive_rps $(awk -v a="${RPS[router]}" -v b="${RPS[nginx_keepalive]}" 'BEGIN {printf "%.2f", a / b}')"
echo "ratio serve_router_over_nginx_keepalive_p50 $(awk -v a="${P50[router]}" -v b="${P50[nginx_keepalive]}" 'BEGIN {printf "%.2f", a / b}')"
echo "ratio serve_keepalive_over_close_rps $(awk -v a="${RPS[router]}" -v b="${RPS[router_close]}" 'BEGIN {printf "%.2f", a / b}')"
echo "ratio serve_keepalive_over_close_p50 $(awk -v a="${P50[router]}" -v b="${P50[router_close]}" 'BEGIN {printf "%.2f", a / b}')"
"$CORRAL" serve delete bench0 >/dev/null 2>&1 || true
# STREAMS (default 1000) chat streams at once through the router, to the
# Python canned backend (tests/serve/canned_backend.py: 20 pieces, 0.5 s
# apart); the router's peak RSS while all are open
STREAMS="${STREAMS:-1000}"
if [ "$STREAMS" -gt 0 ]; then
    cat >"$T/streams.yaml" <<YAML
name: streams
models:
  - model_id: canned
    engine: {command: [/usr/bin/python3, $SRC/tests/serve/canned_backend.py, --host, "{host}", --port, "{port}"]}
    resources_per_replica: {CPU: 1}
    replicas: 1
    max_ongoing_requests: 100000
    max_queued_requests: 100000
router: {host: 127.0.0.1, port: 0}
YAML
    "$CORRAL" serve deploy "$T/streams.yaml" --wait >/dev/null 2>&1
    SPORT=$(jq -r .port "$CORRAL_HOME/serve/streams/state.json")
    SPID=$(jq -r .pid "$CORRAL_HOME/serve/streams/state.json")
    idle=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' /proc/$SPID/status)
    out=$(/usr/bin/python3 "$SRC/bench/serve/streams.py" 127.0.0.1 "$SPORT" "$STREAMS" "$SPID")
    echo "figure serve_streams_done $(awk '/^streams_done/ {print $2}' <<<"$out") of $STREAMS"
    echo "figure serve_router_rss_idle $idle MiB"
    echo "figure serve_router_rss_${STREAMS}_streams $(awk '/^router_peak_rss_mib/ {print $2}' <<<"$out") MiB"
    "$CORRAL" serve delete streams >/dev/null 2>&1 || true
fi
echo "bench/serve: $CONNS connections, ${DUR}s each, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)" >&2
