#!/bin/bash
# Acknowledgement means committed (issue 12, docs/runtime.md "The state
# store"): on a real full disk (a small tmpfs in a private mount
# namespace) the head answers the submissions it cannot record with an
# error that says so, serves reads only, never hands out an id twice and
# resumes by itself once space returns; its log on that full disk never
# stops it. At start, a damaged state.db is refused and moved aside, a
# read-only one refused without a new session; --log-file is honoured and
# never followed through a symlink.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/private_ns.sh" "$0" "$@"
SPEC=$CORRAL_SOURCE_DIR/specs/cpu-only.yaml
# the sanitizer reports of the detached heads (their stderr is gone)
ASAN_DIR=$(mktemp -d /tmp/asan-XXXXXX)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$ASAN_DIR/asan"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$ASAN_DIR/ubsan:print_stacktrace=1"
mkdir -m 700 /tmp/full && mount -t tmpfs -o size=6m,mode=0700 tmpfs /tmp/full ||
    { echo "FAIL: cannot mount the small tmpfs"; exit 1; }
export CORRAL_HOME=/tmp/full/home
mkdir -m 700 $CORRAL_HOME
CORRAL_LOG_LEVEL=info "$CORRAL" start --head --hw-spec "$SPEC" >/dev/null 2>&1 || fail "start on the tmpfs"
hpid=$(cat $CORRAL_HOME/session_latest/corrald.pid)

# --- the disk fills ---------------------------------------------------------
: >/tmp/acks
for i in $(seq 5); do "$CORRAL" run --detach -- true >>/tmp/acks || fail "submit before the disk fills"; done
dd if=/dev/zero of=/tmp/full/filler bs=64k 2>/dev/null
refused=0
: >/tmp/sleeps
for i in $(seq 400); do
    # a job whose turn cannot commit must run nothing (its workers start
    # at the commit): the STORE_FULL_MARK of their environment finds any
    # that does below
    if out=$(STORE_FULL_MARK=1 "$CORRAL" run --detach -- sleep 600 2>/tmp/err); then
        echo "$out" >>/tmp/acks
        echo "$out" >>/tmp/sleeps
    else
        out=$(cat /tmp/err)
        refused=$((refused + 1))
        [ $refused = 1 ] && first=$out
        last=$out
    fi
    [ $refused -ge 20 ] && break
done
[ $refused -gt 0 ] && ok "submissions refused on the full disk ($refused, after $(wc -l </tmp/acks) acknowledged)" ||
    fail "nothing refused on a full disk ($(wc -l </tmp/acks) acknowledged)"
grep -q "the state store could not commit: .*nothing of this request was kept" <<<"${first:-}" &&
    ok "the refusal says why: $first" || fail "first refusal: ${first:-none}"
grep -q "serves reads only until it can commit" <<<"${last:-}" && ok "writes refused while it cannot commit" ||
    fail "later refusal: ${last:-none}"
kill -0 "$hpid" && "$CORRAL" job list >/dev/null && ok "the head stays up and serves reads" ||
    fail "the head after the full disk: $(kill -0 "$hpid" 2>&1)"
# the workers of jobs never acknowledged that still run (this namespace's
# processes carrying STORE_FULL_MARK and a job id not in /tmp/acks)
unacked_workers() {
    local p id
    for p in /proc/[0-9]*; do
        gone "${p#/proc/}" && continue
        tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx STORE_FULL_MARK=1 || continue
        id=$(tr '\0' '\n' <"$p/environ" 2>/dev/null | sed -n 's/^CORRAL_JOB_ID=//p')
        [ -n "$id" ] && ! grep -qx "$id" /tmp/acks && echo "pid ${p#/proc/} job $id"
    done
}
for _ in $(seq 50); do [ -z "$(unacked_workers)" ] && break; sleep 0.1; done
left=$(unacked_workers)
[ -z "$left" ] && ok "no worker of a refused submission runs on" ||
    fail "workers of refused submissions still run: $left"

# --- space returns: it resumes by itself, every acknowledged id recorded once
rm -f /tmp/full/filler
for _ in $(seq 100); do
    out=$("$CORRAL" run --detach -- true 2>&1) && break
    sleep 0.1
done
grep -Eq '^[0-9]+$' <<<"$out" && echo "$out" >>/tmp/acks &&
    ok "writes are served again once space returns" || fail "after space returned: $out"
while read -r id; do "$CORRAL" job stop "$id" --grace 0 >/dev/null; done </tmp/sleeps
"$CORRAL" job list --json >/tmp/list 2>&1 || fail "job list: $(cat /tmp/list)"
jq -r '.[].job_id' </tmp/list | sort >/tmp/listed
[ -z "$(sort /tmp/acks | uniq -d)" ] && [ -z "$(uniq -d /tmp/listed)" ] && ok "no id handed out twice" ||
    fail "duplicate ids: acks $(sort /tmp/acks | uniq -d | head -3) listed $(uniq -d /tmp/listed | head -3)"
missing=$(sort /tmp/acks | comm -23 - /tmp/listed)
[ -z "$missing" ] && [ "$(wc -l </tmp/listed)" = "$(wc -l </tmp/acks)" ] &&
    ok "every acknowledged job is recorded, nothing else ($(wc -l </tmp/acks))" ||
    fail "acked $(wc -l </tmp/acks), listed $(wc -l </tmp/listed), missing: $missing"
