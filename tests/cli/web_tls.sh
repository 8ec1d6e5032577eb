#!/bin/bash
# The head's dashboard and API off loopback serve only HTTPS (docs/api.md
# "TLS", issue 16): a head with --dashboard-host on an address of this
# machine that is not loopback (0.0.0.0 when it has none) serves with the
# head's certificate, which `corral start` names with its fingerprint;
# plain HTTP gets no answer there, curl without trust is refused, curl
# with --cacert (the session's tls.crt) or with the key pinned gets
# /healthz and the API, the login cookie is Secure, TLS 1.3 only, a real
# Prometheus scrapes /metrics over HTTPS with ca_file, and a certificate
# of the user's own (--tls-cert/--tls-key) is served as given. Headless
# chromium (when there) opens the dashboard over HTTPS with the key pinned,
# holds a Secure cookie, and pages the overview's node table.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" web_tls
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml
for t in curl openssl jq python3; do
    command -v $t >/dev/null || { echo "SKIP: no $t (scripts/deps.sh installs it)"; exit 77; }
done
TMP=$(mktemp -d /tmp/corral-web-tls-XXXXXX)
PROM=""
tls_cleanup() {
    [ -n "$PROM" ] && kill -TERM "$PROM" 2>/dev/null && wait "$PROM" 2>/dev/null
    cleanup
    rm -rf "$TMP"
}
trap tls_cleanup EXIT
# an IPv4 address of this machine that is not loopback, else 0.0.0.0
offloopback_addr

out=$("$CORRAL" start --head --hw-spec "$SPEC" --dashboard-host "$BIND" --dashboard-port any 2>&1) ||
    { fail "start with --dashboard-host $BIND: $out"; finish; }
PORT=$(sed -n "s|^corral: dashboard and API on https://[^/]*:\([0-9]*\)/ .*|\1|p" <<<"$out")
CRT=$CORRAL_HOME/session_latest/tls.crt
FP=sha256:$(openssl x509 -in "$CRT" -noout -fingerprint -sha256 2>/dev/null | sed 's/.*=//; s/://g' | tr A-F a-f)
[ -n "$PORT" ] && grep -q "the dashboard is HTTPS with the certificate $FP; trust it with curl --cacert .*/tls.crt" <<<"$out" &&
    ok "off loopback ($BIND): corral start prints an https:// URL and the certificate's fingerprint ($FP)" ||
    fail "start output (fingerprint $FP): $out"
[ "$(stat -c %a "$CORRAL_HOME/session_latest/tls.key")" = 600 ] && ok "the head's key is 0600" ||
    fail "tls.key mode $(stat -c %a "$CORRAL_HOME/session_latest/tls.key")"
[ ! -e "$CORRAL_HOME/session_latest/tls_fingerprint" ] && ok "the TCP listener stays plain on loopback (no join pin)" ||
    fail "the loopback TCP listener took TLS"
LOGIN=$("$CORRAL" dashboard)
[[ "$LOGIN" =~ ^https://[^/]+:$PORT/\?token=[0-9a-f]{64}$ ]] && ok "corral dashboard prints the https:// login URL" ||
    fail "corral dashboard: $LOGIN"
B=https://$AT:$PORT
HEX=$(tr -d '\n' <"$CORRAL_HOME/session_latest/token")
AUTH="Authorization: Bearer $HEX"

# plain HTTP gets no answer; HTTPS without trust is refused
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "http://$AT:$PORT/healthz")
[ "$code" != 200 ] && ok "plain HTTP to the dashboard is not served ($code)" || fail "plain HTTP answered $code"
curl -s --max-time 10 -o /dev/null "$B/healthz"; rc=$?
[ $rc = 60 ] && ok "curl without trusting the certificate is refused (rc 60)" || fail "curl without trust: rc=$rc"

# --cacert: the session's certificate names this machine's addresses
[ "$(curl -s --max-time 10 --cacert "$CRT" "$B/healthz")" = ok ] && ok "curl --cacert tls.crt: /healthz" ||
    fail "cacert healthz: $(curl -sS --max-time 10 --cacert "$CRT" "$B/healthz" 2>&1)"
n=$(curl -s --max-time 10 --cacert "$CRT" -H "$AUTH" "$B/api/v1/nodes" | jq '.nodes | length')
[ "$n" = 1 ] && ok "curl --cacert with the token: /api/v1/nodes" || fail "api nodes: $n"
code=$(curl -s --max-time 10 --cacert "$CRT" -o /dev/null -w '%{http_code}' "$B/api/v1/nodes")
[ "$code" = 401 ] && ok "over HTTPS the API still wants a credential" || fail "no credential: $code"
# the public key pinned (curl -k --pinnedpubkey), and a wrong pin
PIN=sha256//$(openssl x509 -in "$CRT" -pubkey -noout | openssl pkey -pubin -outform der |
    openssl dgst -sha256 -binary | base64)
