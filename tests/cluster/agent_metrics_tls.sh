#!/usr/bin/env bash
# An agent's /metrics off loopback (docs/metrics.md "Scraping agents"):
# `--metrics-host` on an address of this machine that is not loopback
# (0.0.0.0 when it has none) serves HTTPS only, with the agent's own
# self-signed certificate (CORRAL_HOME/agent_ID/metrics.crt, its key 0600):
# plain HTTP gets no answer, curl without trust is refused, curl --cacert
# with the cluster token gets metrics that pass Debian's `promtool check
# metrics`, and a real Prometheus (Debian's prometheus, on loopback, ended
# by its pid) scrapes it with `scheme: https` and `tls_config: {ca_file}`,
# then answers a query for a device metric. The certificate is kept across
# a restart; a key others may read is refused; a certificate of the user's
# own (--tls-cert/--tls-key) is served as given; misplaced options are said.
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cmtls
for t in curl promtool prometheus python3 openssl; do
    command -v $t >/dev/null || { echo "SKIP: no $t (scripts/deps.sh installs it)"; exit 77; }
done
TMP=$(mktemp -d /tmp/corral-mtls-XXXXXX)
PROM=""
mtls_cleanup() {
    [ -n "$PROM" ] && kill -TERM "$PROM" 2>/dev/null && wait "$PROM" 2>/dev/null
    cluster_cleanup
    rm -rf "$TMP"
}
trap mtls_cleanup EXIT
# an IPv4 address of this machine that is not loopback, else 0.0.0.0
offloopback_addr

head_up "$SPECS/cpu-only.yaml" --dashboard-port any
HEX=$(cat "$TOKEN")
AUTH="Authorization: Bearer $HEX"
# starts agent m1 with its metrics on $BIND; its output in $out
m1_start() {
    out=$("$CORRAL" start --address "$ADDR" --token-file "$TOKEN" --hw-spec "$SPECS/mi300x-8.yaml" \
        --node-id m1 --node-ip "$AT" $TLSOPT --metrics-port any --metrics-host "$BIND" "$@" 2>&1)
}
# stops agent m1 by its pid and waits until it is gone
m1_stop() {
    local p
    p=$(agent_pid m1)
    [ -n "$p" ] || return 0
    kill -TERM "$p" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.05; done
    kill -KILL "$p" 2>/dev/null
}
D=$CORRAL_HOME/agent_m1
CRT=$D/metrics.crt
fp() { echo "sha256:$(openssl x509 -in "$1" -noout -fingerprint -sha256 2>/dev/null | sed 's/.*=//; s/://g' | tr A-F a-f)"; }

# misplaced options are said, and nothing starts
out=$("$CORRAL_BUILD_DIR/corrald" --address "$ADDR" --token-file "$TOKEN" --metrics-host "$BIND" 2>&1); rc=$?
[ $rc = 2 ] && grep -q -- "--metrics-host, --tls-cert and --tls-key of an agent are for its /metrics: give --metrics-port too" <<<"$out" &&
    ok "--metrics-host without --metrics-port is refused" || fail "no port: rc=$rc $out"
out=$("$CORRAL_BUILD_DIR/corrald" --head --metrics-port any --metrics-host "$BIND" 2>&1); rc=$?
[ $rc = 2 ] && grep -q -- "--metrics-port and --metrics-host are an agent's" <<<"$out" &&
    ok "--metrics-host on the head is refused (its /metrics is the dashboard's)" || fail "head: rc=$rc $out"

m1_start || { fail "agent m1 with --metrics-host $BIND: $out"; finish; }
WPIDS="$WPIDS $(agent_pid m1)"
PORT=$(sed -n "s|^corral: metrics on https://$AT:\([0-9]*\)/metrics$|\1|p" <<<"$out")
FP=$(fp "$CRT")
[ -n "$PORT" ] && grep -q "^corral: the metrics are HTTPS with the certificate $FP; trust it with curl --cacert $CRT" <<<"$out" &&
    ok "off loopback ($BIND): the agent prints https://$AT:$PORT/metrics and its certificate ($FP)" ||
    fail "agent output (fingerprint $FP): $out"
