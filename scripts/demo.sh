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

# the runtime: a head on a simulated 8-GPU node, a 4-worker job, status, stop
export CORRAL_HOME
CORRAL_HOME=$(mktemp -d /tmp/corral-demo-XXXXXX)
trap '"$corral" stop >/dev/null 2>&1 || true; rm -rf "$CORRAL_HOME"' EXIT
step "a head on a simulated DGX H100 node" "corral start --head --hw-spec specs/dgx-h100.yaml"
"$corral" start --head --hw-spec "$src/specs/dgx-h100.yaml"
step "a gang of 4 workers, one GPU each: what each sees" \
    "corral run --gpus 1 --workers 4 -- sh -c 'echo rank \$CORRAL_WORKER_INDEX: CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES'"
"$corral" run --gpus 1 --workers 4 -- \
    sh -c 'echo "rank $CORRAL_WORKER_INDEX: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"'
step "the head" "corral status"
"$corral" status
step "what happened" "corral events --limit 12"
"$corral" events --limit 12
step "stop the head" "corral stop"
"$corral" stop
