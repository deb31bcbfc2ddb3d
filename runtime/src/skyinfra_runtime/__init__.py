"""skyinfra-runtime: the worker side of skyinfra.

Reads the cluster topology, sets up jax / keras / torch around the user's entrypoint, and
offers ``instance_info()``, ``shard()`` and output control to user code. Depends on nothing
beyond the standard library; frameworks are imported only when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyinfra_runtime import plugins
    from skyinfra_runtime.errors import (
        EntrypointError,
        PluginError,
        RuntimeSetupError,
        TopologyError,
    )
    from skyinfra_runtime.info import InstanceInfo, Peer, instance_info
    from skyinfra_runtime.output import silent, stderr, stdout
    from skyinfra_runtime.shard import shard, shard_indices
    from skyinfra_runtime.spot import preemption_deadline, seconds_left
    from skyinfra_runtime.topology import Topology, load_topology

__version__ = "0.1.0"

# The public names and the module each comes from, imported when first used: every node
# command (`skyinfra-runtime jobs`, `supervise`, ...) imports this package, and most need none
# of them (the plugins alone were half of a node command's start).
_PUBLIC = {
    "EntrypointError": "skyinfra_runtime.errors",
    "PluginError": "skyinfra_runtime.errors",
    "RuntimeSetupError": "skyinfra_runtime.errors",
    "TopologyError": "skyinfra_runtime.errors",
    "InstanceInfo": "skyinfra_runtime.info",
    "Peer": "skyinfra_runtime.info",
    "instance_info": "skyinfra_runtime.info",
    "silent": "skyinfra_runtime.output",
    "stderr": "skyinfra_runtime.output",
    "stdout": "skyinfra_runtime.output",
    "shard": "skyinfra_runtime.shard",
    "shard_indices": "skyinfra_runtime.shard",
    "preemption_deadline": "skyinfra_runtime.spot",
    "seconds_left": "skyinfra_runtime.spot",
    "Topology": "skyinfra_runtime.topology",
    "load_topology": "skyinfra_runtime.topology",
}

__all__ = [
    "EntrypointError",
    "InstanceInfo",
    "Peer",
    "PluginError",
    "RuntimeSetupError",
    "Topology",
    "TopologyError",
    "instance_info",
    "load_topology",
    "plugins",
    "preemption_deadline",
    "seconds_left",
    "shard",
    "shard_indices",
    "silent",
    "stderr",
    "stdout",
]


def __getattr__(name: str) -> Any:
    if name == "plugins":
        return importlib.import_module("skyinfra_runtime.plugins")
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'skyinfra_runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later uses are a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
