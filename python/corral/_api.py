"""corral's public task and actor API (docs/actors.md "Python"), over the
runtime of _runtime.py."""

import functools
import hashlib
import inspect
import os
import threading

from . import _runtime as R
from . import _wire as W
from . import exceptions as E
from ._runtime import ObjectRef

_TASK_OPTS = {"num_cpus", "num_gpus", "resources", "memory", "accelerator_type", "label_selector",
              "max_retries", "retry_exceptions", "num_returns", "scheduling_strategy", "name"}
_ACTOR_OPTS = {"num_cpus", "num_gpus", "resources", "memory", "accelerator_type", "label_selector",
               "max_restarts", "max_task_retries", "max_concurrency", "name", "namespace", "lifetime",
               "scheduling_strategy", "get_if_exists"}


def init(address=None, namespace=None, ignore_reinit_error=True):
    """Connects this process to a head: address "host:port" (or a head's Unix
    socket path); None: $CORRAL_ADDRESS, else this machine's head."""
    if R.core(required=False) is not None and not ignore_reinit_error:
        raise RuntimeError("corral.init was already called in this process")
    R.init(address, namespace)


def is_initialized():
    return R.core(required=False) is not None


def shutdown():
    """Ends this process's leases and actors (not detached ones) and closes
    its connection to the head."""
    R.shutdown()


def _core():
    c = R._core
    if c is None:
        R.init()
        c = R.core()
    return c


# ---- resource shapes ----

def _fmt(q):
    return ("%.6f" % q).rstrip("0").rstrip(".") if isinstance(q, float) else str(int(q))


def _selector(sel):
    if sel is None:
        return []
    if isinstance(sel, str):
        return [sel] if sel else []
    if not isinstance(sel, dict):
        raise TypeError("label_selector: a dict of label -> value (or a selector string), not %s"
                        % type(sel).__name__)
    out = []
    for k, v in sel.items():
        v = str(v).strip()
        neg = v.startswith("!")
        if neg:
            v = v[1:].strip()
        if v.startswith("in(") and v.endswith(")"):
            out.append("%s %s (%s)" % (k, "notin" if neg else "in", v[3:-1]))
        else:
            out.append("%s%s%s" % (k, "!=" if neg else "=", v))
    return out


# An actor that asks for nothing holds the scheduler's smallest CPU unit (the
# head takes no zero amounts): as good as Ray's 0 CPUs while it runs.
MIN_CPU = "CPU=0.0001"


def _spec(opts, actor):
    """options -> the lease's resources, selector and placement."""
    res = {}
    cpus = opts.get("num_cpus")
    if cpus is None:
        cpus = 0 if actor else 1  # an actor holds no CPU unless it asks (as Ray)
    if cpus < 0:
        raise ValueError("num_cpus=%r: it cannot be negative" % cpus)
    if cpus:
        res["CPU"] = cpus
    gpus = opts.get("num_gpus") or 0
    if gpus < 0:
        raise ValueError("num_gpus=%r: it cannot be negative" % gpus)
    if gpus:
        res["GPU"] = gpus
    if opts.get("memory"):
        res["memory"] = int(opts["memory"])
    extra = opts.get("resources") or {}
    if not isinstance(extra, dict):
        raise TypeError("resources: a dict such as {\"TPU\": 1}, not %s" % type(extra).__name__)
    for k, v in extra.items():
        if k in ("CPU", "GPU"):
            raise ValueError("resources=%r: ask for %s with num_%ss=, not in resources" % (extra, k, k.lower()))
        if not isinstance(v, (int, float)) or v < 0:
            raise ValueError("resources[%r]=%r: a quantity, a number not below 0" % (k, v))
        if v:
            res[k] = v
    sel = _selector(opts.get("label_selector"))
    if opts.get("accelerator_type"):
        sel.append("corral.io/accelerator-type=%s" % opts["accelerator_type"])
    spec = {"resources": ",".join("%s=%s" % (k, _fmt(v)) for k, v in sorted(res.items())) or MIN_CPU}
    strat = opts.get("scheduling_strategy")
    if strat is None or strat == "DEFAULT":
        pass
    elif strat == "SPREAD":
        spec["strategy"] = "SPREAD"
    elif isinstance(strat, str):
        raise ValueError("scheduling_strategy=%r: \"DEFAULT\", \"SPREAD\", a PlacementGroupSchedulingStrategy "
                         "or a NodeAffinitySchedulingStrategy" % strat)
    elif hasattr(strat, "placement_group"):
        spec["pg"] = strat.placement_group.id
        if strat.placement_group_bundle_index is not None and strat.placement_group_bundle_index >= 0:
            spec["bundle"] = int(strat.placement_group_bundle_index)
    elif hasattr(strat, "node_id"):
        sel.append("corral.io/node-id=%s" % strat.node_id)
    else:
        raise TypeError("scheduling_strategy: not a strategy corral knows (%r)" % (strat,))
    if sel:
        spec["selector"] = ",".join(sel)
    if actor and opts.get("lifetime") == "detached":
        spec["detached"] = True
    return spec


