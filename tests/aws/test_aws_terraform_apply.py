"""Real Terraform + the real AWS provider against moto's server: apply, outputs, destroy."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from aws_tf import MODULES, REGION, Terraform

from skyinfra.aws.endpoints import Emulator
from skyinfra.aws.render import AwsClusterParams, planned_private_ips, render_root_module

pytestmark = pytest.mark.slow

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOXdhYvR9XJ8xq0f1m8c1u1YV0qg7r5n0bq6yFZ9y6Qk test"


def write_root(tmp_path: Path, params: AwsClusterParams, emulator: Emulator) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    files = render_root_module(
        params,
        modules_source=os.path.relpath(MODULES, root),
        user_data={name: "#cloud-config\n{}\n" for name in planned_private_ips(params)},
        emulator=emulator,
    )
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def count_cluster_resources(ec2, cluster: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    tag = [{"Name": "tag:skyinfra:cluster", "Values": [cluster]}]
    named = [{"Name": "tag:Name", "Values": [f"{cluster}-*"]}]
    live = [
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}
    ]
    instances = [
        inst
        for res in ec2.describe_instances(Filters=tag + live)["Reservations"]
        for inst in res["Instances"]
    ]
    return {
        "instances": len(instances),
        "security_groups": len(
            ec2.describe_security_groups(
                Filters=[{"Name": "group-name", "Values": [f"{cluster}-nodes"]}]
            )["SecurityGroups"]
        ),
        "subnets": len(ec2.describe_subnets(Filters=named)["Subnets"]),
        "vpcs": len(ec2.describe_vpcs(Filters=named)["Vpcs"]),
    }


def test_two_node_apply_topology_and_destroy(
    terraform: Terraform,
    aws_env: str,
    ec2,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    params = AwsClusterParams(
        cluster_name="moto-two",
        region=REGION,
        availability_zone=f"{REGION}a",
        instance_type="t3.micro",
        ami_id="ami-12c6146b",  # one of moto's built-in AMIs
        node_count=2,
        ssh_public_key=SSH_KEY,
        ssh_ingress_cidrs=["203.0.113.7/32"],
    )
    root = write_root(tmp_path, params, Emulator(url=aws_env))
    terraform(root, "init", "-input=false", "-no-color").check()
    try:
        terraform(root, "apply", "-auto-approve", "-input=false", "-no-color").check()
        topology = terraform.output(root)["topology"]
        assert sorted(topology) == ["node-0", "node-1"]
        assert {name: node["private_ip"] for name, node in topology.items()} == {
            "node-0": "10.42.0.10",
            "node-1": "10.42.0.11",
        }
        assert [topology[n]["index"] for n in ("node-0", "node-1")] == [0, 1]
        ids = [node["instance_id"] for node in topology.values()]
        described = ec2.describe_instances(InstanceIds=ids)["Reservations"]
        found = {i["InstanceId"]: i for r in described for i in r["Instances"]}
        assert sorted(found) == sorted(ids)
        for node in topology.values():
            instance = found[node["instance_id"]]
            assert instance["PrivateIpAddress"] == node["private_ip"]
            assert instance["Placement"]["AvailabilityZone"] == node["availability_zone"]
            assert instance["MetadataOptions"]["HttpTokens"] == "required"
        assert count_cluster_resources(ec2, "moto-two") == {
            "instances": 2,
            "security_groups": 1,
            "subnets": 1,
            "vpcs": 1,
        }
    finally:
        terraform(root, "destroy", "-auto-approve", "-input=false", "-no-color").check()
    assert count_cluster_resources(ec2, "moto-two") == {
        "instances": 0,
        "security_groups": 0,
        "subnets": 0,
        "vpcs": 0,
    }


def test_plan_with_placement_group_and_efa(
    terraform: Terraform, aws_env: str, tmp_path: Path
) -> None:
    params = AwsClusterParams(
        cluster_name="moto-efa",
        region=REGION,
        availability_zone=f"{REGION}a",
        instance_type="p4d.24xlarge",
        ami_id="ami-12c6146b",
        node_count=2,
        ssh_public_key=SSH_KEY,
        ssh_ingress_cidrs=["203.0.113.7/32"],
        placement_group=True,
        efa_interface_count=4,  # p4d.24xlarge: 4 network cards, one EFA each
    )
    root = write_root(tmp_path, params, Emulator(url=aws_env))
    terraform(root, "init", "-input=false", "-no-color").check()
    terraform(root, "plan", "-input=false", "-no-color", "-out=tfplan").check()
    plan = json.loads(terraform(root, "show", "-json", "tfplan").check().stdout)
    creates = [c for c in plan["resource_changes"] if c["change"]["actions"] == ["create"]]
    created = {c["address"]: c["change"]["after"] for c in creates}
    unknown = {c["address"]: c["change"]["after_unknown"] for c in creates}
    groups = [a for a in created if a.startswith("module.nodes.aws_placement_group.")]
    assert groups == ["module.nodes.aws_placement_group.this[0]"]
    assert created[groups[0]]["strategy"] == "cluster"
    efa = {a: v for a, v in created.items() if ".aws_network_interface.efa[" in a}
    assert len(efa) == 8
    assert {v["interface_type"] for v in efa.values()} == {"efa"}
    primary = created['module.nodes.aws_network_interface.efa["node-1/0"]']
    assert primary["private_ips"] == ["10.42.0.11"]
    instance = created['module.nodes.aws_instance.this["node-0"]']
    # The group's id is known only after apply: the plan shows it as a pending reference.
    assert unknown['module.nodes.aws_instance.this["node-0"]']["placement_group"] is True
    assert "subnet_id" not in instance or instance["subnet_id"] is None
    cards = sorted(
        (ni["network_card_index"], ni["device_index"]) for ni in instance["network_interface"]
    )
    assert cards == [(0, 0), (1, 1), (2, 1), (3, 1)]
    assert instance["instance_type"] == "p4d.24xlarge"
