"""corral's task and actor runtime for Python (docs/actors.md).

Every process of the model (a driver, a leased worker) has one ``Core``: a
private listening socket (Unix, plus TCP for other nodes), one I/O thread
that reads every connection, the objects it owns, the workers it leased
from the head, and, in a worker, the queue of calls it runs. Calls go
owner to worker and caller to actor directly; the head is asked only for
leases (one-worker jobs), placement groups and the named-actor records.
"""

import atexit
import collections
import hashlib
import hmac
import itertools
import json
import os
import secrets
import select
import selectors
import shutil
import socket
import stat
import struct
import sys
import tempfile
import threading
import time
import traceback
import weakref

from . import _wire as W
from . import exceptions as E

INLINE_MAX = int(os.environ.get("CORRAL_INLINE_MAX", 100 * 1024))
PIPELINE = int(os.environ.get("CORRAL_TASK_PIPELINE", 16))
IDLE_TIMEOUT = float(os.environ.get("CORRAL_TASK_IDLE_TIMEOUT", 10))
LEASE_TIMEOUT = float(os.environ.get("CORRAL_TASK_LEASE_TIMEOUT", 120))
HELLO_MAX = 64 * 1024
# what WELCOME's mac covers before the two nonces (worker/frame.h)
WELCOME_LABEL = b"corral-welcome"
# Workers an owner keeps started for its next actors of the default shape
# (no resources asked, unnamed, not detached: _api's MIN_CPU), from its
# first such actor on, so a fresh actor is ready without a process start
# (Ray's prestarted worker pool). 0: none.
SPARE_ACTORS = int(os.environ.get("CORRAL_ACTOR_SPARES", 2))
SPARE_SPEC = {"resources": "CPU=0.0001"}
# Workers of one shape an owner keeps at most (the cluster's room for the
# shape bounds it too: a simulated 180-CPU node on two cores would otherwise
# get 180 interpreters), and leases it has asking at once (Ray's
# max_pending_lease_requests).
MAX_WORKERS = int(os.environ.get("CORRAL_TASK_MAX_WORKERS", 0)) or max(4, 2 * (os.cpu_count() or 1))
# How often an owner asks the head whether its leased workers' jobs still
# run: a node the head declared dead fails (or retries) what ran there even
# while its processes, cut off, still hold their connections.
MONITOR_S = float(os.environ.get("CORRAL_TASK_MONITOR_S", 1.0))
LEASE_CONCURRENCY = int(os.environ.get("CORRAL_TASK_LEASE_CONCURRENCY", 0)) or max(2, os.cpu_count() or 1)


def _default_store_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 * 3 // 10
    except OSError:
        pass
    return 1 << 30


STORE_BYTES = int(os.environ.get("CORRAL_OBJECT_STORE_BYTES", 0)) or _default_store_bytes()
PUT_TIMEOUT = float(os.environ.get("CORRAL_PUT_TIMEOUT", 10))

_tls = threading.local()  # fds of the frame being decoded; the running task
_core = None
_core_lock = threading.Lock()


def core(required=True):
    if _core is None and required:
        raise RuntimeError("corral is not initialized: call corral.init() first")
    return _core


# ---- objects and refs ----

PENDING, READY, FAILED = 0, 1, 2


class _Obj:
    """An object this process owns."""

    __slots__ = ("state", "blob", "shm", "error", "local", "borrowers", "pending_borrows",
                 "waiters", "task", "nbytes", "on_ready")

    def __init__(self, task=None):
        self.state = PENDING
        self.blob = None
        self.shm = None
        self.error = None
        self.local = 0
        self.borrowers = 0
        self.pending_borrows = 0
        self.waiters = []  # (conn, ident) of GETs to answer when ready
        self.task = task
        self.nbytes = 0
        self.on_ready = None  # tasks waiting for it as an argument


class _Borrow:
    __slots__ = ("owner", "local", "state", "blob", "shm", "error", "fetching")

    def __init__(self, owner):
        self.owner = owner
        self.local = 0
        self.state = PENDING
        self.blob = None
        self.shm = None
        self.error = None
        self.fetching = False


class ObjectRef:
    """A reference to a value that a task will return or corral.put made.
    The process that made it owns the value; the value goes when no ref to
    it is left anywhere."""

    __slots__ = ("id", "owner", "__weakref__")

    def __init__(self, oid, owner):
        self.id = oid
        self.owner = owner

    def hex(self):
        return self.id

    def __repr__(self):
        return "ObjectRef(%s)" % self.id

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __del__(self):
        c = _core
        if c is not None and not c.closed:
            try:
                c.ref_dec(self.id, self.owner)
            except Exception:
                pass

    def __reduce__(self):
        c = _core
        if c is not None and self.owner == c.me:
            c.pin_for_borrow(self.id)
        return (_rebuild_ref, (self.id, self.owner))


def _rebuild_ref(oid, owner):
    c = core()
    return c.ref_inc(oid, owner, borrowed_from_wire=True)


