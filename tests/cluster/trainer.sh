#!/usr/bin/env bash
# corral.train.TorchTrainer (issue 15, docs/train.md "TorchTrainer"): real
# gloo DDP on one actor per worker. On a simulated TPU v6e 4x4 slice (the
# head's node is slice worker 0, three agents the others, joined out of
# worker id order): 4 workers, one per host, with use_tpu/topology (and
# 16, one per chip, in libtpu's mesh); rank 2
# dies at step 3 of the first attempt, the whole group is killed and
# restarted from the last checkpoint (steps 0-2 are not redone, the loss
# keeps falling, the result has the last step's metrics); with
# max_failures 0 the same fault fails fit() with the rank named. On two
# simulated H100 nodes: 2 workers with use_gpu, one GPU each. Skipped (77)
# without /usr/bin/python3's torch or cloudpickle, or without the extension.
PY=/usr/bin/python3
"$PY" -c 'import torch, cloudpickle' 2>/dev/null ||
    { echo "skip: /usr/bin/python3 lacks torch or cloudpickle (scripts/deps.sh installs them)"; exit 77; }
[ -e "$CORRAL_BUILD_DIR/python/corral/_core.abi3.so" ] ||
    { echo "FAIL: $CORRAL_BUILD_DIR/python/corral/_core.abi3.so was not built"; exit 1; }
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" ctrainer
trap cluster_cleanup EXIT
SUSPECT=5000 DEAD=15000 # no node dies here: the failures are processes'
head_up "$SPECS/tpu-v6e-4x4-w0.yaml" 2>/dev/null
for w in 3 1 2; do agent_up "v6e-s1-w$w" "$SPECS/tpu-v6e-4x4-w$w.yaml" "127.0.0.$((30 + w))" || exit 1; done
agent_up gpu-a "$SPECS/dgx-h100.yaml" 127.0.0.35 || exit 1
for n in v6e-s1-w1 v6e-s1-w2 v6e-s1-w3 gpu-a; do wait_node "$n" 10 ALIVE || fail "node $n did not come up"; done
export PYTHONPATH=$CORRAL_SOURCE_DIR/python CORRAL_TASK_IDLE_TIMEOUT=2
py_core_env
EX=$CORRAL_SOURCE_DIR/examples/train/trainer_ddp.py
field() { sed -n 's/^result //p' <<<"$1" | "$PY" -c "import json,sys; r=json.load(sys.stdin); print(eval(sys.argv[1]))" "$2"; }

