#!/usr/bin/env bash
# 100,000 tasks in one driver do not grow the head's memory (issue 15,
# "Tests"): tasks go owner to leased worker directly, the head sees only the
# few lease jobs. A head on the simulated 16-CPU node of specs/cpu-only.yaml;
# python/tests/tasks_many.py runs 5,000 tasks to lease its workers, reads the
# head's VmRSS (/proc/PID/status), runs 100,000 more (1,000 submitted, then
# all got, 100 times, each result checked), reads it again and fails when it
# grew by more than TASKS_MANY_BOUND_KB (16 MiB): a record per task in the
# head (a job or a placement, at least 1 KiB each, the lease jobs' argv and
# environment alone several KiB) would be 100 MB or more, while the head's
# own noise (its allocator's arenas, SQLite's page cache, the status calls of
# the owner's lease monitor) stays within a few MiB. It also fails when the
# driver's own tables (objects, calls in flight, callbacks) are not back to
# where they were. Skipped (77) without /usr/bin/python3's numpy or
# cloudpickle.
PY=/usr/bin/python3
"$PY" -c 'import numpy, cloudpickle' 2>/dev/null ||
    { echo "skip: /usr/bin/python3 lacks numpy or cloudpickle (scripts/deps.sh installs them)"; exit 77; }
[ -e "$CORRAL_BUILD_DIR/python/corral/_core.abi3.so" ] ||
    { echo "FAIL: $CORRAL_BUILD_DIR/python/corral/_core.abi3.so was not built"; exit 1; }
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" ctasksmany
# under ASan the head's freed buffers wait in its quarantine (256 MiB by
# default) and would count as growth below: keep it small (as
# tests/cli/output.sh does)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4"
trap cluster_cleanup EXIT
head_up "$SPECS/cpu-only.yaml" 2>/dev/null
HPID=$(cat "$CORRAL_HOME/session_latest/corrald.pid")
grep -q corrald "/proc/$HPID/cmdline" 2>/dev/null || fail "no head process at pid $HPID"
export PYTHONPATH=$CORRAL_SOURCE_DIR/python CORRAL_HEAD_PID=$HPID
py_core_env
out=$(cd /tmp && timeout 300 env "${PY_ENV[@]}" "$PY" "$CORRAL_SOURCE_DIR/python/tests/tasks_many.py" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "$(tail -1 <<<"$out")" || fail "rc=$rc
$out"
finish
