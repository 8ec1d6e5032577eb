#!/usr/bin/env python3
"""The load generator of bench/abuse/run.sh: unauthenticated clients of a
head on loopback, bounded in count and in time.

  load.py frames HOST PORT CLIENTS SIZE SECONDS MAX_ROUNDS
      CLIENTS threads; each connects, sends a frame header announcing SIZE
      bytes and then SIZE bytes of payload (no Hello, no proof), and when
      the head closes the connection (or all is sent) connects again, for
      SECONDS or MAX_ROUNDS rounds, whichever ends first.
  load.py idle HOST PORT COUNT SECONDS
      opens COUNT connections that send nothing, 128 at a time, and holds
      them until SECONDS after the start, then says how many the head had
      closed by then.

Only loopback addresses are accepted; the connections come from 40
loopback sources (127.0.1.x for idle, 127.0.2.x for frames). The open-file limit is raised to
what COUNT needs (the hard limit too where the process may: root with
CAP_SYS_RESOURCE); where the hard limit stays below it, the connections
are held by as many processes as it takes, their counts summed. One
summary line of "key=value" words on stdout; "ready" on stderr once the
load is under way (so the caller can start its client then).
"""
import ipaddress
import os
import resource
import select
import socket
import struct
import sys
import threading
import time


def loopback_only(host):
    if not ipaddress.ip_address(host).is_loopback:
        sys.exit("load.py: %s is not a loopback address; this generator only loads loopback" % host)


SOURCES = 40


def source(net, i):
    """The loopback source address of connection or client i: 127.0.NET.1
    to 127.0.NET.SOURCES in turn. Each source has its own ephemeral ports
    (tens of thousands of connections from 127.0.0.1 alone run out of
    them, and connect() then crawls), and each is a peer of its own to the
    head's per-peer cap, as a remote attacker with many addresses is."""
    return "127.0.%d.%d" % (net, i % SOURCES + 1)


def frames(host, port, clients, size, seconds, max_rounds):
    deadline = time.monotonic() + seconds
    chunk = b"\0" * (64 << 10)
    lock = threading.Lock()
    tally = {"connections": 0, "bytes": 0, "closed_early": 0, "refused": 0}

    def one(src):
        for _ in range(max_rounds):
            if time.monotonic() >= deadline:
                return
            sent = 0
            try:
                s = socket.create_connection((host, port), timeout=5, source_address=(src, 0))
            except OSError:
                with lock:
                    tally["refused"] += 1
                time.sleep(0.01)
                continue
            try:
                s.sendall(struct.pack(">I", size))
                while sent < size and time.monotonic() < deadline:
                    sent += s.send(chunk[: min(len(chunk), size - sent)])
            except OSError:
                pass
            finally:
                s.close()
            with lock:
                tally["connections"] += 1
                tally["bytes"] += sent
                tally["closed_early"] += sent < size

    threads = [threading.Thread(target=one, args=(source(2, i),), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    print("ready", file=sys.stderr, flush=True)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 6)
    print("connections=%d bytes_sent=%d closed_by_head_before_the_end=%d refused=%d"
          % (tally["connections"], tally["bytes"], tally["closed_early"], tally["refused"]))


def nofile_room():
    """How many descriptors one process may hold, after raising its limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 64


def idle_split(host, port, count, seconds):
    """idle() in as many processes as the open-file limit needs (where the
    hard limit cannot be raised), their tallies summed."""
    try:
        raise_nofile_quiet(count + 64)
        return idle(host, port, count, seconds)
    except (OSError, ValueError):
        pass
    room = nofile_room()
    parts = [room] * (count // room) + ([count % room] if count % room else [])
    kids = []
    for i, n in enumerate(parts):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            with os.fdopen(w, "w") as out:
                sys.stdout = out
                if i > 0:  # only the first one says "ready"
                    sys.stderr = open(os.devnull, "w")
                idle(host, port, n, seconds)
            os._exit(0)
        os.close(w)
        kids.append((pid, r))
    total = {}
    for pid, r in kids:
        with os.fdopen(r) as f:
            line = f.read().split()
        os.waitpid(pid, 0)
        for kv in line:
            k, v = kv.split("=")
            total[k] = max(total.get(k, 0), float(v)) if k == "open_seconds" else total.get(k, 0) + int(v)
    print("processes=%d opened=%d failed=%d open_seconds=%.2f closed_by_head=%d still_open=%d"
          % (len(parts), total["opened"], total["failed"], total["open_seconds"], total["closed_by_head"],
             total["still_open"]))


def raise_nofile_quiet(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(need, hard)))  # OSError/ValueError: cannot


def idle(host, port, count, seconds):
    socks = []
    failed = 0
    start = time.monotonic()
    batch = 128  # about a listen backlog's worth: more only waits for SYN retries
    for b in range(0, count, batch):
        pending = {}
        poller = select.poll()
        for _ in range(min(batch, count - b)):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((source(1, len(socks) + failed + len(pending)), 0))
            s.setblocking(False)
            s.connect_ex((host, port))
            pending[s.fileno()] = s
            poller.register(s, select.POLLOUT)
        end = time.monotonic() + 3
        while pending and time.monotonic() < end:
            for fd, ev in poller.poll(100):
                s = pending.pop(fd, None)
                if s is None:
                    continue
                poller.unregister(fd)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    socks.append(s)
                else:
                    failed += 1
                    s.close()
        for s in pending.values():
            failed += 1
            s.close()
        if b == 0:
            print("ready", file=sys.stderr, flush=True)
    opened = time.monotonic() - start
    time.sleep(max(0.0, seconds - opened))
    closed = 0
    for s in socks:
        try:
            if s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    print("opened=%d failed=%d open_seconds=%.2f closed_by_head=%d still_open=%d"
          % (len(socks), failed, opened, closed, len(socks) - closed))


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("frames", "idle"):
        sys.exit(__doc__)
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    loopback_only(host)
    if mode == "frames":
        clients, size, seconds, rounds = (int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]),
                                          int(sys.argv[7]))
        frames(host, port, min(clients, 1000), size, min(seconds, 120), min(rounds, 1000))
    else:
        count, seconds = int(sys.argv[4]), float(sys.argv[5])
        idle_split(host, port, min(count, 50000), min(seconds, 120))


if __name__ == "__main__":
    main()
