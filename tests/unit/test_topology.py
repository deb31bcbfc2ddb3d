"""Terraform outputs -> topology (schema 1), and what a malformed output reports.

The operator builds the runtime's own ``Topology``; its ``to_dict()`` is topology.json."""

from __future__ import annotations

import re
from typing import Any

import pytest
from skyinfra_runtime.errors import TopologyError as RuntimeTopologyError
from skyinfra_runtime.topology import Topology, WayIn

from skyinfra.errors import TopologyError
from skyinfra.spec import validate_spec
from skyinfra.targets.aws.cluster_files import preboot_topology
from skyinfra.targets.aws.render import AwsClusterParams
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
    assert isinstance(topo, Topology)
    assert topo.to_dict() == {
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
    # What the runtime reads back is what the operator built.
    assert Topology.from_dict(topo.to_dict()) == topo


def test_ten_nodes_sort_by_index_not_name() -> None:
    outs = outputs()
    outs["nodes"] = {
        f"node-{i}": {"index": i, "private_ip": f"127.0.0.{2 + i}", "instance_id": f"i-{i}"}
        for i in range(10)
    }
    topo = topology_from_outputs(outs, validate_spec({"name": "demo", "nodes": 10}))
    assert [n.index for n in topo.nodes] == list(range(10))


def test_the_network_output_names_the_way_in() -> None:
    """A private network's `network` output (issue 46) becomes the topology's way in: the
    bastion with its address and instance, or a node by name; the runtime reads it back."""
    outs = outputs()
    outs["network"] = {"kind": "private", "way_in": "bastion", "bastion_public_ip": "198.51.100.7",
                       "bastion_private_ip": "10.42.255.244", "bastion_instance_id": "i-b",
                       "nat_gateway_id": None}  # fmt: skip
    topo = topology_from_outputs(outs, SPEC)
    assert topo.way_in == WayIn("bastion", "198.51.100.7", instance_id="i-b")
    assert Topology.from_dict(topo.to_dict()) == topo
    # The bastion's own login user (its image's), carried to the runtime's reader.
    outs["network"]["bastion_user"] = "ec2-user"
    topo = topology_from_outputs(outs, SPEC)
    assert topo.way_in == WayIn("bastion", "198.51.100.7", instance_id="i-b", user="ec2-user")
    assert Topology.from_dict(topo.to_dict()) == topo
    outs["network"] = {"kind": "private", "way_in": "node-0", "bastion_public_ip": None}
    outs["nodes"]["node-0"]["public_ip"] = "198.51.100.1"
    assert topology_from_outputs(outs, SPEC).way_in == WayIn("node-0", "198.51.100.1", node=0)
    # A public network's file is what it was: no way_in key at all.
    assert "way_in" not in topology_from_outputs(outputs(), SPEC).to_dict()
    outs["nodes"]["node-0"]["public_ip"] = None
    with pytest.raises(TopologyError, match="the way in, node-0, has no public address"):
        topology_from_outputs(outs, SPEC)
    with pytest.raises(RuntimeTopologyError, match="way_in field 'node' is 5"):
        Topology.from_dict({**topo.to_dict(), "way_in": {"name": "n", "public_ip": "x", "node": 5}})


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
        # cluster, provider and head_port come from the spec; outputs that disagree are refused.
        (lambda o: o.__setitem__("cluster", "other"), "'cluster' is 'other' but the spec says"),
        (lambda o: o.__setitem__("provider", "aws"), "'provider' is 'aws' but the spec says"),
        (lambda o: o.__setitem__("head_port", 29600), "'head_port' is 29600 but the spec says"),
        (lambda o: o.__setitem__("schema", 2), "'schema' is 2 but the spec says 1"),
        (lambda o: o["nodes"].pop("node-1"), "has 1 node(s); the spec asks for 2"),
        (lambda o: o["nodes"]["node-0"].__setitem__("private_ip", ""), "'private_ip'"),
    ],
)
def test_malformed_outputs_name_the_problem(mutate: Any, message: str) -> None:
    outs = outputs()
    mutate(outs)
    with pytest.raises(TopologyError, match=re.escape(message)):
        topology_from_outputs(outs, SPEC)


def test_aws_preboot_topology_comes_from_the_same_builder() -> None:
    """cloud-init's copy (before boot) equals the one from outputs, less what EC2 assigns."""
    spec = validate_spec(
        {
            "name": "gpu",
            "provider": "aws",
            "nodes": 2,
            "procs_per_node": "auto",
            "plugins": ["jax", "torch:backend=gloo"],
            "aws": {
                "region": "us-east-1",
                "instance_type": "g5.xlarge",
                "ssh_cidrs": ["10.0.0.0/8"],
            },
        }
    )
    params = AwsClusterParams(
        cluster_name="gpu",
        region="us-east-1",
        availability_zone="us-east-1a",
        instance_type="g5.xlarge",
        ami_id="ami-0123456789abcdef0",
        node_count=2,
        ssh_public_key="ssh-ed25519 AAAA",
        accelerator=("A10G", 1),
    )
    before = preboot_topology(spec, params)
    accel = {"type": "A10G", "count": 1}
    after = topology_from_outputs(
        {
            "cluster": "gpu",
            "provider": "aws",
            "head_addr": "10.42.0.10",
            "head_port": 29500,
            "nodes": {
                f"node-{i}": {"index": i, "name": f"node-{i}", "private_ip": f"10.42.0.1{i}",
                              "public_ip": f"198.51.100.{i}", "instance_id": f"i-{i}",
                              "availability_zone": "us-east-1a", "accelerator": accel}
                for i in range(2)
            },
        },
        spec,
    )  # fmt: skip
    assert before.to_dict()["schema"] == 1
    assert [(n.private_ip, n.public_ip, n.instance_id) for n in before.nodes] == [
        ("10.42.0.10", None, None),
        ("10.42.0.11", None, None),
    ]
    blank = [{**n, "public_ip": None, "instance_id": None} for n in after.to_dict()["nodes"]]
    assert before.to_dict() == {**after.to_dict(), "nodes": blank}
    assert before.plugins[1].options == {"backend": "gloo"}
    assert Topology.from_dict(before.to_dict()) == before
