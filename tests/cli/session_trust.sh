#!/bin/bash
# The session directory nobody else can touch (issue 12, docs/runtime.md
# "The session"): a root head keeps its sessions in /run/corral, not in a
# /tmp/corral another user made first; a user's default is
# /tmp/corral-$UID; a corral home that is a symlink, another user's, or
# writable by others is refused with what to do; session_latest must be
# the user's own link to a session inside the home; a dead head's session
# is taken over only when all of it is the user's, and `corral start` says
# so; files in the home are not opened through a planted symlink.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/private_ns.sh" "$0" "$@"
SPEC=$CORRAL_SOURCE_DIR/specs/cpu-only.yaml
EVIL=4242 USER2=4343

# another user plants the old default, /tmp/corral, with a "dead head"'s
# session: root's head must not take it (it would run that user's jobs)
as_user $EVIL sh -c 'mkdir -p /tmp/corral/session_x/logs && echo 999999 >/tmp/corral/session_x/corrald.pid &&
    : >/tmp/corral/session_x/state.db && ln -s session_x /tmp/corral/session_latest'
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || fail "root start: $out"
[ -d /run/corral ] && [ "$(stat -c %u:%a /run/corral)" = 0:700 ] &&
    ok "root's default corral home is /run/corral, 0700" || fail "no /run/corral: $(ls -la /run)"
grep -q "took over" <<<"$out" && fail "root took over the planted session: $out"
[ "$(readlink /run/corral/session_latest)" != session_x ] && "$CORRAL" status >/dev/null &&
    ok "the session another user planted in /tmp/corral is ignored" || fail "status: $("$CORRAL" status 2>&1)"

# kill -9, start again: the takeover is said in corral start's output
h=$(cat /run/corral/session_latest/corrald.pid)
"$CORRAL" run --detach -- true >/dev/null
kill -KILL "$h"
for _ in $(seq 50); do gone "$h" && break; sleep 0.05; done
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1)
grep -Eq "took over session session_[^ ]+ of a head that died at .*: 1 job\(s\) recovered" <<<"$out" &&
    ok "corral start says it took over the dead head's session" || fail "takeover not said: $out"
stop_head /run/corral

# a dead head's session with a file of another user in it is refused
h=$("$CORRAL" start --head --hw-spec "$SPEC" >/dev/null 2>&1; cat /run/corral/session_latest/corrald.pid)
kill -KILL "$h"
for _ in $(seq 50); do gone "$h" && break; sleep 0.05; done
S=/run/corral/$(readlink /run/corral/session_latest)
touch "$S/logs/planted" && chown $EVIL "$S/logs/planted"
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) && fail "took over a session with another user's file: $out"
grep -q "refusing to take over the session .*planted is not owned by you" <<<"$out" &&
    ok "a dead session holding another user's file is refused, said why" || fail "refusal: $out"
rm -f "$S/logs/planted"
ln -s /etc/passwd "$S/logs/planted"
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) && fail "took over a session with a symlink: $out"
grep -q "planted is a symbolic link" <<<"$out" && ok "a dead session holding a symlink is refused" ||
    fail "symlink refusal: $out"
rm -rf /run/corral

# a corral home that is not the user's own private directory is refused
as_user $EVIL mkdir -m 755 /tmp/evil-home
out=$(CORRAL_HOME=/tmp/evil-home "$CORRAL" start --head --hw-spec "$SPEC" 2>&1) &&
    fail "root used another user's CORRAL_HOME: $out"
grep -q "owned by uid $EVIL, not by you (uid 0).*mkdir -m 700" <<<"$out" &&
    ok "another user's CORRAL_HOME is refused with what to do" || fail "foreign home: $out"
mkdir -m 700 /tmp/real && ln -s /tmp/real /tmp/link
out=$(CORRAL_HOME=/tmp/link "$CORRAL" start --head --hw-spec "$SPEC" 2>&1) && fail "symlink home used: $out"
grep -q "is a symbolic link" <<<"$out" && ok "a symlinked CORRAL_HOME is refused" || fail "symlink home: $out"
chmod 775 /tmp/real
out=$(CORRAL_HOME=/tmp/real "$CORRAL" start --head --hw-spec "$SPEC" 2>&1) && fail "group-writable home used: $out"
grep -q "mode 0775.*chmod go-w /tmp/real" <<<"$out" && ok "a group-writable CORRAL_HOME is refused" ||
    fail "writable home: $out"

