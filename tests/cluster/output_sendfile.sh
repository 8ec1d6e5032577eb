#!/bin/bash
# Remote output by sendfile (issue 18, docs/protocol.md "Raw log chunks"):
# an agent forwards its workers' output to the head in raw log chunks whose
# bytes go by sendfile(2) from the worker's file while nothing is queued to
# the head (the rest read and queued, the next after the drain). 64 MiB of
# random bytes from a worker on a second corrald arrive whole and in order
# (sha256) through `corral run`, into a pipe and into a file, and again
# through `corral job logs` after the job ended (the head's copy); the
# agent's /metrics says most of them went by sendfile; two jobs whose
# output interleaves (stdout and stderr, two workers at once) arrive whole
# too, each stream in order. The head relays what it writes into its copy
# straight to a follower that is caught up (head/follow.c follow_relay):
# its /metrics counts those bytes, and the bytes it sent to followers by
# sendfile from its copy. No timings.
set -u
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cluster-output-sendfile
command -v curl >/dev/null || { echo "SKIP: no curl (scripts/deps.sh installs it)"; exit 77; }
T=$TDATA
MIB=$((1024 * 1024))

head_up "$SPECS/cpu-only.yaml" --worker-log-max 256M --dashboard-port any
L=$("$CORRAL" dashboard) || { fail "no dashboard"; finish; }
HURL="${L%%\?*}metrics"
out=$("$CORRAL" start --address "$ADDR" --token-file "$TOKEN" --hw-spec "$SPECS/cpu-only.yaml" \
    --node-id far --node-ip 127.0.0.2 $TLSOPT --worker-log-max 256M --metrics-port any 2>&1) ||
    { fail "agent far did not start: $out"; finish; }
AGENTS="$AGENTS far"
WPIDS="$WPIDS $(agent_pid far)"
MA=$(sed -n 's|^corral: metrics on http://\(127\.0\.0\.1:[0-9]*\)/metrics$|\1|p' <<<"$out")
[ -n "$MA" ] || { fail "no metrics address in: $out"; finish; }
wait_node far 10 ALIVE || { fail "far not ALIVE: $("$CORRAL" nodes)"; finish; }
AUTH="Authorization: Bearer $(cat "$TOKEN")"
# the agent's counter NAME (its node label)
am() { curl -sf -H "$AUTH" "http://$MA/metrics" | sed -n "s/^$1{node=\"far\"[^}]*} //p"; }
sf() { am corral_output_sendfile_bytes_total; }
rl() { curl -sf -H "$AUTH" "$HURL" | sed -n "s/^corral_output_relayed_bytes_total //p"; }
hs() { curl -sf -H "$AUTH" "$HURL" | sed -n "s/^corral_output_sendfile_bytes_total //p"; }
[ -n "$(sf)" ] && ok "the agent's /metrics counts output sent by sendfile" ||
    { fail "no corral_output_sendfile_bytes_total in the agent's /metrics"; finish; }

head -c $((64 * MIB)) /dev/urandom >"$T/r64"
want=$(sha256sum <"$T/r64" | cut -d' ' -f1)

[ -n "$(rl)" ] && ok "the head's /metrics counts output relayed to followers" ||
    { fail "no corral_output_relayed_bytes_total in the head's /metrics"; finish; }

# 1. into a pipe (the client splices) and into a file
s0=$(sf) k0=$(hs)
"$CORRAL" run --label-selector corral.io/node-id=far -- cat "$T/r64" 2>"$T/run.err" | cat >"$T/p.out"
rc=${PIPESTATUS[0]}
got=$(sha256sum <"$T/p.out" | cut -d' ' -f1)
[ "$rc" = 0 ] && [ "$got" = "$want" ] && ok "remote run into a pipe: 64 MiB whole and in order" ||
    fail "remote run into a pipe: rc=$rc $(wc -c <"$T/p.out") bytes $(head -c 300 "$T/run.err")"
"$CORRAL" run --label-selector corral.io/node-id=far -- cat "$T/r64" >"$T/f.out" 2>"$T/run.err"
rc=$?
got=$(sha256sum <"$T/f.out" | cut -d' ' -f1)
[ "$rc" = 0 ] && [ "$got" = "$want" ] && ok "remote run into a file: 64 MiB whole and in order" ||
    fail "remote run into a file: rc=$rc $(wc -c <"$T/f.out") bytes $(head -c 300 "$T/run.err")"
s1=$(sf) k1=$(hs)
# the head reads what the socket holds at its pace: most chunks find the
# queue empty, so at least half of the 128 MiB went by sendfile
[ $((s1 - s0)) -ge $((64 * MIB)) ] && ok "the agent sent $((s1 - s0)) of 128 MiB by sendfile" ||
    fail "the agent sent $((s1 - s0)) bytes by sendfile ($s0 -> $s1), want at least 64 MiB"