def _check_opts(opts, allowed, what):
    bad = sorted(set(opts) - allowed)
    if bad:
        raise TypeError("%s: unknown option%s %s (allowed: %s)" % (
            what, "s" if len(bad) > 1 else "", ", ".join(bad), ", ".join(sorted(allowed))))
    nr = opts.get("num_returns", 1)
    if not isinstance(nr, int) or nr < 1:
        raise ValueError("%s: num_returns=%r, an integer of at least 1" % (what, nr))
    for k in ("max_retries", "max_restarts", "max_task_retries"):
        v = opts.get(k)
        if v is not None and (not isinstance(v, int) or v < -1):
            raise ValueError("%s: %s=%r, an integer of -1 (unlimited) or more" % (what, k, v))
    mc = opts.get("max_concurrency")
    if mc is not None and (not isinstance(mc, int) or mc < 1):
        raise ValueError("%s: max_concurrency=%r, an integer of at least 1" % (what, mc))
    re = opts.get("retry_exceptions")
    if re not in (None, True, False) and not (isinstance(re, (list, tuple)) and
                                               all(isinstance(x, type) and issubclass(x, BaseException)
                                                   for x in re)):
        raise TypeError("%s: retry_exceptions is True, False or a list of exception classes" % what)
    lt = opts.get("lifetime")
    if lt not in (None, "detached", "non_detached"):
        raise ValueError("%s: lifetime=%r, \"detached\" or \"non_detached\"" % (what, lt))


# ---- tasks ----

class RemoteFunction:
    """A function made remote: f.remote(*args) runs it on a leased worker and
    returns an ObjectRef (num_returns > 1: a list of them)."""

    def __init__(self, fn, opts):
        _check_opts(opts, _TASK_OPTS, fn.__qualname__)
        self._fn = fn
        self._opts = opts
        self._spec = _spec(opts, False)
        self._key = R._shape_key(self._spec)
        self._pickled = None
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, *a, **k):
        raise TypeError("%s is a remote function: call %s.remote(...) (or .options(...).remote(...))"
                        % (self._fn.__qualname__, self._fn.__name__))

    def options(self, **opts):
        rf = RemoteFunction(self._fn, dict(self._opts, **opts))
        rf._pickled = self._pickled
        return rf

    def _bytes(self):
        with self._lock:
            if self._pickled is None:
                p, bufs = W.dumps(self._fn)
                if bufs:
                    p = W.dumps_inband(self._fn)
                self._pickled = (hashlib.sha1(p).hexdigest()[:16], p)
            return self._pickled

    def __reduce__(self):
        # a task that calls another task carries it (not its lock or cache)
        return (RemoteFunction, (self._fn, self._opts))

    def remote(self, *args, **kwargs):
        c = _core()
        fid, fb = self._bytes()
        return c.submit_task(self._fn, fb, fid, self._fn.__qualname__, args, kwargs, self._opts, self._spec,
                             self._key)


# ---- actors ----

class ActorClass:
    """A class made remote: C.remote(*args) starts an actor and returns its
    handle."""

    def __init__(self, cls, opts):
        _check_opts(opts, _ACTOR_OPTS, cls.__qualname__)
        self._cls = cls
        self._opts = opts
        self._spec = _spec(opts, True)
        self._pickled = None

    def __reduce__(self):
        return (ActorClass, (self._cls, self._opts))

    def __call__(self, *a, **k):
        raise TypeError("%s is an actor class: call %s.remote(...) to start an actor" % (
            self._cls.__qualname__, self._cls.__name__))

    def options(self, **opts):
        ac = ActorClass(self._cls, dict(self._opts, **opts))
        ac._pickled = self._pickled
        return ac

    def remote(self, *args, **kwargs):
        c = _core()
        name = self._opts.get("name")
        if name is not None:
            if not isinstance(name, str) or not name or len(name) > 100 or any(
                    ch.isspace() or ch in "/|;" for ch in name):
                raise ValueError("actor name %r: 1-100 characters, no spaces, '/', '|' or ';'" % (name,))
            ns = self._opts.get("namespace") or c.namespace
            found = c.find_named_actor(name, ns)
            if found is not None:
                if self._opts.get("get_if_exists"):
                    return ActorHandle(*found)
                raise ValueError("an actor named %r already exists in namespace %r (job %s): pick another "
                                 "name, corral.kill it, or pass get_if_exists=True" % (name, ns, found[3]))
        if self._pickled is None:
            self._pickled = W.dumps_inband(self._cls)
        opts = dict(self._opts)
        if name is not None:
            opts["namespace"] = self._opts.get("namespace") or c.namespace
        aid = c.create_actor(self._cls.__qualname__, self._pickled, args, kwargs, opts, self._spec)
        return ActorHandle(aid, self._cls.__qualname__, c.me, None, _methods(self._cls))


