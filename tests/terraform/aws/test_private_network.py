"""Issue 46 at plan level: a private network through real Terraform and the real AWS provider
against moto's server, one plan (no apply) shared by every assertion. Two EFA nodes
(p4d.24xlarge, four cards each) behind a bastion: no node has a public address or an Elastic
IP, the S3 gateway endpoint is in the nodes' route table, the bastion is the only public
instance, there is no NAT gateway and no default route, and plan.md shows the network's shape.
The cluster has aws.ssm too (one plan for both: a second costs about 5 CPU-seconds), which
changes none of that and proves the root's wiring of Session Manager: the interface endpoints
and the nodes' role's managed policy.

NAT on and off, no SSM endpoints without aws.ssm and node 0 as the way in are the network
module's `terraform test` runs (infra/modules/aws/network/tests); the guardrail's cases are
unit tests (tests/unit/review/test_network.py)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from skyinfra.review import markdown
from skyinfra.review.cost import shipped_table
from skyinfra.review.network import shape_lines
from skyinfra.review.report import ClusterFacts, build_review
from skyinfra.targets.aws.endpoints import Emulator
from skyinfra.targets.aws.render import AwsClusterParams, PrivateNetwork
from tests.support.aws import DUMMY_AWS_ENV, REGION, TerraformFactory, write_root
from tests.support.golden_plans import check_golden

pytestmark = pytest.mark.slow

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOXdhYvR9XJ8xq0f1m8c1u1YV0qg7r5n0bq6yFZ9y6Qk test"
BASTION = "module.bastion[0].aws_instance.this"
# One of moto's own images: the nodes' (the bastion looks up its own).
AMI = "ami-12c6146b"
STAGING_BUCKET = "skyinfra-staging-123456789012-us-east-1"
WHEELHOUSE = "_wheelhouse/" + "a" * 64 + "/"


@pytest.fixture(scope="module")
def plan(
    terraform: TerraformFactory, moto_url: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    params = AwsClusterParams(
        cluster_name="moto-private",
        region=REGION,
        availability_zone=f"{REGION}a",
        instance_type="p4d.24xlarge",
        ami_id=AMI,
        node_count=2,
        ssh_public_key=SSH_KEY,
        ssh_ingress_cidrs=["203.0.113.7/32"],
        placement_group=True,
        efa_interface_count=4,
        private_network=PrivateNetwork(bastion=True, ssm=True),
        staging=(STAGING_BUCKET, "moto-private/ws-0123456789abcdef/"),
        wheelhouse_prefix=WHEELHOUSE,
    )
    # The provider block holds the emulator's dummy credentials: no environment needed.
    root = write_root(tmp_path_factory.mktemp("private"), params, Emulator(url=moto_url))
    engine = terraform(root)
    engine.init()
    engine.plan(out="tfplan")
    found: dict[str, Any] = engine.show_plan("tfplan")
    return found


def created(plan: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        c["address"]: c["change"]["after"]
        for c in plan["resource_changes"]
        if c["type"] == kind and c["change"]["actions"] == ["create"]
    }


def test_no_node_has_a_public_address_or_an_elastic_ip(plan: dict[str, Any]) -> None:
    instances = created(plan, "aws_instance")
    nodes = {a: i for a, i in instances.items() if a.startswith("module.nodes.")}
    assert len(nodes) == 2
    # EFA nodes launch with their own interfaces: no public address can be asked for on
    # them, and no Elastic IP is planned anywhere but for a NAT gateway (none here).
    assert all(not i.get("associate_public_ip_address") for i in nodes.values())
    assert created(plan, "aws_eip") == {}
    efa = created(plan, "aws_network_interface")
    assert len(efa) == 8
    subnets = created(plan, "aws_subnet")
    nodes_subnet = subnets["module.network.aws_subnet.this[0]"]
    assert nodes_subnet["map_public_ip_on_launch"] is False
    assert nodes_subnet["cidr_block"] == "10.42.0.0/24"


def test_the_bastion_is_the_only_public_instance(plan: dict[str, Any], moto_url: str) -> None:
    public = [
        a for a, i in created(plan, "aws_instance").items() if i.get("associate_public_ip_address")
    ]
    assert public == [BASTION]
    bastion = created(plan, "aws_instance")[BASTION]
    assert bastion["instance_type"] == "t3.micro"
    # Its own small image, not the nodes': the newest Amazon Linux 2023 minimal moto knows,
    # found by the bastion module's lookup. Its gp3 disk is 8 GiB, or the image's snapshot
    # when larger: moto gives every image a 15 GiB one (EC2's AL2023 minimal's is smaller, the
    # module's terraform test proves the 8 GiB); never the nodes' 200 GB.
    ec2 = boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=moto_url,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )
    assert bastion["ami"] != AMI
    (image,) = ec2.describe_images(ImageIds=[bastion["ami"]])["Images"]
    assert image["Name"].startswith("al2023-ami-minimal-") and image["Architecture"] == "x86_64"
    (root,) = [
        m for m in image["BlockDeviceMappings"] if m["DeviceName"] == image["RootDeviceName"]
    ]
    disk = bastion["root_block_device"][0]
    assert disk["volume_size"] == max(8, root["Ebs"]["VolumeSize"]) < 200
    assert disk["volume_type"] == "gp3"
    assert bastion["metadata_options"][0]["http_tokens"] == "required"
    public_subnet = created(plan, "aws_subnet")["module.network.aws_subnet.public[0]"]
    assert public_subnet["cidr_block"] == "10.42.255.240/28"
    rules = created(plan, "aws_vpc_security_group_ingress_rule")
    bastion_in = [r["cidr_ipv4"] for a, r in rules.items() if a.startswith("module.bastion")]
    assert bastion_in == ["203.0.113.7/32"]
    # The nodes' group takes SSH from the bastion's group only: no CIDR rule on port 22.
    node_ssh = {
        a: r
        for a, r in rules.items()
        if a.startswith("module.security.") and r.get("to_port") == 22
    }
    assert list(node_ssh) == [
        "module.security.aws_vpc_security_group_ingress_rule.ssh_from_group[0]"
    ]
    assert node_ssh[next(iter(node_ssh))].get("cidr_ipv4") is None


def test_the_nodes_reach_s3_through_the_gateway_endpoint_and_nothing_else(
    plan: dict[str, Any],
) -> None:
    endpoints = created(plan, "aws_vpc_endpoint")
    gateways = [a for a, e in endpoints.items() if e["vpc_endpoint_type"] == "Gateway"]
    assert gateways == ["module.network.aws_vpc_endpoint.s3[0]"]
    s3 = endpoints["module.network.aws_vpc_endpoint.s3[0]"]
    assert s3["vpc_endpoint_type"] == "Gateway"
    assert s3["service_name"] == f"com.amazonaws.{REGION}.s3"
    # In the nodes' route table: the reference is resolved at apply, the plan names it.
    config = plan["configuration"]["root_module"]["module_calls"]["network"]["module"]
    endpoint = next(r for r in config["resources"] if r["address"] == "aws_vpc_endpoint.s3")
    assert (
        endpoint["expressions"]["route_table_ids"]["references"][0] == "aws_route_table.this[0].id"
    )
    # No NAT gateway, and the only default route is the public subnet's (bastion) one.
    assert created(plan, "aws_nat_gateway") == {}
    routes = {
        a: r
        for a, r in created(plan, "aws_route").items()
        if r["destination_cidr_block"] == "0.0.0.0/0"
    }
    assert list(routes) == ["module.network.aws_route.public_internet[0]"]
    egress = created(plan, "aws_vpc_security_group_egress_rule")
    open_egress = [a for a, r in egress.items() if r.get("cidr_ipv4") == "0.0.0.0/0"]
    assert open_egress == []


def test_plan_md_shows_the_network_and_the_guardrail_passes(plan: dict[str, Any]) -> None:
    review = build_review(
        plan,
        ClusterFacts(cluster="moto-private", target="aws", region=REGION, max_lifetime_hours=8),
        planfile_sha256="0" * 64,
        table=shipped_table(),
    )
    assert review.passed, review.checks
    egress = [c for c in review.checks if c.name == "Internet egress"]
    assert [c.reason for c in egress] == ["egress: S3 endpoint only; no route to 0.0.0.0/0"]
    text = markdown.render(review)
    check_golden("aws-private-bastion", text)
    assert review.to_dict()["network"] == list(review.network)


def test_the_nodes_role_reads_the_wheelhouse_and_plan_md_names_it(plan: dict[str, Any]) -> None:
    """The S3 wheelhouse (shared by the account's clusters): read-only, its prefix only."""
    policy = json.loads(
        created(plan, "aws_iam_role_policy")["module.nodes.aws_iam_role_policy.staged_read[0]"][
            "policy"
        ]
    )
    [statement] = policy["Statement"]
    assert statement["Action"] == "s3:GetObject"
    arn = f"arn:aws:s3:::{STAGING_BUCKET}/"
    assert sorted(statement["Resource"]) == sorted(
        [f"{arn}moto-private/ws-0123456789abcdef/*", f"{arn}{WHEELHOUSE}*"]
    )
    lines = shape_lines(plan, shipped_table(), REGION)
    assert (
        f"**Packages**: from the S3 wheelhouse `s3://{STAGING_BUCKET}/{WHEELHOUSE}`"
        in "\n".join(lines)
    )


def test_ssm_plans_the_session_manager_endpoints_and_the_nodes_managed_policy(
    plan: dict[str, Any],
) -> None:
    """aws.ssm's root wiring (its modules' parts are their terraform tests): the ssm,
    ssmmessages and ec2messages interface endpoints in the nodes' subnet with private DNS,
    HTTPS to them from the VPC only, and AmazonSSMManagedInstanceCore on the nodes' role."""
    interface = {
        a: e
        for a, e in created(plan, "aws_vpc_endpoint").items()
        if e["vpc_endpoint_type"] == "Interface"
    }
    assert sorted(e["service_name"] for e in interface.values()) == [
        f"com.amazonaws.{REGION}.{name}" for name in ("ec2messages", "ssm", "ssmmessages")
    ]
    assert all(e["private_dns_enabled"] for e in interface.values())
    config = plan["configuration"]["root_module"]["module_calls"]["network"]["module"]
    endpoint = next(r for r in config["resources"] if r["address"] == "aws_vpc_endpoint.interface")
    assert endpoint["expressions"]["subnet_ids"]["references"][0] == "aws_subnet.this[0].id"
    https_in = created(plan, "aws_vpc_security_group_ingress_rule")[
        "module.network.aws_vpc_security_group_ingress_rule.endpoints[0]"
    ]
    assert (https_in["from_port"], https_in["to_port"], https_in["cidr_ipv4"]) == (
        443,
        443,
        "10.42.0.0/16",
    )
    attached = created(plan, "aws_iam_role_policy_attachment").values()
    assert [a["policy_arn"] for a in attached] == [
        "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
    ]