# and the head sends them on to its follower (the CLI) by sendfile from its
# copy, whether relayed as they came or pumped from the file
[ $((k1 - k0)) -ge $((64 * MIB)) ] && ok "the head sent $((k1 - k0)) of 128 MiB to its follower by sendfile" ||
    fail "the head sent $((k1 - k0)) bytes by sendfile ($k0 -> $k1), want at least 64 MiB"

# 2. the head's copy, read after the job ended
id=$("$CORRAL" job list --json | jq -r 'map(select(.state == "SUCCEEDED")) | .[-1].job_id')
"$CORRAL" job logs "$id" >"$T/l.out" 2>"$T/l.err"
# job logs prints the last 8 MiB of a file (head/logs.c LOG_MAX)
got=$(sha256sum <"$T/l.out" | cut -d' ' -f1)
wantt=$(tail -c $((8 * MIB)) "$T/r64" | sha256sum | cut -d' ' -f1)
[ "$got" = "$wantt" ] && ok "job logs after the end: the head's copy ends as the output did" ||
    fail "job logs $id: $(wc -c <"$T/l.out") bytes $(head -c 300 "$T/l.err")"

# a follower caught up gets what comes next as it comes: a worker writes
# 1 MiB, and once the CLI has written all of it out (a condition polled,
# not a time: the follower is caught up then), another MiB, relayed. How
# much of a stream goes so depends on how the CPUs are shared, so the
# 128 MiB above are not counted on for it
mkfifo "$T/more"
"$CORRAL" run --label-selector corral.io/node-id=far -- sh -c "head -c $MIB '$T/r64'; cat '$T/more'" \
    >"$T/relay.out" 2>"$T/relay.err" &
rp=$!
WPIDS="$WPIDS $rp"
if wait_until '[ "$(stat -c %s "$T/relay.out" 2>/dev/null)" = $MIB ]' 30; then
    h0=$(rl)
    tail -c $MIB "$T/r64" >"$T/more" # the worker's cat has it open: no wait for a reader
    wait $rp
    rc=$?
    h1=$(rl)
    [ "$rc" = 0 ] && [ "$(sha256sum <"$T/relay.out")" = "$( (head -c $MIB "$T/r64"; tail -c $MIB "$T/r64") | sha256sum)" ] &&
        [ $((h1 - h0)) -gt 0 ] && [ $((h1 - h0)) -le $MIB ] &&
        ok "the head relayed $((h1 - h0)) bytes of the second MiB, written once its follower was caught up" ||
        fail "the head relayed $((h1 - h0)) bytes ($h0 -> $h1) of the second MiB, want some; rc=$rc $(wc -c <"$T/relay.out") bytes"
else
    fail "the first MiB never came whole: $(wc -c <"$T/relay.out") bytes $(head -c 300 "$T/relay.err")"
    kill -TERM $rp 2>/dev/null
fi

# 3. three followers of one remote job at once, each following (it saw the
# first line) before the 64 MiB start: each gets all of it, relayed or
# from the head's copy
rm -f "$T/go"
wantr=$({ echo ready; cat "$T/r64"; } | sha256sum | cut -d' ' -f1)
fid=$("$CORRAL" run --detach --label-selector corral.io/node-id=far -- \
    sh -c "echo ready; while [ ! -e $T/go ]; do sleep 0.05; done; cat $T/r64")
start_followers "$fid" 3 fl # two into pipes, one into a file
h2=$(rl)
check_followers "$wantr" 3 fl "remote follower"
echo "note: $(($(rl) - h2)) bytes relayed to the three followers"

# 4. streams that interleave: two workers each writing 16 MiB to stdout and
# 16 MiB to stderr at once, every stream whole and in order
head -c $((16 * MIB)) /dev/urandom >"$T/a"
head -c $((16 * MIB)) /dev/urandom >"$T/b"
wa=$(sha256sum <"$T/a" | cut -d' ' -f1) wb=$(sha256sum <"$T/b" | cut -d' ' -f1)
gid=$("$CORRAL" run --detach --workers 2 --label-selector corral.io/node-id=far -- \
    sh -c "cat $T/a & cat $T/b >&2; wait")
wait_job "$gid" SUCCEEDED 60 || fail "job $gid is $(status "$gid" | jq -r .state)"
for w in 0 1; do
    "$CORRAL" job logs "$gid" --worker "$w" --no-prefix >"$T/o$w" 2>"$T/e$w.raw"
done
for w in 0 1; do
    # job logs writes stderr's bytes to its stderr, with nothing of its own
    # on success: the 8 MiB tails of each stream
    go=$(sha256sum <"$T/o$w" | cut -d' ' -f1) ge=$(sha256sum <"$T/e$w.raw" | cut -d' ' -f1)
    [ "$go" = "$(tail -c $((8 * MIB)) "$T/a" | sha256sum | cut -d' ' -f1)" ] &&
        [ "$ge" = "$(tail -c $((8 * MIB)) "$T/b" | sha256sum | cut -d' ' -f1)" ] &&
        ok "worker $w: stdout and stderr each whole and in order" ||
        fail "worker $w: stdout $(wc -c <"$T/o$w") bytes, stderr $(wc -c <"$T/e$w.raw") bytes"
done
finish
