"""A short real collective across all nodes with the cluster's jax and torch plugins."""

from __future__ import annotations

import pytest

from skyinfra.verify.collective import collective_topology
from skyinfra.verify.context import VerifyContext


def test_collective(cluster: VerifyContext, node: int) -> None:
    if collective_topology(cluster.topology, 1.0) is None:
        pytest.skip("n/a: the cluster has no jax or torch plugin")
    held = cluster.ports_held_by_a_job()
    if held is not None:
        pytest.skip(held)
    outcome = cluster.collective()[node]
    assert outcome.ok, outcome.reason
