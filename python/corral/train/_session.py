"""Inside a TorchTrainer worker: report() and get_checkpoint().

The run's directory (RunConfig storage_path/name) holds:
  checkpoint_NNNNNN/  one committed checkpoint per report that carried one
  latest.json         the last committed one: {"report", "checkpoint", "metrics", "attempt"},
                      replaced atomically by corral.train.save_checkpoint (the same
                      write-rename-fsync that corral train's checkpoints use)
  result.json         one JSON line per report of rank 0
  checkpoint          what corral.train.save_checkpoint() writes (CORRAL_CHECKPOINT_DIR
                      is the run's directory), for scripts written for corral train

report() is collective, as Ray's is: every rank calls it at the same step.
Each rank that passes a checkpoint copies its files into a staging
directory, all ranks meet at a barrier, rank 0 renames the staging
directory to checkpoint_NNNNNN and then replaces latest.json, and all meet
again, so a rank that fails after report() returned cannot lose that
checkpoint.
"""

import json
import os
import shutil
import threading
import time

from ._checkpoint import load_checkpoint, save_checkpoint
from ._config import Checkpoint

LATEST = "latest.json"
RESULTS = "result.json"

_lock = threading.Lock()
_session = None


class _Session:
    def __init__(self, run_dir, rank, world_size, attempt, next_report, num_to_keep):
        self.run_dir = run_dir
        self.rank = rank
        self.world_size = world_size
        self.attempt = attempt
        self.report_index = next_report
        self.num_to_keep = num_to_keep
        self.last_metrics = None
        self.reports = 0


def _start(run_dir, rank, world_size, attempt, num_to_keep):
    global _session
    latest = read_latest(run_dir)
    nxt = latest["report"] + 1 if latest else 0
    with _lock:
        _session = _Session(run_dir, rank, world_size, attempt, nxt, num_to_keep)
    return _session


def _end():
    global _session
    with _lock:
        s, _session = _session, None
    return s


def _current(what):
    s = _session
    if s is None:
        raise RuntimeError("corral.train.%s is called inside the training function a TorchTrainer runs "
                           "(train_loop_per_worker), not outside it" % what)
    return s


def read_latest(run_dir):
    """The run's last committed checkpoint record, or None."""
    rec = load_checkpoint(run_dir, name=LATEST)
    if not isinstance(rec, dict) or not isinstance(rec.get("report"), int):
        return None
    return rec


def _barrier():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def report(metrics, checkpoint=None):
    """Reports this step's metrics (a dict of JSON values) and, optionally, a
    Checkpoint; every worker calls it at the same step. The checkpoint is
    committed to the run's directory before report() returns on any rank."""
    s = _current("report")
    if not isinstance(metrics, dict):
        raise TypeError("corral.train.report: metrics is a dict, not %s" % type(metrics).__name__)
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError("corral.train.report: checkpoint is a corral.train.Checkpoint "
                        "(Checkpoint.from_directory(d)), not %s" % type(checkpoint).__name__)
    idx = s.report_index
    name = "checkpoint_%06d" % idx
    staging = os.path.join(s.run_dir, ".staging_%06d" % idx)
    if checkpoint is not None:
        shutil.copytree(checkpoint.path, staging, dirs_exist_ok=True)
    _barrier()
    if s.rank == 0:
        rec = dict(metrics)
        if os.path.isdir(staging):
            final = os.path.join(s.run_dir, name)
            if os.path.exists(final):  # a report of an attempt that failed before its commit
                shutil.rmtree(final)
            os.rename(staging, final)
            _fsync_dir(s.run_dir)
            save_checkpoint({"report": idx, "checkpoint": name, "metrics": metrics, "attempt": s.attempt},
                            s.run_dir, name=LATEST, format="json", all_ranks=True)
            rec["_checkpoint"] = name
            _prune(s)
        rec.update(_report=idx, _attempt=s.attempt, _time=time.time())
        with open(os.path.join(s.run_dir, RESULTS), "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
    _barrier()
    s.report_index = idx + 1
    s.reports += 1
    s.last_metrics = dict(metrics)


def _prune(s):
    if not s.num_to_keep:
        return
    names = sorted(n for n in os.listdir(s.run_dir) if n.startswith("checkpoint_") and
                   os.path.isdir(os.path.join(s.run_dir, n)))
    for n in names[:-s.num_to_keep]:
        shutil.rmtree(os.path.join(s.run_dir, n), ignore_errors=True)


def get_checkpoint():
    """The last committed checkpoint of this run (from a report of this
    attempt or of one before it that failed), or None."""
    s = _current("get_checkpoint")
    rec = read_latest(s.run_dir)
    if rec is None:
        return None
    path = os.path.join(s.run_dir, rec["checkpoint"])
    return Checkpoint(path) if os.path.isdir(path) else None
