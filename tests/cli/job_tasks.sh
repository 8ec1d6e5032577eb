#!/bin/bash
# A Python driver run as a job owns its tasks and actors (issue 15 "Jobs",
# issue 12 "What a worker can do"; docs/actors.md "Jobs"): submitted with
# corral job submit, it holds only its job credential, and with it leases
# {"TPU": 1} workers (four tasks that wait for each other: four distinct
# chips of the simulated v6e host) and creates a named actor; its task
# leases and its actor are children of its job, listed by corral job
# status; when its job is stopped, every child still running is stopped
# with it (job_token.sh: what such a credential may not see). Skipped (77)
# without /usr/bin/python3's numpy or cloudpickle.
set -u
PY=/usr/bin/python3
"$PY" -c 'import numpy, cloudpickle' 2>/dev/null ||
    { echo "skip: /usr/bin/python3 lacks numpy or cloudpickle (scripts/deps.sh installs them)"; exit 77; }
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" job_tasks
[ -e "$CORRAL_BUILD_DIR/python/corral/_core.abi3.so" ] || { fail "corral._core was not built"; finish; }
"$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/tpu-v6e-4x4-w0.yaml" >/dev/null || { fail "start"; exit 1; }
export PYTHONPATH=$CORRAL_SOURCE_DIR/python CORRAL_TASK_IDLE_TIMEOUT=30
py_core_env
M=$TDATA/meet
mkdir "$M"
cat >"$TDATA/driver.py" <<'PYEOF'
import os, sys, time
import corral
corral.init()
meet = sys.argv[1]

@corral.remote(resources={"TPU": 1})
def chip():
    open(os.path.join(meet, str(os.getpid())), "w").close()
    end = time.monotonic() + 60
    while len(os.listdir(meet)) < 4 and time.monotonic() < end:
        time.sleep(0.02)
    return os.environ["TPU_VISIBLE_CHIPS"]

@corral.remote
class Counter:
    def __init__(self):
        self.n = 0
    def add(self, k):
        self.n += k
        return self.n

print("chips", " ".join(sorted(corral.get([chip.remote() for _ in range(4)], timeout=120))), flush=True)
c = Counter.options(name="jt-counter", lifetime="detached").remote()
print("counter", corral.get(c.add.remote(3), timeout=60), flush=True)
print("ready", flush=True)
time.sleep(120)
PYEOF
env "${PY_ENV[@]}" "$CORRAL" job submit -- "$PY" "$TDATA/driver.py" "$M" >"$CORRAL_HOME/out" 2>&1 &
sub=$!
WPIDS="$WPIDS $sub"
for _ in $(seq 1200); do
    grep -q '^ready' "$CORRAL_HOME/out" && break
    kill -0 $sub 2>/dev/null || break
    sleep 0.1
done
id=$(sed -n 's/.*job \([0-9]*\) submitted.*/\1/p' "$CORRAL_HOME/out")
grep -q '^chips 0 1 2 3$' "$CORRAL_HOME/out" && ok "4 tasks of {\"TPU\": 1} from a driver job: chips 0 1 2 3" ||
    fail "chips: $(cat "$CORRAL_HOME/out")"
grep -q '^counter 3$' "$CORRAL_HOME/out" && ok "its actor answers" || fail "actor: $(cat "$CORRAL_HOME/out")"

kids=$("$CORRAL" job list --json | jq -r --arg p "$id" '.[] | select(.parent_job == $p) | .job_id')
nk=$(wc -w <<<"$kids")
actor=$("$CORRAL" job list --json | jq -r --arg p "$id" '.[] | select(.parent_job == $p and .name == "actor:default/jt-counter") | .job_id')
[ "$nk" -ge 5 ] && [ -n "$actor" ] && ok "its 4+ task leases and its actor are children of job $id" ||
    fail "children of $id: [$kids] $("$CORRAL" job list)"
st=$("$CORRAL" job status "$id")
grep -q "tasks and actors (the workers it leased" <<<"$st" && grep -Eq "job $actor +RUNNING +actor:default/jt-counter" <<<"$st" &&
    ok "corral job status $id lists them" || fail "job status: $st"

"$CORRAL" job stop "$id" >/dev/null
left=
for _ in $(seq 300); do
    left=
    for k in $kids; do
        case $(status "$k" | jq -r .state) in SUCCEEDED | FAILED | STOPPED) ;; *) left="$left $k" ;; esac
    done
    [ -z "$left" ] && break
    sleep 0.1
done
[ -z "$left" ] && [ "$(status "$actor" | jq -r .state)" = STOPPED ] &&
    ok "job $id stopped: its children stopped, the detached actor too" || fail "children left running:$left"
finish
