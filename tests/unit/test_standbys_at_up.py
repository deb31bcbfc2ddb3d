"""Which clusters start standby workers once their nodes are ready (skyinfra.lifecycle.
standbys, pure): warm_workers on, plugins that have a standby, and no spec env or secret
naming a framework variable (every job would start cold: a standby would never serve)."""

from __future__ import annotations

from typing import Any

import pytest
from skyinfra_runtime.topology import Node

from skyinfra.lifecycle.standbys import wants_standbys
from skyinfra.spec import validate_spec
from skyinfra.topology import build_topology


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({"plugins": ["jax", "keras:backend=jax"]}, True),
        ({"plugins": ["jax"], "warm_workers": False}, False),
        ({"plugins": ["jax"], "env": {"XLA_FLAGS": "--xla_cpu_use_thunk_runtime=false"}}, False),
        ({"plugins": ["jax"], "secrets": ["JAX_TOKEN"]}, False),
        ({"plugins": ["jax"], "env": {"LEARNING_RATE": "0.1"}}, True),
        ({"plugins": ["torch"]}, True),  # torch standbys too
        ({"plugins": ["keras:backend=tensorflow"]}, False),  # tensorflow's start is not warmed
        ({}, False),
    ],
)
def test_standbys_start_at_up_only_where_a_job_could_use_them(
    fields: dict[str, Any], want: bool
) -> None:
    spec = validate_spec({"name": "warm", "nodes": 2, **fields})
    nodes = [Node(i, f"node-{i}", f"127.0.0.{2 + i}", None, None) for i in range(2)]
    topology = build_topology(spec, head_addr="127.0.0.2", nodes=nodes)
    assert wants_standbys(spec, topology) is want
