# Sourced by the benchmarks that join a second corrald to their head (a
# remote agent on loopback, as tests/cluster runs them); not a benchmark
# itself (`make bench` runs bench/*/run.sh).
#   bench_agent_up ID [CORRALD OPTION...]
# starts it as node ID (cpu-only spec, --node-ip 127.0.0.1) against the head
# of this CORRAL_HOME, sets APID to its pid, and returns once the head
# lists the node ALIVE (10 s at most). Needs CORRAL, SRC and jq.
bench_agent_up() {
    local id=$1 s=$CORRAL_HOME/session_latest
    shift
    "$CORRAL" start --address "$(cat "$s/address")" --token-file "$s/token" \
        --hw-spec "$SRC/specs/cpu-only.yaml" --node-id "$id" --node-ip 127.0.0.1 "$@" >&2
    APID=$(cat "$CORRAL_HOME/agent_$id/corrald.pid")
    for _ in $(seq 100); do
        [ "$("$CORRAL" nodes --json | jq -r --arg id "$id" '.[] | select(.node_id == $id) | .state')" = ALIVE ] &&
            break
        sleep 0.1
    done
}
