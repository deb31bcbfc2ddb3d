"""Real Terraform + the real AWS provider against moto's server: the plan with a cluster
placement group and EFA interfaces, which moto cannot apply (it lacks CreatePlacementGroup).

Apply, outputs and destroy of a 2-node cluster are tested through the CLI in test_aws_cli.py
(`skyinfra up/status/down` against moto), with the instances checked through boto3.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyinfra.targets.aws.endpoints import Emulator
from skyinfra.targets.aws.render import AwsClusterParams
from tests.support.aws import REGION, TerraformFactory, write_root

pytestmark = pytest.mark.slow

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOXdhYvR9XJ8xq0f1m8c1u1YV0qg7r5n0bq6yFZ9y6Qk test"


def test_plan_with_placement_group_and_efa(
    terraform: TerraformFactory, aws_env: str, tmp_path: Path
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
    engine = terraform(root)
    engine.init()
    engine.plan(out="tfplan")
    plan = engine.show_plan("tfplan")
    creates = [c for c in plan["resource_changes"] if c["change"]["actions"] == ["create"]]
    created = {c["address"]: c["change"]["after"] for c in creates}
    unknown = {c["address"]: c["change"]["after_unknown"] for c in creates}
    groups = [a for a in created if a.startswith("module.nodes.aws_placement_group.")]
    assert groups == ["module.nodes.aws_placement_group.this[0]"]
    assert created[groups[0]]["strategy"] == "cluster"
    efa = {a: v for a, v in created.items() if ".aws_network_interface.efa[" in a}
    assert len(efa) == 8
    # Card 0 an EFA with ENA holding the fixed address; cards 1-3 EFA-only, without any.
    types = {a.split('"')[1]: v["interface_type"] for a, v in efa.items()}
    assert types == {
        f"node-{n}/{c}": "efa" if c == 0 else "efa-only" for n in (0, 1) for c in range(4)
    }
    primary = created['module.nodes.aws_network_interface.efa["node-1/0"]']
    assert primary["private_ips"] == ["10.42.0.11"]
    secondary = created['module.nodes.aws_network_interface.efa["node-1/2"]']
    assert secondary.get("private_ips") is None and secondary.get("private_ips_count") in (None, 0)
    # Each node is reached through an Elastic IP on its card-0 interface (AWS gives no
    # public address to an instance launched with existing interfaces).
    eips = {a: v for a, v in created.items() if a.startswith("module.nodes.aws_eip.")}
    assert sorted(eips) == [f'module.nodes.aws_eip.node["node-{n}"]' for n in (0, 1)]
    assert eips['module.nodes.aws_eip.node["node-1"]']["associate_with_private_ip"] == "10.42.0.11"
    assert {v["domain"] for v in eips.values()} == {"vpc"}
    assert unknown['module.nodes.aws_eip.node["node-0"]']["network_interface"] is True
    instance = created['module.nodes.aws_instance.this["node-0"]']
    # The group's id is known only after apply: the plan shows it as a pending reference.
    assert unknown['module.nodes.aws_instance.this["node-0"]']["placement_group"] is True
    assert "subnet_id" not in instance or instance["subnet_id"] is None
    cards = sorted(
        (ni["network_card_index"], ni["device_index"]) for ni in instance["network_interface"]
    )
    assert cards == [(0, 0), (1, 1), (2, 1), (3, 1)]
    assert instance["instance_type"] == "p4d.24xlarge"


def test_spot_workers_apply_with_market_options_and_the_head_on_demand(
    terraform: TerraformFactory, aws_env: str, tmp_path: Path
) -> None:
    """Issue 26: the workers Spot (one-time, terminate, capped), the head On-Demand, through
    the real provider; moto records each launch's market (InstanceLifecycle "spot").

    No second plan here: moto gives a Spot instance no SpotInstanceRequestId, which is where
    the provider reads the market options back from, so against moto a re-plan would replace
    the Spot node (seen with provider 5.100.0); EC2 records the request."""
    import boto3

    params = AwsClusterParams(
        cluster_name="moto-spot",
        region=REGION,
        availability_zone=f"{REGION}a",
        instance_type="t3.micro",
        ami_id="ami-12c6146b",
        node_count=2,
        ssh_public_key=SSH_KEY,
        ssh_ingress_cidrs=["203.0.113.7/32"],
        node_markets={"node-0": "on-demand", "node-1": "spot"},
        spot_max_price=0.5,
    )
    root = write_root(tmp_path, params, Emulator(url=aws_env))
    engine = terraform(root)
    engine.init()
    engine.plan(out="tfplan")
    plan = engine.show_plan("tfplan")
    after = {c["address"]: c["change"]["after"] for c in plan["resource_changes"]}
    head = after['module.nodes.aws_instance.this["node-0"]']
    worker = after['module.nodes.aws_instance.this["node-1"]']
    # The head sets none (the provider computes the attribute, so the plan leaves it out).
    assert not head.get("instance_market_options")
    assert [m["market_type"] for m in worker["instance_market_options"]] == ["spot"]
    options = worker["instance_market_options"][0]["spot_options"][0]
    assert options["spot_instance_type"] == "one-time"
    assert options["instance_interruption_behavior"] == "terminate"
    assert options["max_price"] == "0.5000"
    engine.apply("tfplan")
    try:
        ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)
        found = ec2.describe_instances(
            Filters=[{"Name": "tag:skyinfra:cluster", "Values": ["moto-spot"]}]
        )
        lifecycle = {
            next(t["Value"] for t in i["Tags"] if t["Key"] == "skyinfra:node"): i.get(
                "InstanceLifecycle", "on-demand"
            )
            for r in found["Reservations"]
            for i in r["Instances"]
        }
        assert lifecycle == {"node-0": "on-demand", "node-1": "spot"}
    finally:
        engine.destroy()


def test_head_recovery_with_a_wildcard_key_fails_the_module_validation(
    terraform: TerraformFactory, aws_env: str, tmp_path: Path
) -> None:
    """The renderer refuses a wildcard first (test_render.py); the module says why too."""
    params = AwsClusterParams(
        cluster_name="moto-bad",
        region=REGION,
        availability_zone=f"{REGION}a",
        instance_type="t3.micro",
        ami_id="ami-12c6146b",
        node_count=1,
        ssh_public_key=SSH_KEY,
        ssh_ingress_cidrs=["203.0.113.7/32"],
        head_recovery=("team-state", "skyinfra/moto-bad/terraform.tfstate"),
    )
    root = write_root(tmp_path, params, Emulator(url=aws_env))
    tfvars = root / "terraform.tfvars.json"
    values = json.loads(tfvars.read_text())
    values["head_recovery"]["state_key"] = "skyinfra/*/terraform.tfstate"
    values["head_recovery"]["lock_key"] = "skyinfra/*/terraform.tfstate.tflock"
    tfvars.write_text(json.dumps(values))
    engine = terraform(root)
    engine.init()
    code, out, err = engine.command(["plan", "-input=false", "-no-color"])
    assert code != 0
    assert "head_recovery.state_key must be a state object's key in a folder" in out + err
