"""JAX under ``corral train``.

``jax.distributed.initialize()`` with no arguments reads one thing from the
environment, ``JAX_COORDINATOR_ADDRESS`` (jax/_src/distributed.py); the
process count and this process's id come from its arguments or from a
cluster JAX detects itself (jax/_src/clusters: Slurm, Open MPI, mpi4py,
Kubernetes, a Cloud TPU VM or GKE TPU slice). corral is none of those, and
JAX does not read the ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` corral
sets, so on GPU and CPU nodes the bare call stops with "Number of processes
must be defined". ``initialize()`` here passes what corral set:

    import corral.train.jax as cj
    cj.initialize()          # instead of jax.distributed.initialize()

Outside corral (no ``JAX_COORDINATOR_ADDRESS``) it does nothing and says so
in its return value, so the same script runs as one process.
"""

import os
from typing import Any, Dict, Optional

__all__ = ["initialize", "initialize_args"]


class NotUnderCorral(RuntimeError):
    """initialize(require=True) outside a corral train job."""


def _int(env, name):
    raw = env.get(name, "").strip()
    try:
        return int(raw)
    except ValueError:
        raise ValueError("%s=%r is not an integer (corral train sets it to the process %s)"
                         % (name, raw, "count" if name == "JAX_NUM_PROCESSES" else "id")) from None


def initialize_args(env=None) -> Optional[Dict[str, Any]]:
    """The keyword arguments for ``jax.distributed.initialize()`` from the
    variables corral set: ``coordinator_address`` (rank 0's node and a port
    of its own, not MASTER_PORT), ``num_processes`` and ``process_id``
    (WORLD_SIZE and RANK). ``local_device_ids`` is left out: corral already
    hides the other devices (CUDA_VISIBLE_DEVICES, TPU_VISIBLE_CHIPS, ...),
    so all the devices a process sees are its own. None outside corral."""
    env = os.environ if env is None else env
    addr = env.get("JAX_COORDINATOR_ADDRESS", "").strip()
    if not addr:
        return None
    if ":" not in addr:
        raise ValueError("JAX_COORDINATOR_ADDRESS=%r: expected HOST:PORT" % addr)
    n, i = _int(env, "JAX_NUM_PROCESSES"), _int(env, "JAX_PROCESS_ID")
    if n < 1 or not 0 <= i < n:
        raise ValueError("JAX_PROCESS_ID=%d is outside JAX_NUM_PROCESSES=%d (ids are 0..%d)" % (i, n, n - 1))
    return {"coordinator_address": addr, "num_processes": n, "process_id": i}


def initialize(require: bool = False, **overrides) -> Optional[Dict[str, Any]]:
    """Calls ``jax.distributed.initialize()`` with corral's values (any
    keyword given here wins) and returns the arguments it used; outside
    corral returns None without calling it, or raises NotUnderCorral with
    ``require=True``."""
    kw = initialize_args()
    if kw is None:
        if require:
            raise NotUnderCorral("JAX_COORDINATOR_ADDRESS is not set: not a corral train worker "
                                 "(run under corral train, or pass coordinator_address, "
                                 "num_processes and process_id to jax.distributed.initialize)")
        return None
    kw.update(overrides)
    import jax  # only now: importing corral.train.jax never imports JAX

    jax.distributed.initialize(**kw)
    return kw
