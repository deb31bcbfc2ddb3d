"""Issue 46's review of a private network (pure): the "Network" lines of plan.md and the
"Internet egress" guardrail, on small plans shaped like `terraform show -json`'s. The real
plan of a private network (moto, real Terraform) is tests/terraform/aws/test_private_network.py."""

from __future__ import annotations

from typing import Any

import pytest

from skyinfra.errors import GuardrailError
from skyinfra.guardrail_table import Guardrails, parse_guardrails
from skyinfra.review import markdown
from skyinfra.review.cost import shipped_table
from skyinfra.review.network import (
    NetworkShape,
    egress_check,
    network_hourly,
    shape_hourly,
    shape_lines,
)
from skyinfra.review.report import ClusterFacts, build_review, refuse_failed_guardrails

REGION = "us-east-1"


def change(
    address: str, kind: str, after: dict[str, Any], unknown: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "address": address,
        "type": kind,
        "change": {"actions": ["create"], "after": after, "after_unknown": unknown or {}},
    }


def node(name: str, *, public: bool = False) -> dict[str, Any]:
    return change(
        f'module.nodes.aws_instance.this["{name}"]',
        "aws_instance",
        {
            "instance_type": "g5.xlarge",
            "associate_public_ip_address": public,
            "metadata_options": [{"http_tokens": "required"}],
            "root_block_device": [{"encrypted": True}],
        },
    )


S3 = change(
    "module.network.aws_vpc_endpoint.s3[0]",
    "aws_vpc_endpoint",
    {"vpc_endpoint_type": "Gateway", "service_name": f"com.amazonaws.{REGION}.s3"},
)
NAT = [
    change("module.network.aws_nat_gateway.this[0]", "aws_nat_gateway", {}),
    change(
        "module.network.aws_route.nat[0]",
        "aws_route",
        {"destination_cidr_block": "0.0.0.0/0"},
        {"nat_gateway_id": True},
    ),
]


def plan(*changes: dict[str, Any], network: str | None = "private") -> dict[str, Any]:
    cluster = {"name": "p"} if network is None else {"name": "p", "network": network}
    return {"resource_changes": list(changes), "variables": {"cluster": {"value": cluster}}}


def test_a_public_plan_has_no_network_section_and_no_egress_check() -> None:
    """Public is the behaviour from before issue 46: its nodes reach the internet through
    their own addresses, and no existing spec needs guardrails.allow_internet_egress."""
    public = plan(node("node-0", public=True), network=None)
    assert shape_lines(public, shipped_table(), REGION) == ()
    assert egress_check(public, Guardrails()) is None
    review = build_review(public, ClusterFacts("p", "aws", REGION), planfile_sha256="0" * 64)
    assert "Internet egress" not in {c.name for c in review.checks} and review.passed


def test_nat_fails_the_egress_guardrail_unless_allowed() -> None:
    with_nat = plan(node("node-0"), node("node-1"), S3, *NAT)
    ok, reason = egress_check(with_nat, Guardrails()) or (True, "")
    assert not ok
    assert "module.network.aws_route.nat[0] opens egress to 0.0.0.0/0" in reason
    assert "guardrails.allow_internet_egress = true" in reason
    review = build_review(with_nat, ClusterFacts("p", "aws", REGION), planfile_sha256="0" * 64)
    with pytest.raises(GuardrailError, match="Internet egress"):
        refuse_failed_guardrails(review)
    allowed = Guardrails(allow_internet_egress=True)
    assert egress_check(with_nat, allowed) == (
        True,
        "module.network.aws_route.nat[0] opens egress to 0.0.0.0/0 "
        "(allowed by guardrails.allow_internet_egress)",
    )
    assert parse_guardrails({"allow_internet_egress": True}) == allowed


def test_nat_is_priced_per_hour_and_per_gb() -> None:
    lines = shape_lines(plan(node("node-0"), S3, *NAT), shipped_table(), REGION)
    egress = [line for line in lines if line.startswith("**Egress**")]
    assert egress == [
        "**Egress**: the internet (0.0.0.0/0) through a NAT gateway, $0.0450/h plus $0.0450 per "
        "GB it processes (every package download and checkpoint that does not go to S3); S3 "
        "through its gateway endpoint (free)."
    ]


def test_without_a_bastion_node_0_is_the_one_public_host_and_ssm_is_listed() -> None:
    endpoints = [
        change(
            f'module.network.aws_vpc_endpoint.interface["{name}"]',
            "aws_vpc_endpoint",
            {"vpc_endpoint_type": "Interface", "service_name": f"com.amazonaws.{REGION}.{name}"},
        )
        for name in ("ssm", "ssmmessages", "ec2messages")
    ]
    lines = shape_lines(
        plan(node("node-0", public=True), node("node-1"), S3, *endpoints), shipped_table(), REGION
    )
    assert lines[0] == "**Private nodes**: node-1: no public address, no Elastic IP."
    assert lines[1] == "**Public**: only node-0 (no bastion)."
    assert lines[3].startswith("**Egress**: S3 endpoint only")
    assert lines[4] == (
        "**Session Manager**: interface endpoints ec2messages, ssm, ssmmessages, $0.0100/h "
        "each; the nodes' role has AmazonSSMManagedInstanceCore."
    )
    assert egress_check(plan(node("node-0"), S3), Guardrails()) == (
        True,
        "egress: S3 endpoint only; no route to 0.0.0.0/0",
    )


