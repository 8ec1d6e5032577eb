#!/bin/bash
# The runtime end to end on one machine: a real head (corrald) on a
# simulated 8-GPU node, real workers, the CLI on libcorral.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" runtime
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml

# an unwritable session directory is reported at start
out=$(CORRAL_HOME=/proc/corral-nope "$CORRAL" start --head --hw-spec "$SPEC" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "cannot create" <<<"$out" && ok "unwritable CORRAL_HOME refused at start" ||
    fail "unwritable CORRAL_HOME: rc=$rc: $out"

# usage errors exit 2 with the usage line
out=$("$CORRAL" run --gpus 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "^usage: corral run" <<<"$out" && ok "usage error exits 2" || fail "usage: rc=$rc $out"
out=$("$CORRAL" job frobnicate 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "^usage: corral job" <<<"$out" && ok "job usage error exits 2" || fail "job usage: rc=$rc $out"

# pins corral run's argument checks (cli/run_cmd.c): a count of 0 and
# GPU counts given twice are usage errors that name the problem
out=$("$CORRAL" run --gpus 0 -- true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "expected a count from 1 to 4096, got '0'" <<<"$out" && ok "--gpus 0: usage error" ||
    fail "--gpus 0: rc=$rc $out"
out=$("$CORRAL" run --gpus 1 --resources GPU=2,CPU=1 -- true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "\-\-gpus and a GPU in --resources: give one of them" <<<"$out" &&
    ok "--gpus and a GPU in --resources: usage error" || fail "GPU twice: rc=$rc $out"

# no head yet: a clear failure
out=$("$CORRAL" status 2>&1); rc=$?
[ $rc -eq 1 ] && ok "status without a head fails" || fail "status without head: rc=$rc $out"

out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "head started" <<<"$out" && ok "start" || { fail "start: rc=$rc $out"; exit 1; }
S=$CORRAL_HOME/session_latest
for f in token state.db corrald.sock logs; do [ -e "$S/$f" ] || fail "session has no $f"; done
[ "$(stat -c %a "$S/token")" = 600 ] && ok "token is 0600" || fail "token mode $(stat -c %a "$S/token")"
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "already running" <<<"$out" && ok "second start refused" || fail "second start: rc=$rc $out"

# status shows the 8 GPUs, all free
out=$("$CORRAL" status --json); rc=$?
gpus=$(jq -r '.nodes[0].resources.GPU.total' <<<"$out"); free=$(jq -r '.resources.GPU.free' <<<"$out")
[ $rc -eq 0 ] && [ "$gpus" = 8 ] && [ "$free" = 8 ] && ok "status: 8 GPUs, 8 free" || fail "status: rc=$rc $out"
"$CORRAL" status | grep -Eq "^ +GPU +8 +0 +8$" && ok "status table" || fail "status table: $("$CORRAL" status)"

# an 8-worker gang, one GPU each: each sees a distinct GPU
out=$("$CORRAL" run --gpus 1 --workers 8 --env GREETING=hi -- \
      sh -c 'echo "idx=$CORRAL_WORKER_INDEX cvd=$CUDA_VISIBLE_DEVICES g=$GREETING job=$CORRAL_JOB_ID"'); rc=$?
[ $rc -eq 0 ] || fail "gang: rc=$rc"
n=$(grep -c '^\[[0-7]\] idx=[0-7] cvd=GPU-[0-9a-f-]* g=hi job=[0-9]' <<<"$out")
distinct=$(grep -o 'cvd=[^ ]*' <<<"$out" | sort -u | wc -l)
[ "$n" = 8 ] && [ "$distinct" = 8 ] && ok "8 workers, 8 distinct GPUs" || fail "gang output: $out"
# each prefix matches the worker's own index
bad=$(grep -v '^\[\([0-7]\)\] idx=\1 ' <<<"$out" | grep -c .)
[ "$bad" = 0 ] && ok "output prefixed by worker" || fail "prefixes: $out"
# the GPUs it used are free again
free=$("$CORRAL" status --json | jq -r '.resources.GPU.free')
[ "$free" = 8 ] && ok "GPUs released" || fail "GPUs free after the gang: $free"

# a failing command's exit code propagates
"$CORRAL" run -- sh -c 'echo out; echo err >&2; exit 7' >"$CORRAL_HOME/o" 2>"$CORRAL_HOME/e"; rc=$?
[ $rc -eq 7 ] && grep -qx out "$CORRAL_HOME/o" && grep -qx err "$CORRAL_HOME/e" &&
    ok "exit code 7 propagates, output and error output shown" || fail "exit 7: rc=$rc $(cat "$CORRAL_HOME"/o "$CORRAL_HOME"/e)"

# a command that does not exist fails the job with the exec message
out=$("$CORRAL" run -- /no/such/command 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "exec failed: No such file or directory" <<<"$out" &&
    ok "missing command: exec failed" || fail "missing command: rc=$rc $out"

# an impossible request is refused with the scheduler's reason
out=$("$CORRAL" run --gpus 9 -- true 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qi "GPU" <<<"$out" && grep -q "cannot place" <<<"$out" &&
    ok "--gpus 9 refused: $out" || fail "--gpus 9: rc=$rc $out"
out=$("$CORRAL" run --resources 'FPGA=1' -- true 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "no node has resource FPGA" <<<"$out" && ok "unknown resource refused" ||
    fail "FPGA: rc=$rc $out"

# a detached job, stopped: SIGTERM reaches the worker's whole group
id=$("$CORRAL" run --detach --gpus 2 -- sh -c 'sleep 30 & sleep 30'); rc=$?
[ $rc -eq 0 ] && [ -n "$id" ] || fail "detach: rc=$rc $id"
for _ in $(seq 50); do
    st=$("$CORRAL" job status "$id" --json | jq -r .state); [ "$st" = RUNNING ] && break; sleep 0.1
done
used=$("$CORRAL" status --json | jq -r '.resources.GPU.used')
[ "$st" = RUNNING ] && [ "$used" = 2 ] && ok "detached job running on 2 GPUs" || fail "detached: $st used=$used"
pid=$("$CORRAL" job status "$id" --json | jq -r '.workers[0].pid')
out=$("$CORRAL" job stop "$id" --grace 2000); rc=$?
[ $rc -eq 0 ] && grep -q STOPPED <<<"$out" && ok "job stop" || fail "job stop: rc=$rc $out"
sleep 0.2
# a live (not zombie) process in process group $1?
group_alive() {
    local f st
    for f in /proc/[0-9]*/stat; do
        st=$(sed 's/.*) //' "$f" 2>/dev/null) || continue
        set -- "$1" $st
        [ "${4:-}" = "$1" ] && [ "$2" != Z ] && return 0
    done
    return 1
}
! group_alive "$pid" && ok "stopped job left no process" || fail "group $pid still has processes"

# SIGTERM (or Ctrl-C) to a waiting corral run stops its job
"$CORRAL" run --gpus 1 -- sleep 30 >/dev/null 2>&1 &
rpid=$!
for _ in $(seq 50); do
    id=$("$CORRAL" job list --json | jq -r 'map(select(.state == "RUNNING")) | .[0].job_id // empty')
    [ -n "$id" ] && break; sleep 0.1
done
kill -TERM $rpid; wait $rpid; rc=$?
st=$("$CORRAL" job status "$id" --json | jq -r .state)
[ $rc -eq 143 ] && [ "$st" = STOPPED ] && ok "corral run stops its job on SIGTERM" || fail "run SIGTERM: rc=$rc job $id $st"

# the output of a detached job, afterwards
id=$("$CORRAL" run --detach --workers 2 -- sh -c 'echo "hello from $CORRAL_WORKER_INDEX"; echo oops >&2')
for _ in $(seq 50); do
    [ "$("$CORRAL" job status "$id" --json | jq -r .state)" = SUCCEEDED ] && break; sleep 0.1
done
out=$("$CORRAL" job logs "$id" --worker 1 2>/dev/null)
all=$("$CORRAL" job logs "$id" 2>&1)
[ "$out" = "hello from 1" ] && [ "$(grep -c '^\[[01]\] hello from [01]$' <<<"$all")" = 2 ] &&
    [ "$(grep -c '^\[[01]\] oops$' <<<"$all")" = 2 ] &&
    ok "job logs" || fail "job logs: '$out' / '$all'"

# a job that fits but not now waits, then runs when the GPUs come back
big=$("$CORRAL" run --detach --gpus 4 --workers 2 -- sleep 30)
small=$("$CORRAL" run --detach --gpus 1 -- sh -c 'echo $CUDA_VISIBLE_DEVICES')
st=$("$CORRAL" job status "$small" --json | jq -r .state)
pend=$("$CORRAL" status --json | jq -r .pending_jobs)
[ "$st" = PENDING ] && [ "$pend" = 1 ] && ok "a job waits while the GPUs are taken" || fail "pending: $st $pend"
"$CORRAL" job stop "$big" --grace 1000 >/dev/null
for _ in $(seq 50); do
    st=$("$CORRAL" job status "$small" --json | jq -r .state); [ "$st" = SUCCEEDED ] && break; sleep 0.1
done
[ "$st" = SUCCEEDED ] && ok "the waiting job ran once they were released" || fail "pending job ended $st"

# a program on libcorral: a 4-worker gang of 2 GPUs each
ex=${CORRAL_BUILD_DIR:-$(dirname "$CORRAL")}/examples/libcorral_gang
out=$("$ex" 4 GPU=2); rc=$?
devs=$(grep -c '^worker [0-3] devices \[[0-7],[0-7]\] EXITED$' <<<"$out")
ids=$(grep -o 'devices=[^ ]*' <<<"$out" | tr ',' '\n' | sed 's/devices=//' | sort -u | wc -l)
[ $rc -eq 0 ] && grep -q '^job [0-9]* SUCCEEDED exit 0$' <<<"$out" && [ "$devs" = 4 ] && [ "$ids" = 8 ] &&
    ok "libcorral example: 4 workers, 8 distinct GPUs" || fail "libcorral example: rc=$rc $out"

# listings and events
n=$("$CORRAL" job list --json | jq length)
[ "$n" = 9 ] && ok "job list: 9 jobs" || fail "job list has $n jobs: $("$CORRAL" job list)"
"$CORRAL" job list | grep -q "FAILED" || fail "job list shows no FAILED job"
ev=$("$CORRAL" events --json)
for k in submitted placed started exited infeasible finished stopping; do
    jq_true 'map(select(.kind == $k)) | length > 0' --arg k "$k" <<<"$ev" || fail "no $k event"
done
ok "events recorded"

# a wrong token is refused
tok=$CORRAL_HOME/bad-token
printf '%064d\n' 0 >"$tok"; chmod 600 "$tok"
out=$(CORRAL_TOKEN_FILE=$tok "$CORRAL" status 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "refused the token" <<<"$out" && ok "wrong token refused" || fail "wrong token: rc=$rc $out"
# the TCP listener answers with the right token
addr=$(cat "$S/address")
CORRAL_ADDRESS=$addr "$CORRAL" status >/dev/null && ok "status over TCP $addr" || fail "TCP $addr"

# stop: the head goes away, with its workers
# (gone: no process, or a zombie nobody reaps: the head was orphaned)
id=$("$CORRAL" run --detach -- sleep 30)
for _ in $(seq 50); do
    wpid=$("$CORRAL" job status "$id" --json | jq -r '.workers[0].pid'); [ "$wpid" -gt 0 ] && break; sleep 0.1
done
hpid=$(cat "$S/corrald.pid")
out=$("$CORRAL" stop 2>&1); rc=$?
[ $rc -eq 0 ] && gone "$hpid" && ok "stop" || fail "stop: rc=$rc $out"
gone "$wpid" && ok "stop ended the running worker" || fail "worker $wpid outlived the head"
out=$("$CORRAL" status 2>&1); rc=$?
[ $rc -eq 1 ] && ok "no head after stop" || fail "status after stop: rc=$rc $out"

# what the head recorded in its state database
db=$S/state.db
q() { sqlite3 "$db" "$1" 2>&1; }
[ "$(q "select state from jobs where id = 1")" = SUCCEEDED ] &&
    [ "$(q "select count(distinct devices) from workers where job_id = 1 and state = 'EXITED' and exit_code = 0 and start_time > 0")" = 8 ] &&
    ok "state.db: the gang, its 8 GPUs, exit codes" || fail "state.db jobs: $(q 'select * from jobs') $(q 'select * from workers')"
[ "$(q "select count(*) from jobs where state = 'FAILED' and reason like '%exec failed: No such file or directory%'")" = 1 ] &&
    [ "$(q "select count(*) from events where kind = 'infeasible'")" -ge 1 ] &&
    ok "state.db: the failed job's reason, events" || fail "state.db: $(q 'select id, state, reason from jobs')"

# SIGTERM to the head: it stops its workers and exits cleanly
"$CORRAL" start --head --hw-spec "$SPEC" >/dev/null || fail "second start"
id=$("$CORRAL" run --detach --gpus 1 -- sleep 30)
for _ in $(seq 50); do
    wpid=$("$CORRAL" job status "$id" --json | jq -r '.workers[0].pid'); [ "$wpid" -gt 0 ] && break; sleep 0.1
done
hpid=$(cat "$S/corrald.pid")
kill -TERM "$hpid"
for _ in $(seq 50); do gone "$hpid" && break; sleep 0.1; done
gone "$hpid" && gone "$wpid" && ok "SIGTERM: head and worker gone" || fail "SIGTERM: head $hpid or worker $wpid left"
out=$("$CORRAL" status 2>&1); rc=$?
[ $rc -eq 1 ] && ok "no head after SIGTERM" || fail "status after stop: rc=$rc $out"

finish
