#!/bin/bash
# Placement groups through the CLI (corral pg, corral run --pg) against a
# real head on a simulated 8-GPU node, as docs/protocol.md and
# docs/runtime.md describe them.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" pg
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml

# usage errors exit 2 with the usage line, no head needed
for args in "pg" "pg frobnicate" "pg create" "pg create g" "pg create --bundles GPU=1" \
    "pg create g --bundles ;" "pg create g --bundles GPU=x" "pg create g --bundles GPU=0" \
    "pg create g --bundles GPU=1 --strategy DIAGONAL" "pg create a b --bundles GPU=1" \
    "pg list extra" "pg remove" "pg remove a b" "pg remove --json g"; do
    out=$("$CORRAL" $args 2>&1); rc=$?
    [ $rc -eq 2 ] && grep -q "^usage: corral pg" <<<"$out" && ok "usage: corral $args exits 2" ||
        fail "usage: corral $args: rc=$rc $out"
done

out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "start: $out"; finish; }

out=$("$CORRAL" pg create g1 --bundles 'GPU=1,CPU=1;GPU=1' --json 2>&1); rc=$?
free_gpus() { "$CORRAL" status --json | jq -r '.resources.GPU.free'; }

# created (the CLI waits by default), each bundle on a device of its own
st=$(jq -r .state <<<"$out" 2>/dev/null)
nb=$(jq -r '.bundles | length' <<<"$out" 2>/dev/null)
devs=$(jq -r '[.bundles[].devices | length] | add' <<<"$out" 2>/dev/null)
distinct=$(jq -r '[.bundles[].devices[]] | unique | length' <<<"$out" 2>/dev/null)
placed=$(jq -r '[.bundles[] | select(.node_id != null and .node_id != "")] | length' <<<"$out" 2>/dev/null)
[ $rc -eq 0 ] && [ "$st" = CREATED ] && [ "$nb" = 2 ] && [ "$devs" = 2 ] && [ "$distinct" = 2 ] &&
    [ "$placed" = 2 ] && ok "pg create: CREATED, 2 bundles on 2 distinct GPUs" ||
    fail "pg create: rc=$rc $out"
id1=$(jq -r .pg_id <<<"$out" 2>/dev/null)
dev1=$(jq -r '.bundles[1].devices[0]' <<<"$out" 2>/dev/null)
[ "$(jq -r '.bundles[0].resources' <<<"$out" 2>/dev/null)" = "GPU=1,CPU=1" ] &&
    ok "pg create: bundle resources as given" || fail "pg create resources: $out"
[ "$(free_gpus)" = 6 ] && ok "the group holds its 2 GPUs" || fail "GPU free $(free_gpus), expected 6"

# listed, as JSON and as a table
out=$("$CORRAL" pg list --json); rc=$?
[ $rc -eq 0 ] && [ "$(jq -r '.[] | select(.name == "g1") | .state' <<<"$out")" = CREATED ] &&
    [ "$(jq -r '.[] | select(.name == "g1") | .pg_id' <<<"$out")" = "$id1" ] &&
    ok "pg list --json" || fail "pg list --json: rc=$rc $out"
"$CORRAL" pg list | grep -Eq "^$id1 +g1 +CREATED +PACK " && ok "pg list table" ||
    fail "pg list table: $("$CORRAL" pg list)"

# a job in the group, in bundle 1: on bundle 1's device
out=$("$CORRAL" run --pg g1 --bundle 1 -- sh -c 'echo "cvd=$CUDA_VISIBLE_DEVICES"' 2>&1); rc=$?
cvd1=$("$CORRAL" hw --spec "$SPEC" --isolate "$dev1" | sed -n 's/^CUDA_VISIBLE_DEVICES=//p')
[ $rc -eq 0 ] && [ -n "$cvd1" ] && grep -qx "cvd=$cvd1" <<<"$out" && ok "run --pg g1 --bundle 1 runs on its device" ||
    fail "run --pg --bundle 1: rc=$rc $out (bundle 1 device $dev1)"
out=$("$CORRAL" run --pg "$id1" -- true 2>&1); rc=$?
[ $rc -eq 0 ] && ok "run --pg by id, any bundle" || fail "run --pg id: rc=$rc $out"
out=$("$CORRAL" run --pg nosuch -- true 2>&1); rc=$?
[ $rc -eq 1 ] && ok "run --pg of no such group fails" || fail "run --pg nosuch: rc=$rc $out"

# a name is unique
out=$("$CORRAL" pg create g1 --bundles 'GPU=1' 2>&1); rc=$?
[ $rc -eq 1 ] && ok "a second g1 is refused" || fail "duplicate name: rc=$rc $out"

