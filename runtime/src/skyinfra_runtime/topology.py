"""Topology schema 1: the cluster as the operator wrote it, read on every node.

Found through ``SKYINFRA_TOPOLOGY`` (a file path or inline JSON); the node's own index comes
from ``SKYINFRA_NODE``. With neither set the process is node 0 of a one-node cluster, so the
same script runs unchanged on a laptop. Every problem is a :class:`TopologyError` naming the
field, never an AssertionError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyinfra_runtime.errors import TopologyError

SCHEMA = 1
TOPOLOGY_ENV = "SKYINFRA_TOPOLOGY"
NODE_ENV = "SKYINFRA_NODE"
WORKER_ENV = "SKYINFRA_WORKER"
WORKERS_PER_NODE_ENV = "SKYINFRA_WORKERS_PER_NODE"
DEFAULT_HEAD_PORT = 29500


@dataclass(frozen=True)
class Accelerator:
    type: str
    count: int


@dataclass(frozen=True)
class Node:
    index: int
    name: str
    private_ip: str
    public_ip: str | None
    # None before boot: the copy cloud-init writes on an AWS node is rendered before EC2 has
    # assigned instance ids; `skyinfra run` ships the complete file.
    instance_id: str | None
    accelerator: Accelerator | None = None


@dataclass(frozen=True)
class WayIn:
    """The one host the operator reaches a private network's nodes through (ProxyJump): a
    bastion outside the nodes, or a node of the cluster (``node``, its index). The nodes
    never use it; the operator's skyinfra reads it from topology.json to dial them."""

    name: str
    public_ip: str
    # The bastion's instance (its console shows its host keys); None for a node, whose
    # instance is its own entry's.
    instance_id: str | None = None
    node: int | None = None
    # The way in's own login user (a bastion boots its own image); None: the nodes' user.
    user: str | None = None


@dataclass(frozen=True)
class PluginRef:
    """A plugin named in the topology (the operator writes the spec's plugins there)."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Topology:
    cluster: str
    provider: str
    head_addr: str
    head_port: int
    nodes: tuple[Node, ...]
    procs_per_node: int | str = 1
    plugins: tuple[PluginRef, ...] = ()
    # None: every node is reached at its own address (a public network).
    way_in: WayIn | None = None
    # The spec's warm_workers: nodes keep standby workers (skyinfra_runtime.standbys).
    warm_workers: bool = True

    @property
    def jax_port(self) -> int:
        """The jax coordinator listens on the base port."""
        return self.head_port

    @property
    def torch_port(self) -> int:
        """torch's rendezvous gets its own port: sharing one with jax breaks both."""
        return self.head_port + 1

    @classmethod
    def single_node(cls) -> Topology:
        """The implicit cluster outside skyinfra: node 0 of 1 on this machine."""
        return cls(
            cluster="local",
            provider="none",
            head_addr="127.0.0.1",
            head_port=DEFAULT_HEAD_PORT,
            nodes=(Node(0, "node-0", "127.0.0.1", None, "local-0", None),),
        )

    @classmethod
    def from_dict(cls, data: object) -> Topology:
        if not isinstance(data, Mapping):
            raise TopologyError(f"topology must be a JSON object, got {type(data).__name__}")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise TopologyError(
                f"topology field 'schema' is {schema!r}; this runtime reads schema {SCHEMA}"
            )
        head_port = _int(data, "head_port", "topology", low=1, high=65534)
        raw_nodes = _required(data, "nodes", "topology")
        if not isinstance(raw_nodes, list) or not raw_nodes:
            raise TopologyError("topology field 'nodes' must be a non-empty list of nodes")
        nodes = tuple(_node(raw, i) for i, raw in enumerate(raw_nodes))
        for position, node in enumerate(sorted(nodes, key=lambda n: n.index)):
            if node.index != position:
                raise TopologyError(
                    f"topology field 'nodes' has indices {sorted(n.index for n in nodes)};"
                    f" expected 0..{len(nodes) - 1}, each once"
                )
        procs = data.get("procs_per_node", 1)
        if procs != "auto" and not (isinstance(procs, int) and not isinstance(procs, bool)):
            raise TopologyError(
                f"topology field 'procs_per_node' is {procs!r}; expected an integer >= 1 or 'auto'"
            )
        if isinstance(procs, int) and procs < 1:
            raise TopologyError(f"topology field 'procs_per_node' is {procs}; expected >= 1")
        warm = data.get("warm_workers", True)
        if not isinstance(warm, bool):
            raise TopologyError(f"topology field 'warm_workers' is {warm!r}; expected a boolean")
        return cls(
            cluster=_str(data, "cluster", "topology"),
            provider=_str(data, "provider", "topology"),
            head_addr=_str(data, "head_addr", "topology"),
            head_port=head_port,
            nodes=tuple(sorted(nodes, key=lambda n: n.index)),
            procs_per_node=procs,
            plugins=_plugins(data.get("plugins", [])),
            way_in=_way_in(data.get("way_in"), len(nodes)),
            warm_workers=warm,
        )

    def to_dict(self) -> dict[str, Any]:
        # way_in only when there is one: a public cluster's file is what it was.
        way_in = (
            {}
            if self.way_in is None
            else {
                "way_in": {
                    "name": self.way_in.name,
                    "public_ip": self.way_in.public_ip,
                    "instance_id": self.way_in.instance_id,
                    "node": self.way_in.node,
                    # Only when it has its own: a file from before it reads the same.
                    **({} if self.way_in.user is None else {"user": self.way_in.user}),
                }
            }
        )
        return {
            "schema": SCHEMA,
            "cluster": self.cluster,
            "provider": self.provider,
            "head_addr": self.head_addr,
            "head_port": self.head_port,
            "procs_per_node": self.procs_per_node,
            "plugins": [{"name": p.name, "options": dict(p.options)} for p in self.plugins],
            "nodes": [
                {
                    "index": n.index,
                    "name": n.name,
                    "private_ip": n.private_ip,
                    "public_ip": n.public_ip,
                    "instance_id": n.instance_id,
                    "accelerator": (
                        {"type": n.accelerator.type, "count": n.accelerator.count}
                        if n.accelerator
                        else None
                    ),
                }
                for n in self.nodes
            ],
            **way_in,
            # Only when off: a cluster's file is what it was before warm workers.
            **({} if self.warm_workers else {"warm_workers": False}),
        }


