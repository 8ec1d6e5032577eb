#!/usr/bin/env python3
"""Start-up probe for bench/train: joins the process group with
corral.train.torch.init_process_group, prints `rank R ready T` (T: seconds
since this process started), waits at a barrier and exits.
With INIT_ONLY_STAMP_DIR set, each rank also writes the wall-clock time it
got past init ("S NS") to DIR/RANK, for the bench to take the latest.
With INIT_ONLY_FAIL_RANK=R, rank R of the first attempt (CORRAL_RESTART_COUNT
0) writes the time to DIR/fail and exits 1 just past init: the bench times
the gang's restart from there to every rank past init again."""
import os
import sys
import time

try:
    import corral.train.torch as ct
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import corral.train.torch as ct
import torch.distributed as dist


def since_start():
    # the process's start time from /proc (clock ticks since boot)
    try:
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start
    except (OSError, ValueError, AttributeError):
        return float("nan")


ct.init_process_group()
now = time.time_ns()
rank = dist.get_rank()
stamp_dir = os.environ.get("INIT_ONLY_STAMP_DIR")
if stamp_dir:
    with open(os.path.join(stamp_dir, str(rank)), "w") as f:
        f.write("%d %09d\n" % (now // 10**9, now % 10**9))
fail_rank = os.environ.get("INIT_ONLY_FAIL_RANK")
if fail_rank and int(fail_rank) == rank and os.environ.get("CORRAL_RESTART_COUNT", "0") == "0":
    if stamp_dir:
        with open(os.path.join(stamp_dir, "fail"), "w") as f:
            f.write("%d %09d\n" % (now // 10**9, now % 10**9))
    print("rank %d failing on purpose (INIT_ONLY_FAIL_RANK)" % rank, flush=True)
    os._exit(1)
print("rank %d ready %.3f" % (rank, since_start()), flush=True)
dist.barrier()
dist.destroy_process_group()
# no destructors at exit: see the note at the end of ddp_train.py
sys.stdout.flush()
os._exit(0)
