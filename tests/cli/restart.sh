#!/bin/bash
# Restart policies end to end: a real head on a simulated 8-GPU node,
# workers killed with SIGKILL or failing, restarted by worker or by gang,
# up to the limit (docs/runtime.md).
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" restart
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml
# the pid of worker $2 of job $1 once it runs
running_pid() {
    local p
    for _ in $(seq 100); do
        p=$(status "$1" | jq -r ".workers[$2] | select(.state == \"RUNNING\") | .pid")
        [ -n "$p" ] && [ "$p" -gt 0 ] && { echo "$p"; return; }
        sleep 0.05
    done
    echo 0
}
wait_final() {
    for _ in $(seq 200); do
        case $(status "$1" | jq -r .state) in SUCCEEDED | FAILED | STOPPED) return ;; esac
        sleep 0.05
    done
}

# usage errors
out=$("$CORRAL" run --max-restarts x -- true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "^usage: corral run" <<<"$out" && ok "--max-restarts x: usage error" ||
    fail "--max-restarts x: rc=$rc $out"
out=$("$CORRAL" run --max-restarts 1 --restart sometimes -- true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "expected worker, gang or none" <<<"$out" && ok "--restart sometimes: usage error" ||
    fail "--restart sometimes: rc=$rc $out"

out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "start: $out"; exit 1; }
S=$CORRAL_HOME/session_latest

# --restart worker: worker 1 killed with SIGKILL is restarted alone, on
# its GPU, with CORRAL_RESTART_COUNT=1; the job then succeeds
cmd='echo "n=$CORRAL_RESTART_COUNT cvd=$CUDA_VISIBLE_DEVICES"; [ "$CORRAL_RESTART_COUNT" -gt 0 ] && exit 0; exec sleep 3'
id=$("$CORRAL" run --detach --gpus 1 --workers 2 --max-restarts 3 --restart worker -- sh -c "$cmd")
p0=$(running_pid "$id" 0); p1=$(running_pid "$id" 1)
# killed once it has printed its first line
for _ in $(seq 100); do "$CORRAL" job logs "$id" --worker 1 | grep -q "^n=0" && break; sleep 0.05; done
kill -KILL "$p1"
wait_final "$id"
js=$(status "$id")
np0=$(jq -r '.workers[0].pid' <<<"$js"); np1=$(jq -r '.workers[1].pid' <<<"$js")
[ "$(jq -r .state <<<"$js")" = SUCCEEDED ] && [ "$(jq -r .restarts <<<"$js")" = 1 ] &&
    [ "$(jq -r .max_restarts <<<"$js")" = 3 ] && [ "$(jq -r .restart_policy <<<"$js")" = worker ] &&
    [ "$np0" = "$p0" ] && [ "$np1" != "$p1" ] && [ "$p1" -gt 0 ] &&
    [ "$(jq -r '.workers[0].restarts' <<<"$js")" = 0 ] && [ "$(jq -r '.workers[1].restarts' <<<"$js")" = 1 ] &&
    ok "worker policy: only worker 1 restarted (pid $p1 -> $np1), job succeeded" ||
    fail "worker policy: p0=$p0 p1=$p1 $js"
l1=$("$CORRAL" job logs "$id" --worker 1)
l0=$("$CORRAL" job logs "$id" --worker 0)
cvd=$(sed -n 's/^n=0 cvd=//p' <<<"$l1")
[ "$(grep -c . <<<"$l1")" = 2 ] && [ -n "$cvd" ] && grep -qx "n=1 cvd=$cvd" <<<"$l1" &&
    [ "$(grep -c . <<<"$l0")" = 1 ] && grep -q "^n=0 cvd=GPU-" <<<"$l0" && ! grep -q "$cvd" <<<"$l0" &&
    ok "worker policy: restarted on the same GPU with CORRAL_RESTART_COUNT=1" ||
    fail "worker policy logs: w1=[$l1] w0=[$l0] devices $cvd"
revents() { "$CORRAL" events | grep -E "^[0-9:.]+ +restarted +$1 +"; }
revents "$id" | grep -q "restarted worker 1 (attempt 1 of 3) after signal 9" &&
    ok "worker policy: restarted event" || fail "events: $("$CORRAL" events)"
"$CORRAL" job status "$id" | grep -q "restarts: 1 of 3 (restart worker)" &&
    ok "job status shows the count" || fail "job status: $("$CORRAL" job status "$id")"

# gang (the default with --max-restarts): every worker restarts, new pids,
# CORRAL_RESTART_COUNT=1 in each
cmd='echo "n=$CORRAL_RESTART_COUNT"; [ "$CORRAL_RESTART_COUNT" -gt 0 ] && exit 0; exec sleep 30'
id=$("$CORRAL" run --detach --gpus 1 --workers 3 --max-restarts 1 -- sh -c "$cmd")
p0=$(running_pid "$id" 0); p1=$(running_pid "$id" 1); p2=$(running_pid "$id" 2)
kill -KILL "$p1"
wait_final "$id"
js=$(status "$id")
same=0
for i in 0 1 2; do
    old=$(eval echo "\$p$i")
    [ "$(jq -r ".workers[$i].pid" <<<"$js")" = "$old" ] && same=$((same + 1))
    [ "$(jq -r ".workers[$i].restarts" <<<"$js")" = 1 ] || same=$((same + 1))
    [ "$("$CORRAL" job logs "$id" --worker $i | tail -n1)" = "n=1" ] || same=$((same + 1))
done
[ "$(jq -r .state <<<"$js")" = SUCCEEDED ] && [ "$(jq -r .restarts <<<"$js")" = 1 ] &&
    [ "$(jq -r .restart_policy <<<"$js")" = gang ] && [ $same -eq 0 ] && [ "$p0" -gt 0 ] &&
    gone "$p0" && gone "$p2" &&
    ok "gang policy: all 3 workers restarted with new pids and CORRAL_RESTART_COUNT=1" ||
    fail "gang policy: pids $p0 $p1 $p2, $same mismatch(es): $js"
[ "$(revents "$id" | grep -c "restarted worker")" = 3 ] &&
    ok "gang policy: 3 restarted events" || fail "gang events: $("$CORRAL" events)"

# --max-restarts 2 with a command that always fails: exactly 2 restarts,
# then FAILED with its exit code
out=$("$CORRAL" run --max-restarts 2 -- sh -c 'echo try $CORRAL_RESTART_COUNT; exit 3' 2>&1); rc=$?
id=$("$CORRAL" job list --json | jq -r '.[-1].job_id')
js=$(status "$id")
[ $rc -eq 3 ] && [ "$(jq -r .state <<<"$js")" = FAILED ] && [ "$(jq -r .exit_code <<<"$js")" = 3 ] &&
    [ "$(jq -r .restarts <<<"$js")" = 2 ] && jq -r .reason <<<"$js" | grep -q "after 2 restart(s), the limit" &&
    [ "$(grep -c "^try" <<<"$out")" = 3 ] && grep -q "^try 2$" <<<"$out" &&
    ok "limit: 2 restarts, then FAILED with exit code 3" || fail "limit: rc=$rc out=[$out] $js"
[ "$(revents "$id" | grep -c "restarted worker 0")" = 2 ] &&
    ok "limit: exactly 2 restarted events" || fail "limit events: $("$CORRAL" events)"
q() { sqlite3 "$S/state.db" "$1" 2>&1; }
[ "$(q "select restart_policy, max_restarts, restarts from jobs where id = $id")" = "gang|2|2" ] &&
    [ "$(q "select restarts from workers where job_id = $id")" = 2 ] &&
    ok "state.db: the policy and the counts" || fail "state.db: $(q "select * from jobs where id = $id")"

# pins the backoff doubling (daemon/head.c backoff_ms): the restarted
# events say how long each restart waited, 100 ms (the default) then 200
# and 400, not 100, 200, 300 as an additive backoff would
"$CORRAL" run --max-restarts 3 -- sh -c 'exit 5' >/dev/null 2>&1
id=$("$CORRAL" job list --json | jq -r '.[-1].job_id')
waits=$(revents "$id" | sed -n 's/.*, \([0-9]*\) ms later$/\1/p' | tr '\n' ' ')
[ "$waits" = "100 200 400 " ] && ok "backoff doubles: 100, 200, 400 ms" ||
    fail "backoff: waits [$waits] $(revents "$id")"

# pins the exit code of a worker ended by a signal (daemon/head.c
# exit_code_of): SIGKILL is 137, 128 + 9 as a shell reports it, for the
# job and for corral run's own exit status
"$CORRAL" run -- sh -c 'kill -KILL $$' >/dev/null 2>&1; rc=$?
id=$("$CORRAL" job list --json | jq -r '.[-1].job_id')
js=$(status "$id")
[ $rc -eq 137 ] && [ "$(jq -r .exit_code <<<"$js")" = 137 ] && [ "$(jq -r .state <<<"$js")" = FAILED ] &&
    jq -r .reason <<<"$js" | grep -q "ended by signal 9" &&
    ok "SIGKILL: exit code 137" || fail "SIGKILL: rc=$rc $js"

# no restarts by default
"$CORRAL" run -- sh -c 'exit 4' >/dev/null 2>&1; rc=$?
id=$("$CORRAL" job list --json | jq -r '.[-1].job_id')
[ $rc -eq 4 ] && [ "$(status "$id" | jq -r '.restarts, .restart_policy' | tr '\n' ' ')" = "0 none " ] &&
    ok "default: no restart" || fail "default: rc=$rc $(status "$id")"

# a job stopped while a restart waits for its backoff ends STOPPED
id=$("$CORRAL" run --detach --max-restarts 5 -- sh -c 'exit 1')
for _ in $(seq 100); do [ "$(status "$id" | jq -r .restarts)" -ge 2 ] && break; sleep 0.05; done
"$CORRAL" job stop "$id" >/dev/null; wait_final "$id"
[ "$(status "$id" | jq -r .state)" = STOPPED ] && ok "stop during a backoff: STOPPED" ||
    fail "stop during backoff: $(status "$id")"

"$CORRAL" stop >/dev/null 2>&1 || fail "stop"
finish
