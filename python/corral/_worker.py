"""A leased worker's process: ``python -m corral._worker`` (docs/actors.md).

It connects back to its owner (CORRAL_TASK_OWNER), says HELLO with its lease
id, and runs the calls it is sent: tasks (functions), or, once it was sent a
constructor, the methods of its one actor. Calls run on one thread in the
order they came (an actor with max_concurrency > 1: a pool of that many
threads; with async methods: one asyncio loop). It exits when its owner's
connection closes (a detached actor stays).
"""

import asyncio
import ctypes
import inspect
import os
import shutil
import signal
import queue
import sys
import threading
import traceback

from . import _runtime as R
from . import _wire as W


class ExecQueue:
    """Calls from the I/O thread to the thread(s) that run them."""

    def __init__(self):
        self.q = queue.SimpleQueue()
        self.cancelled = set()
        self.running = {}  # (conn id, ident) -> thread id
        self.lock = threading.Lock()
        # the main thread's call now (set and cleared by that thread, inside
        # the region that takes KeyboardInterrupt as the call's cancel), and
        # the one a cancel asked to interrupt there (on_interrupt)
        self.main_ident = threading.main_thread().ident
        self.current = None
        self.interrupt = None
        # SIGINTs sent by cancel, and those on_interrupt took as theirs (one
        # writer each, so no lock; two sent at once arrive as one)
        self.kills_sent = 0
        self.kills_seen = 0
        self.raised = None  # the call on_interrupt interrupted: once only

    def put(self, item):
        self.q.put(item)

    def get(self):
        return self.q.get()

    def cancel(self, ident, conn):
        key = (id(conn), ident)
        with self.lock:
            tid = self.running.get(key)
            if tid is None:
                self.cancelled.add(key)
                return
            if tid == self.main_ident:
                self.interrupt = key  # cleared with running[key]
                self.kills_sent += 1
        # a running task: KeyboardInterrupt in its thread (as Ray's cancel).
        # In the main thread, by a real SIGINT: it also ends a blocking wait
        # (time.sleep, a lock, a socket read), which an exception set for the
        # thread would meet only once the wait is over. on_interrupt raises
        # it there only while this very call still runs.
        if tid == self.main_ident:
            signal.pthread_kill(tid, signal.SIGINT)
            return
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(KeyboardInterrupt))

    def on_interrupt(self, signum, frame):
        """SIGINT in the main thread: a cancel's, raised only while the call it
        cancels runs (one that ended meanwhile ignores it); without a cancel
        asked, KeyboardInterrupt as Python's own handler. No lock here: the
        main thread may hold one when the handler runs."""
        sent = self.kills_sent
        if sent == self.kills_seen:
            signal.default_int_handler(signum, frame)  # not a cancel's
        self.kills_seen = sent
        key = self.interrupt
        if key is not None and key == self.current and key != self.raised:
            # a second cancel of the same call is not raised again: it could
            # land in the handler of the first, outside the call
            self.interrupt = None
            self.raised = key
            raise KeyboardInterrupt


