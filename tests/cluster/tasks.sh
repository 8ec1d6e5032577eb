#!/usr/bin/env bash
# corral's task and actor runtime (issue 15, docs/actors.md) on a simulated
# TPU v6e 4x4 slice: the head's node is slice worker 0, three agents the
# others. python/tests/cluster_tasks.py drives it with real leased worker
# processes: tasks, refs, nested tasks, {"TPU": 1} on one chip each,
# retries after kill -9, actors (order, restart, max_task_retries, named
# from another driver, kill, threads, async), put/get of 100 MB through
# shared memory with the store's accounting back to zero, OwnerDiedError,
# placement groups, SlicePlacementGroup with one actor per chip, and last
# an agent's death with its actor restarted on the other node. Then: a
# driver's leased workers end with it. Skipped (77) without
# /usr/bin/python3's numpy or cloudpickle, or without the extension.
PY=/usr/bin/python3
"$PY" -c 'import numpy, cloudpickle' 2>/dev/null ||
    { echo "skip: /usr/bin/python3 lacks numpy or cloudpickle (scripts/deps.sh installs them)"; exit 77; }
[ -e "$CORRAL_BUILD_DIR/python/corral/_core.abi3.so" ] ||
    { echo "FAIL: $CORRAL_BUILD_DIR/python/corral/_core.abi3.so was not built"; exit 1; }
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" ctasks
trap cluster_cleanup EXIT
head_up "$SPECS/tpu-v6e-4x4-w0.yaml" 2>/dev/null
for w in 1 2 3; do agent_up "v6e-s1-w$w" "$SPECS/tpu-v6e-4x4-w$w.yaml" "127.0.0.$((20 + w))" || exit 1; done
for w in 1 2 3; do wait_node "v6e-s1-w$w" 10 ALIVE || fail "node v6e-s1-w$w did not come up"; done
export PYTHONPATH=$CORRAL_SOURCE_DIR/python CORRAL_TASK_IDLE_TIMEOUT=2
export CORRAL_TEST_AGENTS="v6e-s1-w1=$(agent_pid v6e-s1-w1) v6e-s1-w3=$(agent_pid v6e-s1-w3)"
py_core_env
out=$(cd /tmp && timeout 500 env "${PY_ENV[@]}" "$PY" "$CORRAL_SOURCE_DIR/python/tests/cluster_tasks.py" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "python tests: $(grep -E '^(Ran|OK)' <<<"$out" | tr '\n' ' ')" || fail "python tests: rc=$rc
$out"

# a driver's workers are its lease jobs: bound to its connection, they end
# when it does, even killed -9 in the middle of a task
PIDS=$TDATA/pids # where its workers write: not in CORRAL_HOME, hidden from them
mkdir "$PIDS"
cat >"$CORRAL_HOME/driver.py" <<'PYEOF'
import corral, os, sys, time
corral.init()
@corral.remote
def hold(d):
    open(os.path.join(d, str(os.getpid())), "w").close()
    time.sleep(60)
r = [hold.remote(sys.argv[1]) for _ in range(2)]
time.sleep(60)
PYEOF
env "${PY_ENV[@]}" "$PY" "$CORRAL_HOME/driver.py" "$PIDS" >"$CORRAL_HOME/driver.out" 2>&1 &
drv=$!
WPIDS="$WPIDS $drv"
for _ in $(seq 300); do
    [ "$(ls "$PIDS" | wc -l)" -ge 2 ] && break
    sleep 0.1
done
held=$(ls "$PIDS")
WPIDS="$WPIDS $held"
[ "$(wc -w <<<"$held")" -ge 2 ] && ok "the driver's 2 tasks run in leased workers" ||
    fail "the driver's tasks did not start: $(cat "$CORRAL_HOME/driver.out")"
kill -KILL $drv
left=
for _ in $(seq 100); do
    left=
    for p in $held; do gone "$p" || left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.1
done
[ -z "$left" ] && ok "its workers ended with the driver (kill -9)" || fail "workers left running:$left"

# corral list tasks|actors|objects: the owners' tables, found through the
# head's lease jobs and asked over INFO; corral job status JOB lists the
# lease jobs a job's worker made (here a task that submits a task)
cat >"$CORRAL_HOME/lister.py" <<'PYEOF'
import corral, numpy, os, sys, time
corral.init()
@corral.remote
def nap(s, after=None):
    time.sleep(s)
    return s
@corral.remote
def outer():
    return corral.get(nap.remote(120))
@corral.remote
class Keeper:
    def pid(self):
        return os.getpid()
k = Keeper.options(name="keeper").remote()
kp = corral.get(k.pid.remote())
big = corral.put(numpy.zeros(1 << 20))
running = nap.remote(120)
waiting = nap.remote(1, running)
nested = outer.remote()
print("ready", kp, flush=True)
time.sleep(120)
PYEOF
env "${PY_ENV[@]}" "$PY" "$CORRAL_HOME/lister.py" >"$CORRAL_HOME/lister.out" 2>&1 &
lister=$!
WPIDS="$WPIDS $lister"
for _ in $(seq 300); do grep -q '^ready' "$CORRAL_HOME/lister.out" && break; sleep 0.1; done
kpid=$(sed -n 's/^ready //p' "$CORRAL_HOME/lister.out")
out=$("$CORRAL" list actors 2>&1)
grep -Eq "^[0-9a-f]+A[0-9a-f]+ +ALIVE +Keeper +keeper +v6e-s1-w[0-3] +$kpid +0 +$lister@" <<<"$out" &&
    ok "list actors: Keeper, ALIVE, named keeper, its node and pid ($kpid), owner pid $lister" ||
    fail "list actors: $out ($(cat "$CORRAL_HOME/lister.out"))"
# the nested task's lease is made by outer's worker a moment after it runs
for _ in $(seq 100); do
    out=$("$CORRAL" list tasks --json 2>&1)
    [ "$(jq '[.[] | select(.function == "nap" and .state == "RUNNING")] | length' <<<"$out" 2>/dev/null)" = 2 ] && break
    sleep 0.2
done
[ "$(jq -r '[.[] | select(.owner.pid == '"$lister"')] | map(.function + ":" + .state) | sort | join(" ")' <<<"$out")" = \
    "nap:PENDING_ARGS_AVAIL nap:RUNNING outer:RUNNING" ] &&
    ok "list tasks: the driver's nap RUNNING, nap waiting on it PENDING_ARGS_AVAIL, outer RUNNING" ||
    fail "list tasks: $out"
opid=$(jq -r '.[] | select(.function == "outer") | .pid' <<<"$out")
ojob=$(jq -r '.[] | select(.function == "outer") | .job' <<<"$out")
[ "$(jq -r '.[] | select(.owner.pid == '"$opid"') | .function + ":" + .state' <<<"$out")" = "nap:RUNNING" ] &&
    ok "list tasks: the nested nap, owned by outer's worker (pid $opid)" || fail "nested: $out"
out=$("$CORRAL" list objects 2>&1)
grep -Eq " READY +8.0 MiB +shm +1 " <<<"$out" && grep -Eq " PENDING .* nap " <<<"$out" &&
    ok "list objects: the put array READY in shm (8.0 MiB), the tasks' results PENDING" || fail "list objects: $out"
out=$("$CORRAL" list tasks --limit 1 2>&1)
[ "$(grep -c ' RUNNING \| PENDING_' <<<"$out")" = 1 ] && grep -q "1 of [0-9]* tasks shown; --limit N shows more" <<<"$out" &&
    ok "list --limit 1: one row and how many were left out" || fail "limit: $out"
out=$("$CORRAL" job status "$ojob" --json 2>&1)
[ "$(jq -r '.leases | map(.name + ":" + .state) | join(" ")' <<<"$out")" = "task:CPU=1:RUNNING" ] &&
    [ "$(jq -r '.leases[0].owner_pid' <<<"$out")" = "$opid" ] &&
    ok "job status of outer's lease job lists the lease its worker made (nested)" || fail "job status leases: $out"
"$CORRAL" job status "$ojob" | grep -q "^  tasks and actors (the workers it leased" ||
    fail "job status text: $("$CORRAL" job status "$ojob")"
kill -KILL $lister
for _ in $(seq 100); do
    out=$("$CORRAL" list actors 2>&1)
    grep -q Keeper <<<"$out" || break
    sleep 0.1
done
! grep -q Keeper <<<"$out" && ok "after the driver's kill -9 its actor is no longer listed" || fail "after kill: $out"
finish
