#!/bin/bash
# Retention of a remote agent's own output files (issue 12; docs/workers.md
# "Output files"): the head removes a finished job's record and its copy
# of the output (head/retention.c); the agent that ran the job's workers
# removes its files of them by the same bounds, --keep-finished-for and
# --keep-finished-jobs (counted in workers), given to the agent. Files an
# earlier agent process left are found when it starts again; a running
# worker's files are never removed. Each step waits for a state.
set -u
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cluster-agent-retention
head_up "$SPECS/cpu-only.yaml" --keep-finished-for 3s
agent_up far "$SPECS/cpu-only.yaml" 127.0.0.2 --keep-finished-for 3s
agent_up near "$SPECS/cpu-only.yaml" 127.0.0.3 --keep-finished-jobs 2 --keep-finished-for 1h
wait_node far 10 ALIVE && wait_node near 10 ALIVE || fail "agents not ALIVE: $(node_state far) $(node_state near)"
FAR=$CORRAL_HOME/agent_far/logs NEAR=$CORRAL_HOME/agent_near/logs

# by age: the head forgets the job, the agent its files
out=$("$CORRAL" run --label-selector corral.io/node-id=far -- sh -c 'echo kept for a while') ||
    fail "run on far"
id=$("$CORRAL" job list --json | jq -r '.[-1].job_id')
[ "$out" = "kept for a while" ] && [ -s "$FAR/job$id-w0.out" ] &&
    ok "job $id ran on far; its output file is there" || fail "job $id: '$out', $(ls "$FAR")"
long=$("$CORRAL" run --detach --label-selector corral.io/node-id=far -- \
    sh -c 'echo still running; sleep 600') || fail "long job"
wait_started "$long" 20 || fail "job $long did not start"
wait_until "! \"\$CORRAL\" job status $id >/dev/null 2>&1" 60 &&
    ok "the head removed job $id after 3 s" || fail "job $id still on the head"
wait_until "[ ! -e $FAR/job$id-w0.out ] && [ ! -e $FAR/job$id-w0.err ]" 60 &&
    ok "agent far removed its files of job $id" || fail "far still has: $(ls "$FAR" | tr "\n" " ")"
[ -s "$FAR/job$long-w0.out" ] && ok "a running worker's files stay: $(cat "$FAR/job$long-w0.out")" ||
    fail "running job $long lost its files: $(ls "$FAR")"
"$CORRAL" job stop "$long" >/dev/null || fail "stop $long"

# by count: near keeps the files of its 2 newest finished workers
ids=""
for i in 1 2 3; do
    "$CORRAL" run --label-selector corral.io/node-id=near -- sh -c "echo run $i" >/dev/null ||
        fail "run $i on near"
    ids+=" $("$CORRAL" job list --json | jq -r '.[-1].job_id')"
done
set -- $ids
wait_until "[ ! -e $NEAR/job$1-w0.out ]" 30 && [ -s "$NEAR/job$2-w0.out" ] && [ -s "$NEAR/job$3-w0.out" ] &&
    ok "near kept the files of jobs $2 and $3, removed those of job $1" ||
    fail "near's files: $(ls "$NEAR" | tr "\n" " ")"

# an agent started again finds what its predecessor left, and bounds it
kill -TERM "$(agent_pid near)"
wait_node near 30 DEAD || fail "near did not go: $(node_state near)"
agent_up near "$SPECS/cpu-only.yaml" 127.0.0.3 --keep-finished-jobs 1 --keep-finished-for 1h
wait_until "[ ! -e $NEAR/job$2-w0.out ]" 30 && [ -s "$NEAR/job$3-w0.out" ] &&
    ok "near started again: the files of job $2 removed, job $3's kept" ||
    fail "near's files after its restart: $(ls "$NEAR")"
finish
