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
# wait_until CMD [SECS]: polls CMD (eval'ed) every 0.1 s until it succeeds,
# for at most SECS seconds (default 10); fails after (a condition polled,
# not a time measured)
wait_until() {
    for _ in $(seq $((${2:-10} * 10))); do eval "$1" && return 0; sleep 0.1; done
    return 1
}
# jq_true FILTER [JQ OPTIONS...]: the JSON on stdin makes FILTER's last
# output neither false nor null, as jq -e says, except that no input at all
# (a command that failed and printed nothing) is false: Debian's jq 1.6
# exits 0 then with -e
jq_true() {
    local f=$1
    shift
    jq -en "$@" "[inputs | ($f)] | length > 0 and (last | . != false and . != null)" >/dev/null
}
# signal_when_pending SIGNAL CMD...: runs CMD with its output in a new file
# and sends it SIGNAL once it says it is pending (within 10 s), then prints
# what it said: the interruption a person makes, without a fixed wait. The
# pid is its own unreaped child until the wait, so the signals reach no
# other process; one that outlives the signal by 10 s is killed. The file
# is new each time: a call that read an earlier call's words could signal
# the child before it became CMD, and a forked bash that gets SIGTERM runs
# this script's EXIT trap (cleanup: the head stopped, CORRAL_HOME removed).
signal_when_pending() {
    local sig=$1 said
    shift
    said=$(mktemp "$TDATA/said-XXXXXX")
    "$@" >"$said" 2>&1 &
    local p=$!
    wait_until 'grep -q " pending" "$said"'
    kill -"$sig" "$p" 2>/dev/null
    wait_until 'gone $p' || kill -KILL "$p" 2>/dev/null
    wait "$p"
    cat "$said"
}
# kill -9 of this session's head, waited for (its pid from the session)
kill_head() {
    local h
    h=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
    kill -KILL "$h"
    for _ in $(seq 100); do gone "$h" && break; sleep 0.05; done
    gone "$h" || fail "head $h survived kill -9"
}
# `corral events -f --json` into FILE until it holds N lines (60 s at
# most), then stopped by its pid: follow_events N FILE
follow_events() {
    "$CORRAL" events -f --json >"$2" 2>&1 &
    local fpid=$!
    WPIDS="$WPIDS $fpid"
    for _ in $(seq 600); do
        [ "$(wc -l <"$2")" -ge "$1" ] && break
        sleep 0.1
    done
    kill "$fpid" 2>/dev/null
    wait "$fpid" 2>/dev/null
}
# PY_ENV: what a Python process that loads corral._core needs, for `env
# "${PY_ENV[@]}" ...`: nothing, or under the sanitizer build (whose _core
# links libasan) the sanitizer runtimes preloaded, as an uninstrumented
# /usr/bin/python3 cannot load them late, and no leak check (CPython
# keeps what it allocated at exit by design). Leased workers inherit it.
py_core_env() {
    local so=$CORRAL_BUILD_DIR/python/corral/_core.abi3.so libs
    PY_ENV=(CORRAL_PY_ENV=1)
    libs=$(ldd "$so" 2>/dev/null | awk '/lib(a|ub)san/ {printf "%s%s", sep, $3; sep=":"}')
    [ -n "$libs" ] && PY_ENV=(LD_PRELOAD="$libs" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
    return 0
}
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

# An IPv4 address of this machine that is not loopback, for the tests of
# what serves off loopback: BIND (0.0.0.0 when it has none) and AT, where
# that is reached (127.0.0.1 then); IP is empty when there is none.
offloopback_addr() {
    IP=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+){3}$' | grep -v '^127\.' | head -1)
    BIND=${IP:-0.0.0.0}
    AT=${IP:-127.0.0.1}
}

# Debian's Prometheus with CONFIG on 127.0.0.1:PORT, its data and log in
# DIR: prom_start CONFIG PORT DIR sets PROM (its pid: the caller ends it);
# prom_q QUERY answers the query API's JSON; prom_wait QUERY WANT prints the
# query's first value once it is WANT, or the last one seen after 60 s or
# when Prometheus exits.
prom_start() {
    prometheus --config.file="$1" --storage.tsdb.path="$3/data" \
        --web.listen-address="127.0.0.1:$2" >"$3/prometheus.log" 2>&1 &
    PROM=$!
    PROM_PORT=$2
}
prom_q() { curl -s --get --data-urlencode "query=$1" "http://127.0.0.1:$PROM_PORT/api/v1/query"; }
prom_wait() {
    local got="" _
    for _ in $(seq 600); do
        got=$(prom_q "$1" | jq -r '.data.result[0].value[1] // empty' 2>/dev/null)
        [ "$got" = "$2" ] && break
        kill -0 "$PROM" 2>/dev/null || break
        sleep 0.1
    done
    echo "$got"
}
