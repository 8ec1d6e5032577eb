#!/bin/bash
# Output in raw log chunks (issue 18, docs/protocol.md "Raw log chunks"):
# 64 MiB of random bytes through `corral run` arrive whole and in order
# (sha256) from a worker on the head's own node, into a file and into a
# pipe (where the client splices them from the socket), and from a second
# corrald, whose agent sends them raw to the head; four `corral job logs -f` of one job
# at once each get all of it; and peers that announce no features (as
# those from before them: CORRAL_FEATURES=0) get and send the old framing,
# whole too. The head's /metrics counts the raw bytes, so each step also
# shows which way the bytes went. No timings.
set -u
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cluster-output-raw
command -v curl >/dev/null || { echo "SKIP: no curl (scripts/deps.sh installs it)"; exit 77; }
T=$TDATA
MIB=$((1024 * 1024))

head_up "$SPECS/cpu-only.yaml" --worker-log-max 256M --dashboard-port any
L=$("$CORRAL" dashboard) || { fail "no dashboard"; finish; }
URL="${L%%\?*}metrics"
AUTH="Authorization: Bearer $(cat "$TOKEN")"
agent_up far "$SPECS/cpu-only.yaml" 127.0.0.2 --worker-log-max 256M
CORRAL_FEATURES=0 agent_up old "$SPECS/cpu-only.yaml" 127.0.0.3 --worker-log-max 256M
wait_node far 10 ALIVE && wait_node old 10 ALIVE || fail "agents not ALIVE: $("$CORRAL" nodes)"
LOCAL=$("$CORRAL" nodes --json | jq -r '.[] | select(.node_id != "far" and .node_id != "old") | .node_id')

# the head's raw byte counter WAY (sent, received)
raw() {
    curl -sf -H "$AUTH" "$URL" | sed -n "s/^corral_output_raw_bytes_total{way=\"$1\"} //p"
}
[ -n "$(raw sent)" ] && ok "the head's /metrics counts raw output bytes" ||
    fail "no corral_output_raw_bytes_total in the head's /metrics"

head -c $((64 * MIB)) /dev/urandom >"$T/r64"
want=$(sha256sum <"$T/r64" | cut -d' ' -f1)
# one `corral run` on node $1 of the 64 MiB, checked: into a file, or
# with PIPE=1 into a pipe (where the client splices raw chunks to it)
run_check() { # NODE WHAT [ENV...]
    local node=$1 what=$2 rc got
    shift 2
    if [ "${PIPE:-0}" = 1 ]; then
        # the reader notes its pipe's size once all came (F_GETPIPE_SZ)
        env "$@" "$CORRAL" run --label-selector "corral.io/node-id=$node" -- cat "$T/r64" \
            2>"$T/run.err" | { cat >"$T/run.out"; python3 -c 'import fcntl; print(fcntl.fcntl(0, 1032))' >"$T/pipesz"; }
        rc=${PIPESTATUS[0]}
    else
        env "$@" "$CORRAL" run --label-selector "corral.io/node-id=$node" -- cat "$T/r64" \
            >"$T/run.out" 2>"$T/run.err"
        rc=$?
    fi
    got=$(sha256sum <"$T/run.out" | cut -d' ' -f1)
    [ $rc -eq 0 ] && [ "$got" = "$want" ] && ok "$what: 64 MiB whole and in order (sha256)" ||
        fail "$what: rc=$rc $(wc -c <"$T/run.out") bytes, sha256 $got want $want $(head -c 300 "$T/run.err")"
}

# 1. the head's own node: into a file, and into a pipe (the client splices)
d0=$(raw sent) r0=$(raw received)
run_check "$LOCAL" "local run"
PIPE=1 run_check "$LOCAL" "local run into a pipe"
# corral run grows its stdout pipe to 1 MiB (fewer wakeups), where the
# kernel lets it (pipe-max-size)
if [ "$(cat /proc/sys/fs/pipe-max-size)" -ge $MIB ]; then
    [ "$(cat "$T/pipesz")" -ge $MIB ] && ok "corral run grew its stdout pipe to $(cat "$T/pipesz") bytes" ||
        fail "corral run's stdout pipe is $(cat "$T/pipesz") bytes, want 1 MiB"
fi
d1=$(raw sent) r1=$(raw received)
[ $((d1 - d0)) -ge $((2 * 64 * MIB)) ] && ok "local runs: $((d1 - d0)) bytes went as raw chunks" ||
    fail "local run: no raw bytes sent ($d0 -> $d1)"

# 2. a second corrald: its agent sends raw chunks, the head follows its copy
# (into a pipe)
PIPE=1 run_check far "remote run into a pipe"
d2=$(raw sent) r2=$(raw received)
[ $((r2 - r1)) -ge $((64 * MIB)) ] && ok "remote run: the head received $((r2 - r1)) raw bytes" ||
    fail "remote run: the head received $((r2 - r1)) raw bytes, want most of 64 MiB"
[ $((d2 - d1)) -ge $((64 * MIB)) ] && ok "remote run: the head sent $((d2 - d1)) bytes of its copy raw" ||
    fail "remote run: no raw bytes sent to the client"

# 3. four followers of one job at once, each following (it saw the first
# line) before the 64 MiB start
rm -f "$T/go"
wantr=$({ echo ready; cat "$T/r64"; } | sha256sum | cut -d' ' -f1)
id=$("$CORRAL" run --detach --label-selector "corral.io/node-id=$LOCAL" -- \
    sh -c "echo ready; while [ ! -e $T/go ]; do sleep 0.05; done; cat $T/r64")
start_followers "$id" 4 f # two into pipes, two into files
check_followers "$wantr" 4 f follower
[ "$(status "$id" | jq -r .state)" = SUCCEEDED ] && ok "followed job SUCCEEDED" ||
    fail "job $id is $(status "$id" | jq -r .state)"

# 4. a client that announces no features gets the old framing (a raw
# chunk would close its connection: this side did not announce it)
d3=$(raw sent)
run_check "$LOCAL" "client without features" CORRAL_FEATURES=0
[ "$(raw sent)" = "$d3" ] &&
    ok "client without features: no raw chunk sent to it" ||
    fail "client without features: raw bytes sent ($d3 -> $(raw sent))"

# 5. an agent that announces none sends the old framing: the head gets
# no raw bytes from it, and the output whole
r4=$(raw received)
run_check old "agent without features"
[ "$(raw received)" = "$r4" ] && ok "agent without features: no raw chunk from it" ||
    fail "agent without features: raw bytes received ($r4 -> $(raw received))"
finish
