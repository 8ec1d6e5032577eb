#!/bin/bash
# Never wait silently (issue 13): a gang the alive nodes could never hold is
# refused at submit with the scheduler's reason, or queued with --queue;
# run, train and pg create say what they wait for while they wait; job list
# shows STATE, AGE, NODES, REASON and no EXIT for jobs that have not ended.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" waiting
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml
"$CORRAL" start --head --hw-spec "$SPEC" >/dev/null || { fail "start"; exit 1; }

# more than the one 8-GPU node could ever hold: refused at once, the reason said
for args in "--gpus 1 --workers 9" "--gpus 8 --workers 2"; do
    out=$(timeout 20 "$CORRAL" run $args -- true 2>&1); rc=$?
    [ $rc -eq 1 ] && grep -q "never fit at once: the 1 alive node(s) that can take one hold at most" <<<"$out" &&
        ok "run $args refused at submit: $out" || fail "run $args: rc=$rc $out"
done
out=$(timeout 20 "$CORRAL" train --workers 9 -- true 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "never fit at once" <<<"$out" && ! grep -q "no answer" <<<"$out" &&
    ok "train --workers 9 refused at submit" || fail "train --workers 9: rc=$rc $out"
n=$("$CORRAL" job list --json | jq length)
[ "$n" = 0 ] && ok "nothing was queued" || fail "jobs queued: $("$CORRAL" job list)"
[ "$("$CORRAL" pg list --json | jq length)" = 0 ] && ok "no group left by train" ||
    fail "groups: $("$CORRAL" pg list)"

# --queue: accepted, PENDING with the reason
id=$("$CORRAL" run --gpus 1 --workers 9 --queue --detach -- true 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(status "$id" | jq -r .state)" = PENDING ] &&
    status "$id" | jq -r .reason | grep -q "^waiting for nodes to join: .*never fit" &&
    ok "--queue: PENDING, waiting for nodes" || fail "--queue: rc=$rc $id $(status "$id")"
line=$("$CORRAL" job list | awk -v id="$id" '$1 == id')
[[ "$line" =~ ^$id\ +PENDING\ +9\ +[0-9]+s\ +-\ +true\ +waiting\ for\ nodes ]] &&
    ok "job list: PENDING, no EXIT, AGE, no NODES, the REASON" || fail "job list: [$line] $("$CORRAL" job list)"
"$CORRAL" job stop "$id" >/dev/null

# the node busy: run, pg create and train say what they wait for
busy=$("$CORRAL" run --gpus 8 --detach -- sleep 60)
for _ in $(seq 100); do [ "$(status "$busy" | jq -r .state)" = RUNNING ] && break; sleep 0.1; done
line=$("$CORRAL" job list | awk -v id="$busy" '$1 == id')
[[ "$line" =~ ^$busy\ +RUNNING\ +1\ +[0-9]+s\ +dgx-h100-01\ +sleep\ *$ ]] && ok "job list: RUNNING with its node" ||
    fail "job list running: [$line]"
out=$(signal_when_pending INT "$CORRAL" run --gpus 1 -- true)
grep -q "^corral run: job [0-9]* pending, 1st in queue: no node has GPU=1 free now" <<<"$out" &&
    ok "run says why it waits" || fail "run while busy: $out"
out=$(signal_when_pending INT "$CORRAL" pg create g --bundles GPU=1)
grep -q "^corral pg create: group g pending, 1st in queue: .*GPU=1 free now" <<<"$out" && ! grep -q "no answer" <<<"$out" &&
    ok "pg create says why it waits" || fail "pg create while busy: $out"
out=$(signal_when_pending INT "$CORRAL" train --workers 1 -- true)
grep -q "^corral train: group train-.* pending, 1st in queue: .*GPU=1 free now" <<<"$out" &&
    grep -q "removing group" <<<"$out" && ok "train says why it waits, and removes its group when interrupted" ||
    fail "train while busy: $out"
[ "$("$CORRAL" pg list --json | jq length)" = 0 ] && ok "no group left" || fail "groups: $("$CORRAL" pg list)"
"$CORRAL" job stop "$busy" >/dev/null
finish
