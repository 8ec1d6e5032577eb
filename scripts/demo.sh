#!/bin/sh
# make demo: what corral sees on this machine and on two recorded machines
# (a DGX H100 class node through the stand-in NVML, and one host of a TPU
# v6e 4x4 slice). Recorded machines are fixtures, not hardware: corral says
# where the description comes from.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
corral=$src/build/corral
step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "$2"; }

step "this machine" "corral hw"
"$corral" hw
step "this machine" "corral topo"
"$corral" topo

for m in dgx-h100 tpu-v6e-4x4-w0; do
    (
        eval "$("$src/scripts/fixture-env.sh" "$m" "$src/build")"
        step "recorded machine $m (fixture tree tests/fixtures/hw/$m)" "corral hw"
        "$corral" hw
        step "recorded machine $m" "corral topo"
        "$corral" topo
        step "recorded machine $m: what a worker given devices 0,1 sees" "corral hw --isolate 0,1"
        "$corral" hw --isolate 0,1
    )
done

step "a simulated node from a hardware spec (what daemons and tests use)" \
    "corral hw --spec specs/mi300x-8.yaml"
"$corral" hw --spec "$src/specs/mi300x-8.yaml"
step "a simulated node: what a worker given GPUs 4-7 sees" "corral hw --spec specs/mi300x-8.yaml --isolate 4-7"
"$corral" hw --spec "$src/specs/mi300x-8.yaml" --isolate 4-7

step "the scheduler on a simulated mixed GPU/TPU/Gaudi cluster" \
    "corral sim --cluster examples/clusters/mixed.yaml --workload examples/traces/mixed.yaml"
"$corral" sim --cluster "$src/examples/clusters/mixed.yaml" --workload "$src/examples/traces/mixed.yaml"

# the cluster: a head and three simulated nodes (two hosts of one TPU v5p
# 2x2x2 slice, a DGX-class GPU node), a real DDP training under corral train
# on the slice, status, and everything shut down
export CORRAL_HOME
CORRAL_HOME=$(mktemp -d /tmp/corral-demo-XXXXXX)
agents=""
cleanup() {
    for id in $agents; do kill "$(cat "$CORRAL_HOME/agent_$id/corrald.pid" 2>/dev/null)" 2>/dev/null || true; done
    "$corral" stop >/dev/null 2>&1 || true
    rm -rf "$CORRAL_HOME"
}
trap cleanup EXIT
step "a head (on a simulated CPU-only node)" \
    "corral start --head --hw-spec specs/cpu-only.yaml"
"$corral" start --head --hw-spec "$src/specs/cpu-only.yaml"
addr=$(cat "$CORRAL_HOME/session_latest/address")
for n in "tpu-w0 tpu-v5p-2x2x2-w0 127.0.0.10" "tpu-w1 tpu-v5p-2x2x2-w1 127.0.0.11" \
    "gpu-a dgx-h100 127.0.0.2"; do
    set -- $n
    step "an agent joins: $1 (simulated $2)" \
        "corral start --address $addr --hw-spec specs/$2.yaml --node-id $1 --node-ip $3"
    "$corral" start --address "$addr" --token-file "$CORRAL_HOME/session_latest/token" \
        --hw-spec "$src/specs/$2.yaml" --node-id "$1" --node-ip "$3"
    agents="$agents $1"
done
step "the cluster" "corral status"
"$corral" status
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    step "real PyTorch DDP (gloo) on the slice: 4 ranks, one TPU chip each, per-rank placement and loss" \
        "corral train --tpu-topology 2x2x2 --accelerator-type TPU-V5P --workers 4 --placement SPREAD --checkpoint-dir \$CORRAL_HOME/ckpt -- python3 examples/train/ddp_train.py"
    "$corral" train --tpu-topology 2x2x2 --accelerator-type TPU-V5P --workers 4 --placement SPREAD \
        --checkpoint-dir "$CORRAL_HOME/ckpt" --env "PYTHONPATH=$src/python" \
        -- /usr/bin/python3 "$src/examples/train/ddp_train.py"
else
    echo "(python3-torch is not installed for /usr/bin/python3: scripts/deps.sh installs it; the training step is left out)"
fi
step "a gang of 2 on the GPU node, one GPU each: what each sees" \
    "corral run --gpus 1 --workers 2 -- sh -c 'echo \$CORRAL_NODE_ID CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES'"
"$corral" run --gpus 1 --workers 2 -- sh -c 'echo "$CORRAL_NODE_ID CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"'
step "what happened" "corral events --limit 14"
"$corral" events --limit 14
step "stop the agents and the head" "kill agents; corral stop"
for id in $agents; do kill "$(cat "$CORRAL_HOME/agent_$id/corrald.pid")"; done
agents=""
"$corral" stop
