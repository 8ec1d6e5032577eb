#!/bin/bash
# A job's output is its own: an agent started in a CORRAL_HOME where an
# earlier head's agent ran keeps its output files there by worker id, and
# the next head numbers its jobs from 1 again, so its job 1 must not show
# the earlier job 1's output first. (A worker's first attempt starts its
# files empty; a restart of the worker appends, so `job logs` keeps every
# attempt's output.)
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" outfresh
SPECS=$CORRAL_SOURCE_DIR/specs

round() { # the word the job prints
    local out join
    out=$("$CORRAL" start --head --hw-spec "$SPECS/cpu-only.yaml" 2>&1) || { fail "start: $out"; return; }
    join=$(sed -n 's/^  \(corral start --address .*\)$/\1/p' <<<"$out")
    out=$("$CORRAL" start ${join#corral start} --hw-spec "$SPECS/dgx-h100.yaml" --node-id ga \
        --node-ip 127.0.0.2 2>&1) || fail "join: $out"
    WPIDS="$WPIDS $(cat "$CORRAL_HOME/agent_ga/corrald.pid")"
    out=$("$CORRAL" run --gpus 1 --label-selector corral.io/node-id=ga -- echo "$1" 2>&1)
    [ "$out" = "$1" ] && ok "head $2: the job prints only its own output ($out)" ||
        fail "head $2: the job printed [$out], want [$1]"
    out=$("$CORRAL" job logs 1 2>&1)
    [ "$out" = "$1" ] && ok "head $2: job logs 1 is its own" || fail "head $2: job logs [$out]"
    "$CORRAL" stop >/dev/null 2>&1 || fail "stop"
}
round first 1
round second 2

# a restart appends: both attempts' output stays in job logs
out=$("$CORRAL" start --head --hw-spec "$SPECS/cpu-only.yaml" 2>&1) || fail "start: $out"
id=$("$CORRAL" run --detach --max-restarts 1 -- sh -c 'echo "attempt ${CORRAL_RESTART_COUNT:-x}"; exit 3')
for _ in $(seq 200); do
    st=$("$CORRAL" job status "$id" --json | jq -r .state)
    case $st in SUCCEEDED | FAILED | STOPPED) break ;; esac
    sleep 0.1
done
out=$("$CORRAL" job logs "$id" 2>&1)
[ "$(grep -c '^attempt' <<<"$out")" = 2 ] && ok "a restarted worker's output appends: $(tr '\n' ' ' <<<"$out")" ||
    fail "restart logs: [$out] (state $st)"
"$CORRAL" stop >/dev/null 2>&1
finish
