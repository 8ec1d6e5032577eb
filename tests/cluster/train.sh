#!/usr/bin/env bash
# corral train on simulated nodes with real PyTorch (issue 6): DDP on gloo
# over four hosts of one TPU v6e slice with a fault at step 3 (the gang
# restarts and resumes from the checkpoint); --max-failures 0 fails with a
# report; a torchrun-style script runs unchanged on two GPU nodes, one
# distinct GPU per rank. Skipped (77) without /usr/bin/python3's torch.
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "skip: no torch for /usr/bin/python3"; exit 77; }
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" ctrain
PY=/usr/bin/python3
EX=$CORRAL_SOURCE_DIR/examples/train
head_up "$SPECS/cpu-only.yaml"
for w in 0 1 2 3; do agent_up "tpu-w$w" "$SPECS/tpu-v6e-4x4-w$w.yaml" "127.0.0.$((10 + w))"; done
agent_up gpu-a "$SPECS/dgx-h100.yaml" 127.0.0.2
agent_up gpu-b "$SPECS/dgx-h100.yaml" 127.0.0.3
PP="PYTHONPATH=$CORRAL_SOURCE_DIR/python"

# the variables each rank gets
out=$("$CORRAL" train --tpu-topology 4x4 --accelerator-type TPU-V6E --workers 4 --placement SPREAD -- \
    sh -c 'echo "r=$RANK/$WORLD_SIZE local=$LOCAL_RANK node=$NODE_RANK chips=$TPU_VISIBLE_CHIPS tw=$TPU_WORKER_ID master=$MASTER_ADDR:$MASTER_PORT jax=$JAX_PROCESS_ID/$JAX_NUM_PROCESSES"' 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^\[rank [0-3]\] r=[0-3]/4 local=0 node=[0-3] chips=[0-3] tw=[0-3] master=127.0.0.1[0-3]:[0-9]* jax=[0-3]/4$' <<<"$out")" = 4 ] &&
    ok "4 ranks over the slice's 4 hosts: RANK, WORLD_SIZE, one chip each, TPU_WORKER_ID, MASTER_*, JAX_*" ||
    fail "variables: rc=$rc $out"
grep -q "^\[rank 0\] r=0/4 .* master=127.0.0.10:" <<<"$out" && ok "MASTER_ADDR is rank 0's node (slice worker 0)" ||
    fail "master: $out"

# DDP with a fault at step 3 of rank 2: the gang restarts from the checkpoint
out=$("$CORRAL" train --tpu-topology 4x4 --accelerator-type TPU-V6E --workers 4 --placement SPREAD \
    --checkpoint-dir "$CORRAL_HOME/ckpt" --max-failures 1 --env "$PP" \
    --env CORRAL_TRAIN_FAIL_RANK=2 --env CORRAL_TRAIN_FAIL_STEP=3 -- $PY "$EX/ddp_train.py" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "SUCCEEDED: 4 rank(s) .* 1 restart(s)" <<<"$out" &&
    [ "$(grep -c 'resumed from checkpoint at step 3 (restart 1)' <<<"$out")" = 4 ] &&
    ok "rank 2 fails at step 3: the gang restarts, resumes at step 3 and succeeds" || fail "fault: rc=$rc $out"
first=$(sed -n 's/^\[rank 0\] rank 0 done first_loss \([0-9.]*\) last_loss \([0-9.]*\)$/\1 \2/p' <<<"$out")
awk -v a="${first% *}" -v b="${first#* }" 'BEGIN{exit !(b < a)}' && ok "the loss falls ($first)" ||
    fail "loss: [$first]"
[ "$(grep -c 'allreduce sum 10 expected 10' <<<"$out")" -ge 4 ] && ok "all-reduce sums agree" || fail "allreduce: $out"

# --max-failures 0: the job fails with each rank's state and the failing rank's last lines
out=$("$CORRAL" train --tpu-topology 4x4 --workers 4 --placement SPREAD --checkpoint-dir "$CORRAL_HOME/ckpt2" \
    --env "$PP" --env CORRAL_TRAIN_FAIL_RANK=2 --env CORRAL_TRAIN_FAIL_STEP=3 -- $PY "$EX/ddp_train.py" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "FAILED" <<<"$out" && grep -q "rank 2 on tpu-w.*EXITED (exit code 1)" <<<"$out" &&
    grep -q "the last lines of rank 2" <<<"$out" && ok "--max-failures 0: FAILED with a report naming rank 2" ||
    fail "no restarts: rc=$rc $out"

# a torchrun script, unchanged, on two GPU nodes
out=$("$CORRAL" train --workers 2 --resources-per-worker GPU=1 --placement STRICT_SPREAD \
    --env CUDA_DEVICE_ORDER=PCI_BUS_ID -- $PY "$EX/torchrun_style.py" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "2 rank(s) on gpu-[ab],gpu-[ab]" <<<"$out" && ok "torchrun_style.py runs unchanged on gpu-a and gpu-b" ||
    fail "torchrun style: rc=$rc $out"
# get_device() on simulated GPU nodes: the CPU (no CUDA runtime here), said once per rank
out=$("$CORRAL" train --workers 4 --resources-per-worker GPU=1 --placement SPREAD --env "$PP" -- \
    $PY -c 'import corral.train.torch as ct, os; ct.get_device(); d = ct.get_device(); print("dev", d, os.environ["CUDA_VISIBLE_DEVICES"], os.environ["CORRAL_NODE_ID"])' 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^\[rank [0-3]\] dev cpu GPU-' <<<"$out")" = 4 ] &&
    [ "$(grep -c 'no CUDA runtime' <<<"$out")" = 4 ] &&
    [ "$(sed -n 's/^\[rank [0-3]\] dev cpu \(GPU-[^ ]*\) \(gpu-[ab]\)$/\2 \1/p' <<<"$out" | sort -u | wc -l)" = 4 ] &&
    ok "4 ranks on 2 GPU nodes: a distinct GPU each, get_device() is the CPU, said once per rank" ||
    fail "get_device: rc=$rc $out"
"$CORRAL" pg list --json | jq -e 'length == 0' >/dev/null && ok "every train group removed" ||
    fail "groups left: $("$CORRAL" pg list)"
finish
