"""Spot prices at plan time (issue 26) from moto's server over HTTP: DescribeSpotPriceHistory
answers one price per zone offering the type (moto's are fixed: $0.00001, dated 2006-01-02);
`up`'s check of a ladder's later rung takes that rung's own (issue 44)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra.lifecycle.changes import _check_plan
from skyinfra.review.cost import PlannedPlace
from skyinfra.review.report import planned_place
from skyinfra.spec import validate_spec
from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR
from skyinfra.targets.aws.spot_prices import SOURCE, spot_price_history
from tests.support.aws import REGION
from tests.unit.review.test_review import instance, node


def test_the_latest_price_of_the_type_in_every_zone_that_offers_it(aws_env: str) -> None:
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)
    offered = {
        o["Location"]
        for o in ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": ["g5.xlarge"]}],
        )["InstanceTypeOfferings"]
    }
    prices = spot_price_history(ec2, "g5.xlarge")
    assert prices.instance_type == "g5.xlarge" and prices.source == SOURCE
    assert set(prices.zones) == offered and offered
    assert set(prices.zones.values()) == {(0.00001, "2006-01-02T15:04:05Z")}
    assert prices.price(f"{REGION}a") == 0.00001
    assert spot_price_history(ec2, "p9z.mega").zones == {}


def _spot_node(index: int) -> dict[str, Any]:
    after = {**node("ami-1", "g5.xlarge"), "instance_market_options": [{"market_type": "spot"}]}
    return instance(index, ["create"], None, after)


class _Planned:
    """The Terraform engine as `up`'s check reads it: the saved plan, as `show` gives it."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan

    def show_plan(self, path: str) -> dict[str, Any]:
        return self.plan


@pytest.mark.parametrize(
    ("types", "regions"),
    [
        (["p5.48xlarge", "g5.xlarge"], ["us-east-1"]),  # rung 2: another type
        (["g5.xlarge"], ["us-west-2", "us-east-1"]),  # rung 2: another region
    ],
)
def test_a_later_rungs_spot_check_is_priced_at_its_own_type_and_region(
    aws_env: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    types: list[str],
    regions: list[str],
) -> None:
    """Issue 44: `up` on rung 2 of a Spot ladder (g5.xlarge in us-east-1, while the spec's
    first rung is another type or region) checks that rung's plan at g5.xlarge's Spot price
    in us-east-1a (moto's $0.00001), so 2 Spot nodes pass max_hourly_usd = 1. At rung 1's
    prices (another type, or zones of another region) they were priced On-Demand (2 x
    $1.006) and refused."""
    monkeypatch.setenv(ENDPOINT_ENV_VAR, aws_env)
    key = tmp_path / "id_ed25519"
    key.write_text("")
    spec = validate_spec(
        {
            "name": "ladder-spot",
            "provider": "aws",
            "nodes": 2,
            "guardrails": {"max_hourly_usd": 1.0},
            "aws": {
                "instance_types": types,
                "regions": regions,
                "market": "spot",
                "head_market": "spot",
                "ssh_cidrs": ["203.0.113.7/32"],
                "ssh_key": str(key),
            },
        }
    )
    plan = {
        "resource_changes": [_spot_node(i) for i in range(2)],
        "variables": {"region": {"value": "us-east-1"}},
    }
    assert planned_place(plan, "aws") == PlannedPlace("g5.xlarge", "us-east-1")
    said: list[str] = []
    _check_plan(spec, _Planned(plan), said.append, confirm=None)  # type: ignore[arg-type]
    assert not any("warning" in line for line in said), said
