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
#  - trn1-32xlarge, gaudi2-8, intel-max-1100-2, mi300x-8 and tpu-v6e-4x4-w0
#    against stand-ins of neuron-ls, hl-smi, xpu-smi, amd-smi and tpu-info
#    that print the recorded outputs of tests/fixtures/vendor-tools/: the
#    matching capture passes (exit 77: not real hardware), the mismatched
#    one fails with one line per difference (exit 1).
#  - isolation for those five: the probe, run by the real interpreter
#    (CORRAL_CONFORMANCE_PYTHON) under corral hw --isolate's environment,
#    against stand-ins of PyTorch-ROCm, torch.xpu, sycl-ls, JAX, torch_xla
#    and habana_frameworks that read the variables as the vendors document:
#    PASS for one device and for two; a stand-in ignoring the variable (or,
#    for AMD, always giving the first devices) fails with a line per subset.
# What this cannot test: a real driver, CUDA's isolation (no libcuda here),
# the vendors' real tools and runtimes. docs/hardware.md keeps the maturity table.
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

# ---- AMD, Intel, TPU, Neuron, Gaudi against their tools' recorded outputs ----
# The stand-ins print tests/fixtures/vendor-tools/<machine>/ (README.md there
# names the source of each format) for exactly the command line corral runs,
# and refuse any other; VENDOR_VARIANT=-mismatch prints the capture with facts
# changed on purpose.
cat >"$tmp/bin/vendor-tool" <<'EOF'
#!/bin/sh
d=${VENDOR_CAPTURES:?}
v=${VENDOR_VARIANT:-}
case "$(basename "$0") $*" in
"neuron-ls --json-output") f=neuron-ls$v.json ;;
"hl-smi -Q index,module_id,bus_id,name -f csv,noheader") f=hl-smi$v.csv ;;
"xpu-smi discovery -j") f=xpu-smi-discovery$v.json ;;
"amd-smi list --json") f=amd-smi-list$v.json ;;
"amd-smi static --asic --json") f=amd-smi-static$v.json ;;
"amd-smi topology --json") f=amd-smi-topology$v.json ;;
"tpu-info ") f=tpu-info$v.txt ;;
"rocm-smi --showbus --json") f=rocm-smi-showbus$v.json ;;
"amd-smi version --json") f=amd-smi-version.json ;;
"hl-smi -Q driver_version -f csv,noheader") f=hl-smi-driver.csv ;;
*) echo "stand-in $(basename "$0"): unexpected arguments: $*" >&2; exit 2 ;;
esac
exec cat "$d/$f"
EOF
chmod +x "$tmp/bin/vendor-tool"
mkdir -p "$tmp/vbin"
for t in neuron-ls hl-smi xpu-smi amd-smi tpu-info; do ln -s ../bin/vendor-tool "$tmp/vbin/$t"; done
mkdir -p "$tmp/rbin" # older ROCm: rocm-smi, no amd-smi
ln -s ../bin/vendor-tool "$tmp/rbin/rocm-smi"
run_vendor() { # machine backend out-file [variant] [captures]
    (fixture "$1" &&
        export VENDOR_CAPTURES="${5:-$CORRAL_SOURCE_DIR/tests/fixtures/vendor-tools/$1}" \
            VENDOR_VARIANT="${4:-}" PATH="$tmp/vbin:$PATH" &&
        "$CORRAL" conformance --backend "$2" >"$3" 2>&1)
}
vendor_case() { # machine backend pass-line fail-line... (lines the outputs must hold)
    m=$1 be=$2 pass=$3
    shift 3
    run_vendor "$m" "$be" "$tmp/$m.txt"
    rc=$?
    [ "$rc" -eq 77 ] || fail "$m: exit $rc, want 77 (tool agrees, not real hardware): $(cat "$tmp/$m.txt")"
    has "$tmp/$m.txt" "$pass" "$m"
    if grep -q '^FAIL' "$tmp/$m.txt"; then
        fail "$m: a FAIL line against the matching capture: $(cat "$tmp/$m.txt")"
    fi
    run_vendor "$m" "$be" "$tmp/$m-bad.txt" -mismatch
    rc=$?
    [ "$rc" -eq 1 ] || fail "$m, mismatched capture: exit $rc, want 1: $(cat "$tmp/$m-bad.txt")"
    want=$#
    for line in "$@"; do
        has "$tmp/$m-bad.txt" "$line" "$m, mismatched capture"
    done
    got=$(grep -c '^FAIL' "$tmp/$m-bad.txt")
    [ "$got" -eq "$want" ] || fail "$m, mismatched capture: $got FAIL lines, want $want: $(cat "$tmp/$m-bad.txt")"
}
vendor_case trn1-32xlarge neuron \
    "PASS: neuron discovery: 16 devices: PCI address and NeuronCores as neuron-ls says" \
    "FAIL: neuron discovery: device 9: NeuronCores: neuron-ls says 1 (nc_count), corral 2" \
    "FAIL: neuron topology: device 5: neuron-ls connects it to 1,4,8,9, corral to 1,4,6,9"
