#!/bin/sh
# make demo: what corral sees on this machine and on two recorded machines
# (a DGX H100 class node through the stand-in NVML, and one host of a TPU
# v6e 4x4 slice), a simulated node from a hardware spec, the scheduler on a
# simulated cluster, and a head with three simulated agents running a DDP
# training and a gang. Recorded machines are fixtures, not hardware: corral
# says where the description comes from.
#
# Every command is printed as it is run ("$ ..."), from the source tree,
# so each can be pasted into a shell there. Bold titles only on a terminal.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
# DEMO_BUILD: the build tree to show (default build; the test uses its own)
b=${DEMO_BUILD:-build}
[ -x "$b/corral" ] || { echo "demo: $b/corral is missing: run make build (or make demo)" >&2; exit 1; }
if [ -t 1 ]; then
    bold=$(printf '\033[1m') plain=$(printf '\033[0m')
else
    bold='' plain=''
fi
step() { printf '\n%s== %s%s\n' "$bold" "$1" "$plain"; }
# run CMD: prints CMD as typed, then runs exactly that
run() {
    printf '$ %s\n' "$1"
    eval "$1"
}

step "this machine"
run "$b/corral hw"
run "$b/corral topo"

# each command in a subshell of its own, as printed: the fixture's
# variables (CORRAL_SYSFS_ROOT, the stand-in NVML) must not stay behind
fxbuild=""
[ "$b" = build ] || fxbuild=" $b" # the stand-in NVML of that build tree
for m in dgx-h100 tpu-v6e-4x4-w0; do
    fx="eval \"\$(scripts/fixture-env.sh $m$fxbuild)\""
    step "recorded machine $m (the fixture tree tests/fixtures/hw/$m)"
    run "( $fx; $b/corral hw )"
    run "( $fx; $b/corral topo )"
    step "recorded machine $m: what a worker given devices 0,1 sees"
    run "( $fx; $b/corral hw --isolate 0,1 )"
done

step "a simulated node from a hardware spec (what daemons and tests use)"
run "$b/corral hw --spec specs/mi300x-8.yaml"
step "a simulated node: what a worker given GPUs 4-7 sees"
run "$b/corral hw --spec specs/mi300x-8.yaml --isolate 4-7"

step "the scheduler on a simulated mixed GPU/TPU/Gaudi cluster (52 nodes, 788 requests)"
run "$b/corral sim --cluster examples/clusters/mixed.yaml --workload examples/traces/mixed.yaml"

# the cluster: a head and three simulated nodes (two hosts of one TPU v5p
# 2x2x2 slice, a DGX-class GPU node), a real DDP training under corral train
# on the slice, status, and everything shut down. A session directory of
# its own, so that a head the user runs is not touched.
home=$(mktemp -d /tmp/corral-demo-XXXXXX)
# what the workers write (the checkpoints): outside the corral home, which
# a root agent hides from its workers (docs/workers.md)
data=$(mktemp -d /tmp/corral-demo-data-XXXXXX)
cleanup() {
    CORRAL_HOME=$home $b/corral stop >/dev/null 2>&1 || true
    rm -rf "$home" "$data"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
step "a session of the demo's own (a head, three agents, a training and a gang)"
run "export CORRAL_HOME=$home"
run "$b/corral start --head --hw-spec specs/cpu-only.yaml --dashboard-port any"
addr=$($b/corral status --json | sed -n 's/.*"head_address": "\([^"]*\)".*/\1/p')
for n in "tpu-w0 tpu-v5p-2x2x2-w0 127.0.0.10" "tpu-w1 tpu-v5p-2x2x2-w1 127.0.0.11" \
    "gpu-a dgx-h100 127.0.0.2"; do
    set -- $n
    step "an agent joins: $1 (simulated $2)"
    run "$b/corral start --address $addr --hw-spec specs/$2.yaml --node-id $1 --node-ip $3"
done
step "the cluster"
run "$b/corral status"
trained=no
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    step "real PyTorch DDP (gloo) on the slice: 4 ranks, one TPU chip each, per-rank placement and loss"
    run "$b/corral train --tpu-topology 2x2x2 --accelerator-type TPU-V5P --workers 4 --placement SPREAD --checkpoint-dir $data/ckpt --env PYTHONPATH=$src/python -- /usr/bin/python3 examples/train/ddp_train.py"
    trained=yes
else
    echo "(the training step is left out: /usr/bin/python3 has no torch; scripts/deps.sh installs python3-torch)"
fi
step "a gang of 2 on the GPU node, one GPU each: what each sees"
run "$b/corral run --gpus 1 --workers 2 -- sh -c 'echo \$CORRAL_NODE_ID CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES'"
step "what happened"
run "$b/corral events --limit 14"
step "the dashboard: the same cluster in a browser (topology, devices, jobs, events)"
run "$b/corral dashboard"
if [ -t 0 ] && [ -t 1 ]; then
    # on a terminal the cluster stays up while the user looks
    printf 'Open that URL in a browser on this machine; press Enter to stop the cluster. '
    read -r _ || true
fi
step "stop the head and the agents"
run "$b/corral stop"

step "what was shown"
cat <<EOF
- corral hw / topo: the accelerators, host, NICs and how they are wired, here
  and on two recorded machines (file trees under tests/fixtures/hw, read through
  CORRAL_SYSFS_ROOT: no such hardware is needed). In topo's matrix NV18 is 18
  NVLinks between two GPUs (through NVSwitches), PIX/NODE/SYS how far apart two
  devices are over PCIe (docs/topology.md has the legend).
- corral hw --isolate: the exact environment (CUDA_VISIBLE_DEVICES,
  TPU_VISIBLE_CHIPS, HIP_VISIBLE_DEVICES, ...) a worker given those devices gets.
- a hardware spec: a node described by a YAML file, marked [simulated].
- corral sim: the real scheduler in simulated time. "decisions ... per second"
  and "latency" are the scheduler's own speed on this machine; "gang wait" is
  how long groups waited for room, in simulated seconds; "in use" is the share
  of each device kind busy over time. "fragmentation" is the share of free
  devices no pending request could use (on the wrong node, or too few
  together); "max 100%" means that at some moment every free device was
  unusable for what was waiting (for example a few GPUs free on many nodes while
  a gang needs more devices together than any one node has free), and the
  mean is over the samples with requests pending. "infeasible" requests could
  never fit this cluster and were refused, each with the reason.
- a head and three agents on simulated nodes, joined over TCP on 127.0.0.1:
  corral status lists each node's resources, used and free.
EOF
if [ "$trained" = yes ]; then
    cat <<EOF
- corral train: 4 PyTorch DDP ranks (gloo) on the two hosts of the TPU slice
  (SPREAD: two per host), each given one chip in TPU_VISIBLE_CHIPS. The chips
  are simulated: without torch_xla a rank says so and computes on the CPU.
  Every rank prints the same loss at each step because DDP averages the
  gradients, and the loss falling is the model learning. The last line is
  the job: its ranks' nodes and devices, restarts, and time.
EOF
fi
cat <<EOF
- corral run --gpus 1 --workers 2: a gang on the GPU node, each worker with
  its own GPU in CUDA_VISIBLE_DEVICES; corral events: what the head recorded.
- corral dashboard: the head's login URL; the dashboard (docs/dashboard.md)
  draws each node's topology graph, its devices' use, the jobs and where
  they run, and the events as they happen.
- corral stop: the head and every agent of the session stopped.
The session was $home (removed now); to try it yourself: docs/runtime.md.
EOF
