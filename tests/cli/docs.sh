#!/bin/bash
# The README's "Using it" commands run as printed (with corral on PATH, from
# the source tree, in a session directory of the test's own): each exits 0,
# or 1 where its comment says "exit 1". docs/topology.md's examples are the
# output of the fixtures they name. The README points at nothing outside
# the repository.
set -u
: "${CORRAL:?built corral binary}" "${CORRAL_SOURCE_DIR:?source tree}" "${CORRAL_BUILD_DIR:?build tree}"
CORRAL=$(realpath "$CORRAL")
TMP=$(mktemp -d)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mkdir -m 700 "$TMP/home" "$TMP/bin"
ln -s "$CORRAL" "$TMP/bin/corral"
export CORRAL_HOME=$TMP/home
trap 'CORRAL_HOME=$TMP/home "$CORRAL" stop >/dev/null 2>&1; rm -rf "$TMP"' EXIT

# the commands of the README's "Using it" section, continuation lines joined
awk '/^## Using it/ {on = 1; next} /^## / {on = 0}
     on && /^```sh/ {code = 1; next} on && /^```/ {code = 0; next}
     on && code {if (sub(/\\$/, "")) {line = line $0; next} print line $0; line = ""}' \
    "$CORRAL_SOURCE_DIR/README.md" | grep -v '^[[:space:]]*#' >"$TMP/cmds"
n=$(wc -l <"$TMP/cmds")
[ "$n" -ge 12 ] || fail "only $n commands found in README's Using it"
grep -q 'build/corral' "$TMP/cmds" && fail "the README still runs build/corral: $(grep build/corral "$TMP/cmds")"
started=no
while IFS= read -r cmd; do
    # "(exit 1)": it must fail; "exit 1 when ...": it may (corral hw --check
    # on a machine with something to warn about)
    want=0 may=0
    case $cmd in *"(exit 1)"*) want=1 may=1 ;; *"exit 1 when"*) may=1 ;; esac
    (cd "$CORRAL_SOURCE_DIR" && PATH=$TMP/bin:/usr/bin:/bin bash -c "$cmd") >"$TMP/out" 2>&1 </dev/null
    rc=$?
    [ "$rc" -eq "$want" ] || [ "$rc" -eq "$may" ] ||
        fail "'$cmd': exit $rc, want $want: $(head -3 "$TMP/out")"
    grep -qi "usage:\|unknown option\|command not found" "$TMP/out" &&
        fail "'$cmd': $(grep -i -m1 "usage:\|unknown option\|command not found" "$TMP/out")"
    case $cmd in "corral start --head"*) started=yes ;; esac
done <"$TMP/cmds"
[ "$started" = yes ] || fail "no head started by the README"

# docs/topology.md: the examples are what the fixtures print today
topo_of() { (eval "$("$CORRAL_SOURCE_DIR/scripts/fixture-env.sh" "$1" "$CORRAL_BUILD_DIR")" && "$CORRAL" topo); }
doc=$CORRAL_SOURCE_DIR/docs/topology.md
# the block after the line naming the dgx-h100 fixture
awk '/The dgx-h100 fixture/ {f = 1; next} f && /^```/ {if (in_) exit; in_ = 1; next} in_' "$doc" >"$TMP/doc-dgx"
topo_of dgx-h100 >"$TMP/dgx" || fail "topo of dgx-h100"
diff -u "$TMP/doc-dgx" "$TMP/dgx" >"$TMP/diff" || fail "docs/topology.md's DGX H100 example differs from the fixture: $(head -20 "$TMP/diff")"
awk '/the tpu-v6e-4x4-w3 fixture/ {f = 1; next} f && /^```/ {if (in_) exit; in_ = 1; next} in_' "$doc" >"$TMP/doc-tpu"
[ -s "$TMP/doc-tpu" ] || fail "docs/topology.md names no tpu-v6e-4x4-w3 example"
# the slice section: up to the mesh's last row
awk '/^TPU slice/ {p = 1} p {print} p && /^  y3 /{exit}' <(topo_of tpu-v6e-4x4-w3) >"$TMP/tpu"
diff -u "$TMP/doc-tpu" "$TMP/tpu" >"$TMP/diff" || fail "docs/topology.md's TPU slice example differs from the fixture: $(head -20 "$TMP/diff")"

# nothing outside the clone
grep -n '\.\./shared\|/work/' "$CORRAL_SOURCE_DIR/README.md" && fail "the README points outside the repository"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "ok"