has "$tmp/trn1-32xlarge.txt" "PASS: neuron topology: 16 devices: every device's NeuronLink peers are neuron-ls's connected_to (64 in all)" "trn1-32xlarge"
vendor_case gaudi2-8 gaudi \
    "PASS: gaudi discovery: 8 devices: PCI address, module id and name as hl-smi says" \
    "FAIL: gaudi discovery: 0000:19:00.0: module id: hl-smi says 3, corral 2" \
    "FAIL: gaudi discovery: 0000:1a:00.0: module id: hl-smi says 2, corral 3"
has "$tmp/gaudi2-8.txt" "INFO: gaudi versions: hl-smi says driver 1.18.0-ee698fb" "gaudi2-8"
vendor_case intel-max-1100-2 intel \
    "PASS: intel discovery: 2 cards: PCI address and name as xpu-smi says (corral: 2 devices on them)" \
    "FAIL: intel discovery: xpu-smi shows device 1 at 0000:9b:00.0 (Intel(R) Data Center GPU Max 1100); corral has none there"
vendor_case mi300x-8 amd \
    "PASS: amd discovery: 8 devices (no partitions): PCI address, partition and name as amd-smi says" \
    "FAIL: amd discovery: GPU 2 (0000:46:00.0): name: amd-smi says AMD Instinct MI308X, corral AMD Instinct MI300X" \
    "FAIL: amd discovery: amd-smi shows 7 GPUs and partitions, corral 8" \
    "FAIL: amd topology: GPU 2 (0000:46:00.0): amd-smi shows XGMI to GPUs 0,1,3,4,6, corral xGMI links to 0,1,3,4,5,6" \
    "FAIL: amd topology: GPU 5 (0000:a5:00.0): amd-smi shows XGMI to GPUs 0,1,3,4,6, corral xGMI links to 0,1,2,3,4,6"
has "$tmp/mi300x-8.txt" "INFO: amd versions: amd-smi says ROCm 6.2.4, amdgpu 6.8.5, AMD SMI library 24.6.3" "mi300x-8"
has "$tmp/mi300x-8.txt" "PASS: amd topology: 8 devices: every XGMI pair of amd-smi topology is a corral xGMI link (28 in all)" "mi300x-8"
vendor_case tpu-v6e-4x4-w0 tpu \
    "PASS: tpu discovery: 4 chips: device numbers and type as tpu-info says" \
    "FAIL: tpu discovery: chip 3: type: tpu-info says v5e, corral v6e"
# the TPU slice against a stand-in GCE metadata server on this machine: it
# answers GET /computeMetadata/v1/instance/attributes/<name> (with the
# Metadata-Flavor: Google header, as Ray and PyTorch/XLA send it) from the
# files of the folder named in $tmp/gce-dir, and 404 for others
cat >"$tmp/gce.py" <<'EOF'
import http.server, os, sys
ctl, portfile = sys.argv[1], sys.argv[2]
PREFIX = "/computeMetadata/v1/instance/attributes/"
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        name = self.path[len(PREFIX):] if self.path.startswith(PREFIX) else ""
        path = os.path.join(open(ctl).read().strip(), name)
        if self.headers.get("Metadata-Flavor") != "Google":
            self.send_error(403)
        elif not name or "/" in name or not os.path.isfile(path):
            self.send_error(404)
        else:
            body = open(path, "rb").read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(portfile + ".new", "w") as f:
    f.write(str(s.server_address[1]))
