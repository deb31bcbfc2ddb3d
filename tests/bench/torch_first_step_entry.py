"""The benchmark's torch user code: DDP (gloo on CPU, the torch plugin's process group),
records wall-clock times of its first step, as first_step_entry.py does for Keras."""

from __future__ import annotations

import time
from collections.abc import Callable


def main() -> dict[str, float]:
    return train()


def train(after_step: Callable[[int], None] = lambda step: None) -> dict[str, float]:
    """``after_step``: called with each step's index once it ended (recovery_entry.py's kill)."""
    entered = time.time()  # plugins are set up (torch imported, the group made) before this
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    times: dict[str, float] = {"entered": entered, "imported": time.time()}
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x = torch.randn(512, 32)
    y = (x.sum(dim=1) > 0).float()
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    )
    optimizer = torch.optim.Adam(model.parameters())
    times["fit_start"] = time.time()
    for step in range(len(x) // (world * 32)):  # as many steps on every rank
        start = (step * world + rank) * 32
        optimizer.zero_grad()
        out = model(x[start : start + 32]).squeeze(-1)
        torch.nn.functional.mse_loss(out, y[start : start + 32]).backward()
        optimizer.step()
        times.setdefault("first_step", time.time())
        after_step(step)
    times["done"] = time.time()
    return times
