#!/usr/bin/env bash
# TLS on TCP (issue 12; docs/cluster.md "TLS"): a head listening off
# loopback (--listen 0.0.0.0) runs TLS 1.3 with a self-signed certificate
# of its session, and the join command it prints pins that certificate's
# SHA-256. Across a veth pair into a network namespace (as netns.sh): a TLS
# client sees TLSv1.3 there, a plain agent and one pinning another
# fingerprint are refused with words saying why (and the head's log says
# so), the agent that pins the right one joins, a job runs on it and its
# output comes back whole, and the CLI reaches the head over TCP with
# CORRAL_TLS_FINGERPRINT, as does a far worker with its job credential
# and its agent's pin; a head that takes the session over keeps the
# certificate and the agent rejoins it. Needs root, `ip netns` and openssl (skipped, 77,
# otherwise).
NS=crs$$
VH=csh$$ VA=csa$$
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v openssl >/dev/null ||
    ! ip netns add "$NS" 2>/dev/null; then
    echo "skip: needs root, ip netns and openssl"
    exit 77
fi
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" ctls
tls_cleanup() {
    cluster_cleanup
    ip link del "$VH" 2>/dev/null
    ip netns del "$NS" 2>/dev/null
}
trap tls_cleanup EXIT
ip link add "$VH" type veth peer name "$VA" netns "$NS" &&
    ip addr add 10.214.0.1/24 dev "$VH" && ip link set "$VH" up &&
    ip netns exec "$NS" ip addr add 10.214.0.2/24 dev "$VA" &&
    ip netns exec "$NS" ip link set "$VA" up && ip netns exec "$NS" ip link set lo up ||
    { echo "FAIL: cannot set up the veth pair"; exit 1; }
TOK=$CORRAL_HOME/cluster.token
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TOK"
chmod 600 "$TOK"
S=$CORRAL_HOME/session_latest
LOG=$S/logs/corrald.log
out=$("$CORRAL" start --head --hw-spec "$SPECS/cpu-only.yaml" --listen 0.0.0.0 --token-file "$TOK" \
    --heartbeat-ms $HB --suspect-after-ms $SUSPECT --dead-after-ms $DEAD 2>&1) ||
    { echo "FAIL: head did not start: $out"; exit 1; }
PORT=$(sed 's/.*://' "$S/address")
FP=$(grep -o -- '--tls-fingerprint sha256:[0-9a-f]*' <<<"$out" | cut -d' ' -f2)
grep -q "listening on 0.0.0.0:$PORT (TLS)" <<<"$out" && [ -n "$FP" ] &&
    [ "$FP" = "$(cat "$S/tls_fingerprint")" ] &&
    ok "off loopback TLS is on by default, and the join command pins the certificate ($FP)" ||
    fail "start said: $out"
[ "$(stat -c %a "$S/tls.key")" = 600 ] && [ "$(stat -c %U "$S/tls.key")" = root ] &&
    ok "the session's key is 0600, the user's own" || fail "key: $(stat -c '%a %U' "$S/tls.key")"
want=$(openssl x509 -in "$S/tls.crt" -noout -fingerprint -sha256 | sed 's/.*=//; s/://g' |
    tr A-F a-f)
[ "sha256:$want" = "$FP" ] && ok "the fingerprint is the certificate's SHA-256 (openssl x509)" ||
    fail "openssl says $want, corral $FP"

# what a TLS client sees across the veth
sc=$(echo | ip netns exec "$NS" timeout 10 openssl s_client -connect "10.214.0.1:$PORT" 2>&1)
grep -q "New, TLSv1.3" <<<"$sc" && grep -q "subject=CN = corral head cpu-01" <<<"$sc" &&
    ok "openssl s_client from the namespace: TLSv1.3, the head's certificate" ||
    fail "s_client: $(head -c 600 <<<"$sc")"

far() { # corral start of an agent in the namespace, with extra options
    ip netns exec "$NS" "$CORRAL" start --address "10.214.0.1:$PORT" --token-file "$TOK" \
        --hw-spec "$SPECS/dgx-h100.yaml" --node-ip 10.214.0.2 "$@" 2>&1
}
out=$(far --node-id plain); rc=$?
[ $rc -ne 0 ] && grep -q "cannot join the head at 10.214.0.1:$PORT: refused by the server: this head takes TLS only" <<<"$out" &&
    ok "a plain agent is refused: it is told to pin the certificate" || fail "plain agent rc=$rc: $out"
grep -q "refused 10.214.0.2:[0-9]*: a plain (non-TLS) client on a TLS port" "$LOG" &&
    ok "and the head's log says a plain client came to a TLS port" || fail "head log: $(tail -3 "$LOG")"