os.rename(portfile + ".new", portfile)
s.serve_forever()
EOF
gce_pid=
stop_gce() { [ -n "$gce_pid" ] && kill "$gce_pid" 2>/dev/null && wait "$gce_pid" 2>/dev/null; gce_pid=; }
trap 'stop_gce; rm -rf "$tmp"' EXIT
echo "$CORRAL_SOURCE_DIR/tests/fixtures/vendor-tools/tpu-v6e-4x4-w0/gce-metadata" >"$tmp/gce-dir"
$PY "$tmp/gce.py" "$tmp/gce-dir" "$tmp/gce-port" &
gce_pid=$!
for _ in $(seq 1 600); do [ -s "$tmp/gce-port" ] && break; sleep 0.1; done
if [ -s "$tmp/gce-port" ]; then
    run_gce() { # out-file
        (fixture tpu-v6e-4x4-w0 &&
            export CORRAL_GCE_METADATA="127.0.0.1:$(cat "$tmp/gce-port")" PATH="$tmp/vbin:$PATH" \
                VENDOR_CAPTURES="$CORRAL_SOURCE_DIR/tests/fixtures/vendor-tools/tpu-v6e-4x4-w0" &&
            "$CORRAL" conformance --backend tpu >"$1" 2>&1)
    }
    run_gce "$tmp/gce.txt"
    rc=$?
    [ "$rc" -eq 77 ] || fail "tpu slice: exit $rc, want 77: $(cat "$tmp/gce.txt")"
    has "$tmp/gce.txt" "PASS: tpu topology: slice v6e-s1: v6e-16, 4x4, worker 0 as the GCE metadata server says" "tpu slice"
    echo "$CORRAL_SOURCE_DIR/tests/fixtures/vendor-tools/tpu-v6e-4x4-w0/gce-metadata-mismatch" >"$tmp/gce-dir"
    run_gce "$tmp/gce-bad.txt"
    rc=$?
    [ "$rc" -eq 1 ] || fail "tpu slice, mismatched metadata: exit $rc, want 1: $(cat "$tmp/gce-bad.txt")"
    has "$tmp/gce-bad.txt" "FAIL: tpu topology: slice v6e-s1: topology (tpu-env TOPOLOGY): the metadata server says 2x8, corral 4x4" "tpu slice, mismatched metadata"
    has "$tmp/gce-bad.txt" "FAIL: tpu topology: slice v6e-s1: worker id (agent-worker-number): the metadata server says 1, corral 0" "tpu slice, mismatched metadata"
    [ "$(grep -c '^FAIL' "$tmp/gce-bad.txt")" -eq 2 ] || fail "tpu slice, mismatched metadata: want two FAIL lines: $(cat "$tmp/gce-bad.txt")"
else
    fail "the stand-in metadata server did not start"
fi
stop_gce
has "$tmp/tpu-v6e-4x4-w0.txt" "SKIP: tpu topology: not a GCE VM, or CORRAL_GCE_METADATA=off: slice v6e-s1 not compared with the metadata server's" "tpu, metadata off"
# older ROCm: rocm-smi's PCI Bus per card, without amd-smi
for variant in "" -mismatch; do
    (fixture mi300x-8 && export PATH="$tmp/rbin:$PATH" VENDOR_VARIANT="$variant" \
        VENDOR_CAPTURES="$CORRAL_SOURCE_DIR/tests/fixtures/vendor-tools/mi300x-8" &&
        "$CORRAL" conformance --backend amd >"$tmp/rocm$variant.txt" 2>&1)
    echo $? >"$tmp/rocm$variant.rc"
