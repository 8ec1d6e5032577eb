"""PyTorch helpers for scripts run by ``corral train``.

``get_device()`` picks the device this worker was given (never another),
``init_process_group()`` joins the job's process group with the backend that
fits that device and fails with a clear message when a rank does not show
up, and ``prepare_model()`` moves a model there and wraps it for DDP or
FSDP. torch is imported when these are called, not when this is imported.
"""

import datetime
import os
import socket
import sys
import time

from ._context import get_context

__all__ = [
    "get_device",
    "get_devices",
    "init_process_group",
    "prepare_model",
    "RendezvousError",
    "RendezvousTimeout",
]

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)  # torch's own default

# outside corral: the vendor variable that says what was given, and its kind
_VENDOR_VARS = (
    ("CUDA_VISIBLE_DEVICES", "GPU"),
    ("ROCR_VISIBLE_DEVICES", "GPU"),
    ("ZE_AFFINITY_MASK", "GPU"),
    ("TPU_VISIBLE_CHIPS", "TPU"),
    ("NEURON_RT_VISIBLE_CORES", "neuron_cores"),
    ("HABANA_VISIBLE_MODULES", "HPU"),
)

_noticed = False


class RendezvousError(RuntimeError):
    """The job's ranks could not meet at MASTER_ADDR:MASTER_PORT."""


class RendezvousTimeout(RendezvousError, TimeoutError):
    """Not every rank arrived at the rendezvous in time."""


def _notice(msg):
    """Says ``msg`` on stderr, once per process."""
    global _noticed
    if _noticed:
        return
    _noticed = True
    sys.stderr.write("corral: %s\n" % msg)
    sys.stderr.flush()


def _reset_notice():  # for tests
    global _noticed
    _noticed = False


def _given(env):
    """(kind, count, description) of the accelerators this worker was given.
    Under corral: CORRAL_ACCELERATOR_TYPE and CORRAL_ACCELERATOR_IDS (an empty
    type or list: none). Outside corral: the first vendor isolation variable
    set. (None, None, None) when nothing restricts it (a plain run)."""
    ctx = get_context(env)
    if ctx.in_corral:
        kind = ctx.accelerator_type
        n = len(ctx.accelerator_ids)
        if not kind or n == 0:
            return "", 0, "no accelerators"
        ids = ",".join(str(i) for i in ctx.accelerator_ids)
        iso = [v for v, _ in _VENDOR_VARS if env.get(v)]
        where = " (%s=%s)" % (iso[0], env[iso[0]]) if iso else ""
        return kind, n, "%s %s%s" % (kind, ids, where)
    for var, kind in _VENDOR_VARS:
        if var in env:
            parts = [p for p in env[var].split(",") if p.strip() not in ("", "-1")]
            return kind, len(parts), "%s %s=%s" % (kind, var, env[var])
    return None, None, None


def _cpu_fallback(given, why):
    import torch

    _notice("this worker was given %s, but %s; using the CPU" % (given, why))
    return [torch.device("cpu")]


def get_devices():
    """The torch devices this worker was given, as this process sees them
    (after isolation the first given GPU is cuda:0). CPU when it was given
    none or torch cannot use them; then, if it was given some, it says so on
    stderr once per process."""
    import torch

    env = os.environ
    kind, n, given = _given(env)
    if kind is None:  # not restricted: torchrun's convention
        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            ctx = get_context(env)
            return [torch.device("cuda", ctx.local_rank % torch.cuda.device_count())]
        return [torch.device("cpu")]
    if n == 0:
        return [torch.device("cpu")]
    if kind == "GPU":
        if torch.cuda.is_available():
            count = min(n, torch.cuda.device_count())
            if count > 0:
                return [torch.device("cuda", i) for i in range(count)]
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            return [torch.device("xpu", i) for i in range(min(n, xpu.device_count()))]
        return _cpu_fallback(given, "torch has no CUDA runtime here (torch.cuda.is_available() is False)")
    if kind in ("TPU", "neuron_cores"):
        try:
            import torch_xla.core.xla_model as xm
        except ImportError as e:
            pkg = "torch_xla" if kind == "TPU" else "torch_neuronx/torch_xla"
            return _cpu_fallback(given, "%s is not importable (%s)" % (pkg, e))
        return [torch.device(xm.xla_device())]
    if kind == "HPU":
        try:
            import habana_frameworks.torch.core  # noqa: F401  registers "hpu"
        except ImportError as e:
            return _cpu_fallback(given, "habana_frameworks.torch is not importable (%s)" % e)
        return [torch.device("hpu")]
    return _cpu_fallback(given, "corral.train.torch does not know a torch device for %s" % kind)


