"""Peers that speak the task protocol's handshake (docs/actors.md "Wire")
by hand, for tests/cluster/tasks_c_auth.sh: stdlib only, no corral.

  owner MODE PORTFILE OUTFILE SECRET CALL
      listens on 127.0.0.1 (a free port, written to PORTFILE), takes one
      connection, sends CHALLENGE, reads HELLO, answers WELCOME whose mac
      is MODE: good (the right one), wrong (under another key), missing
      (none), reflect (the HELLO-style mac of the peer's nonce, what a fake
      owner gets by passing that nonce on as its CHALLENGE to another
      worker). Then sends CALL (c: "square" of 7, the C encoding; info: an
      INFO request any runtime answers) and writes to OUTFILE what came
      back: "returned STATUS" for a RETURN, "closed" when the peer closed.
  worker MODE ADDRESS SECRET
      connects to a real listener at tcp ADDRESS as a caller: reads the
      CHALLENGE, says HELLO with the right mac and (MODE good) a nonce or
      (MODE nonce-less) none, and prints "welcome-mac-ok" when WELCOME's
      mac proves the secret, "welcome-mac-bad" when not, "closed" when the
      listener closed instead."""
import hashlib
import hmac
import json
import os
import socket
import struct
import sys

HDR = struct.Struct(">IBBHQ")
HELLO, WELCOME, CALL, RETURN, CHALLENGE, BYE, INFO = 1, 2, 3, 4, 6, 7, 8
LABEL = b"corral-welcome"


def send(s, kind, ident, payload):
    s.sendall(HDR.pack(len(payload) + 12, kind, 0, 0, ident) + payload)


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            raise EOFError
        buf += d
    return buf


def recv(s):
    ln, kind, _, _, ident = HDR.unpack(recv_exact(s, 16))
    return kind, ident, recv_exact(s, ln - 12)


def owner(mode, portfile, outfile, secret, call):
    key = bytes.fromhex(secret)
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    ls.settimeout(120)
    s, _ = ls.accept()
    s.settimeout(120)
    snonce = os.urandom(32)
    send(s, CHALLENGE, 0, snonce)
    kind, _, payload = recv(s)
    assert kind == HELLO, kind
    hello = json.loads(payload)
    assert hmac.compare_digest(hello["mac"], hmac.new(key, snonce, hashlib.sha256).hexdigest())
    cnonce = bytes.fromhex(hello["nonce"])
    welcome = {"pid": os.getpid(), "runtime": "c"}
    if mode == "good":
        welcome["mac"] = hmac.new(key, LABEL + snonce + cnonce, hashlib.sha256).hexdigest()
    elif mode == "wrong":
        welcome["mac"] = hmac.new(b"\x01" * 32, LABEL + snonce + cnonce, hashlib.sha256).hexdigest()
    elif mode == "reflect":
        welcome["mac"] = hmac.new(key, cnonce, hashlib.sha256).hexdigest()
    send(s, WELCOME, 0, json.dumps(welcome).encode())
    try:
        if call == "c":
            name = b"square"
            send(s, CALL, 1, struct.pack(">H", len(name)) + name + struct.pack("<q", 7))
        else:
            send(s, INFO, 1, json.dumps({"what": "tasks", "limit": 1}).encode())
        while True:
            kind, ident, payload = recv(s)
            if kind == RETURN:
                result = "returned %d %s" % (payload[0], payload[1:].hex())
                break
    except (EOFError, OSError):
        result = "closed"
    try:
        send(s, BYE, 0, b"")
    except OSError:
        pass
    with open(outfile, "w") as f:
        f.write(result + "\n")


def worker(mode, address, secret):
    key = bytes.fromhex(secret)
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=120)
    try:
        kind, _, snonce = recv(s)
        assert kind == CHALLENGE and len(snonce) == 32
        hello = {"role": "caller", "pid": os.getpid(), "runtime": "c",
                 "mac": hmac.new(key, snonce, hashlib.sha256).hexdigest()}
        cnonce = os.urandom(32)
        if mode == "good":
            hello["nonce"] = cnonce.hex()
        send(s, HELLO, 0, json.dumps(hello).encode())
        kind, _, payload = recv(s)
    except (EOFError, OSError):
        print("closed")
        return
    want = hmac.new(key, LABEL + snonce + cnonce, hashlib.sha256).hexdigest()
    mac = json.loads(payload).get("mac", "")
    print("welcome-mac-ok" if kind == WELCOME and hmac.compare_digest(mac, want) else "welcome-mac-bad")


if __name__ == "__main__":
    if sys.argv[1] == "owner":
        owner(*sys.argv[2:7])
    else:
        worker(*sys.argv[2:5])
