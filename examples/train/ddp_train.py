#!/usr/bin/env python3
"""A tiny DDP training run on synthetic data, for corral train's tests, bench
and demo. Each rank fits a linear model to its own shard of y = Xw + noise,
DDP averages the gradients (gloo on CPU, nccl on GPUs), rank 0 checkpoints
after every step, and a restarted run resumes from that checkpoint.

Prints, per rank: `rank R/W device D step S loss L`, the all-reduce check
`rank R allreduce sum S expected E`, and `rank R done first_loss A last_loss B`.
Exits 1 when the all-reduce is wrong or the loss did not fall.

Environment: CORRAL_TRAIN_STEPS (default 8); fault injection:
CORRAL_TRAIN_FAIL_RANK=2 CORRAL_TRAIN_FAIL_STEP=3 makes rank 2 exit 1 at the
start of step 3, once rank 0's checkpoint of step 2 is written (so the
restart resumes at step 3 however the ranks are scheduled), only when
CORRAL_RESTART_COUNT is 0 (the first attempt).
"""
import os
import sys
import time

try:
    import corral.train
except ImportError:  # run from a checkout without `pip install ./python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import corral.train

import corral.train.torch as ct
import torch
import torch.distributed as dist


def leave(rc):
    """Exits at once, without destructors, while main()'s locals still hold
    the model. Debian's torch 1.13 can deadlock when DDP's Reducer drops the
    last reference to the gloo process group (~ProcessGroupGloo joins a gloo
    worker thread that waits for the GIL the dropping thread holds; seen with
    gdb in about 1 run of 10 on these machines)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def main():
    ctx = corral.train.get_context()
    steps = int(os.environ.get("CORRAL_TRAIN_STEPS", "8"))
    fail_rank = int(os.environ.get("CORRAL_TRAIN_FAIL_RANK", "-1"))
    fail_step = int(os.environ.get("CORRAL_TRAIN_FAIL_STEP", "-1"))
    R, W = ctx.rank, ctx.world_size

    ct.init_process_group()
    device = ct.get_device()

    # an all-reduce with a known answer: sum of rank+1 over all ranks
    t = torch.tensor([float(R + 1)], device=device)
    dist.all_reduce(t)
    expected = W * (W + 1) / 2
    print("rank %d allreduce sum %g expected %g" % (R, t.item(), expected), flush=True)
    if t.item() != expected:
        print("rank %d: all-reduce gave %g, expected %g" % (R, t.item(), expected), file=sys.stderr)
        leave(1)

    torch.manual_seed(0)  # the same initial model on every rank
    model = ct.prepare_model(torch.nn.Linear(8, 1), "ddp")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    g = torch.Generator().manual_seed(1234 + R)  # this rank's shard
    w_true = torch.arange(1.0, 9.0).unsqueeze(1)
    x = torch.randn(64, 8, generator=g)
    y = x @ w_true + 0.01 * torch.randn(64, 1, generator=g)
    x, y = x.to(device), y.to(device)

    start, losses = 0, []
    ckpt = corral.train.load_checkpoint()
    if ckpt is not None:
        model.module.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optim"])
        start, losses = ckpt["step"] + 1, ckpt["losses"]
        print("rank %d resumed from checkpoint at step %d (restart %d)" % (R, start, ctx.restart_count), flush=True)

    for step in range(start, steps):
        if R == fail_rank and step == fail_step and ctx.restart_count == 0:
            # rank 0 saves a step after its all-reduce, so it may still be
            # writing the last step's checkpoint when this rank gets here
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and step > 0 and os.environ.get("CORRAL_CHECKPOINT_DIR"):
                c = corral.train.load_checkpoint()
                if c is not None and c["step"] >= step - 1:
                    break
                time.sleep(0.02)
            print("rank %d failing at step %d (CORRAL_TRAIN_FAIL_RANK)" % (R, step), flush=True)
            leave(1)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        # the mean loss over all ranks: the same figure on every rank
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean = mean.item() / W
        losses.append(mean)
        print("rank %d/%d device %s step %d loss %.4f" % (R, W, device, step, mean), flush=True)
        corral.train.save_checkpoint(
            {"step": step, "model": model.module.state_dict(), "optim": opt.state_dict(), "losses": losses}
        )

    dist.barrier()
    dist.destroy_process_group()
    first, last = losses[0], losses[-1]
    print("rank %d done first_loss %.4f last_loss %.4f" % (R, first, last), flush=True)
    if not last < first:
        print("rank %d: loss did not fall (%.4f -> %.4f)" % (R, first, last), file=sys.stderr)
        leave(1)
    leave(0)


if __name__ == "__main__":
    try:
        main()
    except Exception:  # e.g. a peer rank failed: report it, exit 1 (see leave)
        import time
        import traceback

        traceback.print_exc()
        # A rank that fails because a peer left is a consequence, not the
        # cause: it leaves a moment later, so that the rank that failed
        # first is also the one whose exit is seen first (each agent notes
        # an exit when its loop turns, which on a loaded machine can lag
        # the peers' reaction to the closed connection by tens of ms).
        time.sleep(1.0)
        leave(1)
