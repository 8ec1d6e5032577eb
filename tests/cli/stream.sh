#!/bin/bash
# Output while it is written: `corral run` streams each worker's output
# (JobLogs follow, daemon/follow.c), `corral job logs -f` follows to the
# job's end, `corral events -f` pushes new events. No timings: a worker
# holds its second line until the test creates a file, so a first line
# seen before that has been streamed, not gathered at the end.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" stream
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml
T=$TDATA
mkdir -p "$T"

# waits (up to 20 s) until file $1 holds a line matching $2
wait_for() {
    for _ in $(seq 200); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
# waits (up to 20 s) for background pid $1 to end; its status in $?
wait_end() {
    for _ in $(seq 200); do kill -0 "$1" 2>/dev/null || { wait "$1"; return $?; }; sleep 0.1; done
    return 124
}

# usage errors exit 2 with the usage line
for args in "job logs -f" "job logs -f 1 2" "job status -f 1" "job logs --worker x 1" \
    "events -f extra" "run --bundle 1 -- true" "run --pg g --placement SPREAD -- true" \
    "run --pg g --domain zone -- true" "run --placement DIAGONAL -- true" "run --bind far -- true" \
    "run --bundle -1 --pg g -- true"; do
    out=$("$CORRAL" $args 2>&1); rc=$?
    cmd=$(awk '{print $1}' <<<"$args")
    [ $rc -eq 2 ] && grep -q "^usage: corral $cmd" <<<"$out" && ok "usage: corral $args exits 2" ||
        fail "usage: corral $args: rc=$rc $out"
done

out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "start: $out"; finish; }

# 1. corral run streams: the first line is out while the worker still runs
"$CORRAL" run -- sh -c "echo first; while [ ! -e $T/go1 ]; do sleep 0.05; done; echo second" \
    >"$T/run1.out" 2>"$T/run1.err" &
rpid=$!
WPIDS="$WPIDS $rpid"
if wait_for "$T/run1.out" '^first$'; then
    kill -0 $rpid 2>/dev/null && ! grep -q second "$T/run1.out" &&
        ok "run: first line streamed while the worker runs" ||
        fail "run: first line only at the end: $(cat "$T/run1.out")"
else
    fail "run: first line not streamed: [$(cat "$T/run1.out")] $(cat "$T/run1.err")"
fi
id1=$("$CORRAL" job list --json | jq -r '.[-1].job_id')
st=$(status "$id1" | jq -r .state)
[ "$st" = RUNNING ] && ok "run: the job still runs meanwhile" || fail "run: job $id1 is $st"
touch "$T/go1"
wait_end $rpid; rc=$?
[ $rc -eq 0 ] && [ "$(cat "$T/run1.out")" = "$(printf 'first\nsecond')" ] &&
    ok "run: exits 0 with the whole output" || fail "run: rc=$rc [$(cat "$T/run1.out")] $(cat "$T/run1.err")"

# the job's exit code is corral run's
"$CORRAL" run -- sh -c 'echo out; echo err >&2; exit 7' >"$T/rc.out" 2>"$T/rc.err"; rc=$?
[ $rc -eq 7 ] && grep -qx out "$T/rc.out" && grep -qx err "$T/rc.err" &&
    ok "run: exit code 7, stdout and stderr apart" || fail "run exit code: rc=$rc $(cat "$T"/rc.*)"

# more than one tick's worth (1 MiB per follower per tick): every byte, in order
"$CORRAL" run -- sh -c 'seq 1 400000' >"$T/big.out" 2>"$T/big.err"; rc=$?
[ $rc -eq 0 ] && seq 1 400000 | cmp -s - "$T/big.out" && ok "run: 2.7 MB of output whole and in order" ||
    fail "run big: rc=$rc $(wc -c <"$T/big.out") bytes $(head -c 300 "$T/big.err")"

# 2. several workers: lines prefixed, a partial line held until its end
"$CORRAL" run --workers 3 -- sh -c \
    'printf "w$CORRAL_WORKER_INDEX-"; sleep 0.3; echo "end"; echo "e$CORRAL_WORKER_INDEX" >&2; printf "tail$CORRAL_WORKER_INDEX"' \
    >"$T/gang.out" 2>"$T/gang.err"; rc=$?
good=0
for i in 0 1 2; do
    grep -qx "\[$i\] w$i-end" "$T/gang.out" && grep -qx "\[$i\] tail$i" "$T/gang.out" &&
        grep -qx "\[$i\] e$i" "$T/gang.err" && good=$((good + 1))
done
lines=$(wc -l <"$T/gang.out")
[ $rc -eq 0 ] && [ $good -eq 3 ] && [ "$lines" -eq 6 ] && ! grep -qv '^\[[0-2]\] ' "$T/gang.out" &&
    ok "run: 3 workers, every line prefixed and whole" ||
    fail "run gang: rc=$rc good=$good lines=$lines [$(cat "$T/gang.out")] [$(cat "$T/gang.err")]"

