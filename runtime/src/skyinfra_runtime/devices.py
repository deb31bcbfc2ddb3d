"""Which GPUs each worker process of a node uses: pure arithmetic, checked before any wait.

NCCL does not support one CUDA device shared by several ranks ("is not supported and may lead
to hangs", NCCL user guide, Creating a Communicator), so a mapping never puts two processes on
one GPU: more processes than GPUs is refused, not wrapped around.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from skyinfra_runtime.errors import PluginError

_NVIDIA_DEVICE = re.compile(r"nvidia\d+")


def node_gpus(
    topology_count: int,
    provider: str,
    *,
    dev: Path = Path("/dev"),
    env: Mapping[str, str] = os.environ,
) -> int:
    """The node's GPUs: the topology's count, else (an instance type the operator could not
    describe) what this machine shows: CUDA_VISIBLE_DEVICES when set, else one
    ``/dev/nvidiaN`` file per GPU (the driver's device nodes; no framework needed). Not on
    the local target: its nodes share one machine, whose GPUs are no node's own."""
    if topology_count > 0 or provider == "local":
        return topology_count
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        return sum(1 for p in dev.iterdir() if _NVIDIA_DEVICE.fullmatch(p.name))
    except OSError:
        return 0


def torch_procs(procs: int, gpus: int, *, chosen: bool) -> int:
    """Processes per node for torch on a node with ``gpus`` GPUs (0: none, or unknown).

    torch runs one process per GPU (the DDP docstring: "on a host with N GPUs, you should
    spawn up N processes, ensuring that each process exclusively works on a single GPU"), so
    the default of one process per node becomes one per GPU; a count the user ``chosen``
    explicitly (other than 1) is kept, but never more processes than GPUs.
    """
    if gpus > 1 and procs == 1 and not chosen:
        procs = gpus
    if gpus > 0:
        _check(0, procs, gpus, "torch")
    return procs


def torch_device(local_rank: int, procs: int, gpus: int) -> int:
    """The GPU of process ``local_rank`` of ``procs`` on a node with ``gpus`` GPUs: its local
    rank (what torchrun scripts pass to ``torch.cuda.set_device``), distinct per process."""
    _check(local_rank, procs, gpus, "torch")
    return local_rank


def jax_local_devices(worker: int, procs: int, gpus: int) -> list[int] | None:
    """``local_device_ids`` for worker ``worker`` of ``procs``: None when one process owns every
    GPU of the node (or the count is unknown: JAX then sees them all); else a contiguous block
    of ``gpus // procs`` GPUs, the blocks together covering every GPU once."""
    if procs == 1 or gpus == 0:
        return None
    _check(worker, procs, gpus, "jax")
    if gpus % procs:
        raise PluginError(
            f"jax: {procs} processes per node cannot split {gpus} GPUs evenly; use a"
            f" procs_per_node that divides {gpus} (e.g. 1 or {gpus})"
        )
    per = gpus // procs
    return list(range(worker * per, (worker + 1) * per))


def _check(worker: int, procs: int, gpus: int, framework: str) -> None:
    if not 0 <= worker < procs:
        raise PluginError(f"worker {worker} is out of range for {procs} processes per node")
    if procs > gpus:
        raise PluginError(
            f"{framework}: {procs} processes per node but the node has {gpus} GPU(s); two"
            " processes on one GPU can hang NCCL: set procs_per_node to at most"
            f' {gpus} ("auto": one per GPU)'
        )