done
[ "$(cat "$tmp/rocm.rc")" -eq 77 ] || fail "rocm-smi: exit $(cat "$tmp/rocm.rc"), want 77: $(cat "$tmp/rocm.txt")"
has "$tmp/rocm.txt" "PASS: amd discovery: 8 GPUs: PCI addresses as rocm-smi --showbus says (amd-smi is not installed: partitions and names not compared)" "rocm-smi"
[ "$(cat "$tmp/rocm-mismatch.rc")" -eq 1 ] || fail "rocm-smi, mismatched: exit $(cat "$tmp/rocm-mismatch.rc"), want 1"
has "$tmp/rocm-mismatch.txt" "FAIL: amd discovery: rocm-smi shows card3 at 0000:66:00.0; corral has no GPU there" "rocm-smi, mismatched"
has "$tmp/rocm-mismatch.txt" "FAIL: amd discovery: corral has a GPU at 0000:65:00.0; rocm-smi shows none" "rocm-smi, mismatched"
[ "$(grep -c '^FAIL' "$tmp/rocm-mismatch.txt")" -eq 2 ] || fail "rocm-smi, mismatched: want two FAIL lines: $(cat "$tmp/rocm-mismatch.txt")"
# partitions: the MI308X CPX capture (KFD topology only: no hwloc recording,
# no amd-smi static, so names are not compared)
mkdir -p "$tmp/cpx"
tar -xzf "$CORRAL_SOURCE_DIR/tests/fixtures/hw/mi308x-cpx/kfd-topology.tar.gz" -C "$tmp/cpx" ||
    fail "cannot unpack the mi308x-cpx capture"
run_cpx() { # out-file [variant]
    (export CORRAL_SYSFS_ROOT="$tmp/cpx" VENDOR_VARIANT="${2:-}" PATH="$tmp/vbin:$PATH" \
        VENDOR_CAPTURES="$CORRAL_SOURCE_DIR/tests/fixtures/vendor-tools/mi308x-cpx" &&
        unset CORRAL_HWLOC_XML CORRAL_NVML_LIBRARY &&
        "$CORRAL" conformance --backend amd >"$1" 2>&1)
}
run_cpx "$tmp/cpx.txt"
rc=$?
[ "$rc" -eq 77 ] || fail "mi308x-cpx: exit $rc, want 77: $(cat "$tmp/cpx.txt")"
has "$tmp/cpx.txt" "PASS: amd discovery: 32 devices (partitioned): PCI address, partition as amd-smi says" "mi308x-cpx"
has "$tmp/cpx.txt" "INFO: amd discovery: amd-smi static --asic --json failed: product names not compared" "mi308x-cpx"
run_cpx "$tmp/cpx-bad.txt" -mismatch
rc=$?
[ "$rc" -eq 1 ] || fail "mi308x-cpx, mismatched: exit $rc, want 1: $(cat "$tmp/cpx-bad.txt")"
has "$tmp/cpx-bad.txt" "FAIL: amd discovery: amd-smi shows GPU 5 at 0000:80:00.0, partition 5; corral has none there" "mi308x-cpx, mismatched"
[ "$(grep -c '^FAIL' "$tmp/cpx-bad.txt")" -eq 1 ] || fail "mi308x-cpx, mismatched: want one FAIL line: $(cat "$tmp/cpx-bad.txt")"
# a tool printing what corral cannot read: a FAIL saying what was expected
mkdir -p "$tmp/garbled"
printf '0, 2, 0000:19:00.0\n' >"$tmp/garbled/hl-smi.csv"
run_vendor gaudi2-8 gaudi "$tmp/garbled.txt" "" "$tmp/garbled"
rc=$?
[ "$rc" -eq 1 ] || fail "gaudi, a garbled hl-smi: exit $rc, want 1"
has "$tmp/garbled.txt" "FAIL: gaudi discovery: hl-smi line 1 ('0, 2, 0000:19:00.0'): not index, module_id, bus_id, name" "gaudi, a garbled hl-smi"
# a tool that fails (the stand-in finds no capture in that folder): FAIL
run_vendor trn1-32xlarge neuron "$tmp/nl-fails.txt" "" "$tmp/garbled"
rc=$?
[ "$rc" -eq 1 ] || fail "neuron-ls failing: exit $rc, want 1"
has "$tmp/nl-fails.txt" "FAIL: neuron discovery: neuron-ls --json-output exited non-zero" "neuron-ls failing"
has "$tmp/nl-fails.txt" "INFO: neuron discovery: Neuron 2.34 and later print JSON with --output-format json" "neuron-ls failing"
# without the tool: SKIP, nothing verified
(fixture gaudi2-8 && "$CORRAL" conformance --backend gaudi >"$tmp/notool.txt" 2>&1)
rc=$?
[ "$rc" -eq 77 ] || fail "gaudi without hl-smi: exit $rc, want 77"
has "$tmp/notool.txt" "SKIP: gaudi discovery: hl-smi is not on PATH: nothing to compare with" "gaudi without hl-smi"

