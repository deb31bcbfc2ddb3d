"""The order of the zones for Spot nodes: EC2's Spot placement score (GetSpotPlacementScores,
1 to 10: how likely a Spot request for that many instances is to succeed in a zone now).

Two quirks, both from the EC2 API Reference:

- the scores name zones by **zone id** (``use1-az4``), not by name (``us-east-1a``): a zone
  name maps to a different physical zone in each account ("AZ IDs for your AWS resources",
  AWS RAM User Guide), so the ids are mapped to this account's names through
  DescribeAvailabilityZones;
- only "the top 10 Regions or Availability Zones" are scored: a zone without a score is
  tried after every scored one, in the order it had.

A score is a recommendation ("No score guarantees that your Spot request will be fully or
partially fulfilled"): the zones are still tried in turn, as without scores. Where the API
does not answer (no ``ec2:GetSpotPlacementScores`` right, an API that does not have it), the
order stays as it was and `up` says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from skyinfra.targets.aws.session import AwsClients


def placement_request(instance_type: str, spot_nodes: int, region: str) -> dict[str, Any]:
    """GetSpotPlacementScores' arguments (pure): every Spot node in one zone, counted in
    instances."""
    return {
        "InstanceTypes": [instance_type],
        "TargetCapacity": spot_nodes,
        "TargetCapacityUnitType": "units",
        "SingleAvailabilityZone": True,
        "RegionNames": [region],
    }


def scores_by_zone_name(
    scored: Sequence[Mapping[str, Any]], names_by_id: Mapping[str, str]
) -> dict[str, int]:
    """Zone name -> score (pure); an id this account has no zone for is left out."""
    out: dict[str, int] = {}
    for item in scored:
        name = names_by_id.get(str(item.get("AvailabilityZoneId")))
        score = item.get("Score")
        if name is not None and isinstance(score, int):
            out[name] = score
    return out


def order_by_score(zones: Sequence[str], scores: Mapping[str, int]) -> list[str]:
    """``zones`` highest score first (pure); equal scores, and zones without one (after every
    scored zone), keep their order."""
    scored = sorted((z for z in zones if z in scores), key=lambda z: -scores[z])
    return scored + [z for z in zones if z not in scores]


def spot_placement_scores(
    clients: AwsClients, instance_type: str, spot_nodes: int
) -> dict[str, int] | str:
    """This account's zone names -> score for ``spot_nodes`` x ``instance_type`` in one zone,
    or why there are none (the API refused or does not have it)."""
    ec2 = clients.client("ec2")
    try:
        zones = ec2.describe_availability_zones()["AvailabilityZones"]
        names_by_id = {str(z["ZoneId"]): str(z["ZoneName"]) for z in zones if "ZoneId" in z}
        answer = ec2.get_spot_placement_scores(
            **placement_request(instance_type, spot_nodes, clients.region)
        )
    except ClientError as err:
        error = err.response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', err)}"
    except BotoCoreError as err:
        return str(err)
    except ResponseParserError:  # an endpoint that is not EC2's (an emulator without it)
        return "the endpoint's answer was not EC2's"
    return scores_by_zone_name(answer.get("SpotPlacementScores") or [], names_by_id)
