"""PyTorch DistributedDataParallel across nodes (gloo on CPU, nccl on GPU), as a function.

    skyinfra up --name ddp --nodes 2 --plugin torch
    skyinfra run examples/torch_ddp.py:main

The torch plugin sets MASTER_ADDR/PORT, RANK, WORLD_SIZE... and calls init_process_group;
DDP averages gradients, so every rank ends with the same parameters (same checksum).
A torchrun script (its own init_process_group) runs unchanged too: see torchrun_ddp.py.
"""

from __future__ import annotations

import hashlib


def main(steps: int = 30) -> dict[str, object]:
    import torch
    import torch.distributed as dist
    from skyinfra_runtime import shard
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)  # same data and initial weights on every rank
    x = torch.randn(512, 8)
    true_w = torch.arange(1.0, 9.0)
    y = x @ true_w + 0.01 * torch.randn(512)
    x_local, y_local = shard(x, y, shuffle=True, seed=42, drop_last=True)

    # On GPU nodes the plugin picks nccl and pins this process to its GPU: the model and the
    # data must live there (an nccl group cannot broadcast CPU tensors).
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
        x_local, y_local = x_local.to(device), y_local.to(device)
        model = DistributedDataParallel(torch.nn.Linear(8, 1).to(device), device_ids=[device.index])
    else:
        model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x_local).squeeze(-1), y_local)
        loss.backward()
        optimizer.step()

    digest = hashlib.sha256()
    for p in model.module.parameters():
        digest.update(p.detach().cpu().numpy().tobytes())
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "local_samples": len(x_local),
        "final_loss": round(loss.item(), 4),
        "weights_sha256": digest.hexdigest(),
    }


if __name__ == "__main__":
    # As a script (`torchrun examples/torch_ddp.py`, `skyinfra run examples/torch_ddp.py`) it
    # initialises the process group itself, as torchrun scripts do; as a function the plugin does.
    import os

    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    print(main())
    dist.destroy_process_group()