[ "$(curl -sk --max-time 10 --pinnedpubkey "$PIN" "$B/healthz")" = ok ] && ok "curl with the key pinned" ||
    fail "pinned: $PIN"
curl -sk --max-time 10 -o /dev/null --pinnedpubkey "sha256//$(printf '%032d' 0 | base64)" "$B/healthz"; rc=$?
[ $rc = 90 ] && ok "a wrong pin is refused (rc 90)" || fail "wrong pin: rc=$rc"
# the login cookie is Secure over HTTPS
h=$(curl -s --max-time 10 --cacert "$CRT" -D - -o /dev/null "$B/?token=${LOGIN##*token=}")
grep -i '^Set-Cookie:' <<<"$h" | grep -q 'HttpOnly' && grep -i '^Set-Cookie:' <<<"$h" | grep -q '; Secure' &&
    ok "the login cookie is HttpOnly and Secure" || fail "cookie: $(grep -i set-cookie <<<"$h")"
COOKIE=$(grep -i '^Set-Cookie:' <<<"$h" | sed 's/^[^:]*: *//; s/;.*//')
[ "$(curl -s --max-time 10 --cacert "$CRT" -H "Cookie: $COOKIE" "$B/api/v1/summary" | jq .nodes_total)" = 1 ] &&
    ok "the cookie reads the API over HTTPS" || fail "cookie read"
# TLS 1.3 only
s=$(openssl s_client -connect "$AT:$PORT" -CAfile "$CRT" </dev/null 2>/dev/null)
grep -q "TLSv1.3" <<<"$s" && grep -q "Verify return code: 0" <<<"$s" && ok "openssl s_client: TLSv1.3, verified" ||
    fail "s_client: $(grep -E 'Protocol|Verify' <<<"$s")"
openssl s_client -connect "$AT:$PORT" -tls1_2 </dev/null >/dev/null 2>&1 && fail "TLS 1.2 accepted" ||
    ok "TLS 1.2 is refused"
# /metrics over HTTPS: promtool, then a real Prometheus with scheme https and ca_file
if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
    curl -sf --max-time 10 --cacert "$CRT" -H "$AUTH" "$B/metrics" >"$TMP/head.prom" &&
        promtool check metrics <"$TMP/head.prom" >"$TMP/lint" 2>&1 && ok "/metrics over HTTPS passes promtool" ||
        fail "metrics: $(cat "$TMP/lint")"
    PP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cat >"$TMP/prometheus.yml" <<YML
global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: corral-head
    scheme: https
    tls_config: {ca_file: $CRT}
    authorization: {type: Bearer, credentials_file: $CORRAL_HOME/session_latest/token}
    static_configs: [{targets: ['$AT:$PORT']}]
YML
    prom_start "$TMP/prometheus.yml" "$PP" "$TMP"
    got=$(prom_wait 'corral_nodes{state="ALIVE"}' 1)
    [ "$got" = 1 ] && ok "prometheus scrapes the head's /metrics over HTTPS (scheme: https, tls_config.ca_file)" ||
        fail "prometheus over TLS: $got $(prom_q up) $(tail -3 "$TMP/prometheus.log")"
    kill -TERM $PROM 2>/dev/null && wait $PROM 2>/dev/null
    PROM=""
else
    echo "note: no promtool/prometheus: the scrape over HTTPS is not checked"
