"""The task protocol of docs/actors.md ("Wire"), as the Python runtime speaks it.

A frame: 4-byte big-endian length of the rest, kind, flags, two zero
bytes, an 8-byte big-endian id, then the payload. Python payloads are
"multipart": a 4-byte count n, n 8-byte lengths, then the parts; part 0 is
a pickle (protocol 5) and the others are its out-of-band buffers, so
numpy arrays and CPU tensors are never copied into the pickle stream.
Objects too large to travel inline live in a memfd (see ``Shm``) whose
descriptor goes with the frame (SCM_RIGHTS) on a Unix socket.
"""

import array
import io
import mmap
import os
import pickle
import socket
import struct
import threading

try:
    import cloudpickle
except ImportError:  # pragma: no cover - deps.sh installs python3-cloudpickle
    cloudpickle = None

HDR = struct.Struct(">IBBHQ")
HDR_LEN = 16
MAX_FRAME = int(os.environ.get("CORRAL_TASK_MAX_FRAME", 64 << 20))
MAX_FDS = 16
FLUSH_BYTES = 256 * 1024  # post() sends at once past this many queued bytes
IOV_MAX = 512             # buffers in one sendmsg (the kernel takes 1024)

HELLO, WELCOME, CALL, RETURN, CANCEL, CHALLENGE, BYE = 1, 2, 3, 4, 5, 6, 7
INFO = 8  # corral list: an owner's tasks, actors or objects (docs/actors.md)
# the Python runtime's own kinds (16 and up: docs/actors.md)
GET, OBJECT, REF_ADD, REF_DEL, KILL, HEADCALL = 16, 17, 18, 19, 20, 21
FLAG_FDS = 1

OK, APP_ERROR, SYS_ERROR = 0, 1, 2

KIND_NAMES = {HELLO: "HELLO", WELCOME: "WELCOME", CALL: "CALL", RETURN: "RETURN",
              CANCEL: "CANCEL", CHALLENGE: "CHALLENGE", BYE: "BYE", GET: "GET",
              OBJECT: "OBJECT", REF_ADD: "REF_ADD", REF_DEL: "REF_DEL", KILL: "KILL",
              HEADCALL: "HEADCALL", INFO: "INFO"}


class ProtocolError(Exception):
    """A peer sent something the protocol does not allow."""


def multipart(parts):
    """parts (bytes-like) -> a list of buffers to send: the table, then the parts."""
    head = struct.pack(">I%dQ" % len(parts), len(parts), *[memoryview(p).nbytes for p in parts])
    return [head] + list(parts)


_LEN1 = struct.Struct(">Q")


def split(payload):
    """A multipart payload (memoryview) -> its parts as memoryviews, checked."""
    mv = memoryview(payload)
    if mv.nbytes < 4:
        raise ProtocolError("multipart payload shorter than its count")
    (n,) = struct.unpack_from(">I", mv, 0)
    if n == 1 and mv.nbytes >= 12:
        (ln,) = _LEN1.unpack_from(mv, 4)
        if 12 + ln != mv.nbytes:
            raise ProtocolError("multipart payload: one part of %d bytes in %d" % (ln, mv.nbytes - 12))
        return [mv[12:]]
    if n > 1 << 16 or 4 + 8 * n > mv.nbytes:
        raise ProtocolError("multipart payload: %d parts do not fit in %d bytes" % (n, mv.nbytes))
    lens = struct.unpack_from(">%dQ" % n, mv, 4)
    off = 4 + 8 * n
    out = []
    for ln in lens:
        if off + ln > mv.nbytes:
            raise ProtocolError("multipart payload: a part runs past the end")
        out.append(mv[off:off + ln])
        off += ln
    if off != mv.nbytes:
        raise ProtocolError("multipart payload: %d bytes after the last part" % (mv.nbytes - off))
    return out


# Types the C pickler writes as they are, and corral's own classes (found by
# their module's name in every process): a value made only of these needs
# no cloudpickle, whose Python-level reducer runs for every object and costs
# more than the whole of a small task's call. Anything else (functions,
# classes and instances from __main__, numpy arrays) goes by cloudpickle.
_PLAIN = {type(None), bool, int, float, str, bytes}
_SCALAR = frozenset(_PLAIN)  # the built-in ones only (Blob.of)
_PLAIN_MAX = 64  # a longer container is not scanned: cloudpickle takes it


