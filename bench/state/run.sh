#!/usr/bin/env bash
# State benchmark: how many small transactions the head's state database
# (head/state.c) commits per second, against the sqlite3 command-line tool
# running the same SQL statements in one process on a copy of the same
# database with the same settings (WAL, synchronous=NORMAL, foreign keys).
#
#   transitions: one transaction = one job and its 8 workers change state
#                (9 UPDATEs and a COMMIT), TRANSITIONS of them (default 10000)
#   events:      one event appended per transaction, EVENTS of them
#                (default 20000)
#   heartbeats:  NODES nodes (default 10000) have their heartbeat time
#                recorded in one transaction per round, HB_ROUNDS rounds
#                (default 10): how a head persists membership once a period
#
# Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE` lines on stdout
# (ratio: corral's time per operation over the peer's; below 1 means corral
# is faster); notes go to stderr. Both sides are timed from outside with
# bash's $EPOCHREALTIME around the whole process (start, open, the work,
# close with its checkpoint), alternating within each repetition, on a fresh
# copy of the same starting database; median of REPS (default 5). Both
# end states are compared, so both did the same work.
#
#   bench/state/run.sh                  (make bench-state builds first)
#   REPS=9 TRANSITIONS=20000 bench/state/run.sh
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
DRIVER="${STATE_BENCH:-$BUILD/tests/unit/test_state_bench}"
REPS="${REPS:-5}"
TRANSITIONS="${TRANSITIONS:-10000}"
EVENTS="${EVENTS:-20000}"
NODES="${NODES:-10000}"
HB_ROUNDS="${HB_ROUNDS:-10}"
JOBS=100
GANG=8
SQLITE3="${SQLITE3:-sqlite3}"
[ -x "$DRIVER" ] || { echo "bench/state: no $DRIVER; run make build first" >&2; exit 2; }
note() { echo "note: $*" >&2; }
have_peer=1
command -v "$SQLITE3" >/dev/null || { have_peer=0; note "sqlite3 not installed (package sqlite3): no peer figures"; }

WORK="$(mktemp -d /tmp/corral-bench-state-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# the starting database: JOBS jobs of GANG workers, written by corral
"$DRIVER" setup "$WORK/template.db" "$JOBS"
"$DRIVER" nodes "$WORK/template.db" "$NODES"

# the peer's script: the statements head/state.c runs, as text; the
# transition i moves job i % JOBS + 1 through PLACING/RUNNING and its
# workers through STARTING/RUNNING at time i, like the driver
PRAGMAS="PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;"
awk -v n="$TRANSITIONS" -v jobs="$JOBS" -v gang="$GANG" -v pragmas="$PRAGMAS" 'BEGIN {
    print pragmas
    split("PLACING RUNNING", js, " "); split("STARTING RUNNING", ws, " ")
    for (i = 0; i < n; i++) {
        id = i % jobs + 1; c = i % 2 + 1
        print "BEGIN IMMEDIATE;"
        printf "UPDATE jobs SET state = '\''%s'\'', reason = NULL, updated_ms = %d WHERE id = %d;\n", js[c], i, id
        for (k = 0; k < gang; k++)
            printf "UPDATE workers SET state = '\''%s'\'', updated_ms = %d WHERE job_id = %d AND idx = %d;\n", ws[c], i, id, k
        print "COMMIT;"
    }
}' >"$WORK/transitions.sql"
awk -v n="$EVENTS" -v pragmas="$PRAGMAS" 'BEGIN {
    print pragmas
    for (i = 0; i < n; i++)
        printf "INSERT INTO events (time_ms, kind, job_id, node_id, pg_id, message) VALUES (%d, '\''started'\'', %d, '\''node-0'\'', NULL, '\''worker 3 started, pid 12345'\'');\n", i, i % 100 + 1
}' >"$WORK/events.sql"
awk -v n="$NODES" -v rounds="$HB_ROUNDS" -v pragmas="$PRAGMAS" 'BEGIN {
    print pragmas
    for (r = 0; r < rounds; r++) {
        print "BEGIN IMMEDIATE;"
        for (i = 0; i < n; i++)
            printf "UPDATE nodes SET last_heartbeat_ms = %d WHERE id = '\''node-%05d'\'';\n", r + 1, i
        print "COMMIT;"
    }
}' >"$WORK/heartbeats.sql"

LAST_US=0
time_us() { # CMD... (stdin from $IN)
    local t0 t1
    t0=$EPOCHREALTIME
    "$@" <"$IN" >/dev/null
    t1=$EPOCHREALTIME
    LAST_US=$(( ${t1/./} - ${t0/./} ))
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
fresh() { rm -f "$WORK/$1" "$WORK/$1-wal" "$WORK/$1-shm"; cp "$WORK/template.db" "$WORK/$1"; }
end_state() { # the rows both sides wrote, as one text
    "$SQLITE3" "$1" "SELECT group_concat(id || state || updated_ms) FROM jobs;
        SELECT group_concat(job_id || idx || state || updated_ms) FROM workers;
        SELECT count(*), sum(time_ms), sum(job_id) FROM events;
        SELECT count(*), sum(last_heartbeat_ms) FROM nodes;"
}

IN=/dev/null
for kind in transitions events heartbeats; do
    args=("$TRANSITIONS") n=$TRANSITIONS name=state_transitions unit=tx/s
    [ "$kind" = events ] && { args=("$EVENTS") n=$EVENTS name=state_event_appends unit=events/s; }
    [ "$kind" = heartbeats ] && { args=("$NODES" "$HB_ROUNDS") n=$((NODES * HB_ROUNDS))
        name=state_node_heartbeats_batched unit=updates/s; }
    c=() p=()
    for ((r = 0; r < REPS; r++)); do
        fresh corral.db
        IN=/dev/null time_us "$DRIVER" "$kind" "$WORK/corral.db" "${args[@]}"; c+=("$LAST_US")
        if ((have_peer)); then
            fresh peer.db
            IN="$WORK/$kind.sql" time_us "$SQLITE3" "$WORK/peer.db"; p+=("$LAST_US")
        fi
    done
    if ((have_peer)) && [ "$(end_state "$WORK/corral.db")" != "$(end_state "$WORK/peer.db")" ]; then
        echo "bench/state: corral and sqlite3 ended in different states after $kind" >&2
        exit 1
    fi
    cu=$(median "${c[@]}")
    echo "figure ${name}_corral $(awk -v n="$n" -v u="$cu" 'BEGIN { printf "%.0f", n / (u / 1e6) }') $unit"
    if ((have_peer)); then
        pu=$(median "${p[@]}")
        echo "figure ${name}_sqlite3_cli $(awk -v n="$n" -v u="$pu" 'BEGIN { printf "%.0f", n / (u / 1e6) }') $unit"
        echo "ratio ${name}_time_vs_sqlite3_cli $(awk -v a="$cu" -v b="$pu" 'BEGIN { printf "%.2f", a / b }')"
    fi
done
