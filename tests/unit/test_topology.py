"""Terraform outputs -> topology (schema 1), and what a malformed output reports."""

from __future__ import annotations

from typing import Any

import pytest

from skyinfra.errors import WorkspaceError
from skyinfra.spec import validate_spec
from skyinfra.topology import topology_from_outputs

SPEC = validate_spec({"name": "demo", "nodes": 2, "plugins": ["jax", "keras:backend=jax"]})


def outputs() -> dict[str, Any]:
    # Shape of `terraform output -json` values from the local root module; nodes keyed by name,
    # in Terraform's (lexical) key order, and numbers as JSON numbers.
    return {
        "schema": 1,
        "cluster": "demo",
        "provider": "local",
        "head_addr": "127.0.0.2",
        "head_port": 29500,
        "nodes": {
            "node-1": {"index": 1, "name": "node-1", "private_ip": "127.0.0.3", "public_ip": None,
                       "instance_id": "local-demo-1", "accelerator": {"type": "A100", "count": 8},
                       "node_dir": "/x/node-1"},
            "node-0": {"index": 0, "name": "node-0", "private_ip": "127.0.0.2", "public_ip": None,
                       "instance_id": "local-demo-0", "accelerator": None, "node_dir": "/x/node-0"},
        },
    }  # fmt: skip


def test_topology_matches_the_readme_contract() -> None:
    topo = topology_from_outputs(outputs(), SPEC)
    assert topo == {
        "schema": 1,
        "cluster": "demo",
        "provider": "local",
        "head_addr": "127.0.0.2",
        "head_port": 29500,
        "procs_per_node": 1,
        "plugins": [
            {"name": "jax", "options": {}},
            {"name": "keras", "options": {"backend": "jax"}},
        ],
        "nodes": [
            {"index": 0, "name": "node-0", "private_ip": "127.0.0.2", "public_ip": None,
             "instance_id": "local-demo-0", "accelerator": None},
            {"index": 1, "name": "node-1", "private_ip": "127.0.0.3", "public_ip": None,
             "instance_id": "local-demo-1", "accelerator": {"type": "A100", "count": 8}},
        ],
    }  # fmt: skip


def test_ten_nodes_sort_by_index_not_name() -> None:
    outs = outputs()
    outs["nodes"] = {
        f"node-{i}": {"index": i, "private_ip": f"127.0.0.{2 + i}", "instance_id": f"i-{i}"}
        for i in range(10)
    }
    topo = topology_from_outputs(outs, SPEC)
    assert [n["index"] for n in topo["nodes"]] == list(range(10))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o.pop("head_addr"), "'head_addr' is missing"),
        (lambda o: o.__setitem__("nodes", {}), "non-empty map"),
        (lambda o: o["nodes"]["node-0"].pop("private_ip"), "lacks private_ip"),
        (lambda o: o["nodes"]["node-0"].__setitem__("index", "zero"), "index: expected an integer"),
        (lambda o: o["nodes"]["node-1"].__setitem__("index", 5), "indices must be 0..1"),
        (
            lambda o: o["nodes"]["node-1"].__setitem__("accelerator", {"type": "A100"}),
            "accelerator",
        ),
        (lambda o: o.__setitem__("head_port", "29500"), "'head_port': expected an integer"),
    ],
)
def test_malformed_outputs_name_the_problem(mutate: Any, message: str) -> None:
    outs = outputs()
    mutate(outs)
    with pytest.raises(WorkspaceError, match=message.replace("(", r"\(").replace(".", r"\.")):
        topology_from_outputs(outs, SPEC)
