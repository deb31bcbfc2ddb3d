"""The network shape of an AWS plan (issue 46, pure): what is public, the way in, the egress,
read from the planned resources themselves; and the guardrail on open egress.

Only a private network (``aws.network = "private"``, the root module's ``cluster.network``)
gets a shape and the check. A public network is the behaviour from before it: every node has
its own public address and reaches the internet through it, which `plan` has always shown in
the SSH guardrail and the topology; ``guardrails.allow_internet_egress`` is not asked of it,
so that no existing spec starts failing its plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyinfra.guardrail_table import Guardrails
from skyinfra.review.cost import PriceTable, usd

# The network price table's keys (prices.json "network"), USD.
NAT_HOURLY = "nat_gateway_hourly"
NAT_PER_GB = "nat_gateway_per_gb"
ENDPOINT_HOURLY = "interface_endpoint_hourly"
EBS_GB_MONTH = "ebs_gp3_gb_month"
# AWS bills EBS storage per GB-month and prorates it by the hour over a 730-hour month.
HOURS_PER_MONTH = 730
EGRESS_CHECK = "Internet egress"


@dataclass(frozen=True)
class Planned:
    address: str
    after: Mapping[str, Any]
    unknown: Mapping[str, Any]


def _planned(plan: Mapping[str, Any], kind: str) -> list[Planned]:
    """The resources of ``kind`` the plan leaves in place (deleted ones have no "after")."""
    found = []
    for entry in plan.get("resource_changes") or []:
        change = entry.get("change") or {}
        after = change.get("after")
        if entry.get("type") == kind and isinstance(after, dict):
            unknown = change.get("after_unknown")
            found.append(
                Planned(
                    str(entry.get("address")), after, unknown if isinstance(unknown, dict) else {}
                )
            )
    return found


@dataclass(frozen=True)
class NetworkHourly:
    """What a private network's own resources cost per hour on each side of the plan (the
    bastion, NAT gateways, interface endpoints; gateway endpoints are free), and the after
    side's parts as plan.md names them. A NAT gateway's per-GB charge depends on traffic and
    is not in it."""

    before: float = 0.0
    after: float = 0.0
    parts: tuple[str, ...] = ()


# One priced part of a private network: (what plan.md calls it, its price key or
# "instance:TYPE", how many units of that price per hour).
Part = tuple[str, str, float]
INTERFACE_ENDPOINT = ("interface endpoint", ENDPOINT_HOURLY, 1.0)
NAT_GATEWAY = ("NAT gateway", NAT_HOURLY, 1.0)


def _bastion_parts(instance_type: object, disk: object) -> list[Part]:
    """The bastion's instance and its root volume (GB of gp3, priced per GB-month)."""
    parts: list[Part] = [(f"bastion `{instance_type}`", f"instance:{instance_type}", 1.0)]
    if isinstance(disk, int | float) and disk > 0:
        parts.append((f"its {disk:g} GB root volume", EBS_GB_MONTH, disk / HOURS_PER_MONTH))
    return parts


def _priced(kind: str, state: Mapping[str, Any], address: str) -> list[Part]:
    """The parts of a planned resource the network pays for per hour: the bastion, a NAT
    gateway, an interface endpoint (gateway endpoints are free)."""
    if kind == "aws_instance" and address.startswith("module.bastion"):
        disk = _first(state.get("root_block_device")).get("volume_size")
        return _bastion_parts(state.get("instance_type"), disk)
    if kind == "aws_nat_gateway":
        return [NAT_GATEWAY]
    if kind == "aws_vpc_endpoint" and state.get("vpc_endpoint_type") == "Interface":
        return [INTERFACE_ENDPOINT]
    return []


def _price_parts(
    parts: list[Part], table: PriceTable, region: str | None
) -> tuple[float, tuple[str, ...]]:
    """The parts' price per hour, and each part as plan.md names it with its price (alike
    parts once, counted: SSM's three endpoints read "3 interface endpoints ... each"); a part
    without a price in the table counts nothing and says so."""
    prices, borrowed = table.network_prices(region)
    total = 0.0
    named: list[str] = []
    for (what, key, quantity), count in Counter(parts).items():
        kind = key.removeprefix("instance:")
        unit = table.hourly(region or "", kind) if key != kind else prices.get(key)
        price = None if unit is None else unit * quantity
        total += (price or 0.0) * count
        shown = usd(price) + "/h" if price is not None else "(no price)"
        whose = f" ({borrowed}'s price)" if borrowed and key == kind else ""
        many = f"{count} {what}s " if count > 1 else f"{what} "
        named.append(f"{many}{shown}{' each' if count > 1 else ''}{whose}")
    return total, tuple(named)


