#!/usr/bin/env bash
# Discovery benchmark: wall time of `corral hw --json` on this machine against
# `lstopo --of xml` in the same run, and of `corral hw --json` on every
# fixture machine. Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE`
# lines on stdout (ratio: corral over the peer named in NAME); notes go to
# stderr.
#
# Timing: bash's $EPOCHREALTIME read right before and after the command, so
# no extra fork or exec falls inside the timed window (the method of the
# peer benchmarks, /work/shared/peers/lib.sh); output goes to /dev/null; the
# commands alternate within each repetition; median of REPS (default 30)
# after 3 warm-up runs each.
#
#   bench/discovery/run.sh              (make bench-discovery builds first)
#   REPS=100 CORRAL=build/corral bench/discovery/run.sh
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
CORRAL="${CORRAL:-$BUILD/corral}"
REPS="${REPS:-30}"
WARMUP=3
FIXTURES="$SRC/tests/fixtures/hw"
[ -x "$CORRAL" ] || { echo "bench/discovery: no $CORRAL; run make build first" >&2; exit 2; }

note() { echo "note: $*" >&2; }

# time_us CMD... -> microseconds on stdout of this one run (bash only in
# the window: $EPOCHREALTIME is "seconds.micros")
LAST_US=0
time_us() {
    local t0 t1
    t0=$EPOCHREALTIME
    "$@" >/dev/null 2>&1 || true
    t1=$EPOCHREALTIME
    LAST_US=$(( ${t1/./} - ${t0/./} ))
}

median_ms() { # microsecond values as arguments
    printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {
        m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.2f", m / 1000 }'
}

# ---- this machine: corral against lstopo ----
"$CORRAL" hw --json >/dev/null || { echo "bench/discovery: $CORRAL hw --json fails here" >&2; exit 1; }
# the machine's own environment, not a fixture's
unset CORRAL_HWLOC_XML CORRAL_SYSFS_ROOT CORRAL_NVML_LIBRARY CORRAL_NVML_STUB || true
have_lstopo=1
command -v lstopo >/dev/null || { have_lstopo=0; note "lstopo not installed (package hwloc): no peer figures"; }
# As root, lstopo reads 256 bytes of each PCI function's config space and
# corral 64 (hw/host.c says why); lstopo run without CAP_SYS_ADMIN reads 64
# too. That variant goes through setpriv, one more exec inside its window
# (about what /bin/true costs), so it is a conservative comparison.
have_setpriv=0
if ((have_lstopo)) && ((EUID == 0)) && command -v setpriv >/dev/null &&
    setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin true 2>/dev/null; then
    have_setpriv=1
fi
c=() l=() h=() t=()
for ((i = 0; i < WARMUP + REPS; i++)); do
    time_us "$CORRAL" hw --json; ((i >= WARMUP)) && c+=("$LAST_US")
    if ((have_lstopo)); then
        time_us lstopo --of xml; ((i >= WARMUP)) && l+=("$LAST_US")
    fi
    if ((have_setpriv)); then
        time_us setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin lstopo --of xml
        ((i >= WARMUP)) && h+=("$LAST_US")
    fi
    time_us /bin/true; ((i >= WARMUP)) && t+=("$LAST_US")
done
corral_ms=$(median_ms "${c[@]}")
echo "figure discovery_wall_corral $corral_ms ms"
if ((have_lstopo)); then
    lstopo_ms=$(median_ms "${l[@]}")
    echo "figure discovery_wall_lstopo $lstopo_ms ms"
fi
echo "figure exec_wall_bin_true $(median_ms "${t[@]}") ms"
if ((have_lstopo)); then
    ratio=$(awk -v a="$corral_ms" -v b="$lstopo_ms" 'BEGIN { printf "%.2f", a / b }')
    echo "ratio discovery_wall_vs_lstopo $ratio"
    awk -v r="$ratio" 'BEGIN { exit !(r > 0.5) }' &&
        note "goal missed on this machine: corral takes $ratio of lstopo's wall time (goal: at most 0.5)"
fi
if ((have_setpriv)); then
    hdr_ms=$(median_ms "${h[@]}")
    echo "figure discovery_wall_lstopo_header_only $hdr_ms ms"
    echo "ratio discovery_wall_vs_lstopo_header_only $(awk -v a="$corral_ms" -v b="$hdr_ms" 'BEGIN { printf "%.2f", a / b }')"
fi
# the floor under both: reading each PCI function's config space, 256 bytes
# as hwloc asks (lstopo gets them all when run as root), the 64-byte header
# as corral reads it
if [ -x "$BUILD/bench/bench_pci_config" ]; then
    for b in 256 64; do
        read -r us nfn < <("$BUILD/bench/bench_pci_config" "$REPS" "$b")
        echo "figure pci_config_read_${b}B_all $(awk -v u="$us" 'BEGIN { printf "%.2f", u / 1000 }') ms"
    done
    echo "figure pci_functions $nfn count"
else
    note "no $BUILD/bench/bench_pci_config: PCI config-space floor not measured"
fi

# ---- the fixture machines ----
stub="$BUILD/tests/stubs/libnvml_stub.so"
for dir in "$FIXTURES"/*/; do
    m=$(basename "$dir")
    [ -f "$dir/host.json" ] || [ -f "$dir/hwloc.xml" ] || continue
    if [ ! -f "$dir/hwloc.xml" ]; then
        note "skip $m: no hwloc.xml"
        continue
    fi
    if [ -f "$dir/nvml.json" ] && [ ! -f "$stub" ]; then
        note "skip $m: stand-in NVML $stub not built"
        continue
    fi
    (
        # the same environment tests and the demo use for a recorded machine
        eval "$("$SRC/scripts/fixture-env.sh" "$m" "$BUILD")"
        if ! "$CORRAL" hw --json >/dev/null 2>&1; then
            note "skip $m: corral hw --json fails on it"
            exit 0
        fi
        f=()
        for ((i = 0; i < WARMUP + REPS; i++)); do
            time_us "$CORRAL" hw --json; ((i >= WARMUP)) && f+=("$LAST_US")
        done
        ms=$(median_ms "${f[@]}")
        echo "figure discovery_wall_fixture_$m $ms ms"
        awk -v v="$ms" 'BEGIN { exit !(v >= 10) }' && note "goal missed on $m: $ms ms (goal: under 10 ms)"
        exit 0
    )
done