"$CORRAL" events | grep -q "the state store commits again" && ok "event: the store commits again" ||
    fail "no store event: $("$CORRAL" events | tail -3)"
for _ in $(seq 100); do
    [ "$("$CORRAL" job list --json | jq '[.[] | select(.state == "RUNNING" or .state == "PENDING")] | length')" = 0 ] && break
    sleep 0.1
done

# --- damage found at start: refused, the file moved aside ------------------
kill -KILL "$hpid"
for _ in $(seq 50); do gone "$hpid" && break; sleep 0.05; done
S=$CORRAL_HOME/$(readlink $CORRAL_HOME/session_latest)
# the header of the file and its write-ahead log gone (what a bad disk does)
printf 'this is not a database header, it is damage....' | dd of="$S/state.db" conv=notrunc 2>/dev/null
rm -f "$S/state.db-wal" "$S/state.db-shm"
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) && fail "started on a damaged state.db: $out"
grep -q "damaged" <<<"$out" && grep -q "moved aside to $S/state.db.damaged-" <<<"$out" &&
    ok "a damaged state.db refuses the start and is moved aside" || fail "damage at start: $out"
compgen -G "$S/state.db.damaged-*" >/dev/null && [ ! -e "$S/state.db" ] && ok "the damaged file kept for inspection" ||
    fail "not moved: $(ls "$S")"
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) && "$CORRAL" status >/dev/null &&
    ok "the next start begins with an empty state" || fail "start after moving aside: $out"

# --- a read-only state refuses the start, no new session -------------------
hpid=$(cat $CORRAL_HOME/session_latest/corrald.pid)
kill -KILL "$hpid"
for _ in $(seq 50); do gone "$hpid" && break; sleep 0.05; done
S=$CORRAL_HOME/$(readlink $CORRAL_HOME/session_latest)
chmod 444 "$S/state.db"
before=$(readlink $CORRAL_HOME/session_latest)
out=$(as_user 0 setpriv --inh-caps=-all --bounding-set=-all "$CORRAL" start --head --hw-spec "$SPEC" 2>&1) &&
    fail "started on a read-only state.db: $out"
grep -q "read-only" <<<"$out" && [ "$(readlink $CORRAL_HOME/session_latest)" = "$before" ] &&
    ok "a read-only state.db refuses the start, no new session" || fail "read-only: $out"
chmod 600 "$S/state.db"
chmod 500 "$S"
out=$(as_user 0 setpriv --inh-caps=-all --bounding-set=-all "$CORRAL" start --head --hw-spec "$SPEC" 2>&1) &&
    fail "started in an unwritable session: $out"
# (the state's -wal and -shm are there and writable: what refuses is the socket)
grep -Eq "state database|permission denied" <<<"$out" && [ "$(readlink $CORRAL_HOME/session_latest)" = "$before" ] &&
    ok "an unwritable session directory refuses the start, no new session: $(tail -1 <<<"$out")" ||
    fail "unwritable session: $out"
chmod 700 "$S"

# --- --log-file ---------------------------------------------------------------
ln -s /etc/passwd /tmp/full/evil.log
out=$("$CORRAL" start --head --hw-spec "$SPEC" --log-file /tmp/full/evil.log 2>&1) &&
    fail "logged through a symlink: $out"
grep -q -- "--log-file /tmp/full/evil.log" <<<"$out" && ok "a --log-file that is a symlink refuses the start" ||
    fail "symlink log: $out"
CORRAL_LOG_LEVEL=info "$CORRAL" start --head --hw-spec "$SPEC" --log-file /tmp/full/head.log >/dev/null 2>&1 ||
    fail "start with --log-file"
grep -q "corral: " /tmp/full/head.log && [ "$(stat -c %a /tmp/full/head.log)" = 600 ] &&
    ok "--log-file is where the head logs, mode 0600" || fail "head.log: $(ls -la /tmp/full)"
stop_head $CORRAL_HOME

# --- a log on a full disk never stops the head -------------------------------
mkdir -m 700 /tmp/tiny && mount -t tmpfs -o size=1m,mode=0700 tmpfs /tmp/tiny || fail "tiny tmpfs"
CORRAL_LOG_LEVEL=info "$CORRAL" start --head --hw-spec "$SPEC" --log-file /tmp/tiny/head.log >/dev/null 2>&1 ||
    fail "start with a log on the tiny tmpfs"
dd if=/dev/zero of=/tmp/tiny/filler bs=4k 2>/dev/null
for i in $(seq 30); do "$CORRAL" run --detach -- true >/dev/null || fail "submit $i with the log's disk full"; done
"$CORRAL" status >/dev/null && ok "the head serves on with its log's disk full" || fail "head with a full log disk"
rm -f /tmp/tiny/filler
"$CORRAL" run --detach -- true >/dev/null
for _ in $(seq 50); do grep -q "earlier log line(s) lost" /tmp/tiny/head.log && break; sleep 0.1; done
grep -q "earlier log line(s) lost: No space left on device" /tmp/tiny/head.log &&
    ok "the lines the full disk lost are counted in the next one: $(grep -o '([0-9]* earlier log line(s) lost' /tmp/tiny/head.log | head -1)" ||
    fail "log: $(tail -3 /tmp/tiny/head.log)"
stop_head $CORRAL_HOME
if compgen -G "$ASAN_DIR/*" >/dev/null; then
    fail "sanitizer reports:"
    cat "$ASAN_DIR"/*
fi
finish