# the slice, a fault at step 3 of rank 2, one restart allowed
out=$(cd /tmp && timeout 300 env "${PY_ENV[@]}" "$PY" "$EX" --tpu 4x4 --steps 8 --fail-rank 2 --fail-step 3 --max-failures 1 \
    --storage "$TDATA/results" --name slice 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(field "$out" 'r["attempts"]')" = 2 ] &&
    ok "4 workers on the slice: rank 2 failed at step 3, the group restarted once and finished" ||
    fail "slice run: rc=$rc $out"
grep -q "attempt 1 failed (rank 2: .*died: exit code 1.*); restarting all 4 workers from checkpoint_000002" <<<"$out" &&
    ok "the restart says which rank failed and the checkpoint it resumes from" || fail "restart line: $out"
steps=$(field "$out" 'r["steps"]')
[ "$steps" = "[0, 1, 2, 3, 4, 5, 6, 7]" ] && ok "steps reported 0..7 once each: none redone after the restart" ||
    fail "steps: $steps ($out)"
[ "$(field "$out" 'r["metrics"]["step"], r["metrics"]["world_size"]')" = "(7, 4)" ] &&
    [ "$(field "$out" 'r["checkpoint"], r["kept"]')" = "('checkpoint_000007', ['checkpoint_000006', 'checkpoint_000007'])" ] &&
    ok "the result: the last step's metrics, checkpoint_000007, two checkpoints kept (num_to_keep)" ||
    fail "result: $out"
[ "$(field "$out" 'all(b < a for a, b in zip(r["losses"], r["losses"][1:]))')" = True ] &&
    ok "the loss falls at every step, across the restart: $(field "$out" '" ".join("%.3f" % l for l in r["losses"])')" ||
    fail "loss: $out"

# where each worker ran: the lease jobs' logs (one per actor and attempt)
logs=$("$CORRAL" job list --json 2>/dev/null | jq -r '.[] | select(.name == "actor:_TrainWorker") | .job_id' |
    while read -r j; do "$CORRAL" job logs "$j" --no-prefix 2>/dev/null; done)
bad=
for r in 0 1 2 3; do grep -q "^worker $r/4 node v6e-s1-w$r chips 0,1,2,3 step 7 " <<<"$logs" || bad=1; done
[ -z "$bad" ] && ok "rank r on slice worker r with its host's 4 chips (hosts joined as w0,w3,w1,w2)" ||
    fail "placement: $logs"
[ "$(grep -c 'resumed from checkpoint_000002 at step 3 (restart 1)' <<<"$logs")" = 4 ] &&
    ok "all 4 workers of the second attempt resumed from checkpoint_000002 at step 3" || fail "resume: $logs"

# one worker per chip of the slice: 16 workers, rank r on host r/4's chip
# r%4, the libtpu mesh variables of corral train (CLOUD_TPU_TASK_ID = rank)
out=$(cd /tmp && timeout 300 env "${PY_ENV[@]}" "$PY" "$EX" --tpu 4x4 --workers 16 --steps 2 --max-failures 0 \
    --storage "$TDATA/results" --name chips 2>&1); rc=$?
logs=$("$CORRAL" job list --json 2>/dev/null | jq -r '.[] | select(.name == "actor:_TrainWorker") | .job_id' | tail -16 |
    while read -r j; do "$CORRAL" job logs "$j" --no-prefix 2>/dev/null; done)
bad=
for r in $(seq 0 15); do
    grep -q "^worker $r/16 node v6e-s1-w$((r / 4)) chips $((r % 4)) step 1 " <<<"$logs" || bad=1
    grep -q "^worker $r/16 mesh task=$r bounds=4,4,1 port=$((8476 + r % 4))$" <<<"$logs" || bad=1
done
[ $rc -eq 0 ] && [ -z "$bad" ] && [ "$(field "$out" 'r["steps"]')" = "[0, 1]" ] &&
    ok "16 workers, one per chip: rank r on slice worker r/4, chip r%4, CLOUD_TPU_TASK_ID=r in a 4,4,1 mesh" ||
    fail "one per chip: rc=$rc $out $logs"

# no restart allowed: fit() raises, naming the rank
out=$(cd /tmp && timeout 300 env "${PY_ENV[@]}" "$PY" "$EX" --tpu 4x4 --steps 4 --fail-rank 1 --fail-step 1 --max-failures 0 \
    --storage "$TDATA/results" --name nofail 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "^failed: training failed on attempt 1 of 1: .*rank 1: " <<<"$out" &&
    [ "$(field "$out" 'r["metrics"]["step"]')" = 0 ] &&
    ok "max_failures=0: fit() raises TrainingFailedError naming rank 1, the result has step 0's metrics" ||
    fail "no restart: rc=$rc $out"

# GPUs: one each, two workers (CPU fallback: gloo)
out=$(cd /tmp && timeout 300 env "${PY_ENV[@]}" "$PY" "$EX" --gpu 2 --steps 3 --storage "$TDATA/results" --name gpu 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(field "$out" 'r["steps"], r["metrics"]["world_size"]')" = "([0, 1, 2], 2)" ] &&
    ok "2 workers with use_gpu on the H100 node" || fail "gpu: rc=$rc $out"
logs=$("$CORRAL" job list --json 2>/dev/null | jq -r '.[] | select(.name == "actor:_TrainWorker") | .job_id' |
    while read -r j; do "$CORRAL" job logs "$j" --no-prefix 2>/dev/null; done | grep "node gpu-a .* step 2 ")
[ "$(sed -n 's/.* chips \([^ ]*\) step.*/\1/p' <<<"$logs" | sort -u | wc -l)" = 2 ] &&
    ok "each GPU worker saw one distinct GPU" || fail "gpus: $logs"

# the placement groups are gone after fit()
[ "$("$CORRAL" pg list --json 2>/dev/null | jq '[.[] | select(.state != "REMOVED")] | length')" = 0 ] &&
    ok "fit() removed its placement groups" || fail "groups left: $("$CORRAL" pg list 2>&1)"
finish