def load_topology(source: str | os.PathLike[str] | Mapping[str, Any] | None = None) -> Topology:
    """Read the topology from ``source`` (path, inline JSON or dict) or ``SKYINFRA_TOPOLOGY``."""
    if source is None:
        source = os.environ.get(TOPOLOGY_ENV) or None
        if source is None:
            return Topology.single_node()
    if isinstance(source, Mapping):
        return Topology.from_dict(source)
    text = os.fspath(source)
    if text.lstrip()[:1] in ("{", "["):
        origin = "inline topology JSON"
    else:
        path = Path(text)
        if not path.is_file():
            raise TopologyError(
                f"topology {text!r} is neither an existing file nor inline JSON (an object)"
            )
        origin = f"topology file {text!r}"
        text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError(f"{origin} is not valid JSON: {exc}") from None
    return Topology.from_dict(data)


def node_index(topology: Topology, value: str | int | None = None) -> int:
    """This process's node index, from ``value`` or ``SKYINFRA_NODE`` (0 when unset)."""
    if value is None:
        value = os.environ.get(NODE_ENV) or "0"
    try:
        index = int(value)
    except (TypeError, ValueError):
        raise TopologyError(
            f"node index {value!r} ({NODE_ENV}) is not an integer;"
            f" expected 0..{len(topology.nodes) - 1}"
        ) from None
    if not 0 <= index < len(topology.nodes):
        raise TopologyError(
            f"node index {index} is out of range: cluster {topology.cluster!r} has"
            f" {len(topology.nodes)} node(s), so expected 0..{len(topology.nodes) - 1}"
        )
    return index


# ------------------------------------------------------------------------- field readers


def _required(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise TopologyError(f"{where} field {key!r} is missing")
    return data[key]


def _str(data: Mapping[str, Any], key: str, where: str) -> str:
    value = _required(data, key, where)
    if not isinstance(value, str) or not value:
        raise TopologyError(f"{where} field {key!r} is {value!r}; expected a non-empty string")
    return value


def _int(data: Mapping[str, Any], key: str, where: str, *, low: int, high: int) -> int:
    value = _required(data, key, where)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TopologyError(
            f"{where} field {key!r} is {value!r}; expected an integer in {low}..{high}"
        )
    return value


def _node(raw: object, position: int) -> Node:
    where = f"topology nodes[{position}]"
    if not isinstance(raw, Mapping):
        raise TopologyError(f"{where} must be an object, got {type(raw).__name__}")
    public_ip = raw.get("public_ip")
    if public_ip is not None and not isinstance(public_ip, str):
        raise TopologyError(
            f"{where} field 'public_ip' is {public_ip!r}; expected a string or null"
        )
    accel = raw.get("accelerator")
    accelerator = None
    if accel is not None:
        if not isinstance(accel, Mapping):
            raise TopologyError(
                f"{where} field 'accelerator' is {accel!r}; expected {{type, count}} or null"
            )
        accelerator = Accelerator(
            type=_str(accel, "type", f"{where}.accelerator"),
            count=_int(accel, "count", f"{where}.accelerator", low=0, high=1024),
        )
    index = _int(raw, "index", where, low=0, high=1_000_000)
    name = raw.get("name", f"node-{index}")
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{where} field 'name' is {name!r}; expected a non-empty string")
    return Node(
        index=index,
        name=name,
        private_ip=_str(raw, "private_ip", where),
        public_ip=public_ip,
        instance_id=None if raw.get("instance_id") is None else _str(raw, "instance_id", where),
        accelerator=accelerator,
    )


def _plugins(raw: object) -> tuple[PluginRef, ...]:
    if not isinstance(raw, list):
        raise TopologyError(f"topology field 'plugins' is {raw!r}; expected a list")
    refs = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise TopologyError(f"topology plugins[{i}] is {item!r}; expected {{name, options}}")
        name = _str(item, "name", f"topology plugins[{i}]")
        options = item.get("options", {})
        if not isinstance(options, Mapping):
            raise TopologyError(f"topology plugins[{i}] field 'options' must be an object")
        refs.append(PluginRef(name, dict(options)))
    return tuple(refs)


def _way_in(raw: object, node_count: int) -> WayIn | None:
    if raw is None:
        return None
    where = "topology way_in"
    if not isinstance(raw, Mapping):
        raise TopologyError(f"{where} is {raw!r}; expected {{name, public_ip, ...}} or null")
    instance_id = raw.get("instance_id")
    if instance_id is not None and not (isinstance(instance_id, str) and instance_id):
        raise TopologyError(f"{where} field 'instance_id' is {instance_id!r}; expected a string")
    node = None
    if raw.get("node") is not None:
        node = _int(raw, "node", where, low=0, high=node_count - 1)
    return WayIn(
        name=_str(raw, "name", where),
        public_ip=_str(raw, "public_ip", where),
        instance_id=instance_id,
        node=node,
        user=None if raw.get("user") is None else _str(raw, "user", where),
    )
