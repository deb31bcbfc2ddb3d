"""A torchrun-style script that knows nothing of skyinfra: its own init_process_group, a few
DDP steps, then what it saw (environment, argv, sys.path[0], weights) into --out DIR."""

import argparse
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

launched = dist.is_torchelastic_launched()  # before init: what Lightning checks first
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)  # different on purpose: DDP broadcasts rank 0's initial weights
model = DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4, generator=torch.Generator().manual_seed(rank))
for _ in range(args.steps):
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()
flat = torch.cat([p.detach().flatten() for p in model.module.parameters()])
with open(os.path.join(args.out, f"rank-{rank}.json"), "w") as f:
    json.dump(
        {
            "name": __name__,
            "argv": sys.argv,
            "path0": sys.path[0],
            "cwd": os.getcwd(),
            "launched": launched,
            "rank": rank,
            "world": world,
            "env": dict(os.environ),
            "weights": hashlib.sha256(flat.numpy().tobytes()).hexdigest(),
        },
        f,
    )
dist.destroy_process_group()
