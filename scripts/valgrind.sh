#!/usr/bin/env bash
# make valgrind: a head and an agent under valgrind (memcheck) through a
# short scenario — jobs that succeed, fail and restart, a multi-node gang, a
# placement group across the two nodes, followed output and events, a
# malformed frame, shutdown — then fails unless both report no errors and
# no definite leaks. Slow (valgrind), so not part of make check.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${CORRAL_BUILD_DIR:-$SRC/build}
CORRAL=$BUILD/corral
command -v valgrind >/dev/null || { echo "valgrind: not installed (apt-get install valgrind)"; exit 2; }
export CORRAL_HOME=$(mktemp -d /tmp/corral-vg-XXXXXX)
VG="$CORRAL_HOME/vg"
mkdir -p "$VG"
cat > "$CORRAL_HOME/corrald-vg" <<EOS
#!/bin/sh
exec valgrind --quiet --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite --error-exitcode=99 \
    --log-file=$VG/%p.log "$BUILD/corrald" "\$@"
EOS
chmod +x "$CORRAL_HOME/corrald-vg"
export CORRAL_DAEMON=$CORRAL_HOME/corrald-vg
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# The daemons this script started, by pid, each with its start time (field
# 22 of /proc/PID/stat): on exit only a pid that still has that start time
# and CORRAL_HOME=$CORRAL_HOME in its environment is signalled, never a
# process found by name (issue 12).
DPIDS=""
starttime() { sed -n 's/.*) [A-Za-z] \(.*\)/\1/p' "/proc/$1/stat" 2>/dev/null | awk '{print $19}'; }
remember() { # a daemon's pid file: its pid and start time, when it is ours
    local pid st
    pid=$(cat "$1" 2>/dev/null) || return 0
    st=$(starttime "$pid")
    [ -n "$st" ] && ours "$pid" "$st" && DPIDS="$DPIDS $pid:$st"
}
ours() { # PID STARTTIME: still the process we started
    [ "$1" -gt 1 ] 2>/dev/null && [ "$(starttime "$1")" = "$2" ] &&
        tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | grep -qxF "CORRAL_HOME=$CORRAL_HOME"
}
alive_ours() { # whether any daemon we started still runs
    local e
    for e in $DPIDS; do ours "${e%%:*}" "${e##*:}" && return 0; done
    return 1
}
end_daemons() {
    local e
    for e in $DPIDS; do ours "${e%%:*}" "${e##*:}" && kill -TERM "${e%%:*}" 2>/dev/null; done
    for _ in $(seq 100); do alive_ours || return 0; sleep 0.1; done
    for e in $DPIDS; do ours "${e%%:*}" "${e##*:}" && kill -KILL "${e%%:*}" 2>/dev/null; done
}
trap 'end_daemons; rm -rf "$CORRAL_HOME"' EXIT

"$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" || { echo "head did not start"; exit 1; }
remember "$CORRAL_HOME/session_latest/corrald.pid"
ADDR=$(cat "$CORRAL_HOME/session_latest/address")
"$CORRAL" start --address "$ADDR" --token-file "$CORRAL_HOME/session_latest/token" \
    --hw-spec "$SRC/specs/dgx-h100.yaml" --node-id gpu-b --node-ip 127.0.0.2 || fail "agent did not start"
remember "$CORRAL_HOME/agent_gpu-b/corrald.pid"
[ "$(echo $DPIDS | wc -w)" = 2 ] || fail "the pids of the head and the agent: '$DPIDS'"
"$CORRAL" run --gpus 1 --workers 2 -- sh -c 'echo hello $CORRAL_WORKER_INDEX' || fail "run"
"$CORRAL" run -- sh -c 'exit 3'; [ $? -eq 3 ] || fail "exit code"
"$CORRAL" run --max-restarts 1 --restart gang -- sh -c '[ "$CORRAL_RESTART_COUNT" = 1 ] || exit 1' || fail "restart"
"$CORRAL" run -- /no/such/command >/dev/null 2>&1
"$CORRAL" run --gpus 8 --workers 2 --placement STRICT_SPREAD -- sh -c 'echo $CORRAL_NODE_ID' || fail "spread"
"$CORRAL" pg create g --bundles 'GPU=4;GPU=4' --strategy STRICT_SPREAD >/dev/null || fail "pg create"
"$CORRAL" run --pg g -- sh -c 'sleep 0.2; echo in group' || fail "run in group"
"$CORRAL" pg list --json >/dev/null && "$CORRAL" pg remove g || fail "pg remove"
"$CORRAL" run --gpus 9 -- true 2>/dev/null && fail "9 GPUs accepted"
"$CORRAL" job list >/dev/null; "$CORRAL" status >/dev/null; "$CORRAL" nodes --json >/dev/null
"$CORRAL" events >/dev/null
printf '\x00\x00\x00\x08garbage!' > "/dev/tcp/127.0.0.1/${ADDR##*:}" 2>/dev/null
for e in $DPIDS; do # the agent, by the pid remembered at its start
    [ "${e%%:*}" = "$(cat "$CORRAL_HOME/agent_gpu-b/corrald.pid" 2>/dev/null)" ] &&
        ours "${e%%:*}" "${e##*:}" && kill -TERM "${e%%:*}"
done
"$CORRAL" stop >/dev/null || fail "stop"
for _ in $(seq 200); do alive_ours || break; sleep 0.1; done
# valgrind 3.19 does not know pidfd_open (434); corral falls back without it
for f in "$VG"/*.log; do
    sed -i '/^--[0-9]*-- /d' "$f"
    if [ -s "$f" ]; then
        fail "valgrind reported in $f:"
        cat "$f"
    fi
done
echo "valgrind: $(ls "$VG" | wc -l) daemon process(es) checked, $fails failure(s)"
exit $((fails > 0))