class Runner:
    def __init__(self, core):
        self.core = core
        self.fns = {}
        self.actor = None
        self.actor_id = None
        self.loop = None
        self.pool = None
        self.q = core.exec_q
        self.runner_ident = threading.get_ident()
        self.coro = {}  # method name -> it is async

    def run_forever(self):
        q = self.q.q
        core = self.core

        while True:
            c = core.owner_conn
            if q.empty() and c is not None and not c.closed:
                # between calls this thread reads its owner's connection
                # itself: a call runs as it comes, not after a hand-off from
                # the I/O thread (which reads it while a call runs, and all
                # else always; it wakes this one for calls from elsewhere)
                core.runner_waiting = True
                core.runner_busy = False
                try:
                    r = core.runner_read(c, q, core.rwake_r)
                    if not r:
                        core.flush_dirty()
                finally:
                    core.runner_waiting = False
                if r != 1:
                    # woken (or not taken): the wake-up pipe is read; a
                    # call this thread read itself woke nobody
                    try:
                        os.read(core.rwake_r, 512)
                    except OSError:
                        pass
            elif q.empty() and core.dirty:
                core.flush_dirty()  # no owner to read (a detached actor's is gone)
            item = q.get()
            core.busy_sleep = 0.002
            core.runner_busy = True
            if self.pool is not None and self._is_method(item):
                self.pool.submit(self.handle, item)
            else:
                self.handle(item)
            if core.dirty and not q.empty() and core.io_sleep > 0.005:
                # replies are queued (Conn.post): the I/O thread sends them
                # while the next call runs (it wakes every few ms while this
                # thread is busy; woken here when it sleeps longer); with no
                # call waiting, read_direct above sends them at once
                core.wake_flush()

    def _is_method(self, item):
        return self.actor is not None

    def handle(self, item):
        conn, ident, payload, fds = item
        key = (id(conn), ident)
        with self.q.lock:
            if key in self.q.cancelled:
                self.q.cancelled.discard(key)
                for fd in fds:
                    os.close(fd)
                self._reply(conn, ident, W.SYS_ERROR, "cancelled before it ran")
                return
            self.q.running[key] = threading.get_ident()
        try:
            try:
                call = R._decode(payload, fds)
            except Exception as e:
                self._reply(conn, ident, W.SYS_ERROR, "the call did not decode: %s" % e)
                return
            kind = call[0]
            main = threading.get_ident() == self.q.main_ident
            try:
                if main:
                    self.q.current = key
                if kind == "task":
                    status, out = self._task(call)
                elif kind == "create":
                    status, out = self._create(call)
                elif kind == "method":
                    status, out = self._method(call)
                else:
                    status, out = W.SYS_ERROR, "unknown call %r" % (kind,)
                if main:
                    self.q.current = None
            except KeyboardInterrupt:
                if main:
                    self.q.current = None
                status, out = W.APP_ERROR, _error_info(*sys.exc_info(), cancelled=True)
        finally:
            with self.q.lock:
                self.q.running.pop(key, None)
                if self.q.interrupt == key:
                    self.q.interrupt = None
        self._reply(conn, ident, status, out)

    def _reply(self, conn, ident, status, out):
        try:
            if status == W.SYS_ERROR:
                conn.send(W.RETURN, ident, [bytes([status]), str(out).encode()])
                return
            fds = []
            if status == W.OK:
                out = [self._wrap(v, conn, fds) for v in out]
            try:
                parts = W.encode_values(out) if status == W.OK else W.encode(out)
            except Exception as e:
                if status == W.OK:
                    status, parts = W.APP_ERROR, W.encode(_error_info(type(e), e, e.__traceback__,
                                                                      note="the result could not be pickled"))
                else:
                    out.pop("exception", None)
                    parts = W.encode(out)
            if fds or threading.get_ident() != self.runner_ident:
                conn.send(W.RETURN, ident, [bytes([status])] + parts, fds=fds or None)
            else:
                self.core._post(conn, W.RETURN, ident, [bytes([status])] + parts, wake=False)
            for fd in fds:
                os.close(fd)
        except (OSError, ConnectionError):
            pass

    def _wrap(self, v, conn, fds):
        blob = W.Blob.of(v)
        if blob.nbytes() > R.INLINE_MAX and conn.unix and len(fds) < W.MAX_FDS:
            shm = W.Shm.create(blob)
            fds.append(os.dup(shm.fd))
            shm.close()
            return R._ShmArg(len(fds) - 1)
        return blob

    def _args(self, args, kwargs):
        def val(a):
            if isinstance(a, W.Blob):
                return a.value()
            if isinstance(a, R._ShmValue):
                v = a.shm.blob().value()
                return v
            if isinstance(a, R._ErrArg):
                raise a.error
            if isinstance(a, R.ObjectRef):
                return self.core.get(a)
            return a
        return [val(a) for a in args], {k: val(v) for k, v in kwargs.items()}

    def _task(self, call):
        _, tid, fid, fn_bytes, fname, args, kwargs, nret, job = call
        fn = self.fns.get(fid)
        if fn is None:
            if fn_bytes is None:
                return W.SYS_ERROR, "function %s (%s) was never sent to this worker" % (fname, fid)
            fn = self.fns[fid] = W.loads(fn_bytes, [])
        R._tls.task_id = tid
        try:
            try:
                a, k = self._args(args, kwargs)
            except BaseException as e:
                return W.APP_ERROR, _error_info(type(e), e, e.__traceback__, note="an argument failed")
            try:
                r = fn(*a, **k)
            except Exception:
                return W.APP_ERROR, _error_info(*sys.exc_info())
            return W.OK, _split(r, nret, fname)
        finally:
            R._tls.task_id = None

    def _create(self, call):
        _, aid, cls_bytes, cls_name, args, kwargs, opts = call
        cls = W.loads(cls_bytes, [])
        self.actor_id = aid
        R._tls.actor_id = aid
        os.environ["CORRAL_ACTOR_ID"] = aid
        try:
            a, k = self._args(args, kwargs)
            inst = cls(*a, **k)
        except Exception:
            return W.APP_ERROR, _error_info(*sys.exc_info())
        self.actor = inst
        mc = opts.get("max_concurrency")
        has_async = any(inspect.iscoroutinefunction(m) for _, m in inspect.getmembers(cls, inspect.isfunction))
        if has_async:
            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self.loop.run_forever, daemon=True).start()
            self.sem = None
            self.async_limit = mc or 1000
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(max_workers=min(self.async_limit, 64))
        elif mc and mc > 1:
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(max_workers=mc)
        return W.OK, []

    def _method(self, call):
        _, name, args, kwargs, nret, tid = call
        if self.actor is None:
            return W.SYS_ERROR, "this worker holds no actor"
        m = getattr(self.actor, name, None)
        if m is None or name.startswith("__"):
            return W.APP_ERROR, _error_info(AttributeError, AttributeError(
                "%s has no method %r" % (type(self.actor).__name__, name)), None)
        R._tls.task_id = tid
        try:
            a, k = self._args(args, kwargs) if args or kwargs else ((), {})
            co = self.coro.get(name)
            if co is None:
                co = self.coro[name] = inspect.iscoroutinefunction(m)
            if co:
                fut = asyncio.run_coroutine_threadsafe(m(*a, **k), self.loop)
                r = fut.result()
            else:
                r = m(*a, **k)
        except Exception:
            return W.APP_ERROR, _error_info(*sys.exc_info())
        finally:
            R._tls.task_id = None
        return W.OK, _split(r, nret, name)


