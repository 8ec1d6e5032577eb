#!/bin/bash
# The queue as a person sees it (issue 13): run and pg create show their
# place in the queue while they wait; corral status names what waits and
# why, and gives every held resource to a job or a group; a pg create or a
# run that is interrupted, killed or cut off leaves nothing behind (unless
# --detach); pg list fits long names; job logs says which worker wrote a
# line; train says "rank"; resources take 64GiB and suggest GPU for gpu;
# corral stop --address stops the agents through the head, then the head.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" queueview
SPECS=$CORRAL_SOURCE_DIR/specs
out=$("$CORRAL" start --head --hw-spec "$SPECS/dgx-h100.yaml" --dashboard-port any 2>&1) || { fail "start: $out"; exit 1; }

# resource strings: 64GiB-style memory, a wrong case named, --gpus added to --resources
out=$("$CORRAL" run --resources CPU=1,memory=1GiB -- true 2>&1); rc=$?
[ $rc -eq 0 ] && ok "memory=1GiB is accepted" || fail "memory=1GiB: rc=$rc $out"
out=$("$CORRAL" run --resources memory=512MB -- true 2>&1); rc=$?
[ $rc -eq 0 ] && ok "memory=512MB is accepted" || fail "memory=512MB: rc=$rc $out"
out=$("$CORRAL" run --resources gpu=1 -- true 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "unknown resource 'gpu': did you mean GPU?" <<<"$out" &&
    ok "gpu=1: did you mean GPU?" || fail "gpu=1: rc=$rc $out"
out=$("$CORRAL" pg create lower --bundles 'Cpu=1' 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "did you mean CPU?" <<<"$out" && ok "pg create Cpu=1: did you mean CPU?" ||
    fail "Cpu=1: rc=$rc $out"
id=$("$CORRAL" run --gpus 2 --resources CPU=2 --detach -- sleep 0)
"$CORRAL" job stop "$id" >/dev/null 2>&1
n=$(status "$id" | jq '.workers[0].devices | split(",") | length')
[ "$n" = 2 ] && ok "--gpus 2 with --resources CPU=2: two GPUs per worker" || fail "--gpus + --resources: $(status "$id")"
"$CORRAL" run --help | grep -q "added to --resources" && ok "--help: --gpus combines with --resources" ||
    fail "run --help says nothing of --gpus with --resources"

# job logs: one prefix per worker's line, --no-prefix the output as written
id=$("$CORRAL" run --workers 2 --detach -- sh -c 'echo "hello from $CORRAL_WORKER_INDEX"')
wait_until '[ "$(status "$id" | jq -r .state)" = SUCCEEDED ]'
out=$("$CORRAL" job logs "$id")
grep -qx "\[0\] hello from 0" <<<"$out" && grep -qx "\[1\] hello from 1" <<<"$out" &&
    ok "job logs of 2 workers: [0] and [1] before their lines" || fail "job logs: $out"
out=$("$CORRAL" job logs "$id" --no-prefix)
grep -qx "hello from 0" <<<"$out" && grep -qx "hello from 1" <<<"$out" && ok "job logs --no-prefix" ||
    fail "job logs --no-prefix: $out"
out=$("$CORRAL" job logs "$id" --worker 1)
[ "$out" = "hello from 1" ] && ok "job logs --worker 1: no prefix" || fail "job logs --worker 1: $out"

# train: rank, not worker, in what it says of a failure
out=$("$CORRAL" train --workers 2 -- sh -c '[ "$RANK" = 1 ] && exit 3; exit 0' 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "^corral train: rank 1 " <<<"$out" && ! grep -q "worker [0-9]" <<<"$out" &&
    ok "train's failure report says rank" || fail "train: rc=$rc $out"

# the node busy: what waits shows its place in the queue
busy=$("$CORRAL" run --gpus 8 --detach -- sleep 120)
wait_until '[ "$(status "$busy" | jq -r .state)" = RUNNING ]'
p1=$("$CORRAL" run --gpus 1 --detach --name first -- true)
p2=$("$CORRAL" run --gpus 1 --detach --name second -- true)
[ "$(status "$p1" | jq .queue_position)" = 1 ] && [ "$(status "$p2" | jq .queue_position)" = 2 ] &&
    [ "$(status "$busy" | jq .queue_position)" = 0 ] && ok "job status: queue positions 1, 2, and 0 when running" ||
    fail "positions: $(status "$p1" | jq .queue_position) $(status "$p2" | jq .queue_position)"
out=$(signal_when_pending INT "$CORRAL" run --gpus 1 -- true)
grep -q "^corral run: job [0-9]* pending, 3rd in queue: no node has GPU=1 free now" <<<"$out" &&
    ok "run: pending, 3rd in queue" || fail "run while two wait: $out"
out=$(signal_when_pending INT "$CORRAL" pg create g --bundles GPU=1)
grep -q "^corral pg create: group g pending, 1st in queue: .*GPU=1 free now" <<<"$out" &&
    grep -q "interrupted: group g removed" <<<"$out" && ok "pg create: 1st in queue, removed on SIGINT" ||
    fail "pg create while busy: $out"
[ "$("$CORRAL" pg list --json | jq length)" = 0 ] && ! "$CORRAL" status | grep -q "group g " &&
    ok "no group left by the interrupted pg create, none in status" || fail "groups: $("$CORRAL" pg list)"
# corral train killed while it waits: the head removes its group (and its job)
"$CORRAL" train --workers 1 -- true >/dev/null 2>&1 &
pt=$!
WPIDS="$WPIDS $pt"
wait_until '"$CORRAL" pg list --json | jq_true "any(.[]; .name | startswith(\"train-\"))"' ||
    fail "train's group never queued"
kill -KILL $pt
wait_until '[ "$("$CORRAL" pg list --json | jq length)" = 0 ]' &&
    ok "train killed (SIGKILL) while waiting: the head removed its group" || fail "train's group left: $("$CORRAL" pg list)"

# status: what waits and why, what holds what
out=$("$CORRAL" status)
grep -q "^pending:" <<<"$out" && grep -q "^  job $p1 (first), 1st in queue: no node has GPU=1 free now" <<<"$out" &&
    grep -q "^  job $p2 (second), 2nd in queue: " <<<"$out" && ok "status names the pending jobs and why" ||
    fail "status pending: $out"
grep -q "^held:" <<<"$out" && grep -q "^  .*GPU=8.* by job $busy (sleep), RUNNING" <<<"$out" &&
    ok "status: GPU=8 held by the running job" || fail "status held: $out"
# a deep queue: the status lists the oldest 100 pending jobs and counts the
# rest, in the CLI, its JSON and the web API's summary
more=
for _ in $(seq 100); do more="$more $("$CORRAL" run --gpus 1 --detach -- true)"; done
out=$("$CORRAL" status)
[ "$(grep -c " in queue: " <<<"$out")" = 100 ] && grep -q "^  job $p1 (first), 1st in queue" <<<"$out" &&
    grep -q "^and 2 more job(s) and group(s) not listed here (the oldest 100 of each kind are): 'corral job list'" <<<"$out" &&
    ok "status with 102 pending: the oldest 100, and 2 more not listed" || fail "status, 102 pending: $(tail -3 <<<"$out")"
"$CORRAL" status --json | jq_true '.pending_jobs == 102 and .holders_not_listed == 2 and
    ([.holders[] | select(.state == "PENDING")] | length) == 100' &&
    ok "status --json: holders_not_listed 2" || fail "status --json: $("$CORRAL" status --json | jq -c '{pending_jobs, holders_not_listed}')"
if command -v curl >/dev/null; then
    L=$("$CORRAL" dashboard)
    B=${L%%\?*}
    curl -s -H "Authorization: Bearer $(tr -d '\n' <"$CORRAL_HOME/session_latest/token")" "${B%/}/api/v1/summary" |
        jq_true '.holders_not_listed == 2 and (.holders | length) == 101' &&
        ok "/api/v1/summary: 101 holders and holders_not_listed 2" || fail "/api/v1/summary: not bounded"
fi
# the dashboard's overview says so too, in Debian's headless chromium
CHROMIUM=${CORRAL_CHROMIUM:-/usr/bin/chromium}
NM=""
[ -x "$CHROMIUM" ] && NM=$("$CORRAL_SOURCE_DIR/scripts/node-web.sh" 2>/dev/null)
if [ -n "$NM" ]; then
    O=$(CORRAL_WEB_NODE_MODULES=$NM CORRAL_CHROMIUM=$CHROMIUM node "$CORRAL_SOURCE_DIR/tests/cli/lib/overview.mjs" \
        "$("$CORRAL" dashboard)" 2>&1)
    T=$(jq -r .pages.first.text <<<"$O" 2>/dev/null)
    [ "$(jq '.errors | length' <<<"$O" 2>/dev/null)" = 0 ] &&
        grep -qx "2 more job(s) and group(s) not listed (the oldest 100 of each kind are)" <<<"$T" &&
        [ "$(grep -c "PENDING" <<<"$T")" = 100 ] &&
        ok "the dashboard's overview: 100 pending jobs and 2 more not listed" ||
        fail "the dashboard's overview, 102 pending: $(jq -c .errors <<<"$O" 2>/dev/null || tail -3 <<<"$O") $(grep -c PENDING <<<"$T") $(tail -2 <<<"$T")"
else
    echo "note: no chromium or playwright-core: the dashboard's overview is not checked"
fi
for j in $busy $p1 $p2 $more; do "$CORRAL" job stop "$j" >/dev/null 2>&1; done

# a group that holds the node: shown as held; a pg create that gives up holds nothing
out=$(timeout 20 "$CORRAL" pg create g1 --bundles 'GPU=8' 2>&1) || fail "pg create g1: $out"
out=$("$CORRAL" status)
grep -q "^  GPU=8 by group g1 (pg[0-9]*), CREATED, 0 job(s) running in it" <<<"$out" &&
    ok "status: GPU=8 held by group g1, 0 jobs in it" || fail "status held by a group: $out"
"$CORRAL" status --json | jq_true '[.holders[] | select(.kind == "group")] | length == 1 and
    .[0].name == "g1" and .[0].held == "GPU=8" and .[0].jobs == 0 and .[0].state == "CREATED"' &&
    ok "status --json: holders" || fail "status --json holders: $("$CORRAL" status --json | jq -c .holders)"
jg=$(timeout 20 "$CORRAL" run --pg g1 --detach --name ingroup -- sleep 60)
wait_until '[ "$(status "$jg" | jq -r .state)" = RUNNING ]'
out=$("$CORRAL" status)
grep -q "^  GPU=8 by group g1 (pg[0-9]*), CREATED, 1 job(s) running in it" <<<"$out" &&
    grep -q "^    job $jg (ingroup), RUNNING, in it" <<<"$out" && ! grep -q "by job $jg" <<<"$out" &&
    ok "status: the job in g1 is shown in it, holding nothing of its own" || fail "status, a job in g1: $out"
"$CORRAL" job stop "$jg" >/dev/null
signal_when_pending TERM "$CORRAL" pg create g2 --bundles 'GPU=1' >/dev/null
names=$("$CORRAL" pg list --json | jq -r '[.[].name] | join(",")')
[ "$names" = g1 ] && ! "$CORRAL" status | grep -q "group.*g2" && ok "a pg create that timed out (SIGTERM) left nothing" ||
    fail "after the timeout: $names $("$CORRAL" status)"
# killed outright: the head sees its connection go and removes the group
"$CORRAL" pg create g3 --bundles 'GPU=1' >/dev/null 2>&1 &
pc=$!
WPIDS="$WPIDS $pc"
wait_until '"$CORRAL" pg list --json | jq_true "any(.[]; .name == \"g3\")"' || fail "g3 never queued"
kill -KILL $pc
wait_until '"$CORRAL" pg list --json | jq_true "all(.[]; .name != \"g3\")"' &&
    ok "pg create killed (SIGKILL): the head removed its group" || fail "g3 left: $("$CORRAL" pg list)"
# --detach: the group outlives an interrupted pg create
signal_when_pending INT "$CORRAL" pg create g4 --detach --bundles 'GPU=1' >/dev/null
"$CORRAL" pg list --json | jq_true 'any(.[]; .name == "g4" and .state == "PENDING")' &&
    ok "pg create --detach: the group stays PENDING" || fail "g4: $("$CORRAL" pg list)"
"$CORRAL" pg remove g4 >/dev/null
# a corral run killed while it waits: the head stops its job
"$CORRAL" run --gpus 1 --name orphan -- true >/dev/null 2>&1 &
pr=$!
WPIDS="$WPIDS $pr"
wait_until '"$CORRAL" job list --json | jq_true "any(.[]; .name == \"orphan\" and .state == \"PENDING\")"' ||
    fail "orphan never queued"
kill -KILL $pr
wait_until '"$CORRAL" job list --json | jq_true "any(.[]; .name == \"orphan\" and .state == \"STOPPED\")"' &&
    ok "run killed (SIGKILL) while pending: the head stopped its job" || fail "orphan: $("$CORRAL" job list)"

# pg list: columns as wide as the longest name
long=a-placement-group-with-a-rather-long-name
"$CORRAL" pg create $long --no-wait --bundles 'CPU=1' >/dev/null || fail "pg create $long"
out=$("$CORRAL" pg list)
hcol=$(head -1 <<<"$out" | grep -bo STATE | cut -d: -f1)
rcol=$(grep " $long " <<<"$out" | grep -bo "CREATED\|PENDING" | head -1 | cut -d: -f1)
[ -n "$hcol" ] && [ "$hcol" = "$rcol" ] && ok "pg list: STATE lined up under a long name (column $hcol)" ||
    fail "pg list columns: header $hcol row $rcol: $out"
"$CORRAL" pg remove $long >/dev/null
"$CORRAL" pg remove g1 >/dev/null
out=$("$CORRAL" status)
grep -q "^held: nothing" <<<"$out" && ok "status: nothing held once the groups are gone" || fail "status: $out"
"$CORRAL" events --help | grep -q "\-\-limit 0" && ok "events --help says what --limit 0 is" ||
    fail "events --help: $("$CORRAL" events --help)"
"$CORRAL" stop >/dev/null

# corral stop --address: the agents through the head, then the head; idempotent
out=$("$CORRAL" start --head --hw-spec "$SPECS/cpu-only.yaml" 2>&1) || { fail "start: $out"; exit 1; }
hpid=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
addr=$(sed -n 's/^  corral start --address \([^ ]*\).*$/\1/p' <<<"$out")
"$CORRAL" start --address "$addr" --hw-spec "$SPECS/dgx-h100.yaml" --node-id qa --node-ip 127.0.0.2 >/dev/null ||
    fail "agent qa"
apid=$(cat "$CORRAL_HOME/agent_qa/corrald.pid")
WPIDS="$WPIDS $apid"
id=$("$CORRAL" run --gpus 1 --label-selector corral.io/node-id=qa --detach -- sleep 60)
wait_until '[ "$(status "$id" | jq ".workers[0].pid")" -gt 0 ] 2>/dev/null'
wpid=$(status "$id" | jq '.workers[0].pid')
out=$("$CORRAL" stop --address "$addr" --keep-head 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "told 1 agent(s) of $addr to stop; the head keeps running" <<<"$out" &&
    ok "stop --address --keep-head: $out" || fail "stop --keep-head: rc=$rc $out"
wait_until "gone $apid" && wait_until "gone $wpid" && ok "the agent and its worker are gone" ||
    fail "agent $apid or worker $wpid still runs"
"$CORRAL" status >/dev/null && ok "the head keeps running" || fail "the head is gone"
out=$("$CORRAL" stop --address "$addr" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "head $addr stopped" <<<"$out" && wait_until "gone $hpid" &&
    ok "stop --address: the head stopped too" || fail "stop --address: rc=$rc $out"
out=$("$CORRAL" stop --address "$addr" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "nothing was running at $addr" <<<"$out" && ok "stop --address again: nothing was running" ||
    fail "stop --address again: rc=$rc $out"
finish