# what cannot fit is infeasible, said so, with exit 1
out=$("$CORRAL" pg create big --bundles 'GPU=9' --json 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qi "infeasible" <<<"$out" && ok "9 GPUs on an 8-GPU node: infeasible" ||
    fail "infeasible: rc=$rc $out"
out=$("$CORRAL" pg create apart --bundles 'GPU=1;GPU=1' --strategy STRICT_SPREAD 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qi "infeasible" <<<"$out" && ok "STRICT_SPREAD of 2 bundles on one node: infeasible" ||
    fail "strict spread: rc=$rc $out"

# --no-wait answers at once; the group is created soon after
out=$("$CORRAL" pg create g2 --bundles 'GPU=2' --strategy STRICT_PACK --no-wait --json 2>&1); rc=$?
st=$(jq -r .state <<<"$out" 2>/dev/null)
[ $rc -eq 0 ] && grep -Eq "^(PENDING|PREPARING|CREATED)$" <<<"$st" &&
    [ "$(jq -r .strategy <<<"$out")" = STRICT_PACK ] && ok "pg create --no-wait: $st" ||
    fail "no-wait: rc=$rc $out"
for _ in $(seq 100); do
    [ "$("$CORRAL" pg list --json | jq -r '.[] | select(.name == "g2") | .state')" = CREATED ] && break
    sleep 0.1
done
[ "$("$CORRAL" pg list --json | jq -r '.[] | select(.name == "g2") | .state')" = CREATED ] &&
    ok "g2 created" || fail "g2: $("$CORRAL" pg list --json)"

# removed by name and by id: the GPUs come back
out=$("$CORRAL" pg remove g1 2>&1); rc=$?
[ $rc -eq 0 ] && ok "pg remove by name" || fail "remove g1: rc=$rc $out"
id2=$("$CORRAL" pg list --json | jq -r '.[] | select(.name == "g2") | .pg_id')
out=$("$CORRAL" pg remove "$id2" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "pg remove by id" || fail "remove $id2: rc=$rc $out"
left=$("$CORRAL" pg list --json | jq -r '[.[] | select(.state != "REMOVED" and .state != "INFEASIBLE")] | length')
[ "$left" = 0 ] && ok "no group left" || fail "groups left: $("$CORRAL" pg list --json)"
for _ in $(seq 50); do [ "$(free_gpus)" = 8 ] && break; sleep 0.1; done
[ "$(free_gpus)" = 8 ] && ok "every GPU free again" || fail "GPU free $(free_gpus) after removal"
out=$("$CORRAL" pg remove nosuch 2>&1); rc=$?
[ $rc -eq 1 ] && ok "remove of no such group fails" || fail "remove nosuch: rc=$rc $out"

# many groups at once (corral_pg_create_many / corral_pg_remove_many): one
# round trip for eight groups, eight distinct GPUs; a removal of a name
# that is no group fails for that name only
ex=${CORRAL_BUILD_DIR:-$(dirname "$CORRAL")}/examples/libcorral_pg_batch
out=$("$ex" 8 GPU=1 nosuch-group); rc=$?
created=$(grep -c '^group [0-7] pg[0-9]* CREATED ' <<<"$out")
gpus=$(sed -n 's/^group .* CREATED [^ ]* \[\([0-7]\)\]$/\1/p' <<<"$out" | sort -u | wc -l)
[ "$created" = 8 ] && [ "$gpus" = 8 ] && ok "8 groups created at once on 8 distinct GPUs" ||
    fail "create_many: rc=$rc $out"
[ $rc -eq 1 ] && grep -q '^removed 8 of 9$' <<<"$out" && grep -q '^not removed nosuch-group: error ' <<<"$out" &&
    ok "remove_many: 8 removed, the unknown name refused alone" || fail "remove_many: rc=$rc $out"
for _ in $(seq 50); do [ "$(free_gpus)" = 8 ] && break; sleep 0.1; done
[ "$(free_gpus)" = 8 ] && ok "every GPU free again after the batch" || fail "GPU free $(free_gpus) after the batch"
out=$("$ex" 3 GPU=9 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '^group [0-2] not created: error ' <<<"$out")" = 3 ] &&
    grep -q "create: infeasible: .*GPU=9.*GPU=8" <<<"$out" &&
    ok "an infeasible batch: each group refused, the reason said" || fail "infeasible batch: rc=$rc $out"
out=$("$ex" 2 GPU=x 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "group 0: .*GPU" <<<"$out" && ok "a malformed spec in a batch: nothing sent, named" ||
    fail "bad batch: rc=$rc $out"

"$CORRAL" stop >/dev/null 2>&1
finish
