#!/bin/bash
# A worker cannot read the cluster token (issue 12; docs/workers.md "What a
# worker can reach"): a root agent starts each worker in a mount namespace
# of its own where the corral home (sessions, token, state.db, TLS key,
# logs) is an empty read-only tmpfs and a token file kept elsewhere reads
# as /dev/null; only the sockets it names in CORRAL_AGENT_SOCKET and
# CORRAL_ADDRESS are bound back, so `corral job status` with its
# CORRAL_JOB_TOKEN still works. The worker (root) loses the capabilities
# that would undo that (umount, /proc/PID/root of the daemon, which is
# not dumpable, open_by_handle_at, ...). Run as PID 1 of a private mount,
# PID and network namespace (lib/private_ns.sh).
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/private_ns.sh" "$0" "$@"
. "$CORRAL_SOURCE_DIR/tests/cli/lib/join.sh"
SPEC=$CORRAL_SOURCE_DIR/specs/cpu-only.yaml
T=$(mktemp -d /tmp/hidden-XXXXXX)
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "head: $out"; finish; }
H=/run/corral
HPID=$(cat $H/session_latest/corrald.pid)
TOKEN=$(realpath $H/session_latest/token)
[ -s "$TOKEN" ] || fail "no token at $TOKEN"

# what a worker of the head's own agent tries
cat >"$T/probe.sh" <<EOS
#!/bin/sh
cat $TOKEN >/dev/null 2>&1 && echo "token: read" || echo "token: unreadable"
cat $H/session_latest/token >/dev/null 2>&1 && echo "latest: read" || echo "latest: unreadable"
echo "home: \$(ls -A $H 2>&1 | tr '\n' ' ')"
echo "state: \$(ls \$(dirname \$CORRAL_ADDRESS) 2>&1 | tr '\n' ' ')"
umount $H 2>/dev/null && echo "umount: done, token \$(cat $TOKEN 2>&1 | wc -c) bytes" || echo "umount: refused"
unshare -Urm sh -c "umount -l $H 2>/dev/null; cat $TOKEN" 2>/dev/null | wc -c | sed 's/^/userns: /'
echo "procroot: \$(cat /proc/$HPID/root$TOKEN 2>/dev/null | wc -c)"
echo "procfd: \$(ls -l /proc/$HPID/fd/ 2>/dev/null | grep -c -- '->') \$(timeout 10 cat /proc/$HPID/fd/* 2>/dev/null | wc -c)"
"$CORRAL" job status "\$CORRAL_JOB_ID" --json >$T/status.json 2>$T/status.err && echo "status: ok" || echo "status: failed"
EOS
chmod +x "$T/probe.sh"
"$CORRAL" run -- "$T/probe.sh" >"$T/local.out" 2>&1 || fail "probe job: $(cat "$T/local.out")"
cat "$T/local.out"
grep -q "^token: unreadable" "$T/local.out" && grep -q "^latest: unreadable" "$T/local.out" &&
    ok "the worker cannot read the token" || fail "the worker read the token"
grep -q "^home: $(basename "$(dirname "$TOKEN")") *$" "$T/local.out" &&
    ok "the corral home shows only the session folder of its socket" || fail "home: $(grep home: "$T/local.out")"
grep -q "^state: corrald.sock *$" "$T/local.out" && ok "and in it only the socket: no state.db, no logs" ||
    fail "session: $(grep state: "$T/local.out")"
grep -q "^umount: refused" "$T/local.out" && ok "umount of the hidden home: refused" ||
    fail "$(grep umount: "$T/local.out")"
grep -q "^userns: 0" "$T/local.out" && ok "in a new user namespace: the home cannot be unmounted either" ||
    fail "$(grep userns: "$T/local.out")"
grep -q "^procroot: 0" "$T/local.out" && grep -q "^procfd: 0 0" "$T/local.out" &&
    ok "nothing of the daemon through /proc/$HPID (root, fd)" || fail "$(grep proc "$T/local.out")"
grep -q "^status: ok" "$T/local.out" && [ "$(jq -r .state "$T/status.json")" = RUNNING ] &&
    ok "corral job status with its CORRAL_JOB_TOKEN works from the worker" ||
    fail "job status from the worker: $(cat "$T/status.err")"

# a working directory inside the hidden home is refused with the reason
out=$("$CORRAL" run --cwd "$H" -- pwd 2>&1) && fail "a worker ran in the hidden home: $out"
grep -q "its working directory is inside the corral home, which workers do not see" <<<"$out" &&
    ok "a --cwd inside the corral home: refused, said plainly" || fail "--cwd in the home: $out"

# a joined agent given a token file outside the corral home
cp "$TOKEN" "$T/cluster.token" && chmod 600 "$T/cluster.token"
join_token_file far "$T/cluster.token" "$SPEC"
"$CORRAL" run --label-selector corral.io/node-id=far -- sh -c \
    "echo \"tokfile: \$(wc -c <$T/cluster.token)\"; \"$CORRAL\" job status \$CORRAL_JOB_ID >/dev/null && echo status: ok" \
    >"$T/far.out" 2>&1 || fail "job on far: $(cat "$T/far.out")"
grep -q "^tokfile: 0" "$T/far.out" && ok "on a joined agent the --token-file reads empty" ||
    fail "far: $(cat "$T/far.out")"
grep -q "^status: ok" "$T/far.out" && ok "and job status over TCP with the job token works" ||
    fail "far status: $(cat "$T/far.out")"
kill -TERM "$(cat $H/agent_far/corrald.pid)"
stop_head $H
finish