out=$(far --node-id wrong --tls-fingerprint "sha256:$(printf '%064d' 0)"); rc=$?
[ $rc -ne 0 ] && grep -q "the head's certificate has fingerprint $FP, not the pinned sha256:0000" <<<"$out" &&
    ok "an agent pinning another fingerprint is refused, both fingerprints said" ||
    fail "wrong pin rc=$rc: $out"
out=$(far --node-id far --tls-fingerprint "$FP"); rc=$?
[ $rc -eq 0 ] && [ "$(node_state far)" = ALIVE ] && ok "the agent pinning the right one joins" ||
    fail "good pin rc=$rc: $out"
WPIDS="$WPIDS $(agent_pid far)"
[ "$("$CORRAL" nodes --json | jq -r '[.[].node_id] | sort | join(",")')" = cpu-01,far ] &&
    ok "the refused agents never registered" || fail "nodes: $("$CORRAL" nodes --json | jq -c '[.[].node_id]')"

# a job on the far agent: its spec goes and its 5 MB of output come back over TLS
n=$("$CORRAL" run --label-selector corral.io/node-id=far -- \
    sh -c 'head -c 5000000 /dev/zero | tr "\0" x' | wc -c)
[ "$n" = 5000000 ] && ok "a job on the far agent ran, its 5,000,000 bytes of output arrived" ||
    fail "output over TLS: $n bytes"
out=$("$CORRAL" run --label-selector corral.io/node-id=far -- sh -c 'echo "on $CORRAL_NODE_ID"' 2>&1)
[ "$out" = "on far" ] && ok "and its exit and words too" || fail "run: $out"

# a worker on the far agent reaches the head as its agent does: over TLS,
# with the agent's pin in CORRAL_TLS_FINGERPRINT and its job credential
out=$("$CORRAL" run --label-selector corral.io/node-id=far -- sh -c \
    'echo "pin=$CORRAL_TLS_FINGERPRINT"; "$0" job status "$CORRAL_JOB_ID" --json | jq -r .state' "$CORRAL" 2>&1)
grep -qx "pin=$FP" <<<"$out" && grep -qx RUNNING <<<"$out" &&
    ok "a far worker gets the pin and reads its own job's status over TLS" || fail "far worker: $out"

# the CLI over TCP from the namespace
tcp() { ip netns exec "$NS" env CORRAL_ADDRESS="10.214.0.1:$PORT" CORRAL_TOKEN_FILE="$TOK" "$@" 2>&1; }
out=$(tcp CORRAL_TLS_FINGERPRINT="$FP" "$CORRAL" run -- sh -c 'echo hi from $CORRAL_NODE_ID')
grep -q "^hi from " <<<"$out" && ok "corral run over TCP with CORRAL_TLS_FINGERPRINT" || fail "cli tls: $out"
out=$(tcp "$CORRAL" nodes); rc=$?
[ $rc -ne 0 ] && grep -q "this head takes TLS only" <<<"$out" &&
    ok "without it the CLI is refused with the same words" || fail "cli plain rc=$rc: $out"
out=$(tcp CORRAL_TLS_FINGERPRINT="sha256:$(printf '%064d' 7)" "$CORRAL" nodes); rc=$?
[ $rc -ne 0 ] && grep -q "not the pinned sha256:0000" <<<"$out" &&
    ok "and with a wrong fingerprint" || fail "cli wrong pin rc=$rc: $out"

# the head dies; the next takes its session over with the same certificate,
# so the agent's pin still holds and it rejoins
hp=$(cat "$S/corrald.pid")
kill -KILL "$hp"
for _ in $(seq 100); do gone "$hp" && break; sleep 0.05; done
out=$("$CORRAL" start --head --hw-spec "$SPECS/cpu-only.yaml" --listen 0.0.0.0 --token-file "$TOK" \
    --heartbeat-ms $HB --suspect-after-ms $SUSPECT --dead-after-ms $DEAD 2>&1) || fail "restart: $out"
grep -q "took over session" <<<"$out" && grep -q -- "--tls-fingerprint $FP" <<<"$out" &&
    ok "a head taking the session over keeps its certificate" || fail "takeover: $out"
wait_node far 15 ALIVE && ok "and the pinned agent rejoins it over TLS" ||
    fail "far after the takeover: $(node_state far)"
out=$("$CORRAL" run --label-selector corral.io/node-id=far -- sh -c 'echo "on $CORRAL_NODE_ID"' 2>&1)
[ "$out" = "on far" ] && ok "and runs jobs again" || fail "run after takeover: $out"
finish
