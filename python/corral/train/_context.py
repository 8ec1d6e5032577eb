"""The worker's place in the job, read from the environment corral sets."""

import os
from dataclasses import dataclass
from typing import Optional, Tuple

# the variable each runtime uses to hide the devices a worker was not given
ISOLATION_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "TPU_VISIBLE_CHIPS",
    "NEURON_RT_VISIBLE_CORES",
    "HABANA_VISIBLE_MODULES",
    "ZE_AFFINITY_MASK",
)


@dataclass(frozen=True)
class TrainContext:
    """Where this worker stands. Outside corral: rank 0 of 1, no devices
    assigned (``in_corral`` False), no checkpoint directory."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    restart_count: int = 0
    checkpoint_dir: Optional[str] = None
    accelerator_ids: Tuple[str, ...] = ()
    accelerator_type: str = ""
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    job_id: Optional[str] = None
    worker_id: Optional[str] = None
    node_id: Optional[str] = None
    in_corral: bool = False

    @property
    def is_rank0(self) -> bool:
        return self.rank == 0


def _int(env, name, default, minimum=0):
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw.strip())
    except ValueError:
        raise ValueError("%s=%r is not an integer" % (name, raw)) from None
    if v < minimum:
        raise ValueError("%s=%d is below %d" % (name, v, minimum))
    return v


def _ids(env, name):
    """The isolation ids the worker was given, as its vendor names them (a
    GPU UUID, a TPU chip index, a NeuronCore range), in the order given."""
    raw = env.get(name, "").strip()
    if not raw:
        return ()
    out = tuple(part.strip() for part in raw.split(","))
    if any(not part for part in out):
        raise ValueError("%s=%r: an empty id (expected a comma list such as 0,1 or GPU-...)"
                         % (name, raw))
    return out


def get_context(env=None) -> TrainContext:
    """Reads this worker's context from ``env`` (default ``os.environ``).

    RANK/WORLD_SIZE fall back to JAX_PROCESS_ID/JAX_NUM_PROCESSES, then to
    rank 0 of 1. Raises ValueError naming the variable when one is malformed
    or the rank lies outside the world."""
    env = os.environ if env is None else env
    rank = _int(env, "RANK", _int(env, "JAX_PROCESS_ID", 0))
    world = _int(env, "WORLD_SIZE", _int(env, "JAX_NUM_PROCESSES", 1), minimum=1)
    if rank >= world:
        raise ValueError("RANK=%d is outside WORLD_SIZE=%d (ranks are 0..%d)" % (rank, world, world - 1))
    local_rank = _int(env, "LOCAL_RANK", 0)
    local_world = _int(env, "LOCAL_WORLD_SIZE", 1, minimum=1)
    node_rank = _int(env, "NODE_RANK", _int(env, "GROUP_RANK", 0))
    port = env.get("MASTER_PORT")
    return TrainContext(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        node_rank=node_rank,
        restart_count=_int(env, "CORRAL_RESTART_COUNT", 0),
        checkpoint_dir=env.get("CORRAL_CHECKPOINT_DIR") or None,
        accelerator_ids=_ids(env, "CORRAL_ACCELERATOR_IDS"),
        accelerator_type=env.get("CORRAL_ACCELERATOR_TYPE", "").strip(),
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=_int(env, "MASTER_PORT", None, minimum=1) if port else None,
        job_id=env.get("CORRAL_JOB_ID") or None,
        worker_id=env.get("CORRAL_WORKER_ID") or None,
        node_id=env.get("CORRAL_NODE_ID") or None,
        in_corral=bool(env.get("CORRAL_JOB_ID") or "CORRAL_ACCELERATOR_TYPE" in env),
    )
