#!/usr/bin/env python3
"""A stock PyTorch DDP training script: nothing Cohort-specific.

It reads the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) through
init_method="env://", so it runs unchanged under torchrun, `cohort run -n N`, or as a
Cohort job on many nodes. Each step consumes one global batch of GLOBAL_BATCH samples,
split evenly across ranks by DistributedSampler, so the loss curve is the same for any
world size that divides the global batch.

    cohort submit -N 2 -n 2 -- /usr/bin/python3 examples/ddp_train.py
    /usr/bin/python3 examples/ddp_train.py     # one process (RANK etc. default below)
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    # A single process with no launcher still works.
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()

    steps = int(os.environ.get("STEPS", "40"))
    global_batch = int(os.environ.get("GLOBAL_BATCH", "64"))
    if global_batch % world:
        raise SystemExit(f"GLOBAL_BATCH={global_batch} is not divisible by WORLD_SIZE={world}")

    # Deterministic synthetic regression data, identical on every rank.
    g = torch.Generator().manual_seed(1234)
    n = steps * global_batch
    x = torch.randn(n, 32, generator=g)
    w = torch.randn(32, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(n, 1, generator=g)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(data, batch_size=global_batch // world, sampler=sampler)

    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    for step, (xb, yb) in enumerate(loader):
        loss = nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        global_loss /= world
        if rank == 0 and (step % 10 == 0 or step == steps - 1):
            print(f"step {step} loss {global_loss.item():.6f}", flush=True)
    if rank == 0:
        print(f"final_loss {global_loss.item():.9f} world_size {world}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
