#!/bin/bash
# corral topo: usage errors; the text matrix, legends and TPU mesh of saved
# node descriptions (--node, tests/unit/data/topo_*.json) against expected
# output; the JSON form against the text; bad input files; and a simulated
# node from a hardware spec, once spec loading is built.
set -u
: "${CORRAL:?set CORRAL to the built corral}" "${CORRAL_SOURCE_DIR:?}"
DATA=$CORRAL_SOURCE_DIR/tests/unit/data
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# ---- usage errors: exit 2, the usage line on stderr, nothing on stdout ----
expect_usage() {
    "$CORRAL" topo "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" -eq 2 ] || fail "corral topo $*: exit $rc, want 2"
    grep -q '^usage: corral topo ' "$tmp/err" || fail "corral topo $*: no usage line on stderr"
    [ ! -s "$tmp/out" ] || fail "corral topo $*: wrote to stdout"
}
expect_usage --bogus
expect_usage extra-argument
expect_usage --spec
expect_usage --spec a.yaml --root /tmp
expect_usage --node a.json --spec b.json
expect_usage --node a.json --root /tmp
"$CORRAL" topo --help >"$tmp/out" 2>&1 || fail "corral topo --help: exit $?"
grep -q '^usage: corral topo ' "$tmp/out" || fail "--help: no usage line"
grep -q -- '--node FILE' "$tmp/out" || fail "--help: --node not explained"

# ---- text: whole outputs compared ----
expect_text() { # name file
    "$CORRAL" topo --node "$DATA/$2" >"$tmp/$1.txt" 2>"$tmp/err" || fail "$1: exit $?: $(cat "$tmp/err")"
    if ! diff -u "$tmp/$1.want" "$tmp/$1.txt" >"$tmp/diff"; then
        fail "$1: output differs from the expected"
        cat "$tmp/diff" >&2
    fi
}

cat >"$tmp/a100.want" <<'EOF'
node pcie-a100-01 (pcie-a100-01): 4 GPU, 1 NIC

      GPU0  GPU1  GPU2  GPU3  NIC0  CPU Affinity  NUMA Affinity  GPU NUMA ID
GPU0  X     NV12  SYS   SYS   NODE  0-31,64-95    0              N/A
GPU1  NV12  X     SYS   SYS   NODE  0-31,64-95    0              N/A
GPU2  SYS   SYS   X     NV12  SYS   32-63,96-127  1              N/A
GPU3  SYS   SYS   NV12  X     SYS   32-63,96-127  1              N/A
NIC0  NODE  NODE  SYS   SYS   X     0-31,64-95    0              N/A

