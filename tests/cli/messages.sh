#!/bin/bash
# The first five minutes (issue 13): --version; every command has a --help
# that says more than its usage line and exits 0; a usage error shows the
# usage line only; --gpus is said to be per worker; no head is said once,
# with how to start one; a command that cannot run is named, with a hint
# when the whole command was given as one word.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" messages
out=$("$CORRAL" --version); rc=$?
[ $rc -eq 0 ] && [[ "$out" =~ ^corral\ [0-9]+\.[0-9]+\.[0-9]+$ ]] && ok "--version: $out" || fail "--version: rc=$rc $out"
for c in start stop status nodes run job pg train events hw topo sim; do
    out=$("$CORRAL" $c --help 2>&1); rc=$?
    [ $rc -eq 0 ] && grep -q "^usage: corral $c" <<<"$out" && [ "$(wc -l <<<"$out")" -ge 3 ] ||
        fail "$c --help: rc=$rc $(wc -l <<<"$out") line(s): $out"
done
ok "every command has a --help of more than its usage line"
"$CORRAL" run --help | grep -q "for each worker, not in all" && ok "--gpus is per worker" ||
    fail "run --help: $("$CORRAL" run --help)"
out=$("$CORRAL" run --bogus -- true 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" = 2 ] && ok "a usage error: the problem and the usage line" ||
    fail "usage error: rc=$rc $out"

out=$("$CORRAL" run -- true 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "no head is running .*corral start --head" <<<"$out" &&
    ok "no head: said once, how to start one" || fail "no head: rc=$rc $out"

"$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" >/dev/null || { fail "start"; exit 1; }
out=$("$CORRAL" run -- corral-no-such-cmd 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "cannot run 'corral-no-such-cmd' (not found in the worker's PATH)" <<<"$out" &&
    ! grep -q "did you quote" <<<"$out" && ok "a missing command is named" || fail "no-such-cmd: rc=$rc $out"
out=$("$CORRAL" run -- 'echo hi there' 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "cannot run 'echo hi there'.*did you quote the whole command?" <<<"$out" &&
    ok "a quoted whole command: did you quote the whole command?" || fail "quoted: rc=$rc $out"
"$CORRAL" stop >/dev/null
finish
