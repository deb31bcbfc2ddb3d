"""Topologies the operator-side tests build by hand (the runtime's own tests use
tests/integration/runtime/launch_harness.topology, which writes the JSON the launcher reads)."""

from __future__ import annotations

from skyinfra.topology import Node, Topology


def local_topology(count: int) -> Topology:
    """A local cluster `c` of ``count`` nodes on 127.0.0.2, 127.0.0.3, ..."""
    return Topology(
        cluster="c",
        provider="local",
        head_addr="127.0.0.2",
        head_port=29500,
        nodes=tuple(
            Node(i, f"node-{i}", f"127.0.0.{2 + i}", None, f"local-c-{i}") for i in range(count)
        ),
    )
