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
