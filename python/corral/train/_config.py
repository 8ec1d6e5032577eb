"""The Trainer API's configuration and result types, as Ray Train names them
(ScalingConfig, RunConfig, FailureConfig, CheckpointConfig, Checkpoint,
Result, TrainingFailedError); docs/train.md "TorchTrainer"."""

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class ScalingConfig:
    """How many workers and what each holds.

    num_workers: the workers (one actor each). use_gpu: each worker holds
    GPU=1 unless resources_per_worker says otherwise. use_tpu with topology
    ("4x4") and accelerator_type ("TPU-V6E"): the workers are placed on one
    whole slice (corral.util.tpu.SlicePlacementGroup), worker 0 of the slice
    as rank 0; num_workers is the slice's hosts (one worker per host, all its
    chips; the default) or its chips (one worker per chip).
    resources_per_worker: {"CPU": 2, "GPU": 1, ...}; default {"CPU": 1}
    (plus GPU=1 with use_gpu). placement_strategy: PACK, SPREAD,
    STRICT_PACK or STRICT_SPREAD (not for a TPU slice, whose group is
    one bundle per host)."""

    num_workers: Optional[int] = None
    use_gpu: bool = False
    resources_per_worker: Optional[Dict[str, float]] = None
    placement_strategy: str = "PACK"
    use_tpu: bool = False
    topology: Optional[str] = None
    accelerator_type: Optional[str] = None


@dataclass
class FailureConfig:
    """max_failures: how many times the whole worker group is torn down and
    restarted from the last reported checkpoint after a worker fails (its
    process died, or the training function raised); -1 without limit, 0
    (default) never."""

    max_failures: int = 0


@dataclass
class CheckpointConfig:
    """num_to_keep: the most recent checkpoints kept in the run's directory
    (None: all). The newest is always kept."""

    num_to_keep: Optional[int] = None


@dataclass
class RunConfig:
    """name: the run's directory under storage_path (default
    TorchTrainer_<time>); storage_path: default ~/corral_results. Every
    worker must reach it at the same path (one machine, or a shared
    file system), as with Ray."""

    name: Optional[str] = None
    storage_path: Optional[str] = None
    failure_config: Optional[FailureConfig] = None
    checkpoint_config: Optional[CheckpointConfig] = None


class Checkpoint:
    """A checkpoint: a directory of files. Inside the training function,
    write files to a directory and pass Checkpoint.from_directory(d) to
    corral.train.report(); get_checkpoint() gives the last one committed."""

    def __init__(self, path):
        self.path = os.fspath(path)

    @classmethod
    def from_directory(cls, path):
        path = os.path.abspath(os.fspath(path))
        if not os.path.isdir(path):
            raise ValueError("Checkpoint.from_directory(%r): not a directory" % path)
        return cls(path)

    @contextlib.contextmanager
    def as_directory(self):
        """The checkpoint's directory (read it, do not change it)."""
        yield self.path

    def to_directory(self, path=None):
        """Copies the checkpoint into path (default a new temporary directory); returns it."""
        import tempfile

        path = path or tempfile.mkdtemp(prefix="corral-ckpt-")
        shutil.copytree(self.path, path, dirs_exist_ok=True)
        return path

    def __repr__(self):
        return "Checkpoint(%s)" % self.path

    def __eq__(self, other):
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self):
        return hash(self.path)


@dataclass
class Result:
    """What fit() gives back: metrics (the last report of rank 0), checkpoint
    (the last committed one, or None), error (None on success), path (the
    run's directory), metrics_history (every report of rank 0 in order,
    attempts that failed included), attempts (1 + restarts)."""

    metrics: Optional[Dict[str, Any]]
    checkpoint: Optional[Checkpoint]
    error: Optional[BaseException]
    path: str
    metrics_history: List[Dict[str, Any]] = field(default_factory=list)
    attempts: int = 1


class TrainingFailedError(RuntimeError):
    """fit() failed: a worker failed more than FailureConfig.max_failures
    times. worker_failures: {rank: exception} of the last attempt; result:
    the Result (metrics and checkpoint so far, error = self)."""

    def __init__(self, message, worker_failures=None, result=None):
        super().__init__(message)
        self.worker_failures = worker_failures or {}
        self.result = result


class WorkerGroupError(TrainingFailedError):
    """A training worker failed (Ray Train's name for it)."""
