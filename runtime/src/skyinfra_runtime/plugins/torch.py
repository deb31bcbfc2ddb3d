"""torch plugin: the torchrun environment and ``init_process_group``; destroy at the end."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta

from skyinfra_runtime.errors import PluginError
from skyinfra_runtime.info import InstanceInfo
from skyinfra_runtime.plugins.base import init_timeout
from skyinfra_runtime.plugins.table import validate_plugin
from skyinfra_runtime.topology import Topology


@dataclass
class TorchPlugin:
    backend: str | None = None
    init_timeout: float | str | None = None
    name: str = field(default="torch", init=False)
    _initialized: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        validate_plugin(
            "torch",
            {
                k: v
                for k, v in (("backend", self.backend), ("init_timeout", self.init_timeout))
                if v is not None
            },
        )

    def setup(self, info: InstanceInfo, topology: Topology) -> None:
        timeout = init_timeout(self.init_timeout)
        # The variables torchrun would set, so code written for torchrun runs unchanged.
        os.environ.update(
            MASTER_ADDR=topology.head_addr,
            MASTER_PORT=str(topology.torch_port),
            WORLD_SIZE=str(info.total_workers),
            RANK=str(info.global_index),
            LOCAL_RANK=str(info.worker),
            LOCAL_WORLD_SIZE=str(info.workers_per_node),
            NODE_RANK=str(info.node),
            GROUP_RANK=str(info.node),
        )
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            raise PluginError("plugin 'torch' needs torch installed on the node") from None
        backend = self.backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            if not torch.cuda.is_available():
                raise PluginError("torch backend 'nccl' needs CUDA, which this node does not have")
            # One process per GPU: pin it before the process group touches a device.
            torch.cuda.set_device(info.worker % torch.cuda.device_count())
        try:
            dist.init_process_group(
                backend=backend, init_method="env://", timeout=timedelta(seconds=timeout)
            )
        except Exception as exc:
            raise PluginError(
                f"torch init_process_group({backend!r}) failed for rank {info.global_index} of"
                f" {info.total_workers} (rendezvous {topology.head_addr}:{topology.torch_port},"
                f" timeout {timeout:g}s): {exc}"
            ) from exc
        self._initialized = True

    def teardown(self, failed: bool = False) -> None:
        if self._initialized:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._initialized = False