def register_plain(cls):
    """cls pickles by reference in every process (a corral class)."""
    _PLAIN.add(cls)


def _plain(obj, depth=0):
    t = type(obj)
    if t in _PLAIN:
        return True
    if depth > 4:
        return False
    if t is tuple or t is list:
        if len(obj) > _PLAIN_MAX:
            return False
        for x in obj:
            # a plain leaf costs no call (this runs for every call and reply)
            if type(x) not in _PLAIN and not _plain(x, depth + 1):
                return False
        return True
    if t is dict:
        if len(obj) > _PLAIN_MAX:
            return False
        for k, v in obj.items():
            if type(k) is not str or (type(v) not in _PLAIN and not _plain(v, depth + 1)):
                return False
        return True
    return False


def dumps(obj):
    """obj -> (pickle bytes, out-of-band buffers)."""
    bufs = []
    if _plain(obj):
        p = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    else:
        p = cloudpickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    return p, [b.raw() for b in bufs]


def dumps_inband(obj):
    """obj -> pickle bytes with every buffer in them (functions, classes)."""
    return cloudpickle.dumps(obj, protocol=5)


def loads(main, bufs):
    return pickle.loads(main, buffers=bufs)


_MP1 = struct.Struct(">IQ")


def encode(obj):
    """obj -> multipart buffers of its pickle and out-of-band buffers."""
    p, bufs = dumps(obj)
    if not bufs:
        return [_MP1.pack(1, len(p)), p]
    return multipart([p] + bufs)


def encode_plain(obj):
    """encode() of a value the caller knows is plain (strings, numbers):
    no scan, no out-of-band buffers."""
    p = pickle.dumps(obj, protocol=5)
    return [_MP1.pack(1, len(p)), p]


def decode(payload):
    parts = split(payload)
    if not parts:
        raise ProtocolError("empty multipart payload")
    return pickle.loads(parts[0], buffers=parts[1:])


class Blob:
    """A serialized value: pickle bytes and out-of-band buffers. Pickling a
    Blob hands its pieces to the outer pickle as out-of-band buffers, so a
    value already serialized is sent without another copy."""

    __slots__ = ("main", "bufs", "_nbytes")

    def __init__(self, main, bufs):
        self.main = main
        self.bufs = bufs
        self._nbytes = None

    @classmethod
    def of(cls, value):
        if type(value) in _SCALAR:  # no scan, no out-of-band buffers
            b = cls(pickle.dumps(value, protocol=5), [])
            b._nbytes = len(b.main)
            return b
        return cls(*dumps(value))

    def nbytes(self):
        if self._nbytes is None:
            self._nbytes = memoryview(self.main).nbytes + sum(memoryview(b).nbytes for b in self.bufs)
        return self._nbytes

    def value(self):
        return pickle.loads(self.main, buffers=self.bufs)

    def __reduce_ex__(self, protocol):
        return (Blob, (pickle.PickleBuffer(self.main), [pickle.PickleBuffer(b) for b in self.bufs]))


register_plain(Blob)

# A reply's values are a list of Blobs, pickled with the Blobs' pieces out
# of band; for one value of one piece (a small result) that outer pickle is
# the same bytes whatever the value, so it is made once (encode_values).
_ONE_BLOB = pickle.dumps([Blob(b"", [])], protocol=5, buffer_callback=lambda b: None)
_MP2 = struct.Struct(">IQQ")


def encode_values(vals):
    """A list of values (Blob, or corral's own markers) -> encode(vals)'s
    buffers, without a pickler for the common case of one small Blob."""
    if len(vals) == 1 and type(vals[0]) is Blob and not vals[0].bufs:
        main = vals[0].main
        return [_MP2.pack(2, len(_ONE_BLOB), memoryview(main).nbytes), _ONE_BLOB, main]
    return encode(vals)


# ---- shared-memory objects ----

SHM_MAGIC = b"CROB"
SHM_HEAD = struct.Struct(">4sIQI")  # magic, version, pickle length, buffer count
ALIGN = 64


def _align(n):
    return (n + ALIGN - 1) & ~(ALIGN - 1)


