#!/bin/bash
# corral conformance without real hardware: what it can be tested for here.
#  - usage errors;
#  - a machine without accelerators (the cpu-only fixture, and this machine
#    when it has no NVIDIA tool) says so, verifies nothing, exits 77, and
#    its JSON and JUnit reports say the same;
#  - the dgx-h100 fixture through the stand-in NVML, against a stand-in
#    nvidia-smi that prints the fixture's facts (nvml.json) in nvidia-smi's
#    formats: discovery and topology pass, but the run is marked not real
#    hardware and exits 77; a stand-in that disagrees (one UUID, one NVLink
#    count) gets one FAIL line per mismatch and exit 1.
# What this cannot test: a real driver, CUDA's isolation (no libcuda here),
# the other vendors' tools. docs/hardware.md keeps the maturity table.
set -u
: "${CORRAL:?}" "${CORRAL_SOURCE_DIR:?}"
BUILD=${CORRAL_BUILD_DIR:-$CORRAL_SOURCE_DIR/build}
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
has() { grep -qF -- "$2" "$1" || fail "$3: output lacks '$2': $(cat "$1")"; }

# ---- usage ----
"$CORRAL" conformance --json --junit "$tmp/x.xml" >"$tmp/out" 2>&1
[ $? -eq 2 ] || fail "--json with --junit: want exit 2"
has "$tmp/out" "one at a time" "--json with --junit"
"$CORRAL" conformance --backend frobnicator >"$tmp/out" 2>&1
[ $? -eq 2 ] || fail "--backend frobnicator: want exit 2"
has "$tmp/out" "no backend 'frobnicator'" "unknown backend"
"$CORRAL" conformance --help >"$tmp/out" 2>&1 || fail "--help: exit $?"
has "$tmp/out" "usage: corral conformance" "--help"

# ---- no accelerator ----
fixture() { # machine: the fixture's environment, as scripts/fixture-env.sh prints it
    eval "$("$CORRAL_SOURCE_DIR/scripts/fixture-env.sh" "$1" "$BUILD")"
}
(fixture cpu-only && "$CORRAL" conformance >"$tmp/cpu.txt" 2>&1)
rc=$?
[ "$rc" -eq 77 ] || fail "cpu-only: exit $rc, want 77"
has "$tmp/cpu.txt" "no accelerator on this machine: nothing verified" "cpu-only"
has "$tmp/cpu.txt" "not verified" "cpu-only"
(fixture cpu-only && "$CORRAL" conformance --json >"$tmp/cpu.json" 2>/dev/null)
$PY - "$tmp/cpu.json" <<'EOF' || fail "cpu-only --json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["schema"] == "corral.conformance/v1" and j["verified"] is False, j
assert j["real_hardware"] is False and "CORRAL_SYSFS_ROOT" in j["why_not_real"], j
assert j["checks"] == [], j["checks"]
EOF
(fixture cpu-only && "$CORRAL" conformance --junit "$tmp/cpu.xml" >/dev/null 2>&1)
$PY -c 'import sys, xml.etree.ElementTree as E; t = E.parse(sys.argv[1]).getroot(); assert t.tag == "testsuite" and t.get("tests") == "0", t.attrib' \
    "$tmp/cpu.xml" || fail "cpu-only --junit"
# this machine, when it is one without NVIDIA's tool (the usual CI box)
if ! command -v nvidia-smi >/dev/null 2>&1 && [ ! -d /sys/class/kfd ] && [ ! -d /dev/accel ]; then
    env -u CORRAL_SYSFS_ROOT -u CORRAL_HWLOC_XML -u CORRAL_NVML_LIBRARY "$CORRAL" conformance \
        >"$tmp/here.txt" 2>&1
    rc=$?
    [ "$rc" -eq 77 ] || fail "this machine: exit $rc, want 77: $(cat "$tmp/here.txt")"
    grep -q "nothing verified" "$tmp/here.txt" || fail "this machine: does not say nothing is verified"
fi

# ---- the dgx-h100 fixture against a stand-in nvidia-smi ----
# It prints nvml.json's GPUs as `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`
# does (00000000:1B:00.0 bus ids) and the NV18 matrix of `nvidia-smi topo -m`, with
# the escape codes nvidia-smi puts in its header; $FAKE_SMI_EDIT changes one fact.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env python3
import json, os, sys
j = json.load(open(os.environ["CORRAL_NVML_STUB"]))
gpus = j["devices"]
edit = os.environ.get("FAKE_SMI_EDIT", "")
if any(a.startswith("--query-gpu") for a in sys.argv[1:]):
    for i, g in enumerate(gpus):
        uuid = g["uuid"]
        if edit == "uuid" and i == 3:
            uuid = "GPU-00000000-0000-0000-0000-000000000003"
        dom, bus = g["pci"].split(":", 1)
        print("%d, %s, %s, %d, %08X:%s, %s" % (i, uuid, g["name"], g["memory_mib"], int(dom, 16),
                                              bus.upper(), j["driver_version"]))
