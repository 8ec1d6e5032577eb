"""corral's task and actor runtime against a real head and agents
(tests/cluster/tasks.sh starts them: a simulated TPU v6e 4x4 slice, four
hosts of four chips, v6e-s1-w0 the head's own node). Not a unit test: it
needs CORRAL_HOME, the built corral._core and the agents' pids in
CORRAL_TEST_AGENTS ("node=pid ...").

Every process here is real: leased workers are Python interpreters the
agents start, kills are kill -9 of their pids.
"""

import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import numpy as np

import corral
import corral.util as U
import corral.util.tpu as T
from corral import _runtime as R

AGENTS = dict(kv.split("=", 1) for kv in os.environ.get("CORRAL_TEST_AGENTS", "").split())


def setUpModule():
    corral.init()


def tearDownModule():
    corral.shutdown()


@corral.remote
def add(a, b=0):
    return a + b


@corral.remote(num_returns=2)
def pair(x):
    return x, -x


@corral.remote
def total(x):
    return float(np.asarray(x).sum())


@corral.remote
def fan(n):
    return corral.get([add.remote(i, i) for i in range(n)])


@corral.remote(max_retries=0)
def boom(msg):
    raise KeyError(msg)


@corral.remote(resources={"TPU": 1})
def chip(hold, meet=None, n=0):
    """hold seconds; with meet, also until n tasks have arrived there (a
    barrier in a directory): n tasks that wait for each other must each
    have a worker, and so a chip, of their own whatever the timing."""
    time.sleep(hold)
    if meet:
        open(os.path.join(meet, str(os.getpid())), "w").close()
        end = time.monotonic() + 60
        while len(os.listdir(meet)) < n and time.monotonic() < end:
            time.sleep(0.02)
    return (os.environ.get("CORRAL_NODE_ID"), os.environ.get("TPU_VISIBLE_CHIPS"),
            corral.get_accelerator_ids())


def _marker():
    fd, path = tempfile.mkstemp(prefix="corral-tasks-test-")
    os.close(fd)
    os.unlink(path)
    return path


@corral.remote(max_retries=2)
def die_once(marker):
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


@corral.remote(max_retries=0)
def die_always():
    os.kill(os.getpid(), signal.SIGKILL)


@corral.remote(max_retries=2, retry_exceptions=True)
def flaky(marker):
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("first attempt")
    return "second"


@corral.remote
def sleeper(s):
    time.sleep(s)
    return s


@corral.remote(max_restarts=1, max_task_retries=-1)
class Counter:
    def __init__(self, start=0):
        self.n = start

    def add(self, k=1):
        self.n += k
        return self.n

    def pid(self):
        return os.getpid()

    def ctx(self):
        c = corral.get_runtime_context()
        return c.get_actor_id(), c.get_node_id(), c.get_job_id()


@corral.remote(max_concurrency=4)
class Gate:
    def __init__(self):
        import threading
        self.ev = threading.Event()

    def wait(self):
        return self.ev.wait(20)

    def open(self):
        self.ev.set()
        return True


@corral.remote
class Async:
    async def twice(self, x):
        import asyncio
        await asyncio.sleep(0.01)
        return 2 * x


