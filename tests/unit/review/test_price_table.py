"""The shipped price table's coverage (issue 44): a ladder lists GPU types and regions, and a
rung whose type and region the table lacks has no price, so plan.md says "no price" and
guardrails.max_hourly_usd cannot judge it. Pure: the shipped prices.json, no AWS."""

from __future__ import annotations

from typing import Any

import pytest

from skyinfra.review import markdown
from skyinfra.review.cost import NETWORK_FALLBACK, shipped_table
from skyinfra.review.guardrails import Guardrails
from skyinfra.review.network import network_hourly, shape_lines
from skyinfra.review.report import ClusterFacts, build_review
from skyinfra.spec import validate_spec
from skyinfra.targets.aws.accelerators import AWS_REGIONS, GPU_TYPES
from skyinfra.targets.aws.ladder import Rung
from skyinfra.targets.aws.ladder_shell import rung_facts
from tests.unit.review.test_review import instance, node

# GPU types of the built-in table the catalog (skypilot-catalog vms.csv) gives no price for
# in any region: no Price (p5e), or not listed at all.
NOT_IN_CATALOG = {
    "p5e.48xlarge",
    "p5.4xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    *(t.instance_type for t in GPU_TYPES if t.instance_type.startswith(("g7.", "g7e."))),
}
# The catalog predates AWS's June 2025 P4/P5 price reduction: these keep the AWS pricing
# page's us-east-1 price and are left out elsewhere rather than priced at superseded rates.
REDUCED_IN_2025 = {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge"}
PAGE_PRICED_IN_US_EAST_1 = {"p4d.24xlarge": 21.96, "p5.48xlarge": 55.04}


@pytest.mark.parametrize("region", ["us-east-1", "us-west-2"])
def test_every_gpu_type_the_catalog_prices_has_a_price(region: str) -> None:
    table = shipped_table()
    unpriced = NOT_IN_CATALOG | REDUCED_IN_2025
    if region == "us-east-1":
        unpriced -= set(PAGE_PRICED_IN_US_EAST_1)
    missing = [
        t.instance_type
        for t in GPU_TYPES
        if t.instance_type not in unpriced and table.hourly(region, t.instance_type) is None
    ]
    assert missing == []
    # Never a price the source does not give: what it lacks stays out of the table.
    invented = [t for t in sorted(unpriced) if table.hourly(region, t) is not None]
    assert invented == []
    assert table.hourly(region, "t3.micro") == 0.0104  # the bastion


def test_the_table_holds_only_known_types_and_regions_and_its_source_commit() -> None:
    table = shipped_table()
    known = {t.instance_type for t in GPU_TYPES} | {"t3.micro"}
    for region, prices in table.regions.items():
        assert region in AWS_REGIONS
        assert set(prices) <= known, region
        assert all(p > 0 for p in prices.values()), region
    for kind, usd in PAGE_PRICED_IN_US_EAST_1.items():
        assert table.hourly("us-east-1", kind) == usd
    assert "skypilot-catalog catalogs/v7/aws/vms.csv at commit " in table.source
    assert "June 2025" in table.source


def _node(index: int, kind: str, region: str) -> dict[str, Any]:
    return instance(
        index, ["create"], None, {**node("ami-1", kind), "availability_zone": f"{region}a"}
    )


def test_a_us_west_2_rung_is_priced_in_plan_md_and_judged_by_max_hourly_usd() -> None:
    """A ladder's rung in us-west-2 (its plan's region variable) is priced at us-west-2's
    price: the rung's facts, plan.md's Cost, and the max_hourly_usd guardrail."""
    kind, region = "g6e.48xlarge", "us-west-2"
    spec = validate_spec(
        {
            "name": "g",
            "provider": "aws",
            "nodes": 2,
            "aws": {
                "accelerators": "L40S:8",
                "regions": ["us-east-1", region],
                "ssh_cidrs": ["203.0.113.4/32"],
            },
        }
    )
    facts = rung_facts(spec, Rung(kind, region), checks=False)
    assert (facts.hourly_usd, facts.price_source) == (2 * 30.13118, "price table")
    plan = {
        "resource_changes": [_node(i, kind, region) for i in range(2)],
        "variables": {"region": {"value": region}},
    }
    cluster = ClusterFacts("g", "aws", "us-east-1", guardrails=Guardrails(max_hourly_usd=50))
    review = build_review(plan, cluster, planfile_sha256="0" * 64, table=shipped_table())
    assert review.cost.after_hourly == pytest.approx(60.26236)
    assert review.cost.missing == ()
    text = markdown.render(review)
    assert "$60.26" in text and "No price in the table" not in text
    assert [c.name for c in review.checks if not c.ok] == ["max_hourly_usd"]


def test_a_region_without_network_prices_is_priced_at_us_east_1s_and_says_so() -> None:
    """Only us-east-1's network prices have a source: another region's NAT gateway and
    bastion volume are priced at them, named as such, and the bastion at its own region's."""
    table = shipped_table()
    region = "eu-central-1"
    assert region not in table.network and NETWORK_FALLBACK in table.network
    nat = {
        "address": "module.network.aws_nat_gateway.this[0]",
        "type": "aws_nat_gateway",
        "change": {"actions": ["create"], "after": {}, "after_unknown": {}},
    }
    bastion = {
        "address": "module.bastion[0].aws_instance.this",
        "type": "aws_instance",
        "change": {
            "actions": ["create"],
            "after": {"instance_type": "t3.micro", "associate_public_ip_address": True},
            "after_unknown": {},
        },
    }
    plan = {
        "resource_changes": [nat, bastion],
        "variables": {"cluster": {"value": {"name": "p", "network": "private"}}},
    }
    hourly = network_hourly(plan, table, region)
    assert hourly.after == pytest.approx(0.045 + 0.012)
    assert hourly.parts == (
        "NAT gateway $0.0450/h (us-east-1's price)",
        "bastion `t3.micro` $0.0120/h",
    )
    note = shape_lines(plan, table, region)[-1]
    assert "The table has none for eu-central-1: priced at us-east-1's network prices." in (note)
    assert "priced at" not in shape_lines(plan, table, NETWORK_FALLBACK)[-1]