def get_device():
    """The first of ``get_devices()``: the one device a one-device worker uses."""
    return get_devices()[0]


def _seconds(t):
    if t is None:
        return None
    if isinstance(t, datetime.timedelta):
        return t.total_seconds()
    return float(t)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _has_key(store, key):
    try:
        store.wait([key], datetime.timedelta(milliseconds=20))
        return True
    except (RuntimeError, OSError):
        return False


def _await_listener(addr, port, deadline):
    """Waits until rank 0's store accepts connections (or the deadline).
    torch's TCPStore client sleeps a whole second after a refused connect
    (c10d socket.cpp), so a rank that starts before rank 0 listens would
    lose up to 1 s of every start and restart; probing every few ms here
    lets its one real connect succeed at once. The probe connects and
    closes; the store's server takes that as a client that left."""
    import socket
    import struct

    pause = 0.002
    while time.monotonic() < deadline:
        s = None
        try:
            s = socket.create_connection((addr, port), timeout=max(0.05, min(1.0, deadline - time.monotonic())))
            if s.getsockname() != s.getpeername():
                return
            # a connect to a local port nobody listens on can meet itself
            # (TCP simultaneous open, when the kernel picks that very port
            # as the source): not rank 0. Closed with a reset, so that no
            # TIME_WAIT keeps rank 0 from binding the port.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        finally:
            if s is not None:
                s.close()
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _rendezvous(ctx, addr, port, seconds):
    """Every rank checks in on rank 0's TCPStore; returns the store once all
    WORLD_SIZE ranks have, or raises naming the ranks that did not."""
    import torch.distributed as dist

    w, r = ctx.world_size, ctx.rank
    expected = "expected ranks 0..%d (WORLD_SIZE=%d)" % (w - 1, w)
    start = time.monotonic()
    if r != 0:
        _await_listener(addr, port, start + seconds)
    try:
        store = dist.TCPStore(addr, port, w, r == 0, datetime.timedelta(seconds=seconds), wait_for_workers=False)
    except (RuntimeError, OSError) as e:  # torch raises TimeoutError on some versions
        if r == 0:
            raise RendezvousError(
                "rank 0 could not host the rendezvous at %s:%d: %s (is MASTER_PORT in use, or "
                "MASTER_ADDR not an address of this node?)" % (addr, port, e)
            ) from None
        raise RendezvousTimeout(
            "rank %d could not reach the rendezvous at %s:%d (hosted by rank 0) within %.1f s: "
            "rank 0 has not started, has exited, or is unreachable; %s; torch said: %s"
            % (r, addr, port, seconds, expected, str(e).splitlines()[0] if str(e) else type(e).__name__)
        ) from None
    prefix = "corral/rendezvous/%d/" % ctx.restart_count
    keys = [prefix + str(i) for i in range(w)]
    store.set(keys[r], str(os.getpid()))
    left = max(0.001, seconds - (time.monotonic() - start))
    try:
        store.wait(keys, datetime.timedelta(seconds=left))
    except (RuntimeError, OSError):
        missing = [i for i in range(w) if not _has_key(store, keys[i])]
        if not missing:  # they arrived just now
            return store
        raise RendezvousTimeout(
            "rank %d: rendezvous at %s:%d timed out after %.1f s: %d of %d ranks arrived, "
            "missing rank%s %s; %s. Check that every worker started and can reach "
            "MASTER_ADDR:MASTER_PORT."
            % (
                r, addr, port, seconds, w - len(missing), w, "" if len(missing) == 1 else "s",
                ",".join(str(i) for i in missing), expected,
            )
        ) from None
    return store