class _ShmArg:
    """In a pickle: "the object in the fd at this index of the frame"."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return (_shm_arg, (self.index,))


class _ShmValue:
    __slots__ = ("shm",)

    def __init__(self, shm):
        self.shm = shm


def _shm_arg(index):
    fds = getattr(_tls, "fds", None) or []
    if index >= len(fds) or fds[index] < 0:
        raise W.ProtocolError("a frame names descriptor %d, which did not come with it" % index)
    fd = fds[index]
    fds[index] = -1
    return _ShmValue(W.Shm.open(fd))


def _decode(payload, fds):
    if not fds:
        return W.decode(payload)  # a _ShmArg in it finds no descriptor (_shm_arg)
    _tls.fds = list(fds)
    try:
        return W.decode(payload)
    finally:
        for fd in _tls.fds:
            if fd >= 0:
                os.close(fd)
        _tls.fds = None


# ---- work ----

class _Task:
    __slots__ = ("tid", "fid", "fn_bytes", "fname", "args", "kwargs", "returns", "opts", "shape",
                 "attempts", "retries_left", "exc_retries_left", "worker", "deps", "cancelled",
                 "kind", "actor", "submitted")

    def __init__(self):
        self.deps = 0
        self.cancelled = False
        self.worker = None
        self.attempts = 0
        self.actor = None


class _Worker:
    """A leased worker process, as its owner sees it."""

    __slots__ = ("lease", "job", "conn", "inflight", "shape", "idle_since", "pid", "node",
                 "address", "fids")

    def __init__(self, lease, job, conn, shape, peer):
        self.lease = lease
        self.job = job
        self.conn = conn
        self.inflight = {}
        self.shape = shape
        self.idle_since = time.monotonic()
        self.pid = peer.get("pid")
        self.node = peer.get("node", "")
        self.address = peer.get("address", "")
        self.fids = set()


class _Shape:
    """Leased workers of one resource shape, and the tasks waiting for one."""

    def __init__(self, key, spec):
        self.key = key
        self.spec = spec
        self.pool = []
        self.queue = collections.deque()
        self.leasing = 0
        self.cap = None
        self.error = None


class _Actor:
    """An actor this process owns."""

    def __init__(self, aid, cls_name, cls_bytes, args, kwargs, opts, spec):
        self.aid = aid
        self.cls_name = cls_name
        self.cls_bytes = cls_bytes
        self.args = args
        self.kwargs = kwargs
        self.opts = opts
        self.spec = spec
        self.state = "PENDING"
        self.worker = None
        self.queue = collections.deque()
        self.restarts = 0
        self.error = None
        self.killed = False
        self.name = opts.get("name")
        self.lease_job = None


class _Poller:
    """The I/O thread's epoll, without selectors' Python layer: a caller
    that waits for a reply takes its connection out and puts it back
    (read_direct) on every call, so each costs one system call."""

    def __init__(self):
        self.ep = select.epoll()
        self.map = {}  # fd -> (file object, data)

    @staticmethod
    def _stale(fd, data):
        """An entry of a connection closed without being unregistered (its
        descriptor number since reused): the kernel dropped it from the
        epoll set with the descriptor."""
        if data[0] != "conn":
            return False
        c = data[1]
        return c.closed or c.sock.fileno() != fd

    def register(self, fobj, events, data):
        fd = fobj if isinstance(fobj, int) else fobj.fileno()
        if fd < 0:
            raise KeyError(fd)
        old = self.map.get(fd)
        if old is not None:
            if not self._stale(fd, old[1]):
                raise KeyError(fd)  # registered already
            del self.map[fd]
            try:
                self.ep.unregister(fd)
            except OSError:
                pass
        self.ep.register(fd, select.EPOLLIN)
        self.map[fd] = (fobj, data)

    def unregister(self, fobj):
        fd = fobj if isinstance(fobj, int) else fobj.fileno()
        if fd < 0:
            # a closed socket: its entry found by the object (as selectors do)
            for k, (o, d) in list(self.map.items()):
                if o is fobj or (d[0] == "conn" and d[1].sock is fobj):
                    del self.map[k]
                    return
            raise KeyError(fobj)
        del self.map[fd]  # KeyError when it was not registered
        try:
            self.ep.unregister(fd)
        except OSError:
            pass

    def select(self, timeout):
        m = self.map
        return [m[fd] for fd, _ in self.ep.poll(timeout) if fd in m]


class Core:
    def __init__(self, head_address=None, namespace=None):
        self.closed = False
        self.node = os.environ.get("CORRAL_NODE_ID") or socket.gethostname()
        self.pid = os.getpid()
        self.is_worker = bool(os.environ.get("CORRAL_TASK_LEASE"))
        sec = os.environ.get("CORRAL_TASK_SECRET") if self.is_worker else None
        self.secret = bytes.fromhex(sec) if sec else secrets.token_bytes(32)
        self.namespace = namespace or os.environ.get("CORRAL_NAMESPACE") or "default"
        self.head_address = head_address
        self.job_id = os.environ.get("CORRAL_TASK_DRIVER_JOB") or os.environ.get("CORRAL_JOB_ID") or ""
        listen = os.environ.get("CORRAL_TASK_LISTEN") if self.is_worker else None
        if listen:
            # an actor's socket where its owner said (its job's argv names
            # it, so named and detached actors can be found without the
            # owner); mkdir fails if anyone made the path first
            os.mkdir(listen, 0o700)
            self.dir = listen
        else:
            self.dir = tempfile.mkdtemp(prefix="corral-tasks-")
        self.upath = os.path.join(self.dir, "s")
        self.usock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.usock.bind(self.upath)
        self.usock.listen(128)
        host = os.environ.get("CORRAL_TASK_HOST", "127.0.0.1")
        self.tsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tsock.bind((host, 0))
        self.tsock.listen(128)
        self.address = "unix:%s;tcp:%s:%d" % (self.upath, host, self.tsock.getsockname()[1])
        self.me = "%s|%d|%s" % (self.node, self.pid, self.address)
        self.prefix = secrets.token_hex(5)
        self.ids = itertools.count(1)
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.objs = {}
        self.borrowed = {}
        self.shapes = {}
        self.leases = {}      # lease id -> _Shape or _Actor
        self.workers = {}     # lease id -> _Worker
        self.actors = {}      # owned actors by id
        self.remote_actors = {}  # actor id -> [conn or None, address, owner, inflight{}]
        self.peers = {}       # address -> Conn (as a caller)
        self.calls = {}       # (conn id, ident) -> callback for RETURN/OBJECT on caller conns
        self.store_bytes = 0
        # started workers waiting to become actors of the default shape
        # (create_actor), not in self.shapes: no task runs on them
        self.spares = _Shape(("spare",), SPARE_SPEC)
        self.shm_pool = W.ShmPool(min(STORE_BYTES // 4, 1 << 30))
        self.head = None
        self.head_lock = threading.Lock()
        self.sel = _Poller()
        self.wr, self.ww = os.pipe()
        os.set_blocking(self.wr, False)
        self.sel.register(self.usock, selectors.EVENT_READ, ("listen", True))
        self.sel.register(self.tsock, selectors.EVENT_READ, ("listen", False))
        self.sel.register(self.wr, selectors.EVENT_READ, ("wake", None))
        self.pending_add = []
        # connections with frames post()ed and not yet sent: the I/O thread
        # sends them before it sleeps, a thread about to wait for a result
        # sends them itself (docs/actors.md "Batching")
        self.dirty = []
        self.dirty_lock = threading.Lock()
        self.wake_pending = False
        self.exec_q = None
        self.runner_waiting = False  # a worker's runner reads its owner's connection
        self.runner_busy = False     # ... or runs a call
        self.busy_sleep = self.io_sleep = 0.5
        self.rwake_r = self.rwake_w = None
        self.owner_conn = None
        self.detached = False
        self.monitor = None
        self.actor_dirs = {}
        self.io = threading.Thread(target=self._loop, name="corral-io", daemon=True)
        self.io.start()
        self.io_ident = self.io.ident

    # -- ids --
    def new_id(self, tag="o"):
        return "%s%s%x" % (self.prefix, tag, next(self.ids))

    # -- the head --
    HEAD_CALLS = ("submit", "status", "stop", "cluster", "jobs", "pg_create", "pg_get", "pg_remove")

    def head_call(self, _call, *args, **kw):
        if self.is_worker:
            return self._head_via_owner(_call, args, kw)
        from . import _head
        with self.head_lock:
            if self.closed:
                raise RuntimeError("corral.shutdown() was called: call corral.init() again")
            if self.head is None:
                self.head = _head.connect(self.head_address)
            return getattr(self.head, _call)(*args, **kw)

    def _head_via_owner(self, name, args, kw):
        """A leased worker holds no head credential: its owner makes the call
        for it (HEADCALL), so tasks that submit tasks lease through it."""
        c = self.owner_conn
        if c is None or c.closed:
            raise RuntimeError("this worker's owner is gone: it cannot reach the head")
        ident = next(self.ids)
        box = {}
        ev = threading.Event()

        def done(payload, fds, err):
            box["r"] = (payload, fds, err)
            ev.set()
        with self.lock:
            self.calls[(id(c), ident)] = done
        c.send(W.HEADCALL, ident, W.encode((name, args, kw)))
        ev.wait()
        payload, fds, err = box["r"]
        for fd in fds:
            os.close(fd)
        if err is not None:
            raise RuntimeError("this worker's owner went away during a head call (%s)" % name)
        status, v = payload[0], W.decode(payload[1:])
        if status != W.OK:
            raise _head_error(*v)
        return v

    def _serve_headcall(self, c, ident, payload):
        try:
            name, args, kw = W.decode(payload)
            if name not in self.HEAD_CALLS:
                raise W.ProtocolError("a HEADCALL of %r, which a worker may not make" % (name,))
            r = self.head_call(name, *args, **kw)
            parts = [bytes([W.OK])] + W.encode(r)
        except W.ProtocolError:
            raise
        except Exception as e:
            code = e.args[0] if len(e.args) == 2 and isinstance(e.args[0], int) else -1
            parts = [bytes([W.APP_ERROR])] + W.encode((code, str(e.args[1] if code != -1 else e)))
        try:
            c.send(W.OBJECT, ident, parts)
        except (OSError, ConnectionError):
            pass

    def _exit(self):
        """A worker whose owner is gone ends at once (its socket with it)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        os._exit(0)

    # -- the I/O thread --
    def _wake(self):
        try:
            os.write(self.ww, b"x")
        except OSError:
            pass

    def _post(self, c, kind, ident, parts, wake=True, idle=False):
        """Queues a frame on c (Conn.post); c is sent by the I/O thread
        (woken for it unless wake is False or it is the caller) or by
        the next flush_dirty(). A call to a worker with none in flight
        (idle) goes at once: one call and its wait (get(f.remote())) wakes
        no other thread; a burst is queued after its first call."""
        if idle and not c.out:
            c.send(kind, ident, parts)
            return
        if c.post(kind, ident, parts):
            with self.dirty_lock:
                self.dirty.append(c)
                wake = wake and not self.wake_pending and threading.get_ident() != self.io_ident
                if wake:
                    self.wake_pending = True
            if wake:
                self._wake()

    def wake_flush(self):
        """Has the I/O thread send what is queued (once per burst)."""
        with self.dirty_lock:
            if not self.dirty or self.wake_pending:
                return
            self.wake_pending = True
        self._wake()

    def flush_dirty(self):
        with self.dirty_lock:
            if not self.dirty:
                return
            d, self.dirty = self.dirty, []
        for c in d:
            try:
                c.flush()
            except (OSError, ConnectionError):
                pass  # the I/O thread sees the loss

    def add_conn(self, conn):
        with self.lock:
            self.pending_add.append(conn)
        self._wake()

    def _loop(self):
        last = time.monotonic()
        while not self.closed:
            self.flush_dirty()
            # while a worker's runner is in a call, replies it queued are
            # sent from here: a short sleep, doubled while nothing comes
            busy = self.runner_busy
            self.io_sleep = self.busy_sleep if busy else 0.5
            try:
                events = self.sel.select(self.io_sleep)
                if busy and not events:
                    self.busy_sleep = min(self.busy_sleep * 2, 0.5)
            except (OSError, ValueError):
                if self.closed:
                    return
                raise
            for fobj, (what, arg) in events:
                if what == "wake":
                    try:
                        os.read(self.wr, 4096)
                    except OSError:
                        pass
                    with self.dirty_lock:
                        self.wake_pending = False
                    with self.lock:
                        add, self.pending_add = self.pending_add, []
                    for c in add:
                        if not c.closed:
                            self.sel.register(c.sock, selectors.EVENT_READ, ("conn", c))
                elif what == "listen":
                    self._accept(fobj, arg)
                else:
                    self._readable(arg)
            now = time.monotonic()
            if now - last > 1.0:
                last = now
                self._reap_idle(now)
                self.shm_pool.expire(now)

    def _accept(self, lsock, unix):
        try:
            s, _ = lsock.accept()
        except OSError:
            return
        if unix:
            cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _, uid, _ = struct.unpack("3i", cred)
            if uid != os.geteuid():
                s.close()
                return
        s.setblocking(True)
        if not unix:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = W.Conn(s, unix)
        if not unix:
            c.nonce = secrets.token_bytes(32)
            try:
                c.send(W.CHALLENGE, 0, [c.nonce])
            except OSError:
                c.close()
                return
        self.sel.register(s, selectors.EVENT_READ, ("conn", c))

    def _readable(self, c):
        if not c.rlock.acquire(blocking=False):
            return  # a thread reads it directly (read_direct)
        try:
            self._read_some(c)
        finally:
            c.rlock.release()

    def _read_some(self, c):
        """With c.rlock: reads what c has and dispatches its frames."""
        try:
            frames = c.feed()
        except W.ProtocolError as e:
            self._log("closing a connection: %s" % e)
            frames = None
        if frames is None:
            try:
                self.sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
            c.close()
            self._lost(c)
            return
        for kind, flags, ident, payload, fds in frames:
            try:
                self._frame(c, kind, ident, payload, fds)
            except W.ProtocolError as e:
                self._log("closing a connection: %s" % e)
                for fd in fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                c.close()
                self._lost(c)
                return
            except Exception:
                self._log("error handling a %s frame:\n%s" % (W.KIND_NAMES.get(kind, kind),
                                                              traceback.format_exc()))

    def read_direct(self, c, until, deadline=None, wake_fd=None, taken=None):
        """Reads and dispatches c's frames on this thread instead of the I/O
        thread's, until until() holds, deadline (time.monotonic()) passes,
        or wake_fd is readable: a thread that waits for a reply on c (a
        get, a worker's runner between calls) takes it as it comes, with
        no hand-off between threads. False when c could not be taken (the
        I/O thread reads it, or it is not registered yet). taken() runs
        once c is this thread's (a runner sends its replies then, so that
        the next call finds it reading)."""
        if c.closed or not c.rlock.acquire(blocking=False):
            return 0
        woken = False
        try:
            fd = c.sock.fileno()
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                return 0
            try:
                if taken is not None:
                    taken()
                p = select.poll()
                p.register(fd, select.POLLIN)
                if wake_fd is not None:
                    p.register(wake_fd, select.POLLIN)
                while not c.closed and not until():
                    ms = 50
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        ms = min(ms, int(left * 1000) + 1)
                    ev = p.poll(ms)
                    if not ev:
                        continue  # until() again: another thread may have made it true
                    if len(ev) > 1 or ev[0][0] != fd:
                        woken = True
                        break
                    self._read_some(c)
            finally:
                if not c.closed:
                    try:
                        self.sel.register(fd, None, ("conn", c))
                    except (KeyError, ValueError, OSError):
                        pass
        finally:
            c.rlock.release()
        return 2 if woken else 1

    def runner_read(self, c, q, wake_fd):
        """read_direct for a worker's runner between calls, leaner (it runs
        once per call): until q has a call or wake_fd is readable; sends
        the replies queued first. 0: c not taken, 1: a call came, 2: woken."""
        if c.closed or not c.rlock.acquire(blocking=False):
            return 0
        woken = False
        fd = c.sock.fileno()
        try:
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                return 0
            try:
                if self.dirty:
                    self.flush_dirty()
                p = getattr(c, "rpoll", None)
                if p is None:
                    p = c.rpoll = select.poll()
                    p.register(fd, select.POLLIN)
                    p.register(wake_fd, select.POLLIN)
                empty = q.empty
                while empty() and not c.closed:
                    ev = p.poll(50)
                    if not ev:
                        continue
                    if len(ev) > 1 or ev[0][0] != fd:
                        woken = True
                        break
                    self._read_some(c)
            finally:
                if not c.closed:
                    try:
                        self.sel.register(fd, None, ("conn", c))
                    except (KeyError, ValueError, OSError):
                        pass
        finally:
            c.rlock.release()
        return 2 if woken else 1

    def _log(self, msg):
        sys.stderr.write("corral[%d]: %s\n" % (self.pid, msg))

    def _frame(self, c, kind, ident, payload, fds):
        if not c.hello:
            if kind != W.HELLO:
                raise W.ProtocolError("the first frame was %s, not HELLO" % W.KIND_NAMES.get(kind, kind))
            if payload.nbytes > HELLO_MAX:
                raise W.ProtocolError("a HELLO of %d bytes" % payload.nbytes)
            try:
                peer = json.loads(bytes(payload))
                assert isinstance(peer, dict)
            except Exception:
                raise W.ProtocolError("a HELLO that is not a JSON object")
            welcome = {"pid": self.pid, "runtime": "python"}
            if not c.unix:
                mac = hmac.new(self.secret, c.nonce, hashlib.sha256).hexdigest()
                if not hmac.compare_digest(str(peer.get("mac", "")), mac):
                    raise W.ProtocolError("a HELLO over TCP with a wrong mac")
                # the peer's own challenge: WELCOME proves the secret back
                # (docs/actors.md "Wire"; the label keeps it from being a
                # HELLO's mac of a CHALLENGE anyone sent)
                try:
                    cnonce = bytes.fromhex(peer["nonce"])
                    assert len(cnonce) == 32
                except Exception:
                    raise W.ProtocolError('a HELLO over TCP without a "nonce" of 64 hex digits')
                welcome["mac"] = hmac.new(self.secret, WELCOME_LABEL + c.nonce + cnonce,
                                          hashlib.sha256).hexdigest()
            c.hello = True
            c.peer = peer
            c.role = peer.get("role")
            c.send(W.WELCOME, ident, [json.dumps(welcome).encode()])
            if c.role == "worker":
                self._worker_hello(c, peer)
            return
        if kind == W.RETURN:
            self._returned(c, ident, payload, fds)
        elif kind == W.CALL:
            if self.exec_q is None:
                c.send(W.RETURN, ident, [bytes([W.SYS_ERROR]), b"this process runs no calls (it is not a worker)"])
                return
            self.exec_q.put((c, ident, payload, fds))
            if self.runner_waiting and threading.get_ident() == self.io_ident:
                try:
                    os.write(self.rwake_w, b"x")
                except OSError:
                    pass
        elif kind == W.GET:
            self._serve_get(c, ident, bytes(payload).decode())
        elif kind == W.OBJECT:
            cb = self.calls.pop((id(c), ident), None)
            if cb:
                cb(payload, fds, None)
            else:
                for fd in fds:
                    os.close(fd)
        elif kind == W.REF_ADD:
            self._borrower(bytes(payload).decode(), +1)
        elif kind == W.REF_DEL:
            self._borrower(bytes(payload).decode(), -1)
        elif kind == W.KILL:
            req = json.loads(bytes(payload))
            threading.Thread(target=self.kill_actor, args=(req["actor"], req.get("no_restart", True)),
                             daemon=True).start()
        elif kind == W.HEADCALL:
            if not isinstance(c.data, _Worker):
                raise W.ProtocolError("a HEADCALL from a process this one did not lease")
            threading.Thread(target=self._safe_headcall, args=(c, ident, bytes(payload)), daemon=True).start()
        elif kind == W.CANCEL:
            if self.exec_q is not None:
                self.exec_q.cancel(struct.unpack(">Q", bytes(payload))[0], c)
        elif kind == W.INFO:
            self._serve_info(c, ident, payload)
        elif kind == W.BYE:
            if c is self.owner_conn and not self.detached:
                self._exit()
        else:
            raise W.ProtocolError("a frame of kind %d, which this runtime does not know" % kind)

    def _safe_headcall(self, c, ident, payload):
        try:
            self._serve_headcall(c, ident, memoryview(payload))
        except W.ProtocolError as e:
            self._log("closing a worker's connection: %s" % e)
            c.close()

    # -- connecting out (as a caller) --
    def connect(self, address, node=None):
        """A connection to the process listening at address (ours, or that
        of an owner or actor), handshaken; cached per address."""
        with self.lock:
            c = self.peers.get(address)
            if c is not None and not c.closed:
                return c
        c = self._dial(address, node, {"role": "caller"})
        with self.lock:
            old = self.peers.get(address)
            if old is not None and not old.closed:
                c.close()
                return old
            self.peers[address] = c
        self.add_conn(c)
        return c

    def _dial(self, address, node, hello):
        parts = dict(p.split(":", 1) for p in address.split(";") if ":" in p)
        # the Unix socket when its path is here (a fresh random directory:
        # the same machine, whatever node names the processes were given,
        # as simulated nodes share one); TCP otherwise
        hello = dict(hello, pid=self.pid, runtime="python", address=self.address, node=self.node)
        if "unix" in parts and os.path.exists(parts["unix"]):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(parts["unix"])
            c = W.Conn(s, True)
        else:
            host, port = parts["tcp"].rsplit(":", 1)
            s = socket.create_connection((host, int(port)), timeout=10)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = W.Conn(s, False)
            kind, _, snonce = _read_frame(s)
            if kind != W.CHALLENGE or len(snonce) != 32:
                s.close()
                raise ConnectionError("%s did not send a CHALLENGE" % address)
            hello["mac"] = hmac.new(self.secret, snonce, hashlib.sha256).hexdigest()
            # our own challenge, which WELCOME must answer: whatever listens
            # at the address without the secret is refused before any call
            cnonce = secrets.token_bytes(32)
            hello["nonce"] = cnonce.hex()
        c.send(W.HELLO, 0, [json.dumps(hello).encode()])
        kind, _, payload = _read_frame(s)
        if kind != W.WELCOME:
            s.close()
            raise ConnectionError("%s refused the connection" % address)
        try:
            peer = json.loads(payload)
            assert isinstance(peer, dict)
        except Exception:
            s.close()
            raise ConnectionError("%s sent a WELCOME that is not a JSON object" % address)
        if not c.unix:
            want = hmac.new(self.secret, WELCOME_LABEL + snonce + cnonce, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(str(peer.get("mac", "")), want):
                s.close()
                msg = ("the process at %s did not prove CORRAL_TASK_SECRET (its WELCOME's mac is %s): "
                       "refusing it, sending or running none of its calls"
                       % (address, "missing" if "mac" not in peer else "wrong"))
                self._log(msg)
                raise ConnectionError(msg)
        s.settimeout(None)
        c.hello = True
        c.peer = peer
        c.role = "peer"
        return c

    # -- losing a connection --
    def _lost(self, c):
        if c is self.owner_conn:
            if not getattr(self, "detached", False):
                self._exit()
            return
        with self.lock:
            for addr, pc in list(self.peers.items()):
                if pc is c:
                    del self.peers[addr]
            cbs = [(k, cb) for k, cb in self.calls.items() if k[0] == id(c)]
            for k, _ in cbs:
                del self.calls[k]
            w = c.data
        for _, cb in cbs:
            try:
                cb(None, [], ConnectionError("lost"))
            except Exception:
                self._log(traceback.format_exc())
        if isinstance(w, _Worker):
            threading.Thread(target=self._worker_died, args=(w,), daemon=True).start()

    # ---- owner: leases ----
    def _worker_hello(self, c, peer):
        lease = str(peer.get("lease", ""))
        with self.lock:
            target = self.leases.get(lease)
            if target is None:
                c.send(W.BYE, 0)
                return
            w = _Worker(lease, getattr(target, "lease_jobs", {}).get(lease), c, target, peer)
            c.data = w
            self.workers[lease] = w
            if isinstance(target, _Actor):
                target.worker = w
                self._actor_connected(target)
            else:
                target.leasing -= 1
                target.pool.append(w)
                # more workers while tasks still wait (before the pipelining
                # onto busy ones, which _drain does only with no lease out)
                if len(target.queue) > 1:
                    self._maybe_lease(target)
                self._drain(target)
            self.cond.notify_all()

    def _watch_jobs(self):
        """The monitor thread: a leased worker whose job the head no longer
        runs (its node died, someone stopped it) is lost: its connection is
        shut so the I/O thread fails or retries what it ran."""
        while not self.closed:
            time.sleep(MONITOR_S)
            with self.lock:
                held = [(w, w.job) for w in self.workers.values() if w.job]
            if not held:
                continue
            try:
                # a connected worker's lease job is RUNNING (or PLACING,
                # its start not yet reported): the queue's pending jobs
                # (10,000 of them, maybe) are not listed each second
                live = {jid for jid, _ in self.head_call("jobs", True)}
            except Exception:
                continue
            for w, job in held:
                if job not in live and not w.conn.closed:
                    self._log("lease job %s (worker pid %s on %s) is no longer running at the head: "
                              "taking the worker as lost" % (job, w.pid, w.node))
                    try:
                        w.conn.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def _lease(self, target, spec, name):
        """Runs in its own thread: asks the head for a one-worker job of spec."""
        with self.lock:
            if self.monitor is None:
                self.monitor = threading.Thread(target=self._watch_jobs, name="corral-monitor", daemon=True)
                self.monitor.start()
        lease = self.new_id("L")
        env = dict(os.environ)
        for k in ("CORRAL_TASK_LEASE", "CORRAL_TASK_OWNER", "CORRAL_TASK_OWNER_NODE"):
            env.pop(k, None)
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        pp = [pkg]
        from . import _head
        core_dir = _head.core_dir()
        if core_dir:
            env["CORRAL_PYTHON_CORE"] = core_dir
        if env.get("PYTHONPATH"):
            pp.append(env["PYTHONPATH"])
        env.update(CORRAL_TASK_OWNER=self.address, CORRAL_TASK_OWNER_NODE=self.node,
                   CORRAL_TASK_LEASE=lease, CORRAL_TASK_SECRET=self.secret.hex(),
                   CORRAL_TASK_RUNTIME="python", PYTHONPATH=":".join(pp),
                   CORRAL_NAMESPACE=self.namespace)
        if self.job_id:
            env["CORRAL_TASK_DRIVER_JOB"] = self.job_id
        if spec.get("detached"):
            env["CORRAL_TASK_DETACHED"] = "1"
        if self.head_address:
            env["CORRAL_ADDRESS"] = self.head_address
        with self.lock:
            self.leases[lease] = target
            if not hasattr(target, "lease_jobs"):
                target.lease_jobs = {}
        argv = [sys.executable, "-m", "corral._worker"]
        if not isinstance(target, _Actor):  # corral list finds owners by it (an actor's ends its argv)
            argv += ["--owner", self.me]
        if isinstance(target, _Actor):
            listen = os.path.join(tempfile.gettempdir(), "corral-actor-" + secrets.token_hex(8))
            env["CORRAL_TASK_LISTEN"] = listen
            self.actor_dirs[lease] = listen  # removed here if its worker dies on this node
            # what find_named_actor reads back from the job's command
            argv += ["--actor", target.aid, "--class", target.cls_name, "--owner", self.me,
                     "--listen", listen]
        try:
            job = self.head_call("submit", argv, ["%s=%s" % kv for kv in env.items()],
                                 resources=spec.get("resources") or None, name=name,
                                 cwd=os.getcwd(), selector=spec.get("selector"),
                                 strategy=spec.get("strategy"), placement_group=spec.get("pg"),
                                 bundle_index=spec.get("bundle", -1),
                                 bound=0 if spec.get("detached") else 1, env_whole=1)
        except Exception as e:
            self._lease_failed(target, lease, e, None)
            return
        with self.lock:
            target.lease_jobs[lease] = job
            if isinstance(target, _Actor):
                target.lease_job = job
            w = self.workers.get(lease)
            if w is not None:
                w.job = job
        deadline = time.monotonic() + LEASE_TIMEOUT
        while True:
            with self.lock:
                # connected (in self.workers), or connected and already gone
                # again (its lease dropped by _worker_lost or _reap_idle,
                # which dealt with its end): not this thread's to fail. A
                # worker that ran a task killing itself (die_always) could
                # connect, die and be dropped before this thread looked, and
                # its end then failed the tasks queued for the next worker
                # ("ended before it connected") and took one off leasing
                # twice.
                if lease in self.workers or lease not in self.leases or self.closed:
                    return
                if self.cond.wait(0.25) and lease in self.workers:
                    return
            try:
                st = self.head_call("status", job)
            except Exception as e:
                self._lease_failed(target, lease, e, job)
                return
            if st["state"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                w0 = st["workers"][0] if st["workers"] else {}
                why = w0.get("reason") or st.get("reason") or "it ended (%s)" % st["state"]
                self._lease_failed(target, lease, RuntimeError(
                    "the leased worker (job %s) ended before it connected: %s" % (job, why)), job)
                return
            if st["state"] == "RUNNING" and time.monotonic() > deadline:
                self._lease_failed(target, lease, RuntimeError(
                    "the leased worker (job %s) runs but did not connect within %.0f s "
                    "(CORRAL_TASK_LEASE_TIMEOUT)" % (job, LEASE_TIMEOUT)), job)
                try:
                    self.head_call("stop", job)
                except Exception:
                    pass
                return

    def _lease_failed(self, target, lease, err, job):
        msg = str(err)
        code = getattr(err, "args", (None,))[0] if err.args else None
        # CR_EINFEASIBLE, or CR_EINVAL: a request the head refuses as it
        # stands (TPU=64 on 4-chip hosts) will never be scheduled either
        infeasible = isinstance(code, int) and code in (-3007, -22)
        with self.lock:
            self.leases.pop(lease, None)
            if isinstance(target, _Actor):
                self._actor_dead(target, "it could not be started: %s" % msg, unschedulable=infeasible)
                return
            target.leasing -= 1
            if target.pool or target.leasing:
                return
            cls = E.TaskUnschedulableError if infeasible else E.WorkerCrashedError
            error = cls("no worker for %s: %s" % (target.spec.get("resources") or "CPU=1", msg))
            while target.queue:
                t = target.queue.popleft()
                self._fail_task(t, error)

    def _cap(self, spec):
        """How many workers of this shape the cluster's nodes could hold at
        once (from their totals): the most an owner leases."""
        want = _parse_res(spec.get("resources") or "CPU=1")
        try:
            nodes = self.head_call("cluster")
        except Exception as e:
            # a driver run as a job may not read the cluster (its job
            # credential): lease up to MAX_WORKERS and let the head's
            # scheduler hold back what does not fit now
            if e.args and e.args[0] == -13:
                return MAX_WORKERS
            return 1
        n = 0
        for node in nodes:
            if node["state"] != "ALIVE":
                continue
            k = None
            for r, q in want.items():
                if q <= 0:
                    continue
                have = node["total"].get(r, 0.0)
                if r == "memory":
                    pass
                k2 = int(have / q + 1e-9)
                k = k2 if k is None else min(k, k2)
            n += k if k is not None else 64
        return max(1, min(n, int(os.environ.get("CORRAL_TASK_MAX_WORKERS", 256))))

    # ---- owner: tasks ----
    def submit_task(self, fn, fn_bytes, fid, fname, args, kwargs, opts, spec, key=None):
        t = _Task()
        t.kind = "task"
        t.tid = self.new_id("t")
        t.fid, t.fn_bytes, t.fname = fid, fn_bytes, fname
        nret = opts.get("num_returns", 1)
        t.returns = [t.tid] if nret == 1 else [t.tid + "r%d" % i for i in range(nret)]
        t.opts = opts
        mr = opts.get("max_retries", 3)
        t.retries_left = float("inf") if mr == -1 else mr
        t.exc_retries_left = t.retries_left if opts.get("retry_exceptions") else 0
        if key is None:
            key = _shape_key(spec)
        refs = []
        with self.lock:
            shape = self.shapes.get(key)
            if shape is None:
                shape = self.shapes[key] = _Shape(key, spec)
            t.shape = shape
            for oid in t.returns:
                o = self.objs[oid] = _Obj(t)
                o.local = 1
                refs.append(ObjectRef(oid, self.me))
            t.args, t.kwargs = self._bind_args(t, args, kwargs)
            if t.deps == 0:
                self._enqueue(t)
        return refs[0] if nret == 1 else refs

    def _bind_args(self, t, args, kwargs):
        """Top-level refs this process owns wait to be ready (dependencies);
        others go as refs and the worker fetches them."""
        def bind(v):
            if isinstance(v, ObjectRef) and v.owner == self.me:
                o = self.objs.get(v.id)
                if o is None:
                    raise E.ObjectLostError("argument %s: this object is gone" % v.id)
                o.pending_borrows += 1  # held until the task is done
                if o.state == PENDING:
                    t.deps += 1
                    if o.on_ready is None:
                        o.on_ready = []
                    o.on_ready.append(t)
                return _Arg(v.id)
            return v
        return [bind(a) for a in args], {k: bind(v) for k, v in kwargs.items()}

    def _enqueue(self, t):
        """Under the lock: to an idle worker of its shape, else the queue
        (leasing another worker when the shape may grow)."""
        shape = t.shape
        if shape.error is not None:
            self._fail_task(t, shape.error)
            return
        shape.queue.append(t)
        self._drain(shape)
        if shape.queue and not any(len(w.inflight) == 0 for w in shape.pool):
            self._maybe_lease(shape)

    def _maybe_lease(self, shape):
        if shape.cap is None:
            shape.cap = -1  # computing
            threading.Thread(target=self._compute_cap, args=(shape,), daemon=True).start()
            return
        if shape.cap < 0:
            return
        want = min(len(shape.queue), shape.cap - len(shape.pool) - shape.leasing,
                   LEASE_CONCURRENCY - shape.leasing)
        for _ in range(max(0, want)):
            shape.leasing += 1
            threading.Thread(target=self._lease, args=(shape, shape.spec, "task:%s" % (shape.spec.get("resources") or "CPU=1")),
                             daemon=True).start()

    def _compute_cap(self, shape):
        cap = min(self._cap(shape.spec), MAX_WORKERS)
        with self.lock:
            shape.cap = cap
            if shape.queue:
                self._maybe_lease(shape)

    def _drain(self, shape):
        """Under the lock: sends queued tasks to the shape's workers, idle
        ones first, then pipelined up to PIPELINE per worker."""
        while shape.queue and shape.pool:
            w = min(shape.pool, key=lambda x: len(x.inflight))
            if len(w.inflight) >= PIPELINE or (len(w.inflight) and shape.leasing and len(w.inflight) >= 1):
                break
            t = shape.queue.popleft()
            if t.cancelled:
                continue
            self._send_task(w, t)

    def _send_task(self, w, t):
        ident = next(self.ids)
        t.worker = w
        t.attempts += 1
        idle = not w.inflight
        w.inflight[ident] = t
        w.idle_since = None
        fn_bytes = None
        if t.fid not in w.fids:
            fn_bytes = t.fn_bytes
            w.fids.add(t.fid)
        fds = []
        args = [self._resolve(a, w, fds) for a in t.args]
        kwargs = {k: self._resolve(v, w, fds) for k, v in t.kwargs.items()}
        call = ("task", t.tid, t.fid, fn_bytes, t.fname, args, kwargs, len(t.returns), self.job_id)
        try:
            if fds:
                w.conn.send(W.CALL, ident, W.encode(call), fds=fds)
            else:
                self._post(w.conn, W.CALL, ident, W.encode(call), idle=idle)
        except (OSError, ConnectionError):
            pass  # the I/O thread sees the loss and retries it
        except W.ProtocolError as e:
            del w.inflight[ident]
            self._fail_task(t, E.CorralError(str(e)))

    def _resolve(self, a, w, fds):
        if isinstance(a, _Arg):
            o = self.objs.get(a.oid)
            if o is None:
                return ObjectRef(a.oid, self.me)
            if o.state == FAILED:
                return _ErrArg(o.error)
            if o.shm is not None:
                if w.conn.unix and len(fds) < W.MAX_FDS:
                    o.shm.seal()
                    fds.append(o.shm.fd)
                    return _ShmArg(len(fds) - 1)
                return o.shm.blob()
            return o.blob
        return a

    def _returned(self, c, ident, payload, fds):
        w = c.data
        cb = self.calls.pop((id(c), ident), None)
        if cb is not None:
            cb(payload, fds, None)
            return
        if not isinstance(w, _Worker):
            for fd in fds:
                os.close(fd)
            return
        status = payload[0] if payload.nbytes else W.SYS_ERROR
        body = payload[1:]
        with self.lock:
            t = w.inflight.pop(ident, None)
            if not w.inflight:
                w.idle_since = time.monotonic()
        if t is None:
            for fd in fds:
                os.close(fd)
            return
        try:
            if status == W.OK:
                vals = _decode(body, fds)
            elif status == W.APP_ERROR:
                info = _decode(body, fds)
            else:
                info = bytes(body).decode("utf-8", "replace")
        except Exception as e:
            status, info = W.SYS_ERROR, "the reply did not decode: %s" % e
        with self.lock:
            if t.kind == "task":
                self._task_done(t, status, vals if status == W.OK else info)
                self._drain(t.shape)
            else:
                self._call_done(t, status, vals if status == W.OK else info)
                if t.actor.queue:
                    self._actor_pump(t.actor)

    def _task_done(self, t, status, v):
        if t.cancelled:
            self._fail_task(t, E.TaskCancelledError("task %s (%s) was cancelled" % (t.tid, t.fname)))
            return
        if status == W.OK:
            self._release_args(t)
            for oid, val in zip(t.returns, v):
                self._set_value(oid, val)
            return
        if status == W.APP_ERROR:
            if t.exc_retries_left > 0 and _retryable(t.opts.get("retry_exceptions"), v):
                t.exc_retries_left -= 1
                self._enqueue(t)
                return
            self._fail_task(t, _task_error(t.fname, v))
            return
        self._fail_task(t, E.CorralError("%s: %s" % (t.fname, v)))

    def _release_args(self, t):
        for a in list(t.args) + list(t.kwargs.values()):
            if isinstance(a, _Arg):
                o = self.objs.get(a.oid)
                if o is not None:
                    o.pending_borrows -= 1
                    self._maybe_free(a.oid, o)
        t.args, t.kwargs = [], {}

    def _set_value(self, oid, val):
        o = self.objs.get(oid)
        if o is None:
            if isinstance(val, _ShmValue):
                val.shm.close()
            return
        if isinstance(val, _ShmValue):
            o.shm = val.shm
            o.nbytes = val.shm.size
            self.store_bytes += o.nbytes
        else:
            o.blob = val
            o.nbytes = val.nbytes()
        o.state = READY
        self._ready(oid, o)

    def _ready(self, oid, o):
        o.task = None
        waiters, o.waiters = o.waiters, []
        for c, ident in waiters:
            self._send_object(c, ident, oid, o)
        deps, o.on_ready = o.on_ready, None
        for t in deps or ():
            t.deps -= 1
            if t.deps == 0 and not t.cancelled:
                if t.kind == "task":
                    self._enqueue(t)
                else:
                    self._actor_pump(t.actor)
        if self.cond._waiters:
            self.cond.notify_all()
        self._maybe_free(oid, o)

    def _fail_task(self, t, err):
        if t.kind == "task":
            self._release_args(t)
        for oid in t.returns:
            o = self.objs.get(oid)
            if o is None:
                continue
            o.error = err
            o.state = FAILED
            self._ready(oid, o)

    def _worker_died(self, w):
        """A leased worker's connection closed: why (from the head), then
        retries or failures of what it ran."""
        why = ""
        job = w.job
        if job:
            try:
                st = self.head_call("status", job, 2000)
                ws = st["workers"][0] if st["workers"] else {}
                if ws.get("signal"):
                    why = "killed by signal %d" % ws["signal"]
                elif ws.get("state") in ("EXITED", "FAILED"):
                    why = "exit code %d" % ws.get("exit_code", 0)
                if ws.get("reason"):
                    why += (": " if why else "") + ws["reason"]
                if st["state"] not in ("SUCCEEDED", "FAILED", "STOPPED"):
                    self.head_call("stop", job, 0)
            except Exception:
                pass
        desc = "the worker (pid %s on node %s, lease job %s) died%s" % (
            w.pid, w.node, job or "?", ": " + why if why else "")
        d = self.actor_dirs.pop(w.lease, None)
        if d and w.node == self.node:
            # an actor killed -9 leaves its socket directory (the path its
            # owner chose, under this node's temporary directory)
            shutil.rmtree(d, ignore_errors=True)
        with self.lock:
            self.workers.pop(w.lease, None)
            self.leases.pop(w.lease, None)
            target = w.shape
            inflight, w.inflight = list(w.inflight.values()), {}
            if isinstance(target, _Actor):
                self._actor_lost(target, desc, inflight)
                return
            if w in target.pool:
                target.pool.remove(w)
            for t in inflight:
                if t.cancelled:
                    self._fail_task(t, E.TaskCancelledError("task %s (%s) was cancelled" % (t.tid, t.fname)))
                elif t.retries_left > 0:
                    t.retries_left -= 1
                    target.queue.appendleft(t)
                else:
                    self._fail_task(t, E.WorkerCrashedError(
                        "%s ran %s; %s, and no retries were left (max_retries=%s)" % (
                            t.fname, t.tid, desc, t.opts.get("max_retries", 3))))
            self._drain(target)
            if target.queue:
                self._maybe_lease(target)

    def _reap_idle(self, now):
        drop = []
        with self.lock:
            for shape in self.shapes.values():
                if shape.queue:
                    continue
                for w in list(shape.pool):
                    if w.idle_since is not None and now - w.idle_since > IDLE_TIMEOUT:
                        shape.pool.remove(w)
                        self.workers.pop(w.lease, None)
                        self.leases.pop(w.lease, None)
                        w.conn.data = None
                        drop.append(w)
        for w in drop:
            try:
                w.conn.send(W.BYE, 0)
            except (OSError, ConnectionError):
                pass
            if w.job:
                threading.Thread(target=self._stop_job, args=(w.job,), daemon=True).start()

    def _stop_job(self, job):
        try:
            self.head_call("stop", job, 2000)
        except Exception:
            pass

    def cancel(self, ref, force=False):
        with self.lock:
            o = self.objs.get(ref.id)
            t = o.task if o is not None else None
            if t is None:
                return False
            t.cancelled = True
            if t.worker is None or t not in t.worker.inflight.values():
                if t.kind == "task" and t in t.shape.queue:
                    t.shape.queue.remove(t)
                self._fail_task(t, E.TaskCancelledError("task %s (%s) was cancelled" % (t.tid, t.fname)))
                return True
            w = t.worker
            ident = next(i for i, x in w.inflight.items() if x is t)
        if force and t.kind == "task":
            try:
                self.head_call("stop", w.job, 0)
            except Exception:
                pass
        else:
            try:
                w.conn.send(W.CANCEL, 0, [struct.pack(">Q", ident)])
            except (OSError, ConnectionError):
                pass
        return True

    # ---- owner: actors ----
    def create_actor(self, cls_name, cls_bytes, args, kwargs, opts, spec):
        aid = self.new_id("A")
        a = _Actor(aid, cls_name, cls_bytes, None, None, opts, spec)
        spare = SPARE_ACTORS > 0 and not a.name and spec == SPARE_SPEC
        with self.lock:
            fake = _Task()
            fake.kind = "create"
            fake.returns = []
            a.args, a.kwargs = self._bind_args(fake, args, kwargs)
            a.create_deps = fake
            self.actors[aid] = a
            w = self.spares.pool.pop() if spare and self.spares.pool else None
            if w is not None:
                # a started worker takes the actor at once (Ray's prestarted
                # workers): the constructor goes now, no lease to wait for
                w.shape = a
                self.leases[w.lease] = a
                a.lease_jobs = {w.lease: w.job}
                a.lease_job = w.job
                a.worker = w
                self._actor_connected(a)
            if spare:
                self._refill_spares()
        if w is None:
            threading.Thread(target=self._lease, args=(a, spec, self._job_name(a)), daemon=True).start()
        return aid

    def _refill_spares(self):
        """Under the lock: leases workers for actors of the default shape
        (unnamed, no resources asked) until SPARE_ACTORS wait ready."""
        sp = self.spares
        for _ in range(SPARE_ACTORS - len(sp.pool) - sp.leasing):
            sp.leasing += 1
            threading.Thread(target=self._lease, args=(sp, SPARE_SPEC, "actor:(spare)"), daemon=True).start()

    def _job_name(self, a):
        """The lease job's name: a named actor's is actor:<namespace>/<name>,
        the key find_named_actor looks for among the head's jobs."""
        if a.name:
            return "actor:%s/%s" % (a.opts.get("namespace") or self.namespace, a.name)
        return "actor:%s" % a.cls_name

    def find_named_actor(self, name, namespace):
        """(actor id, class, owner, job, None) of the live actor of that name
        in that namespace, or None: this process's own first, then the
        head's jobs named actor:<namespace>/<name>."""
        with self.lock:
            for a in self.actors.values():
                if a.name == name and (a.opts.get("namespace") or self.namespace) == namespace \
                        and a.state != "DEAD":
                    return (a.aid, a.cls_name, self.me, a.lease_job, None)
        want = "actor:%s/%s" % (namespace, name)
        for jid, jname in self.head_call("jobs"):
            if jname != want:
                continue
            st = self.head_call("status", jid)
            if st["state"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                continue
            words = (st.get("command") or "").split(" ")
            try:
                i = len(words) - 8
                assert words[i] == "--actor" and words[i + 2] == "--class"
                assert words[i + 4] == "--owner" and words[i + 6] == "--listen"
                aid, cls, owner, listen = words[i + 1], words[i + 3], words[i + 5], words[i + 7]
            except (AssertionError, IndexError):
                continue
            node = st["workers"][0]["node"] if st["workers"] else None
            self.attach_actor(aid, {"owner": owner, "class": cls, "direct": "unix:%s/s" % listen,
                                    "direct_node": node, "job": jid})
            return (aid, cls, owner, jid, None)
        return None

    def _actor_connected(self, a):
        """Under the lock: its worker said HELLO: construct, then its calls."""
        a.state = "STARTING"
        ident = next(self.ids)
        t = _Task()
        t.kind = "create"
        t.actor = a
        t.returns = []
        t.fname = a.cls_name
        a.worker.inflight[ident] = t
        fds = []
        args = [self._resolve(x, a.worker, fds) for x in a.args]
        kwargs = {k: self._resolve(v, a.worker, fds) for k, v in a.kwargs.items()}
        call = ("create", a.aid, a.cls_bytes, a.cls_name, args, kwargs,
                {"max_concurrency": a.opts.get("max_concurrency"), "name": a.name})
        try:
            a.worker.conn.send(W.CALL, ident, W.encode(call), fds=fds or None)
        except (OSError, ConnectionError):
            pass

    def _call_done(self, t, status, v):
        a = t.actor
        if t.kind == "create":
            if status == W.OK:
                a.state = "ALIVE"
                self.cond.notify_all()
            else:
                err = _task_error(a.cls_name + ".__init__", v) if status == W.APP_ERROR else v
                self._actor_dead(a, "its constructor failed: %s" % err)
                if a.worker and a.worker.job:
                    threading.Thread(target=self._stop_job, args=(a.worker.job,), daemon=True).start()
            return
        if status == W.OK:
            for oid, val in zip(t.returns, v):
                self._set_value(oid, val)
        elif status == W.APP_ERROR:
            self._fail_task(t, _task_error(t.fname, v))
        else:
            self._fail_task(t, E.CorralError("%s: %s" % (t.fname, v)))

    def call_actor(self, aid, method, args, kwargs, num_returns, opts):
        a = self.actors.get(aid)
        if a is None:
            return self._call_remote_actor(aid, method, args, kwargs, num_returns)
        t = _Task()
        t.kind = "method"
        t.actor = a
        t.tid = tid = "%sc%x" % (self.prefix, next(self.ids))  # new_id("c")
        t.fname = "%s.%s" % (a.cls_name, method)
        t.opts = {"method": method}
        mtr = a.opts.get("max_task_retries", 0)
        t.retries_left = float("inf") if mtr == -1 else mtr
        with self.lock:
            if num_returns == 1:
                t.returns = [tid]
                o = self.objs[tid] = _Obj(t)
                o.local = 1
                refs = [ObjectRef(tid, self.me)]
            else:
                t.returns = [tid + "r%d" % i for i in range(num_returns)]
                refs = []
                for oid in t.returns:
                    o = self.objs[oid] = _Obj(t)
                    o.local = 1
                    refs.append(ObjectRef(oid, self.me))
            if args or kwargs:
                t.args, t.kwargs = self._bind_args(t, args, kwargs)
            else:
                t.args, t.kwargs = [], {}
            if a.state == "DEAD":
                self._fail_task(t, E.ActorDiedError(a.error))
            else:
                a.queue.append(t)
                self._actor_pump(a)
        return refs[0] if num_returns == 1 else refs

    def _actor_pump(self, a):
        """Under the lock: sends the actor's queued calls in order; a call
        waiting on an argument holds back the ones after it (per-caller
        order)."""
        if a.state not in ("ALIVE", "STARTING") or a.worker is None:
            return
        while a.queue:
            t = a.queue[0]
            if t.cancelled:
                a.queue.popleft()
                continue
            if t.deps:
                break
            a.queue.popleft()
            ident = next(self.ids)
            t.worker = a.worker
            t.attempts += 1
            idle = not a.worker.inflight
            a.worker.inflight[ident] = t
            fds = []
            if t.args or t.kwargs:
                args = [self._resolve(x, a.worker, fds) for x in t.args]
                kwargs = {k: self._resolve(v, a.worker, fds) for k, v in t.kwargs.items()}
                enc = W.encode
            else:
                args, kwargs = t.args, t.kwargs
                enc = W.encode_plain  # a method's name, counts and ids
            call = ("method", t.opts["method"], args, kwargs, len(t.returns), t.tid)
            try:
                if fds:
                    a.worker.conn.send(W.CALL, ident, enc(call), fds=fds)
                else:
                    self._post(a.worker.conn, W.CALL, ident, enc(call), idle=idle)
            except (OSError, ConnectionError):
                pass

    def _actor_lost(self, a, desc, inflight):
        """Under the lock: the actor's process is gone."""
        a.worker = None
        if a.killed:
            for t in inflight:
                if t.kind == "method":
                    self._fail_task(t, E.ActorDiedError("%s: actor %s (%s) was killed (corral.kill) while "
                                                        "this call ran" % (t.fname, a.aid, a.cls_name)))
            if a.state != "DEAD":
                self._actor_dead(a, "it was killed (corral.kill)")
            return
        mr = a.opts.get("max_restarts", 0)
        if a.state != "DEAD" and (mr == -1 or a.restarts < mr):
            a.restarts += 1
            a.state = "RESTARTING"
            retry = []
            for t in inflight:
                if t.kind != "method":
                    continue
                if t.retries_left > 0:
                    t.retries_left -= 1
                    retry.append(t)
                else:
                    self._fail_task(t, E.ActorUnavailableError(
                        "%s: actor %s (%s) %s while this call ran; it is restarting (restart %d of %s) "
                        "and max_task_retries=%s does not allow the call again" % (
                            t.fname, a.aid, a.cls_name, desc, a.restarts,
                            "unlimited" if mr == -1 else mr, a.opts.get("max_task_retries", 0))))
            a.queue.extendleft(reversed(retry))
            threading.Thread(target=self._lease, args=(a, a.spec, self._job_name(a)), daemon=True).start()
            return
        for t in inflight:
            if t.kind == "method":
                self._fail_task(t, E.ActorDiedError("%s: actor %s (%s) %s; no restarts left (max_restarts=%s)" % (
                    t.fname, a.aid, a.cls_name, desc, mr)))
        self._actor_dead(a, "%s; no restarts left (max_restarts=%s, %d done)" % (desc, mr, a.restarts))

    def _actor_dead(self, a, why, unschedulable=False):
        a.state = "DEAD"
        a.error = "actor %s (%s) is dead: %s" % (a.aid, a.cls_name, why)
        cls = E.TaskUnschedulableError if unschedulable else E.ActorDiedError
        while a.queue:
            self._fail_task(a.queue.popleft(), cls(a.error))
        self.cond.notify_all()

    def kill_actor(self, aid, no_restart=True):
        with self.lock:
            a = self.actors.get(aid)
            if a is None:
                info = self.remote_actors.get(aid)
            else:
                a.killed = a.killed or no_restart
                job = a.lease_job
                w = a.worker
        if a is None:
            if info is None:
                raise ValueError("no actor %s known here" % aid)
            c = self.connect(info["owner"].split("|", 2)[2], info["owner"].split("|", 1)[0])
            c.send(W.KILL, 0, [json.dumps({"actor": aid, "no_restart": no_restart}).encode()])
            return
        if (w is None or no_restart) and a.state != "DEAD":
            # calls made from now on fail at once (as Ray's kill); those in
            # flight fail when the process is gone
            with self.lock:
                self._actor_dead(a, "it was killed (corral.kill)")
        if job:
            try:
                self.head_call("stop", job, 0)
                # returns once the head has the lease ended (bounded), so
                # that get_actor(name) after kill() no longer finds it
                self.head_call("status", job, 10000)
            except Exception:
                pass

    def actor_state(self, aid):
        a = self.actors.get(aid)
        return None if a is None else a.state

    # ---- callers of actors they do not own ----
    def attach_actor(self, aid, info):
        with self.lock:
            if aid not in self.actors:
                self.remote_actors.setdefault(aid, dict(info))

    def _call_remote_actor(self, aid, method, args, kwargs, num_returns):
        info = self.remote_actors.get(aid)
        if info is None:
            raise ValueError("no actor %s known in this process" % aid)
        tid = self.new_id("c")
        returns = [tid] if num_returns == 1 else [tid + "r%d" % i for i in range(num_returns)]
        refs = []
        with self.lock:
            t = _Task()
            t.kind = "rmethod"
            t.tid = tid
            t.fname = "%s.%s" % (info.get("class", "actor"), method)
            t.returns = returns
            for oid in returns:
                o = self.objs[oid] = _Obj(t)
                o.local = 1
                refs.append(ObjectRef(oid, self.me))
            t.args, t.kwargs = self._bind_args(t, args, kwargs)
        # arguments owned here must be ready: a remote actor gets them by value
        for a in list(t.args) + list(t.kwargs.values()):
            if isinstance(a, _Arg):
                self.wait_ready([a.oid], None)
        try:
            addr = self._actor_address(aid, info)
            c = self.connect(addr, info.get("node"))
        except Exception as e:
            with self.lock:
                self._fail_task(t, E.ActorDiedError("%s: cannot reach actor %s at %s: %s" % (
                    t.fname, aid, info.get("address"), e)))
            return refs[0] if num_returns == 1 else refs
        ident = next(self.ids)

        def done(payload, fds, err):
            with self.lock:
                if err is not None:
                    info.pop("resolved", None)
                    self._fail_task(t, E.ActorDiedError("%s: the connection to actor %s was lost while "
                                                        "the call ran (it died or is restarting)" % (t.fname, aid)))
                    return
                status = payload[0]
                try:
                    v = _decode(payload[1:], fds) if status != W.SYS_ERROR else bytes(payload[1:]).decode()
                except Exception as e:
                    status, v = W.SYS_ERROR, str(e)
                self._release_args(t)
                if status == W.OK:
                    for oid, val in zip(t.returns, v):
                        self._set_value(oid, val)
                elif status == W.APP_ERROR:
                    self._fail_task(t, _task_error(t.fname, v))
                else:
                    self._fail_task(t, E.CorralError("%s: %s" % (t.fname, v)))
        with self.lock:
            self.calls[(id(c), ident)] = done
            fds = []
            fake = _Worker("", None, c, None, {})
            a2 = [self._resolve(x, fake, fds) for x in t.args]
            k2 = {k: self._resolve(v, fake, fds) for k, v in t.kwargs.items()}
        try:
            c.send(W.CALL, ident, W.encode(("method", method, a2, k2, num_returns, tid)), fds=fds or None)
        except (OSError, ConnectionError) as e:
            cb = self.calls.pop((id(c), ident), None)
            if cb:
                cb(None, [], e)
        return refs[0] if num_returns == 1 else refs

    def _actor_address(self, aid, info):
        if info.get("resolved"):
            return info["resolved"]
        # ask the owner where the actor is now (it answers once it is alive)
        owner = info["owner"]
        node, _, addr = owner.split("|", 2)
        if owner == self.me:
            raise ValueError("actor %s is not owned here" % aid)
        try:
            payload = self._fetch(owner, "actor:" + aid, None)
        except Exception as e:
            # a detached (or named) actor outlives its owner: its own socket,
            # when its job said where and it is ours and on this node
            direct = info.get("direct")
            if not direct or info.get("direct_node") not in (None, self.node) or \
                    not _own_dir(direct[5:-2]):
                raise
            info["resolved"], info["node"] = direct, self.node
            return direct
        res = json.loads(bytes(payload[1:]))
        if "error" in res:
            raise E.ActorDiedError(res["error"])
        info["resolved"] = res["address"]
        info["node"] = res["node"]
        return res["address"]

    # ---- objects ----
    def put(self, value, owner_hint=None):
        blob = W.Blob.of(value)
        oid = self.new_id("p")
        shm = None
        if blob.nbytes() > INLINE_MAX:
            n = blob.nbytes()
            deadline = time.monotonic() + PUT_TIMEOUT
            with self.lock:
                while self.store_bytes + n > STORE_BYTES:
                    if n > STORE_BYTES:
                        raise E.ObjectStoreFullError(
                            "corral.put of %d bytes: larger than this process's object store (%d bytes, "
                            "CORRAL_OBJECT_STORE_BYTES)" % (n, STORE_BYTES))
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise E.ObjectStoreFullError(
                            "corral.put of %d bytes: the object store holds %d of %d bytes and no room came "
                            "within %.0f s (CORRAL_PUT_TIMEOUT); drop refs you no longer need or raise "
                            "CORRAL_OBJECT_STORE_BYTES" % (n, self.store_bytes, STORE_BYTES, PUT_TIMEOUT))
                    self.cond.wait(min(left, 0.5))
                self.store_bytes += n
            try:
                shm = W.Shm.create(blob, seal=False, pool=self.shm_pool)
            except BaseException:
                with self.lock:
                    self.store_bytes -= n
                raise
            with self.lock:
                self.store_bytes += shm.size - n
        with self.lock:
            o = self.objs[oid] = _Obj()
            o.local = 1
            if shm is not None:
                o.shm = shm
                o.nbytes = shm.size
            else:
                o.blob = blob
                o.nbytes = blob.nbytes()
            o.state = READY
        return ObjectRef(oid, self.me)

    def future(self):
        """A ref this process owns and fills later: (ref, set(value),
        fail(exception)), as placement groups' ready() need."""
        oid = self.new_id("f")
        t = _Task()
        t.kind = "future"
        t.returns = [oid]
        with self.lock:
            o = self.objs[oid] = _Obj(t)
            o.local = 1
        ref = ObjectRef(oid, self.me)

        def set_value(v):
            with self.lock:
                self._set_value(oid, W.Blob.of(v))

        def fail(err):
            with self.lock:
                self._fail_task(t, err)
        return ref, set_value, fail

    def ref_inc(self, oid, owner, borrowed_from_wire=False):
        with self.lock:
            if owner == self.me:
                o = self.objs.get(oid)
                if o is not None:
                    o.local += 1
                    if borrowed_from_wire and o.pending_borrows > 0:
                        pass
                return ObjectRef(oid, owner)
            b = self.borrowed.get(oid)
            first = b is None
            if first:
                b = self.borrowed[oid] = _Borrow(owner)
            b.local += 1
        if first:
            try:
                c = self.connect(owner.split("|", 2)[2], owner.split("|", 1)[0])
                c.send(W.REF_ADD, 0, [oid.encode()])
            except Exception:
                pass
        return ObjectRef(oid, owner)

    def pin_for_borrow(self, oid):
        with self.lock:
            o = self.objs.get(oid)
            if o is not None:
                o.pending_borrows += 1

    def _borrower(self, oid, delta):
        with self.lock:
            o = self.objs.get(oid)
            if o is None:
                return
            if delta > 0:
                o.borrowers += 1
                if o.pending_borrows > 0:
                    o.pending_borrows -= 1
            else:
                o.borrowers -= 1
                self._maybe_free(oid, o)

    def ref_dec(self, oid, owner):
        with self.lock:
            if owner == self.me:
                o = self.objs.get(oid)
                if o is not None:
                    o.local -= 1
                    self._maybe_free(oid, o)
                return
            b = self.borrowed.get(oid)
            if b is None:
                return
            b.local -= 1
            if b.local > 0:
                return
            del self.borrowed[oid]
            if b.shm is not None:
                b.shm.close()
        try:
            c = self.peers.get(owner.split("|", 2)[2])
            if c is not None and not c.closed:
                c.send(W.REF_DEL, 0, [oid.encode()])
        except Exception:
            pass

    def _maybe_free(self, oid, o):
        if o.local <= 0 and o.borrowers <= 0 and o.pending_borrows <= 0 and o.state != PENDING:
            del self.objs[oid]
            if o.shm is not None:
                self.store_bytes -= o.shm.size
                o.shm.close(self.shm_pool)
                o.shm = None
                self.cond.notify_all()
            o.blob = None

    def stats(self):
        with self.lock:
            return {"objects": len(self.objs), "bytes": sum(o.nbytes for o in self.objs.values()),
                    "store_bytes": self.store_bytes, "borrowed": len(self.borrowed),
                    # freed memfds kept for the next put, and those of them
                    # with a writable mapping kept (W.ShmPool)
                    "pool_bytes": self.shm_pool.bytes, "pool_mapped_bytes": self.shm_pool.mapped_bytes(),
                    "workers": sum(len(s.pool) for s in self.shapes.values()),
                    "actors": sum(1 for a in self.actors.values() if a.state != "DEAD")}

    INFO_MAX = 10000  # rows in one INFO answer (corral list --limit)

    def _serve_info(self, c, ident, payload):
        """INFO (corral list): this owner's tasks not yet finished, its actors
        or its objects, at most "limit" rows, with the total; RETURN status 0
        with a JSON object, status 2 with why on a bad request."""
        try:
            req = json.loads(bytes(payload))
            what = req["what"]
            limit = int(req.get("limit", 1000))
            assert what in ("tasks", "actors", "objects") and 0 < limit <= self.INFO_MAX
        except Exception:
            c.send(W.RETURN, ident, [bytes([W.SYS_ERROR]), b'INFO wants {"what": "tasks"|"actors"|"objects", '
                                     b'"limit": 1..10000}'])
            return
        rows = []
        total = 0
        with self.lock:
            if what == "objects":
                for oid, o in self.objs.items():
                    total += 1
                    if len(rows) < limit:
                        rows.append({"id": oid, "state": ("PENDING", "READY", "FAILED")[o.state],
                                     "size": o.nbytes, "where": "shm" if o.shm is not None else "inline",
                                     "refs": o.local, "borrowers": o.borrowers,
                                     "task": o.task.fname if o.task is not None else ""})
            elif what == "actors":
                for a in self.actors.values():
                    total += 1
                    w = a.worker
                    if len(rows) < limit:
                        rows.append({"id": a.aid, "class": a.cls_name, "state": a.state, "name": a.name or "",
                                     "node": w.node if w else "", "pid": w.pid if w else 0,
                                     "job": a.lease_job or "", "restarts": a.restarts})
            else:
                seen = set()
                for o in self.objs.values():
                    t = o.task
                    if t is None or id(t) in seen:
                        continue
                    seen.add(id(t))
                    total += 1
                    if len(rows) >= limit:
                        continue
                    w = t.worker
                    running = w is not None and any(x is t for x in w.inflight.values())
                    state = ("CANCELLED" if t.cancelled else "RUNNING" if running else
                             "PENDING_ARGS_AVAIL" if t.deps else "PENDING_NODE_ASSIGNMENT")
                    rows.append({"id": t.tid, "function": t.fname, "kind": t.kind, "state": state,
                                 "node": w.node if running else "", "pid": w.pid if running else 0,
                                 "job": (w.job or "") if running else "", "attempt": t.attempts})
        out = {"owner": {"pid": self.pid, "node": self.node, "job": self.job_id}, "what": what,
               "total": total, "items": rows}
        c.send(W.RETURN, ident, [bytes([W.OK]), json.dumps(out).encode()])

    def _serve_get(self, c, ident, oid):
        if oid.startswith("actor:"):
            self._serve_actor_address(c, ident, oid[6:])
            return
        with self.lock:
            o = self.objs.get(oid)
            if o is None:
                c.send(W.OBJECT, ident, [bytes([W.SYS_ERROR]), ("object %s: its owner (pid %d on node %s) no longer "
                                                               "has it" % (oid, self.pid, self.node)).encode()])
                return
            if o.state == PENDING:
                o.waiters.append((c, ident))
                return
            self._send_object(c, ident, oid, o)

    def _serve_actor_address(self, c, ident, aid):
        with self.lock:
            a = self.actors.get(aid)
            if a is None:
                res = {"error": "actor %s is not owned by pid %d" % (aid, self.pid)}
            elif a.state == "DEAD":
                res = {"error": a.error}
            elif a.state == "ALIVE" and a.worker is not None:
                res = {"address": a.worker.address, "node": a.worker.node}
            else:
                if not hasattr(a, "addr_waiters"):
                    a.addr_waiters = []
                a.addr_waiters.append((c, ident))
                threading.Thread(target=self._answer_address_later, args=(a,), daemon=True).start()
                return
        c.send(W.OBJECT, ident, [bytes([W.OK]), json.dumps(res).encode()])

    def _answer_address_later(self, a):
        with self.lock:
            while a.state not in ("ALIVE", "DEAD") and not self.closed:
                self.cond.wait(1.0)
            waiters, a.addr_waiters = getattr(a, "addr_waiters", []), []
            res = {"error": a.error} if a.state == "DEAD" else {"address": a.worker.address, "node": a.worker.node}
        for c, ident in waiters:
            try:
                c.send(W.OBJECT, ident, [bytes([W.OK]), json.dumps(res).encode()])
            except (OSError, ConnectionError):
                pass

    def _send_object(self, c, ident, oid, o):
        try:
            if o.state == FAILED:
                c.send(W.OBJECT, ident, [bytes([W.APP_ERROR])] + W.encode(o.error))
            elif o.shm is not None and c.unix:
                o.shm.seal()
                c.send(W.OBJECT, ident, [bytes([W.OK])] + W.encode(_ShmArg(0)), fds=[o.shm.fd])
            else:
                blob = o.blob if o.shm is None else o.shm.blob()
                c.send(W.OBJECT, ident, [bytes([W.OK])] + W.encode(blob))
        except (OSError, ConnectionError):
            pass

    def _fetch(self, owner, oid, timeout):
        """A GET to the owner; returns the OBJECT payload (and takes fds)."""
        node, pid, addr = owner.split("|", 2)
        try:
            c = self.connect(addr, node)
        except OSError as e:
            raise E.OwnerDiedError("the owner of %s (pid %s on node %s, %s) is gone: %s" % (
                oid, pid, node, addr, e.strerror or e))
        ident = next(self.ids)
        box = {}
        ev = threading.Event()

        def done(payload, fds, err):
            box["r"] = (payload, fds, err)
            ev.set()
        with self.lock:
            self.calls[(id(c), ident)] = done
        try:
            c.send(W.GET, ident, [oid.encode()])
        except (OSError, ConnectionError):
            pass
        if not ev.wait(timeout):
            with self.lock:
                self.calls.pop((id(c), ident), None)
            raise E.GetTimeoutError("corral.get: %s was not ready within %s s" % (oid, timeout))
        payload, fds, err = box["r"]
        if err is not None:
            raise E.OwnerDiedError("the owner of %s (pid %s on node %s) died while it was fetched" % (oid, pid, node))
        self._pending_fds = fds
        return payload

    def wait_ready(self, oids, timeout, num=None):
        """Waits until num (default all) of oids owned here are final;
        returns the set that is."""
        num = len(oids) if num is None else num
        deadline = None if timeout is None else time.monotonic() + timeout
        self.flush_dirty()
        with self.lock:
            while True:
                done = {x for x in oids if x not in self.objs or self.objs[x].state != PENDING}
                if len(done) >= num:
                    return done
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return done
                self.cond.wait(left)

    def get(self, ref, timeout=None):
        if ref.owner == self.me:
            deadline = None if timeout is None else time.monotonic() + timeout
            if self.dirty:
                self.flush_dirty()
            o = self.objs.get(ref.id)
            if o is not None and o.state == PENDING:
                t = o.task
                w = t.worker if t is not None else None
                if w is not None and w.conn is not None:
                    self.read_direct(w.conn, lambda: o.state != PENDING, deadline)
            if o is not None and o.state == READY:
                # set before READY (_set_value), kept while this ref lives
                blob, shm = o.blob, o.shm
                if shm is not None or blob is not None:
                    return (shm.blob() if shm is not None else blob).value()
            with self.lock:
                o = self.objs.get(ref.id)
                while o is not None and o.state == PENDING:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise E.GetTimeoutError("corral.get: %s was not ready within %s s" % (ref.id, timeout))
                    self.cond.wait(left)
                if o is None:
                    raise E.ObjectLostError("%s: this object was freed" % ref.id)
                if o.state == FAILED:
                    raise o.error
                blob = o.blob
                shm = o.shm
            return (shm.blob() if shm is not None else blob).value()
        return self._get_borrowed(ref, timeout)

    def _get_borrowed(self, ref, timeout):
        with self.lock:
            b = self.borrowed.get(ref.id)
            if b is not None and b.state != PENDING:
                if b.state == FAILED:
                    raise b.error
                return (b.shm.blob() if b.shm is not None else b.blob).value()
        payload = self._fetch(ref.owner, ref.id, timeout)
        fds = self._pending_fds
        status = payload[0]
        if status == W.SYS_ERROR:
            for fd in fds:
                os.close(fd)
            raise E.ObjectLostError(bytes(payload[1:]).decode())
        v = _decode(payload[1:], fds)
        if status == W.APP_ERROR:
            with self.lock:
                if b is not None:
                    b.state, b.error = FAILED, v
            raise v
        with self.lock:
            b = self.borrowed.get(ref.id)
            if isinstance(v, _ShmValue):
                if b is not None:
                    b.shm, b.state = v.shm, READY
                return v.shm.blob().value()
            if b is not None:
                b.blob, b.state = v, READY
        return v.value()

    # ---- end ----
    def shutdown(self):
        if self.closed:
            return
        with self.lock:
            jobs = [a.lease_job for a in self.actors.values() if a.lease_job and not a.opts.get("detached")]
            for s in list(self.shapes.values()) + [self.spares]:
                for w in s.pool:
                    if w.job:
                        jobs.append(w.job)
        self.closed = True
        self._wake()
        for c in list(self.peers.values()):
            c.close()
        with self.head_lock:  # a lease thread may be in a head call
            if self.head is not None:
                for j in jobs:
                    try:
                        self.head.stop(j, 1000)
                    except Exception:
                        pass
                try:
                    self.head.close()
                except Exception:
                    pass
                self.head = None
        for s in (self.usock, self.tsock):
            try:
                s.close()
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.shm_pool.clear()


class _Arg:
    """In a task's arguments: a ref this process owns, sent by value."""

    __slots__ = ("oid",)

    def __init__(self, oid):
        self.oid = oid


W.register_plain(ObjectRef)
W.register_plain(_ShmArg)
W.register_plain(_Arg)


class _ErrArg:
    """An argument whose task failed: the task that gets it fails with it."""

    def __init__(self, error):
        self.error = error


def _own_dir(path):
    """True when path is a real directory of this user that only it can
    reach (a socket found through a job's argv is trusted no further)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not (st.st_mode & 0o077)


def _read_frame(s):
    head = _recv_exact(s, W.HDR_LEN)
    ln, kind, flags, _, ident = W.HDR.unpack(head)
    if ln < 12 or ln > HELLO_MAX + 12:
        raise ConnectionError("a handshake frame of length %d" % ln)
    return kind, ident, _recv_exact(s, ln - 12)


def _recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            raise ConnectionError("the peer closed the connection during the handshake")
        buf += d
    return bytes(buf)


def _shape_key(spec):
    return tuple(sorted((k, str(v)) for k, v in spec.items()))


def _parse_res(s):
    out = {}
    for part in s.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            mult = 1
            for suf, m in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("Ti", 1 << 40)):
                if v.endswith(suf):
                    v, mult = v[:-2], m
            try:
                out[k.strip()] = float(v) * mult
            except ValueError:
                pass
    return out


def _retryable(spec, info):
    if spec is True:
        return True
    if not spec:
        return False
    exc = info.get("exception") if isinstance(info, dict) else None
    return exc is not None and isinstance(exc, tuple(spec))


def _head_error(code, msg):
    try:
        from . import _head
        return _head.error_type()(code, msg)
    except Exception:
        return RuntimeError(code, msg)


def _task_error(fname, info):
    if not isinstance(info, dict):
        return E.CorralError("%s: %s" % (fname, info))
    err = E.TaskError(fname, info.get("type", "Exception"), info.get("message", ""),
                      info.get("traceback", ""), info.get("exception"))
    return E.as_instance_of_cause(err)


def init(address=None, namespace=None):
    global _core
    with _core_lock:
        if _core is None:
            c = Core(address, namespace)
            if not c.is_worker:
                # the head is reached at once: a wrong address fails here
                try:
                    c.head_call("cluster")
                except Exception as e:
                    # a driver run as a job (corral run, corral job
                    # submit) holds its job credential, which may submit
                    # its tasks' leases but not read the cluster: refused
                    # means reached
                    if not (e.args and e.args[0] == -13 and os.environ.get("CORRAL_JOB_TOKEN")):
                        c.shutdown()
                        raise
            _core = c
            atexit.register(_atexit)
        return _core


def _atexit():
    c = _core
    if c is not None:
        c.shutdown()


def shutdown():
    global _core
    with _core_lock:
        c, _core = _core, None
    if c is not None:
        c.shutdown()
