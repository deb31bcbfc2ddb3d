"""The collective `skyinfra verify` runs on every node through the runtime's launcher, after
the cluster's jax and torch plugins set up: a cross-process sum in each framework.

Entry ``collective.py:main``, args: the frameworks to use (jax, torch). Prints
``skyinfra-verify-collective {json}`` with each framework's sum and the expected one.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> None:
    from skyinfra_runtime import instance_info

    info = instance_info()
    mine = float(info.global_index + 1)
    expected = info.total_workers * (info.total_workers + 1) / 2
    out: dict[str, Any] = {"expected": expected}
    if "jax" in sys.argv[1:]:
        import jax.numpy as jnp
        from jax.experimental import multihost_utils

        gathered = multihost_utils.process_allgather(jnp.array([mine]))
        out["jax"] = float(gathered.sum())
    if "torch" in sys.argv[1:]:
        import torch
        import torch.distributed as dist

        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        value = torch.tensor([mine], device=device)
        dist.all_reduce(value)
        out["torch"] = float(value.item())
        out["torch_backend"] = str(dist.get_backend())
    print("skyinfra-verify-collective " + json.dumps(out), flush=True)
