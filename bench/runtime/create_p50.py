#!/usr/bin/env python3
"""Prints `figure NAME VALUE us`: the median time to create an empty file in
DIR (64 files in a new directory there, removed after). On ext4 without a
journal, as on the VM of issue 18, the inode allocator skips every inode
its block group freed in the last 30 s (330 s until the inode table is
written back), so the same creation costs 10 us or over 1 ms depending on
what was deleted nearby just before (a benchmark's cleanup, a build's,
retention's): the figure says which state a run met.

    create_p50.py DIR NAME
"""
import os
import sys
import tempfile
import time

d = tempfile.mkdtemp(prefix=".bench-create-", dir=sys.argv[1])
t = []
for i in range(64):
    p = os.path.join(d, str(i))
    a = time.perf_counter()
    os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    t.append(time.perf_counter() - a)
for i in range(64):
    os.unlink(os.path.join(d, str(i)))
os.rmdir(d)
t.sort()
print("figure %s %.1f us" % (sys.argv[2], t[len(t) // 2] * 1e6))
