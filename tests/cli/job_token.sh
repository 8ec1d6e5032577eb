#!/bin/bash
# What a worker can do (issue 12): a real head and real workers. A worker
# gets a job credential (CORRAL_JOB_TOKEN), not the cluster token, and the
# daemon's environment is not its: with it, corral inside the worker reads
# its own job and may cancel it, submits jobs that become its children
# (stopped when it ends) and reads those, lists only them, and is refused
# everything else (another job, the node list, corral stop); a restart makes the old attempt's
# credential worthless. docs/security.md.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" job_token
OUT=$(mktemp -d "/tmp/corral-job_token-out-XXXXXX")
trap 'cleanup; rm -rf "$OUT"' EXIT
# the daemon gets a variable of its own, and a token file the submitter does not pass
CORRAL_TEST_DAEMON_ONLY=secret out=$("$CORRAL" start --head 2>&1) || { fail "start: $out"; exit 1; }
S=$CORRAL_HOME/session_latest
wait_final() {
    for _ in $(seq 300); do
        case $(status "$1" | jq -r .state) in SUCCEEDED | FAILED | STOPPED) return ;; esac
        sleep 0.05
    done
}

# another job, which the worker below must not touch
other=$("$CORRAL" run --detach -- sleep 60)
[ -n "$other" ] || fail "the other job did not start"

# the worker: each command's exit status and words into $OUT
cat >"$OUT/worker.sh" <<'EOF'
C=$1 O=$2 other=$3
env >"$O/env"
try() { name=$1; shift; "$@" >"$O/$name.out" 2>&1; echo $? >"$O/$name.rc"; }
try own "$C" job status "$CORRAL_JOB_ID" --json
try logs "$C" job logs "$CORRAL_JOB_ID"
try other "$C" job status "$other"
try cancel_other "$C" job stop "$other"
try list "$C" job list
try nodes "$C" nodes
try stop "$C" stop
try submit "$C" run --detach -- sleep 60
try child "$C" job status "$(cat "$O/submit.out")" --json
echo "$CORRAL_JOB_TOKEN" >"$O/token"
EOF
export CORRAL_TOKEN_FILE=$S/token # the submitter's: not the worker's
id=$("$CORRAL" run --detach -- bash "$OUT/worker.sh" "$CORRAL" "$OUT" "$other")
unset CORRAL_TOKEN_FILE
wait_final "$id"
[ "$(status "$id" | jq -r .state)" = SUCCEEDED ] || fail "the worker job: $(status "$id")"

# its environment: the job credential, the head's address, no token file,
# nothing of the daemon's own
grep -q '^CORRAL_JOB_TOKEN=job:'"$id"':0:0:[0-9a-f]\{64\}$' "$OUT/env" &&
    ok "the worker has a job credential for job $id, worker 0, attempt 0" ||
    fail "no CORRAL_JOB_TOKEN: $(grep CORRAL_ "$OUT/env")"
tok=$(cat "$S/token")
! grep -q "$tok" "$OUT/env" && ok "the cluster token is nowhere in its environment" ||
    fail "the cluster token is in the worker's environment"
! grep -q '^CORRAL_TOKEN_FILE=' "$OUT/env" && ok "CORRAL_TOKEN_FILE of the submitter not passed on" ||
    fail "CORRAL_TOKEN_FILE reached the worker: $(grep CORRAL_TOKEN_FILE "$OUT/env")"
! grep -q '^CORRAL_TEST_DAEMON_ONLY=' "$OUT/env" && ok "nothing of the daemon's environment" ||
    fail "the daemon's environment reached the worker"
grep -q "^CORRAL_ADDRESS=$(readlink -f "$S")/corrald.sock$" "$OUT/env" &&
    ok "CORRAL_ADDRESS names the head's socket" || fail "CORRAL_ADDRESS: $(grep CORRAL_ADDRESS "$OUT/env")"

# what it may do
[ "$(cat "$OUT/own.rc")" = 0 ] && [ "$(jq -r .job_id "$OUT/own.out")" = "$id" ] &&
    ok "corral job status <own id> works in the worker" || fail "own status: $(cat "$OUT/own.out")"
[ "$(cat "$OUT/logs.rc")" = 0 ] && ok "corral job logs <own id> works" || fail "own logs: $(cat "$OUT/logs.out")"
refused() { # name, what the message must say
    local rc
    rc=$(cat "$OUT/$1.rc")
    if [ "$rc" != 0 ] && grep -q "$2" "$OUT/$1.out"; then
        ok "$1 refused: $(head -1 "$OUT/$1.out")"
    else
        fail "$1: rc=$rc $(cat "$OUT/$1.out")"
    fi
}
refused other "may not act on job $other"
refused cancel_other "may not act on job $other"
refused nodes "node_list needs the cluster token" # corral nodes pages through NodeList
refused stop "shutdown needs the cluster token"
# what it submits is a child of its job (a driver's task leases and actors:
# docs/actors.md "Jobs"), which it may read, which the listing shows beside
# its own job and nothing else, and which ends when its job ends
child=$(cat "$OUT/submit.out")
[ "$(cat "$OUT/submit.rc")" = 0 ] && [ "$(status "$child" | jq -r .parent_job)" = "$id" ] &&
    ok "a job it submits (job $child) is a child of job $id" || fail "submit: $(cat "$OUT/submit.out")"
