"""The cluster's topology, built in one place: the runtime's :class:`Topology` (schema 1).

``build_topology`` makes it from the spec and the nodes; ``topology_from_outputs`` reads the
nodes from Terraform's outputs (after apply), and the AWS target's pre-boot copy for
cloud-init (before any node exists) calls ``build_topology`` with the planned addresses.
cluster, provider, head_port, procs_per_node and plugins come from the spec; outputs that say
otherwise are refused. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from skyinfra_runtime.errors import TopologyError as RuntimeTopologyError
from skyinfra_runtime.topology import SCHEMA, Accelerator, Node, Topology, WayIn

from skyinfra.errors import TopologyError, WorkspaceError
from skyinfra.spec import ClusterSpec

__all__ = [
    "SCHEMA",
    "Accelerator",
    "Node",
    "Topology",
    "WayIn",
    "build_topology",
    "read_topology",
    "topology_from_outputs",
]


def build_topology(
    spec: ClusterSpec, *, head_addr: str, nodes: Iterable[Node], way_in: WayIn | None = None
) -> Topology:
    """The topology of ``spec``'s cluster with these nodes (and the way in to them, on a
    private network), checked as the runtime reads it."""
    ordered = tuple(sorted(nodes, key=lambda n: n.index))
    indices = [n.index for n in ordered]
    if indices != list(range(len(ordered))):
        raise TopologyError(
            f"terraform output 'nodes': indices must be 0..{len(ordered) - 1}, got {indices}"
        )
    if len(ordered) != spec.nodes:
        raise TopologyError(
            f"terraform output 'nodes' has {len(ordered)} node(s); the spec asks for {spec.nodes}"
        )
    topology = Topology(
        cluster=spec.name,
        provider=spec.provider,
        head_addr=head_addr,
        head_port=spec.head_port,
        nodes=ordered,
        procs_per_node=spec.procs_per_node,
        plugins=spec.plugins,
        way_in=way_in,
        warm_workers=spec.warm_workers,
    )
    try:  # what the nodes will read: refuse here what the runtime would refuse there
        Topology.from_dict(topology.to_dict())
    except RuntimeTopologyError as err:
        raise TopologyError(f"the topology of cluster {spec.name!r} is not valid: {err}") from None
    return topology


def _integer(value: Any, where: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # Terraform numbers arrive as JSON numbers
    if not isinstance(value, int) or isinstance(value, bool):
        raise TopologyError(f"terraform output {where}: expected an integer, got {value!r}")
    return value


def _accelerator(value: Any, where: str) -> Accelerator | None:
    if value is None:
        return None
    if (
        not isinstance(value, Mapping)
        or not isinstance(value.get("type"), str)
        or not isinstance(value.get("count"), int | float)
    ):
        raise TopologyError(
            f"terraform output {where}.accelerator: expected null or {{type, count}}, got {value!r}"
        )
    return Accelerator(type=value["type"], count=_integer(value["count"], f"{where}.accelerator"))


def _node(key: str, node: Any) -> Node:
    where = f"nodes[{key!r}]"
    if not isinstance(node, Mapping):
        raise TopologyError(f"terraform output {where}: expected an object, got {node!r}")
    missing = [f for f in ("index", "private_ip", "instance_id") if f not in node]
    if missing:
        raise TopologyError(f"terraform output {where} lacks {', '.join(missing)}")
    public_ip = node.get("public_ip")
    return Node(
        index=_integer(node["index"], f"{where}.index"),
        name=str(node.get("name", key)),
        private_ip=str(node["private_ip"]),
        public_ip=None if public_ip is None else str(public_ip),
        instance_id=str(node["instance_id"]),
        accelerator=_accelerator(node.get("accelerator"), where),
    )


def _way_in(network: Any, nodes: Iterable[Node]) -> WayIn | None:
    """The way in named by the optional ``network`` output (a private network): the bastion,
    with its public address and instance, or a node of the cluster by name."""
    if network is None:
        return None
    where = "terraform output 'network'"
    if not isinstance(network, Mapping) or not isinstance(network.get("way_in"), str):
        raise TopologyError(f"{where}: expected an object with way_in, got {network!r}")
    name = network["way_in"]
    by_name = {node.name: node for node in nodes}
    if name in by_name:
        node = by_name[name]
        if not node.public_ip:
            raise TopologyError(f"{where}: the way in, {name}, has no public address")
        return WayIn(name=name, public_ip=node.public_ip, node=node.index)
    public_ip, instance_id = network.get("bastion_public_ip"), network.get("bastion_instance_id")
    if not isinstance(public_ip, str) or not public_ip or not isinstance(instance_id, str):
        raise TopologyError(
            f"{where}: the way in is {name!r}, which needs bastion_public_ip and "
            f"bastion_instance_id (or a node's name), got {network!r}"
        )
    user = network.get("bastion_user")
    if user is not None and not (isinstance(user, str) and user):
        raise TopologyError(f"{where}: bastion_user is {user!r}; expected a login user name")
    return WayIn(name=name, public_ip=public_ip, instance_id=instance_id, user=user)


def topology_from_outputs(outputs: Mapping[str, Any], spec: ClusterSpec) -> Topology:
    """Build the topology the runtime reads; a malformed output names what is wrong."""
    for key in ("head_addr", "head_port", "nodes"):
        if key not in outputs:
            raise TopologyError(
                f"terraform output {key!r} is missing; the root module must define it"
            )
    nodes_out = outputs["nodes"]
    if not isinstance(nodes_out, Mapping) or not nodes_out:
        raise TopologyError(
            "terraform output 'nodes': expected a non-empty map keyed by node name, "
            f"got {nodes_out!r}"
        )
    head_port = _integer(outputs["head_port"], "'head_port'")
    expected = {
        "schema": SCHEMA,
        "cluster": spec.name,
        "provider": spec.provider,
        "head_port": spec.head_port,
    }
    given = {**{k: outputs[k] for k in expected if k in outputs}, "head_port": head_port}
    for key, value in expected.items():
        if key in given and given[key] != value:
            raise TopologyError(
                f"terraform output {key!r} is {given[key]!r} but the spec says {value!r};"
                " the workspace's root module does not match its spec (run `skyinfra up` again)"
            )
    nodes = [_node(str(key), node) for key, node in nodes_out.items()]
    return build_topology(
        spec,
        head_addr=str(outputs["head_addr"]),
        nodes=nodes,
        way_in=_way_in(outputs.get("network"), nodes),
    )


def read_topology(path: Path) -> Topology:
    """A workspace's topology.json, read as the runtime reads it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkspaceError(
            f"{path} is missing (the cluster is down); run `skyinfra up` first"
        ) from None
    except json.JSONDecodeError as err:
        raise WorkspaceError(f"{path} is not valid JSON ({err})") from None
    try:
        return Topology.from_dict(data)
    except RuntimeTopologyError as err:
        raise TopologyError(f"{path}: {err}") from None
