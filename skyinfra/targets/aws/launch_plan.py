"""Where and on which market `up` launches an AWS cluster, before any attempt: the candidate
zones in order (:func:`plan_zones`: a reservation's, a running cluster's or a subnet's zone
fixes it; Spot nodes order the zones by placement score) and each node's market
(:func:`launched_markets`). failover.py tries the zones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skyinfra.errors import PreflightError, SpecError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.capacity import LOG_FILE, CapacityLog, zone_order
from skyinfra.targets.aws.placement import order_by_score, spot_placement_scores
from skyinfra.targets.aws.preflight import aws_errors, offering_zones
from skyinfra.targets.aws.reservation import check_reservation, describe_reservation
from skyinfra.targets.aws.resolve import _existing_network, previous_settings
from skyinfra.targets.aws.session import AwsClients
from skyinfra.targets.aws.spec import ON_DEMAND, SPOT, AwsSpec, node_markets
from skyinfra.workspace import Workspace

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    """Where `up` may put the cluster: ``zones`` in order; ``fixed`` says why there is only
    one (a running cluster, a subnet, a reservation), None when it may move."""

    zones: list[str]
    fixed: str | None
    existing_nodes: int
    reservation: tuple[str, bool] | None = None


def plan_zones(
    spec: ClusterSpec,
    ws: Workspace,
    clients: AwsClients,
    *,
    echo: Echo,
    wanted: Sequence[str],
    existing_nodes: int,
    checks: bool,
) -> Plan:
    """The candidate zones, after the reservation's preflight when there is one."""
    spec_aws = spec.section_as(AwsSpec)
    previous = previous_settings(ws, spec_aws.region).get("availability_zone")
    network = _existing_network(clients, spec_aws) if spec_aws.subnet_id else None
    subnet_zone = network["availability_zone"] if network else None
    reservation = None
    fixed_zone: str | None = None
    fixed: str | None = None
    if spec_aws.capacity_reservation_id is not None:
        found = describe_reservation(clients, spec_aws.capacity_reservation_id)
        check_reservation(
            found,
            instance_type=spec_aws.instance_type,
            needed=max(spec.nodes - existing_nodes, 0),
            zones=wanted,
            subnet_zone=subnet_zone,
        )
        what = "Capacity Block" if found.capacity_block else "capacity reservation"
        echo(
            f"[skyinfra] {what} {found.id}: {found.available} of {found.total} "
            f"{found.instance_type} free in {found.zone}"
        )
        reservation = (found.id, found.capacity_block)
        fixed_zone, fixed = found.zone, f"{what} {found.id} is in {found.zone}"
    elif existing_nodes and previous:
        fixed_zone, fixed = previous, f"its {existing_nodes} node(s) run in {previous}"
    elif subnet_zone:
        fixed_zone, fixed = subnet_zone, f"aws.subnet_id {spec_aws.subnet_id} is in {subnet_zone}"
    if fixed_zone is not None:
        if wanted and fixed_zone not in wanted:
            raise SpecError(
                "--zones" if wanted is not spec_aws.zones else "aws.zones",
                ",".join(wanted),
                f"zones including {fixed_zone}: {fixed}, which fixes the zone",
            )
        return Plan([fixed_zone], fixed, existing_nodes, reservation)
    try:
        with aws_errors(f"looking up the zones offering {spec_aws.instance_type}"):
            offered = offering_zones(clients.client("ec2"), spec_aws.instance_type)
    except PreflightError:
        if checks:
            raise
        offered = list(wanted) or [previous or f"{spec_aws.region}a"]
    if not offered:
        # No zone sells the type (or it does not exist): the preflight says which, precisely.
        return Plan([(wanted or [previous or f"{spec_aws.region}a"])[0]], None, existing_nodes)
    zones, missing = zone_order(offered, wanted=wanted, previous=previous)
    for zone in missing:
        echo(f"[skyinfra] warning: {zone} does not offer {spec_aws.instance_type}; not tried")
    if not zones:
        raise PreflightError(
            f"none of the zones asked for ({', '.join(wanted)}) offers "
            f"{spec_aws.instance_type}; it is offered in {', '.join(sorted(offered))}. Change "
            "aws.zones / --zones"
        )
    spot_nodes = sum(1 for m in node_markets(spec_aws, spec.nodes).values() if m == SPOT)
    if spot_nodes and not wanted and len(zones) > 1:
        zones = _by_placement_score(clients, spec_aws, spot_nodes, zones, previous, echo)
    return Plan(zones, None, existing_nodes, reservation)


def _by_placement_score(
    clients: AwsClients,
    spec_aws: AwsSpec,
    spot_nodes: int,
    zones: list[str],
    previous: str | None,
    echo: Echo,
) -> list[str]:
    """The zones for a cluster with Spot nodes, highest Spot placement score first (the zone
    of the cluster's previous `up` stays first; aws.zones / --zones, an order the user gave,
    are never reordered: this is not called for them)."""
    scores = spot_placement_scores(clients, spec_aws.instance_type, spot_nodes)
    if isinstance(scores, str):
        echo(f"[skyinfra] no Spot placement scores ({scores}): zones in name order")
        return zones
    first = [previous] if previous in zones else []
    ordered = first + order_by_score([z for z in zones if z not in first], scores)
    said = ", ".join(f"{z} {scores[z]}" if z in scores else f"{z} (no score)" for z in ordered)
    echo(
        f"[skyinfra] Spot placement scores for {spot_nodes} x {spec_aws.instance_type} in one "
        f"zone (1-10, EC2's GetSpotPlacementScores): {said}"
    )
    return ordered


def launched_markets(spec: ClusterSpec, ws: Workspace, existing_nodes: int) -> dict[str, str]:
    """Each node's market: the spec's, except that the running nodes a Spot fallback launched
    On-Demand (capacity.json's spot_fallback) stay On-Demand, so the next `up` or `plan` does
    not replace them. A market the spec changes is the spec's (a replacement the plan shows)."""
    markets = node_markets(spec.section_as(AwsSpec), spec.nodes)
    path = ws.path / LOG_FILE
    if existing_nodes and path.is_file():
        fallback = CapacityLog.from_dict(ws.read_json(path)).spot_fallback
        running = set(list(markets)[:existing_nodes])
        for name in fallback.nodes if fallback is not None else []:
            if name in running and markets[name] == SPOT:
                markets[name] = ON_DEMAND
    return markets