def _split(r, nret, fname):
    if nret == 1:
        return [r]
    r = tuple(r)
    if len(r) != nret:
        raise ValueError("%s returned %d values, num_returns=%d" % (fname, len(r), nret))
    return list(r)


def _error_info(typ, exc, tb, note=None, cancelled=False):
    text = "".join(traceback.format_exception(typ, exc, tb))
    info = {"type": typ.__name__, "message": str(exc), "traceback": text,
            "pid": os.getpid(), "node": os.environ.get("CORRAL_NODE_ID", "")}
    if note:
        info["message"] = "%s: %s" % (note, info["message"])
    if cancelled:
        info["cancelled"] = True
    try:
        W.dumps(exc)
        info["exception"] = exc
    except Exception:
        pass
    return info


def main():
    owner = os.environ.get("CORRAL_TASK_OWNER")
    lease = os.environ.get("CORRAL_TASK_LEASE")
    if not owner or not lease:
        sys.stderr.write("corral._worker: CORRAL_TASK_OWNER and CORRAL_TASK_LEASE are not set: "
                         "this program is started by corral for a task owner, not by hand\n")
        return 2
    core = R.init()
    # a stopped lease (SIGTERM: its owner gone, corral.kill, the job's end)
    # takes its socket directory with it, as a normal end does
    def on_term(signum, frame):
        shutil.rmtree(core.dir, ignore_errors=True)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    core.detached = os.environ.get("CORRAL_TASK_DETACHED") == "1"
    core.exec_q = ExecQueue()
    signal.signal(signal.SIGINT, core.exec_q.on_interrupt)
    core.rwake_r, core.rwake_w = os.pipe()
    os.set_blocking(core.rwake_r, False)
    os.set_blocking(core.rwake_w, False)
    runner = Runner(core)
    try:
        c = core._dial(owner, os.environ.get("CORRAL_TASK_OWNER_NODE"),
                       {"role": "worker", "lease": lease})
    except OSError as e:
        sys.stderr.write("corral._worker: cannot reach the owner at %s: %s\n" % (owner, e))
        return 1
    core.owner_conn = c
    core.add_conn(c)
    runner.run_forever()


if __name__ == "__main__":
    sys.exit(main())
