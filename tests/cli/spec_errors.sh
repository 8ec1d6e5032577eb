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
