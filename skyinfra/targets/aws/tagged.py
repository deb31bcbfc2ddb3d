"""What of a cluster the AWS APIs still show, found by its tags (``skyinfra:cluster``,
``skyinfra:workspace``): the check after `down`, and `skyinfra gc`'s list of resources that no
workspace's Terraform state knows about.

Every kind of resource the modules create and EC2 can filter by tag is asked for (instances
still alive, their volumes and interfaces, the VPC and what hangs off it, key pairs); IAM
roles cannot be filtered by tag, so the cluster's role is looked up by name and its tags
compared. A kind the API would not list is reported as unchecked, never as clean.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from skyinfra.targets.aws.session import AwsClients
from skyinfra.targets.identity import CLUSTER_TAG, WORKSPACE_TAG

LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped"]


@dataclass(frozen=True)
class Tagged:
    kind: str
    id: str
    tags: Mapping[str, str]

    def describe(self, region: str | None = None) -> str:
        where = f"{region} " if region else ""
        cluster = self.tags.get(CLUSTER_TAG, "?")
        workspace = self.tags.get(WORKSPACE_TAG, "?")
        return (
            f"{where}{self.kind} {self.id} ({CLUSTER_TAG}={cluster}, {WORKSPACE_TAG}={workspace})"
        )


def _tags(item: Mapping[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t["Value"]) for t in item.get("Tags") or []}


def _ec2_kinds(ec2: Any) -> list[tuple[str, Callable[[list[dict[str, Any]]], Iterable[Tagged]]]]:
    """(kind, lister taking EC2 filters) for every tag-filterable kind the modules create."""

    def instances(filters: list[dict[str, Any]]) -> Iterable[Tagged]:
        live = [{"Name": "instance-state-name", "Values": LIVE_INSTANCE_STATES}]
        for page in ec2.get_paginator("describe_instances").paginate(Filters=filters + live):
            for reservation in page["Reservations"]:
                for item in reservation["Instances"]:
                    yield Tagged("instance", item["InstanceId"], _tags(item))

    def simple(method: str, key: str, id_key: str, kind: str) -> Callable[..., Iterable[Tagged]]:
        def lister(filters: list[dict[str, Any]]) -> Iterable[Tagged]:
            for item in getattr(ec2, method)(Filters=filters)[key]:
                yield Tagged(kind, item[id_key], _tags(item))

        return lister

    return [
        ("instance", instances),
        ("volume", simple("describe_volumes", "Volumes", "VolumeId", "volume")),
        (
            "network-interface",
            simple(
                "describe_network_interfaces",
                "NetworkInterfaces",
                "NetworkInterfaceId",
                "network-interface",
            ),
        ),
        (
            "security-group",
            simple("describe_security_groups", "SecurityGroups", "GroupId", "security-group"),
        ),
        ("subnet", simple("describe_subnets", "Subnets", "SubnetId", "subnet")),
        (
            "route-table",
            simple("describe_route_tables", "RouteTables", "RouteTableId", "route-table"),
        ),
        (
            "internet-gateway",
            simple(
                "describe_internet_gateways",
                "InternetGateways",
                "InternetGatewayId",
                "internet-gateway",
            ),
        ),
        # An EFA node's Elastic IP (billed while allocated, attached or not).
        ("elastic-ip", simple("describe_addresses", "Addresses", "AllocationId", "elastic-ip")),
        ("vpc", simple("describe_vpcs", "Vpcs", "VpcId", "vpc")),
        ("key-pair", simple("describe_key_pairs", "KeyPairs", "KeyName", "key-pair")),
    ]


def _list(clients: AwsClients, filters: list[dict[str, Any]]) -> tuple[list[Tagged], list[str]]:
    found: list[Tagged] = []
    unchecked: list[str] = []
    for kind, lister in _ec2_kinds(clients.client("ec2")):
        try:
            found += list(lister(filters))
        except (ClientError, BotoCoreError) as err:
            unchecked.append(f"{kind} ({err})")
    return found, unchecked


def count_tagged(
    clients: AwsClients, tags: Mapping[str, str], *, iam_role: str
) -> tuple[list[str], list[str]]:
    """(what still carries every one of ``tags``, the kinds that could not be checked)."""
    filters = [{"Name": f"tag:{key}", "Values": [value]} for key, value in tags.items()]
    found, unchecked = _list(clients, filters)
    left = [item.describe() for item in found]
    try:
        role = clients.client("iam").get_role(RoleName=iam_role)["Role"]
        role_tags = _tags(role)
        if all(role_tags.get(key) == value for key, value in tags.items()):
            left.append(Tagged("iam-role", iam_role, role_tags).describe())
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "NoSuchEntity":
            unchecked.append(f"iam-role ({err})")
    except BotoCoreError as err:
        unchecked.append(f"iam-role ({err})")
    return left, unchecked


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def ids_in_state(workspace: Path) -> set[str]:
    """Every string among the attributes of a workspace's Terraform state (ids, names, the
    root volumes' and primary interfaces' ids): what the state knows about."""
    try:
        state = json.loads((workspace / "terraform.tfstate").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    known: set[str] = set()
    for resource in state.get("resources") or []:
        for instance in resource.get("instances") or []:
            known.update(_strings(instance.get("attributes") or {}))
    return known


def orphans(
    clients: Sequence[AwsClients], workspaces: Sequence[Path]
) -> tuple[list[str], list[str]]:
    """(resources tagged ``skyinfra:cluster`` that no workspace's state holds, unchecked)."""
    known: set[str] = set()
    for workspace in workspaces:
        known |= ids_in_state(workspace)
    lines: list[str] = []
    unchecked: list[str] = []
    for regional in clients:
        found, missed = _list(regional, [{"Name": "tag-key", "Values": [CLUSTER_TAG]}])
        lines += [item.describe(regional.region) for item in found if item.id not in known]
        unchecked += [f"{regional.region} {kind}" for kind in missed]
    return lines, unchecked
