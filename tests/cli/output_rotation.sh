#!/bin/bash
# Worker output files are bounded on disk (docs/workers.md "Output files"):
# a worker that writes ~19 MiB under --worker-log-max 4M leaves a file whose
# disk use (st_blocks) stays near 4 MiB while its size (and every reader's
# offset) stays the logical one; `corral job logs` shows the kept last part
# intact and one line saying how much earlier output was dropped; `job logs
# -f` during the writing still delivers an intact, increasing tail; and the
# same holds for a worker on a remote agent, for its agent's file and for
# the head's copy of its output.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" outrot
SPECS=$CORRAL_SOURCE_DIR/specs
LIMIT=$((4 << 20))
SLACK=$((LIMIT / 8 + (1 << 20))) # the bound's own slack, and a tick's writing at most
N=2500000                         # seq 1 N: about 19 MiB

# writes 1..N in 10 bursts, pausing between them so the agent's looks
# happen while it runs
WRITER="i=0; while [ \$i -lt 10 ]; do seq \$((i * $N / 10 + 1)) \$(((i + 1) * $N / 10)); i=\$((i + 1)); sleep 0.3; done"

wait_final() {
    local st
    for _ in $(seq 600); do
        st=$("$CORRAL" job status "$1" --json | jq -r .state)
        case $st in SUCCEEDED | FAILED | STOPPED) echo "$st"; return ;; esac
        sleep 0.1
    done
    echo "$st"
}
disk() { echo $(($(stat -c %b "$1") * $(stat -c %B "$1"))); }
# lines 2.. of stdin are consecutive integers ending at N (the first may be
# cut where the hole ends); prints how many lines there were
tail_intact() {
    awk -v n="$N" 'NR > 1 && $0 != prev + 1 { bad = 1 } { prev = $0; c++ }
                   END { if (bad || prev != n) exit 1; print c }'
}
check_file() { # PATH WHAT
    local size d
    size=$(stat -c %s "$1") d=$(disk "$1")
    [ "$size" -gt $((LIMIT * 4)) ] && ok "$2: logical size $size kept" || fail "$2: size $size"
    [ "$d" -le $((LIMIT + SLACK)) ] && ok "$2: $d bytes on disk (limit $LIMIT)" ||
        fail "$2: $d bytes on disk for a $size-byte file, limit $LIMIT"
}
check_logs() { # JOB WHAT
    local out err lines stray
    "$CORRAL" job logs "$1" >"$CORRAL_HOME/logs.out" 2>"$CORRAL_HOME/err"
    out=$(tr -d '\0' <"$CORRAL_HOME/logs.out") err=$(cat "$CORRAL_HOME/err")
    stray=$(tr -d '\n0-9' <"$CORRAL_HOME/logs.out" | wc -c) # NULs read from a hole would be here
    if lines=$(tail_intact <<<"$out") && [ "$lines" -gt $((LIMIT / 8 / 2)) ] && [ "$stray" = 0 ]; then
        ok "$2: job logs shows the last $lines lines intact"
    else
        fail "$2: job logs tail broken ($(wc -l <<<"$out") lines, last [$(tail -1 <<<"$out")], $stray stray bytes)"
    fi
    grep -Eq '^\[corral: [0-9]+\.[0-9] MiB of earlier output of worker 0 dropped: each worker keeps its last 4 MiB \(--worker-log-max\)\]$' <<<"$err" &&
        ok "$2: $(head -1 <<<"$err")" || fail "$2: no dropped line on stderr: [$err]"
}

out=$("$CORRAL" start --head --hw-spec "$SPECS/cpu-only.yaml" --worker-log-max 4k 2>&1) &&
    fail "a 4k bound accepted" ||
    { grep -q "worker-log-max: expected a size of at least 1M" <<<"$out" &&
        ok "a bound under 1M refused: $(head -1 <<<"$out")" || fail "4k: [$out]"; }
