#!/bin/bash
# Adoption and stop by pid take only what is provably this session's
# (issue 12, docs/runtime.md "Recovery"): a root agent handed a
# workers.json naming pid 1, another user's process and a root process
# that is no worker signals none of them; a root head taking over a dead
# head's session sweeps no process of another user, even one that carries
# the session's variables. Runs in a private mount and PID namespace
# (tests/cli/lib/private_ns.sh): a kill(-1) there reaches only the test.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/private_ns.sh" "$0" "$@"
SPEC=$CORRAL_SOURCE_DIR/specs/cpu-only.yaml
EVIL=4242
export CORRAL_HOME=/tmp/h
mkdir -m 700 $CORRAL_HOME
starttime() { awk '{print $22}' "/proc/$1/stat"; }

"$CORRAL" start --head --hw-spec "$SPEC" >/dev/null 2>&1 || { fail "head start"; finish; }
S=$CORRAL_HOME/$(readlink $CORRAL_HOME/session_latest)
SID=$(cat "$S/session_id")
[ ${#SID} -eq 32 ] && [ "$(stat -c %a "$S/session_id")" = 600 ] && ok "the session has a private 32-digit id" ||
    fail "session_id: $SID"
id=$("$CORRAL" run --detach -- sleep 60)
for _ in $(seq 100); do [ "$("$CORRAL" job status "$id" --json | jq -r .state)" = RUNNING ] && break; sleep 0.05; done
wpid=$("$CORRAL" job status "$id" --json | jq -r '.workers[0].pid')
tr '\0' '\n' <"/proc/$wpid/environ" | grep -qx "CORRAL_SESSION_ID=$SID" &&
    ok "a worker carries CORRAL_SESSION_ID" || fail "worker $wpid has no CORRAL_SESSION_ID"

# bystanders: another user's group leader that even carries the session's
# variables, and a root group leader that is no worker
# (setsid may fork: each says the pid of its group's leader itself)
as_user $EVIL env CORRAL_SESSION_ID="$SID" CORRAL_AGENT_SOCKET="$S/corrald.sock" \
    setsid sh -c 'echo $$ >/tmp/foreign.pid; exec sleep 300' &
setsid sh -c 'echo $$ >/tmp/root.pid; exec sleep 300' &
for _ in $(seq 50); do [ -s /tmp/foreign.pid ] && [ -s /tmp/root.pid ] && break; sleep 0.05; done
foreign=$(cat /tmp/foreign.pid) rootp=$(cat /tmp/root.pid)
ADDR=$(cat "$S/address")

# a planted workers.json naming them and pid 1, for agent n1
mkdir -m 700 -p $CORRAL_HOME/agent_n1
cat >$CORRAL_HOME/agent_n1/workers.json <<JSON
[{"id":"job1-w0","job":"1","index":0,"attempt":0,"pid":1,"start_time":$(starttime 1)},
 {"id":"job1-w1","job":"1","index":1,"attempt":0,"pid":$foreign,"start_time":$(starttime $foreign)},
 {"id":"job1-w2","job":"1","index":2,"attempt":0,"pid":$rootp,"start_time":$(starttime $rootp)}]
JSON
chmod 600 $CORRAL_HOME/agent_n1/workers.json
"$CORRAL" start --address "$ADDR" --hw-spec "$SPEC" --node-id n1 >/dev/null 2>&1 || fail "agent start"
sleep 0.5
a=$(cat $CORRAL_HOME/agent_n1/corrald.pid)
kill -TERM "$a"
for _ in $(seq 50); do gone "$a" && break; sleep 0.1; done
! gone "$foreign" && ! gone "$rootp" && ! gone "$wpid" &&
    ok "a planted workers.json naming pid 1, another user's and a non-worker process signals none" ||
    fail "signalled: foreign $(gone $foreign && echo gone) root $(gone $rootp && echo gone) worker $(gone $wpid && echo gone)"
grep -q "not adopting worker job1-w1: pid $foreign runs as uid $EVIL" $CORRAL_HOME/agent_n1/logs/corrald.log &&
    grep -q "not adopting worker job1-w2: pid $rootp does not carry this session's CORRAL_SESSION_ID" \
        $CORRAL_HOME/agent_n1/logs/corrald.log && ok "the agent's log says why each was not adopted" ||
    fail "agent log: $(cat $CORRAL_HOME/agent_n1/logs/corrald.log)"

# kill -9 of the head, then a takeover: its sweep of orphans spares both
h=$(cat "$S/corrald.pid")
kill -KILL "$h"
for _ in $(seq 50); do gone "$h" && break; sleep 0.05; done
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || fail "restart: $out"
sleep 0.3
! gone "$foreign" && ! gone "$rootp" && ok "the takeover's orphan sweep spares another user's process" ||
    fail "swept: foreign $(gone $foreign && echo gone) root $(gone $rootp && echo gone)"
! gone "$wpid" && [ "$("$CORRAL" job status "$id" --json | jq -r .state)" = RUNNING ] &&
    ok "while the session's own worker is adopted" || fail "worker $wpid: $("$CORRAL" job status "$id" 2>&1)"
stop_head $CORRAL_HOME
finish