class Shm:
    """One object in a memfd: a header (magic "CROB", version 1, the pickle's
    length, the buffer count, each buffer's length), then the pickle and the
    buffers, each 64-byte aligned. Readers map it read-only and get numpy
    arrays backed by the mapping (no copy). A memfd is sealed (no write,
    grow or shrink, ever) before its descriptor goes to another process;
    until then its owner may reuse it for another object (ShmPool), and
    keeps the writable mapping it was written through (wmm) for that."""

    __slots__ = ("fd", "size", "mm", "sealed", "pe", "__weakref__")

    def __init__(self, fd, size, mm, pe=None):
        self.fd, self.size, self.mm = fd, size, mm
        self.sealed = False
        self.pe = pe  # the pool's entry of a reused memfd (_Pooled), with its mapping

    @classmethod
    def create(cls, blob, seal=True, pool=None):
        """blob's pieces written into a memfd, mapped read-only. A memfd
        from pool (one large enough) comes with a writable mapping whose
        page tables are filled: the write is a memcpy. A fresh one is
        written with pwritev: a first write through a new mapping costs a
        page fault per 4 KiB page, on some VMs more than the copy."""
        n = len(blob.bufs)
        parts = [memoryview(blob.main).cast("B")] + [memoryview(b).cast("B") for b in blob.bufs]
        head = SHM_HEAD.size + 8 * n
        off = _align(head)
        iov = [SHM_HEAD.pack(SHM_MAGIC, 1, parts[0].nbytes, n) + struct.pack(">%dQ" % n, *[p.nbytes for p in parts[1:]])]
        iov.append(bytes(off - head))
        for i, part in enumerate(parts):
            iov.append(part)
            end = off + part.nbytes
            off = _align(end)
            if i + 1 < len(parts) and off > end:
                iov.append(bytes(off - end))
        size = max(off, 1)
        pe = pool.take(size) if pool is not None else None
        if pe is not None:
            fd, wmm = pe.fd, pe.wmm  # wmm: None while its page tables are still being filled
        else:
            fd, wmm = os.memfd_create("corral-object", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING), None
        try:
            if wmm is not None:
                # the pooled memfd keeps its size (its mapping covers it);
                # the object's size is what readers map
                with memoryview(wmm) as dst:
                    pos = 0
                    for b in iov:
                        b = memoryview(b).cast("B")
                        dst[pos:pos + b.nbytes] = b
                        pos += b.nbytes
                    if pos < size:
                        dst[pos:size] = bytes(size - pos)
            else:
                if pe is None:
                    os.ftruncate(fd, size)  # a pooled one keeps its size while it is mapped
                pos = 0
                while iov:
                    # pwritev: the parts go from where they are, no joined copy
                    k = os.pwritev(fd, iov[:IOV_MAX], pos)
                    pos += k
                    while iov and k >= memoryview(iov[0]).nbytes:
                        k -= memoryview(iov[0]).nbytes
                        iov.pop(0)
                    if k:
                        iov[0] = memoryview(iov[0]).cast("B")[k:]
            # mapped through a read-only descriptor of its own: a mapping of
            # the read-write one could be made writable, which the kernel
            # counts, and refuses F_SEAL_WRITE while it lasts (seal() below
            # or when it is first shared)
            ro = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY | os.O_CLOEXEC)
            try:
                mm = mmap.mmap(ro, size, mmap.MAP_SHARED, mmap.PROT_READ)
            finally:
                os.close(ro)
        except BaseException:
            if pe is not None:
                pool.discard(pe)
            else:
                os.close(fd)
            raise
        # a pooled memfd can be larger than this object (up to twice):
        # sealing it (below, or when it is first shared) cuts it to size
        shm = cls(fd, size, mm, pe)
        if seal:
            shm.seal()
        return shm

    def seal(self):
        """Nobody writes it again: readers may trust what they map. The
        writable mapping goes first (the kernel refuses F_SEAL_WRITE while
        one exists), and a pooled memfd larger than the object is cut to it."""
        if not self.sealed:
            import fcntl
            if self.pe is not None:
                ShmPool.unmap(self.pe)
                self.pe = None
                if os.fstat(self.fd).st_size != self.size:
                    os.ftruncate(self.fd, self.size)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW |
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
            self.sealed = True

    @classmethod
    def open(cls, fd):
        """Takes fd (a received memfd); maps it read-only."""
        try:
            size = os.fstat(fd).st_size
            if size < SHM_HEAD.size:
                raise ProtocolError("object: %d bytes, shorter than its header" % size)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, size, mm)

    def blob(self):
        return Blob(*parse_shm(memoryview(self.mm)))

    def close(self, pool=None):
        """Unmaps it (unless arrays still view it: the mapping then goes
        with the last of them) and closes it, or gives it to pool (with
        its writable mapping) when it never left this process and nothing
        views it."""
        try:
            self.mm.close()
            viewed = False
        except BufferError:
            viewed = True
        pe, self.pe = self.pe, None
        if self.fd >= 0:
            if pool is not None and not viewed and not self.sealed:
                if pe is None:
                    pe = _Pooled(self.size, self.fd)
                if pool.give(pe):
                    self.fd = -1
                    return
            if pe is not None:
                ShmPool.unmap(pe)
            os.close(self.fd)
            self.fd = -1


