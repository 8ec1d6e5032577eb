#!/bin/bash
# corral's Python helpers (python/corral, issue 6) without a corral daemon:
# the unit tests (python/tests); `pip install ./python` offline; the example
# scripts of examples/train started as ranks from this shell with the
# variables `corral train` sets: a 4-rank DDP run on two simulated TPU v6e
# hosts (2 chips each) with an injected failure and a resume from the
# checkpoint, a 2-rank run on simulated GPUs, a torchrun-style script
# unchanged, and the missing-rank rendezvous timeouts.
# Real PyTorch: Debian's python3-torch for /usr/bin/python3 (gloo on CPU);
# without it only the unit tests that need no torch run, then exit 77 (skip).
set -u
: "${CORRAL_SOURCE_DIR:?}"
SRC=$CORRAL_SOURCE_DIR
PY=/usr/bin/python3
EX=$SRC/examples/train
tmp=$(mktemp -d /tmp/corral-pyhelpers-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
export PYTHONPATH=$SRC/python
unset CORRAL_JOB_ID CORRAL_ACCELERATOR_TYPE CORRAL_ACCELERATOR_IDS CORRAL_CHECKPOINT_DIR \
      CUDA_VISIBLE_DEVICES TPU_VISIBLE_CHIPS MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK

# ---- unit tests (those needing torch skip themselves without it) ----------
out=$("$PY" -m unittest discover -s "$SRC/python/tests" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "python unit tests: $(tail -1 <<<"$out")" || fail "python unit tests: rc=$rc
$out"

if ! "$PY" -c 'import torch, torch.distributed' 2>/dev/null; then
    echo "python_helpers: $PY has no torch (apt-get install -y python3-torch); skipping the rest"
    [ $fails -eq 0 ] && exit 77
    exit 1
fi

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---- pip install ./python, offline (no index), then import outside the tree
if "$PY" -m pip --version >/dev/null 2>&1; then
    out=$(cd "$tmp" && "$PY" -m pip install --no-index --no-deps --quiet --target "$tmp/site" "$SRC/python" 2>&1); rc=$?
    got=$(cd "$tmp" && PYTHONPATH=$tmp/site "$PY" -c 'import corral.train.torch, corral; print(corral.__file__)' 2>&1)
    [ $rc -eq 0 ] && [ "$got" = "$tmp/site/corral/__init__.py" ] && ok "pip install ./python offline" ||
        fail "pip install ./python: rc=$rc $out / $got"
else
    echo "note: no pip for $PY; pip install ./python not tested"
fi

# ---- ranks started as corral train would start them ---------------------
# launch TAG NRANKS RANKS_PER_NODE KIND SCRIPT [VAR=VALUE...]: starts the
# ranks (each under a 60 s timeout), waits for all, leaves TAG.R.out and
# TAG.R.rc in $tmp. KIND: TPU (one chip each) or GPU (one GPU each).
launch() {
    local tag=$1 n=$2 per=$3 kind=$4 script=$5 port r pids=""
    shift 5
    port=$(free_port)
    for ((r = 0; r < n; r++)); do
        local lr=$((r % per)) node=$((r / per)) iso
        if [ "$kind" = TPU ]; then
            iso=(CORRAL_ACCELERATOR_TYPE=TPU CORRAL_ACCELERATOR_IDS=$lr TPU_VISIBLE_CHIPS=$lr
                 TPU_WORKER_ID=$node TPU_WORKER_HOSTNAMES=host-0,host-1 TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1)
        else
            iso=(CORRAL_ACCELERATOR_TYPE=GPU CORRAL_ACCELERATOR_IDS=$lr
                 CUDA_VISIBLE_DEVICES=GPU-0000000$node-0000-0000-0000-00000000000$lr)
        fi
        (env MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n LOCAL_RANK=$lr \
             LOCAL_WORLD_SIZE=$per NODE_RANK=$node GROUP_RANK=$node JAX_COORDINATOR_ADDRESS=127.0.0.1:$port \
             JAX_PROCESS_ID=$r JAX_NUM_PROCESSES=$n CORRAL_JOB_ID=7 CORRAL_NODE_ID=node-$node \
             CORRAL_WORKER_ID=7.$r CORRAL_WORKER_INDEX=$r CORRAL_CHECKPOINT_DIR=$tmp/ckpt \
             "${iso[@]}" "$@" timeout -k 5 60 "$PY" "$script" >"$tmp/$tag.$r.out" 2>&1
         echo $? >"$tmp/$tag.$r.rc") &
        pids="$pids $!"
    done
    # shellcheck disable=SC2086
    wait $pids
}
rc_of() { cat "$tmp/$1.$2.rc"; }

# 4 ranks on two simulated v6e hosts, rank 2 fails at step 3 on the first attempt
mkdir -p "$tmp/ckpt"
FAULT=(CORRAL_TRAIN_STEPS=8 CORRAL_TRAIN_FAIL_RANK=2 CORRAL_TRAIN_FAIL_STEP=3)
launch tpu0 4 2 TPU "$EX/ddp_train.py" CORRAL_RESTART_COUNT=0 "${FAULT[@]}"
[ "$(rc_of tpu0 2)" = 1 ] && grep -qx "rank 2 failing at step 3 (CORRAL_TRAIN_FAIL_RANK)" "$tmp/tpu0.2.out" &&
    ok "injected failure: rank 2 exits 1 at step 3" || fail "rank 2 first attempt: rc=$(rc_of tpu0 2) $(cat "$tmp/tpu0.2.out")"
for r in 0 1 3; do
    rc=$(rc_of tpu0 $r)
    [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "rank $r after rank 2 failed: rc=$rc (want a prompt error)"
done
[ -s "$tmp/ckpt/checkpoint" ] && ok "checkpoint written" || fail "no checkpoint in $tmp/ckpt"
ls -A "$tmp/ckpt" | grep -q '\.tmp$' && fail "temporary checkpoint left: $(ls -A "$tmp/ckpt")"

# the restarted gang resumes from the checkpoint and finishes
before=$fails
launch tpu1 4 2 TPU "$EX/ddp_train.py" CORRAL_RESTART_COUNT=1 "${FAULT[@]}"
for r in 0 1 2 3; do
    o=$tmp/tpu1.$r.out
    [ "$(rc_of tpu1 $r)" = 0 ] || { fail "rank $r after restart: rc=$(rc_of tpu1 $r) $(cat "$o")"; continue; }
    grep -qx "rank $r resumed from checkpoint at step 3 (restart 1)" "$o" || fail "rank $r did not resume at step 3: $(cat "$o")"
    grep -qx "rank $r allreduce sum 10 expected 10" "$o" || fail "rank $r all-reduce: $(cat "$o")"
    [ "$(grep -c "^rank $r/4 device cpu step [3-7] loss " "$o")" = 5 ] || fail "rank $r steps 3..7: $(cat "$o")"
    grep -q "^rank $r done first_loss " "$o" || fail "rank $r no done line: $(cat "$o")"
    # one notice: given a TPU chip, no torch_xla here, so the CPU
    [ "$(grep -c '^corral: this worker was given TPU' "$o")" = 1 ] && grep -q "TPU_VISIBLE_CHIPS=$((r % 2))" "$o" ||
        fail "rank $r: want one TPU fallback notice naming its chip: $(cat "$o")"
done
[ $fails -eq $before ] && ok "4 ranks on 2 simulated TPU hosts: resumed at step 3, all-reduce 10, CPU fallback said once per rank"
# the loss falls at every step, across the failure and the restart
losses=$(cat "$tmp/tpu0.0.out" "$tmp/tpu1.0.out" | sed -n 's/^rank 0\/4 device cpu step \([0-9]*\) loss \([0-9.]*\)$/\1 \2/p')
steps=$(awk '{print $1}' <<<"$losses" | tr '\n' ' ')
falling=$(awk 'NR>1 && $2>=prev {bad=1} {prev=$2} END{print bad ? "no" : "yes"}' <<<"$losses")
[ "$steps" = "0 1 2 3 4 5 6 7 " ] && [ "$falling" = yes ] && ok "loss falls over steps 0..7: $(awk '{printf "%s ", $2}' <<<"$losses")" ||
    fail "loss over steps: $losses"

# 2 ranks on two simulated GPU nodes: distinct GPUs, no CUDA here, CPU said once
rm -rf "$tmp/ckpt"
before=$fails
launch gpu 2 1 GPU "$EX/ddp_train.py" CORRAL_RESTART_COUNT=0 CORRAL_TRAIN_STEPS=3
for r in 0 1; do
    o=$tmp/gpu.$r.out
    [ "$(rc_of gpu $r)" = 0 ] && grep -qx "rank $r allreduce sum 3 expected 3" "$o" &&
        [ "$(grep -c "^corral: this worker was given GPU 0 (CUDA_VISIBLE_DEVICES=GPU-0000000$r-" "$o")" = 1 ] &&
        grep -q "no CUDA runtime" "$o" && ! grep -q "resumed" "$o" ||
        fail "GPU rank $r: rc=$(rc_of gpu $r) $(cat "$o")"
done
[ $fails -eq $before ] && ok "2 ranks on simulated GPU nodes: distinct GPUs, CPU fallback said once each"

# a torchrun script runs unchanged with the same variables
before=$fails
grep -q "corral" <(grep -E '^(import|from) ' "$EX/torchrun_style.py") && fail "torchrun_style.py imports corral"
launch trs 2 2 TPU "$EX/torchrun_style.py"
for r in 0 1; do
    [ "$(rc_of trs $r)" = 0 ] && grep -qx "torchrun_style rank $r/2 local_rank $r allreduce 3 expected 3" "$tmp/trs.$r.out" ||
        fail "torchrun_style rank $r: rc=$(rc_of trs $r) $(cat "$tmp/trs.$r.out")"
done
[ $fails -eq $before ] && ok "torchrun_style.py unchanged, 2 ranks"

# a missing rank: rank 0 alone, then rank 1 alone, 3 s timeout; clear, no hang
# (the outer bound catches a hang: torch's import alone took over 25 s on a
# 2-core machine under a load of 18, so it is generous)
INIT='import corral.train.torch as ct; ct.init_process_group(timeout=3)'
port=$(free_port)
out=$(MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=2 timeout -k 5 120 "$PY" -c "$INIT" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "RendezvousTimeout: rank 0: rendezvous at 127.0.0.1:$port timed out after 3.0 s: 1 of 2 ranks arrived, missing rank 1; expected ranks 0..1 (WORLD_SIZE=2)" <<<"$out" &&
    ok "rank 1 missing: $(tail -1 <<<"$out")" || fail "rank 1 missing: rc=$rc $out"
port=$(free_port)
out=$(MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 WORLD_SIZE=2 timeout -k 5 120 "$PY" -c "$INIT" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "RendezvousTimeout: rank 1 could not reach the rendezvous at 127.0.0.1:$port (hosted by rank 0) within 3.0 s: rank 0 has not started" <<<"$out" &&
    ok "rank 0 missing: $(tail -1 <<<"$out" | cut -c1-160)" || fail "rank 0 missing: rc=$rc $out"

# FSDP: wrapped when this torch has it, else a clear error (Debian's 1.13 on 3.11 cannot import it)
out=$("$PY" -c '
import torch, corral.train.torch as ct
ct.init_process_group()
m = ct.prepare_model(torch.nn.Linear(2, 1), "fsdp")
print("wrapped", type(m).__name__)' 2>&1); rc=$?
{ [ $rc -eq 0 ] && grep -qx "wrapped FullyShardedDataParallel" <<<"$out"; } ||
    { [ $rc -eq 1 ] && grep -q "FSDP is not available in this torch .*use parallel_strategy='ddp'" <<<"$out"; } &&
    ok "fsdp: $(tail -1 <<<"$out" | cut -c1-120)" || fail "fsdp: rc=$rc $out"

[ $fails -eq 0 ] && echo "python_helpers: all passed" || echo "python_helpers: $fails failure(s)"
exit $((fails > 0))
