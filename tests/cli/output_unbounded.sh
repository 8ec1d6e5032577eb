#!/bin/bash
# Where the filesystem cannot punch holes (ramfs here, in a private mount
# namespace), worker output files cannot be bounded (docs/workers.md
# "Output files"): the worker still runs and its output is whole, the
# worker's started event (corral job status) says its files are unbounded,
# and the daemon's log says it once.
. "$CORRAL_SOURCE_DIR/tests/cli/lib/private_ns.sh" "$0" "$@"
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" outunb
SPECS=$CORRAL_SOURCE_DIR/specs
# the head's session as usual; an agent's home on ramfs (no
# FALLOC_FL_PUNCH_HOLE; the head's state.db would not open there: ramfs
# says it has no free space), ours alone
AHOME=$CORRAL_HOME/agent-home
mkdir -m 700 "$AHOME" && mount -t ramfs -o mode=0700 ramfs "$AHOME" ||
    { echo "skip: cannot mount ramfs"; exit 77; }
[ "$(stat -f -c %T "$AHOME")" = ramfs ] || { fail "$AHOME is no ramfs"; finish; }
# the head's copy of the agent's output keeps the default bound (64 MiB):
# at 1 MiB it would drop what a burst of forwarded output pushed past
# its last 1 MiB before this follower read it (docs/workers.md "Output
# files"), and that is not what is tested here
out=$("$CORRAL" start --head --hw-spec "$SPECS/cpu-only.yaml" 2>&1) ||
    { fail "start: $out"; finish; }
join=$(sed -n 's/^  \(corral start --address .*\)$/\1/p' <<<"$out")
out=$(CORRAL_HOME=$AHOME "$CORRAL" start ${join#corral start} --hw-spec "$SPECS/dgx-h100.yaml" \
    --node-id nb --node-ip 127.0.0.2 --worker-log-max 1M 2>&1) || { fail "join: $out"; finish; }
WPIDS="$WPIDS $(cat "$AHOME/agent_nb/corrald.pid")"
N=400000 # about 2.6 MiB, past the 1 MiB bound
out=$("$CORRAL" run --gpus 1 --label-selector corral.io/node-id=nb -- seq 1 $N 2>&1)
[ "$(tail -1 <<<"$out")" = "$N" ] && [ "$(wc -l <<<"$out")" = "$N" ] &&
    ok "the worker's output is whole ($N lines)" || fail "run: $(wc -l <<<"$out") lines"
st=$("$CORRAL" events 2>&1)
grep -q "output files unbounded (.*cannot punch holes" <<<"$st" &&
    ok "events: $(grep -o 'output files unbounded.*' <<<"$st" | head -1)" ||
    fail "the started event does not say the files are unbounded: [$st]"
grep -q "cannot be bounded" "$AHOME"/agent_nb/logs/corrald.log 2>/dev/null &&
    ok "the agent's log: $(grep -o 'output of worker.*' "$AHOME"/agent_nb/logs/corrald.log | head -1)" ||
    fail "the agent's log does not say it: $(ls "$AHOME"/agent_nb/ "$AHOME"/agent_nb/logs 2>&1)"
"$CORRAL" stop --address "$(cat "$CORRAL_HOME/session_latest/address")" \
    --token-file "$CORRAL_HOME/session_latest/token" >/dev/null 2>&1
for _ in $(seq 50); do gone "$(cat "$AHOME/agent_nb/corrald.pid" 2>/dev/null || echo 1)" && break; sleep 0.1; done
umount "$AHOME"
finish
