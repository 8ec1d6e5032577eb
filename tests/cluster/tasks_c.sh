#!/usr/bin/env bash
# Tasks and actors from C (include/corral/tasks.h, docs/actors.md) on a
# real head whose node is a simulated TPU v6e host (4 chips), with a
# second simulated host joined: examples/tasks/tasks_example is its own
# driver and its own leased workers.
#   demo:    functions, a 4 MiB object and an 8 MiB result through memfd,
#            errors (the function's, an unknown name, an infeasible shape),
#            an actor's state and call order, a taken name, kill
#   demo over TCP: the same with workers proving the HMAC challenge
#   crossnode: results of 100 MiB and 8 x 3 MiB made on the second node,
#            over TCP, fetched from the worker's object store in chunks
#   tpu:     4 tasks asking TPU=1 at once see 4 distinct chips
#   retry:   a task whose worker is killed -9 runs again (max_retries 1),
#            and fails with CR_EWORKERDIED without retries
#   restart: an actor killed -9 restarts with its constructor (max_restarts
#            1), then is dead after a second kill
#   refargs: refs as arguments (a pending result, a 2 MiB put) resolved
#            before the task runs; a failed one fails it
#   nested:  a task whose C worker submits tasks itself (corral_tasks_init
#            there, with its lease job's credential: its leases are children
#            of that job)
#   named/lookup: a named actor of one run found by name from a second run
#            (corral_actor_get) and called directly, on its Unix socket and
#            over TCP (a shared CORRAL_TASK_SECRET; another secret is
#            refused); an unknown name fails
#   cancel:  corral_cancel of a task queued in the owner, of an actor call
#            queued in the worker behind a running one (never runs), and of
#            a running one (runs to its end, its result dropped)
# Then: a driver's leased workers end with it (kill -9 of the driver).
EX=$CORRAL_BUILD_DIR/examples/tasks_example
[ -x "$EX" ] || { echo "FAIL: $EX was not built"; exit 1; }
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" ctasksc
trap cluster_cleanup EXIT
head_up "$SPECS/tpu-v6e-4x4-w0.yaml" 2>/dev/null
agent_up "v6e-s1-w1" "$SPECS/tpu-v6e-4x4-w1.yaml" 127.0.0.21 || exit 1
wait_node "v6e-s1-w1" 10 ALIVE || fail "node v6e-s1-w1 did not come up"
export CORRAL_LOG_LEVEL=error

run() { # NAME ARGS...: runs the example, every "ok:"/"FAIL:" line counted
    local name=$1 out rc
    shift
    out=$(cd /tmp && timeout 300 "$EX" "$@" 2>&1)
    rc=$?
    while IFS= read -r line; do
        case $line in
        ok:*) echo "ok: $name: ${line#ok: }" ;;
        FAIL:*) fail "$name: ${line#FAIL: }" ;;
        esac
    done <<<"$out"
    [ $rc -eq 0 ] || fail "$name: exit $rc
$out"
    RUN_OUT=$out
}

# the leases of an owner that ended (here, its named actor) are stopped by
# the head as its connection closes: wait for that before the next run
# names an actor the same (a live job of that name refuses it)
leases_gone() {
    for _ in $(seq 300); do
        [ "$("$CORRAL" job list --json | jq '[.[] | select(.state == "PENDING" or .state == "PLACING" or .state == "RUNNING")] | length')" = 0 ] &&
            return 0
        sleep 0.1
    done
    fail "leases still live: $("$CORRAL" job list)"
}
run demo demo
leases_gone
CORRAL_EXAMPLE_TCP=1 run demo-tcp demo
grep -q "owner listens at tcp:127.0.0.1:" <<<"$RUN_OUT" && ok "demo-tcp: the owner gave its workers TCP only" ||
    fail "demo-tcp: $RUN_OUT"
# large results made on the second node over TCP: kept in the worker's
# object store, fetched by the owner in 8 MiB chunks (FETCH)
CORRAL_EXAMPLE_TCP=1 run crossnode crossnode v6e-s1-w1

D=$(mktemp -d "$TDATA/chips-XXXXXX")
run tpu tpu "$D" 4
# NODE:CHIPS per task (chip ids are a host's own)
chips=$(grep '^chip ' <<<"$RUN_OUT" | awk '{print $2}' | sort)
[ "$(wc -l <<<"$chips")" = 4 ] && [ "$(sort -u <<<"$chips" | wc -l)" = 4 ] &&
    ok "4 TPU=1 tasks saw 4 distinct chips: $(echo $chips)" || fail "chips: $RUN_OUT"
