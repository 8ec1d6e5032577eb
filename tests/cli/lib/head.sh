# Sourced by the runtime tests (tests/cli/*.sh) that start real heads:
#   . "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" TAG
# sets a private CORRAL_HOME, collects the sanitizer reports of the detached
# head and of every client (the head's stderr is gone once it answers),
# always stops the head (and the pids in WPIDS) on exit, and gives
# fail/ok/gone/status and finish. Lives in lib/ so ctest does not run it.
: "${CORRAL:?}" "${CORRAL_SOURCE_DIR:?}"
HEAD_TEST=${1:?usage: . head.sh TAG}
export CORRAL_HOME=$(mktemp -d "/tmp/corral-$HEAD_TEST-XXXXXX")
unset CORRAL_ADDRESS CORRAL_TOKEN_FILE
ASAN_DIR=$(mktemp -d "/tmp/corral-$HEAD_TEST-asan-XXXXXX")
# files a test's workers read or write: never in CORRAL_HOME, which the
# workers of a root agent do not see (docs/workers.md "What a worker can
# reach")
TDATA=$(mktemp -d "/tmp/corral-$HEAD_TEST-data-XXXXXX")
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$ASAN_DIR/asan"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$ASAN_DIR/ubsan:print_stacktrace=1"
fails=0
WPIDS=""
cleanup() {
    local pid
    pid=$(cat "$CORRAL_HOME"/session_latest/corrald.pid 2>/dev/null)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
    fi
    for p in $WPIDS; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$CORRAL_HOME" "$ASAN_DIR" "$TDATA"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
# a process that no longer exists or is a zombie
# (the state after the last ')' of /proc/PID/stat: a name may hold spaces;
# unreadable, as when it is reaped between two looks, is gone too, and so
# is X, dead while being reaped)
gone() {
    local st
    st=$(sed -n 's/.*) \([A-Za-z]\).*/\1/p' /proc/$1/stat 2>/dev/null)
    [ -z "$st" ] || [ "$st" = Z ] || [ "$st" = X ]
}
status() { "$CORRAL" job status "$1" --json; }
# Fails on any sanitizer report, prints the tally and exits with it.
finish() {
    sleep 0.2
    if compgen -G "$ASAN_DIR/*" >/dev/null; then
        fail "sanitizer reports:"
        cat "$ASAN_DIR"/*
    fi
    [ $fails -eq 0 ] && echo "$HEAD_TEST: all passed" || echo "$HEAD_TEST: $fails failure(s)"
    exit $((fails > 0))
}
