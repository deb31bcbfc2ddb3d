"""Entries for the GPU checks: what torch's and JAX's plugins give a process on a GPU node."""

from __future__ import annotations


def torch_nccl() -> dict[str, object]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    device = torch.device("cuda", torch.cuda.current_device())
    total = torch.full((1,), dist.get_rank() + 1.0, device=device)
    dist.all_reduce(total)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1).to(device), device_ids=[device.index])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 8, device=device)
    for _ in range(3):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
    torch.cuda.synchronize()
    return {
        "backend": dist.get_backend(),
        "world": dist.get_world_size(),
        "device": str(device),
        "parameters_on": str(next(model.parameters()).device),
        "all_reduce": total.item(),
    }


def jax_gpu() -> dict[str, object]:
    import jax
    import jax.numpy as jnp

    total = (jnp.arange(4.0) * 2).sum()
    return {
        "platform": jax.devices()[0].platform,
        "computed_on": sorted(d.platform for d in total.devices()),
        "process_count": jax.process_count(),
        "local_devices": jax.local_device_count(),
        "sum": float(total),
    }


def jax_gpu_held() -> dict[str, object]:
    """Compute on the GPU, then hold it (its context open) until the test's go file exists."""
    import os
    import time
    from pathlib import Path

    import jax.numpy as jnp

    total = float((jnp.arange(4.0) * 2).sum().block_until_ready())
    Path(os.environ["HELD_FILE"]).write_text(str(os.getpid()))
    while not Path(os.environ["GO_FILE"]).exists():
        time.sleep(0.05)
    return {"sum": total, "pid": os.getpid()}


def jax_gpu_first_step() -> dict[str, object]:
    """The wall-clock time at which this worker's first GPU computation finished."""
    import time

    import jax
    import jax.numpy as jnp

    total = float((jnp.arange(4.0) * 2).sum().block_until_ready())
    return {"at": time.time(), "sum": total, "platform": jax.devices()[0].platform}


def torch_nccl_held() -> dict[str, object]:
    """torch_nccl's DDP steps on NCCL, then hold the GPU until the test's go file exists."""
    import os
    import time
    from pathlib import Path

    value = torch_nccl()
    Path(os.environ["HELD_FILE"]).write_text(str(os.getpid()))
    while not Path(os.environ["GO_FILE"]).exists():
        time.sleep(0.05)
    return {**value, "pid": os.getpid()}


def torch_first_step() -> dict[str, object]:
    """The wall-clock time at which this worker's first all-reduce on its GPU finished."""
    import time

    import torch
    import torch.distributed as dist

    total = torch.ones(1, device=torch.device("cuda", torch.cuda.current_device()))
    dist.all_reduce(total)
    torch.cuda.synchronize()
    return {"at": time.time(), "backend": dist.get_backend(), "sum": total.item()}
