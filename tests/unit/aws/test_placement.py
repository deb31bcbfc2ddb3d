"""The Spot placement score's pure parts (skyinfra/targets/aws/placement.py): the request,
zone ids mapped to this account's names, and the order."""

from __future__ import annotations

from skyinfra.targets.aws.placement import (
    order_by_score,
    placement_request,
    scores_by_zone_name,
)


def test_the_request_scores_zones_for_every_spot_node_in_one_zone() -> None:
    assert placement_request("p5.48xlarge", 7, "us-west-2") == {
        "InstanceTypes": ["p5.48xlarge"],
        "TargetCapacity": 7,
        "TargetCapacityUnitType": "units",
        "SingleAvailabilityZone": True,
        "RegionNames": ["us-west-2"],
    }


def test_zone_ids_become_this_accounts_zone_names() -> None:
    names = {"usw2-az1": "us-west-2b", "usw2-az2": "us-west-2a"}
    scored = [
        {"Region": "us-west-2", "AvailabilityZoneId": "usw2-az1", "Score": 8},
        {"Region": "us-west-2", "AvailabilityZoneId": "usw2-az2", "Score": 2},
        {"Region": "us-west-2", "AvailabilityZoneId": "usw2-az9", "Score": 10},  # not ours
        {"Region": "us-west-2", "AvailabilityZoneId": "usw2-az2"},  # no score
    ]
    assert scores_by_zone_name(scored, names) == {"us-west-2b": 8, "us-west-2a": 2}


def test_highest_score_first_ties_and_unscored_zones_keep_their_order() -> None:
    zones = ["a", "b", "c", "d", "e"]
    assert order_by_score(zones, {"c": 9, "b": 3, "e": 9}) == ["c", "e", "b", "a", "d"]
    assert order_by_score(zones, {}) == zones
