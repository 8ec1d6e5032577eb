#!/bin/bash
# corral hw on the command line: usage errors, exit codes, messages.
set -u
: "${CORRAL:?}" "${CORRAL_SOURCE_DIR:?}"
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
# expect CODE PATTERN DESCRIPTION -- CMD...
expect() {
    local code=$1 pat=$2 what=$3
    shift 4
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$code" ]; then
        fail "$what: exit $rc, wanted $code; output: $out"
    elif ! grep -qE -- "$pat" <<<"$out"; then
        fail "$what: output lacks /$pat/: $out"
    else
        pass "$what"
    fi
}
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT

expect 2 "usage: corral COMMAND" "no command" -- "$CORRAL"
expect 2 "unknown command 'frobnicate'" "unknown command" -- "$CORRAL" frobnicate
expect 0 "commands:" "help" -- "$CORRAL" --help
expect 2 "usage: corral hw" "unknown option" -- "$CORRAL" hw --frob
expect 2 "unexpected argument 'extra'" "stray argument" -- "$CORRAL" hw extra
expect 2 "exclude each other" "--spec with --root" -- "$CORRAL" hw --spec x.yaml --root /
expect 2 "bad device list '0,x' at offset 2" "bad --isolate list" -- "$CORRAL" hw --isolate 0,x
expect 0 "--isolate LIST" "hw --help" -- "$CORRAL" hw --help
expect 1 "root /nonexistent/corral is not a directory" "missing root" -- "$CORRAL" hw --root /nonexistent/corral
expect 0 "no accelerators found" "empty root" -- env CORRAL_NODE_ID=empty "$CORRAL" hw --root "$empty"
expect 0 '"schema": "corral.node/v1"' "empty root as JSON" -- "$CORRAL" hw --json --root "$empty"
expect 1 "device 3 does not exist: this node has no accelerators" "isolate a missing device" -- "$CORRAL" hw --root "$empty" --isolate 3
expect 0 "^ok: nothing suspicious" "check an empty machine" -- "$CORRAL" hw --root "$empty" --check
expect 1 "cannot read|No such file" "missing spec" -- "$CORRAL" hw --spec /nonexistent/spec.yaml
# this machine: discovery works and the JSON parses
if out=$("$CORRAL" hw --json) && python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["cpu"]["threads"] >= 1, d["cpu"]' <<<"$out"; then
    pass "this machine as JSON"
else
    fail "this machine as JSON: $out"
fi
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