def _methods(cls):
    out = {}
    for n, m in inspect.getmembers(cls, inspect.isfunction):
        if n.startswith("__") and n != "__call__":
            continue
        out[n] = getattr(m, "_corral_num_returns", 1)
    return out


def method(num_returns=1):
    """@corral.method(num_returns=2) on an actor method."""
    def deco(f):
        f._corral_num_returns = num_returns
        return f
    return deco


class ActorMethod:
    def __init__(self, handle, name, num_returns):
        self._h = handle
        self._name = name
        self._nret = num_returns

    def remote(self, *args, **kwargs):
        return _core().call_actor(self._h._aid, self._name, args, kwargs, self._nret, {})

    def options(self, num_returns=None, **rest):
        if rest:
            raise TypeError("actor method options: only num_returns (got %s)" % ", ".join(sorted(rest)))
        return ActorMethod(self._h, self._name, self._nret if num_returns is None else num_returns)

    def __call__(self, *a, **k):
        raise TypeError("actor methods are called with .remote(): handle.%s.remote(...)" % self._name)


class ActorHandle:
    """A handle to an actor; pass it to tasks and other actors (it pickles)."""

    def __init__(self, aid, cls_name, owner, job=None, methods=None):
        self._aid = aid
        self._cls = cls_name
        self._owner = owner
        self._job = job
        self._methods = methods
        c = R.core(required=False)
        if c is not None and c.me != owner:
            c.attach_actor(aid, {"owner": owner, "class": cls_name})

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        m = self.__dict__.get("_methods")
        if m is not None and name not in m:
            raise AttributeError("actor %s (%s) has no method %r" % (self._aid, self._cls, name))
        am = ActorMethod(self, name, m.get(name, 1) if m else 1)
        if m is not None:
            self.__dict__[name] = am  # the next h.name finds it without __getattr__
        return am

    def __repr__(self):
        return "ActorHandle(%s, %s)" % (self._cls, self._aid)

    def __reduce__(self):
        return (ActorHandle, (self._aid, self._cls, self._owner, self._job, self._methods))

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._aid == self._aid

    def __hash__(self):
        return hash(self._aid)


def remote(*args, **opts):
    """@corral.remote or @corral.remote(num_cpus=..., resources={...}, ...) on a
    function (a task) or a class (an actor)."""
    def make(x):
        if inspect.isclass(x):
            return ActorClass(x, opts)
        if callable(x):
            return RemoteFunction(x, opts)
        raise TypeError("corral.remote: a function or a class, not %s" % type(x).__name__)
    if len(args) == 1 and not opts and callable(args[0]):
        return make(args[0])
    if args:
        raise TypeError("corral.remote takes options by keyword: @corral.remote(num_cpus=1)")
    return make


# ---- objects ----

def put(value):
    if isinstance(value, ObjectRef):
        raise TypeError("corral.put of an ObjectRef: pass the ref itself instead")
    return _core().put(value)


def get(refs, timeout=None):
    """The value of a ref, or the values of a list of refs, in order; raises a
    failed task's error (TaskError, also an instance of the remote
    exception's class) and GetTimeoutError after timeout seconds."""
    c = _core()
    if isinstance(refs, ObjectRef):
        return c.get(refs, timeout)
    if not isinstance(refs, (list, tuple)):
        raise TypeError("corral.get: an ObjectRef or a list of them, not %s" % type(refs).__name__)
    for r in refs:
        if not isinstance(r, ObjectRef):
            raise TypeError("corral.get: the list holds a %s, not an ObjectRef" % type(r).__name__)
    if timeout is None:
        return [c.get(r) for r in refs]
    import time
    deadline = time.monotonic() + timeout
    return [c.get(r, max(0.0, deadline - time.monotonic())) for r in refs]