def test_an_elastic_ip_makes_an_efa_node_public() -> None:
    eip = change('module.nodes.aws_eip.node["node-0"]', "aws_eip", {"domain": "vpc"})
    lines = shape_lines(plan(node("node-0"), node("node-1"), eip, S3), shipped_table(), REGION)
    assert lines[0] == "**Private nodes**: node-1: no public address, no Elastic IP."


BASTION = change(
    "module.bastion[0].aws_instance.this",
    "aws_instance",
    {
        "instance_type": "t3.micro",
        "associate_public_ip_address": True,
        "metadata_options": [{"http_tokens": "required"}],
        "root_block_device": [{"encrypted": True}],
    },
)


def test_the_bastion_and_the_nat_gateway_are_in_the_hourly_total_and_max_hourly_usd() -> None:
    """Issue 46: plan.md's Cost and the max_hourly_usd guardrail count the network's own
    per-hour parts (the NAT gateway's per-GB charge depends on traffic: named, not counted)."""
    nodes_only = build_review(
        plan(node("node-0"), node("node-1"), S3),
        ClusterFacts("p", "aws", REGION),
        planfile_sha256="0" * 64,
    ).cost.after_hourly
    assert nodes_only is not None
    with_network = plan(node("node-0"), node("node-1"), S3, BASTION, *NAT)
    bastion, nat = 0.0104, 0.045
    # A limit between the nodes' price and the nodes' with the network: the network fails it.
    limit = round(nodes_only + (bastion + nat) / 2, 4)
    rails = parse_guardrails({"max_hourly_usd": limit, "allow_internet_egress": True})
    facts = ClusterFacts("p", "aws", REGION, guardrails=rails)
    review = build_review(with_network, facts, planfile_sha256="0" * 64)
    assert review.cost.after_hourly == pytest.approx(nodes_only + bastion + nat)
    assert review.cost.before_hourly == 0.0
    assert review.cost.network_parts == ("bastion `t3.micro` $0.0104/h", "NAT gateway $0.0450/h")
    assert [c.name for c in review.checks if not c.ok] == ["max_hourly_usd"]
    text = markdown.render(review)
    assert (
        "The per-hour figures include the network: bastion `t3.micro` $0.0104/h, "
        "NAT gateway $0.0450/h" in text
    )
    # A public plan's cost is its nodes' alone, as before.
    public = plan(node("node-0", public=True), network=None)
    review = build_review(public, ClusterFacts("p", "aws", REGION), planfile_sha256="0" * 64)
    assert review.cost.network_parts == () and "include the network" not in markdown.render(review)


def test_the_bastions_root_volume_is_priced_per_gb_month_by_the_hour() -> None:
    """Its gp3 root volume (the image's own size) is billed every hour the bastion lives: in
    the Cost beside the instance, at the table's GB-month price over 730 hours."""
    disk = change(
        "module.bastion[0].aws_instance.this",
        "aws_instance",
        {
            **BASTION["change"]["after"],
            "root_block_device": [{"encrypted": True, "volume_size": 8}],
        },
    )
    review = build_review(
        plan(node("node-0"), S3, disk), ClusterFacts("p", "aws", REGION), planfile_sha256="0" * 64
    )
    volume = 8 * 0.08 / 730
    assert review.cost.network_parts == (
        "bastion `t3.micro` $0.0104/h",
        "its 8 GB root volume $0.0009/h",
    )
    nodes_only = build_review(
        plan(node("node-0"), S3), ClusterFacts("p", "aws", REGION), planfile_sha256="0" * 64
    ).cost.after_hourly
    assert nodes_only is not None
    assert review.cost.after_hourly == pytest.approx(nodes_only + 0.0104 + volume)
    assert "its root volume 8 GB" in "\n".join(review.network)


def test_a_network_priced_from_its_shape_is_priced_as_its_plan() -> None:
    """The ladder prices each rung's private network before anything is rendered, from the
    spec (NetworkShape): the same parts at the same prices as the plan of that network."""
    disk = change(
        "module.bastion[0].aws_instance.this",
        "aws_instance",
        {**BASTION["change"]["after"], "root_block_device": [{"volume_size": 8}]},
    )
    endpoints = [
        change(
            f'module.network.aws_vpc_endpoint.interface["{name}"]',
            "aws_vpc_endpoint",
            {"vpc_endpoint_type": "Interface", "service_name": f"com.amazonaws.{REGION}.{name}"},
        )
        for name in ("ec2messages", "ssm", "ssmmessages")
    ]
    table = shipped_table()
    for region in (REGION, "us-west-2"):  # us-west-2: us-east-1's network prices, said
        planned = network_hourly(plan(node("node-0"), S3, disk, *NAT, *endpoints), table, region)
        shape = NetworkShape("t3.micro", 8, nat=True, interface_endpoints=3)
        assert shape_hourly(shape, table, region) == planned
    assert planned.parts[0] == "bastion `t3.micro` $0.0104/h"
    # SSM's three endpoints are one part, counted, not the same words three times.
    assert planned.parts[-1] == "3 interface endpoints $0.0100/h each (us-east-1's price)"
    assert len(planned.parts) == 4  # the bastion, its volume, the NAT gateway, the endpoints
    assert shape_hourly(NetworkShape(), table, REGION).after == 0.0
