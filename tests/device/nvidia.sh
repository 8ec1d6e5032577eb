#!/usr/bin/env bash
# Checks corral's nvidia backend against the real thing, on a machine with
# NVIDIA GPUs and their driver: builds corral, then compares what
# `corral hw --json` says with nvidia-smi (count, UUIDs, names, memory, PCI
# addresses, driver, compute capability, MIG instances, the NV# matrix of
# `nvidia-smi topo -m`), checks the sysfs fallback finds the same GPUs
# without NVML, and that `corral hw --isolate 0` makes PyTorch see exactly
# one GPU, the right one.
#
# Prints one PASS, FAIL, SKIP or INFO line per check and exits non-zero
# when any check failed (2 when the machine cannot run the checks at all).
# Run from anywhere: tests/device/nvidia.sh [OUTDIR]
set -u
cd "$(dirname "$0")/../.." || exit 2
out=${1:-$(mktemp -d /tmp/corral-nvidia-check.XXXXXX)}
mkdir -p "$out"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skip() { echo "SKIP: $*"; }
info() { echo "INFO: $*"; }

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "FAIL: nvidia-smi not found: this check needs a machine with NVIDIA GPUs and their driver"
    exit 2
fi
if ! nvidia-smi -L >"$out/smi-L.txt" 2>&1; then
    echo "FAIL: nvidia-smi -L failed: $(head -1 "$out/smi-L.txt")"
    exit 2
fi
# a python with the json module (any python3) for the comparisons
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "FAIL: python3 not found (needed to compare JSON)"; exit 2; }

echo "== build (make build), log in $out/build.log"
if make build >"$out/build.log" 2>&1; then
    pass "make build"
else
    echo "FAIL: make build; last lines of $out/build.log:"
    tail -20 "$out/build.log"
    exit 2
fi
C=build/corral

echo "== corral and nvidia-smi, outputs in $out"
unset CUDA_VISIBLE_DEVICES CORRAL_NVML_LIBRARY CORRAL_CUDA_VISIBLE_BY CORRAL_SYSFS_ROOT
if $C hw --json >"$out/hw.json" 2>"$out/hw.err"; then
    pass "corral hw --json"
else
    fail "corral hw --json exited $?: $(head -3 "$out/hw.err")"
fi
$C hw >"$out/hw.txt" 2>&1 && cat "$out/hw.txt"
$C topo >"$out/topo.txt" 2>&1 || info "corral topo: $(head -1 "$out/topo.txt")"
cat "$out/topo.txt"
nvidia-smi -q >"$out/smi-q.txt" 2>&1
nvidia-smi topo -m >"$out/smi-topo.txt" 2>&1
nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,driver_version,compute_cap \
    --format=csv,noheader,nounits >"$out/smi-gpus.csv" 2>&1 ||
    nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,driver_version \
        --format=csv,noheader,nounits >"$out/smi-gpus.csv" 2>&1
cat "$out/smi-topo.txt"

echo "== compare"
"$PY" - "$out" <<'EOF' || fails=$((fails + 1))
import json, re, sys
out = sys.argv[1]
bad = 0
def ok(m): print("PASS: " + m)
def no(m):
    global bad
    bad += 1
    print("FAIL: " + m)
def busid(s):
    m = re.match(r"^(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$", s.strip())
    if not m:
        return s.strip().lower()
    return "%04x:%s:%s.%s" % (int(m.group(1) or "0", 16), m.group(2).lower(), m.group(3).lower(), m.group(4))
try:
    node = json.load(open(out + "/hw.json"))
except Exception as e:
    print("FAIL: corral hw --json is not JSON: %s" % e)
    sys.exit(1)
devs = [d for d in node["devices"] if d["backend"] == "nvidia"]
gpus = [d for d in devs if d["parent"] < 0]
migs = [d for d in devs if d["parent"] >= 0]
rows = []
for line in open(out + "/smi-gpus.csv"):
    f = [x.strip() for x in line.split(",")]
    if len(f) >= 6 and f[0].isdigit():
        rows.append(f)