# ---- isolation for AMD, Intel, TPU, Neuron, Gaudi: the runtimes' stand-ins ----
# corral conformance runs its probe under CORRAL_CONFORMANCE_PYTHON (the real
# interpreter here) with corral hw --isolate's environment; PYTHONPATH gives
# it the stand-ins of tests/fixtures/vendor-tools/runtimes/ (PyTorch-ROCm,
# torch.xpu, JAX, torch_xla, habana_frameworks; each says which vendor
# document its reading of the variable follows) and PATH a stand-in sycl-ls.
# STANDIN_DEVICES lists the node's devices as the vendor's recorded tool
# output does; STANDIN_WRONG=ignore is a runtime that ignores the variable,
# =first one that sees as many devices as it names but always the first.
RT=$CORRAL_SOURCE_DIR/tests/fixtures/vendor-tools/runtimes
VT=$CORRAL_SOURCE_DIR/tests/fixtures/vendor-tools
run_iso() { # machine backend out-file pythonpath devices [VAR=value...]
    m=$1 be=$2 out=$3 pp=$4 devs=$5
    shift 5
    (fixture "$m" && export CORRAL_CONFORMANCE_PYTHON="$PY" PYTHONPATH="$pp" STANDIN_DEVICES="$devs" \
        STANDIN_WRONG= "$@" && "$CORRAL" conformance --backend "$be" >"$out" 2>&1)
}
iso_case() { # machine backend pythonpath devices pass-line1 pass-line2 fail-line1 [fail-line2] [-- VAR=value...]
    m=$1 be=$2 pp=$3 devs=$4 p1=$5 p2=$6 f1=$7 f2=${8:-}
    shift 8
    [ "${1:-}" = -- ] && shift
    run_iso "$m" "$be" "$tmp/iso-$be.txt" "$pp" "$devs" "$@"
    has "$tmp/iso-$be.txt" "$p1" "$be isolation"
    has "$tmp/iso-$be.txt" "$p2" "$be isolation"
    if grep -q '^FAIL: .* isolation' "$tmp/iso-$be.txt"; then
        fail "$be isolation: a FAIL line against a runtime that honours the variable: $(cat "$tmp/iso-$be.txt")"
    fi
    run_iso "$m" "$be" "$tmp/iso-$be-bad.txt" "$pp" "$devs" "$@" STANDIN_WRONG=ignore
    rc=$?
    [ "$rc" -eq 1 ] || fail "$be isolation, a runtime ignoring the variable: exit $rc, want 1: $(cat "$tmp/iso-$be-bad.txt")"
    has "$tmp/iso-$be-bad.txt" "$f1" "$be isolation, a runtime ignoring the variable"
    want=1
    if [ -n "$f2" ]; then
        has "$tmp/iso-$be-bad.txt" "$f2" "$be isolation, a runtime ignoring the variable"
        want=2
    fi
    got=$(grep -c '^FAIL: .* isolation' "$tmp/iso-$be-bad.txt")
    [ "$got" -eq "$want" ] || fail "$be isolation, a runtime ignoring the variable: $got FAIL lines, want $want: $(cat "$tmp/iso-$be-bad.txt")"
}
amd_bdfs=$($PY -c 'import json, sys; print(",".join(g["bdf"] for g in sorted(json.load(open(sys.argv[1])), key=lambda g: g["gpu"])))' \
    "$VT/mi300x-8/amd-smi-list.json")
iso_case mi300x-8 amd "$RT/rocm" "$amd_bdfs" \
    "PASS: amd isolation: device 1: under HIP_VISIBLE_DEVICES=1 PyTorch (HIP-6.2.41133) sees exactly 1 device (0000:26:00.0)" \
    "PASS: amd isolation: devices 0,1: under HIP_VISIBLE_DEVICES=0,1 PyTorch (HIP-6.2.41133) sees exactly 2 devices (0000:05:00.0,0000:26:00.0)" \
    "FAIL: amd isolation: device 1: under HIP_VISIBLE_DEVICES=1 PyTorch sees 8; want 1 device (0000:26:00.0)" \
    "FAIL: amd isolation: devices 0,1: under HIP_VISIBLE_DEVICES=0,1 PyTorch sees 8; want 2 devices (0000:05:00.0,0000:26:00.0)"