# an unprivileged user's default is /tmp/corral-$UID; one another user
# made first is refused, for the head and for the CLI
as_user $EVIL mkdir -m 700 /tmp/corral-$USER2
out=$(as_user $USER2 "$CORRAL" start --head --hw-spec "$SPEC" 2>&1) && fail "user2 used a planted home: $out"
grep -q "/tmp/corral-$USER2 is owned by uid $EVIL" <<<"$out" && ok "a planted /tmp/corral-\$UID is refused" ||
    fail "planted user home: $out"
out=$(as_user $USER2 "$CORRAL" status 2>&1) && fail "the CLI used a planted home: $out"
grep -q "owned by uid $EVIL" <<<"$out" && ok "and the CLI refuses it too" || fail "CLI planted home: $out"
rm -rf /tmp/corral-$USER2
out=$(as_user $USER2 "$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || fail "user2 start: $out"
[ "$(stat -c %u:%a /tmp/corral-$USER2)" = "$USER2:700" ] && as_user $USER2 "$CORRAL" status >/dev/null &&
    ok "an unprivileged user's default home is /tmp/corral-\$UID, 0700" || fail "user2 home: $(ls -la /tmp)"
stop_head /tmp/corral-$USER2

# session_latest must be the user's own link to a session inside the home
export CORRAL_HOME=/tmp/h && mkdir -m 700 $CORRAL_HOME
"$CORRAL" start --head --hw-spec "$SPEC" >/dev/null 2>&1 || fail "start in $CORRAL_HOME"
S=$(readlink $CORRAL_HOME/session_latest)
as_user $EVIL mkdir -m 755 /tmp/fake && cp -a $CORRAL_HOME/$S/token /tmp/fake/ 2>/dev/null
ln -sfn /tmp/fake $CORRAL_HOME/session_latest
out=$("$CORRAL" status 2>&1) && fail "the CLI followed session_latest out of the home: $out"
grep -q "not a link of yours to a session inside $CORRAL_HOME" <<<"$out" &&
    ok "a session_latest pointing outside the home is refused" || fail "outside link: $out"
ln -sfn "$S" $CORRAL_HOME/session_latest
"$CORRAL" status >/dev/null && ok "the real link works again" || fail "status after restoring the link"

# the agent's log in its home is never opened through a planted symlink
echo keep >/tmp/victim
ADDR=$(cat $CORRAL_HOME/session_latest/address)
mkdir -p -m 700 $CORRAL_HOME/agent_n1/logs && ln -s /tmp/victim $CORRAL_HOME/agent_n1/logs/corrald.log
CORRAL_LOG_LEVEL=debug "$CORRAL" start --address "$ADDR" --hw-spec "$SPEC" --node-id n1 >/dev/null 2>&1 || fail "agent start"
"$CORRAL" run --label-selector corral.io/node-id=n1 -- true >/dev/null 2>&1
a=$(cat $CORRAL_HOME/agent_n1/corrald.pid)
kill -TERM "$a"
for _ in $(seq 50); do gone "$a" && break; sleep 0.1; done
[ "$(cat /tmp/victim)" = keep ] && ok "the agent does not write through a planted symlink" ||
    fail "victim written: $(head -c 300 /tmp/victim)"
stop_head $CORRAL_HOME

# corral start relays the daemon's warnings and says what it listens on
# (the namespace has only its loopback: 0.0.0.0 reaches nobody else)
out=$("$CORRAL" start --head --hw-spec "$SPEC" --listen 0.0.0.0 2>&1) || fail "start --listen 0.0.0.0: $out"
grep -q "warning: listening on 0.0.0.0 with a generated token" <<<"$out" &&
    ok "corral start relays the generated-token warning" || fail "no warning relayed: $out"
port=$(cut -d: -f2 <$CORRAL_HOME/session_latest/address)
grep -q "listening on 0.0.0.0:$port" <<<"$out" && ok "and prints the address it really listens on" ||
    fail "listen address: $out"
stop_head $CORRAL_HOME
finish