@corral.remote
class Holder:
    def make(self, n):
        return [corral.put(np.arange(n, dtype=np.float64))]

    def pid(self):
        return os.getpid()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Tasks(unittest.TestCase):
    def test_round_trip(self):
        self.assertEqual(corral.get(add.remote(1, b=2)), 3)
        self.assertEqual(corral.get([add.remote(i, 1) for i in range(20)]), list(range(1, 21)))
        a, b = pair.remote(5)
        self.assertEqual(corral.get([a, b]), [5, -5])

    def test_refs_as_arguments_and_nested(self):
        r = add.remote(2, 3)
        self.assertEqual(corral.get(add.remote(r, r)), 10)
        self.assertEqual(corral.get(fan.remote(4), timeout=60), [0, 2, 4, 6])

    def test_one_chip_each(self):
        # four at once on the head's 4-chip host: four distinct chips, each
        # task seeing only its own (TPU_VISIBLE_CHIPS, as Ray's {"TPU": 1})
        sel = {"corral.io/node-id": "v6e-s1-w0"}
        meet = tempfile.mkdtemp(prefix="corral-tasks-meet-")
        try:
            got = corral.get([chip.options(label_selector=sel).remote(0, meet, 4) for _ in range(4)], timeout=90)
        finally:
            shutil.rmtree(meet, ignore_errors=True)
        self.assertEqual({g[0] for g in got}, {"v6e-s1-w0"})
        chips = [g[1] for g in got]
        self.assertEqual(sorted(chips), ["0", "1", "2", "3"], got)
        for g in got:
            self.assertEqual(g[2], {"TPU": [g[1]]})

    def test_remote_exception(self):
        with self.assertRaises(corral.TaskError) as cm:
            corral.get(boom.remote("nope"))
        e = cm.exception
        self.assertIsInstance(e, KeyError)  # as its cause's class too
        self.assertIn("boom", str(e))
        self.assertIn("remote traceback", str(e))
        self.assertIn("raise KeyError(msg)", str(e))

    def test_retry_after_worker_death(self):
        m = _marker()
        try:
            self.assertIsInstance(corral.get(die_once.remote(m), timeout=60), int)
        finally:
            os.path.exists(m) and os.unlink(m)
        with self.assertRaises(corral.WorkerCrashedError) as cm:
            corral.get(die_always.remote(), timeout=60)
        self.assertIn("max_retries=0", str(cm.exception))
        self.assertIn("signal 9", str(cm.exception))

    def test_retry_exceptions(self):
        m = _marker()
        try:
            self.assertEqual(corral.get(flaky.remote(m), timeout=60), "second")
        finally:
            os.path.exists(m) and os.unlink(m)

    def test_wait_timeout_cancel(self):
        fast = [add.remote(i) for i in range(3)]
        # an hour: only the cancel's interruption of the sleep ends it within
        # the 30 s the last get waits
        slow = sleeper.remote(3600)
        ready, rest = corral.wait(fast + [slow], num_returns=3, timeout=30)
        self.assertEqual(set(ready), set(fast))
        self.assertEqual(rest, [slow])
        with self.assertRaises(corral.GetTimeoutError):
            corral.get(slow, timeout=0.2)
        corral.cancel(slow)
        with self.assertRaises((corral.TaskCancelledError, corral.WorkerCrashedError)):
            corral.get(slow, timeout=30)

    def test_unschedulable(self):
        with self.assertRaises(corral.TaskUnschedulableError) as cm:
            corral.get(add.options(resources={"TPU": 64}).remote(1), timeout=30)
        self.assertIn("TPU=64", str(cm.exception))

    def test_bad_options(self):
        with self.assertRaises(ValueError):
            add.options(resources={"CPU": 1})
        with self.assertRaises(ValueError):
            add.options(num_cpus=-1)
        with self.assertRaises(TypeError):
            add(1)


class Objects(unittest.TestCase):
    def test_put_get_zero_copy_and_accounting(self):
        gc.collect()
        base = R.core().stats()
        a = np.arange(12_500_000, dtype=np.float64)  # 100 MB
        r = corral.put(a)
        self.assertGreaterEqual(R.core().stats()["store_bytes"], a.nbytes)
        b = corral.get(r)
        self.assertTrue(np.array_equal(a, b))
        self.assertFalse(b.flags.writeable)  # a view of the shared mapping, not a copy
        self.assertEqual(corral.get(total.remote(r), timeout=60), float(a.sum()))
        del b, r
        gc.collect()
        for _ in range(100):
            if R.core().stats()["store_bytes"] == base["store_bytes"]:
                break
            time.sleep(0.05)
        st = R.core().stats()
        self.assertEqual(st["store_bytes"], base["store_bytes"], st)
        self.assertEqual(st["objects"], base["objects"], st)

    def test_put_reuses_a_warm_writable_mapping(self):
        def until(cond, what):
            for _ in range(1200):
                if cond():
                    return
                time.sleep(0.05)
            self.fail("%s: %s" % (what, R.core().stats()))
        a = np.arange(12_500_000, dtype=np.float64)  # 100 MB
        gc.collect()
        R.core().shm_pool.clear()
        base = R.core().stats()
        r = corral.put(a)
        del r
        gc.collect()
        # freed and never shared: its memfd goes to the pool, which fills
        # the page tables of a writable mapping of it (counted, bounded)
        until(lambda: R.core().stats()["pool_mapped_bytes"] >= a.nbytes, "no warm mapping in the pool")
        st = R.core().stats()
        self.assertEqual(st["store_bytes"], base["store_bytes"], st)
        self.assertGreaterEqual(st["pool_bytes"], a.nbytes, st)
        b = a + 1.0
        r = corral.put(b)  # a memcpy through the kept mapping
        self.assertLess(R.core().stats()["pool_mapped_bytes"], a.nbytes)  # taken out of the pool
        v = corral.get(r)
        self.assertTrue(np.array_equal(v, b))
        self.assertFalse(v.flags.writeable)
        # shared with a worker: sealed, the writable mapping unmapped first
        self.assertEqual(corral.get(total.remote(r), timeout=60), float(b.sum()))
        del v, r
        gc.collect()
        until(lambda: R.core().stats()["store_bytes"] == base["store_bytes"], "the store did not return to zero")
        R.core().shm_pool.clear()
        st = R.core().stats()
        self.assertEqual((st["pool_bytes"], st["pool_mapped_bytes"]), (0, 0), st)

    def test_owner_died(self):
        h = Holder.options(max_restarts=0).remote()
        inner = corral.get(h.make.remote(100_000), timeout=60)[0]
        self.assertEqual(corral.get(inner, timeout=30).sum(), float(sum(range(100_000))))
        # a ref the actor owns; the actor's process dies
        r2 = corral.get(h.make.remote(200_000), timeout=60)[0]
        os.kill(corral.get(h.pid.remote()), signal.SIGKILL)
        with self.assertRaises(corral.OwnerDiedError) as cm:
            corral.get(r2, timeout=30)
        self.assertIn("owner", str(cm.exception))