has "$tmp/iso-amd.txt" "INFO: amd versions: SKU MI300X, driver 6.8.5, runtime HIP-6.2.41133" "amd isolation"
# the right count but the wrong device: the PCI address tells
run_iso mi300x-8 amd "$tmp/iso-amd-first.txt" "$RT/rocm" "$amd_bdfs" STANDIN_WRONG=first
rc=$?
[ "$rc" -eq 1 ] || fail "amd isolation, the first devices whatever the variable: exit $rc, want 1"
has "$tmp/iso-amd-first.txt" "FAIL: amd isolation: device 1: under HIP_VISIBLE_DEVICES=1 PyTorch sees 0000:05:00.0; want 0000:26:00.0" "amd isolation, the first devices"
[ "$(grep -c '^FAIL' "$tmp/iso-amd-first.txt")" -eq 1 ] || fail "amd isolation, the first devices: want one FAIL line: $(cat "$tmp/iso-amd-first.txt")"
# with ROCR_VISIBLE_DEVICES as well, HIP counts within what ROCr left
run_iso mi300x-8 amd "$tmp/iso-rocr.txt" "$RT/rocm" "$amd_bdfs" CORRAL_AMD_ROCR_VISIBLE=1
has "$tmp/iso-rocr.txt" "PASS: amd isolation: device 1: under HIP_VISIBLE_DEVICES=0 ROCR_VISIBLE_DEVICES=1 PyTorch (HIP-6.2.41133) sees exactly 1 device (0000:26:00.0)" "amd isolation with ROCR_VISIBLE_DEVICES"
# without PyTorch: SKIP saying why amd-smi does not stand in
run_iso mi300x-8 amd "$tmp/iso-amd-none.txt" "$tmp/none" "$amd_bdfs"
# (this machine's interpreter may have a PyTorch without ROCm: SKIP all the same)
has "$tmp/iso-amd-none.txt" "SKIP: amd isolation: " "amd isolation without PyTorch-ROCm"
has "$tmp/iso-amd-none.txt" "; amd-smi and rocm-smi read the driver, not through HIP or ROCr: they do not honour HIP_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES: isolation not verified" "amd isolation without PyTorch-ROCm"
intel_ids=$($PY -c 'import json, sys; print(",".join(str(d["device_id"]) for d in json.load(open(sys.argv[1]))["device_list"]))' \
    "$VT/intel-max-1100-2/xpu-smi-discovery.json")
ze="ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 ZE_FLAT_DEVICE_HIERARCHY=FLAT"
# two cards, so the pair is the whole node: only the single device can fail
iso_case intel-max-1100-2 intel "$RT/xpu" "$intel_ids" \
    "PASS: intel isolation: device 1: under ZE_AFFINITY_MASK=1 $ze PyTorch (torch.xpu-2.5.1+xpu) sees exactly 1 device" \
    "PASS: intel isolation: devices 0,1: under ZE_AFFINITY_MASK=0,1 $ze PyTorch" \
    "FAIL: intel isolation: device 1: under ZE_AFFINITY_MASK=1 $ze PyTorch sees 2; want 1 device (0000:9a:00.0)" ""
# without PyTorch: sycl-ls's Level Zero devices (its OpenCL ones ignore the mask)
iso_case intel-max-1100-2 intel "$tmp/none" "$intel_ids" \
    "PASS: intel isolation: device 1: under ZE_AFFINITY_MASK=1 $ze sycl-ls (Level Zero) (Level-Zero-1.3.29735) sees exactly 1 device" \
    "INFO: intel versions: SKU Intel-GPU-Max-1100, driver unknown, runtime Level-Zero-1.3.29735" \
    "FAIL: intel isolation: device 1: under ZE_AFFINITY_MASK=1 $ze sycl-ls (Level Zero) sees 2; want 1 device (0000:9a:00.0)" "" \
    -- PATH="$RT/bin:$PATH"
