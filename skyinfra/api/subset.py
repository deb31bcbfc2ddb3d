"""A call on some of the cluster's nodes (``cluster.run(fn, nodes=[0, 2])``): those nodes run
it as a cluster of their own, numbered from 0 in the order given (the runtime's topology holds
consecutive indices: ``instance_info().node`` is the index in the call, and JAX or torch see
only these processes). A transport that maps the call's index to the cluster's node, and the
call's own topology."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from skyinfra.errors import UsageError
from skyinfra.topology import Topology
from skyinfra.transport.base import NodeProcess, NodeTransport, Readiness
from skyinfra.transport.nodesync import Entries
from skyinfra.transport.tree import CopyStats


def world_size(nodes: Sequence[int] | int | None, topology: Topology) -> int | None:
    """``nodes=K`` (an integer): K of the cluster's nodes, any free ones the head picks, as
    `run --nodes K` (None: not an integer); UsageError naming K and the valid range."""
    if isinstance(nodes, bool) or not isinstance(nodes, int):
        return None
    total = len(topology.nodes)
    if not 1 <= nodes <= total:
        raise UsageError(
            f"nodes={nodes!r}: cluster {topology.cluster!r} has {total} node(s); expected 1 to "
            f"{total} (any free ones), or a list of node indices"
        )
    return nodes


def selected_nodes(nodes: Sequence[int] | None, topology: Topology) -> list[int] | None:
    """The cluster's node indices a call runs on (None: every node); UsageError naming the
    value and the valid range."""
    if nodes is None:
        return None
    total = len(topology.nodes)
    valid = f"a non-empty list of distinct node indices from 0 to {total - 1}"
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, Sequence) or not nodes:
        raise UsageError(f"nodes={nodes!r}: expected {valid}")
    chosen = list(nodes)
    for i in chosen:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < total:
            raise UsageError(f"nodes={nodes!r}: {i!r} is not a node; expected {valid}")
    if len(set(chosen)) != len(chosen):
        raise UsageError(f"nodes={nodes!r}: a node is named twice; expected {valid}")
    return None if chosen == list(range(total)) else chosen


def sub_topology(topology: Topology, chosen: Sequence[int]) -> Topology:
    nodes = tuple(dataclasses.replace(topology.nodes[i], index=k) for k, i in enumerate(chosen))
    return dataclasses.replace(topology, nodes=nodes, head_addr=nodes[0].private_ip)


class SubsetTransport:
    """``inner`` seen through the call's node numbers (k -> chosen[k]): every verb of
    NodeTransport, and nothing of a target's own (a call's run needs no more)."""

    def __init__(self, inner: NodeTransport, chosen: Sequence[int]) -> None:
        self.inner = inner
        self.chosen = list(chosen)

    def node_root(self, node: int) -> str:
        return self.inner.node_root(self.chosen[node])

    def readiness(self, node: int) -> Readiness:
        return self.inner.readiness(self.chosen[node])

    def copy_tree(self, node: int, src: Path, wanted: Entries, run_id: str) -> CopyStats:
        return self.inner.copy_tree(self.chosen[node], src, wanted, run_id)

    def put_file(self, node: int, src: Path, dest: str) -> None:
        self.inner.put_file(self.chosen[node], src, dest)

    def start(
        self,
        node: int,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        tag: str,
        stdin: bytes | None = None,
    ) -> NodeProcess:
        return self.inner.start(self.chosen[node], argv, env=env, cwd=cwd, tag=tag, stdin=stdin)

    def fetch(self, node: int, remote: str, local: Path) -> bool:
        return self.inner.fetch(self.chosen[node], remote, local)

    def node_gone(self, node: int) -> bool:
        return self.inner.node_gone(self.chosen[node])

    def close(self) -> None:
        self.inner.close()


def restore_topology(inner: NodeTransport, chosen: Sequence[int], topology_file: Path) -> None:
    """Put the cluster's own topology back on the nodes a call ran on (`verify` compares it)."""
    for i in chosen:
        inner.put_file(i, topology_file, f"{inner.node_root(i)}/topology.json")
