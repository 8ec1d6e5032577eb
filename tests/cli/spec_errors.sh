#!/bin/bash
# corral hw --spec: a bad spec fails with FILE:LINE:COL and what to fix; a
# good one describes a node marked simulated; isolation of a simulated node
# runs the devices' own backends.
set -u
: "${CORRAL:?built corral binary}" "${CORRAL_SOURCE_DIR:?source tree}"
CORRAL=$(realpath "$CORRAL")
SPECS=$CORRAL_SOURCE_DIR/tests/fixtures/specs
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_error FILE WANT: exit status 1, and stderr holds WANT
expect_error() {
    local file=$1 want=$2 rc
    "$CORRAL" hw --spec "$file" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "$file: exit status $rc, want 1"
    grep -qF -- "$want" "$TMP/err" || fail "$file: stderr lacks '$want': $(cat "$TMP/err")"
    [ -s "$TMP/out" ] && fail "$file: printed a node on stdout: $(head -3 "$TMP/out")"
    # one line: the reason, nothing from libfyaml
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$file: more than one line on stderr: $(cat "$TMP/err")"
}

expect_error "$SPECS/bad-size.yaml" \
    "$SPECS/bad-size.yaml:7:13: devices[1].memory: expected a size such as 80Gi, 512MiB or a number of bytes, found 'lots'"
expect_error "$SPECS/bad-syntax.yaml" "$SPECS/bad-syntax.yaml:5:1: YAML syntax error: "
expect_error "$SPECS/bad-syntax.json" "$SPECS/bad-syntax.json:3:19: JSON syntax error: "
expect_error "$SPECS/bad-unknown-field.yaml" \
    "bad-unknown-field.yaml:4:5: nics[0].sped_mbps: unknown field 'sped_mbps'; expected one of: name, pci,"
expect_error "$SPECS/empty.yaml" "empty.yaml:1:1: the spec is empty"
expect_error "$TMP/absent.yaml" "cannot read $TMP/absent.yaml: No such file or directory"

# what the schema alone lets through: a backend no component has, a NUMA
# node the spec does not describe, a label key a selector could not name
expect_error "$SPECS/bad-backend.yaml" \
    "bad-backend.yaml:5:14: devices[1].backend: unknown backend 'nvida'; did you mean 'nvidia'? expected one of: "
expect_error "$SPECS/bad-numa.yaml" \
    "bad-numa.yaml:9:29: devices[1].numa: NUMA node 2 is out of range: the spec's cpu.numa_nodes are 0, 1"
expect_error "$SPECS/bad-numa-negative.yaml" \
    "bad-numa-negative.yaml:8:24: nics[1].numa: NUMA node -3 is out of range; write a node of cpu.numa_nodes, or -1"
expect_error "$SPECS/bad-label-key.yaml" \
    "bad-label-key.yaml:5:3: labels.gpu kind: 'gpu kind' is not a valid label key: the name may hold only letters, digits, '-', '_' and '.'"
expect_error "$SPECS/bad-label-prefix.yaml" \
    "bad-label-prefix.yaml:4:3: labels.Corral.IO/rack: 'Corral.IO/rack' is not a valid label key: the prefix before '/' must be a DNS subdomain"
# a numa with no cpu.numa_nodes to be one of; a name of 64 characters
printf 'id: n\ndevices:\n  - {numa: 0}\n' >"$TMP/no-numa-nodes.yaml"
expect_error "$TMP/no-numa-nodes.yaml" "no-numa-nodes.yaml:3:12: devices[0].numa: NUMA node 0 is out of range: the spec lists no cpu.numa_nodes"
printf 'id: n\ncpu:\n  numa_nodes:\n    - {id: 0}\n    - {id: 0}\n' >"$TMP/dup-numa.yaml"
expect_error "$TMP/dup-numa.yaml" "dup-numa.yaml:5:12: cpu.numa_nodes[1].id: NUMA node 0 is listed twice (also cpu.numa_nodes[0])"
printf 'id: n\ndevices:\n  - {memory_numa: -2}\n' >"$TMP/mem-numa.yaml"
expect_error "$TMP/mem-numa.yaml" "mem-numa.yaml:3:19: devices[0].memory_numa: NUMA node -2 is out of range"
printf 'id: n\nlabels:\n  corral.io/%s: v\n' "$(printf 'a%.0s' $(seq 64))" >"$TMP/long-key.yaml"
expect_error "$TMP/long-key.yaml" "long-key.yaml:3:3: labels.corral.io/"
grep -qF "the name is longer than 63 characters" "$TMP/err" || fail "64-character name: $(cat "$TMP/err")"
# valid keys pass: a prefix, '-', '_' and '.' inside, 63 characters
printf 'id: n\nlabels:\n  a-b.c/x_y.z-0: v\n  k8s.io/%s: v\n  "8": v\n' "$(printf 'b%.0s' $(seq 63))" >"$TMP/keys.yaml"
"$CORRAL" hw --spec "$TMP/keys.yaml" >/dev/null 2>"$TMP/err" || fail "valid label keys refused: $(cat "$TMP/err")"