(ok if len(gpus) == len(rows) else no)("GPU count: corral %d, nvidia-smi %d" % (len(gpus), len(rows)))
by_index = {d["vendor_index"]: d for d in gpus}
for f in rows:
    i = int(f[0])
    d = by_index.get(i)
    if d is None:
        no("GPU %d: nvidia-smi lists it, corral does not" % i)
        continue
    checks = [
        ("UUID", d["uuid"], f[1]),
        ("name", d["product"], f[2]),
        ("PCI address", d["pci"], busid(f[4])),
        ("driver", d["driver"], f[5]),
    ]
    if len(f) > 6 and re.match(r"^\d+\.\d+$", f[6]):
        checks.append(("compute capability", d["compute_capability"], f[6]))
    for what, mine, theirs in checks:
        (ok if mine == theirs else no)("GPU %d %s: corral '%s', nvidia-smi '%s'" % (i, what, mine, theirs))
    mib = d["memory"] // (1 << 20)
    try:
        smi_mib = int(float(f[3]))
        (ok if abs(mib - smi_mib) <= 1 else no)("GPU %d memory: corral %d MiB, nvidia-smi %d MiB" % (i, mib, smi_mib))
    except ValueError:
        print("SKIP: GPU %d memory: nvidia-smi says '%s'" % (i, f[3]))
    print("INFO: GPU %d: sku %s, %d SMs, numa %d, health %s%s, isolation id %s" % (
        i, d["sku"] or "?", d["compute_units"], d["numa"], d["health"],
        " (%s)" % d["health_reason"] if d["health_reason"] else "", d["isolation_id"]))
    if d["health"] == "unhealthy":
        no("GPU %d is unhealthy according to corral: %s" % (i, d["health_reason"]))

# MIG instances: nvidia-smi -L lists "  MIG 1g.10gb Device 0: (UUID: MIG-...)"
smi_migs = re.findall(r"MIG\s+(\S+)\s+Device\s+\d+:\s+\(UUID:\s+(MIG-[^)\s]+)\)", open(out + "/smi-L.txt").read())
mine = sorted((d["mig_profile"], d["uuid"]) for d in migs)
(ok if mine == sorted(smi_migs) else no)("MIG instances (profile, UUID): corral %s, nvidia-smi %s" % (mine, sorted(smi_migs)))

# NV# matrix: nvidia-smi topo -m rows "GPUi  X  NV18 ..."
# (some versions underline the header with terminal escapes even into a file)
lines = [re.sub(r"\x1b\[[0-9;]*m", "", l.rstrip("\n")) for l in open(out + "/smi-topo.txt")]
head = next((l.split() for l in lines if re.match(r"^\s+GPU0\b", l)), None)
if head is None:
    print("SKIP: NV# matrix: no GPU0 header in nvidia-smi topo -m")
else:
    cols = [c for c in head if re.match(r"^GPU\d+$", c)]
    links = {}
    for l in node["links"]:
        links[(l["a"], l["b"])] = l
    seen, bad_before = 0, bad
    for l in lines:
        f = l.split()
        if not f or l[:1].isspace() or not re.match(r"^GPU\d+$", f[0]):
            continue  # the header starts with whitespace; rows with their name
        i = int(f[0][3:])
        for k, c in enumerate(cols):
            j = int(c[3:])
            if j <= i or k + 1 >= len(f):
                continue
            cell = f[k + 1]
            a, b = by_index.get(i), by_index.get(j)
            if a is None or b is None:
                continue
            key = (min(a["index"], b["index"]), max(a["index"], b["index"]))
            l2 = links.get(key)
            have = "NV%d" % l2["count"] if l2 and l2["kind"] in ("nvlink", "nvswitch") else "-"
            want = cell if cell.startswith("NV") else "-"
            seen += 1
            if have != want:
                no("GPU%d-GPU%d: corral %s, nvidia-smi %s" % (i, j, have, cell))
    if not seen:
        print("SKIP: NV# matrix: fewer than two GPUs")
    elif bad == bad_before:
        ok("NV# matrix: all %d GPU pairs agree with nvidia-smi topo -m" % seen)
sys.exit(1 if bad else 0)
EOF

echo "== sysfs fallback (CORRAL_NVML_LIBRARY=/nonexistent)"
if CORRAL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 $C hw --json >"$out/hw-sysfs.json" 2>"$out/hw-sysfs.err"; then
    "$PY" - "$out" <<'EOF' || fails=$((fails + 1))
