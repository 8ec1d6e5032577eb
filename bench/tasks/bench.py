"""bench/tasks: corral's Python tasks and actors on a real head (run.sh starts
it), Ray's ray_perf.py measures with corral's API. Each figure is a median
over RUNS runs after a warm-up. Prints one JSON object per figure on
stdout; run.sh turns them into `figure` lines.

  (a) tasks_py_async      corral.get([noop.remote() for _ in range(N_ASYNC)])   tasks/s
  (b) tasks_py_sync       N_SYNC x corral.get(noop.remote())                     tasks/s
  (c) actor_py_sync       N_SYNC x corral.get(a.noop.remote())                   calls/s
  (d) actor_py_async      corral.get([a.noop.remote() for _ in range(N_ACT)])    calls/s
  (e) put_py / get_py     corral.put / corral.get of a 100 MB numpy array        GB/s
      memcpy_py           numpy.copyto of the same array into a touched one     GB/s
  (f) actor_py_ready      A.remote() to the result of its first method call     ms
"""

import gc
import json
import os
import statistics
import sys
import time

import numpy as np

import corral

RUNS = int(os.environ.get("RUNS", 5))
N_ASYNC = int(os.environ.get("N_ASYNC", 1000))
N_SYNC = int(os.environ.get("N_SYNC", 1000))
N_ACT = int(os.environ.get("N_ACT", 5000))
READY_RUNS = int(os.environ.get("READY_RUNS", 10))
READY_GAP_S = float(os.environ.get("READY_GAP_S", 1.0))
MB = int(os.environ.get("PUT_MB", 100))
ONLY = set(filter(None, os.environ.get("ONLY", "").split(",")))


def emit(name, value, unit, note, samples=None):
    print(json.dumps(dict(metric=name, value=value, unit=unit, note=note, samples=samples)), flush=True)


def want(k):
    return not ONLY or k in ONLY


@corral.remote
def noop():
    return b"ok"


@corral.remote
class Actor:
    def noop(self):
        return b"ok"

    def pid(self):
        return os.getpid()


def median_of(fn, runs=RUNS):
    fn()  # warm-up
    s = [fn() for _ in range(runs)]
    return statistics.median(s), s


@corral.remote
def worker_pid():
    return os.getpid()


def cpu_s(pids):
    """{pid: user+system CPU seconds} of those of these processes alive
    (/proc/PID/stat)."""
    out = {}
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                st = f.read().rsplit(")", 1)[1].split()
            out[p] = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return out


def cpu_per_call(name, fn, n, pids):
    """CPU per call of the driver and of its workers over RUNS runs of fn:
    what the machine's load moves far less than the wall figures."""
    d0, w0 = time.process_time(), cpu_s(pids)
    for _ in range(RUNS):
        fn()
    w1 = cpu_s(pids)
    d = time.process_time() - d0
    w = sum(w1[p] - w0[p] for p in w1 if p in w0)  # an idle worker given back meanwhile: left out
    emit(name + "_driver_cpu_us", d / (RUNS * n) * 1e6, "us", "driver CPU per call over %d calls" % (RUNS * n))
    emit(name + "_worker_cpu_us", w / (RUNS * n) * 1e6, "us", "workers' CPU per call over %d calls" % (RUNS * n))


