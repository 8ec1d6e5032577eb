#!/usr/bin/env bash
# The router off loopback runs TLS (issue 17; docs/serve.md "Access"): a
# router whose router.host is an address of a veth pair makes a
# self-signed certificate, prints its SHA-256, and serves HTTPS there; from
# a private network namespace across the veth, openssl s_client sees TLS
# and that certificate, curl gets the models over HTTPS and a plain HTTP
# request gets no answer; `serve status` still works (the admin calls are
# on a plain 127.0.0.1 listener); a file's own certificate and key are
# used as given, on loopback too; a key file without a certificate is
# refused at its line. Needs root, `ip netns` and openssl (skipped, 77,
# otherwise).
NS=csv$$
VH=cvh$$ VA=cva$$
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v openssl >/dev/null ||
    ! ip netns add "$NS" 2>/dev/null; then
    echo "skip: needs root, ip netns and openssl"
    exit 77
fi
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cserve-tls
PY=/usr/bin/python3
BACKEND=$CORRAL_SOURCE_DIR/tests/serve/canned_backend.py
T=$(mktemp -d /tmp/corral-cserve-tls-XXXXXX)
tls_cleanup() {
    cluster_cleanup
    ip link del "$VH" 2>/dev/null
    ip netns del "$NS" 2>/dev/null
    rm -rf "$T"
}
trap tls_cleanup EXIT
# a /24 of 10.215/16 chosen by pid, so that two runs do not meet
NET=10.215.$(($$ % 250))
ip link add "$VH" type veth peer name "$VA" netns "$NS" &&
    ip addr add "$NET.1/24" dev "$VH" && ip link set "$VH" up &&
    ip netns exec "$NS" ip addr add "$NET.2/24" dev "$VA" &&
    ip netns exec "$NS" ip link set "$VA" up && ip netns exec "$NS" ip link set lo up ||
    { echo "FAIL: cannot set up the veth pair"; exit 1; }
head_up "$SPECS/cpu-only.yaml"
cat >"$T/tls.yaml" <<YAML
name: sec
models:
  - model_id: canned
    engine: {command: [$PY, $BACKEND, --host, "{host}", --port, "{port}"]}
    resources_per_replica: {CPU: 1}
    replicas: 1
router: {host: $NET.1, port: 0}
YAML
out=$(timeout 120 "$CORRAL" serve deploy "$T/tls.yaml" --wait 2>&1); rc=$?
ST=$CORRAL_HOME/serve/sec/state.json
WPIDS="$WPIDS $(jq -r .pid "$ST" 2>/dev/null)"
PORT=$(jq -r .port "$ST")
PIN=$(jq -r .tls_fingerprint "$ST")
[ $rc = 0 ] && grep -q "at https://$NET.1:$PORT/v1" <<<"$out" && grep -q "TLS with the certificate $PIN" <<<"$out" &&
    [[ $PIN == sha256:* ]] && [ "$(stat -c %a "$CORRAL_HOME/serve/sec/tls.key")" = 600 ] &&
    ok "off loopback: a self-signed certificate made, its pin printed ($PIN)" ||
    fail "deploy: rc=$rc $out"
s=$(ip netns exec "$NS" openssl s_client -connect "$NET.1:$PORT" </dev/null 2>/dev/null)
fp=$(openssl x509 -noout -fingerprint -sha256 <<<"$s" 2>/dev/null | sed 's/.*=//; s/://g' | tr A-F a-f)
grep -q "TLSv1.[23]" <<<"$s" && [ "sha256:$fp" = "$PIN" ] &&
    ok "from another namespace: openssl s_client sees TLS and the pinned certificate" ||
    fail "s_client: sha256:$fp vs $PIN $(grep -i protocol <<<"$s")"
r=$(ip netns exec "$NS" curl -sk "https://$NET.1:$PORT/v1/models")
[ "$(jq -r '.data[0].id' <<<"$r")" = canned ] && ok "curl over HTTPS from the namespace: the models" || fail "https: $r"
r=$(ip netns exec "$NS" curl -sk "https://$NET.1:$PORT/v1/chat/completions" -d '{"model":"canned","messages":[]}')
[ "$(jq -r .object <<<"$r")" = chat.completion ] && ok "a chat over HTTPS" || fail "https chat: $r"
code=$(ip netns exec "$NS" curl -s -m 5 -o /dev/null -w '%{http_code}' "http://$NET.1:$PORT/v1/models")
[ "$code" != 200 ] && ok "plain HTTP to the TLS router gets no answer ($code)" || fail "plain http answered $code"
[ "$("$CORRAL" serve status sec --json | jq -r '.models[0].replicas[0].state')" = READY ] &&
    "$CORRAL" serve list | grep -q "^sec *https://$NET.1:$PORT/v1" &&
    ok "serve status and list through the loopback admin listener" || fail "status: $("$CORRAL" serve status sec 2>&1)"
APORT=$(jq -r .admin_port "$ST")
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$APORT/v1/models")
[ "$code" = 404 ] && ok "the admin listener serves no models" || fail "admin listener: $code"
"$CORRAL" serve delete sec >/dev/null || fail "delete"

# a certificate of the user's own, on loopback
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -days 2 -keyout "$T/k.pem" -out "$T/c.pem" 2>/dev/null
chmod 600 "$T/k.pem"
sed -e 's/^name: sec/name: own/' -e "s|router: {host: $NET.1, port: 0}|router: {host: 127.0.0.1, port: 0, tls_cert_file: $T/c.pem, tls_key_file: $T/k.pem}|" \
    "$T/tls.yaml" >"$T/own.yaml"
out=$(timeout 120 "$CORRAL" serve deploy "$T/own.yaml" --wait 2>&1) || fail "own: $out"
WPIDS="$WPIDS $(jq -r .pid "$CORRAL_HOME/serve/own/state.json" 2>/dev/null)"
OPORT=$(jq -r .port "$CORRAL_HOME/serve/own/state.json")
r=$(curl -s --cacert "$T/c.pem" "https://127.0.0.1:$OPORT/v1/models")
[ "$(jq -r '.data[0].id' <<<"$r")" = canned ] && ok "the file's own certificate, verified by curl --cacert" ||
    fail "own cert: $r $out"
"$CORRAL" serve delete own >/dev/null || fail "delete own"
sed "s|port: 0, tls_cert_file: $T/c.pem, |port: 0, |" "$T/own.yaml" >"$T/half.yaml"
out=$("$CORRAL" serve deploy "$T/half.yaml" 2>&1); rc=$?
[ $rc = 2 ] && grep -q "router.tls_key_file: give both tls_cert_file and tls_key_file" <<<"$out" &&
    ok "a key without a certificate is refused, saying what to give" || fail "half: rc=$rc $out"
finish
