"""PyTorch DistributedDataParallel across nodes (gloo on CPU, nccl on GPU).

    skyinfra up --name ddp --nodes 2 --plugin torch
    skyinfra run examples/torch_ddp.py:main

The torch plugin sets MASTER_ADDR/PORT, RANK, WORLD_SIZE... and calls init_process_group;
DDP averages gradients, so every rank ends with the same parameters (same checksum).
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
        "final_loss": round(float(loss), 4),
        "weights_sha256": digest.hexdigest(),
    }


if __name__ == "__main__":
    print(main())
