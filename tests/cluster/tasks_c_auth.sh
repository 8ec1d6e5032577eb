#!/usr/bin/env bash
# Mutual authentication of the task protocol over TCP (docs/actors.md
# "Wire"): the connecting side (a worker dialing its owner, a caller
# dialing an actor) sends its own nonce in HELLO and takes no call from a
# peer whose WELCOME does not MAC it under CORRAL_TASK_SECRET. A fake owner
# (tests/cluster/lib/fake_task_peer.py: a real TCP listener that has all
# but the secret) answers with a wrong mac, none, or the reflected one;
# the real workers refuse it before running its CALL:
#   C worker (examples/tasks/tasks_example as a leased worker)
#   Python worker (python -m corral._worker) and Python caller (Core.connect)
# and with the right mac they serve it (the fake is a fair one). The
# accepting Python side answers a HELLO's nonce with the right mac and
# refuses a HELLO without one. (tasks_c.sh's demo over TCP runs the C
# owner's side with real workers.)
EX=$CORRAL_BUILD_DIR/examples/tasks_example
[ -x "$EX" ] || { echo "FAIL: $EX was not built"; exit 1; }
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" ctasksauth
trap cluster_cleanup EXIT
FAKE=$CORRAL_SOURCE_DIR/tests/cluster/lib/fake_task_peer.py
SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
PY=/usr/bin/python3
export CORRAL_LOG_LEVEL=error

# fake_owner MODE CALLKIND: starts the fake owner; sets PORT, OUT, FPID
fake_owner() {
    local pf=$TDATA/port.$RANDOM
    OUT=$TDATA/out.$RANDOM
    "$PY" "$FAKE" owner "$1" "$pf" "$OUT" "$SECRET" "$2" 2>"$OUT.err" &
    FPID=$!
    WPIDS="$WPIDS $FPID"
    for _ in $(seq 300); do [ -s "$pf" ] && break; sleep 0.1; done
    PORT=$(cat "$pf" 2>/dev/null)
    [ -n "$PORT" ] || fail "the fake owner did not listen: $(cat "$OUT.err")"
}
# fake_result: waits for the fake (in this shell: a $(...) subshell's wait
# does not wait for its parent's child, and then read the file while the
# fake was still writing it, empty under load); sets RES to what it saw
fake_result() {
    wait "$FPID"
    RES=$(cat "$OUT" 2>/dev/null || echo "no result: $(cat "$OUT.err")")
}

# ---- the C worker ----
for mode in wrong missing reflect good; do
    fake_owner $mode c
    err=$(cd /tmp && env CORRAL_TASK_LEASE=L1 CORRAL_TASK_OWNER="tcp:127.0.0.1:$PORT" \
        CORRAL_TASK_SECRET="$SECRET" timeout 120 "$EX" 2>&1)
    rc=$?
    fake_result
    res=$RES
    if [ $mode = good ]; then
        # 7 squared, little-endian int64
        [ $rc -eq 0 ] && [ "$res" = "returned 0 3100000000000000" ] &&
            ok "C worker: an owner with the right WELCOME mac is served ($res)" ||
            fail "C worker, good mac: rc=$rc result=$res: $err"
    else
        [ $rc -eq 1 ] && [ "$res" = closed ] &&
            ok "C worker: a fake owner ($mode mac) is refused before its CALL runs" ||
            fail "C worker, $mode mac: rc=$rc result=$res: $err"
        grep -q "did not prove CORRAL_TASK_SECRET (its WELCOME's mac is $([ $mode = missing ] && echo missing || echo wrong))" <<<"$err" &&
            ok "C worker says why: ${err#corral worker: }" || fail "C worker's message: $err"
    fi
done

# ---- Python ----
if ! "$PY" -c 'import numpy, cloudpickle' 2>/dev/null || [ ! -e "$CORRAL_BUILD_DIR/python/corral/_core.abi3.so" ]; then
    echo "skip: the Python half (/usr/bin/python3 lacks numpy or cloudpickle, or no _core)"
    finish
fi
export PYTHONPATH=$CORRAL_SOURCE_DIR/python
py_core_env
for mode in wrong reflect good; do
    fake_owner $mode info
    err=$(cd /tmp && env "${PY_ENV[@]}" CORRAL_TASK_LEASE=L1 CORRAL_TASK_OWNER="tcp:127.0.0.1:$PORT" \
        CORRAL_TASK_SECRET="$SECRET" timeout 120 "$PY" -m corral._worker 2>&1)
    rc=$?
    fake_result
    res=$RES
    if [ $mode = good ]; then
        [ "${res%% *}" = returned ] && [ "$(cut -d' ' -f2 <<<"$res")" = 0 ] &&
            ok "Python worker: an owner with the right WELCOME mac is served" ||
            fail "Python worker, good mac: rc=$rc result=$res: $err"
    else
        [ $rc -eq 1 ] && [ "$res" = closed ] && grep -q "did not prove CORRAL_TASK_SECRET" <<<"$err" &&
            ok "Python worker: a fake owner ($mode mac) is refused: $(grep -o 'did not prove.*' <<<"$err" | head -1)" ||
            fail "Python worker, $mode mac: rc=$rc result=$res: $err"
    fi
done
for mode in wrong good; do
    fake_owner $mode info
    out=$(cd /tmp && env "${PY_ENV[@]}" CORRAL_TASK_LEASE=L1 CORRAL_TASK_SECRET="$SECRET" timeout 120 "$PY" -c '
import sys, time
from corral import _runtime as R
core = R.Core()
try:
    c = core.connect("tcp:127.0.0.1:" + sys.argv[1])
except ConnectionError as e:
    print("refused:", e)
    sys.exit(0)
print("connected")
while not c.closed:  # the fake owner asks for INFO, then says BYE
    time.sleep(0.05)
' "$PORT" 2>&1)
    fake_result
    res=$RES
    if [ $mode = good ]; then
        [ "$(head -1 <<<"$out")" = connected ] && [ "${res%% *}" = returned ] &&
            ok "Python caller: a peer with the right WELCOME mac is taken" ||
            fail "Python caller, good mac: $out / $res"
    else
        grep -q "^refused: .*did not prove CORRAL_TASK_SECRET" <<<"$out" && [ "$res" = closed ] &&
            ok "Python caller: a fake actor ($mode mac) is refused" || fail "Python caller, $mode mac: $out / $res"
    fi
done
# the accepting Python side: a HELLO's nonce is answered, none is refused
out=$(cd /tmp && env "${PY_ENV[@]}" CORRAL_TASK_LEASE=L1 CORRAL_TASK_SECRET="$SECRET" timeout 120 "$PY" -c '
import subprocess, sys
from corral import _runtime as R
core = R.Core()
tcp = core.address.split("tcp:")[1]
for mode in ("good", "nonce-less"):
    r = subprocess.run([sys.executable, sys.argv[1], "worker", mode, tcp, sys.argv[2]],
                       capture_output=True, text=True, timeout=120)
    print(mode, r.stdout.strip(), r.stderr.strip())
' "$FAKE" "$SECRET" 2>&1)
grep -q "^good welcome-mac-ok" <<<"$out" && ok "Python listener: WELCOME proves the secret" ||
    fail "Python listener: $out"
grep -q "^nonce-less closed" <<<"$out" && ok "Python listener: a HELLO without a nonce is refused" ||
    fail "Python listener, nonce-less: $out"
finish