# corral hw --check SPEC: ok or the error, and the exit status says which
out=$("$CORRAL" hw --check "$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml" 2>&1) ||
    fail "--check of a good spec: exit $?: $out"
[ "$out" = "ok: $CORRAL_SOURCE_DIR/specs/dgx-h100.yaml is a valid hardware spec (node dgx-h100-01, 8 devices)" ] ||
    fail "--check of a good spec: '$out'"
"$CORRAL" hw --check "$SPECS/bad-numa.yaml" >"$TMP/out" 2>"$TMP/err" && fail "--check of a bad spec: exit 0"
grep -qF "bad-numa.yaml:9:29: devices[1].numa: NUMA node 2 is out of range" "$TMP/err" ||
    fail "--check of a bad spec: $(cat "$TMP/err")"
[ -s "$TMP/out" ] && fail "--check of a bad spec printed on stdout: $(cat "$TMP/out")"
# every shipped spec passes the full check (rich-node.json lists warnings on purpose)
for s in "$CORRAL_SOURCE_DIR"/specs/*.yaml "$CORRAL_SOURCE_DIR"/specs/*/*.yaml "$SPECS"/good.*; do
    "$CORRAL" hw --check "$s" >/dev/null 2>"$TMP/err" || fail "shipped spec $s: $(cat "$TMP/err")"
done

# a relative path is reported as given
(cd "$SPECS" && "$CORRAL" hw --spec bad-link.yaml >/dev/null 2>"$TMP/err")
grep -qF "bad-link.yaml:6:5: links[1]: a and b must be two different device indices below 2" \
    "$TMP/err" || fail "relative path: $(cat "$TMP/err")"

# good: a node marked simulated, in text and JSON
if "$CORRAL" hw --spec "$SPECS/good.yaml" >"$TMP/out" 2>"$TMP/err"; then
    grep -q "^node sim-h100-01 (sim-h100-01.example)  \[simulated" "$TMP/out" ||
        fail "good.yaml: no simulated node line: $(head -2 "$TMP/out")"
    grep -qx "  corral.io/simulated=true" "$TMP/out" || fail "good.yaml: no simulated label"
    grep -q "^resources: CPU=224 memory=2 TiB GPU=2 widget=0.5$" "$TMP/out" ||
        fail "good.yaml: resources: $(grep resources "$TMP/out")"
else
    fail "good.yaml: exit status $?: $(cat "$TMP/err")"
fi
"$CORRAL" hw --json --spec "$SPECS/good.yaml" >"$TMP/y.json" || fail "good.yaml --json"
"$CORRAL" hw --json --spec "$SPECS/good.json" >"$TMP/j.json" || fail "good.json --json"
cmp -s "$TMP/y.json" "$TMP/j.json" || fail "good.yaml and good.json differ: $(diff "$TMP/y.json" "$TMP/j.json" | head)"
grep -q '"simulated": true' "$TMP/y.json" || fail "--json: not simulated"

# isolation on a simulated node: the nvidia backend isolates the GPUs. It
# may not be built yet; only its own "not implemented" is tolerated.
if "$CORRAL" hw --spec "$SPECS/good.yaml" --isolate 0 >"$TMP/out" 2>"$TMP/err"; then
    grep -qx "CUDA_VISIBLE_DEVICES=0" "$TMP/out" ||
        fail "--isolate 0: no CUDA_VISIBLE_DEVICES=0: $(cat "$TMP/out")"
    grep -qx "CORRAL_VISIBLE_DEVICES=" "$TMP/out" ||
        fail "--isolate 0: the sim device is not hidden: $(cat "$TMP/out")"
elif grep -qx "corral hw: backend nvidia could not isolate the devices: not implemented by this component" "$TMP/err"; then
    echo "SKIP: --isolate on nvidia devices: the nvidia backend's isolate is not implemented in this build"
else
    fail "--isolate 0: $(cat "$TMP/err")"
fi

# a spec of custom devices only: the sim backend isolates them itself
cat >"$TMP/npu.yaml" <<'YAML'
id: npu-box
devices:
  - {resource: NPU, isolation_id: n0}
  - {resource: NPU}
  - {resource: NPU, isolation_id: n2}
YAML
out=$("$CORRAL" hw --spec "$TMP/npu.yaml" --isolate 2,1 2>&1) || fail "sim isolate: exit $?"
[ "$out" = "CORRAL_VISIBLE_DEVICES=1,n2" ] || fail "sim isolate: '$out'"
out=$("$CORRAL" hw --spec "$TMP/npu.yaml" --isolate 3 2>&1)
[ "$out" = "corral hw: device 3 does not exist: this node has devices 0 to 2" ] ||
    fail "sim isolate of a missing device: '$out'"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "ok"
