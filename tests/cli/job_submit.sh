#!/bin/bash
# corral job submit (issue 15, "Jobs"): a job not bound to the command that
# submitted it, as `ray job submit`: the output followed to the end and the
# job's exit code; --no-wait prints the id; Ctrl-C (SIGINT) ends the
# following and leaves the job running, and so does the command's death,
# where corral run's job would be stopped.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" jobsubmit
"$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml" >/dev/null || { fail "start"; exit 1; }

out=$(timeout 60 "$CORRAL" job submit --env X=7 -- sh -c 'echo out $X; exit 3' 2>"$CORRAL_HOME/err"); rc=$?
[ $rc -eq 3 ] && [ "$out" = "out 7" ] && grep -q "job [0-9]* submitted; following its output" "$CORRAL_HOME/err" &&
    ok "submit: output followed, exit code 3" || fail "submit: rc=$rc [$out] $(cat "$CORRAL_HOME/err")"

id=$(timeout 20 "$CORRAL" job submit --no-wait -- sleep 30); rc=$?
[ $rc -eq 0 ] && [[ "$id" =~ ^[0-9]+$ ]] && ok "--no-wait: the id ($id)" || fail "--no-wait: rc=$rc [$id]"
"$CORRAL" job stop "$id" >/dev/null

# a job submit of sleep 60 in the background, its output in FILE: sets sub
# (its pid) and id (the job, once RUNNING)
submit_bg() {
    "$CORRAL" job submit -- sleep 60 >"$1" 2>&1 &
    sub=$!
    WPIDS="$WPIDS $sub"
    id=
    for _ in $(seq 200); do
        id=$(sed -n 's/.*job \([0-9]*\) submitted.*/\1/p' "$1")
        [ -n "$id" ] && [ "$(status "$id" | jq -r .state)" = RUNNING ] && break
        sleep 0.1
    done
}

# SIGINT to the submit: the job goes on (where a bound corral run's is stopped)
submit_bg "$CORRAL_HOME/sub.out"
kill -INT "$sub"
wait "$sub"; rc=$?
sleep 0.5
st=$(status "$id" | jq -r .state)
[ $rc -eq 0 ] && [ "$st" = RUNNING ] && grep -q "no longer following job $id, which goes on" "$CORRAL_HOME/sub.out" &&
    ok "SIGINT: the follow ends, job $id goes on running" || fail "SIGINT: rc=$rc state=$st $(cat "$CORRAL_HOME/sub.out")"
"$CORRAL" job stop "$id" >/dev/null

submit_bg "$CORRAL_HOME/sub2.out"
kill -KILL "$sub"
wait "$sub" 2>/dev/null
sleep 1
st=$(status "$id" | jq -r .state)
[ "$st" = RUNNING ] && ok "the submitting command killed: job $id goes on" || fail "kill -9: state=$st"
"$CORRAL" job stop "$id" >/dev/null

out=$(timeout 20 "$CORRAL" job submit --detach -- true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "detach" <<<"$out" && ok "submit refuses run's --detach (its own is --no-wait)" ||
    fail "--detach: rc=$rc $out"
finish
