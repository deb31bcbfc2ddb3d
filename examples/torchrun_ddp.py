"""A plain torchrun training script: nothing in it knows about skyinfra.

On one machine:       torchrun --nproc-per-node=2 examples/torchrun_ddp.py --epochs 3
On a skyinfra cluster: skyinfra up --name ddp --nodes 2 --plugin torch
                       skyinfra run examples/torchrun_ddp.py -- --epochs 3

It reads the variables torchrun sets (LOCAL_RANK; init_process_group reads RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT), initialises the process group itself and trains a linear model
with DistributedDataParallel: gloo on CPU, nccl with one GPU per process on GPU nodes. Every
rank prints the same weights checksum at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        # One GPU per process, chosen by LOCAL_RANK, before the group touches a device.
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same data on every rank; each takes its own rows
    x = torch.randn(480, 8)
    y = x @ torch.arange(1.0, 9.0) + 0.01 * torch.randn(480)
    rows = len(x) // world * world  # the same number of rows (hence steps) on every rank
    x_local, y_local = x[rank:rows:world].to(device), y[rank:rows:world].to(device)

    torch.manual_seed(rank)  # different initial weights on purpose: DDP broadcasts rank 0's
    model = torch.nn.Linear(8, 1).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss = torch.tensor(0.0)
    for _ in range(args.epochs):
        for start in range(0, len(x_local), 20):
            optimizer.zero_grad()
            out = ddp(x_local[start : start + 20]).squeeze(-1)
            loss = torch.nn.functional.mse_loss(out, y_local[start : start + 20])
            loss.backward()
            optimizer.step()

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().numpy().tobytes())
    # One write per line: the processes of a node share its output, and print() writes the
    # text and the newline separately when Python runs unbuffered (as torchrun's -u does).
    sys.stdout.write(
        f"rank {rank}/{world} epochs={args.epochs} loss={loss.item():.4f}"
        f" weights_sha256={digest.hexdigest()}\n"
    )
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
