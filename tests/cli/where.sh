#!/bin/bash
# Run where the user stands (issue 13), as srun does: workers start in the
# caller's directory (--cwd DIR to choose) with the caller's environment
# (--env-policy all|none|K1,K2, --env K=V on top), the CORRAL_* variables
# over both, never the daemon's environment; argv[0] is found in the
# caller's PATH; train's relative --checkpoint-dir is the caller's.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" where
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml
(cd / && DAEMON_ONLY=leak "$CORRAL" start --head --hw-spec "$SPEC" >/dev/null) || { fail "start"; exit 1; }
here=$(mktemp -d "$TDATA/here-XXXXXX") # not in CORRAL_HOME: workers of a root agent do not see it
mkdir "$here/sub" "$here/bin"
printf '#!/bin/sh\necho mine "$@"\n' >"$here/bin/only-mine"
chmod +x "$here/bin/only-mine"
cd "$here"

out=$("$CORRAL" run -- pwd 2>&1)
[ "$out" = "$here" ] && ok "the worker starts in the caller's directory" || fail "pwd: [$out] want $here"
out=$("$CORRAL" run --cwd sub -- pwd 2>&1)
[ "$out" = "$here/sub" ] && ok "--cwd sub: relative to the caller's directory" || fail "--cwd: [$out]"
out=$("$CORRAL" run --cwd /tmp -- pwd 2>&1)
[ "$out" = /tmp ] && ok "--cwd /tmp" || fail "--cwd /tmp: [$out]"
out=$("$CORRAL" run --cwd nope -- pwd 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "working directory $here/nope: No such file or directory" <<<"$out" &&
    ok "a missing --cwd is named" || fail "missing cwd: rc=$rc $out"

out=$(MYVAR=1 CORRAL_JOB_ID=bogus "$CORRAL" run -- sh -c 'echo "v=$MYVAR d=$DAEMON_ONLY j=$CORRAL_JOB_ID"' 2>&1)
[[ "$out" =~ ^v=1\ d=\ j=[0-9]+$ ]] &&
    ok "the caller's environment, not the daemon's; CORRAL_* on top ($out)" || fail "env all: [$out]"
out=$(MYVAR=1 "$CORRAL" run --env-policy none --env A=2 -- /bin/sh -c 'echo "v=$MYVAR a=$A d=$DAEMON_ONLY"' 2>&1)
[ "$out" = "v= a=2 d=" ] && ok "--env-policy none: only --env" || fail "env none: [$out]"
out=$(MYVAR=1 OTHER=2 "$CORRAL" run --env-policy MYVAR,PATH --env MYVAR=3 -- sh -c 'echo "v=$MYVAR o=$OTHER"' 2>&1)
[ "$out" = "v=3 o=" ] && ok "--env-policy MYVAR,PATH: those names, --env wins" || fail "env list: [$out]"
out=$("$CORRAL" run --env-policy A=1 -- true 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "env-policy: expected all, none or a list of names" <<<"$out" &&
    ok "a bad --env-policy is a usage error" || fail "bad policy: rc=$rc $out"
out=$(PATH="$here/bin:$PATH" "$CORRAL" run -- only-mine hi 2>&1)
[ "$out" = "mine hi" ] && ok "argv[0] found in the caller's PATH" || fail "PATH: [$out]"

out=$("$CORRAL" train --workers 1 --resources-per-worker CPU=1 --checkpoint-dir ck -- \
    sh -c 'echo "ck=$CORRAL_CHECKPOINT_DIR pwd=$(pwd)"' 2>&1)
grep -q "^\[rank 0\] ck=$here/ck pwd=$here$" <<<"$out" &&
    ok "train: --checkpoint-dir ck is the caller's, ranks start in the caller's directory" ||
    fail "train: $out"
cd /
finish
