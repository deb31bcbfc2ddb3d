"""torch entries: a few DDP steps (weights checksum) and the ranks each process sees."""

from __future__ import annotations

import hashlib
import os


def ddp_steps() -> dict[str, object]:
    import torch
    import torch.distributed as dist
    from skyinfra_runtime import shard
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(dist.get_rank())  # different on purpose: DDP must broadcast rank 0's
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    x, y = shard(x, y, shuffle=True, seed=3, drop_last=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(5):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {
        "rank": dist.get_rank(),
        "rows": len(x),
        "weights": hashlib.sha256(flat.numpy().tobytes()).hexdigest(),
    }


def ranks() -> dict[str, object]:
    import torch.distributed as dist

    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_PORT")
    seen: dict[str, object] = {name: int(os.environ[name]) for name in names}
    seen["MASTER_ADDR"] = os.environ["MASTER_ADDR"]
    seen["dist_rank"] = dist.get_rank()
    seen["dist_world_size"] = dist.get_world_size()
    seen["backend"] = str(dist.get_backend())
    return seen


def started() -> dict[str, object]:
    """When this rank's function began (time.time())."""
    import time

    import torch.distributed as dist

    return {"rank": dist.get_rank(), "started": time.time()}
