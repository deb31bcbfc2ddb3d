"""Spot prices at plan time (issue 26) from moto's server over HTTP: DescribeSpotPriceHistory
answers one price per zone offering the type (moto's are fixed: $0.00001, dated 2006-01-02)."""

from __future__ import annotations

import boto3

from skyinfra.targets.aws.spot_prices import SOURCE, spot_price_history
from tests.support.aws import REGION


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