[ "$(stat -c %a "$D/metrics.key")" = 600 ] && ok "the agent's key is 0600" ||
    fail "metrics.key mode $(stat -c %a "$D/metrics.key")"
openssl x509 -in "$CRT" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:$AT" &&
    ok "its certificate names $AT" || fail "SAN: $(openssl x509 -in "$CRT" -noout -ext subjectAltName 2>&1)"
wait_node m1 10 ALIVE || fail "m1 not ALIVE: $("$CORRAL" nodes)"
B=https://$AT:$PORT

# plain HTTP gets no answer; HTTPS without trust is refused
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "http://$AT:$PORT/metrics")
[ "$code" != 200 ] && ok "plain HTTP to the agent's metrics is not served ($code)" || fail "plain HTTP answered $code"
curl -s --max-time 10 -o /dev/null "$B/healthz"; rc=$?
[ $rc = 60 ] && ok "curl without trusting the certificate is refused (rc 60)" || fail "curl without trust: rc=$rc"

# --cacert: /healthz to anyone, /metrics to the token only, TLS 1.3
[ "$(curl -s --max-time 10 --cacert "$CRT" "$B/healthz")" = ok ] &&
    [ "$(curl -s --max-time 10 --cacert "$CRT" -o /dev/null -w '%{http_code}' "$B/metrics")" = 401 ] &&
    ok "curl --cacert: /healthz, and /metrics without the token is 401" ||
    fail "cacert: $(curl -sS --max-time 10 --cacert "$CRT" "$B/healthz" 2>&1)"
curl -s --max-time 10 --cacert "$CRT" --tls-max 1.2 -o /dev/null "$B/healthz"; rc=$?
[ $rc != 0 ] && ok "TLS 1.2 is refused (rc $rc)" || fail "TLS 1.2 accepted"
curl -sf --max-time 10 --cacert "$CRT" -H "$AUTH" "$B/metrics" >"$TMP/m1.prom" || fail "m1: no metrics over HTTPS"
promtool check metrics <"$TMP/m1.prom" >"$TMP/m1.lint" 2>&1 && ok "promtool check metrics on the HTTPS endpoint" ||
    fail "promtool: $(cat "$TMP/m1.lint")"
n=$(grep -c '^corral_device_utilization_percent{node="m1",.*accelerator_type="MI300X"' "$TMP/m1.prom")
[ "$n" = 8 ] && ok "m1: 8 MI300X devices over HTTPS" || fail "m1 devices: $n"

# a real Prometheus scraping it over HTTPS, trusting the agent's certificate
PP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: corral-agent-m1
    scheme: https
    tls_config: {ca_file: $CRT}
    authorization: {type: Bearer, credentials_file: $TOKEN}
    static_configs: [{targets: ['$AT:$PORT']}]
YML
promtool check config "$TMP/prometheus.yml" >"$TMP/cfg.lint" 2>&1 || fail "prometheus config: $(cat "$TMP/cfg.lint")"
prom_start "$TMP/prometheus.yml" "$PP" "$TMP"
got=$(prom_wait 'up{job="corral-agent-m1"}' 1)
[ "$got" = 1 ] && ok "prometheus scrapes the agent over HTTPS with its ca_file (up = 1)" ||
    fail "up: $got $(prom_q up) $(curl -s "http://127.0.0.1:$PP/api/v1/targets" | jq -c '.data.activeTargets[].lastError') $(tail -5 "$TMP/prometheus.log")"
r=$(prom_q 'corral_device_memory_total_bytes{node="m1"}')
[ "$(jq '.data.result | length' <<<"$r")" = 8 ] && ok "prometheus: m1's 8 devices' memory, queried" ||
    fail "query m1: $r $(grep memory "$TMP/m1.prom" | head -2)"
kill -TERM "$PROM" && wait "$PROM" 2>/dev/null
PROM=""

