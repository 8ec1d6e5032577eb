#!/usr/bin/env python3
"""DDP with corral.train.TorchTrainer (Ray Train's API on corral's actors),
for tests/cluster/trainer.sh and docs/train.md.

A linear model on synthetic data; every worker reports its step and the
mean loss with a checkpoint each step; a restarted group resumes from the
last checkpoint. Prints `worker R/W node N chips C step S loss L`, and at
the end one line `result {json}` (metrics, checkpoint, attempts, the
reported steps in order).

    trainer_ddp.py --tpu 4x4 [--workers 4]      # one whole simulated TPU v6e slice
    trainer_ddp.py --gpu 2                      # two workers with GPU=1 each

Options: --steps N (8), --fail-rank R --fail-step S (the worker of rank R
exits at step S, first attempt only), --max-failures K (1), --storage DIR,
--name NAME.
"""
import argparse
import json
import os
import sys
import tempfile

try:
    import corral
except ImportError:  # run from a checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import corral
import corral.train as train


def loop(config):
    import torch
    import torch.distributed as dist
    import corral.train.torch as ct

    ctx = train.get_context()
    R, W = ctx.rank, ctx.world_size
    device = ct.get_device()
    torch.manual_seed(0)  # the same initial model on every rank
    model = ct.prepare_model(torch.nn.Linear(8, 1), "ddp")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1234 + R)  # this rank's shard
    x = torch.randn(64, 8, generator=g)
    y = x @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.01 * torch.randn(64, 1, generator=g)
    x, y = x.to(device), y.to(device)

    print("worker %d/%d mesh task=%s bounds=%s port=%s" % (
        R, W, os.environ.get("CLOUD_TPU_TASK_ID", "-"), os.environ.get("TPU_PROCESS_BOUNDS", "-"),
        os.environ.get("TPU_PROCESS_PORT", "-")), flush=True)
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "model.pt"))
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"] + 1
        print("worker %d resumed from %s at step %d (restart %d)" % (
            R, os.path.basename(ckpt.path), start, ctx.restart_count), flush=True)

    for step in range(start, config["steps"]):
        if R == config["fail_rank"] and step == config["fail_step"] and ctx.restart_count == 0:
            print("worker %d failing at step %d" % (R, step), flush=True)
            sys.stdout.flush()
            os._exit(1)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean = mean.item() / W
        print("worker %d/%d node %s chips %s step %d loss %.4f" % (
            R, W, ctx.node_id, os.environ.get("TPU_VISIBLE_CHIPS") or os.environ.get("CUDA_VISIBLE_DEVICES") or
            os.environ.get("CORRAL_ACCELERATOR_IDS"),
            step, mean), flush=True)
        with tempfile.TemporaryDirectory() as d:
            if R == 0:
                torch.save({"step": step, "model": model.module.state_dict(), "optim": opt.state_dict()},
                           os.path.join(d, "model.pt"))
            train.report({"step": step, "loss": mean, "world_size": W},
                         checkpoint=train.Checkpoint.from_directory(d) if R == 0 else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpu", metavar="TOPOLOGY")
    ap.add_argument("--gpu", type=int, metavar="WORKERS")
    ap.add_argument("--workers", type=int)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--fail-step", type=int, default=-1)
    ap.add_argument("--max-failures", type=int, default=1)
    ap.add_argument("--storage", default=None)
    ap.add_argument("--name", default=None)
    a = ap.parse_args()
    if a.tpu:
        sc = train.ScalingConfig(num_workers=a.workers, use_tpu=True, topology=a.tpu, accelerator_type="TPU-V6E")
    else:
        sc = train.ScalingConfig(num_workers=a.gpu or a.workers or 2, use_gpu=bool(a.gpu))
    trainer = train.TorchTrainer(
        loop,
        train_loop_config={"steps": a.steps, "fail_rank": a.fail_rank, "fail_step": a.fail_step},
        scaling_config=sc,
        run_config=train.RunConfig(name=a.name, storage_path=a.storage,
                                   failure_config=train.FailureConfig(max_failures=a.max_failures),
                                   checkpoint_config=train.CheckpointConfig(num_to_keep=2)))
    try:
        result = trainer.fit()
    except train.TrainingFailedError as e:
        r = e.result
        print("failed: %s" % e, flush=True)
        print("result " + json.dumps({"error": str(e), "ranks": sorted(e.worker_failures),
                                      "attempts": r.attempts, "metrics": r.metrics}), flush=True)
        return 1
    print("result " + json.dumps({
        "metrics": result.metrics,
        "checkpoint": os.path.basename(result.checkpoint.path) if result.checkpoint else None,
        "attempts": result.attempts,
        "steps": [h["step"] for h in result.metrics_history],
        "losses": [h["loss"] for h in result.metrics_history],
        "kept": sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_")),
        "error": result.error}), flush=True)
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)
