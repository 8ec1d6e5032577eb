"""corral.train.TorchTrainer: Ray Train's TorchTrainer on corral's actors.

fit() reserves one placement group (a whole TPU slice with use_tpu, else
num_workers bundles of resources_per_worker), starts one actor per bundle,
gives each the rank variables `corral train` gives its ranks (the same
code: sched/gang.c through corral._core.gang_env, so RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*, JAX_* and the TPU
slice variables are what the head would set for that placement), plus
CORRAL_RESTART_COUNT and CORRAL_CHECKPOINT_DIR (the run's directory, so
corral.train.save_checkpoint/load_checkpoint work as under corral train),
initializes torch.distributed (gloo on CPU, nccl on GPUs) and runs
train_loop_per_worker. When a worker fails (its process dies, or the
function raises) every actor of the group is killed and a new group of
actors starts from the last committed checkpoint, up to
FailureConfig.max_failures times. docs/train.md "TorchTrainer".
"""

import datetime
import inspect
import json
import os
import shutil
import socket
import sys

from ._config import (Checkpoint, CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig,
                      TrainingFailedError, WorkerGroupError)
from . import _session

_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class _TrainWorker:
    """One training worker (an actor). Its process is never reused across
    attempts: a failed group is killed and a new one started."""

    def where(self):
        return {"node": os.environ.get("CORRAL_NODE_ID", ""), "pid": os.getpid(),
                "ids": os.environ.get("CORRAL_ACCELERATOR_IDS", "")}

    def free_ports(self, n):
        """n TCP ports free on this host (for MASTER_PORT and JAX's
        coordinator), as corral train's agent picks them: bound to port 0
        together, then released."""
        socks = []
        try:
            for _ in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("", 0))
                socks.append(s)
            return [s.getsockname()[1] for s in socks]
        finally:
            for s in socks:
                s.close()

    def run(self, fn, config, env, run_dir, attempt, num_to_keep, backend, rdzv_timeout):
        os.environ.update(env)
        os.environ["CORRAL_RESTART_COUNT"] = str(attempt)
        os.environ["CORRAL_CHECKPOINT_DIR"] = run_dir
        from ._context import get_context
        from . import torch as ct

        ctx = get_context()
        ct.init_process_group(backend, rendezvous_timeout=rdzv_timeout)
        s = _session._start(run_dir, ctx.rank, ctx.world_size, attempt, num_to_keep)
        try:
            if _takes_config(fn):
                fn(config if config is not None else {})
            else:
                fn()
        finally:
            _session._end()
        # The process group is not destroyed: Debian's torch 1.13 can
        # deadlock when it is (docs/train.md "Known"); the actor is killed
        # after fit() and takes it along.
        return {"rank": ctx.rank, "metrics": s.last_metrics, "reports": s.reports}


def _takes_config(fn):
    try:
        ps = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return True
    return bool(ps)


def _labels(node):
    return dict(l.split("=", 1) for l in node.get("labels", []) if "=" in l)


def _host(address):
    """A node's address as the head lists it ("127.0.0.31", the head's own
    "127.0.0.1:43055", "[::1]:43055", or a Unix socket path) -> the host
    other ranks reach it at; 127.0.0.1 for a socket path."""
    a = (address or "").strip()
    if not a or a.startswith("/") or a.startswith("unix:"):
        return "127.0.0.1"
    if a.startswith("["):
        return a[1:a.index("]")] if "]" in a else a[1:]
    if a.count(":") == 1:
        return a.split(":", 1)[0]
    return a


def _first_dev(devices):
    """The lowest device index of a bundle's devices ("0,1" or "TPU:0,1"), -1 none."""
    best = -1
    for part in (devices or "").replace(";", ",").split(","):
        part = part.rsplit(":", 1)[-1].strip()
        if part.isdigit() and (best < 0 or int(part) < best):
            best = int(part)
    return best


def _ndevs(devices):
    return sum(1 for p in (devices or "").replace(";", ",").split(",")
               if p.rsplit(":", 1)[-1].strip().isdigit())


