#!/usr/bin/env python3
"""A mutation fuzzer for the Python runtime's parsers of what a peer sends
(issue 15: "fuzz targets for every new message handler and for object
headers"): the frame reader (Conn.feed and its _frames), multipart payloads
(split) and object headers (parse_shm). libFuzzer cannot see into CPython,
so this one mutates valid inputs itself, seeded and reproducible, for a
time; `make fuzz` runs it beside the C targets (scripts/fuzz.sh).

What counts as a crash: any exception other than ProtocolError (what the
runtime turns into a closed connection and a log line), a result that
breaks the parser's own contract (a part outside its payload, a frame whose
length disagrees with its header), or a hang (a time limit per input).

    fuzz_wire.py [--seconds S] [--seed N]
A failure prints the seed and the input (hex) to reproduce it."""
import argparse
import os
import random
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from corral import _wire as w  # noqa: E402


class Crash(Exception):
    pass


def valid_multipart(rng):
    parts = [rng.randbytes(rng.choice([0, 1, 7, 64, 300])) for _ in range(rng.choice([1, 1, 2, 3, 5]))]
    return b"".join(bytes(p) for p in w.multipart(parts)), parts


def valid_object(rng):
    pickle_part = rng.randbytes(rng.choice([0, 5, 64, 200]))
    bufs = [rng.randbytes(rng.choice([0, 1, 100])) for _ in range(rng.choice([0, 1, 2, 4]))]
    head = w.SHM_HEAD.pack(w.SHM_MAGIC, 1, len(pickle_part), len(bufs))
    head += struct.pack(">%dQ" % len(bufs), *[len(b) for b in bufs])
    out = bytearray(head)
    for p in [pickle_part] + bufs:
        out += b"\0" * (w._align(len(out)) - len(out))
        out += p
    return bytes(out), pickle_part, bufs


def valid_frames(rng):
    out = bytearray()
    frames = []
    for _ in range(rng.choice([1, 2, 5])):
        payload = rng.randbytes(rng.choice([0, 3, 100, 5000]))
        kind = rng.choice([1, 2, 3, 4, 5, 7, 8, 16])
        ident = rng.getrandbits(64)
        out += w.HDR.pack(12 + len(payload), kind, 0, 0, ident) + payload
        frames.append((kind, ident, payload))
    return bytes(out), frames


INTERESTING = [0, 1, 11, 12, 13, 0x7F, 0xFF, 0xFFFF, 1 << 16, (1 << 16) + 1, w.MAX_FRAME, w.MAX_FRAME + 1,
               0x7FFFFFFF, 0xFFFFFFFF, (1 << 63) - 1, (1 << 64) - 1]


def mutate(rng, data):
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        op = rng.randrange(7)
        if op == 0 and b:  # flip a bit
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:  # a random byte
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 2:  # an interesting integer over 4 or 8 bytes
            size = rng.choice([4, 8])
            v = rng.choice(INTERESTING) & ((1 << (8 * size)) - 1)
            i = rng.randrange(len(b) + 1)
            b[i:i + size] = v.to_bytes(size, "big")
        elif op == 3 and b:  # cut
            del b[rng.randrange(len(b)):]
        elif op == 4:  # insert random bytes
            i = rng.randrange(len(b) + 1)
            b[i:i] = rng.randbytes(rng.randrange(1, 32))
        elif op == 5 and len(b) > 1:  # remove a run
            i = rng.randrange(len(b))
            del b[i:i + rng.randrange(1, 16)]
        elif op == 6 and b:  # duplicate a run
            i = rng.randrange(len(b))
            b[i:i] = b[i:i + rng.randrange(1, 64)]
    return bytes(b)


def check_split(data):
    try:
        parts = w.split(memoryview(data))
    except w.ProtocolError:
        return
    total = sum(p.nbytes for p in parts)
    if total > len(data):
        raise Crash("split: parts of %d bytes from a payload of %d" % (total, len(data)))
    for p in parts:
        if not isinstance(p, memoryview):
            raise Crash("split: a part that is not a memoryview")


def check_shm(data):
    try:
        main, bufs = w.parse_shm(memoryview(data))
    except w.ProtocolError:
        return
    for p in [main] + bufs:
        if p.nbytes > len(data):
            raise Crash("parse_shm: a part larger than the object")


def check_frames(data, rng):
    """data sent through a real socket pair in random pieces to Conn.feed."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn = w.Conn(b, unix=True)
        got = []
        off = 0
        while off < len(data):
            n = rng.choice([1, 3, 16, 4096, len(data)])
            a.sendall(data[off:off + n])
            off += n
            try:
                frames = conn.feed()
            except w.ProtocolError:
                return
            if frames is None:
                raise Crash("feed: end of stream while the peer is open")
            got.extend(frames)
        a.shutdown(socket.SHUT_WR)
        while True:
            try:
                frames = conn.feed()
            except w.ProtocolError:
                return
            if frames is None:
                break
            got.extend(frames)
        consumed = 0
        for kind, flags, ident, payload, fds in got:
            if fds:
                raise Crash("feed: descriptors that never came")
            consumed += 16 + payload.nbytes
        if consumed > len(data):
            raise Crash("feed: %d bytes of frames from %d sent" % (consumed, len(data)))
        return got
    finally:
        a.close()
        b.close()


def on_alarm(signum, frame):
    raise Crash("an input took over 5 s (a hang)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=None)
    o = ap.parse_args()
    seed = o.seed if o.seed is not None else int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    signal.signal(signal.SIGALRM, on_alarm)
    # the valid inputs parse back to what was made (the fuzzer's own check)
    data, frames = valid_frames(rng)
    got = check_frames(data, rng)
    if [(k, i, bytes(p)) for k, _, i, p, _ in got] != [(k, i, p) for k, i, p in frames]:
        raise SystemExit("fuzz_wire: valid frames did not read back")
    data, parts = valid_multipart(rng)
    if [bytes(p) for p in w.split(memoryview(data))] != parts:
        raise SystemExit("fuzz_wire: a valid multipart payload did not split back")
    data, pk, bufs = valid_object(rng)
    main_v, bufs_v = w.parse_shm(memoryview(data))
    if bytes(main_v) != pk or [bytes(b) for b in bufs_v] != bufs:
        raise SystemExit("fuzz_wire: a valid object header did not parse back")
    end = time.monotonic() + o.seconds
    n = 0
    while time.monotonic() < end:
        which = n % 3
        if which == 0:
            data = mutate(rng, valid_frames(rng)[0])
        elif which == 1:
            data = mutate(rng, valid_multipart(rng)[0])
        else:
            data = mutate(rng, valid_object(rng)[0])
        signal.alarm(5)
        try:
            if which == 0:
                check_frames(data, rng)
            elif which == 1:
                check_split(data)
            else:
                check_shm(data)
        except Exception as e:  # anything but ProtocolError is a crash
            signal.alarm(0)
            what = ["Conn.feed", "split", "parse_shm"][which]
            print("fuzz_wire: %s crashed on input %d (seed %d): %s: %s" % (what, n, seed, type(e).__name__, e))
            print("fuzz_wire: input (hex): %s" % data.hex())
            return 1
        signal.alarm(0)
        n += 1
    print("fuzz_wire: %d inputs clean in %.0f s (seed %d)" % (n, o.seconds, seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