out0=$("$CORRAL" start --head --hw-spec "$SPECS/cpu-only.yaml" --worker-log-max 4M 2>&1) ||
    fail "start: $out0"

# bounded while the worker runs (the agent's periodic look), not only at its end
id=$("$CORRAL" run --detach -- sh -c "seq 1 $N; exec sleep 60")
want=$(seq 1 "$N" | wc -c) f="" d=""
for _ in $(seq 300); do
    [ -n "$f" ] || f=$(find "$CORRAL_HOME" -name "job$id-w0.out" | head -1)
    if [ -n "$f" ] && [ "$(stat -c %s "$f")" = "$want" ]; then
        d=$(disk "$f")
        [ "$d" -le $((LIMIT + SLACK)) ] && break
    fi
    sleep 0.1
done
[ "$(status "$id" | jq -r .state)" = RUNNING ] && [ -n "$d" ] && [ "$d" -le $((LIMIT + SLACK)) ] &&
    ok "a running worker's $want-byte file holds $d bytes on disk" ||
    fail "running worker: file [$f] ${d:-?} bytes on disk, state $(status "$id" | jq -r .state)"
# a follower that starts behind the kept part (its first look is the last
# 8 MiB, most of it a hole) goes on from the first data and is told
"$CORRAL" job logs -f "$id" >"$CORRAL_HOME/late.out" 2>"$CORRAL_HOME/late.err" &
fpid=$!
for _ in $(seq 100); do [ "$(tail -1 "$CORRAL_HOME/late.out" 2>/dev/null)" = "$N" ] && break; sleep 0.1; done
"$CORRAL" job stop "$id" --grace 0 >/dev/null 2>&1
wait "$fpid"
lines=$(tail_intact <"$CORRAL_HOME/late.out") && [ "$(tr -d '\n0-9' <"$CORRAL_HOME/late.out" | wc -c)" = 0 ] && ok "a late follower gets the kept $lines lines intact" ||
    fail "late follower: broken tail ($(wc -l <"$CORRAL_HOME/late.out") lines)"
grep -Eq '^\[corral: 1[0-9]\.[0-9] MiB of earlier output of worker 0 dropped: each worker keeps its last 4 MiB \(--worker-log-max\)\]$' \
    "$CORRAL_HOME/late.err" && ok "late follower: $(head -1 "$CORRAL_HOME/late.err")" ||
    fail "late follower: no dropped line: [$(cat "$CORRAL_HOME/late.err")]"

# the head's own agent, with a follower during the writing
id=$("$CORRAL" run --detach -- sh -c "$WRITER")
"$CORRAL" job logs -f "$id" >"$CORRAL_HOME/follow.out" 2>"$CORRAL_HOME/follow.err" &
fpid=$!
st=$(wait_final "$id")
[ "$st" = SUCCEEDED ] || fail "local job: $st"
wait "$fpid" && ok "job logs -f ended with the job" || fail "job logs -f failed: $(cat "$CORRAL_HOME/follow.err")"
flines=$(awk -v n="$N" '$0 <= prev { bad = 1 } { prev = $0; c++ } END { if (bad || prev != n) exit 1; print c }' \
    "$CORRAL_HOME/follow.out") && [ "$(tr -d '\n0-9' <"$CORRAL_HOME/follow.out" | wc -c)" = 0 ] && ok "job logs -f: $flines increasing lines ending at $N" ||
    fail "job logs -f: output broken (last [$(tail -1 "$CORRAL_HOME/follow.out")])"
# a follower that kept up has every line; one that fell behind was told
if [ "${flines:-0}" -lt "$N" ] && ! grep -q "dropped" "$CORRAL_HOME/follow.err"; then
    fail "job logs -f: $flines of $N lines and no dropped line"
fi
f=$(find "$CORRAL_HOME" -name "job$id-w0.out" | head -1)
[ -n "$f" ] && check_file "$f" "local worker file" || fail "no output file of job $id"
check_logs "$id" "local"

