#!/usr/bin/env bash
# TLS on loopback and the lean CLI (issue 12; docs/cluster.md "TLS"). A
# head on a loopback address listens without TLS unless --tls is given: no
# certificate is made, a TLS client is closed with a line in the head's log.
# `corral hw --json`, a local `corral run` and plain TCP load no libssl
# (LD_DEBUG=libs), a TLS connection does. A CA-signed certificate given
# with --tls-cert/--tls-key: a key others may read is refused, the CLI
# (CORRAL_TLS_CA) and an agent (--tls-ca) verify the head against the CA
# and its address; another CA, or a name the certificate does not carry,
# is refused. Needs openssl (77 otherwise).
command -v openssl >/dev/null || { echo "skip: needs openssl"; exit 77; }
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" tls
SPEC=$CORRAL_SOURCE_DIR/specs/cpu-only.yaml
S=$CORRAL_HOME/session_latest
# the libraries a command initialises that are TLS's
tlslibs() { LD_DEBUG=libs "$@" 2>&1 >/dev/null | grep -oE 'calling init: [^ ]*(libssl|libcrypto|libcorral_tls)[^ ]*' | sort -u; }

out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || fail "start: $out"
ADDR=$(cat "$S/address")
! grep -q TLS <<<"$out" && [ ! -e "$S/tls.crt" ] && [ ! -e "$S/tls_fingerprint" ] &&
    ok "a head on loopback listens without TLS by default: no certificate made" ||
    fail "loopback: $out; $(ls "$S")"
echo | timeout 10 openssl s_client -connect "$ADDR" >/dev/null 2>&1
for _ in $(seq 50); do grep -q "a TLS client on a port without TLS" "$S/logs/corrald.log" && break; sleep 0.1; done
grep -q "a TLS client on a port without TLS" "$S/logs/corrald.log" &&
    ok "a TLS client there is closed, and the head's log says why" ||
    fail "log: $(tail -3 "$S/logs/corrald.log")"
l=$(tlslibs "$CORRAL" hw --json)
[ -z "$l" ] && ok "corral hw --json loads no libssl" || fail "hw loads: $l"
l=$(tlslibs "$CORRAL" run -- true)
[ -z "$l" ] && ok "nor does a local corral run" || fail "run loads: $l"
l=$(CORRAL_ADDRESS=$ADDR CORRAL_TOKEN_FILE=$S/token tlslibs "$CORRAL" run -- true)
[ -z "$l" ] && CORRAL_ADDRESS=$ADDR CORRAL_TOKEN_FILE=$S/token "$CORRAL" run -- true &&
    ok "nor corral run over plain TCP on loopback" || fail "plain tcp loads: $l"
"$CORRAL" stop >/dev/null
out=$("$CORRAL" start --head --hw-spec "$SPEC" --listen 0.0.0.0 --no-tls 2>&1) || fail "start --no-tls: $out"
grep -q "warning: --no-tls: job commands and environments cross the network in plain text on 0.0.0.0" <<<"$out" &&
    [ ! -e "$S/tls.crt" ] && ok "--no-tls off loopback stays plain, with a warning" || fail "--no-tls: $out"