def network_hourly(plan: Mapping[str, Any], table: PriceTable, region: str | None) -> NetworkHourly:
    """The network's per-hour price on each side of a private network's plan (zero for a
    public one)."""
    if not is_private(plan):
        return NetworkHourly()
    sides: dict[str, list[Part]] = {"before": [], "after": []}
    for entry in plan.get("resource_changes") or []:
        change = entry.get("change") or {}
        for side, parts in sides.items():
            state = change.get(side)
            if isinstance(state, Mapping):
                parts += _priced(str(entry.get("type")), state, str(entry.get("address")))
    before, _ = _price_parts(sides["before"], table, region)
    after, named = _price_parts(sides["after"], table, region)
    return NetworkHourly(before, after, named)


@dataclass(frozen=True)
class NetworkShape:
    """What a private network will hold, known from the spec before anything is rendered
    (the ladder prices each rung's with it): the bastion's type (None: no bastion) and root
    volume in GB, a NAT gateway, how many interface endpoints."""

    bastion_type: str | None = None
    bastion_root_gb: float = 0.0
    nat: bool = False
    interface_endpoints: int = 0


def shape_hourly(shape: NetworkShape, table: PriceTable, region: str) -> NetworkHourly:
    """The per-hour price of a network of ``shape`` in ``region``, priced as a plan of it is
    (:func:`network_hourly`): the after side only, nothing before."""
    parts = _bastion_parts(shape.bastion_type, shape.bastion_root_gb) if shape.bastion_type else []
    parts += [NAT_GATEWAY] * shape.nat + [INTERFACE_ENDPOINT] * shape.interface_endpoints
    after, named = _price_parts(parts, table, region)
    return NetworkHourly(0.0, after, named)


def is_private(plan: Mapping[str, Any]) -> bool:
    """Whether the plan is of a private network (the root module's ``cluster.network``)."""
    item = (plan.get("variables") or {}).get("cluster")
    value = item.get("value") if isinstance(item, Mapping) else None
    return isinstance(value, Mapping) and value.get("network") == "private"


def _first(value: Any) -> Mapping[str, Any]:
    return value[0] if isinstance(value, list) and value and isinstance(value[0], dict) else {}


def _node_name(address: str) -> str:
    """node-0 from module.nodes.aws_instance.this["node-0"]."""
    return address.rsplit('["', 1)[-1].rstrip('"]') if '["' in address else address


def _nat_routes(plan: Mapping[str, Any]) -> list[str]:
    """Default routes through a NAT gateway (the nodes' open egress)."""
    return [
        r.address
        for r in _planned(plan, "aws_route")
        if r.after.get("destination_cidr_block") == "0.0.0.0/0"
        and (r.after.get("nat_gateway_id") or r.unknown.get("nat_gateway_id") is True)
    ]


def public_nodes(plan: Mapping[str, Any]) -> list[str]:
    """The nodes with a public address: their own, or an Elastic IP (EFA)."""
    named = {
        _node_name(i.address)
        for i in _planned(plan, "aws_instance")
        if i.address.startswith("module.nodes.") and i.after.get("associate_public_ip_address")
    }
    named |= {
        _node_name(e.address)
        for e in _planned(plan, "aws_eip")
        if e.address.startswith("module.nodes.")
    }
    return sorted(named)


def _wheelhouse(plan: Mapping[str, Any]) -> str | None:
    """The S3 wheelhouse the nodes install from (the root module's ``staging.wheelhouse``)."""
    item = (plan.get("variables") or {}).get("staging")
    value = item.get("value") if isinstance(item, Mapping) else None
    if not isinstance(value, Mapping) or not value.get("wheelhouse"):
        return None
    return f"s3://{value.get('bucket')}/{value['wheelhouse']}"


