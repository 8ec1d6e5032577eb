#!/bin/bash
# Bounded before authentication (issue 12, docs/protocol.md "Limits"): on
# loopback only, 100 clients that never authenticate each send a 16 MiB
# frame to the head; its peak RSS grows by less than 64 MiB (it was 1.6 GB
# and the head died), none gets a reply, and the head still serves. Then
# 80 idle unauthenticated connections from one address: those above the
# per-peer cap are closed at accept, with one log line, and a local client
# is still served meanwhile.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" preauth
"$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" >/dev/null 2>&1 ||
    { fail "head start"; finish; }
S=$CORRAL_HOME/session_latest
h=$(cat "$S/corrald.pid")
ADDR=$(cat "$S/address")
hwm() { awk '/^VmHWM/{print $2}' "/proc/$1/status"; }
before=$(hwm "$h")

out=$(python3 - "$ADDR" <<'PY'
# 100 unauthenticated clients, each a 16 MiB frame (header and payload),
# sent as far as the head lets them within 20 s; counts replies
import selectors, socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
N, SIZE = 100, 16 << 20
chunk = memoryview(bytes(1 << 20))
sel = selectors.DefaultSelector()
sent, replied, closed = {}, 0, 0
for i in range(N):
    s = socket.create_connection((host, int(port)))
    s.sendall(struct.pack(">I", SIZE))
    s.setblocking(False)
    sent[s] = 0
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
deadline = time.time() + 20
while sent and time.time() < deadline:
    for key, ev in sel.select(timeout=0.5):
        s = key.fileobj
        try:
            if ev & selectors.EVENT_READ:
                if s.recv(65536):
                    replied += 1
                raise ConnectionResetError
            n = s.send(chunk[: min(len(chunk), SIZE - sent[s])])
            sent[s] += n
            if sent[s] >= SIZE:
                sel.modify(s, selectors.EVENT_READ)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            closed += 1
            sel.unregister(s)
            del sent[s]
            s.close()
print(f"replied={replied} closed={closed} open={len(sent)}")
PY
)
after=$(hwm "$h" 2>/dev/null)
echo "$out; peak RSS $before -> $after KiB"
kill -0 "$h" 2>/dev/null && [ $((after - before)) -lt 65536 ] &&
    ok "100 unauthenticated 16 MiB frames: the head's peak RSS grew by $((after - before)) KiB (< 64 MiB)" ||
    fail "head $h after the flood: peak RSS $before -> ${after:-dead} KiB"
grep -q "replied=0 closed=100" <<<"$out" && ok "no reply to an oversized frame before the handshake, all closed" ||
    fail "flood clients: $out"
"$CORRAL" status >/dev/null && ok "the head still serves" || fail "status after the flood"
grep -q "bad frame: frame of 16777216 bytes exceeds the limit of 4096" "$S/logs/corrald.log" &&
    ok "the log names the frame and the limit before the handshake" || fail "log: $(tail -3 "$S/logs/corrald.log")"

out=$(python3 - "$ADDR" "$CORRAL" <<'PY'
# 80 idle connections from 127.0.0.1: which are closed at once; a local
# client (Unix socket) meanwhile
import socket, subprocess, sys, time
host, port = sys.argv[1].rsplit(":", 1)
socks = [socket.create_connection((host, int(port))) for _ in range(80)]
time.sleep(0.5)
shut = 0
for s in socks:
    s.settimeout(0.05)
    try:
        if s.recv(1) == b"":
            shut += 1
    except socket.timeout:
        pass
    except OSError:
        shut += 1
rc = subprocess.run([sys.argv[2], "status"], stdout=subprocess.DEVNULL).returncode
print(f"shut={shut} status_rc={rc}")
PY
)
grep -q "shut=16 status_rc=0" <<<"$out" &&
    ok "80 idle unauthenticated connections from one address: the 16 above the cap of 64 closed, a local client served" ||
    fail "cap: $out"
grep -q "closed at accept: too many connections still in the handshake" "$S/logs/corrald.log" &&
    [ "$(grep -c "closed at accept" "$S/logs/corrald.log")" -le 8 ] &&
    ok "said in the log, once per power of two" || fail "cap log: $(grep -c "closed at accept" "$S/logs/corrald.log")"

# 100 clients with a wrong token: the head's log says the first 20 and
# counts the rest (base/log.c), it does not grow by a line per attempt
bad=$CORRAL_HOME/bad-token
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$bad" && echo >>"$bad" && chmod 600 "$bad"
# (20 a 10 s window: a loaded or sanitized run whose 100 attempts span
# several windows may write 20 in each it touches, never one per attempt)
t0=$(date +%s)
for _ in $(seq 100); do CORRAL_ADDRESS=$ADDR CORRAL_TOKEN_FILE=$bad "$CORRAL" status >/dev/null 2>&1; done
windows=$(( ($(date +%s) - t0) / 10 + 2 ))
n=$(grep -c "refused 127.0.0.1:.*wrong cluster token" "$S/logs/corrald.log")
[ "$n" -ge 1 ] && [ "$n" -le $((20 * windows)) ] && [ "$n" -lt 100 ] &&
    ok "100 refused proofs from one peer: $n lines in corrald.log ($windows windows of 10 s at most)" ||
    fail "refused lines: $n in at most $windows windows: $(grep refused "$S/logs/corrald.log" | tail -2)"
finish
