#!/bin/bash
# Stopping and joining (issue 13): corral stop stops every corral daemon of
# the session on this node, the head and the agents started here, and is
# idempotent; a join that cannot work fails at once with the real reason
# and leaves nothing running; corral start --head prints the command that
# joins an agent.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" stopjoin
SPECS=$CORRAL_SOURCE_DIR/specs

out=$("$CORRAL" stop 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^corral: nothing was running" <<<"$out" && ! grep -q warning <<<"$out" &&
    ok "stop with nothing running: exit 0, said once" || fail "stop, nothing: rc=$rc $out"

out=$("$CORRAL" start --head --hw-spec "$SPECS/cpu-only.yaml" 2>&1) || { fail "start: $out"; exit 1; }
hpid=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
join=$(sed -n 's/^  \(corral start --address .*\)$/\1/p' <<<"$out")
[ -n "$join" ] && ok "start --head prints the join command: $join" || fail "no join command: $out"
# the printed command, as printed (with this corral), joins an agent
out=$(${join/#corral/$CORRAL} --hw-spec "$SPECS/dgx-h100.yaml" --node-id ga --node-ip 127.0.0.2 2>&1); rc=$?
[ $rc -eq 0 ] && ok "the printed command joins" || fail "join: rc=$rc $out"
"$CORRAL" start ${join#corral start} --hw-spec "$SPECS/dgx-h100.yaml" --node-id gb --node-ip 127.0.0.3 >/dev/null ||
    fail "second agent"
apids="$(cat "$CORRAL_HOME/agent_ga/corrald.pid") $(cat "$CORRAL_HOME/agent_gb/corrald.pid")"
WPIDS="$WPIDS $apids"
n=$("$CORRAL" nodes --json | jq '[.[] | select(.state == "ALIVE")] | length')
[ "$n" = 3 ] && ok "head and two agents ALIVE" || fail "nodes: $("$CORRAL" nodes)"
id=$("$CORRAL" run --gpus 1 --label-selector corral.io/node-id=ga --detach -- sleep 60)
for _ in $(seq 100); do [ "$(status "$id" | jq '.workers[0].pid')" -gt 0 ] 2>/dev/null && break; sleep 0.1; done
wpid=$(status "$id" | jq '.workers[0].pid')

out=$("$CORRAL" stop 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "head stopped (pid $hpid)" <<<"$out" && grep -q "agent ga stopped" <<<"$out" &&
    grep -q "agent gb stopped" <<<"$out" && ok "stop: the head and both agents ($out)" || fail "stop: rc=$rc $out"
left=""
for p in $hpid $apids $wpid; do gone "$p" || left="$left $p"; done
[ -z "$left" ] && ok "no daemon and no worker left" || fail "still running:$left"
out=$("$CORRAL" stop 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "nothing was running" <<<"$out" && ok "stop again: nothing was running" ||
    fail "second stop: rc=$rc $out"

# a pid file that names a process not ours, or not a corrald, is not signalled
mkdir -p "$CORRAL_HOME/agent_fake"
sleep 30 &
decoy=$!
WPIDS="$WPIDS $decoy"
echo $decoy >"$CORRAL_HOME/agent_fake/corrald.pid"
out=$("$CORRAL" stop 2>&1)
kill -0 $decoy 2>/dev/null && grep -q "nothing was running" <<<"$out" &&
    ok "a pid file naming a process that is not a corrald is not obeyed" || fail "decoy: $out"
kill -KILL $decoy

# a join that cannot work: at once, the reason, nothing left
t0=$(date +%s)
out=$("$CORRAL" start --address 127.0.0.1:1 --hw-spec "$SPECS/dgx-h100.yaml" --node-id lone 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "cannot reach the head at 127.0.0.1:1: Connection refused" <<<"$out" &&
    [ $(($(date +%s) - t0)) -lt 10 ] && ok "failed join: exit 1, 'Connection refused', at once" ||
    fail "failed join: rc=$rc $out"
p=$(cat "$CORRAL_HOME/agent_lone/corrald.pid" 2>/dev/null)
[ -z "$p" ] || gone "$p" && ok "nothing left running after the failed join" || fail "agent $p runs"
finish
