#!/usr/bin/env python3
"""Raw HTTP/1.1 at the router (tests/cluster/serve.sh): what curl and the
openai client do not send. Prints one line per check, `name: result`.
   http_probe.py HOST PORT"""
import json
import socket
import sys

HOST, PORT = sys.argv[1], int(sys.argv[2])
COMP = b'{"model":"canned","prompt":"x"}'


def conn():
    s = socket.create_connection((HOST, PORT), timeout=20)
    return s


def read_reply(s, buf):
    """One reply from s (buf: bytes read before): (status, headers, body, rest)."""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise EOFError("closed before a reply's head: %r" % buf[:200])
        buf += d
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdr = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        hdr[k.strip().lower()] = v.strip()
    if status == 100:
        return status, hdr, b"", buf
    if "content-length" in hdr:
        n = int(hdr["content-length"])
        while len(buf) < n:
            d = s.recv(65536)
            if not d:
                raise EOFError("short body")
            buf += d
        return status, hdr, buf[:n], buf[n:]
    if hdr.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in buf:
                buf += s.recv(65536)
            line, buf = buf.split(b"\r\n", 1)
            n = int(line.split(b";")[0], 16)
            while len(buf) < n + 2:
                buf += s.recv(65536)
            body += buf[:n]
            buf = buf[n + 2:]
            if n == 0:
                return status, hdr, body, buf
    while True:  # to the connection's end
        d = s.recv(65536)
        if not d:
            return status, hdr, buf, b""
        buf += d


def closed(s):
    try:
        return s.recv(1) == b""
    except OSError:
        return True


def err_code(body):
    try:
        return json.loads(body)["error"]["code"]
    except Exception:
        return "not-openai-shape:%r" % body[:80]


def post(path, body, extra=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n" + extra +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


# pipelined: three requests in one write, answered in order on one connection
s = conn()
s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: r\r\n\r\n" + post(b"/v1/completions", COMP) +
          b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n")
rest, got = b"", []
for _ in range(3):
    st, h, body, rest = read_reply(s, rest)
    got.append("%d:%s" % (st, json.loads(body)["object"] if body.startswith(b"{") else body.decode().strip()))
print("pipelined:", " ".join(got))
s.close()

# a chunked request body
s = conn()
body = COMP
chunks = b"".join(b"%x;x=y\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks +
          b"0\r\nX-Trailer: 1\r\n\r\n")
st, h, b, _ = read_reply(s, b"")
print("chunked:", st, json.loads(b)["object"])
s.close()

# Expect: 100-continue, the body sent after the 100
s = conn()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
          % len(COMP))
st1, _, _, rest = read_reply(s, b"")
s.sendall(COMP)
st2, h, b, _ = read_reply(s, rest)
print("expect:", st1, st2, json.loads(b)["object"])
s.close()

# HTTP/1.0: the reply, then the connection ends
s = conn()
s.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(COMP) + COMP)
st, h, b, _ = read_reply(s, b"")
print("http10:", st, json.loads(b)["object"], "closed" if closed(s) else "open")
s.close()

# a stream read slowly in a 1.1 connection kept for another request
s = conn()
s.sendall(post(b"/v1/completions", b'{"model":"canned","prompt":"x","stream":true,"max_tokens":5}'))
st, h, b, rest = read_reply(s, b"")
s.sendall(b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n")
st2, _, b2, _ = read_reply(s, rest)
print("stream:", st, h.get("transfer-encoding"), b.count(b"data: "), b"[DONE]" in b, st2)
s.close()

# bad requests: a clear error in OpenAI's shape, and the router stays up
bad = {
    "garbage": b"GARBAGE\r\n\r\n",
    "version": b"GET /health HTTP/2.0\r\n\r\n",
    "smuggle": b"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    "te": b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
    "badchunk": b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "bigheader": b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
    "toolarge": b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
}
for name, data in bad.items():
    s = conn()
    try:
        s.sendall(data)
    except OSError:
        pass
    st, h, b, _ = read_reply(s, b"")
    print("bad %s: %d %s %s" % (name, st, err_code(b), "closed" if closed(s) else "open"))
    s.close()
s = conn()
s.sendall(b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n")
print("health after:", read_reply(s, b"")[0])
