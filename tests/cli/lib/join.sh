# Sourced by tests that run their own head at $H and need a second corrald
# joined to it (tests/cli/worker_hidden.sh, worker_ns_shared.sh); uses the
# caller's fail.
# joins a second corrald as node $1 to the head of session $H (the
# caller's), its token read from file $2 (kept where the caller chose: a
# --token-file outside the corral home), hardware spec $3; waits until the
# head calls it ALIVE. Returns non-zero (said) when it does not start.
join_token_file() {
    "$CORRAL" start --address "$(cat "$H"/session_latest/address)" --token-file "$2" --hw-spec "$3" \
        --node-id "$1" --node-ip 127.0.0.1 >/dev/null || { fail "agent $1 did not start"; return 1; }
    for _ in $(seq 100); do
        [ "$("$CORRAL" nodes --json | jq --arg n "$1" '[.[] | select(.node_id == $n and .state == "ALIVE")] | length')" = 1 ] &&
            return 0
        sleep 0.1
    done
}
