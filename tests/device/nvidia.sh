#!/usr/bin/env bash
# The prepared check for a machine with NVIDIA GPUs and their driver: builds
# corral and runs `corral conformance --backend nvidia` (cli/conformance_cmd.c:
# discovery against nvidia-smi, isolation through libcuda and PyTorch,
# topology against nvidia-smi topo -m, telemetry, versions), keeping its
# reports and the vendor tools' own outputs in OUTDIR for the record
# (docs/hardware.md, "Conformance on real hardware", says what to copy into
# its maturity table).
#
# Exit: conformance's (0 verified, 1 a mismatch, 77 nothing verified), or 2
# when the machine cannot run it (no nvidia-smi, the build failed).
# Run from anywhere: tests/device/nvidia.sh [OUTDIR]
set -u
cd "$(dirname "$0")/../.." || exit 2
out=${1:-$(mktemp -d /tmp/corral-nvidia-check.XXXXXX)}
mkdir -p "$out"
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "FAIL: nvidia-smi not found: this check needs a machine with NVIDIA GPUs and their driver"
    exit 2
fi
echo "== build (make build), log in $out/build.log"
if ! make build >"$out/build.log" 2>&1; then
    echo "FAIL: make build; last lines of $out/build.log:"
    tail -20 "$out/build.log"
    exit 2
fi
# the real machine only: no fixture or stand-in settings inherited
unset CUDA_VISIBLE_DEVICES CORRAL_NVML_LIBRARY CORRAL_CUDA_VISIBLE_BY CORRAL_SYSFS_ROOT \
    CORRAL_HWLOC_XML
nvidia-smi -q >"$out/smi-q.txt" 2>&1
nvidia-smi topo -m >"$out/smi-topo.txt" 2>&1
build/corral hw --json >"$out/hw.json" 2>&1
build/corral topo >"$out/topo.txt" 2>&1
build/corral conformance --backend nvidia --json >"$out/conformance.json" 2>/dev/null
build/corral conformance --backend nvidia --junit "$out/conformance.xml" | tee "$out/conformance.txt"
rc=${PIPESTATUS[0]}
echo "== outputs in $out (exit $rc)"
exit "$rc"