class DataParallelTrainer:
    """Runs train_loop_per_worker on every worker of one placement group
    (see the module's comment); TorchTrainer is this with torch.distributed."""

    _backend = None  # torch.distributed's backend: None picks by device (gloo, nccl, xla)

    def __init__(self, train_loop_per_worker, *, train_loop_config=None, scaling_config=None,
                 run_config=None, torch_config=None, datasets=None, resume_from_checkpoint=None,
                 metadata=None):
        if not callable(train_loop_per_worker):
            raise TypeError("train_loop_per_worker: a function, not %s" % type(train_loop_per_worker).__name__)
        if datasets:
            raise ValueError("datasets=: corral has no Ray Data; read your data inside train_loop_per_worker")
        if resume_from_checkpoint is not None:
            raise ValueError("resume_from_checkpoint=: give RunConfig(name=, storage_path=) of the run to "
                             "resume; get_checkpoint() then returns its last checkpoint")
        del metadata
        self.fn = train_loop_per_worker
        self.config = train_loop_config
        self.scaling = scaling_config or ScalingConfig(num_workers=1)
        self.run_config = run_config or RunConfig()
        self.timeout = float(getattr(torch_config, "timeout_s", 1800) if torch_config else 1800)
        self.backend = getattr(torch_config, "backend", None) if torch_config else self._backend
        self._check()

    def _check(self):
        s = self.scaling
        if s.placement_strategy not in _STRATEGIES:
            raise ValueError("ScalingConfig.placement_strategy=%r: one of %s" % (
                s.placement_strategy, ", ".join(_STRATEGIES)))
        if s.num_workers is not None and (not isinstance(s.num_workers, int) or s.num_workers < 1):
            raise ValueError("ScalingConfig.num_workers=%r: an integer of at least 1" % (s.num_workers,))
        if s.use_tpu and not s.topology:
            raise ValueError("ScalingConfig(use_tpu=True) needs topology= (\"4x4\") and accelerator_type= "
                             "(\"TPU-V6E\"): the trainer reserves one whole slice")
        if not s.use_tpu and s.num_workers is None:
            raise ValueError("ScalingConfig.num_workers: how many workers (one actor each)")
        fc = self.run_config.failure_config or FailureConfig()
        if not isinstance(fc.max_failures, int) or fc.max_failures < -1:
            raise ValueError("FailureConfig.max_failures=%r: -1 (no limit), 0 or more" % (fc.max_failures,))
        cc = self.run_config.checkpoint_config or CheckpointConfig()
        if cc.num_to_keep is not None and (not isinstance(cc.num_to_keep, int) or cc.num_to_keep < 1):
            raise ValueError("CheckpointConfig.num_to_keep=%r: None or at least 1" % (cc.num_to_keep,))

    # ---- placement ----

    def _group(self):
        """(placement group, [bundle resources] in bundle order, tpu?, topology)."""
        from .. import util
        s = self.scaling
        if s.use_tpu:
            from ..util import tpu
            acc = s.accelerator_type or "TPU-V6E"
            hosts, chips = tpu.slice_hosts(s.topology, acc)
            n = s.num_workers or hosts
            per_chip = (s.resources_per_worker or {}).get("TPU") == 1
            if n == hosts and not per_chip:
                bph = 1
            elif n == hosts * chips:
                bph = chips
            else:
                raise ValueError("ScalingConfig(use_tpu=True, topology=%r): num_workers=%d; a %s slice of %s "
                                 "has %d hosts of %d chips: %d workers (one per host) or %d (one per chip)" % (
                                     s.topology, n, s.topology, acc, hosts, chips, hosts, hosts * chips))
            extra = {k: v * bph for k, v in (s.resources_per_worker or {}).items() if k != "TPU"}
            spg = tpu.SlicePlacementGroup(s.topology, acc, resources_per_host=extra or None,
                                          bundles_per_host=bph, name=self._name + "-slice")
            return spg.placement_group, [dict(b) for b in spg.placement_group.bundle_specs], True, s.topology
        res = dict(s.resources_per_worker or {"CPU": 1})
        if s.use_gpu and "GPU" not in res:
            res["GPU"] = 1
        sel = [{"corral.io/accelerator-type": s.accelerator_type}] * s.num_workers if s.accelerator_type else None
        pg = util.placement_group([dict(res) for _ in range(s.num_workers)], strategy=s.placement_strategy,
                                  name=self._name + "-group", bundle_label_selector=sel)
        return pg, [dict(res) for _ in range(s.num_workers)], bool(res.get("TPU")), None

    def _actor_class(self, res):
        import corral
        res = dict(res)
        cpus = res.pop("CPU", 0)
        gpus = res.pop("GPU", 0)
        return corral.remote(num_cpus=cpus, num_gpus=gpus, resources=res or None,
                             max_restarts=0, max_task_retries=0)(_TrainWorker)

    # ---- fit ----

    def fit(self):
        import corral
        from .. import util
        rc = self.run_config
        self._name = rc.name or "%s_%s" % (type(self).__name__, datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
        storage = os.path.abspath(os.path.expanduser(rc.storage_path or "~/corral_results"))
        run_dir = os.path.join(storage, self._name)
        os.makedirs(run_dir, exist_ok=True)
        max_failures = (rc.failure_config or FailureConfig()).max_failures
        keep = (rc.checkpoint_config or CheckpointConfig()).num_to_keep
        corral.init()
        pg, bundles, tpu, topo = self._group()
        failures = {}
        attempt = 0
        try:
            if not pg.wait(self.timeout):
                raise TrainingFailedError("the trainer's placement group %s was not placed within %.0f s: %s" % (
                    pg.id, self.timeout, pg.info().get("reason") or "no reason given"))
            while True:
                for n in os.listdir(run_dir):  # copies of an attempt that failed before its commit
                    if n.startswith(".staging_"):
                        shutil.rmtree(os.path.join(run_dir, n), ignore_errors=True)
                actors = []
                try:
                    out, failures = self._attempt(pg, bundles, tpu, topo, run_dir, attempt, max_failures,
                                                  keep, actors)
                finally:
                    for a in actors:
                        try:
                            corral.kill(a)
                        except Exception:
                            pass
                if not failures:
                    return self._result(run_dir, out, None, attempt)
                why = _why(failures)
                if max_failures != -1 and attempt >= max_failures:
                    err = WorkerGroupError("training failed on attempt %d of %s: %s" % (
                        attempt + 1, "unlimited" if max_failures == -1 else max_failures + 1, why), failures)
                    err.result = self._result(run_dir, None, err, attempt)
                    raise err
                print("corral.train: attempt %d failed (%s); restarting all %d workers from %s" % (
                    attempt + 1, why, len(bundles),
                    (_session.read_latest(run_dir) or {}).get("checkpoint", "the start")),
                    file=sys.stderr, flush=True)
                attempt += 1
        finally:
            try:
                util.remove_placement_group(pg)
            except Exception:
                pass

    def _attempt(self, pg, bundles, tpu, topo, run_dir, attempt, max_failures, keep, actors):
        """One start of the worker group: ({rank: result}, {rank: error})."""
        import corral
        from .. import _head
        from .. import util
        for i, res in enumerate(bundles):
            cls = self._actor_class(res)
            actors.append(cls.options(scheduling_strategy=util.PlacementGroupSchedulingStrategy(pg, i)).remote())
        try:
            where = corral.get([a.where.remote() for a in actors], timeout=self.timeout)
        except Exception as e:  # an actor did not start
            return None, {0: e}
        info = pg.info()
        nodes = {n["node_id"]: n for n in corral.nodes()}
        keys = {}
        slots = []
        for i, w in enumerate(where):
            node = w["node"] or info["bundles"][i]["node"]
            n = nodes.get(node, {})
            wid = _labels(n).get("corral.io/tpu-slice-worker-id", "")
            devs = info["bundles"][i].get("devices", "")
            slots.append((keys.setdefault(node, len(keys)), _host(n.get("address")),
                          int(wid) if wid.isdigit() else -1, _first_dev(devs), _ndevs(devs)))
        # ports on the host of the slot that gets rank 0
        order0, _ = _head.module().gang_env(slots, run_id=self._name, master_port=1, jax_port=2,
                                            restart_count=attempt, max_restarts=max_failures, tpu=tpu)
        mport, jport = corral.get(actors[order0[0]].free_ports.remote(2), timeout=self.timeout)
        order, envs = _head.module().gang_env(slots, run_id=self._name, master_port=mport, jax_port=jport,
                                              restart_count=attempt, max_restarts=max_failures, tpu=tpu,
                                              topology=topo, job_env=dict(os.environ))
        refs = {}
        for r in range(len(order)):
            a = actors[order[r]]
            refs[a.run.remote(self.fn, self.config, envs[r], run_dir, attempt, keep, self.backend,
                              min(self.timeout, 300.0))] = r
        out, failures = {}, {}
        pending = list(refs)
        while pending:
            ready, pending = corral.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    out[refs[ref]] = corral.get(ref)
                except Exception as e:
                    failures[refs[ref]] = e
            if failures:
                # a failed rank: the others would wait in a collective; the
                # caller kills the whole group. Give peers that fail with it
                # a moment to say why, so the first cause is reported.
                more, _ = corral.wait(pending, num_returns=len(pending), timeout=2)
                for ref in more:
                    try:
                        corral.get(ref)
                    except Exception as e:
                        failures[refs[ref]] = e
                return out, failures
        return out, {}

    def _result(self, run_dir, out, err, attempt):
        history = []
        try:
            with open(os.path.join(run_dir, _session.RESULTS)) as f:
                for line in f:
                    try:
                        history.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut short by a kill: the write of a report never committed
        except FileNotFoundError:
            pass
        metrics = None
        if out and out.get(0) and out[0].get("metrics") is not None:
            metrics = out[0]["metrics"]
        elif history:
            metrics = {k: v for k, v in history[-1].items() if not k.startswith("_")}
        latest = _session.read_latest(run_dir)
        ckpt = None
        if latest and os.path.isdir(os.path.join(run_dir, latest["checkpoint"])):
            ckpt = Checkpoint(os.path.join(run_dir, latest["checkpoint"]))
        return Result(metrics=metrics, checkpoint=ckpt, error=err, path=run_dir, metrics_history=history,
                      attempts=attempt + 1)


def _peer_loss(e):
    """An error a rank gets because another one failed (its collective lost
    the peer), not a cause of its own."""
    t = str(e)
    return any(x in t for x in ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
                                "NCCL communicator was aborted", "Socket Timeout"))


def _why(failures):
    """The ranks that failed first-hand, then those that only lost them."""
    cause = {r: e for r, e in failures.items() if not _peer_loss(e)} or failures
    why = "; ".join("rank %d: %s" % (r, _short(e)) for r, e in sorted(cause.items()))
    rest = sorted(set(failures) - set(cause))
    if rest:
        why += " (rank%s %s then lost %s peer)" % ("s" if len(rest) > 1 else "", ", ".join(map(str, rest)),
                                                  "their" if len(rest) > 1 else "its")
    return why


def _short(e):
    s = str(e).strip().splitlines()
    return s[-1] if s else type(e).__name__


class TorchTrainer(DataParallelTrainer):
    """Ray Train's TorchTrainer: train_loop_per_worker runs on every worker with
    torch.distributed initialized (gloo on CPU, nccl on GPUs);
    corral.train.torch.get_device()/prepare_model() inside it as under
    corral train."""


class TorchConfig:
    """backend: torch.distributed's backend (None: by device); timeout_s: the
    collectives' and the rendezvous's limit."""

    def __init__(self, backend=None, timeout_s=1800):
        self.backend = backend
        self.timeout_s = timeout_s