def _default_backend(device):
    t = device.type
    if t == "cuda":
        return "nccl"
    if t == "xla":
        return "xla"
    if t == "hpu":
        return "hccl"
    if t == "xpu":
        return "ccl"
    return "gloo"


def init_process_group(backend=None, timeout=None, *, rendezvous_timeout=None, **kwargs):
    """Joins this job's process group and returns the backend used.

    ``backend``: default nccl on CUDA, xla on TPU (torch_xla), hccl on HPU,
    gloo on CPU. ``timeout`` (seconds or a timedelta; torch's 30 min by
    default) bounds the collectives and, unless ``rendezvous_timeout`` is
    given, the wait for every rank to arrive. Reads MASTER_ADDR, MASTER_PORT,
    RANK and WORLD_SIZE; outside corral with none set, it makes a group of
    one. Raises RendezvousTimeout naming the missing ranks and the address
    when not every rank arrives in time. A second call does nothing."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("init_process_group: this torch was built without torch.distributed")
    if dist.is_initialized():
        return dist.get_backend()
    ctx = get_context()
    device = get_device()
    if backend is None:
        backend = _default_backend(device)
    if backend == "xla":
        import torch_xla.distributed.xla_backend  # noqa: F401  registers "xla"
    if backend == "nccl" and device.type == "cuda":
        torch.cuda.set_device(device)
    coll = _seconds(timeout) or DEFAULT_TIMEOUT.total_seconds()
    rdzv = _seconds(rendezvous_timeout) or coll
    addr, port = ctx.master_addr, ctx.master_port
    if addr is None or port is None:
        if ctx.world_size > 1:
            raise RendezvousError(
                "init_process_group: WORLD_SIZE=%d but MASTER_ADDR/MASTER_PORT are not set "
                "(corral train and torchrun set them; set both when starting ranks by hand)" % ctx.world_size
            )
        addr, port = addr or "127.0.0.1", port or _free_port()
    store = _rendezvous(ctx, addr, port, rdzv)
    store.set_timeout(datetime.timedelta(seconds=coll))  # later store use: the collective timeout
    dist.init_process_group(
        backend,
        store=store,
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=datetime.timedelta(seconds=coll),
        **kwargs
    )
    return backend


def prepare_model(model, parallel_strategy="ddp", device=None, **wrap_kwargs):
    """Moves ``model`` to ``device`` (default ``get_device()``) and wraps it:
    "ddp" in DistributedDataParallel, "fsdp" in FullyShardedDataParallel,
    None not at all. The process group must be up for ddp/fsdp (call
    ``init_process_group()`` first). ``wrap_kwargs`` go to the wrapper."""
    import torch.distributed as dist

    if parallel_strategy not in ("ddp", "fsdp", None):
        raise ValueError("prepare_model: parallel_strategy %r is not one of 'ddp', 'fsdp', None" % (parallel_strategy,))
    device = get_device() if device is None else device
    model = model.to(device)
    if parallel_strategy is None:
        return model
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "prepare_model(parallel_strategy=%r): the process group is not initialized; "
            "call corral.train.torch.init_process_group() first" % parallel_strategy
        )
    if parallel_strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        if device.type == "cuda":
            wrap_kwargs.setdefault("device_ids", [device.index])
        return DistributedDataParallel(model, **wrap_kwargs)
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except Exception as e:  # missing, or broken in this torch/Python pair
        import torch

        raise RuntimeError(
            "prepare_model(parallel_strategy='fsdp'): FSDP is not available in this torch "
            "(%s): %s: %s; use parallel_strategy='ddp'" % (torch.__version__, type(e).__name__, e)
        ) from None
    if device.type == "cuda":
        wrap_kwargs.setdefault("device_id", device)
    return FullyShardedDataParallel(model, **wrap_kwargs)
