"""100,000 tasks in one driver without growth in the head's memory
(tests/cluster/tasks_many.sh says why the bound is what it is). Needs a
head (CORRAL_HOME) and its pid in CORRAL_HEAD_PID."""

import gc
import os
import sys

import corral
from corral import _runtime as R

TASKS = int(os.environ.get("TASKS_MANY", 100_000))
BATCH = 1000
BOUND_KB = int(os.environ.get("TASKS_MANY_BOUND_KB", 16 * 1024))


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


@corral.remote
def inc(x):
    return x + 1


def run(n):
    done = 0
    for start in range(0, n, BATCH):
        k = min(BATCH, n - start)
        got = corral.get([inc.remote(start + i) for i in range(k)])
        if got != list(range(start + 1, start + k + 1)):
            raise AssertionError("wrong results in the batch from %d" % start)
        done += k
    return done


def tables(c):
    gc.collect()
    with c.lock:
        inflight = sum(len(w.inflight) for w in c.workers.values())
        return {"objects": len(c.objs), "calls": len(c.calls), "inflight": inflight,
                "borrowed": len(c.borrowed)}


def main():
    head = int(os.environ["CORRAL_HEAD_PID"])
    corral.init()
    c = R.core()
    run(5 * BATCH)  # the workers leased, the head's lease jobs in place
    before, t0 = rss_kb(head), tables(c)
    n = run(TASKS)
    after, t1 = rss_kb(head), tables(c)
    grew = after - before
    print("head VmRSS %d KiB before, %d KiB after %d tasks (%+d KiB, bound %d KiB); driver tables %s -> %s"
          % (before, after, n, grew, BOUND_KB, t0, t1))
    ok = True
    if grew > BOUND_KB:
        print("FAIL: the head grew by %d KiB over %d tasks: more than %d KiB" % (grew, n, BOUND_KB))
        ok = False
    if t1 != t0:
        print("FAIL: the driver's tables did not return to where they were: %s -> %s" % (t0, t1))
        ok = False
    corral.shutdown()
    if ok:
        print("%d tasks: head VmRSS %+d KiB (bound %d KiB), driver tables back to %s" % (n, grew, BOUND_KB, t1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