Legend:

  X    = the device itself
  NV#  = NVLink: # links bonded together, directly or through NVSwitches
  PIX  = PCIe through at most one PCIe switch (or one device's functions)
  PXB  = PCIe through several PCIe switches, without reaching a host bridge
  PHB  = PCIe through a host bridge (the CPU's PCIe root complex)
  NODE = PCIe plus the fabric between host bridges of one NUMA node
  SYS  = PCIe plus the CPU interconnect between NUMA nodes (UPI, Infinity Fabric)

NIC Legend:

  NIC0: ens1f0 (mlx5_0, RDMA, 100 Gb/s, 0000:4b:00.0)

Fast-link islands (devices joined by NVLink, xGMI, ICI, NeuronLink or RoCE):

  island 0: GPU0 GPU1 (NV12)
  island 1: GPU2 GPU3 (NV12)

NUMA nodes:

  NUMA 0 (cpus 0-31,64-95): GPU0 GPU1 NIC0
  NUMA 1 (cpus 32-63,96-127): GPU2 GPU3

Domains reported by the backends:

  nvlink-island nvl0: GPU0 GPU1
  nvlink-island nvl1: GPU2 GPU3
EOF
expect_text a100 topo_pcie_a100.json

cat >"$tmp/v6e.want" <<'EOF'
node v6e-s1-w3 (v6e-s1-w3): 4 TPU, 1 NIC

      TPU0  TPU1  TPU2  TPU3  NIC0  CPU Affinity   NUMA Affinity  GPU NUMA ID
TPU0  X     ICI   ICI   PHB   PHB   0-44,90-134    0              N/A
TPU1  ICI   X     PHB   ICI   PHB   0-44,90-134    0              N/A
TPU2  ICI   PHB   X     ICI   PHB   45-89,135-179  1              N/A
TPU3  PHB   ICI   ICI   X     PHB   45-89,135-179  1              N/A
NIC0  PHB   PHB   PHB   PHB   X     0-44,90-134    0              N/A

Legend:

  X    = the device itself
  ICI  = TPU inter-chip interconnect: neighbours in the slice mesh
  PIX  = PCIe through at most one PCIe switch (or one device's functions)
  PXB  = PCIe through several PCIe switches, without reaching a host bridge
  PHB  = PCIe through a host bridge (the CPU's PCIe root complex)
  NODE = PCIe plus the fabric between host bridges of one NUMA node
  SYS  = PCIe plus the CPU interconnect between NUMA nodes (UPI, Infinity Fabric)

NIC Legend:

  NIC0: eth0 (200 Gb/s, 0000:00:08.0)

Fast-link islands (devices joined by NVLink, xGMI, ICI, NeuronLink or RoCE):

  island 0: TPU0 TPU1 TPU2 TPU3 (ICI)

NUMA nodes:

  NUMA 0 (cpus 0-44,90-134): TPU0 TPU1 NIC0
  NUMA 1 (cpus 45-89,135-179): TPU2 TPU3

TPU slice v6e-s1:

  accelerator type v6e-16, topology 4x4, worker 3 of 4
  hosts: v6e-s1-w0 v6e-s1-w1 v6e-s1-w2 v6e-s1-w3 (this host)
  this host's chips: TPU0 (2,2) TPU1 (3,2) TPU2 (2,3) TPU3 (3,3)

  mesh 4x4 (x across, y down; a name is a chip of this host, '.' one of another host):

      x0    x1    x2    x3
  y0  .     .     .     .
  y1  .     .     .     .
  y2  .     .     TPU0  TPU1
  y3  .     .     TPU2  TPU3
EOF
expect_text v6e topo_tpu_v6e_w3.json

cat >"$tmp/cpu.want" <<'EOF'
node cpu-01 (cpu-01): no accelerators, 1 NIC

      NIC0  CPU Affinity  NUMA Affinity  GPU NUMA ID
NIC0  X     0-15          0              N/A

Legend:

  X    = the device itself
  PIX  = PCIe through at most one PCIe switch (or one device's functions)
  PXB  = PCIe through several PCIe switches, without reaching a host bridge
  PHB  = PCIe through a host bridge (the CPU's PCIe root complex)
  NODE = PCIe plus the fabric between host bridges of one NUMA node
  SYS  = PCIe plus the CPU interconnect between NUMA nodes (UPI, Infinity Fabric)

NIC Legend:

  NIC0: eno1 (1 Gb/s, 0000:00:1f.6)

NUMA nodes:

  NUMA 0 (cpus 0-15): NIC0
EOF
expect_text cpu topo_cpu_only.json

# ---- text: lines of the larger machines ----
expect_lines() { # name file line...
    local name=$1 file=$2
    shift 2
    case $file in /*) ;; *) file=$DATA/$file ;; esac
    "$CORRAL" topo --node "$file" >"$tmp/$name.txt" 2>"$tmp/err" || fail "$name: exit $?"
    for line in "$@"; do
        grep -qxF -- "$line" "$tmp/$name.txt" || fail "$name: no line '$line'"
    done
}
expect_lines dgx topo_dgx_h100.json \
    "node dgx-h100-01 (dgx-h100-01): 8 GPU, 5 NICs" \
    "GPU0  X     NV18  NV18  NV18  NV18  NV18  NV18  NV18  PIX   NODE  SYS   SYS   NODE  0-55,112-167    0              N/A" \
    "GPU7  NV18  NV18  NV18  NV18  NV18  NV18  NV18  X     SYS   SYS   NODE  PIX   SYS   56-111,168-223  1              N/A" \
    "  NIC4: eno1 (10 Gb/s, 0000:03:00.0)" \
    "  island 0: GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7 (NV18)" \
    "  NUMA 1 (cpus 56-111,168-223): GPU4 GPU5 GPU6 GPU7 NIC2 NIC3"
expect_lines mi300x topo_mi300x.json \
    "GPU3  XGMI  XGMI  XGMI  X     XGMI  XGMI  XGMI  XGMI  NODE  NODE  NODE  PIX   SYS   SYS   SYS   SYS   0-95,192-287    0              N/A" \
    "  XGMI = AMD Infinity Fabric (xGMI) link, one hop" \
    "  xgmi-hive hive0: GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7"
expect_lines trn1 topo_trn1.json \
    "node trn1-01 (trn1-01): 16 ND, 9 NICs" \
    "  NL   = AWS NeuronLink between Neuron devices" \
    "  island 0: ND0 ND1 ND2 ND3 ND4 ND5 ND6 ND7 ND8 ND9 ND10 ND11 ND12 ND13 ND14 ND15 (NL)"
expect_lines mix topo_pcie_mix.json \
    "GPU0  X     PIX   PXB   PHB   NODE  SYS   NODE  SYS   SYS   PXB   PXB   NODE  NODE  SYS   SYS   0-15          0              N/A" \
    "GPU7  SYS   SYS   SYS   SYS   SYS   SYS   PIX   X     SYS   SYS   SYS   SYS   SYS   SYS   SYS   N/A           N/A            N/A" \
    "  GPU0-mig1: device 10 on GPU0, 3g.40gb" \
    "  island 2: GPU2 GPU3 GPU4 GPU5 (NV6, XGMI, ICI)" \
    "  NUMA unknown: GPU7"
expect_lines v5p topo_tpu_v5p_w1.json \
    "  this host's chips: TPU0 (0,0,1) TPU1 (1,0,1) TPU2 (0,1,1) TPU3 (1,1,1)" \
    "  z=1"
# the 3-D mesh: this host's chips all lie in plane z=1
sed -n '/^  z=0$/,/^$/p' "$tmp/v5p.txt" | grep -q TPU && fail "v5p: a chip drawn in plane z=0"
sed -n '/^  z=1$/,$p' "$tmp/v5p.txt" | grep -qxF "  y1  TPU2  TPU3" || fail "v5p: plane z=1 lacks TPU2 TPU3"

# ---- the recorded DGX H100: its compute NICs first, as nvidia-smi topo -m ----
# The management eno1 sorts first by PCI address; the eight RDMA NICs, one
# per GPU behind its PCIe switch (NVIDIA DGX H100 user guide, "Network
# Modules"), come first: NIC0 is GPU0's ibp24s0, NIC7 GPU7's ibp220s0.
(
    eval "$("$CORRAL_SOURCE_DIR/scripts/fixture-env.sh" dgx-h100 "${CORRAL_BUILD_DIR:-$CORRAL_SOURCE_DIR/build}")"
    "$CORRAL" topo
) >"$tmp/dgxfix.txt" 2>"$tmp/err" || fail "dgx fixture: exit $?: $(cat "$tmp/err")"
for line in \
    "GPU0  X     NV18  NV18  NV18  NV18  NV18  NV18  NV18  PIX   NODE  NODE  NODE  SYS   SYS   SYS   SYS   NODE  0-55,112-167    0              N/A" \
    "GPU7  NV18  NV18  NV18  NV18  NV18  NV18  NV18  X     SYS   SYS   SYS   SYS   NODE  NODE  NODE  PIX   SYS   56-111,168-223  1              N/A" \
    "  NIC0: ibp24s0 (mlx5_0, RDMA, 400 Gb/s, 0000:18:00.0)" \
    "  NIC7: ibp220s0 (mlx5_11, RDMA, 400 Gb/s, 0000:dc:00.0)" \
    "  NIC8: eno1 (10 Gb/s, 0000:03:00.0)"; do
    grep -qxF -- "$line" "$tmp/dgxfix.txt" || fail "dgx fixture: no line '$line'"
done

# ---- deterministic ----
"$CORRAL" topo --node "$DATA/topo_dgx_h100.json" >"$tmp/again.txt"
cmp -s "$tmp/dgx.txt" "$tmp/again.txt" || fail "two runs differ"

# ---- JSON: the same matrix as the text, and the documented fields ----
for f in topo_dgx_h100 topo_pcie_mix topo_tpu_v6e_w3 topo_trn1 topo_cpu_only; do
    "$CORRAL" topo --node "$DATA/$f.json" >"$tmp/$f.txt" || fail "$f: text exit $?"
    "$CORRAL" topo --json --node "$DATA/$f.json" >"$tmp/$f.json" || fail "$f: json exit $?"
    $PY - "$tmp/$f.txt" "$tmp/$f.json" >"$tmp/err" 2>&1 <<'EOF' || fail "$f: JSON check: $(cat "$tmp/err")"
import json, sys
text = open(sys.argv[1]).read().split("\n")
j = json.load(open(sys.argv[2]))
assert j["schema"] == "corral.topo/v1", j["schema"]
names = j["names"]
n = len(names)
for key in ("matrix", "kinds", "counts", "affinity"):
    assert len(j[key]) == n, key
# text rows: the lines that start with a name, after the header
rows = {}
for line in text:
    parts = line.split()
    if parts and parts[0] in names and len(parts) > n:
        rows[parts[0]] = parts[1:n + 1]
for i, name in enumerate(names):
    assert rows.get(name) == j["matrix"][i], (name, rows.get(name), j["matrix"][i])
    for k in range(n):
        sym, kind, count = j["matrix"][i][k], j["kinds"][i][k], j["counts"][i][k]
        assert (sym == "X") == (kind == "self"), (sym, kind)
        if sym.startswith("NV"):
            assert kind in ("nvlink", "nvswitch") and sym == "NV%d" % count, (sym, kind, count)
        assert j["matrix"][k][i] == sym
for d in j["devices"]:
    assert d["name"] in names and d["nearest_nic"] in names + [None], d
for sym in ("X", "NV#", "XGMI", "ICI", "NL", "ROCE", "PIX", "PXB", "PHB", "NODE", "SYS"):
    assert sym in j["legend"], sym
for d in j["domains"]:
    if d["kind"] == "tpu-slice":
        assert d["topology"] == "4x4" and d["worker_id"] == 3 and d["worker_count"] == 4
        assert [c["coords"] for c in d["chips"]] == [[2, 2], [3, 2], [2, 3], [3, 3]], d["chips"]
        assert len(d["hosts"]) == 4
EOF
done
$PY -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["mig_instances"][0]["parent"]=="GPU0"; assert len(j["islands"])==6, j["islands"]' \
    "$tmp/topo_pcie_mix.json" || fail "mix: MIG instances or islands wrong in JSON"

# ---- a slice that does not fit its topology is told, not drawn wrong ----
$PY - "$DATA/topo_tpu_v6e_w3.json" "$tmp" <<'EOF' || fail "could not write the odd slices"
import json, sys
j = json.load(open(sys.argv[1]))
j["domains"][0]["topology"] = "2x2"      # chips at x, y = 2..3 lie outside
json.dump(j, open(sys.argv[2] + "/outside.json", "w"))
j["domains"][0]["topology"] = "4by4"
json.dump(j, open(sys.argv[2] + "/unparsable.json", "w"))
EOF
"$CORRAL" topo --node "$tmp/outside.json" >"$tmp/outside.txt" || fail "outside: exit $?"
grep -qxF "  TPU3 is not drawn: its coordinates lie outside the 2x2 mesh" "$tmp/outside.txt" ||
    fail "outside: no note for TPU3"
grep -q "^  y1  \.     \.$" "$tmp/outside.txt" || fail "outside: the 2x2 mesh is not drawn empty"
"$CORRAL" topo --node "$tmp/unparsable.json" >"$tmp/unparsable.txt" || fail "unparsable: exit $?"
grep -qF "mesh not drawn: topology '4by4' is not AxB or AxBxC" "$tmp/unparsable.txt" ||
    fail "unparsable: no note"

# ---- column names of other resources ----
$PY - "$DATA/topo_pcie_a100.json" "$tmp/custom.json" <<'EOF' || fail "could not write custom.json"
import json, sys
j = json.load(open(sys.argv[1]))
j["devices"][2]["resource"] = "fpga-x"   # not plain: DEV
j["devices"][3]["resource"] = "widget"
json.dump(j, open(sys.argv[2], "w"))
EOF
expect_lines custom "$tmp/custom.json" \
    "node pcie-a100-01 (pcie-a100-01): 2 GPU, 1 DEV, 1 widget, 1 NIC" \
    "         GPU0  GPU1  DEV0  widget0  NIC0  CPU Affinity  NUMA Affinity  GPU NUMA ID" \
    "widget0  SYS   SYS   NV12  X        SYS   32-63,96-127  1              N/A"

# ---- bad input: one clear message naming the file, exit 1 ----
expect_bad() { # what file pattern
    "$CORRAL" topo --node "$2" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" -eq 1 ] || fail "$1: exit $rc, want 1"
    grep -q -- "$3" "$tmp/err" || fail "$1: stderr lacks '$3': $(cat "$tmp/err")"
}
expect_bad missing "$tmp/nope.json" "nope.json"
printf '{"devices": [' >"$tmp/broken.json"
expect_bad malformed "$tmp/broken.json" "broken.json:1:"
printf '{"devices": [{"index": 0, "numa": "zero"}]}' >"$tmp/schema.json"
expect_bad schema "$tmp/schema.json" "at devices\[0\].numa"

# ---- a simulated node from a spec: needs the spec loader (hw/spec.c) ----
cp "$DATA/topo_pcie_a100.json" "$tmp/spec.json"
"$CORRAL" hw --spec "$tmp/spec.json" --json >"$tmp/hw.json" 2>"$tmp/hw.err"
hw_rc=$?
if grep -q "not built yet" "$tmp/hw.err" ||
    { [ "$hw_rc" -eq 0 ] && $PY -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if not j["simulated"] and not j["devices"] else 1)' "$tmp/hw.json"; }; then
    echo "SKIP: the --spec part: corral hw --spec reports that spec loading is not built yet" \
        "(it gave: $(head -c 200 "$tmp/hw.err"; [ "$hw_rc" -eq 0 ] && echo 'an empty node that is not simulated'))"
else
    [ "$hw_rc" -eq 0 ] || fail "corral hw --spec (a node description as a spec): exit $hw_rc: $(cat "$tmp/hw.err")"
    "$CORRAL" topo --spec "$tmp/spec.json" >"$tmp/spec.txt" 2>"$tmp/err" || fail "topo --spec: exit $?: $(cat "$tmp/err")"
    head -1 "$tmp/spec.txt" | grep -q '\[simulated' || fail "topo --spec: header does not say simulated: $(head -1 "$tmp/spec.txt")"
    grep -qxF "GPU0  X     NV12  SYS   SYS   NODE  0-31,64-95    0              N/A" "$tmp/spec.txt" ||
        fail "topo --spec: GPU0 row differs: $(grep '^GPU0' "$tmp/spec.txt")"
    "$CORRAL" topo --spec "$tmp/spec.json" --json >"$tmp/spec.json.out" || fail "topo --spec --json: exit $?"
    $PY -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["simulated"] is True' "$tmp/spec.json.out" ||
        fail "topo --spec --json: not simulated"
fi

if [ "$fails" -ne 0 ]; then
    echo "topo.sh: $fails failure(s)" >&2
    exit 1
fi
echo "topo.sh: ok"