def main():
    corral.init()
    if want("ready"):
        # the driver's first actor: no started worker waits for it, a
        # process is started for it (as for every actor without spares)
        t = time.perf_counter()
        a = Actor.remote()
        corral.get(a.noop.remote(), timeout=120)
        first_ms = (time.perf_counter() - t) * 1e3
        corral.kill(a)
    # the workers of the task shape leased once (warm, as ray_perf's runs are)
    for _ in range(3):
        corral.get([noop.remote() for _ in range(N_ASYNC)])
    wpids = set(corral.get([worker_pid.remote() for _ in range(N_ASYNC)]))

    if want("async"):
        def run():
            t = time.perf_counter()
            out = corral.get([noop.remote() for _ in range(N_ASYNC)])
            dt = time.perf_counter() - t
            assert len(out) == N_ASYNC and out[-1] == b"ok"
            return N_ASYNC / dt
        v, s = median_of(run)
        cpu_per_call("tasks_py_async", run, N_ASYNC, wpids)
        emit("tasks_py_async_per_s", v, "1/s", "submit %d no-op tasks, then get all; median of %d" % (N_ASYNC, RUNS), s)

    if want("sync"):
        def run():
            t = time.perf_counter()
            for _ in range(N_SYNC):
                corral.get(noop.remote())
            return N_SYNC / (time.perf_counter() - t)
        v, s = median_of(run)
        cpu_per_call("tasks_py_sync", run, N_SYNC, wpids)
        emit("tasks_py_sync_per_s", v, "1/s", "%d x get(noop.remote()); median of %d" % (N_SYNC, RUNS), s)

    if want("actor_sync") or want("actor_async"):
        a = Actor.remote()
        corral.get(a.noop.remote(), timeout=120)
        apid = corral.get(a.pid.remote())
        if want("actor_sync"):
            def run():
                t = time.perf_counter()
                for _ in range(N_SYNC):
                    corral.get(a.noop.remote())
                return N_SYNC / (time.perf_counter() - t)
            v, s = median_of(run)
            cpu_per_call("actor_py_sync", run, N_SYNC, [apid])
            emit("actor_py_sync_per_s", v, "1/s", "%d x get(a.noop.remote()); median of %d" % (N_SYNC, RUNS), s)
        if want("actor_async"):
            def run():
                t = time.perf_counter()
                out = corral.get([a.noop.remote() for _ in range(N_ACT)])
                dt = time.perf_counter() - t
                assert len(out) == N_ACT
                return N_ACT / dt
            v, s = median_of(run)
            cpu_per_call("actor_py_async", run, N_ACT, [apid])
            emit("actor_py_async_per_s", v, "1/s", "get([a.noop.remote() x %d]); median of %d" % (N_ACT, RUNS), s)
        corral.kill(a)

    if want("put"):
        n = MB * 1000 * 1000 // 8
        src = np.arange(n, dtype=np.float64)
        dst = np.empty_like(src)
        dst[:] = 1.0  # touched: its pages exist

        def copy():
            t = time.perf_counter()
            np.copyto(dst, src)
            return src.nbytes / (time.perf_counter() - t) / 1e9
        mc, mcs = median_of(copy)
        puts, gets = [], []
        for i in range(RUNS + 1):
            gc.collect()
            t = time.perf_counter()
            ref = corral.put(src)
            t1 = time.perf_counter()
            got = corral.get(ref)
            t2 = time.perf_counter()
            assert got.shape == src.shape and got[n // 2] == src[n // 2] and got[-1] == src[-1]
            if i:
                puts.append(src.nbytes / (t1 - t) / 1e9)
                gets.append(src.nbytes / (t2 - t1) / 1e9)
            else:
                cold = src.nbytes / (t1 - t) / 1e9  # fresh shared memory: its pages faulted in
            del got, ref
        emit("memcpy_py_gbps", mc, "GB/s", "numpy.copyto of %d MB into a touched array; median of %d" % (MB, RUNS), mcs)
        emit("put_py_gbps", statistics.median(puts), "GB/s", "corral.put of a %d MB numpy array; median of %d" % (MB, RUNS), puts)
        emit("put_py_cold_gbps", cold, "GB/s", "the first corral.put of the run (fresh shared memory, no reuse)", [cold])
        emit("get_py_gbps", statistics.median(gets), "GB/s", "corral.get of it (a read-only view of the shared mapping); median of %d" % RUNS, gets)

    if want("ready"):
        # fresh actors a second apart, each on a new process (the owner
        # keeps CORRAL_ACTOR_SPARES started since its first actor)
        lat, pids = [], set()
        for i in range(READY_RUNS):
            time.sleep(READY_GAP_S)
            t = time.perf_counter()
            a = Actor.remote()
            corral.get(a.noop.remote(), timeout=120)
            lat.append((time.perf_counter() - t) * 1e3)
            pids.add(corral.get(a.pid.remote()))
            corral.kill(a)
        assert len(pids) == READY_RUNS, pids  # each a new process
        emit("actor_py_ready_ms", statistics.median(lat), "ms",
             "Actor.remote() to its first method's result, %d fresh actors %.1f s apart; median" % (
                 READY_RUNS, READY_GAP_S), lat)
        emit("actor_py_ready_first_ms", first_ms, "ms",
             "the same for the driver's first actor, measured first (a worker process started for it)", [first_ms])
    corral.shutdown()


if __name__ == "__main__":
    sys.exit(main())
