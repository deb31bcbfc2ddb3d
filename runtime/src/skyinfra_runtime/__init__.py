"""skyinfra-runtime: the worker side of skyinfra.

Reads the cluster topology, sets up jax / keras / torch around the user's entrypoint, and
offers ``instance_info()``, ``shard()`` and output control to user code. Depends on nothing
beyond the standard library; frameworks are imported only when used.
"""

from skyinfra_runtime import plugins
from skyinfra_runtime.errors import EntrypointError, PluginError, RuntimeSetupError, TopologyError
from skyinfra_runtime.info import InstanceInfo, Peer, instance_info
from skyinfra_runtime.output import silent, stderr, stdout
from skyinfra_runtime.shard import shard, shard_indices
from skyinfra_runtime.spot import preemption_deadline, seconds_left
from skyinfra_runtime.topology import Topology, load_topology

__version__ = "0.1.0"

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
