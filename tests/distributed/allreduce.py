"""The workers' program of the distributed test: a real gloo all-reduce (run by torchrun
from .venv-torch, which reads the console's PET_* variables)."""

import os
import sys
import time

import torch
import torch.distributed as dist

started = time.time()
dist.init_process_group("gloo")  # env://: MASTER_ADDR/PORT, RANK, WORLD_SIZE (torchrun's)
joined = time.time()
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
expected = world * (world + 1) / 2
print(
    f"RESULT rank={rank} world={world} sum={value.item():g} expected={expected:g} "
    f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
    f"attempt={os.environ['ATTEMPT']} started={started:.3f} joined={joined:.3f}",
    flush=True,
)
dist.barrier()
dist.destroy_process_group()
if value.item() != expected:
    sys.exit(3)
# The fault: rank 1 of the first attempt fails after its all-reduce, so fault tolerance
# restarts the whole (Synchronous) job, which must meet again at the new rendezvous.
if os.environ["ATTEMPT"] == "1" and rank == 1:
    print("failing on purpose", flush=True)
    sys.exit(1)