class Actors(unittest.TestCase):
    def test_calls_in_order(self):
        c = Counter.remote(10)
        refs = [c.add.remote(1) for _ in range(50)]
        self.assertEqual(corral.get(refs, timeout=60), list(range(11, 61)))
        aid, node, _ = corral.get(c.ctx.remote())
        self.assertTrue(aid)
        corral.kill(c)

    def test_restart_and_retry(self):
        c = Counter.remote()
        self.assertEqual(corral.get(c.add.remote(5), timeout=60), 5)
        pid = corral.get(c.pid.remote())
        os.kill(pid, signal.SIGKILL)
        # max_restarts=1: a fresh instance (state from __init__), the call
        # made meanwhile waits for it (max_task_retries=-1)
        self.assertEqual(corral.get(c.add.remote(1), timeout=60), 1)
        pid2 = corral.get(c.pid.remote())
        self.assertNotEqual(pid, pid2)
        os.kill(pid2, signal.SIGKILL)
        with self.assertRaises(corral.ActorDiedError) as cm:
            corral.get(c.add.remote(1), timeout=60)
        self.assertIn("max_restarts=1", str(cm.exception))

    def test_no_task_retries(self):
        c = Counter.options(max_restarts=1, max_task_retries=0).remote()
        pid = corral.get(c.pid.remote(), timeout=60)
        slow = c.add.remote(1)  # may run or not before the kill
        os.kill(pid, signal.SIGKILL)
        try:
            corral.get(slow, timeout=60)
        except corral.ActorUnavailableError:
            pass
        # a call sent before the owner has seen the death went to the dying
        # process and fails like slow (no task retries); one sent after it
        # waits for the restarted actor, whose state is new
        for attempt in range(3):
            try:
                self.assertEqual(corral.get(c.add.remote(2), timeout=60), 2)
                break
            except corral.ActorUnavailableError:
                if attempt == 2:
                    raise

    def test_named_and_kill(self):
        c = Counter.options(name="tasks-test-named").remote(100)
        self.assertEqual(corral.get(c.add.remote(1), timeout=60), 101)
        h = corral.get_actor("tasks-test-named")
        self.assertEqual(corral.get(h.add.remote(1)), 102)
        with self.assertRaises(ValueError):
            Counter.options(name="tasks-test-named").remote()
        same = Counter.options(name="tasks-test-named", get_if_exists=True).remote()
        self.assertEqual(corral.get(same.add.remote(1)), 103)
        # from another driver process: found through the head's jobs
        code = textwrap.dedent("""
            import corral
            corral.init()
            h = corral.get_actor("tasks-test-named")
            print(corral.get(h.add.remote(1), timeout=30))
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.stdout.strip(), "104", out.stderr)
        pid = corral.get(c.pid.remote())
        corral.kill(c)
        with self.assertRaises(corral.ActorDiedError):
            corral.get(c.add.remote(1), timeout=30)
        for _ in range(100):
            if not _alive(pid):
                break
            time.sleep(0.05)
        self.assertFalse(_alive(pid))
        # the head learns of the exit from the agent a moment after the
        # process is gone (its lease job is what names it): up to 10 s
        for _ in range(200):
            try:
                corral.get_actor("tasks-test-named")
            except ValueError:
                break
            time.sleep(0.05)
        with self.assertRaises(ValueError):
            corral.get_actor("tasks-test-named")

    def test_concurrency_and_async(self):
        g = Gate.remote()
        waiting = [g.wait.remote() for _ in range(3)]
        time.sleep(0.3)
        self.assertTrue(corral.get(g.open.remote(), timeout=30))
        self.assertEqual(corral.get(waiting, timeout=30), [True] * 3)
        a = Async.remote()
        self.assertEqual(corral.get([a.twice.remote(i) for i in range(20)], timeout=30),
                         [2 * i for i in range(20)])

    def test_handle_passed_to_task(self):
        c = Counter.remote()

        @corral.remote
        def bump(h, k):
            return corral.get(h.add.remote(k))
        self.assertEqual(corral.get(bump.remote(c, 7), timeout=60), 7)
        self.assertEqual(corral.get(c.add.remote(1)), 8)


class Placement(unittest.TestCase):
    def test_slice_one_actor_per_chip(self):
        spg = T.SlicePlacementGroup(topology="4x4", accelerator_type="TPU-V6E", bundles_per_host=4)
        try:
            self.assertEqual((spg.num_hosts, spg.chips_per_host, spg.num_bundles), (4, 4, 16))
            self.assertTrue(corral.get(spg.ready(), timeout=60))
            info = spg.placement_group.info()
            self.assertEqual(info["bundles"][0]["node"], "v6e-s1-w0")  # slice worker 0 in bundle 0

            @corral.remote(resources={"TPU": 1})
            class Chip:
                def where(self):
                    return os.environ.get("CORRAL_NODE_ID"), os.environ.get("TPU_VISIBLE_CHIPS")
            acts = [Chip.options(scheduling_strategy=spg.strategy(h, k)).remote()
                    for h in range(4) for k in range(4)]
            got = corral.get([a.where.remote() for a in acts], timeout=120)
            self.assertEqual(len(set(got)), 16, got)
            for h in range(4):
                self.assertEqual({g[0] for g in got[4 * h:4 * h + 4]}, {"v6e-s1-w%d" % h})
            for a in acts:
                corral.kill(a)
        finally:
            spg.remove()

    def test_placement_group_and_errors(self):
        pg = U.placement_group([{"TPU": 2}, {"TPU": 2}], strategy="STRICT_PACK")
        try:
            self.assertTrue(pg.wait(30))
            got = corral.get([chip.options(scheduling_strategy=U.PlacementGroupSchedulingStrategy(pg, i))
                              .remote(0) for i in range(2)], timeout=60)
            self.assertEqual(got[0][0], got[1][0])
        finally:
            U.remove_placement_group(pg)
        with self.assertRaises(ValueError):
            U.placement_group([{"TPU": 1}], strategy="NEAR")
        with self.assertRaises(ValueError):
            T.SlicePlacementGroup(topology="8x8", accelerator_type="TPU-V6E")
        with self.assertRaises(ValueError):
            U.PlacementGroupSchedulingStrategy(U.PlacementGroup("x", [{}]), 3)

    def test_node_affinity(self):
        s = U.NodeAffinitySchedulingStrategy("v6e-s1-w2")
        self.assertEqual(corral.get(chip.options(scheduling_strategy=s).remote(0), timeout=60)[0], "v6e-s1-w2")


class ZNodeDeath(unittest.TestCase):
    """Last (the test names sort it after the others): kills an agent."""

    def test_zz_actor_restarts_elsewhere(self):
        if not AGENTS:
            self.skipTest("CORRAL_TEST_AGENTS not set")
        c = Counter.options(resources={"TPU": 4},
                            label_selector={"corral.io/node-id": "in(v6e-s1-w1,v6e-s1-w3)"}).remote()
        _aid, node, _ = corral.get(c.ctx.remote(), timeout=60)
        self.assertIn(node, ("v6e-s1-w1", "v6e-s1-w3"))
        os.kill(int(AGENTS[node]), signal.SIGKILL)
        # the head declares the node dead; the owner takes the worker as lost
        # and restarts the actor on the other node
        # (until then the cut-off process still answers: it is alive)
        deadline = time.monotonic() + 90
        node2 = node
        while node2 == node and time.monotonic() < deadline:
            aid2, node2, _ = corral.get(c.ctx.remote(), timeout=90)
            time.sleep(0.2)
        self.assertNotEqual(node, node2)
        self.assertEqual(aid2, _aid)


if __name__ == "__main__":
    unittest.main(verbosity=2)
