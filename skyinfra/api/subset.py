"""Where and how a call of the Python API queues on the head: ``nodes=K`` (any K free nodes,
as `run --nodes K`), ``nodes=[2, 0]`` (those nodes, in rank order, once they are free: the
head's ``supervise --on``), ``priority=N`` (as `run --priority N`). Every call is a job in the
head's queue with ports of its own: its world is numbered from 0 in rank order
(``instance_info().node`` is the index in the call; JAX or torch see only its processes).
`run --nodes` spells the same on the command line (parse_nodes_option): ``K`` or ``0,2``.

A call on named nodes used to run as a cluster of its own (its own topology, node 1 as its
head), beside the head's queue and its port allocation: a job running there met it."""

from __future__ import annotations

from collections.abc import Sequence

from skyinfra.errors import UsageError
from skyinfra.topology import Topology

# As `run --priority N` (click.IntRange there).
PRIORITY_RANGE = (-1000, 1000)


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


def selected_nodes(
    nodes: Sequence[int] | None, topology: Topology, shown: str | None = None
) -> list[int] | None:
    """The cluster's node indices a call runs on (None: every node); UsageError naming the
    value (``shown``: as the caller spelled it, default ``nodes=[...]``) and the valid range."""
    if nodes is None:
        return None
    total = len(topology.nodes)
    said = shown or f"nodes={nodes!r}"
    valid = f"a non-empty list of distinct node indices from 0 to {total - 1}"
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, Sequence) or not nodes:
        raise UsageError(f"{said}: expected {valid}")
    chosen = list(nodes)
    for i in chosen:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < total:
            raise UsageError(
                f"{said}: {i!r} is not a node of cluster {topology.cluster!r} ({total} "
                f"node(s)); expected {valid}"
            )
    twice = sorted({i for i in chosen if chosen.count(i) > 1})
    if twice:
        raise UsageError(f"{said}: node {', '.join(map(str, twice))} named twice; expected {valid}")
    return None if chosen == list(range(total)) else chosen


def parse_nodes_option(text: str) -> int | tuple[int, ...]:
    """`run --nodes`'s value, the CLI spelling of the API's ``nodes=``: ``K`` (an integer, at
    least 1) asks for K nodes, any free ones; a comma-separated list (``0,2``; one node is
    ``1,``, as Python's one-tuple ``(1,)``) names the nodes, in rank order. Checked against the
    cluster later (selected_nodes); ValueError saying what is wrong otherwise."""
    text = text.strip()
    if "," not in text:
        try:
            count = int(text)
        except ValueError:
            raise ValueError(
                f"{text!r} is neither a node count nor a list of nodes; expected K (an integer, "
                "at least 1: any K free nodes) or node indices separated by commas (0,2; one "
                "node: 1,)"
            ) from None
        if count < 1:
            raise ValueError(f"{text!r}: a job needs at least 1 node; expected K >= 1")
        return count
    parts = [p.strip() for p in text.split(",")]
    if parts and parts[-1] == "":  # the trailing comma of a one-node list
        parts.pop()
    if not any(parts):
        raise ValueError(f"{text!r}: an empty list of nodes; expected node indices (0,2; 1,)")
    indices = []
    for part in parts:
        if not part.isdigit():
            raise ValueError(
                f"{text!r}: {part!r} is not a node index; expected node indices (integers from "
                "0) separated by commas"
            )
        indices.append(int(part))
    return tuple(indices)


def priority_of(priority: object) -> int:
    """``priority=N``: an integer in PRIORITY_RANGE; UsageError naming the value otherwise."""
    low, high = PRIORITY_RANGE
    if isinstance(priority, bool) or not isinstance(priority, int) or not low <= priority <= high:
        raise UsageError(f"priority={priority!r}: expected an integer from {low} to {high}")
    return priority
