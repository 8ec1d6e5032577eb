#!/bin/bash
# Job output in bulk (issue 18): 64 MiB through `corral run` arrive whole
# and in order (a checksum); a follower that stops reading holds a bounded
# part of the head's memory (its queue), does not stop the worker nor a
# second follower, and gets every byte once it reads again; the head
# raises its open-file limit to the hard limit at start. No timings: each
# step waits for a state (a file's size, the job's end), not for a time.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" output
SPEC=$CORRAL_SOURCE_DIR/specs/cpu-only.yaml
T=$TDATA
mkdir -p "$T"
MIB=$((1024 * 1024))

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# where file $1 differs from $2 (the bytes that should be), and whether
# worker file $3 (what the head read from) had them right: a transport
# fault and a file read wrong look different
differs() {
    local n first zeros
    n=$(cmp -l "$1" "$2" 2>/dev/null | wc -l)
    first=$(cmp "$1" "$2" 2>&1 | head -1)
    zeros=$(cmp -l "$1" "$2" 2>/dev/null | awk '$2 == 0' | wc -l)
    echo "[$n bytes differ, $zeros of them zeros in the output; $first;" \
        "the worker's file: $(cmp "$3" "$2" 2>&1 | head -1 || true)]"
}

# the open-file limit: a soft limit below the hard one is raised, and said
hard=$(ulimit -Hn)
soft=$((hard > 4096 ? 1024 : hard / 2))
# under ASan the head's freed buffers wait in its quarantine (256 MiB by
# default) and would count as growth below: keep it small
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4"
# 128 MiB per worker must stay whole: above the default bound on worker
# output files (64 MiB, --worker-log-max; tests/cli/output_rotation.sh)
out=$(ulimit -Sn "$soft" && "$CORRAL" start --head --hw-spec "$SPEC" --worker-log-max 256M 2>&1) || { fail "start: $out"; finish; }
HPID=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
lim=$(awk '/^Max open files/ {print $4}' "/proc/$HPID/limits")
[ "$hard" = unlimited ] || { [ "$lim" = "$hard" ] && grep -q "open-file limit raised from $soft to $hard" <<<"$out"; } &&
    ok "start: open-file limit raised from $soft to the hard limit $lim, and said" ||
    fail "open-file limit: soft $lim (hard $hard): $out"
"$CORRAL" events | grep -q "started .*open-file limit raised from $soft" &&
    ok "start: the started event names the limit" || fail "started event: $("$CORRAL" events | head -3)"

# 1. 64 MiB of random bytes: whole and in order through corral run
head -c $((64 * MIB)) /dev/urandom >"$T/r64"
want=$(sha256sum <"$T/r64" | cut -d' ' -f1)
"$CORRAL" run -- cat "$T/r64" >"$T/run.out" 2>"$T/run.err"; rc=$?
got=$(sha256sum <"$T/run.out" | cut -d' ' -f1)
[ $rc -eq 0 ] && [ "$got" = "$want" ] && ok "run: 64 MiB whole and in order (sha256)" ||
    fail "run 64 MiB: rc=$rc $(wc -c <"$T/run.out") bytes, sha256 $got want $want $(head -c 300 "$T/run.err") $(differs "$T/run.out" "$T/r64" "$CORRAL_HOME"/session_latest/logs/job1-w0.out)"

# the same on stderr, and both at once: each stream whole
"$CORRAL" run -- sh -c "cat $T/r64 >&2 & cat $T/r64; wait" >"$T/both.out" 2>"$T/both.err"; rc=$?
[ $rc -eq 0 ] && [ "$(sha256sum <"$T/both.out" | cut -d' ' -f1)" = "$want" ] &&
    [ "$(sha256sum <"$T/both.err" | cut -d' ' -f1)" = "$want" ] &&
    ok "run: 64 MiB on stdout and on stderr at once, each whole" ||
    fail "run both: rc=$rc out $(wc -c <"$T/both.out") err $(wc -c <"$T/both.err") bytes"

# 2. a follower that stops reading: 128 MiB written while it does not read.
# The job says "ready" first and waits for go: both followers have seen
# it (so they follow from the start, not a long file's last 8 MiB).
cat "$T/r64" "$T/r64" >"$T/r128"
want128=$({ echo ready; cat "$T/r128"; } | sha256sum | cut -d' ' -f1)
rest128=$(sha256sum <"$T/r128" | cut -d' ' -f1)
id=$("$CORRAL" run --detach -- sh -c "echo ready; while [ ! -e $T/go ]; do sleep 0.05; done; cat $T/r128")
mkfifo "$T/stuck"
# the stuck reader takes the first line, then reads nothing until release
sh -c "read -r first; echo \"\$first\" >$T/first; while [ ! -e $T/release ]; do sleep 0.05; done; exec sha256sum" \
    <"$T/stuck" >"$T/stuck.sum" &
rdpid=$!
"$CORRAL" job logs -f "$id" >"$T/stuck" 2>"$T/stuck.err" &
f1=$!
"$CORRAL" job logs -f "$id" >"$T/free.out" 2>"$T/free.err" &
f2=$!
WPIDS="$WPIDS $rdpid $f1 $f2"
wait_until "grep -qx ready $T/first 2>/dev/null && grep -qx ready $T/free.out" 60 ||
    fail "followers did not see the first line: $(cat "$T/stuck.err" "$T/free.err")"
rss0=$(rss_kib "$HPID")
touch "$T/go"
wait_until "[ \"\$(status $id | jq -r .state)\" = SUCCEEDED ]" 120 &&
    ok "stuck follower: the worker wrote its 128 MiB and ended meanwhile" ||
    fail "stuck follower: job $id is $(status "$id" | jq -r .state)"
wait "$f2"; rc=$?
[ $rc -eq 0 ] && [ "$(sha256sum <"$T/free.out" | cut -d' ' -f1)" = "$want128" ] &&
    ok "stuck follower: a second follower of the job got its 128 MiB whole meanwhile" ||
    fail "second follower: rc=$rc $(wc -c <"$T/free.out") bytes $(head -c 300 "$T/free.err")"
rss1=$(rss_kib "$HPID")
grow=$(((rss1 - rss0) / 1024))
# bound: the follower's queue (4 MiB) and socket buffer, the read buffer,
# malloc's slack; an unbounded queue would hold most of the 128 MiB
[ $grow -lt 40 ] && ok "stuck follower: the head's RSS grew ${grow} MiB (bounded queue)" ||
    fail "stuck follower: the head's RSS grew from $rss0 to $rss1 KiB"
kill -0 "$f1" 2>/dev/null && ok "stuck follower: still following, not dropped" ||
    fail "stuck follower: gone: $(cat "$T/stuck.err")"
touch "$T/release"
wait_until "! kill -0 $f1 2>/dev/null" 120
wait "$f1"; rc=$?
wait "$rdpid"
got=$(cut -d' ' -f1 "$T/stuck.sum")
[ $rc -eq 0 ] && [ "$got" = "$rest128" ] &&
    ok "stuck follower: once it reads again, all 128 MiB whole and in order" ||
    fail "stuck follower after release: rc=$rc sha256 $got $(head -c 300 "$T/stuck.err")"
finish