fi
# the dashboard in headless chromium over HTTPS, trusting the pinned key:
# 150 more nodes (bench_cluster_loadgen) so that the overview pages them
CHROMIUM=${CORRAL_CHROMIUM:-/usr/bin/chromium}
LGEN=$CORRAL_BUILD_DIR/bench/bench_cluster_loadgen
NM=""
[ -x "$CHROMIUM" ] && [ -x "$LGEN" ] && NM=$("$CORRAL_SOURCE_DIR/scripts/node-web.sh" 2>/dev/null)
if [ -n "$NM" ]; then
    "$CORRAL" hw --spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" --json >"$TMP/node.json"
    "$LGEN" --address "$(cat "$CORRAL_HOME/session_latest/address")" --token-file "$CORRAL_HOME/session_latest/token" \
        --node-json "$TMP/node.json" --nodes 150 --prefix lg --inflight 16 >"$TMP/lg.out" 2>"$TMP/lg.err" &
    LGPID=$!
    WPIDS="$WPIDS $LGPID"
    for _ in $(seq 600); do grep -q '^registered' "$TMP/lg.out" && break; sleep 0.1; done
    grep -q '^registered 150 ' "$TMP/lg.out" || fail "the load generator: $(cat "$TMP/lg.out" "$TMP/lg.err")"
    CORRAL_WEB_NODE_MODULES=$NM CORRAL_CHROMIUM=$CHROMIUM node "$CORRAL_SOURCE_DIR/tests/cli/lib/overview.mjs" \
        "$LOGIN" "${PIN#sha256//}" >"$TMP/b.json" 2>"$TMP/b.err" || fail "the browser run: $(tail -3 "$TMP/b.err")"
    O=$(cat "$TMP/b.json")
    [ "$(jq '.errors | length' <<<"$O")" = 0 ] && [[ "$(jq -r .landed <<<"$O")" == https://* ]] &&
        ok "chromium opens the dashboard over HTTPS, trusting the pinned key, without console errors" ||
        fail "browser: $(jq -c .errors <<<"$O")"
    [ "$(jq -c '.cookies' <<<"$O")" = '[{"name":"corral_session","secure":true,"httpOnly":true}]' ] &&
        ok "the browser holds the login cookie as Secure and HttpOnly" || fail "cookies: $(jq -c .cookies <<<"$O")"
    [ "$(jq -c '.pages.first.overview | [.from, .nodes_shown, .nodes_total]' <<<"$O")" = '[0,100,151]' ] &&
        grep -q "151 node(s) (151 ALIVE)" <<<"$(jq -r .pages.first.text <<<"$O")" &&
        ok "the overview: the summary's 151 nodes, the first page of 100 in the table" ||
        fail "first page: $(jq -c '.pages.first | {overview, pager}' <<<"$O")"
    [ "$(jq -c '.pages.second.overview | [.from, .nodes_shown, .next]' <<<"$O")" = '[100,51,null]' ] &&
        [ "$(jq -r .pages.second.hash <<<"$O")" = "#/nodes/100" ] &&
        ok "its next link pages to nodes 101-151 (#/nodes/100)" ||
        fail "second page: $(jq -c '.pages.second | {overview, pager, hash}' <<<"$O")"
    kill -TERM "$LGPID" 2>/dev/null
    wait "$LGPID" 2>/dev/null
else
    echo "note: no chromium, playwright-core or load generator: the browser over HTTPS is not checked"
fi
"$CORRAL" stop >/dev/null 2>&1 || fail "stop"

# every address (0.0.0.0): the URL names this machine by its host name,
# which the session's certificate names too
if [ -n "$IP" ]; then
    out=$("$CORRAL" start --head --hw-spec "$SPEC" --dashboard-host 0.0.0.0 --dashboard-port any 2>&1) ||
        { fail "start on 0.0.0.0: $out"; finish; }
    HN=$(hostname)
    PORT=$(sed -n "s|^corral: dashboard and API on https://$HN:\([0-9]*\)/ .*|\1|p" <<<"$out")
    [ -n "$PORT" ] && [ "$(curl -s --max-time 10 --cacert "$CRT" --resolve "$HN:$PORT:127.0.0.1" "https://$HN:$PORT/healthz")" = ok ] &&
        [ "$(curl -s --max-time 10 --cacert "$CRT" "https://$IP:$PORT/healthz")" = ok ] &&
        ok "on 0.0.0.0: https://$HN:$PORT/, verified by that name and by $IP" || fail "0.0.0.0: $out"
    "$CORRAL" stop >/dev/null 2>&1
fi

# a certificate of the user's own: served as given (and a key others can read is refused)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=corral-own \
    -addext "subjectAltName=IP:$AT" -days 2 -keyout "$TMP/k.pem" -out "$TMP/c.pem" 2>/dev/null
chmod 644 "$TMP/k.pem"
out=$("$CORRAL" start --head --hw-spec "$SPEC" --dashboard-host "$BIND" --dashboard-port any \
    --tls-cert "$TMP/c.pem" --tls-key "$TMP/k.pem" 2>&1); rc=$?
[ $rc != 0 ] && grep -q "may be read by group or others" <<<"$out" && ok "a key others can read is refused" ||
    fail "key 644: rc=$rc $out"
"$CORRAL" stop >/dev/null 2>&1
chmod 600 "$TMP/k.pem"
OWN=sha256:$(openssl x509 -in "$TMP/c.pem" -noout -fingerprint -sha256 | sed 's/.*=//; s/://g' | tr A-F a-f)
out=$("$CORRAL" start --head --hw-spec "$SPEC" --dashboard-host "$BIND" --dashboard-port any \
    --tls-cert "$TMP/c.pem" --tls-key "$TMP/k.pem" 2>&1) || { fail "own cert start: $out"; finish; }
PORT=$(sed -n "s|^corral: dashboard and API on https://[^/]*:\([0-9]*\)/ .*|\1|p" <<<"$out")
grep -q "the dashboard is HTTPS with the certificate $OWN; trust it with curl --cacert $TMP/c.pem" <<<"$out" &&
    [ "$(curl -s --max-time 10 --cacert "$TMP/c.pem" "https://$AT:$PORT/healthz")" = ok ] &&
    ok "--tls-cert/--tls-key: the dashboard serves the user's certificate, verified by curl --cacert" ||
    fail "own cert: $out"
"$CORRAL" stop >/dev/null 2>&1
finish