# 3. a restarted worker's output continues with its new run's
out=$("$CORRAL" run --max-restarts 1 --restart worker -- \
    sh -c 'echo "attempt $CORRAL_RESTART_COUNT"; [ "$CORRAL_RESTART_COUNT" = 1 ]' 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qx "attempt 0" <<<"$out" && grep -qx "attempt 1" <<<"$out" &&
    ok "run: output of both attempts of a restarted worker" || fail "run restart: rc=$rc $out"

# 4. job logs -f follows a detached job to its end (each line with its worker)
id=$("$CORRAL" run --detach --workers 2 -- sh -c \
    "echo a\$CORRAL_WORKER_INDEX; while [ ! -e $T/go2 ]; do sleep 0.05; done; echo b\$CORRAL_WORKER_INDEX")
"$CORRAL" job logs -f "$id" >"$T/f.out" 2>"$T/f.err" &
fpid=$!
WPIDS="$WPIDS $fpid"
"$CORRAL" job logs -f "$id" --worker 1 >"$T/f1.out" 2>&1 &
f1pid=$!
WPIDS="$WPIDS $f1pid"
if wait_for "$T/f.out" '^\[1\] a1$' && wait_for "$T/f.out" '^\[0\] a0$'; then
    kill -0 $fpid 2>/dev/null && ok "logs -f: output so far, still following" ||
        fail "logs -f ended early: $(cat "$T/f.out" "$T/f.err")"
else
    fail "logs -f: nothing followed: $(cat "$T/f.out" "$T/f.err")"
fi
touch "$T/go2"
wait_end $fpid; rc=$?
[ $rc -eq 0 ] && [ "$(sort "$T/f.out" | tr '\n' ' ')" = "[0] a0 [0] b0 [1] a1 [1] b1 " ] &&
    ok "logs -f: ends with the job, output complete" || fail "logs -f: rc=$rc [$(cat "$T/f.out")] $(cat "$T/f.err")"
wait_end $f1pid; rc=$?
[ $rc -eq 0 ] && [ "$(cat "$T/f1.out")" = "$(printf 'a1\nb1')" ] && ok "logs -f --worker 1" ||
    fail "logs -f --worker 1: rc=$rc [$(cat "$T/f1.out")]"
# a job already over: everything, at once
out=$(timeout 20 "$CORRAL" job logs -f "$id" 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(sort <<<"$out" | tr '\n' ' ')" = "[0] a0 [0] b0 [1] a1 [1] b1 " ] && ok "logs -f of a finished job" ||
    fail "logs -f finished: rc=$rc $out"
out=$("$CORRAL" job logs -f 9999 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "no job 9999" <<<"$out" && ok "logs -f of no such job fails" || fail "logs -f 9999: rc=$rc $out"

# 5. Ctrl-C on a streaming corral run stops the job; its output so far stays
"$CORRAL" run -- sh -c "echo started; while [ ! -e $T/never ]; do sleep 0.05; done" \
    >"$T/int.out" 2>"$T/int.err" &
ipid=$!
WPIDS="$WPIDS $ipid"
wait_for "$T/int.out" '^started$' || fail "interrupt: the job did not start: $(cat "$T/int.err")"
iid=$("$CORRAL" job list --json | jq -r '.[-1].job_id')
kill -INT $ipid
wait_end $ipid; rc=$?
st=$(status "$iid" | jq -r .state)
[ "$st" = STOPPED ] && [ $rc -ne 0 ] && grep -q "stopping job $iid" "$T/int.err" &&
    ok "Ctrl-C stops the job (rc=$rc)" || fail "interrupt: rc=$rc state=$st $(cat "$T/int.err")"

# 6. events -f pushes new events
"$CORRAL" events -f --json >"$T/ev.out" 2>"$T/ev.err" &
epid=$!
WPIDS="$WPIDS $epid"
wait_for "$T/ev.out" '"kind":"started"' || fail "events -f: no past events: $(cat "$T/ev.err")"
eid=$("$CORRAL" run --detach -- true)
if wait_for "$T/ev.out" "\"kind\":\"finished\",\"job_id\":\"$eid\""; then
    jq -s -e 'map(.seq) as $s | ($s | sort | unique) == $s' "$T/ev.out" >/dev/null &&
        ok "events -f: the new job's events arrive, in order, once" ||
        fail "events -f: out of order or repeated: $(cat "$T/ev.out")"
else
    fail "events -f: job $eid's end not pushed: $(tail -3 "$T/ev.out") $(cat "$T/ev.err")"
fi
kill $epid 2>/dev/null
wait $epid 2>/dev/null

"$CORRAL" stop >/dev/null 2>&1
finish
