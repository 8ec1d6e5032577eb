#!/bin/bash
# Recovery after kill -9 of the head (docs/runtime.md "Recovery"): a head
# started again on the same CORRAL_HOME takes over the dead head's session,
# reads its jobs back from state.db, adopts the workers that still run
# (same pids) and fails the jobs whose workers are gone.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" recover
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml
wstate() { status "$1" | jq -r "[.workers[].state] | join(\",\")"; }
# the pids of job $1's workers once all $2 run, space-separated
running_pids() {
    local p
    for _ in $(seq 100); do
        p=$(status "$1" | jq -r '[.workers[] | select(.state == "RUNNING") | .pid] | join(" ")')
        [ "$(wc -w <<<"$p")" -eq "$2" ] && { echo "$p"; return; }
        sleep 0.05
    done
    echo ""
}
wait_final() {
    for _ in $(seq 600); do # 30 s: a loaded machine
        case $(status "$1" | jq -r .state) in SUCCEEDED | FAILED | STOPPED) return ;; esac
        sleep 0.05
    done
}

out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "start: $out"; exit 1; }
S1=$(readlink "$CORRAL_HOME/session_latest")
S1_DIR="$CORRAL_HOME/$S1"

# a finished job and a running 2-worker gang, then kill -9 of the head
done_id=$("$CORRAL" run --detach -- true)
wait_final "$done_id"
id=$("$CORRAL" run --detach --gpus 1 --workers 2 -- sleep 30)
pids=$(running_pids "$id" 2)
WPIDS="$pids"
[ -n "$pids" ] || fail "the gang did not start: $(status "$id")"
devs_before=$(status "$id" | jq -c '[.workers[].devices]')
# 7 GPUs while 2 of 8 are held: pending
pend=$("$CORRAL" run --detach --gpus 1 --workers 7 -- sleep 30)
[ "$(status "$pend" | jq -r .state)" = PENDING ] || fail "not pending: $(status "$pend")"
kill_head
for p in $pids; do gone "$p" && fail "worker $p died with the head"; done

# what a head killed in the middle of a turn leaves behind: a worker it
# spawned (CORRAL_SESSION_ID of this session, its own process group) in
# work it never committed, unknown to state.db
CORRAL_SESSION_ID=$(cat "$S1_DIR/session_id") CORRAL_WORKER_ID=job999-w0 setsid sleep 60 &
orphan=$!
WPIDS="$WPIDS $orphan"
sleep 0.2
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "restart: $out"; exit 1; }
for _ in $(seq 50); do gone "$orphan" && break; sleep 0.05; done
gone "$orphan" && "$CORRAL" events | grep -q "stopped worker job999-w0 (pid $orphan)" &&
    ok "an orphan of unrecorded work is stopped at the restart, with an event" ||
    fail "orphan $orphan: $("$CORRAL" events | tail -3)"
[ "$(readlink "$CORRAL_HOME/session_latest")" = "$S1" ] && ok "the dead head's session is taken over" ||
    fail "session: $S1 -> $(readlink "$CORRAL_HOME/session_latest")"
