"""``instance_info()``: where this process sits in the cluster."""

from __future__ import annotations

import os
from dataclasses import dataclass

from skyinfra_runtime.errors import TopologyError
from skyinfra_runtime.topology import (
    NODE_ENV,
    TOPOLOGY_ENV,
    WORKER_ENV,
    WORKERS_PER_NODE_ENV,
    Topology,
    load_topology,
    node_index,
)


@dataclass(frozen=True)
class Peer:
    """One node of the cluster with its addresses (every node, this one included)."""

    index: int
    name: str
    private_ip: str
    public_ip: str | None
    instance_id: str | None


@dataclass(frozen=True)
class InstanceInfo:
    """This process's place in the cluster.

    ``node`` is the machine's index; ``worker`` the process's index on that machine when a node
    runs several processes (one per GPU for torch). Ranks, sharding and ``is_head`` all use
    ``global_index = node * workers_per_node + worker``.
    """

    node: int
    total_nodes: int
    head_addr: str
    head_port: int
    accelerators: int
    accelerator_type: str | None
    peers: tuple[Peer, ...]
    cluster: str
    provider: str
    worker: int = 0
    workers_per_node: int = 1

    @property
    def global_index(self) -> int:
        return self.node * self.workers_per_node + self.worker

    @property
    def total_workers(self) -> int:
        return self.total_nodes * self.workers_per_node

    @property
    def is_head(self) -> bool:
        return self.global_index == 0

    @classmethod
    def build(
        cls, topology: Topology, node: int, worker: int = 0, workers_per_node: int = 1
    ) -> InstanceInfo:
        if not 0 <= worker < workers_per_node:
            raise TopologyError(
                f"worker index {worker} is out of range for {workers_per_node} worker(s) per node"
            )
        me = topology.nodes[node]
        return cls(
            node=node,
            total_nodes=len(topology.nodes),
            head_addr=topology.head_addr,
            head_port=topology.head_port,
            accelerators=me.accelerator.count if me.accelerator else 0,
            accelerator_type=me.accelerator.type if me.accelerator else None,
            peers=tuple(
                Peer(n.index, n.name, n.private_ip, n.public_ip, n.instance_id)
                for n in topology.nodes
            ),
            cluster=topology.cluster,
            provider=topology.provider,
            worker=worker,
            workers_per_node=workers_per_node,
        )


_cache: dict[tuple[str | None, ...], InstanceInfo] = {}


def instance_info() -> InstanceInfo:
    """The current process's :class:`InstanceInfo`, read from the environment.

    Outside a cluster (no ``SKYINFRA_TOPOLOGY``) this is node 0 of 1, worker 0 of 1.
    """
    key = tuple(
        os.environ.get(name) for name in (TOPOLOGY_ENV, NODE_ENV, WORKER_ENV, WORKERS_PER_NODE_ENV)
    )
    cached = _cache.get(key)
    if cached is not None:
        return cached
    topology = load_topology()
    info = InstanceInfo.build(
        topology,
        node_index(topology),
        worker=_env_int(WORKER_ENV, 0),
        workers_per_node=_env_int(WORKERS_PER_NODE_ENV, 1),
    )
    _cache.clear()
    _cache[key] = info
    return info


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise TopologyError(f"environment variable {name}={raw!r} is not an integer") from None