[ "$(cat "$OUT/child.rc")" = 0 ] && [ "$(jq -r .job_id "$OUT/child.out")" = "$child" ] &&
    ok "it reads its child's status" || fail "child status: $(cat "$OUT/child.out")"
[ "$(cat "$OUT/list.rc")" = 0 ] && awk 'NR > 1 {print $1}' "$OUT/list.out" | grep -qx "$id" &&
    ! awk 'NR > 1 {print $1}' "$OUT/list.out" | grep -qx "$other" &&
    ok "its job list holds its own job, not the other" || fail "list: $(cat "$OUT/list.out")"
wait_final "$child"
[ "$(status "$child" | jq -r .state)" = STOPPED ] && ok "the child was stopped when job $id ended" ||
    fail "the child after its parent: $(status "$child" | jq -r '.state + " " + .reason')"
[ "$(status "$other" | jq -r .state)" = RUNNING ] && ok "the other job still runs" ||
    fail "the other job: $(status "$other" | jq -r .state)"
"$CORRAL" status >/dev/null 2>&1 && ok "the head still serves" || fail "the head is gone"

# a worker may cancel its own job
cat >"$OUT/self.sh" <<'EOF'
"$1" job stop "$CORRAL_JOB_ID" >"$2/self.out" 2>&1; echo $? >"$2/self.rc"; sleep 30
EOF
id2=$("$CORRAL" run --detach -- bash "$OUT/self.sh" "$CORRAL" "$OUT")
wait_final "$id2"
[ "$(status "$id2" | jq -r .state)" = STOPPED ] && ok "a worker cancels its own job" ||
    fail "own cancel: $(status "$id2" | jq -r .state) $(cat "$OUT/self.out" 2>/dev/null)"

# the credential of an ended worker, used from outside: refused
out=$(env -u CORRAL_TOKEN_FILE CORRAL_JOB_TOKEN="$(cat "$OUT/token")" CORRAL_ADDRESS="$S/corrald.sock" \
    "$CORRAL" job status "$id" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "no longer valid: worker 0 of job $id has ended" <<<"$out" &&
    ok "an ended worker's credential is refused" || fail "ended worker's credential: rc=$rc $out"
# a forged one (the right scope, another key): refused at the handshake
forged="job:$other:0:0:$(printf '%064d' 0)"
out=$(env CORRAL_JOB_TOKEN="$forged" CORRAL_ADDRESS="$S/corrald.sock" "$CORRAL" job status "$other" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "refused" <<<"$out" && ok "a forged job credential is refused" ||
    fail "forged credential: rc=$rc $out"
# a malformed one: said so
out=$(env CORRAL_JOB_TOKEN=nonsense CORRAL_ADDRESS="$S/corrald.sock" "$CORRAL" job status "$other" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "CORRAL_JOB_TOKEN is malformed" <<<"$out" && ok "a malformed CORRAL_JOB_TOKEN is said so" ||
    fail "malformed credential: rc=$rc $out"

# a restart makes a new credential; the old attempt's stops working while
# the new attempt runs
cat >"$OUT/restart.sh" <<'EOF'
C=$1 O=$2
if [ "$CORRAL_RESTART_COUNT" = 0 ]; then echo "$CORRAL_JOB_TOKEN" >"$O/old"; exit 3; fi
echo "$CORRAL_JOB_TOKEN" >"$O/new"
CORRAL_JOB_TOKEN=$(cat "$O/old") "$C" job status "$CORRAL_JOB_ID" >"$O/old.out" 2>&1; echo $? >"$O/old.rc"
"$C" job status "$CORRAL_JOB_ID" >"$O/new.out" 2>&1; echo $? >"$O/new.rc"
EOF
id3=$("$CORRAL" run --detach --max-restarts 1 --restart worker -- bash "$OUT/restart.sh" "$CORRAL" "$OUT")
wait_final "$id3"
[ "$(status "$id3" | jq -r .state)" = SUCCEEDED ] || fail "restart job: $(status "$id3")"
grep -q ":0:1:" "$OUT/new" && ! cmp -s "$OUT/old" "$OUT/new" && ok "the restarted worker has a new credential (attempt 1)" ||
    fail "credentials: old $(cat "$OUT/old") new $(cat "$OUT/new")"
[ "$(cat "$OUT/old.rc")" != 0 ] && grep -q "no longer valid: it is worker 0's attempt 0 of job $id3, and that worker is at attempt 1" "$OUT/old.out" &&
    ok "the old attempt's credential is refused" || fail "old attempt: $(cat "$OUT/old.out")"
[ "$(cat "$OUT/new.rc")" = 0 ] && ok "the new attempt's works" || fail "new attempt: $(cat "$OUT/new.out")"

# the token file itself: 0600 in a 0700 session, refused to anyone else
[ "$(stat -c %a "$S/token")" = 600 ] && [ "$(stat -c %a "$(readlink -f "$S")")" = 700 ] &&
    ok "the token file is 0600 in a 0700 session directory" ||
    fail "modes: token $(stat -c %a "$S/token"), session $(stat -c %a "$(readlink -f "$S")")"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    setpriv --reuid=4242 --regid=4242 --clear-groups cat "$S/token" >/dev/null 2>&1 &&
        fail "another user read the token file" || ok "another user cannot read the token file"
fi
"$CORRAL" job stop "$other" >/dev/null 2>&1
finish
