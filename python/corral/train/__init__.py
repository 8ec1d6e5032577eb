"""Helpers for scripts run by ``corral train``.

``get_context()`` reads what corral set for this worker (rank, world size,
the devices it was given, the checkpoint directory); ``save_checkpoint()``
and ``load_checkpoint()`` keep one checkpoint in ``CORRAL_CHECKPOINT_DIR``
so a restarted gang resumes. ``corral.train.torch`` has the PyTorch part
(device, process group, model wrapping), ``corral.train.jax`` the JAX part
(``initialize()``: ``jax.distributed.initialize()`` with the process count
and id corral set, which JAX itself does not read); both are imported on
first use, so ``import corral.train`` never imports torch or JAX.

``TorchTrainer(train_loop_per_worker, scaling_config=ScalingConfig(...),
run_config=RunConfig(...)).fit()`` runs a training function on one actor
per worker, as Ray Train does; ``report()`` and ``get_checkpoint()`` are
called inside it (docs/train.md "TorchTrainer").
"""

from ._context import TrainContext, get_context
from ._checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from ._config import (Checkpoint, CheckpointConfig, FailureConfig, Result, RunConfig, ScalingConfig,
                      TrainingFailedError, WorkerGroupError)
from ._session import get_checkpoint, report
from ._trainer import DataParallelTrainer, TorchConfig, TorchTrainer

__all__ = [
    "TrainContext",
    "get_context",
    "save_checkpoint",
    "load_checkpoint",
    "checkpoint_path",
    "TorchTrainer",
    "DataParallelTrainer",
    "TorchConfig",
    "ScalingConfig",
    "RunConfig",
    "FailureConfig",
    "CheckpointConfig",
    "Checkpoint",
    "Result",
    "TrainingFailedError",
    "WorkerGroupError",
    "report",
    "get_checkpoint",
    "torch",
    "jax",
]


def __getattr__(name):
    # corral.train.torch / .jax without an explicit import of the submodule
    if name in ("torch", "jax"):
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
