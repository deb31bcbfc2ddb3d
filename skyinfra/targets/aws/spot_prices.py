"""Spot prices at plan time (issue 26): the price EC2 charges a Spot node of the cluster's type
now, per zone, for plan.md's cost and the ``max_hourly_usd`` guardrail.

DescribeSpotPriceHistory with StartTime = EndTime = now "returns the last price change before
the start time, which is the effective price as of the start time", one entry per zone:
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html
Each price keeps its own timestamp (when it last changed), which plan.md shows as its date.
"""

from __future__ import annotations

import datetime
from typing import Any

from skyinfra.review.cost import SpotPrices

# The product the nodes run (Linux, in a VPC: "Linux/UNIX" covers both in today's answers).
PRODUCT = "Linux/UNIX"
SOURCE = (
    "EC2 DescribeSpotPriceHistory (Linux/UNIX) at plan time, the price in effect per zone; "
    "each dated by its last change"
)


def _iso(value: Any) -> str:
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


def spot_price_history(
    ec2: Any, instance_type: str, *, now: datetime.datetime | None = None
) -> SpotPrices:
    """The latest Spot price of ``instance_type`` in every zone that answers."""
    at = now or datetime.datetime.now(datetime.UTC)
    latest: dict[str, tuple[float, str, Any]] = {}
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=[instance_type], ProductDescriptions=[PRODUCT], StartTime=at, EndTime=at
    )
    for page in pages:
        for entry in page.get("SpotPriceHistory", []):
            zone, stamp = entry.get("AvailabilityZone"), entry.get("Timestamp")
            if not zone or entry.get("InstanceType") != instance_type:
                continue
            seen = latest.get(zone)
            if seen is None or (stamp is not None and seen[2] is not None and stamp > seen[2]):
                latest[zone] = (float(entry["SpotPrice"]), _iso(stamp), stamp)
    return SpotPrices(
        instance_type=instance_type,
        source=SOURCE,
        zones={zone: (price, date) for zone, (price, date, _) in sorted(latest.items())},
    )