# a restart keeps the certificate (whoever trusts it goes on doing so)
m1_stop
m1_start || { fail "m1 restart: $out"; finish; }
WPIDS="$WPIDS $(agent_pid m1)"
grep -q "^corral: the metrics are HTTPS with the certificate $FP;" <<<"$out" && [ "$(fp "$CRT")" = "$FP" ] &&
    ok "a restarted agent serves the same certificate" || fail "restart changed the certificate: $out"

# a key others may read is refused, and said so
m1_stop
chmod 644 "$D/metrics.key"
m1_start; rc=$?
[ $rc != 0 ] && grep -q "metrics.key may be read by group or others (mode 644): chmod 600 it" <<<"$out" &&
    [ "$(fp "$CRT")" = "$FP" ] && ok "a metrics key others may read is refused, not replaced" ||
    fail "key 644: rc=$rc $out"
chmod 600 "$D/metrics.key"

# a certificate of the user's own (--tls-cert/--tls-key): served as given
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=corral-own-agent \
    -addext "subjectAltName=IP:$AT,IP:127.0.0.1" -days 2 -keyout "$TMP/k.pem" -out "$TMP/c.pem" 2>/dev/null
chmod 600 "$TMP/k.pem"
OWN=$(fp "$TMP/c.pem")
m1_start --tls-cert "$TMP/c.pem" --tls-key "$TMP/k.pem" || { fail "own cert: $out"; finish; }
WPIDS="$WPIDS $(agent_pid m1)"
PORT=$(sed -n "s|^corral: metrics on https://$AT:\([0-9]*\)/metrics$|\1|p" <<<"$out")
grep -q "the metrics are HTTPS with the certificate $OWN; trust it with curl --cacert $TMP/c.pem" <<<"$out" &&
    curl -sf --max-time 10 --cacert "$TMP/c.pem" -H "$AUTH" "https://$AT:$PORT/metrics" | grep -q '^corral_agent_up' &&
    ok "--tls-cert/--tls-key: the agent's metrics serve the user's certificate" || fail "own cert: $out"
m1_stop
# given, they make it HTTPS on loopback too
out=$("$CORRAL" start --address "$ADDR" --token-file "$TOKEN" --hw-spec "$SPECS/mi300x-8.yaml" \
    --node-id m3 --node-ip 127.0.0.3 $TLSOPT --metrics-port any --tls-cert "$TMP/c.pem" --tls-key "$TMP/k.pem" 2>&1) ||
    { fail "m3 with --tls-cert on loopback: $out"; finish; }
WPIDS="$WPIDS $(agent_pid m3)"
PORT=$(sed -n "s|^corral: metrics on https://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p" <<<"$out")
[ -n "$PORT" ] && [ "$(curl -s --max-time 10 --cacert "$TMP/c.pem" "https://127.0.0.1:$PORT/healthz")" = ok ] &&
    ok "--tls-cert on loopback: https://127.0.0.1:$PORT/metrics with the user's certificate" ||
    fail "m3: $out"

# every address (0.0.0.0): the URL names the agent by its --node-ip, which
# its certificate names too
out=$("$CORRAL" start --address "$ADDR" --token-file "$TOKEN" --hw-spec "$SPECS/mi300x-8.yaml" \
    --node-id m2 --node-ip 127.0.0.2 $TLSOPT --metrics-port any --metrics-host 0.0.0.0 2>&1) ||
    { fail "m2 on 0.0.0.0: $out"; finish; }
WPIDS="$WPIDS $(agent_pid m2)"
PORT=$(sed -n "s|^corral: metrics on https://127\.0\.0\.2:\([0-9]*\)/metrics$|\1|p" <<<"$out")
[ -n "$PORT" ] && [ "$(curl -s --max-time 10 --cacert "$CORRAL_HOME/agent_m2/metrics.crt" "https://127.0.0.2:$PORT/healthz")" = ok ] &&
    ok "on 0.0.0.0: https://127.0.0.2:$PORT/metrics (its --node-ip), verified by that address" ||
    fail "0.0.0.0: $out"
finish