[ -z "$(grep -v '^v6e-s1-w[01]:[0-3]$' <<<"$chips")" ] && ok "each saw one chip in TPU_VISIBLE_CHIPS" ||
    fail "TPU_VISIBLE_CHIPS: $chips"
jobs=$("$CORRAL" job list --json 2>/dev/null | jq -r '.[].name' | sort | uniq -c)
grep -q "task:TPU=1" <<<"$jobs" && ok "the leases are jobs named task:TPU=1" || fail "jobs: $jobs"

D=$(mktemp -d "$TDATA/retry-XXXXXX")
run retry retry "$D"
run restart restart
run refargs refargs
run nested nested
n=$("$CORRAL" job list --json | jq '[.[] | select(.name == "task:CPU=1" and (.parent_job // "") != "")] | length')
[ "$n" -ge 1 ] && ok "nested: the worker's leases are children of its lease job (its job credential)" ||
    fail "nested: no child lease: $("$CORRAL" job list --json | jq -c '.[] | {name, parent_job}')"
D=$(mktemp -d "$TDATA/cancel-XXXXXX")
run cancel cancel "$D"

# named actors from another process: one run of the example creates an
# actor named nc1 and keeps it; a second run finds it by name
# (corral_actor_get), calls it directly, and gets CR_ENOENT for a name no
# actor has; the owner then sees the other process's calls in its state
named_lookup() { # NAME TAG: the named/lookup pair (in this environment)
    leases_gone
    D=$(mktemp -d "$TDATA/named-XXXXXX")
    nown=$( (cd /tmp && exec timeout 300 "$EX" named "$1" "$D") >"$D/owner.out" 2>&1 & echo $!)
    WPIDS="$WPIDS $nown"
    for _ in $(seq 600); do
        [ -s "$D/ready" ] && break
        sleep 0.1
    done
    [ -s "$D/ready" ] || fail "$2: the actor did not come up: $(cat "$D/owner.out")"
    run "$2" lookup "$1"
    [ -n "$REFUSED" ] && CORRAL_TASK_SECRET=$REFUSED run "$2-refused" lookup-refused "$1"
    touch "$D/stop"
    for _ in $(seq 600); do
        gone "$nown" && break
        sleep 0.1
    done
    while IFS= read -r line; do
        case $line in
        ok:*) echo "ok: $2 owner: ${line#ok: }" ;;
        FAIL:*) fail "$2 owner: ${line#FAIL: }" ;;
        esac
    done <"$D/owner.out"
    grep -q "another process added: 1276" "$D/owner.out" || fail "$2: $(cat "$D/owner.out")"
}
REFUSED= named_lookup nc1 lookup
# over TCP (both drivers tcp_only, sharing CORRAL_TASK_SECRET): the caller
# asks the owner where the actor listens, both handshakes prove the secret;
# a third driver with another secret is refused
CORRAL_EXAMPLE_TCP=1 CORRAL_TASK_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') \
    REFUSED=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') named_lookup nc2 lookup-tcp

# a driver's workers are its lease jobs, bound to its connection: they end
# when it does, even killed -9 while a task runs. The driver holds a task
# that runs until killed (hold: its worker writes DIR/died by a rename,
# then sleeps); it once ran the retry scenario, which kills that worker
# itself and removes DIR/died, so the file could go between this loop's
# look and its read (a failure under load)
D=$(mktemp -d "$TDATA/bound-XXXXXX")
# (started from a subshell: not this shell's job, whose kill bash would report)
drv=$( (cd /tmp && exec "$EX" hold "$D") >"$CORRAL_HOME/driver.out" 2>&1 & echo $!)
WPIDS="$WPIDS $drv"
wpid=""
for _ in $(seq 900); do
    wpid=$(cat "$D/died" 2>/dev/null)
    [ -n "$wpid" ] && break
    sleep 0.1
done
[ -n "$wpid" ] && ok "the driver's task runs in worker $wpid" ||
    fail "the task did not start: $(cat "$CORRAL_HOME/driver.out"; "$CORRAL" job list)"
WPIDS="$WPIDS $wpid"
kill -KILL $drv
for _ in $(seq 100); do
    gone "$wpid" && break
    sleep 0.1
done
gone "$wpid" && ok "its worker ended with the driver (kill -9)" || fail "worker $wpid still runs"
finish