"$CORRAL" stop >/dev/null
out=$("$CORRAL" start --head --hw-spec "$SPEC" --tls-fingerprint "sha256:$(printf '%064d' 0)" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "are an agent's (--address)" <<<"$out" &&
    ok "a head given an agent's TLS option says so" || fail "head --tls-fingerprint rc=$rc: $out"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$CORRAL_HOME/t.token"
chmod 600 "$CORRAL_HOME/t.token"
out=$("$(dirname "$CORRAL")/corrald" --address 127.0.0.1:9 --token-file "$CORRAL_HOME/t.token" --hw-spec "$SPEC" \
    --tls-fingerprint sha256:abc 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "tls-fingerprint: expected sha256: and 64 hex digits (as corral start --head prints it), got 'sha256:abc'" <<<"$out" &&
    ok "an agent given a malformed fingerprint says what one looks like" || fail "bad fingerprint rc=$rc: $out"

# a CA and a certificate it signed for 127.0.0.1
P=$CORRAL_HOME/pki
mkdir -m 700 "$P"
mkca() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$P/$1.key" \
        -out "$P/$1.crt" -subj "/CN=$1" -days 2 2>/dev/null
}
mkca ca && mkca other &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$P/head.key" \
        -out "$P/head.csr" -subj /CN=head 2>/dev/null &&
    printf 'subjectAltName=IP:127.0.0.1\n' >"$P/ext" &&
    openssl x509 -req -in "$P/head.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
        -out "$P/head.crt" -days 2 -extfile "$P/ext" 2>/dev/null || fail "openssl could not make the certificates"
chmod 644 "$P/head.key"
out=$("$CORRAL" start --head --hw-spec "$SPEC" --tls-cert "$P/head.crt" --tls-key "$P/head.key" 2>&1)
[ $? -ne 0 ] && grep -q "head.key may be read by group or others (mode 644): chmod 600 it" <<<"$out" &&
    ok "a key others may read is refused, with what to do" || fail "0644 key: $out"
chmod 600 "$P/head.key"
out=$("$CORRAL" start --head --hw-spec "$SPEC" --tls --tls-cert "$P/head.crt" --tls-key "$P/head.key" 2>&1) ||
    fail "start --tls: $out"
ADDR=$(cat "$S/address")
PORT=${ADDR##*:}
grep -q "listening on 127.0.0.1:$PORT (TLS)" <<<"$out" && [ ! -e "$S/tls.key" ] &&
    ok "--tls on loopback, with the given certificate (no session key made)" || fail "start --tls: $out"
tcp() { env CORRAL_ADDRESS="$1" CORRAL_TOKEN_FILE="$S/token" "${@:2}" 2>&1; }
out=$(tcp "$ADDR" CORRAL_TLS_CA="$P/ca.crt" "$CORRAL" run -- echo verified)
[ "$out" = verified ] && ok "the CLI verifies the head against the CA (CORRAL_TLS_CA)" || fail "ca: $out"
l=$(CORRAL_ADDRESS=$ADDR CORRAL_TOKEN_FILE=$S/token CORRAL_TLS_CA=$P/ca.crt tlslibs "$CORRAL" run -- true)
grep -q libssl <<<"$l" && grep -q libcorral_tls <<<"$l" && ok "and only that loads libssl, through the shim" ||
    fail "tls run loads: $l"
out=$(tcp "$ADDR" CORRAL_TLS_CA="$P/other.crt" "$CORRAL" nodes); rc=$?
[ $rc -ne 0 ] && grep -q "the head's certificate does not verify" <<<"$out" &&
    ok "another CA's trust is refused" || fail "other ca rc=$rc: $out"
out=$(tcp "localhost:$PORT" CORRAL_TLS_CA="$P/ca.crt" "$CORRAL" nodes); rc=$?
[ $rc -ne 0 ] && grep -q "does not verify" <<<"$out" &&
    ok "so is a name the certificate does not carry (localhost)" || fail "name rc=$rc: $out"
out=$("$CORRAL" start --address "$ADDR" --token-file "$S/token" --hw-spec "$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml" \
    --node-id a1 --node-ip 127.0.0.2 --tls-ca "$P/ca.crt" 2>&1); rc=$?
WPIDS="$WPIDS $(cat "$CORRAL_HOME/agent_a1/corrald.pid" 2>/dev/null)"
[ $rc -eq 0 ] && [ "$("$CORRAL" nodes --json | jq -r '.[] | select(.node_id == "a1") | .state')" = ALIVE ] &&
    ok "an agent with --tls-ca joins" || fail "agent --tls-ca rc=$rc: $out"
out=$("$CORRAL" run --label-selector corral.io/node-id=a1 -- sh -c 'echo on $CORRAL_NODE_ID' 2>&1)
[ "$out" = "on a1" ] && ok "and runs a job" || fail "job on a1: $out"
"$CORRAL" stop >/dev/null
finish
