#!/usr/bin/env python3
"""A script written for torchrun, with no corral imports: it reads LOCAL_RANK
and calls init_process_group("gloo") with nothing else, so it needs
MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE from whoever started it
(torchrun, or corral train). All-reduces rank+1 and checks the sum."""
import os
import sys

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
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
