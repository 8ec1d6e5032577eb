#!/usr/bin/env python3
# walpages.py DB [N]: the frames of DB-wal (those of its current salt),
# grouped by commit, each page named by the b-tree that owns it (dbstat of
# a copy of DB and its WAL); the last N commits. For what a head's commits
# write (docs/benchmarks.md, "Fewer pages"), on a head's state.db:
#   bench/runtime/walpages.py $CORRAL_HOME/session_latest/state.db 6
import struct, sys, sqlite3, shutil, os, tempfile, collections
db = sys.argv[1]
wal = open(db + "-wal", "rb").read()
magic, ver, psz, ckpt, s1, s2, c1, c2 = struct.unpack(">IIIIIIII", wal[:32])
d = tempfile.mkdtemp()
shutil.copy(db, d + "/x.db"); shutil.copy(db + "-wal", d + "/x.db-wal")
c = sqlite3.connect(d + "/x.db")
owner = {}
for name, pageno, pt in c.execute("select name, pageno, pagetype from dbstat"):
    owner[pageno] = name + ("(ovfl)" if pt == "overflow" else "")
fl = c.execute("pragma freelist_count").fetchone()[0]
off = 32; commits = []; cur = []
while off + 24 + psz <= len(wal):
    pg, dbsz, fs1, fs2 = struct.unpack(">IIII", wal[off:off+16])
    if (fs1, fs2) != (s1, s2): break
    cur.append(pg)
    if dbsz: commits.append(cur); cur = []
    off += 24 + psz
print("page size", psz, "commits", len(commits), "freelist", fl)
for cm in commits[-int(sys.argv[2]) if len(sys.argv) > 2 else 0:]:
    print(len(cm), " ".join("%d:%s" % (p, owner.get(p, "free/page1" if p != 1 else "page1")) for p in cm))