def wait(refs, num_returns=1, timeout=None, fetch_local=True):
    """(ready, not_ready): the first num_returns refs that are final (done or
    failed), in the order given, within timeout seconds."""
    del fetch_local
    refs = list(refs)
    if num_returns < 0 or num_returns > len(refs):
        raise ValueError("corral.wait: num_returns=%d of %d refs" % (num_returns, len(refs)))
    if len(set(refs)) != len(refs):
        raise ValueError("corral.wait: the list holds the same ref twice")
    c = _core()
    import time
    deadline = None if timeout is None else time.monotonic() + timeout
    own = [r.id for r in refs if r.owner == c.me]
    done = set(c.wait_ready(own, timeout, min(num_returns, len(own))))
    for r in refs:
        if r.owner != c.me and len(done) < num_returns:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                c.get(r, left)
                done.add(r.id)
            except E.GetTimeoutError:
                pass
            except Exception:
                done.add(r.id)
    ready = [r for r in refs if r.id in done][:num_returns]
    rs = set(ready)
    return ready, [r for r in refs if r not in rs]


def cancel(ref, force=False, recursive=True):
    """Cancels the task that makes ref: a queued task never runs; a running
    one gets KeyboardInterrupt (force=True: its worker is killed). get then
    raises TaskCancelledError."""
    del recursive
    if not isinstance(ref, ObjectRef):
        raise TypeError("corral.cancel: an ObjectRef, not %s" % type(ref).__name__)
    return _core().cancel(ref, force)


# ---- actors by name, kill ----

def kill(actor, no_restart=True):
    """Ends an actor's process now; with no_restart=False it restarts if it has
    restarts left."""
    if not isinstance(actor, ActorHandle):
        raise TypeError("corral.kill: an actor handle, not %s" % type(actor).__name__)
    _core().kill_actor(actor._aid, no_restart)


def get_actor(name, namespace=None):
    """The handle of the named actor (in this process's namespace, or the one
    given); ValueError when there is none."""
    c = _core()
    ns = namespace or c.namespace
    found = c.find_named_actor(name, ns)
    if found is None:
        raise ValueError("no actor named %r in namespace %r (corral list actors shows the live ones)" % (name, ns))
    return ActorHandle(*found)


# ---- the cluster and this process ----

def nodes():
    return _core().head_call("cluster")


def cluster_resources():
    tot = {}
    for n in nodes():
        if n["state"] == "ALIVE":
            for k, v in n["total"].items():
                tot[k] = tot.get(k, 0) + v
    return tot


def available_resources():
    tot = {}
    for n in nodes():
        if n["state"] == "ALIVE":
            for k, v in n["free"].items():
                tot[k] = tot.get(k, 0) + v
    return tot


class RuntimeContext:
    def __init__(self, c):
        self.job_id = c.job_id or None
        self.node_id = os.environ.get("CORRAL_NODE_ID") or c.node
        self.task_id = getattr(R._tls, "task_id", None)
        self.actor_id = os.environ.get("CORRAL_ACTOR_ID") if c.is_worker else None
        self.worker_id = os.environ.get("CORRAL_WORKER_ID")
        self.lease_job_id = os.environ.get("CORRAL_JOB_ID") if c.is_worker else None
        self.namespace = c.namespace
        self.pid = os.getpid()

    def get_job_id(self):
        return self.job_id

    def get_node_id(self):
        return self.node_id

    def get_task_id(self):
        return self.task_id

    def get_actor_id(self):
        return self.actor_id

    def get_accelerator_ids(self):
        return get_accelerator_ids()

    def __repr__(self):
        return "RuntimeContext(%r)" % self.__dict__


def get_runtime_context():
    return RuntimeContext(_core())


def get_accelerator_ids():
    """{"GPU": ["0"], "TPU": [...], ...}: the devices this worker was given,
    as its isolation variables name them (CORRAL_ACCELERATOR_IDS and
    CORRAL_ACCELERATOR_TYPE, docs/runtime.md)."""
    ids = os.environ.get("CORRAL_ACCELERATOR_IDS", "")
    kind = os.environ.get("CORRAL_ACCELERATOR_TYPE", "")
    out = {}
    if ids:
        key = "TPU" if kind.upper().startswith("TPU") else "GPU" if kind else "accelerator"
        for pfx, k in (("TPU", "TPU"), ("TRN", "neuron_cores"), ("INF", "neuron_cores"), ("GAUDI", "HPU")):
            if kind.upper().startswith(pfx):
                key = k
        out[key] = [x for x in ids.split(",") if x]
    return out
