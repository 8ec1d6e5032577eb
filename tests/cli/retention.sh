#!/bin/bash
# Retention of finished jobs (issue 12): beyond --keep-finished-jobs the
# oldest finished jobs go, and any finished longer ago than
# --keep-finished-for, with their workers, events and output files, from
# the head's memory and from state.db; a RUNNING and a PENDING job older
# than all of them stay.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" retention
spec="$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" # 16 CPUs
db() { sqlite3 "file:$CORRAL_HOME/session_latest/state.db?mode=ro" "$1" 2>/dev/null; }
# waits (up to 30 s, polling) until job $1 has ended
wait_final() {
    for _ in $(seq 300); do
        case $(status "$1" | jq -r .state) in SUCCEEDED | FAILED | STOPPED) return 0 ;; esac
        sleep 0.1
    done
    return 1
}
# waits (up to 30 s, polling) until the job list holds exactly the ids given
wait_list() {
    local want=$1 got=""
    for _ in $(seq 300); do
        got=$("$CORRAL" job list --json | jq -r '[.[].job_id] | join(" ")')
        [ "$got" = "$want" ] && return 0
        sleep 0.1
    done
    echo "job list: $got" >&2
    return 1
}
"$CORRAL" start --head --hw-spec "$spec" --keep-finished-jobs 3 >/dev/null 2>&1 ||
    { fail "head start"; finish; }
run=$("$CORRAL" run --detach --resources CPU=8 -- sleep 300) || fail "running job"
pend=$("$CORRAL" run --detach --resources CPU=16 -- true) || fail "pending job"
ids=""
for i in 1 2 3 4 5 6; do
    id=$("$CORRAL" run --detach --name "short-$i" -- sh -c "echo output of $i") || fail "short $i"
    wait_final "$id" || fail "job $id did not end"
    ids+=" $id"
done
set -- $ids
logs="$CORRAL_HOME/session_latest/logs"
wait_list "$run $pend $4 $5 $6" && ok "with 6 finished and a limit of 3, the 3 oldest went" ||
    fail "count retention"
[ "$(status "$run" | jq -r .state)" = RUNNING ] && [ "$(status "$pend" | jq -r .state)" = PENDING ] &&
    ok "the older RUNNING and PENDING jobs stay" || fail "active jobs: $(status "$run") $(status "$pend")"
err=$("$CORRAL" job status "$1" 2>&1) && fail "job $1 still answers: $err" || ok "job $1 is gone: $err"
[ ! -e "$logs/job$1-w0.out" ] && [ -e "$logs/job$4-w0.out" ] && ok "its output file went with it" ||
    fail "output files: $(ls "$logs")"
[ "$("$CORRAL" job logs "$4")" = "output of 4" ] && ok "a kept job's output is still there" ||
    fail "logs of $4: $("$CORRAL" job logs "$4" 2>&1)"
n=$("$CORRAL" events --json | jq --arg a "$1" --arg b "$2" --arg c "$3" \
    '[.[] | select(.job_id == $a or .job_id == $b or .job_id == $c)] | length')
[ "$n" -eq 0 ] && [ "$("$CORRAL" events --json | jq --arg j "$4" '[.[] | select(.job_id == $j)] | length')" -gt 0 ] &&
    ok "their events went, a kept job's stay" || fail "events of removed jobs: $n"
if command -v sqlite3 >/dev/null; then
    [ "$(db "SELECT count(*) FROM jobs WHERE id IN ($1, $2, $3)")" = 0 ] &&
        [ "$(db "SELECT count(*) FROM workers WHERE job_id IN ($1, $2, $3)")" = 0 ] &&
        [ "$(db "SELECT count(*) FROM events WHERE job_id IN ($1, $2, $3)")" = 0 ] &&
        [ "$(db "SELECT count(*) FROM jobs")" = 5 ] && ok "state.db: their jobs, workers and events rows are gone" ||
        fail "state.db: $(db "SELECT id, state FROM jobs")"
fi
"$CORRAL" stop >/dev/null 2>&1

# by age: a job that finished goes after --keep-finished-for, a running one stays
"$CORRAL" start --head --hw-spec "$spec" --keep-finished-for 2s >/dev/null 2>&1 ||
    { fail "second head start"; finish; }
run=$("$CORRAL" run --detach -- sleep 300) || fail "running job"
done_id=$("$CORRAL" run --detach -- true) || fail "short job"
wait_final "$done_id" || fail "job $done_id did not end"
wait_list "$run" && ok "a job finished more than 2 s ago went, the running one stayed" ||
    fail "age retention"
"$CORRAL" stop >/dev/null 2>&1
if err=$("$CORRAL" start --head --hw-spec "$spec" --keep-finished-for 5x 2>&1); then
    fail "a bad duration was taken: $err"
else
    grep -q "keep-finished-for: expected a duration" <<<"$err" && ok "a bad duration is refused: $(head -1 <<<"$err")" ||
        fail "bad duration: $err"
fi
finish
