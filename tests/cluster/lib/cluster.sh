# Sourced by the multi-node tests (tests/cluster/*.sh): several corral
# nodes on this one machine, each an agent process with its own simulated
# hardware spec, node id and loopback address (127.0.0.N), joined to one
# head (docs/cluster.md "Testing").
#   . "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" TAG
#   head_up SPEC [corral start options]    the head, with fast timeouts
#   agent_up ID SPEC [IP] [options]        an agent joining it (pinning the
#                                          head's certificate when it runs TLS)
#   agent_pid ID                           its pid
# Everything started is stopped on exit; sanitizer reports fail the test.
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" "${1:?usage: . cluster.sh TAG}"
SPECS=$CORRAL_SOURCE_DIR/specs
# (dead-after 4 s: at 1.2 s a loaded machine starved live agents past it and
# the head rightly declared them dead, failing tests that test nothing of
# the kind; a test may set its own after sourcing this)
HB=100 SUSPECT=1500 DEAD=4000
AGENTS=""
head_up() {
    local spec=$1
    shift
    "$CORRAL" start --head --hw-spec "$spec" --heartbeat-ms $HB --suspect-after-ms $SUSPECT \
        --dead-after-ms $DEAD "$@" >/dev/null || { echo "FAIL: head did not start"; exit 1; }
    ADDR=$(cat "$CORRAL_HOME/session_latest/address")
    TOKEN=$CORRAL_HOME/session_latest/token
    # a head off loopback runs TLS (docs/cluster.md "TLS"): agents pin this
    TLSFP=$(cat "$CORRAL_HOME/session_latest/tls_fingerprint" 2>/dev/null)
    TLSOPT=${TLSFP:+--tls-fingerprint $TLSFP}
}
agent_up() {
    local id=$1 spec=$2 ip=${3:-127.0.0.1}
    shift 3 2>/dev/null || shift $#
    "$CORRAL" start --address "$ADDR" --token-file "$TOKEN" --hw-spec "$spec" --node-id "$id" \
        --node-ip "$ip" $TLSOPT "$@" >/dev/null || { echo "FAIL: agent $id did not start"; return 1; }
    AGENTS="$AGENTS $id"
    WPIDS="$WPIDS $(agent_pid "$id")"
}
agent_pid() { cat "$CORRAL_HOME/agent_$1/corrald.pid" 2>/dev/null; }
node_state() { "$CORRAL" nodes --json | jq -r ".[] | select(.node_id == \"$1\") | .state"; }
# waits up to $2 s (default 10) for node $1 to be in state $3
wait_node() {
    local id=$1 secs=$2 want=$3
    for _ in $(seq $((secs * 20))); do
        [ "$(node_state "$id")" = "$want" ] && return 0
        sleep 0.05
    done
    return 1
}
wait_job() { # JOB STATE [secs]
    for _ in $(seq $((${3:-10} * 20))); do
        [ "$(status "$1" | jq -r .state)" = "$2" ] && return 0
        sleep 0.05
    done
    return 1
}
cluster_cleanup() {
    local p
    for p in $WPIDS; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    cleanup
}
trap cluster_cleanup EXIT
# waits up to $2 s (default 10) until every worker of job $1 runs with a pid
# (a remote worker's pid comes with its agent's WorkerStarted)
wait_started() {
    for _ in $(seq $((${2:-10} * 20))); do
        [ "$(status "$1" | jq '[.workers[] | select(.state != "RUNNING" or .pid <= 0)] | length')" = 0 ] &&
            [ "$(status "$1" | jq -r .state)" = RUNNING ] && return 0
        sleep 0.05
    done
    return 1
}
# Followers of job $1 that runs `echo ready`, waits for $T/go, then writes
# 64 MiB: $2 of `corral job logs -f`, the first two into pipes, the rest
# into files ($T/$3N.out, $T/$3N.err), their pids in FPIDS; returns once
# each saw the first line
start_followers() {
    local i
    FPIDS=""
    for i in $(seq "$2"); do
        if [ "$i" -le 2 ]; then
            "$CORRAL" job logs -f "$1" 2>"$T/$3$i.err" | cat >"$T/$3$i.out" &
        else
            "$CORRAL" job logs -f "$1" >"$T/$3$i.out" 2>"$T/$3$i.err" &
        fi
        FPIDS="$FPIDS $!"
    done
    WPIDS="$WPIDS $FPIDS"
    for i in $(seq "$2"); do
        for _ in $(seq 600); do grep -qx ready "$T/$3$i.out" 2>/dev/null && break; sleep 0.1; done
    done
}
# Lets the job of start_followers go and checks that each of its $2
# followers ($T/$3N.out) got all of it, whole and in order (sha256 $1);
# $4 names them in what it says
check_followers() {
    local i=0 p rc got
    touch "$T/go"
    for p in $FPIDS; do
        i=$((i + 1))
        wait "$p"
        rc=$?
        got=$(sha256sum <"$T/$3$i.out" | cut -d' ' -f1)
        [ $rc -eq 0 ] && [ "$got" = "$1" ] && ok "$4 $i of $2: 64 MiB whole and in order" ||
            fail "$4 $i of $2: rc=$rc $(wc -c <"$T/$3$i.out") bytes $(head -c 300 "$T/$3$i.err")"
    done
}