def shape_lines(plan: Mapping[str, Any], table: PriceTable, region: str | None) -> tuple[str, ...]:
    """plan.md's "Network" lines for a private network; none for a public one."""
    if not is_private(plan):
        return ()
    prices, borrowed = table.network_prices(region)

    def price(key: str) -> str:
        value = prices.get(key)
        return usd(value) if value is not None else "no price in the table"

    nodes = [i for i in _planned(plan, "aws_instance") if i.address.startswith("module.nodes.")]
    bastions = [i for i in _planned(plan, "aws_instance") if i.address.startswith("module.bastion")]
    public = public_nodes(plan)
    private = [n for n in sorted(_node_name(i.address) for i in nodes) if n not in public]
    lines = [
        f"**Private nodes**: {', '.join(private) or 'none'}: no public address, no Elastic IP."
    ]
    cidrs = sorted(
        str(r.after.get("cidr_ipv4"))
        for r in _planned(plan, "aws_vpc_security_group_ingress_rule")
        if r.address.startswith("module.bastion") and r.after.get("cidr_ipv4")
    )
    if bastions:
        kind = str(bastions[0].after.get("instance_type"))
        hourly = table.hourly(region or "", kind)
        disk = _first(bastions[0].after.get("root_block_device")).get("volume_size")
        lines.append(
            f"**Public**: only the bastion `{bastions[0].address}` (`{kind}`, "
            f"{usd(hourly) + '/h' if hourly is not None else 'no price in the table'}"
            + (f", its root volume {disk} GB" if disk else "")
            + ")"
            + (f" and node(s) {', '.join(public)}" if public else "")
            + "."
        )
        lines.append(
            f"**Way in**: SSH to the bastion from {', '.join(cidrs) or 'nowhere'} only, then on "
            "to the nodes, whose security group admits SSH from the bastion's group alone."
        )
    else:
        lines.append(f"**Public**: only {', '.join(public) or 'nothing'} (no bastion).")
        lines.append(
            f"**Way in**: SSH to {', '.join(public) or 'no node'} from `aws.ssh_cidrs` (its "
            "subnet routes only those blocks back to the internet gateway), then on to the others."
        )
    s3 = any(
        e.after.get("vpc_endpoint_type") == "Gateway"
        and str(e.after.get("service_name", "")).endswith(".s3")
        for e in _planned(plan, "aws_vpc_endpoint")
    )
    via_s3 = "S3 through its gateway endpoint (free)" if s3 else "no S3 endpoint"
    s3_how = "a gateway endpoint in the nodes' route table (free)" if s3 else "no S3 endpoint"
    if _planned(plan, "aws_nat_gateway") or _nat_routes(plan):
        lines.append(
            f"**Egress**: the internet (0.0.0.0/0) through a NAT gateway, "
            f"{price(NAT_HOURLY)}/h plus {price(NAT_PER_GB)} per GB it processes (every "
            f"package download and checkpoint that does not go to S3); {via_s3}."
        )
    else:
        lines.append(
            f"**Egress**: S3 endpoint only: {s3_how}; no route to the internet, no NAT gateway."
        )
    wheelhouse = _wheelhouse(plan)
    if wheelhouse:
        lines.append(
            f"**Packages**: from the S3 wheelhouse `{wheelhouse}` (the nodes' role reads it; "
            "uv installs offline from it, no package index, no apt)."
        )
    endpoints = sorted(
        str(e.after.get("service_name", "")).rsplit(".", 1)[-1]
        for e in _planned(plan, "aws_vpc_endpoint")
        if e.after.get("vpc_endpoint_type") == "Interface"
    )
    if endpoints:
        lines.append(
            f"**Session Manager**: interface endpoints {', '.join(endpoints)}, "
            f"{price(ENDPOINT_HOURLY)}/h each; the nodes' role has AmazonSSMManagedInstanceCore."
        )
    if table.network_source:
        whose = ""
        if borrowed:
            whose = f" The table has none for {region}: priced at {borrowed}'s network prices."
        lines.append(
            "<sub>The per-hour prices are in the Cost above (a NAT gateway's per-GB charge is "
            f"not). Network prices: {table.network_source}; as of {table.date}.{whose}</sub>"
        )
    return tuple(lines)


def egress_check(plan: Mapping[str, Any], rails: Guardrails) -> tuple[bool, str] | None:
    """(passed, reason) of the "Internet egress" guardrail for a private network; None for a
    public one (see the module's docstring)."""
    if not is_private(plan):
        return None
    routes = _nat_routes(plan)
    if not routes:
        return True, "egress: S3 endpoint only; no route to 0.0.0.0/0"
    where = ", ".join(routes)
    if rails.allow_internet_egress:
        return (
            True,
            f"{where} opens egress to 0.0.0.0/0 (allowed by guardrails.allow_internet_egress)",
        )
    return (
        False,
        f"{where} opens egress to 0.0.0.0/0 through the NAT gateway; set "
        "guardrails.allow_internet_egress = true, or aws.nat = false",
    )
