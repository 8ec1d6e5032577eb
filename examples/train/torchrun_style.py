#!/usr/bin/env python3
"""A script written for torchrun, with no corral imports: it reads LOCAL_RANK
and calls init_process_group("gloo") with nothing else, so it needs
MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE from whoever started it
(torchrun, or corral train). All-reduces rank+1 and checks the sum, and
prints the rest of torchrun's contract (LocalElasticAgent's variables) on a
"contract" line, so a test can compare corral's with torchrun's own."""
import os
import sys

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
e = os.environ.get
print("contract rank=%s local=%s world=%s local_world=%s group=%s group_world=%s role=%s role_rank=%s "
      "role_world=%s restarts=%s max_restarts=%s omp=%s nccl_async=%s elastic=%s" % (
          e("RANK"), e("LOCAL_RANK"), e("WORLD_SIZE"), e("LOCAL_WORLD_SIZE"), e("GROUP_RANK"),
          e("GROUP_WORLD_SIZE"), e("ROLE_NAME"), e("ROLE_RANK"), e("ROLE_WORLD_SIZE"),
          e("TORCHELASTIC_RESTART_COUNT"), e("TORCHELASTIC_MAX_RESTARTS"), e("OMP_NUM_THREADS"),
          e("NCCL_ASYNC_ERROR_HANDLING"), dist.is_torchelastic_launched()), flush=True)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
print("torchrun_style rank %d/%d local_rank %d allreduce %g expected %g" % (rank, world, local_rank, t.item(), expected),
      flush=True)
dist.barrier()
dist.destroy_process_group()
sys.exit(0 if t.item() == expected else 1)
