#!/bin/sh
# Prints the environment that makes corral see a recorded fixture machine,
# one `export VAR=VALUE` a line, for `eval "$(scripts/fixture-env.sh dgx-h100)"`.
#   CORRAL_SYSFS_ROOT   the machine's recorded file tree
#   CORRAL_HWLOC_XML    its host topology as hwloc XML
#   the machine's own variables (tests/fixtures/hw/<machine>/env)
#   CORRAL_NVML_LIBRARY + CORRAL_NVML_STUB for NVIDIA machines (stand-in NVML)
set -eu
m=${1:?usage: scripts/fixture-env.sh MACHINE [BUILD_DIR]}
src=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$src/build}
dir=$src/tests/fixtures/hw/$m
[ -d "$dir" ] || { echo "fixture-env: no fixture machine '$m' in tests/fixtures/hw" >&2; exit 2; }
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
echo "export CORRAL_SYSFS_ROOT=$(q "$dir/root")"
[ -f "$dir/hwloc.xml" ] && echo "export CORRAL_HWLOC_XML=$(q "$dir/hwloc.xml")"
if [ -f "$dir/env" ]; then
    grep -v '^[[:space:]]*#' "$dir/env" | grep '=' | while IFS= read -r line; do
        echo "export ${line%%=*}=$(q "${line#*=}")"
    done
fi
if [ -f "$dir/nvml.json" ]; then
    echo "export CORRAL_NVML_LIBRARY=$(q "$build/tests/stubs/libnvml_stub.so")"
    echo "export CORRAL_NVML_STUB=$(q "$dir/nvml.json")"
fi
