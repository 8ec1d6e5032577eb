#!/bin/bash
# The requests of one `corral run` (issue 18, "Requests near the socket's
# round trip"; docs/protocol.md JobLogs.with_job): the handshake (Hello,
# Proof), the JobSubmit and one JobLogs{follow, with_job}, whose last
# LogChunk carries the job as it ended; no JobStatus{wait} after it. The
# exit code, and the reason of a failed job, come from that last chunk as
# they came from the JobStatus answer. Counts the frames the CLI writes to
# the head's socket with strace (exits 77 without it: scripts/deps.sh
# installs it).
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" runreq
command -v strace >/dev/null || { echo "skip: no strace (scripts/deps.sh installs it)"; exit 77; }
T=$TDATA
"$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" >/dev/null 2>&1 ||
    { fail "head did not start"; finish; }

# frames written to the head's socket by `corral ARGS...` (its output in $T/out)
frames() {
    # LeakSanitizer cannot run under ptrace (the same commands run unstraced below)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        strace -f -qq -e trace=connect,write -e signal=none -o "$T/st" "$CORRAL" "$@" >"$T/out" 2>&1
    local rc=$?
    local fd
    fd=$(sed -n 's/.*connect(\([0-9]*\), {sa_family=AF_UNIX, sun_path="[^"]*corrald.sock"}.*/\1/p' "$T/st" | head -1)
    echo "$(grep -c "write($fd, " "$T/st") $rc"
}
read -r n rc <<<"$(frames run -- true)"
[ "$rc" = 0 ] && [ "$n" = 4 ] && ok "corral run -- true: 4 requests (Hello, Proof, JobSubmit, JobLogs), exit 0" ||
    fail "corral run -- true: $n frames written, exit $rc: $(cat "$T/out")"
read -r n rc <<<"$(frames run -- sh -c 'echo out; echo err >&2; exit 7')"
[ "$rc" = 7 ] && [ "$n" = 4 ] && grep -q '^out$' "$T/out" && grep -q '^err$' "$T/out" &&
    grep -q "FAILED: worker 0 exited with code 7" "$T/out" &&
    ok "a failing job: its output, its reason and exit code 7, with no request more" ||
    fail "failing job: $n frames, exit $rc: $(cat "$T/out")"
read -r n rc <<<"$(frames run --workers 2 -- true)"
[ "$rc" = 0 ] && [ "$n" = 4 ] && ok "a gang of 2: the same 4 requests" || fail "gang: $n frames, exit $rc"
# the job that ends the follow comes without the environment the CLI sent
# (docs/protocol.md JobLogs.with_job): with 4 KiB of it, the CLI writes
# more than 4 KiB and reads far less back
big=$(head -c 4096 /dev/zero | tr '\0' x)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" BIG_FOR_THE_TEST="$big" \
    strace -f -qq -e trace=connect,read,write -e signal=none -o "$T/st" "$CORRAL" run -- true >"$T/out" 2>&1
rc=$?
fd=$(sed -n 's/.*connect(\([0-9]*\), {sa_family=AF_UNIX, sun_path="[^"]*corrald.sock"}.*/\1/p' "$T/st" | head -1)
wrote=$(sed -n "s/.*write($fd, .*) = \([0-9]*\)$/\1/p" "$T/st" | awk '{s+=$1} END{print s+0}')
got=$(sed -n "s/.*read($fd, .*) = \([0-9]*\)$/\1/p" "$T/st" | awk '{s+=$1} END{print s+0}')
[ "$rc" = 0 ] && [ "$wrote" -gt 4096 ] && [ "$got" -gt 0 ] && [ "$got" -lt 2048 ] &&
    ok "the job at the end comes without the environment sent ($wrote bytes written, $got read)" ||
    fail "with 4 KiB of environment: $wrote bytes written, $got read, exit $rc: $(cat "$T/out")"
out=$("$CORRAL" run -- sh -c 'exit 7' 2>&1); rc=$?
[ "$rc" = 7 ] && "$CORRAL" run --workers 2 -- true && ok "the same unstraced (a sanitizer build checks for leaks)" ||
    fail "unstraced: exit $rc: $out"
finish
