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
trap 'pkill -f "$CORRAL_HOME" 2>/dev/null; rm -rf "$CORRAL_HOME"' EXIT

"$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" || { echo "head did not start"; exit 1; }
ADDR=$(cat "$CORRAL_HOME/session_latest/address")
"$CORRAL" start --address "$ADDR" --token-file "$CORRAL_HOME/session_latest/token" \
    --hw-spec "$SRC/specs/dgx-h100.yaml" --node-id gpu-b --node-ip 127.0.0.2 || fail "agent did not start"
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
kill -TERM "$(cat "$CORRAL_HOME/agent_gpu-b/corrald.pid")"
"$CORRAL" stop >/dev/null || fail "stop"
for _ in $(seq 200); do pgrep -f "$CORRAL_HOME/corrald-vg|valgrind.*corrald" >/dev/null || break; sleep 0.1; done
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
