#!/bin/bash
# A root agent's workers share one mount namespace, made once (issue 18,
# "Requests near the socket's round trip"; docs/workers.md "What a worker
# can reach"): each worker enters it instead of making its own, which saves
# the unshare, the mounts and the namespace's teardown at the worker's exit.
# It must stay as fresh as one made per worker: a mount the host makes after
# the agent started shows in the next worker even where mounts do not
# propagate (this test's namespace is private), and a hidden token file
# replaced by a rename (which drops a mount on it in other namespaces) reads
# empty in the next worker as it did in the first. Run as PID 1 of a private
# mount, PID and network namespace (lib/private_ns.sh).
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/private_ns.sh" "$0" "$@"
. "$CORRAL_SOURCE_DIR/tests/cli/lib/join.sh"
SPEC=$CORRAL_SOURCE_DIR/specs/cpu-only.yaml
T=$(mktemp -d /tmp/wns-XXXXXX)
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "head: $out"; finish; }
H=/run/corral
TOKEN=$(realpath $H/session_latest/token)

# two workers alive at once (a namespace's number is reused once it is gone)
g=$("$CORRAL" run --workers 2 -- sh -c 'readlink /proc/self/ns/mnt; sleep 1' 2>&1) || fail "gang: $g"
a=$(sed -n 's/^\[0\] //p' <<<"$g") b=$(sed -n 's/^\[1\] //p' <<<"$g")
mine=$(readlink /proc/self/ns/mnt)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$mine" ] &&
    ok "two workers in one namespace, not the agent's ($a)" || fail "namespaces: $a, $b (agent's $mine)"
c=$("$CORRAL" run --cwd "$T" -- sh -c "readlink /proc/self/ns/mnt; pwd; cat $TOKEN 2>/dev/null | wc -c" 2>&1)
[ "$c" = "$(printf '%s\n%s\n0' "$a" "$T")" ] &&
    ok "a worker with another --cwd: the same namespace, in its directory, the token hidden" ||
    fail "--cwd: $c"

# a mount made after the agent started (private here: nothing propagates)
mkdir "$T/late" && mount -t tmpfs -o size=16k tmpfs "$T/late" && echo here >"$T/late/file" ||
    fail "cannot mount on $T/late"
out=$("$CORRAL" run -- cat "$T/late/file" 2>&1)
[ "$out" = here ] && ok "a later mount of the host shows in the next worker" || fail "late mount: $out"
# and the agent lets go of the namespace holding a copy of it at its next
# look (every 250 ms) after the host unmounts it, not only at the next
# worker's start
HPID=$(cat $H/session_latest/corrald.pid)
held() { ls -l /proc/$HPID/fd 2>/dev/null | grep -c 'mnt:\['; }
[ "$(held)" = 1 ] && ok "the agent holds one namespace for its workers" || fail "namespaces held: $(held)"
umount "$T/late"
for _ in $(seq 50); do [ "$(held)" = 0 ] && break; sleep 0.1; done
[ "$(held)" = 0 ] && ok "the host's unmount: the agent no longer holds the namespace with its copy" ||
    fail "the agent still holds $(held) mount namespace(s) after the host's unmount"

# a joined agent whose token file is kept outside the home, replaced by a rename
cp "$TOKEN" "$T/cluster.token" && chmod 600 "$T/cluster.token"
join_token_file far "$T/cluster.token" "$SPEC"
far() { "$CORRAL" run --label-selector corral.io/node-id=far -- sh -c "wc -c <$T/cluster.token" 2>&1; }
out=$(far)
[ "$out" = 0 ] && ok "on a joined agent the --token-file reads empty" || fail "far: $out"
cp "$T/cluster.token" "$T/new.token" && mv "$T/new.token" "$T/cluster.token" || fail "rename"
out=$(far)
[ "$out" = 0 ] && ok "and still after it was replaced by a rename" || fail "far after the rename: $out"
kill -TERM "$(cat $H/agent_far/corrald.pid)"
stop_head $H
finish
