"""One checkpoint per job in CORRAL_CHECKPOINT_DIR, replaced atomically.

The file is written to a temporary name in the same directory, flushed and
fsync'd, renamed over the old one, and the directory is fsync'd: a reader
(or a restarted gang) sees the old checkpoint or the new one, never part of
one. The format is chosen by what is in the state: ``torch.save`` when it
holds torch objects (tensors, modules' state dicts), pickle otherwise; on
load the format is told from the file's first bytes.
"""

import json
import os
import pickle
import sys
import tempfile

from ._context import get_context

DEFAULT_NAME = "checkpoint"
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's zip format


def _resolve_dir(directory):
    if directory is not None:
        return os.fspath(directory)
    return get_context().checkpoint_dir


def checkpoint_path(directory=None, name=DEFAULT_NAME):
    """The path of the checkpoint file, or None when no directory is set."""
    d = _resolve_dir(directory)
    return None if d is None else os.path.join(d, name)


def _holds_torch(obj, depth=0):
    if depth > 64:
        return False
    mod = type(obj).__module__ or ""
    if mod == "torch" or mod.startswith("torch."):
        return True
    if isinstance(obj, dict):
        return any(_holds_torch(k, depth + 1) or _holds_torch(v, depth + 1) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return any(_holds_torch(v, depth + 1) for v in obj)
    return False


def _fsync_dir(d):
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(state, directory=None, *, name=DEFAULT_NAME, format="auto", all_ranks=False):
    """Writes ``state`` atomically to ``<directory>/<name>``.

    ``directory`` defaults to CORRAL_CHECKPOINT_DIR. Only rank 0 writes unless
    ``all_ranks`` (then each rank should pass its own ``name``). ``format`` is
    "auto" (torch when ``state`` holds torch objects, else pickle), "torch",
    "pickle" or "json". Returns the path written, or None on a rank that
    does not write."""
    ctx = get_context()
    if not all_ranks and ctx.rank != 0:
        return None
    d = _resolve_dir(directory)
    if d is None:
        raise RuntimeError(
            "save_checkpoint: no checkpoint directory: CORRAL_CHECKPOINT_DIR is not set "
            "(run under `corral train --checkpoint-dir DIR`, or pass directory=)"
        )
    if format == "auto":
        format = "torch" if "torch" in sys.modules and _holds_torch(state) else "pickle"
    if format not in ("torch", "pickle", "json"):
        raise ValueError("save_checkpoint: format %r is not one of auto, torch, pickle, json" % (format,))
    os.makedirs(d, exist_ok=True)
    final = os.path.join(d, name)
    fd, tmp = tempfile.mkstemp(prefix="." + name + ".", suffix=".tmp", dir=d)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide it from other users' restarts
        with os.fdopen(fd, "wb") as f:
            if format == "torch":
                import torch

                torch.save(state, f)
            elif format == "json":
                f.write(json.dumps(state).encode("utf-8"))
            else:
                pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(d)
    return final


def load_checkpoint(directory=None, *, name=DEFAULT_NAME, map_location="cpu"):
    """Returns the state last saved with ``save_checkpoint``, or None when
    there is none (no directory set, or no checkpoint in it yet). Tensors
    load onto ``map_location`` (CPU by default; move them with the model)."""
    path = checkpoint_path(directory, name)
    if path is None:
        return None
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        head = f.read(4)
        f.seek(0)
        if head == _ZIP_MAGIC:
            import torch

            return torch.load(f, map_location=map_location)
        if head[:1] == b"\x80":
            return pickle.load(f)
        try:
            return json.loads(f.read().decode("utf-8"))
        except ValueError as e:
            raise RuntimeError("load_checkpoint: %s is neither a torch, pickle nor JSON checkpoint: %s" % (path, e)) from None
