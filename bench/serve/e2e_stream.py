#!/usr/bin/python3
"""bench/serve's end-to-end streaming client: ROUNDS chat streams, one at a
time, alternating between two URLs (the replica directly and the router in
front of it, so both see the same engine state and machine load), each
asking for TOKENS tokens at temperature 0. Per URL it prints the median
time to the first token (the first event with content) and the median
tokens per second after it (content events / time from the first to the
last), as lines `NAME ttft_ms X` and `NAME tokens_per_s Y`.
    e2e_stream.py MODEL TOKENS ROUNDS NAME=HOST:PORT NAME=HOST:PORT"""
import http.client, json, statistics, sys, time

model, tokens, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
targets = [a.split("=", 1) for a in sys.argv[4:]]
body = json.dumps({"model": model, "stream": True, "max_tokens": tokens, "temperature": 0,
                   "messages": [{"role": "user", "content": "Tell me a long story."}]})


def one(hostport):
    host, port = hostport.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit("%s answered %d: %s" % (hostport, r.status, r.read()[:300]))
    first = last = None
    n = 0
    for line in r:
        if not line.startswith(b"data: {"):
            continue
        ev = json.loads(line[6:])
        ch = ev.get("choices") or [{}]
        if (ch[0].get("delta") or {}).get("content"):
            last = time.monotonic()
            if first is None:
                first = last
            n += 1
    c.close()
    if first is None:
        raise SystemExit("%s: no content in the stream" % hostport)
    rate = (n - 1) / (last - first) if n > 1 and last > first else float("nan")
    return (first - t0) * 1000, rate, n


res = {name: ([], []) for name, _ in targets}
for _ in range(rounds):
    for name, hp in targets:
        ttft, rate, n = one(hp)
        res[name][0].append(ttft)
        res[name][1].append(rate)
for name, (ttfts, rates) in res.items():
    print("%s ttft_ms %.2f" % (name, statistics.median(ttfts)))
    print("%s tokens_per_s %.1f" % (name, statistics.median(rates)))
