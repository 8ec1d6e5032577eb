#!/usr/bin/python3
"""bench/serve's streaming load: N concurrent chat streams through a URL,
all held open at once (one socket each, selectors, one thread), each read
to its end. Prints the count that ended with data: [DONE] and, while all
were open, the peak RSS of the process PID (the router) in MiB.
    streams.py HOST PORT N PID [PIECES] [DELAY_S]"""
import selectors, socket, sys, time

host, port, n, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
pieces = int(sys.argv[5]) if len(sys.argv) > 5 else 20
delay = float(sys.argv[6]) if len(sys.argv) > 6 else 0.5
body = ('{"model":"canned","stream":true,"max_tokens":%d,"test_delay_s":%s,"messages":[]}'
        % (pieces, delay)).encode()
req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))


def rss():
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


sel = selectors.DefaultSelector()
got = {}
for i in range(n):
    s = socket.create_connection((host, port))
    s.sendall(req)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, i)
    got[i] = b""
open_ = n
peak = 0.0
t_end = time.time() + 600
last = 0.0
while open_ and time.time() < t_end:
    for key, _ in sel.select(timeout=0.2):
        try:
            d = key.fileobj.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            d = b""  # reset: that stream failed
        if d:
            got[key.data] += d[-64:] if len(got[key.data]) > 4096 else d
            got[key.data] = got[key.data][-4096:]
        else:
            sel.unregister(key.fileobj)
            key.fileobj.close()
            open_ -= 1
    if time.time() - last > 0.2:
        last = time.time()
        if open_ == n or open_ > n * 0.9:
            peak = max(peak, rss())
done = sum(1 for v in got.values() if b"data: [DONE]" in v)
print("streams_done %d of %d" % (done, n))
print("router_peak_rss_mib %.1f" % peak)
