#!/bin/bash
# A worker starts with every signal at its default disposition and none
# blocked, though the head catches some (SIGTERM, SIGINT, SIGCHLD) and
# ignores SIGPIPE and glibc's own two; and the child that becomes the worker sets back only
# those the head's status lists as caught or ignored (SigCgt, SigIgn), not
# all 64 (agent/launch.c signals_to_default: issue 18, the spawn path of
# `corral run -- true`). Counts the child's rt_sigaction calls with strace
# (exits 77 without it: scripts/deps.sh installs it).
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" wsig
command -v strace >/dev/null || { echo "skip: no strace (scripts/deps.sh installs it)"; exit 77; }
T=$TDATA
# The head starts with glibc's own signals (32 and 33) ignored, as every
# child of GNU make has them (its posix_spawn leaves them so): glibc's
# sigaction cannot set them back, so a worker would inherit them ignored.
# Set by the system call itself (SIG_IGN is 1), which glibc does not wrap.
/usr/bin/python3 - "$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" \
    >/dev/null 2>&1 <<'PY' || { fail "head did not start"; finish; }
import ctypes, os, platform, sys
nr = {"x86_64": 13, "aarch64": 134}.get(platform.machine())  # SYS_rt_sigaction
if nr is None:
    sys.exit("no rt_sigaction number known for " + platform.machine())
libc = ctypes.CDLL(None, use_errno=True)
ign = ctypes.create_string_buffer((1).to_bytes(8, "little") + bytes(24))
for sig in (32, 33):
    if libc.syscall(nr, sig, ign, None, 8) != 0:
        sys.exit("rt_sigaction(%d): %s" % (sig, os.strerror(ctypes.get_errno())))
os.execv(sys.argv[1], sys.argv[1:])
PY
HPID=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
hmask() { sed -n "s/^$1:[[:space:]]*//p" "/proc/$HPID/status"; }
[ "$(hmask SigCgt)" != 0000000000000000 ] && (( 0x$(hmask SigIgn) & 0x180000000 )) &&
    ok "the head catches $(hmask SigCgt) and ignores $(hmask SigIgn)" ||
    fail "the head catches $(hmask SigCgt), ignores $(hmask SigIgn): not the signals to set back"

out=$("$CORRAL" run -- cat /proc/self/status 2>&1); rc=$?
m() { echo "$out" | sed -n "s/^$1:[[:space:]]*//p"; }
[ "$rc" = 0 ] && [ "$(m SigCgt)" = 0000000000000000 ] && [ "$(m SigIgn)" = 0000000000000000 ] &&
    [ "$(m SigBlk)" = 0000000000000000 ] &&
    ok "the worker: nothing caught, ignored or blocked" ||
    fail "the worker: exit $rc, SigCgt '$(m SigCgt)' SigIgn '$(m SigIgn)' SigBlk '$(m SigBlk)'"

# the same with the worker's own sh: a signal it would have inherited as
# ignored (SIGPIPE) ends a writer to a closed pipe (exit 141)
"$CORRAL" run -- bash -c 'yes | head -c 1 >/dev/null; exit ${PIPESTATUS[0]}' >/dev/null 2>&1; rc=$?
[ "$rc" = 141 ] && ok "SIGPIPE ends the worker's writer to a closed pipe (141)" ||
    fail "a writer to a closed pipe in the worker exited $rc, not 141 (SIGPIPE ignored?)"

# the child's calls: a handful of rt_sigaction, not one per signal
strace -f -qq -e trace=rt_sigaction,execve -e signal=none -o "$T/st" -p "$HPID" 2>/dev/null &
SPID=$!
WPIDS="$WPIDS $SPID"
for _ in $(seq 50); do grep -q TracerPid:.*"$SPID" "/proc/$HPID/status" 2>/dev/null && break; sleep 0.1; done
"$CORRAL" run -- true; rc=$?
sleep 0.3
kill -INT "$SPID" 2>/dev/null
wait "$SPID" 2>/dev/null
child=$(sed -n 's/^\([0-9]*\) *execve(.*/\1/p' "$T/st" | head -1)
n=$(grep -c "^$child *rt_sigaction(" "$T/st")
want=$(( $(printf '%d' 0x$(hmask SigCgt)) | $(printf '%d' 0x$(hmask SigIgn)) ))
bits=0; for ((i = 0; i < 64; i++)); do (( (want >> i) & 1 )) && bits=$((bits + 1)); done
[ "$rc" = 0 ] && [ -n "$child" ] && [ "$n" -le "$bits" ] && [ "$n" -gt 0 ] &&
    ok "the child set back $n dispositions ($bits caught or ignored by the head), not 62" ||
    fail "the child ($child) made $n rt_sigaction calls for $bits caught or ignored signals (exit $rc): $(head -c 600 "$T/st")"
finish