import json, sys
out = sys.argv[1]
a = [d for d in json.load(open(out + "/hw.json"))["devices"] if d["backend"] == "nvidia" and d["parent"] < 0]
b = [d for d in json.load(open(out + "/hw-sysfs.json"))["devices"] if d["backend"] == "nvidia"]
bad = 0
for what, f in (("count", lambda l: len(l)), ("PCI addresses", lambda l: sorted(d["pci"] for d in l)),
                ("types", lambda l: sorted(d["sku"] for d in l))):
    x, y = f(a), f(b)
    print(("PASS" if x == y else "FAIL") + ": sysfs fallback %s: with NVML %s, without %s" % (what, x, y))
    bad += x != y
sys.exit(1 if bad else 0)
EOF
else
    fail "corral hw --json without NVML exited $?: $(head -3 "$out/hw-sysfs.err")"
fi

echo "== corral hw --check"
$C hw --check >"$out/check.txt" 2>&1
info "corral hw --check exited $? (1 means it found something): see below"
cat "$out/check.txt"

echo "== isolation: corral hw --isolate 0"
# a torch built with CUDA (Debian's python3-torch is a CPU-only build)
torch_py="" torch_why="torch is not installed for /usr/bin/python3 or python3"
for py in /usr/bin/python3 python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 3)' >/dev/null 2>&1
    case $? in
    0) torch_py=$py; break ;;
    3) torch_why="torch for $py is a CPU-only build" ;;
    esac
done
for by in uuid index; do
    if ! CORRAL_CUDA_VISIBLE_BY=$by $C hw --isolate 0 >"$out/isolate-$by.txt" 2>&1; then
        fail "corral hw --isolate 0 (by $by): $(head -1 "$out/isolate-$by.txt")"
        continue
    fi
    cvd=$(sed -n 's/^CUDA_VISIBLE_DEVICES=//p' "$out/isolate-$by.txt")
    order=$(sed -n 's/^CUDA_DEVICE_ORDER=//p' "$out/isolate-$by.txt")
    want=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1]))["devices"][0]; print(d["uuid"] if sys.argv[2]=="uuid" or d["parent"]>=0 else d["isolation_id"])' "$out/hw.json" "$by" 2>/dev/null)
    if [ -n "$cvd" ] && [ "$order" = PCI_BUS_ID ]; then
        pass "isolate 0 by $by: CUDA_VISIBLE_DEVICES=$cvd CUDA_DEVICE_ORDER=$order"
    else
        fail "isolate 0 by $by: CUDA_VISIBLE_DEVICES='$cvd' CUDA_DEVICE_ORDER='$order'"
    fi
    [ "$by" = uuid ] && { [ "$cvd" = "$want" ] && pass "isolate 0 names device 0's UUID" || fail "isolate 0 gave '$cvd', device 0's UUID is '$want'"; }
    if [ -z "$torch_py" ]; then
        skip "$torch_why: PyTorch check by $by not run"
        continue
    fi
    got=$(env CUDA_VISIBLE_DEVICES="$cvd" CUDA_DEVICE_ORDER="$order" "$torch_py" -c '
import torch
n = torch.cuda.device_count()
u = ""
if n:
    p = torch.cuda.get_device_properties(0)
    u = str(getattr(p, "uuid", ""))
print(n, u)' 2>"$out/torch-$by.err")
    count=${got%% *}
    tuuid=${got#* }
    if [ "$count" = 1 ]; then
        pass "PyTorch under isolate 0 (by $by) sees 1 GPU"
    else
        fail "PyTorch under isolate 0 (by $by) sees '$count' GPUs: $(tail -1 "$out/torch-$by.err")"
    fi
    dev0=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["devices"][0]["uuid"])' "$out/hw.json")
    if [ -n "$tuuid" ] && [ "$count" = 1 ]; then
        [ "GPU-$tuuid" = "$dev0" ] || [ "$tuuid" = "$dev0" ] &&
            pass "PyTorch's GPU 0 (by $by) is corral's device 0 ($dev0)" ||
            fail "PyTorch's GPU 0 (by $by) has UUID $tuuid, corral's device 0 is $dev0"
    fi
done

echo "== done: outputs in $out"
if [ "$fails" -gt 0 ]; then
    echo "FAIL: $fails check group(s) failed"
    exit 1
fi
echo "PASS: all checks"
exit 0
