"""Terraform outputs -> topology dict, schema 1 (README.md). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyinfra.errors import WorkspaceError
from skyinfra.spec import ClusterSpec

SCHEMA = 1
NODE_FIELDS = ("index", "name", "private_ip", "public_ip", "instance_id", "accelerator")


def _accelerator(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if (
        not isinstance(value, Mapping)
        or not isinstance(value.get("type"), str)
        or not isinstance(value.get("count"), int)
    ):
        raise WorkspaceError(
            f"terraform output {where}.accelerator: expected null or {{type, count}}, got {value!r}"
        )
    return {"type": value["type"], "count": value["count"]}


def topology_from_outputs(outputs: Mapping[str, Any], spec: ClusterSpec) -> dict[str, Any]:
    """Build the topology the runtime reads; a malformed output names what is wrong."""
    for key in ("head_addr", "head_port", "nodes"):
        if key not in outputs:
            raise WorkspaceError(
                f"terraform output {key!r} is missing; the root module must define it"
            )
    nodes_out = outputs["nodes"]
    if not isinstance(nodes_out, Mapping) or not nodes_out:
        raise WorkspaceError(
            "terraform output 'nodes': expected a non-empty map keyed by node name, "
            f"got {nodes_out!r}"
        )
    nodes: list[dict[str, Any]] = []
    for key, node in nodes_out.items():
        where = f"nodes[{key!r}]"
        if not isinstance(node, Mapping):
            raise WorkspaceError(f"terraform output {where}: expected an object, got {node!r}")
        missing = [f for f in ("index", "private_ip", "instance_id") if f not in node]
        if missing:
            raise WorkspaceError(f"terraform output {where} lacks {', '.join(missing)}")
        index = node["index"]
        if isinstance(index, float) and index.is_integer():
            index = int(index)  # Terraform numbers arrive as JSON numbers
        if not isinstance(index, int) or isinstance(index, bool):
            raise WorkspaceError(
                f"terraform output {where}.index: expected an integer, got {index!r}"
            )
        nodes.append(
            {
                "index": index,
                "name": str(node.get("name", key)),
                "private_ip": str(node["private_ip"]),
                "public_ip": node.get("public_ip"),
                "instance_id": str(node["instance_id"]),
                "accelerator": _accelerator(node.get("accelerator"), where),
            }
        )
    nodes.sort(key=lambda n: n["index"])
    indices = [n["index"] for n in nodes]
    if indices != list(range(len(nodes))):
        raise WorkspaceError(
            f"terraform output 'nodes': indices must be 0..{len(nodes) - 1}, got {indices}"
        )
    head_port = outputs["head_port"]
    if isinstance(head_port, float) and head_port.is_integer():
        head_port = int(head_port)
    if not isinstance(head_port, int) or isinstance(head_port, bool):
        raise WorkspaceError(
            f"terraform output 'head_port': expected an integer, got {head_port!r}"
        )
    return {
        "schema": SCHEMA,
        "cluster": outputs.get("cluster", spec.name),
        "provider": outputs.get("provider", spec.provider),
        "head_addr": str(outputs["head_addr"]),
        "head_port": head_port,
        "procs_per_node": spec.procs_per_node,
        "plugins": [{"name": p.name, "options": dict(p.options)} for p in spec.plugins],
        "nodes": nodes,
    }