run_iso intel-max-1100-2 intel "$tmp/iso-intel-none.txt" "$tmp/none" "$intel_ids"
has "$tmp/iso-intel-none.txt" "SKIP: intel isolation: " "intel isolation without torch.xpu or sycl-ls"
has "$tmp/iso-intel-none.txt" "; sycl-ls is not on PATH either: isolation not verified" "intel isolation without torch.xpu or sycl-ls"
tpu_chips=$(grep -c 'TPU v6e chip' "$VT/tpu-v6e-4x4-w0/tpu-info.txt")
iso_case tpu-v6e-4x4-w0 tpu "$RT/jax" "$(seq -s, 0 $((tpu_chips - 1)))" \
    "PASS: tpu isolation: device 1: under TPU_VISIBLE_CHIPS=1 TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1 TPU_PROCESS_BOUNDS=1,1,1" \
    "PASS: tpu isolation: devices 0,1: under TPU_VISIBLE_CHIPS=0,1 TPU_CHIPS_PER_PROCESS_BOUNDS=1,2,1" \
    "FAIL: tpu isolation: device 1: under TPU_VISIBLE_CHIPS=1 TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1 TPU_PROCESS_BOUNDS=1,1,1 TPU_CHIPS_PER_HOST_BOUNDS=1,1,1 TPU_HOST_BOUNDS=1,1,1 JAX sees 4; want 1 device" \
    "FAIL: tpu isolation: devices 0,1: under TPU_VISIBLE_CHIPS=0,1"
has "$tmp/iso-tpu.txt" "JAX (jax-0.4.35) sees exactly 2 devices" "tpu isolation"
nc=$($PY -c 'import json, sys; print(sum(d["nc_count"] for d in json.load(open(sys.argv[1]))))' "$VT/trn1-32xlarge/neuron-ls.json")
iso_case trn1-32xlarge neuron "$RT/neuron" "$(seq -s, 0 $((nc - 1)))" \
    "PASS: neuron isolation: device 1: under NEURON_RT_VISIBLE_CORES=2-3 torch_xla (torch_xla-2.1.2) sees exactly 2 NeuronCores" \
    "PASS: neuron isolation: devices 0,1: under NEURON_RT_VISIBLE_CORES=0-3 torch_xla (torch_xla-2.1.2) sees exactly 4 NeuronCores" \
    "FAIL: neuron isolation: device 1: under NEURON_RT_VISIBLE_CORES=2-3 torch_xla sees 32; want 2 NeuronCores (0000:10:1d.0)" \
    "FAIL: neuron isolation: devices 0,1: under NEURON_RT_VISIBLE_CORES=0-3 torch_xla sees 32; want 4 NeuronCores"
modules=$(cut -d, -f2 "$VT/gaudi2-8/hl-smi.csv" | tr -d ' ' | paste -sd, -)
iso_case gaudi2-8 gaudi "$RT/habana" "$modules" \
    "PASS: gaudi isolation: device 1: under HABANA_VISIBLE_MODULES=1 habana_frameworks.torch (habana_frameworks.torch-1.18.0) sees exactly 1 device" \
    "PASS: gaudi isolation: devices 0,1: under HABANA_VISIBLE_MODULES=0,1 habana_frameworks.torch" \
    "FAIL: gaudi isolation: device 1: under HABANA_VISIBLE_MODULES=1 habana_frameworks.torch sees 8; want 1 device (0000:44:00.0)" \
    "FAIL: gaudi isolation: devices 0,1: under HABANA_VISIBLE_MODULES=0,1 habana_frameworks.torch sees 8; want 2 devices"
# an interpreter that is not there: SKIP naming it
run_iso gaudi2-8 gaudi "$tmp/iso-nopy.txt" "$RT/habana" "$modules" CORRAL_CONFORMANCE_PYTHON="$tmp/no-such-python"
has "$tmp/iso-nopy.txt" "SKIP: gaudi isolation: no $tmp/no-such-python to run (CORRAL_CONFORMANCE_PYTHON names another)" "no interpreter"

if [ "$fails" -ne 0 ]; then
    echo "conformance.sh: $fails failure(s)" >&2
    exit 1
fi
echo "conformance.sh: ok"
