#!/bin/bash
# scripts/spec-from-node.py: the YAML spec it writes from a node description
# loads back to the same node, and is the readable kind (sizes, no defaults).
set -u
: "${CORRAL:?built corral binary}" "${CORRAL_SOURCE_DIR:?source tree}"
SPECS=$CORRAL_SOURCE_DIR/tests/fixtures/specs
SCRIPT=$CORRAL_SOURCE_DIR/scripts/spec-from-node.py
PY=${PYTHON:-python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

for src in rich-node.json good.yaml good.json; do
    "$CORRAL" hw --json --spec "$SPECS/$src" >"$TMP/n1.json" || { fail "$src does not load"; continue; }
    "$PY" "$SCRIPT" "$TMP/n1.json" >"$TMP/spec.yaml" || { fail "$src: the script failed"; continue; }
    "$CORRAL" hw --json --spec "$TMP/spec.yaml" >"$TMP/n2.json" 2>"$TMP/err" ||
        { fail "$src: generated spec does not load: $(cat "$TMP/err")"; continue; }
    cmp -s "$TMP/n1.json" "$TMP/n2.json" ||
        fail "$src: the node changed: $(diff "$TMP/n1.json" "$TMP/n2.json" | head -20)"
    # readable: the source named, no index fields, no warnings, no defaults
    grep -q "^# from the node description of " "$TMP/spec.yaml" || fail "$src: no header"
    grep -q "^# source: $TMP/n1.json$" "$TMP/spec.yaml" || fail "$src: source not named"
    grep -Eq "^ *(index|warnings|schema|simulated):" "$TMP/spec.yaml" && fail "$src: derived fields written"
    grep -Eq "(parent|vendor_index|numa): -1$" "$TMP/spec.yaml" && fail "$src: defaults written"
    cp "$TMP/spec.yaml" "$TMP/$src.yaml"
done

# sizes where exact, bytes where not; quoted where YAML would misread
y=$TMP/rich-node.json.yaml
grep -qx "    memory: 80Gi" "$y" || fail "80Gi size not written as such"
grep -qx "    memory: 1500000000" "$y" || fail "inexact size not left in bytes"
grep -qx "memory: 1536Gi" "$y" || fail "node memory size"
grep -qx '    compute_capability: "8.0"' "$y" || fail "8.0 not quoted"
grep -qx '  note: "8"' "$y" || fail "label \"8\" not quoted"
grep -qx '  yes: "true"' "$y" && fail "YAML 1.1 word 'yes' as a plain key"
# a label key YAML reads as a number, a value with quotes and a comment sign
grep -qx '  "1e3": "a: b \\"q\\" # c"' "$y" || fail "key 1e3, value with quotes: $(grep 1e3 "$y")"
grep -q "^# from the node description of rich-01 (hostname rich-01.example.com): 2x A100-80G, 2x TPU-V5P, 1x Widget #1$" "$y" ||
    fail "header: $(sed -n 2p "$y")"

# stdin works; bad input is one clear line and exit 1
"$CORRAL" hw --json --spec "$SPECS/good.yaml" | "$PY" "$SCRIPT" >"$TMP/stdin.yaml" ||
    fail "stdin: exit $?"
grep -q "^# source: standard input$" "$TMP/stdin.yaml" || fail "stdin source"
echo '{"schema": "corral.node/v9"}' >"$TMP/v9.json"
out=$("$PY" "$SCRIPT" "$TMP/v9.json" 2>&1) && fail "v9 accepted"
[ "$out" = "spec-from-node: $TMP/v9.json: schema 'corral.node/v9', this script reads corral.node/v1" ] ||
    fail "v9 message: $out"
out=$("$PY" "$SCRIPT" "$TMP/absent.json" 2>&1) && fail "missing file accepted"
case $out in "spec-from-node: $TMP/absent.json: "*"No such file or directory"*) ;; *) fail "missing: $out" ;; esac

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo ok
