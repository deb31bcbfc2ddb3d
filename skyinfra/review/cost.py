"""What a cluster costs per hour and over its lifetime (pure), from the price table shipped
with skyinfra (prices.json: its source and date are stated in it and in every plan.md).

Clusters live for hours, not for a 730-hour month: the lifetime figure is the hourly cost
times ``max_lifetime_hours`` (the nodes end themselves then), and without one it says the
cost is unbounded and how long an idle node keeps costing before the idle shutdown ends it.
A target whose nodes are not priced (the local target: PlanTraits.priced) costs nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from skyinfra.errors import ConfigError
from skyinfra.target_registry import declaration

PRICES = "prices.json"
# Only us-east-1's network prices (NAT gateway, interface endpoint, gp3) have a source in the
# table; another region's network is priced at them, and plan.md says so.
NETWORK_FALLBACK = "us-east-1"


@dataclass(frozen=True)
class PriceTable:
    source: str
    date: str
    regions: Mapping[str, Mapping[str, float]]
    # Issue 46: the network's prices by region (NAT gateway per hour and per GB, interface
    # endpoint per hour), keyed as skyinfra/review/network.py names them.
    network: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    network_source: str = ""

    def hourly(self, region: str, instance_type: str) -> float | None:
        return self.regions.get(region, {}).get(instance_type)

    def network_prices(self, region: str | None) -> tuple[Mapping[str, float], str | None]:
        """(prices, None): the network's prices for ``region``; for a region the table has no
        network prices for, (NETWORK_FALLBACK's prices, NETWORK_FALLBACK), so that plan.md can
        say whose prices they are."""
        own = self.network.get(region or "")
        if own is not None or region is None or region == NETWORK_FALLBACK:
            return own or {}, None
        fallback = self.network.get(NETWORK_FALLBACK)
        return (fallback, NETWORK_FALLBACK) if fallback is not None else ({}, None)


# A table `skyinfra prices --refresh` wrote, used instead of the shipped one.
PRICES_ENV = "SKYINFRA_PRICES"


def shipped_table() -> PriceTable:
    raw = json.loads(resources.files("skyinfra.review").joinpath(PRICES).read_text("utf-8"))
    return table_from_dict(raw)


def price_table() -> PriceTable:
    """$SKYINFRA_PRICES when set, else the table shipped with skyinfra."""
    path = os.environ.get(PRICES_ENV)
    if not path:
        return shipped_table()
    try:
        return table_from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ConfigError(
            PRICES_ENV, path, f"a price table `skyinfra prices` wrote ({err})"
        ) from None


def table_from_dict(raw: Mapping[str, Any]) -> PriceTable:
    return PriceTable(
        source=str(raw["source"]),
        date=str(raw["date"]),
        regions={r: {t: float(p) for t, p in types.items()} for r, types in raw["regions"].items()},
        network={
            r: {k: float(p) for k, p in prices.items()}
            for r, prices in (raw.get("network") or {}).items()
        },
        network_source=str(raw.get("network_source", "")),
    )


@dataclass(frozen=True)
class PlannedPlace:
    """Where a plan puts its nodes: their instance type and region, as the plan says (a
    ladder's later rung: its own, where the spec names the first rung's). None: the plan does
    not say (no nodes, no region variable); the spec's then."""

    instance_type: str | None = None
    region: str | None = None


@dataclass(frozen=True)
class SpotPrices:
    """Spot prices of one instance type per zone, in USD per instance-hour, as EC2's price
    history gave them at plan time (issue 26): ``zones`` maps a zone to its price and the
    price's own timestamp (ISO 8601, UTC). Fetched by the AWS target; kept in plan-meta.json
    so that `apply PLANFILE` judges the plan on the prices it was reviewed with."""

    instance_type: str
    source: str
    zones: Mapping[str, tuple[float, str]]

    def price(self, zone: str) -> float | None:
        found = self.zones.get(zone)
        return None if found is None else found[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "source": self.source,
            "zones": {z: {"usd": p, "as_of": d} for z, (p, d) in sorted(self.zones.items())},
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SpotPrices:
        return cls(
            instance_type=str(raw["instance_type"]),
            source=str(raw["source"]),
            zones={str(z): (float(v["usd"]), str(v["as_of"])) for z, v in raw["zones"].items()},
        )


@dataclass(frozen=True)
class SpotCost:
    """How the plan's Spot nodes are priced: ``nodes`` of them (before, after) in ``zone`` at
    ``spot_usd`` each (None: no Spot price for the zone, so priced at ``on_demand_usd``, the
    most a Spot node costs without aws.spot_max_price)."""

    instance_type: str
    zone: str
    nodes_before: int
    nodes_after: int
    spot_usd: float | None
    on_demand_usd: float | None
    prices: SpotPrices

    @property
    def saving(self) -> float | None:
        """The Spot price's saving against On-Demand, as a fraction (0.7: 70 % less)."""
        if self.spot_usd is None or not self.on_demand_usd:
            return None
        return 1 - self.spot_usd / self.on_demand_usd


@dataclass(frozen=True)
class Cost:
    """Costs in USD; None where the table has no price for the instance type."""

    before_hourly: float | None
    after_hourly: float | None
    # Hours the cluster can live at most (max_lifetime_hours), None: no limit.
    lifetime_hours: float | None
    idle_shutdown_minutes: int | None
    source: str
    date: str
    free: bool = False  # the local target
    missing: tuple[str, ...] = ()  # instance types with no price in the table
    # Spot nodes (issue 26), priced at the Spot price instead of the table's; None: none.
    spot: SpotCost | None = None
    # A private network's own per-hour parts (issue 46: the bastion, a NAT gateway, interface
    # endpoints), included in the hourly figures above; empty for a public one.
    network_parts: tuple[str, ...] = ()

    @property
    def delta_hourly(self) -> float | None:
        if self.before_hourly is None or self.after_hourly is None:
            return None
        return self.after_hourly - self.before_hourly

    @property
    def lifetime_cost(self) -> float | None:
        if self.after_hourly is None or self.lifetime_hours is None:
            return None
        return self.after_hourly * self.lifetime_hours

    @property
    def idle_cost(self) -> float | None:
        """What an idle cluster costs before its idle shutdown ends it."""
        if self.after_hourly is None or not self.idle_shutdown_minutes:
            return None
        return self.after_hourly * self.idle_shutdown_minutes / 60

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            delta_hourly=self.delta_hourly,
            lifetime_cost=self.lifetime_cost,
            idle_cost=self.idle_cost,
        )
        return data


def _hourly(
    table: PriceTable,
    region: str,
    nodes: int,
    instance_type: str,
    missing: list[str],
    spot: tuple[int, float | None] = (0, None),
) -> float | None:
    """``spot``: (how many of the nodes are Spot, the Spot price of one; None: unknown, so
    priced at the On-Demand price, AWS's default cap)."""
    if nodes == 0:
        return 0.0
    price = table.hourly(region, instance_type)
    if price is None:
        missing.append(instance_type)
        return None
    spot_nodes, spot_price = spot
    return price * (nodes - spot_nodes) + (price if spot_price is None else spot_price) * spot_nodes


@dataclass(frozen=True)
class SpotPlan:
    """The plan's Spot nodes: how many on each side (before, after), priced at ``prices``'
    price for ``zone`` (the after side's zone; ``prices``: the Spot price history of their
    type at plan time, None when none was read)."""

    nodes: tuple[int, int] = (0, 0)
    zone: str | None = None
    prices: SpotPrices | None = None


def estimate(
    *,
    target: str,
    region: str | None,
    before: tuple[int, str],
    after: tuple[int, str],
    lifetime_hours: float | None,
    idle_shutdown_minutes: int | None,
    table: PriceTable | None = None,
    spot_plan: SpotPlan | None = None,
) -> Cost:
    """``before``/``after``: (node count, instance type) on each side of the plan;
    ``spot_plan``: how many of them are Spot, and at which price (None: none is)."""
    spot_plan = spot_plan or SpotPlan()
    spot_nodes, zone, spot_prices = spot_plan.nodes, spot_plan.zone, spot_plan.prices
    table = table or price_table()
    if not declaration(target).plan_traits.priced or region is None:
        return Cost(0.0, 0.0, lifetime_hours, None, table.source, table.date, free=True)
    missing: list[str] = []
    spot: SpotCost | None = None
    if any(spot_nodes):
        kind = after[1] if after[0] else before[1]
        prices = spot_prices or SpotPrices(kind, "no Spot price history at plan time", {})
        spot = SpotCost(
            instance_type=kind,
            zone=zone or "-",
            nodes_before=spot_nodes[0],
            nodes_after=spot_nodes[1],
            spot_usd=prices.price(zone or "") if prices.instance_type == kind else None,
            on_demand_usd=table.hourly(region, kind),
            prices=prices,
        )
    each = None if spot is None else spot.spot_usd
    return Cost(
        before_hourly=_hourly(table, region, *before, missing, (spot_nodes[0], each)),
        after_hourly=_hourly(table, region, *after, missing, (spot_nodes[1], each)),
        lifetime_hours=lifetime_hours,
        idle_shutdown_minutes=idle_shutdown_minutes,
        source=table.source,
        date=table.date,
        missing=tuple(sorted(set(missing))),
        spot=spot,
    )


def with_network(cost: Cost, before: float, after: float, parts: tuple[str, ...]) -> Cost:
    """``cost`` with a private network's per-hour price added on each side (issue 46), so
    that plan.md's total and ``max_hourly_usd`` count the bastion and the NAT gateway."""
    if cost.free or not (before or after or parts):
        return cost
    return replace(
        cost,
        before_hourly=None if cost.before_hourly is None else cost.before_hourly + before,
        after_hourly=None if cost.after_hourly is None else cost.after_hourly + after,
        network_parts=parts,
    )


def usd(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value != 0 and abs(value) < 0.0001:  # a Spot price this low still shows a digit
        return f"${value:.8f}".rstrip("0")
    if value != 0 and abs(value) < 1:
        return f"${value:,.4f}"
    return f"${value:,.2f}"


def signed_usd(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value == 0:
        return "$0.00"
    return ("+" if value > 0 else "-") + usd(abs(value))