class _Pooled:
    """A reused memfd: its size, descriptor, when it was freed, its writable
    mapping (None until its page tables are filled), and the thread that
    fills them (once per memfd, after its first use)."""

    __slots__ = ("size", "fd", "t", "wmm", "warming")

    def __init__(self, size, fd):
        self.size, self.fd = size, fd
        self.t = 0.0
        self.wmm = None
        self.warming = None


class ShmPool:
    """memfds of freed objects that never left this process, for the next
    put (as Ray's plasma store reuses its memory): at most max_bytes, each
    closed after idle_s unused. Each keeps a writable mapping whose page
    tables are filled (a thread reads a byte of each page of a memfd freed
    without one: once per memfd), so a put into it is a memcpy: fresh
    shared memory, and a first write through a new mapping, cost a page
    fault per 4 KiB page (on this VM more than the copy itself). What it
    holds counts in Core.stats() (pool_bytes, pool_mapped_bytes) and is
    unmapped and closed when it trims."""

    def __init__(self, max_bytes, idle_s=10.0):
        self.max_bytes = max_bytes
        self.idle_s = idle_s
        self.held = []  # _Pooled, oldest first
        self.bytes = 0
        self.lock = threading.Lock()

    def mapped_bytes(self):
        with self.lock:
            return sum(e.size for e in self.held if e.wmm is not None)

    def give(self, e):
        """Takes e (its descriptor and mapping) when it fits."""
        import time
        with self.lock:
            if e.size > self.max_bytes:
                return False
            while self.held and self.bytes + e.size > self.max_bytes:
                self._drop(self.held.pop(0))
            e.t = time.monotonic()
            self.held.append(e)
            self.bytes += e.size
            if e.wmm is None and e.warming is None:
                try:
                    # mapped here (cheap: no page is touched), so that the
                    # thread never reads a descriptor a trim may close
                    mm = mmap.mmap(e.fd, e.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                except (OSError, ValueError):
                    return True  # kept without a mapping: puts into it use pwritev
                e.warming = threading.Thread(target=self._warm, args=(e, mm), name="corral-shm-warm",
                                             daemon=True)
                e.warming.start()
            return True

    def _warm(self, e, mm):
        """Touches each page of mm (e's writable mapping): its page tables
        filled; then e has it."""
        try:
            try:
                import numpy
                with memoryview(mm) as v:
                    numpy.frombuffer(v, dtype=numpy.uint8)[::mmap.PAGESIZE].max()  # without the GIL
            except ImportError:
                mm[::mmap.PAGESIZE]
        except BaseException:
            mm.close()
            raise
        with self.lock:
            if e.fd < 0:
                mm.close()  # closed while it warmed
            else:
                e.wmm = mm

    @staticmethod
    def unmap(e):
        """e's mapping goes (its warming thread waited for): before a seal,
        which the kernel refuses while a writable mapping exists."""
        th = e.warming
        if th is not None and th is not threading.current_thread():
            th.join()
        if e.wmm is not None:
            e.wmm.close()
            e.wmm = None

    def _drop(self, e):
        """Under the lock: e's mapping and descriptor go (a thread still
        warming it closes its mapping when done)."""
        self.bytes -= e.size
        if e.wmm is not None:
            e.wmm.close()
            e.wmm = None
        os.close(e.fd)
        e.fd = -1

    def discard(self, e):
        """e, taken and not given back (a failed put), closed."""
        with self.lock:
            self.bytes += e.size  # _drop counts it out
            self._drop(e)

    def take(self, size):
        """The smallest held entry of at least size bytes (up to twice it),
        or None. One still being warmed is waited for: the rest of its
        page tables cost no more now than during the copy, and every later
        put into it is a memcpy (its wmm stays None only if warming failed:
        the caller then writes with pwritev)."""
        with self.lock:
            best = None
            for e in self.held:
                if size <= e.size <= 2 * size and (best is None or e.size < best.size):
                    best = e
            if best is None:
                return None
            self.held.remove(best)
            self.bytes -= best.size
        th = best.warming
        if th is not None:
            th.join()
        return best

    def expire(self, now):
        with self.lock:
            keep = []
            for e in self.held:
                if now - e.t > self.idle_s:
                    self._drop(e)
                else:
                    keep.append(e)
            self.held = keep

    def clear(self):
        self.expire(float("inf"))


def parse_shm(mv):
    """An object's bytes (memoryview) -> (pickle view, buffer views), checked:
    the header is the first thing an outsider controls (tests/fuzz)."""
    if mv.nbytes < SHM_HEAD.size:
        raise ProtocolError("object: shorter than its header")
    magic, ver, plen, n = SHM_HEAD.unpack_from(mv, 0)
    if magic != SHM_MAGIC or ver != 1:
        raise ProtocolError("object: not a corral object (magic %r, version %d)" % (magic, ver))
    if n > 1 << 16 or SHM_HEAD.size + 8 * n > mv.nbytes:
        raise ProtocolError("object: %d buffers do not fit" % n)
    lens = [plen] + list(struct.unpack_from(">%dQ" % n, mv, SHM_HEAD.size))
    off = _align(SHM_HEAD.size + 8 * n)
    parts = []
    for ln in lens:
        if off + ln > mv.nbytes:
            raise ProtocolError("object: a part runs past the end")
        parts.append(mv[off:off + ln])
        off = _align(off + ln)
    return parts[0], parts[1:]


# ---- connections ----

_tl = threading.local()
IBUF = 1 << 20


def _ibuf():
    """This thread's receive buffer (a memoryview of IBUF bytes)."""
    b = getattr(_tl, "ibuf", None)
    if b is None:
        b = _tl.ibuf = memoryview(bytearray(IBUF))
    return b


class Conn:
    """One stream socket with frames. send() may be called from any thread;
    reading is done by the one I/O thread (feed())."""

    def __init__(self, sock, unix):
        self.sock = sock
        self.unix = unix
        self.lock = threading.Lock()
        self.rbuf = bytearray()
        self.fds = []
        self.closed = False
        self.peer = {}      # the HELLO's fields
        self.hello = False  # HELLO seen (or sent, on the connecting side)
        self.role = None
        self.data = None    # what the runtime hangs on it
        self.out = []       # frames post() queued, in order, for flush()
        # held by the one thread reading (and dispatching) this connection's
        # frames: the I/O thread, or a thread that waits for a reply on it
        # (Core.read_direct)
        self.rlock = threading.Lock()
        self.out_bytes = 0

    def fileno(self):
        return self.sock.fileno()

    def post(self, kind, ident, parts=()):
        """Queues a frame (no descriptors) for flush(): a burst of calls or
        replies goes in one system call instead of one each. Returns True
        when the queue was empty before (the caller sees that a flush comes).
        Frames of send() go after what is queued, so the order holds."""
        if len(parts) == 2 and type(parts[0]) is bytes and type(parts[1]) is bytes:
            lens = None  # encode()'s two pieces of a small call
            size = len(parts[0]) + len(parts[1])
        else:
            lens = [memoryview(p).nbytes for p in parts]
            size = sum(lens)
        if size + 12 > MAX_FRAME:
            raise ProtocolError("a %s frame of %d bytes is over the %d-byte limit "
                                "(CORRAL_TASK_MAX_FRAME)" % (KIND_NAMES.get(kind, kind), size, MAX_FRAME))
        head = HDR.pack(size + 12, kind, 0, 0, ident)
        if size <= 4096:
            frame = [head + b"".join(parts)]
        else:
            if lens is None:
                lens = [len(p) for p in parts]
            frame = [head] + [p for p, n in zip(parts, lens) if n]
        with self.lock:
            if self.closed:
                raise ConnectionError("connection closed")
            first = not self.out
            self.out += frame
            self.out_bytes += size + 16
            if self.out_bytes >= FLUSH_BYTES or len(self.out) >= IOV_MAX:
                self._flush()
        return first

    def flush(self):
        """Sends what post() queued."""
        with self.lock:
            if self.out and not self.closed:
                self._flush()

    def _flush(self):
        bufs, self.out, self.out_bytes = self.out, [], 0
        if len(bufs) == 1 and type(bufs[0]) is bytes:
            self.sock.sendall(bufs[0])
            return
        if len(bufs) > 1 and sum(memoryview(b).nbytes for b in bufs) <= FLUSH_BYTES:
            bufs = [b"".join(bufs)]
        self._sendall(bufs)

    def send(self, kind, ident, parts=(), fds=None):
        """parts: bytes-like, sent as one frame (with writev)."""
        if fds is None and len(parts) == 2 and type(parts[0]) is bytes and type(parts[1]) is bytes:
            # a call or reply of one small pickle (encode()'s two pieces):
            # one joined buffer, one system call
            size = len(parts[0]) + len(parts[1])
            if size <= 4096:
                buf = HDR.pack(size + 12, kind, 0, 0, ident) + parts[0] + parts[1]
                with self.lock:
                    if self.closed:
                        raise ConnectionError("connection closed")
                    if self.out:
                        self._flush()
                    self.sock.sendall(buf)
                return
        size = sum(memoryview(p).nbytes for p in parts)
        if size + 12 > MAX_FRAME:
            raise ProtocolError("a %s frame of %d bytes is over the %d-byte limit "
                                "(CORRAL_TASK_MAX_FRAME)" % (KIND_NAMES.get(kind, kind), size, MAX_FRAME))
        head = HDR.pack(size + 12, kind, FLAG_FDS if fds else 0, 0, ident)
        bufs = [head] + [p for p in parts if memoryview(p).nbytes]
        with self.lock:
            if self.closed:
                raise ConnectionError("connection closed")
            if self.out:
                self._flush()
            if fds:
                anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                sent = self.sock.sendmsg(bufs[:1], anc)
                rest = memoryview(head)[sent:]
                if rest.nbytes:
                    self.sock.sendall(rest)
                bufs = bufs[1:]
            self._sendall(bufs)

    def _sendall(self, bufs):
        total = sum(memoryview(b).nbytes for b in bufs)
        while total:
            n = self.sock.sendmsg(bufs[:IOV_MAX])
            total -= n
            if not total:
                break
            # drop what went
            while n:
                b = memoryview(bufs[0]).cast("B")
                if n >= b.nbytes:
                    n -= b.nbytes
                    bufs = bufs[1:]
                else:
                    bufs[0] = b[n:]
                    n = 0

    def feed(self):
        """Reads what is there; returns the complete frames as (kind, flags,
        id, payload memoryview, fds), or None at end of stream. It reads
        into its thread's one receive buffer (_ibuf): a fresh 1 MiB bytes
        object per read cost more than the whole of a small call (an mmap
        and its page faults); frames are copied out of it, and a partial
        frame's bytes are kept in rbuf."""
        mv = _ibuf()
        try:
            if self.unix:
                n, anc, _, _ = self.sock.recvmsg_into([mv], socket.CMSG_SPACE(MAX_FDS * 4), socket.MSG_DONTWAIT)
                for level, typ, d in anc:
                    if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                        a = array.array("i")
                        a.frombytes(d[:len(d) - len(d) % a.itemsize])
                        self.fds.extend(a)
            else:
                n = self.sock.recv_into(mv, 0, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            return None
        if not n:
            return None
        rb = self.rbuf
        if rb:
            rb += mv[:n]
            with memoryview(rb) as src:
                out, off = self._frames(src, len(rb))
            if off:
                del rb[:off]
        else:
            out, off = self._frames(mv, n)
            if off < n:
                rb += mv[off:n]
        return out

    def _frames(self, src, end):
        """The complete frames in src[:end] (copied out) and where they end."""
        out = []
        off = 0
        while end - off >= HDR_LEN:
            ln, kind, flags, _, ident = HDR.unpack_from(src, off)
            if ln < 12 or ln > MAX_FRAME:
                raise ProtocolError("a frame of length %d (allowed 12..%d)" % (ln, MAX_FRAME))
            if end - off < 4 + ln:
                break
            payload = src[off + HDR_LEN:off + 4 + ln].tobytes()
            fds = []
            if flags & FLAG_FDS:
                fds, self.fds = self.fds, []
            out.append((kind, flags, ident, memoryview(payload), fds))
            off += 4 + ln
        if end - off >= 4 and off < end:
            (ln,) = struct.unpack_from(">I", src, off)
            if ln < 12 or ln > MAX_FRAME:
                raise ProtocolError("a frame of length %d (allowed 12..%d)" % (ln, MAX_FRAME))
        return out, off

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        for fd in self.fds:
            os.close(fd)
        self.fds = []