list=$("$CORRAL" job list --json)
[ "$(jq -r ".[] | select(.job_id == \"$done_id\") | .state" <<<"$list")" = SUCCEEDED ] &&
    [ "$(jq -r ".[] | select(.job_id == \"$id\") | .state" <<<"$list")" = RUNNING ] &&
    ok "job list after the restart: both jobs, their states" || fail "job list: $list"
now=$(status "$id" | jq -r '[.workers[].pid] | join(" ")')
[ "$now" = "$pids" ] && [ "$(wstate "$id")" = RUNNING,RUNNING ] &&
    ok "workers adopted (same pids $pids)" || fail "adoption: $now vs $pids: $(status "$id")"
[ "$(status "$id" | jq -c '[.workers[].devices]')" = "$devs_before" ] &&
    ok "adopted workers keep their devices" || fail "devices: $devs_before -> $(status "$id")"
"$CORRAL" events | grep -q "adopted worker 1 (pid ${pids#* })" && ok "event: adopted worker 1" ||
    fail "events: $("$CORRAL" events | tail -5)"
# their GPUs are held again: 2 of 8 in use
free=$("$CORRAL" status --json | jq -r '.nodes[0].resources.GPU.free')
[ "$free" = 6.0 ] || [ "$free" = 6 ] && ok "their GPUs are reserved again" ||
    fail "free GPUs after adoption: $free ($("$CORRAL" status --json | jq -c .nodes[0].resources))"
"$CORRAL" events | grep -q "differ from the ones it runs on" &&
    fail "the scheduler reserved other devices: $("$CORRAL" events | grep differ)"
[ "$(status "$pend" | jq -r .state)" = PENDING ] && ok "the pending job is pending again" ||
    fail "pending job after the restart: $(status "$pend")"
"$CORRAL" job stop "$id" >/dev/null || fail "job stop"
wait_final "$id"
[ "$(status "$id" | jq -r .state)" = STOPPED ] && ok "stop of the adopted job: STOPPED" ||
    fail "after stop: $(status "$id")"
sleep 0.1
for p in $pids; do gone "$p" || fail "adopted worker $p survived the stop"; done
# the adopted gang's GPUs went back: the pending job is placed now
p=$(running_pids "$pend" 7)
WPIDS="$WPIDS $p"
[ -n "$p" ] && ok "the pending job starts once the adopted gang stopped" || fail "pending: $(status "$pend")"
"$CORRAL" job stop "$pend" >/dev/null
wait_final "$pend"

# workers killed while the head is down: the job fails, saying why
id2=$("$CORRAL" run --detach --gpus 1 --workers 2 -- sleep 30)
pids=$(running_pids "$id2" 2)
WPIDS="$WPIDS $pids"
# and one that ends by itself after the restart: adopted, its exit code
# unknown (it waits for a file the test makes once the head is back, so a
# slow restart on a loaded machine cannot outlast it)
short=$("$CORRAL" run --detach -- sh -c "while [ ! -e '$TDATA/go' ]; do sleep 0.05; done")
spid=$(running_pids "$short" 1)
WPIDS="$WPIDS $spid"
kill_head
kill -KILL $pids
for p in $pids; do for _ in $(seq 40); do gone "$p" && break; sleep 0.05; done; done
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "restart 2: $out"; exit 1; }
js=$(status "$id2")
[ "$(jq -r .state <<<"$js")" = FAILED ] && jq -r .reason <<<"$js" | grep -q "lost in a head restart" &&
    [ "$(jq -r '[.workers[].state] | join(",")' <<<"$js")" = LOST,LOST ] &&
    ok "workers gone while the head was down: FAILED, lost in a head restart" || fail "lost: $js"
"$CORRAL" events | grep -q "worker 0 lost: its process is gone" && ok "event: worker 0 lost" ||
    fail "events: $("$CORRAL" events | tail -5)"
[ "$("$CORRAL" job list --json | jq length)" -eq 5 ] && ok "all five jobs still listed" ||
    fail "job list: $("$CORRAL" job list)"
touch "$TDATA/go"
wait_final "$short"
js=$(status "$short")
[ "$(jq -r .state <<<"$js")" = FAILED ] && jq -r .reason <<<"$js" | grep -q "exit codes unknown" &&
    jq -r '.workers[0].reason' <<<"$js" | grep -q "code unknown: adopted after a head restart" &&
    ok "an adopted worker that ends: FAILED, exit code unknown" || fail "adopted end: $js"
id3=$("$CORRAL" run --detach -- true)
[ "$id3" -gt "$short" ] && [ "$short" -gt "$id2" ] && [ "$id2" -gt "$id" ] && ok "job ids keep increasing ($id, $id2, $id3)" ||
    fail "ids $id $id2 $id3"
wait_final "$id3"
[ "$(status "$id3" | jq -r .state)" = SUCCEEDED ] && ok "a new job runs after recovery" ||
    fail "new job: $(status "$id3")"

# corral stop of a head with adopted workers stops them too; the next
# head then starts a new session
id4=$("$CORRAL" run --detach -- sleep 30)
p4=$(running_pids "$id4" 1)
WPIDS="$WPIDS $p4"
kill_head
"$CORRAL" start --head --hw-spec "$SPEC" >/dev/null 2>&1 || fail "restart 3"
[ "$(status "$id4" | jq -r '.workers[0].pid')" = "$p4" ] || fail "not adopted: $(status "$id4")"
"$CORRAL" stop >/dev/null || fail "stop"
gone "$p4" && ok "corral stop ends the adopted worker" || fail "adopted worker $p4 outlived the head"
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || fail "start after stop: $out"
[ "$(readlink "$CORRAL_HOME/session_latest")" != "$S1" ] && [ "$("$CORRAL" job list --json | jq length)" -eq 0 ] &&
    ok "after a clean stop: a new session" || fail "after stop: $(readlink "$CORRAL_HOME/session_latest")"
"$CORRAL" stop >/dev/null || fail "stop 2"

finish
