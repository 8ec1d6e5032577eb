#!/bin/bash
# make demo (scripts/demo.sh) on this build: it ends well, writes no terminal
# escapes when its output is not a terminal, prints each command it runs as a
# line "$ CMD" that it then runs as printed (so a failing one ends the demo,
# set -e), and ends with the summary of what it showed.
set -u
: "${CORRAL:?built corral binary}" "${CORRAL_SOURCE_DIR:?source tree}" "${CORRAL_BUILD_DIR:?build tree}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

DEMO_BUILD=$CORRAL_BUILD_DIR sh "$CORRAL_SOURCE_DIR/scripts/demo.sh" >"$TMP/out" 2>&1 </dev/null
rc=$?
[ "$rc" -eq 0 ] || fail "demo: exit $rc: $(tail -5 "$TMP/out")"
grep -q $'\033' "$TMP/out" && fail "escape sequences in the output of a demo not on a terminal: $(grep -m1 $'\033' "$TMP/out" | cat -v)"
# the commands shown are the ones run: no corral it was not given, no bare python3
n=$(grep -c '^\$ ' "$TMP/out")
[ "$n" -ge 15 ] || fail "only $n commands shown"
grep '^\$ ' "$TMP/out" | grep -v "^\$ ( eval \|^\$ export CORRAL_HOME=\|^\$ $CORRAL_BUILD_DIR/corral " &&
    fail "a command shown that is not the build's corral"
grep '^\$ .* python3 ' "$TMP/out" | grep -v ' /usr/bin/python3 ' && fail "python3 shown without its path"
grep -q "^== what was shown" "$TMP/out" || fail "no summary"
grep -q 'fragmentation" is the share of free' "$TMP/out" || fail "the summary does not explain fragmentation"
# everything it started is stopped: the session directory it named is gone
home=$(sed -n 's/^\$ export CORRAL_HOME=//p' "$TMP/out")
[ -n "$home" ] || fail "no session directory shown"
[ -n "$home" ] && [ -e "$home" ] && fail "the demo's session $home is left behind"
grep -q "^corral: head stopped" "$TMP/out" || fail "the head was not stopped"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "ok"