elif sys.argv[1:3] == ["topo", "-m"]:
    n = len(gpus)
    print("\t" + "\t".join("\x1b[4mGPU%d\x1b[0m" % i for i in range(n)) +
          "\t\x1b[4mCPU Affinity\x1b[0m\t\x1b[4mNUMA Affinity\x1b[0m")
    for i in range(n):
        cells = ["X" if i == k else "NV18" for k in range(n)]
        if edit == "nvlink" and i in (1, 2):
            cells[3 - i] = "NV12"
        print("GPU%d\t %s\t0-55\t0" % (i, "\t".join(cells)))
    print("\nLegend:\n\n  X    = Self")
else:
    sys.exit("fake nvidia-smi: unexpected arguments %s" % sys.argv[1:])
EOF
chmod +x "$tmp/bin/nvidia-smi"
run_dgx() { # out-file [FAKE_SMI_EDIT]
    (fixture dgx-h100 && export FAKE_SMI_EDIT=${2:-} PATH="$tmp/bin:$PATH" &&
        "$CORRAL" conformance --backend nvidia >"$1" 2>&1)
}
run_dgx "$tmp/dgx.txt"
rc=$?
[ "$rc" -eq 77 ] || fail "dgx fixture: exit $rc, want 77 (not real hardware): $(cat "$tmp/dgx.txt")"
has "$tmp/dgx.txt" "not real hardware (CORRAL_SYSFS_ROOT is set" "dgx fixture"
has "$tmp/dgx.txt" "PASS: nvidia discovery: 8 GPUs: UUID, name, PCI address, memory and driver as nvidia-smi says" "dgx fixture"
has "$tmp/dgx.txt" "PASS: nvidia topology: 28 GPU pairs: every NV# of nvidia-smi topo -m is corral's NVLink" "dgx fixture"
has "$tmp/dgx.txt" "SKIP: nvidia isolation: no CUDA driver library (libcuda.so.1)" "dgx fixture"
has "$tmp/dgx.txt" "PASS: nvidia telemetry: 8 devices read" "dgx fixture"
has "$tmp/dgx.txt" "INFO: nvidia versions: SKU H100, driver 550.54.15" "dgx fixture"
has "$tmp/dgx.txt" "not verified" "dgx fixture"
run_dgx "$tmp/bad.txt" uuid
rc=$?
[ "$rc" -eq 1 ] || fail "dgx, a wrong UUID: exit $rc, want 1"
has "$tmp/bad.txt" "FAIL: nvidia discovery: GPU 3: UUID: nvidia-smi says GPU-00000000-0000-0000-0000-000000000003, corral GPU-" "dgx, a wrong UUID"
[ "$(grep -c '^FAIL' "$tmp/bad.txt")" -eq 1 ] || fail "dgx, a wrong UUID: want one FAIL line: $(cat "$tmp/bad.txt")"
run_dgx "$tmp/nv.txt" nvlink
rc=$?
[ "$rc" -eq 1 ] || fail "dgx, an NVLink count: exit $rc, want 1"
has "$tmp/nv.txt" "FAIL: nvidia topology: GPU1-GPU2: nvidia-smi topo -m says NV12, corral NV18" "dgx, an NVLink count"
(fixture dgx-h100 && export PATH="$tmp/bin:$PATH" &&
    "$CORRAL" conformance --junit "$tmp/dgx.xml" >/dev/null 2>&1)
$PY - "$tmp/dgx.xml" <<'EOF' || fail "dgx --junit"
import sys, xml.etree.ElementTree as E
t = E.parse(sys.argv[1]).getroot()
cases = t.findall("testcase")
assert t.get("failures") == "0" and len(cases) == int(t.get("tests")) == 6, t.attrib
# not real hardware: every case is skipped, whatever it found
assert all(c.find("skipped") is not None for c in cases)
assert "not this machine" in cases[0].find("skipped").get("message")
EOF

if [ "$fails" -ne 0 ]; then
    echo "conformance.sh: $fails failure(s)" >&2
    exit 1
fi
echo "conformance.sh: ok"