# a worker on a remote agent: the agent's file and the head's copy
join=$(sed -n 's/^  \(corral start --address .*\)$/\1/p' <<<"$out0")
out=$("$CORRAL" start ${join#corral start} --hw-spec "$SPECS/dgx-h100.yaml" --node-id ra \
    --node-ip 127.0.0.2 --worker-log-max 4M 2>&1) || fail "join: $out"
WPIDS="$WPIDS $(cat "$CORRAL_HOME/agent_ra/corrald.pid")"
id=$("$CORRAL" run --detach --gpus 1 --label-selector corral.io/node-id=ra -- sh -c "$WRITER")
st=$(wait_final "$id")
[ "$st" = SUCCEEDED ] || fail "remote job: $st"
f=$(find "$CORRAL_HOME/agent_ra" -name "job$id-w0.out" | head -1)
[ -n "$f" ] && check_file "$f" "remote agent's file" || fail "no agent file of job $id"
f=$(find "$CORRAL_HOME"/session_latest/ -name "job$id-w0.out" | head -1)
[ -n "$f" ] && check_file "$f" "head's copy" || fail "no head copy of job $id"
check_logs "$id" "remote"

# an agent with a smaller bound than the head's, whose head does not read
# for a while (SIGSTOP): the agent drops what it could not send, its
# forwarder goes on after the hole and the head's copy gets the gap as a
# hole; job logs shows no zeros, the tail intact, and the dropped line
out=$("$CORRAL" start ${join#corral start} --hw-spec "$SPECS/dgx-h100.yaml" --node-id rb \
    --node-ip 127.0.0.3 --worker-log-max 1M 2>&1) || fail "join rb: $out"
WPIDS="$WPIDS $(cat "$CORRAL_HOME/agent_rb/corrald.pid")"
HPID=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
id=$("$CORRAL" run --detach --gpus 1 --label-selector corral.io/node-id=rb -- \
    sh -c "while [ ! -e $TDATA/go ]; do sleep 0.05; done; seq 1 $N")
for _ in $(seq 100); do [ "$(status "$id" | jq -r .state)" = RUNNING ] && break; sleep 0.1; done
f=""
for _ in $(seq 100); do f=$(find "$CORRAL_HOME/agent_rb" -name "job$id-w0.out" | head -1); [ -n "$f" ] && break; sleep 0.1; done
kill -STOP "$HPID"
touch "$TDATA/go"
for _ in $(seq 200); do
    [ -n "$f" ] && [ "$(stat -c %s "$f")" = "$want" ] && [ "$(disk "$f")" -le $((2 << 20)) ] && break
    sleep 0.1
done
kill -CONT "$HPID"
st=$(wait_final "$id")
[ "$st" = SUCCEEDED ] || fail "rb job: $st"
"$CORRAL" job logs "$id" >"$CORRAL_HOME/rb.out" 2>"$CORRAL_HOME/err"
stray=$(tr -d '\n0-9' <"$CORRAL_HOME/rb.out" | wc -c) # NULs read from a hole would be here
lines=$(tail_intact <"$CORRAL_HOME/rb.out") && [ "$stray" = 0 ] &&
    ok "agent bound 1M, head 4M, head stalled: job logs shows $lines lines intact, no zeros" ||
    fail "rb: job logs broken ($(wc -l <"$CORRAL_HOME/rb.out") lines, $stray stray bytes)"
grep -Eq '^\[corral: [0-9]+\.[0-9] MiB of earlier output of worker 0 dropped' "$CORRAL_HOME/err" &&
    ok "rb: $(head -1 "$CORRAL_HOME/err")" || fail "rb: no dropped line: [$(cat "$CORRAL_HOME/err")]"
"$CORRAL" stop >/dev/null 2>&1 || fail "stop"
finish
