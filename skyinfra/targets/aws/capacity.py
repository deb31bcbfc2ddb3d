"""Capacity failover, the pure part: what an apply failure means, which zones to try in which
order, how long to wait between rounds, and the attempt log `up` keeps in the workspace.

The shell that drives Terraform with these is failover.py.

EC2's error codes: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
The provider prints them as ``api error <Code>: <Message>`` inside its diagnostic (AWS SDK for
Go v2), e.g. ``creating EC2 Instance: operation error EC2: RunInstances, https response error
StatusCode: 500, RequestID: ..., api error InsufficientInstanceCapacity: We currently do not
have sufficient p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a)...``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from skyinfra.errors import SpecError

# The zone has no room for the type right now, or does not offer it at all: another zone can.
# InsufficientHostCapacity is the older name of InsufficientCapacityOnHost (Dedicated Hosts).
# Spot (issue 26): a RunInstances with Spot market options that finds no Spot capacity in the
# zone is refused with the same InsufficientInstanceCapacity ("There is no Spot capacity
# available that matches your request."), so it moves to the next zone the same way; a Spot
# price is per zone, but a price cap below it (SpotMaxPriceTooLow) is the user's setting, and
# the Spot vCPU quota (MaxSpotInstanceCountExceeded) is the region's: both stop at once.
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacityOnHost",
        "InsufficientHostCapacity",
        "Unsupported",
    }
)
# Nothing another zone could change: the account's quotas, the image, the caller's rights, or
# a capacity reservation that is full (the reservation fixes the zone).
FATAL_CODES = frozenset(
    {
        "VcpuLimitExceeded",
        "InstanceLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "InvalidAMIID.NotFound",
        "InvalidAMIID.Malformed",
        "InvalidAMIID.Unavailable",
        "AuthFailure",
        "UnauthorizedOperation",
        "Blocked",
        "OptInRequired",
        "PendingVerification",
        "InsufficientReservedInstanceCapacity",
        "ReservationCapacityExceeded",
        "InvalidCapacityReservationId.NotFound",
    }
)
# What the user can do about each fatal code (the message AWS gives says what, not how).
FATAL_HINTS: Mapping[str, str] = {
    "VcpuLimitExceeded": "request a higher On-Demand vCPU quota in the Service Quotas console "
    "(or ask for fewer or smaller nodes)",
    "InstanceLimitExceeded": "request a higher instance limit in the Service Quotas console",
    "MaxSpotInstanceCountExceeded": "request a higher Spot vCPU quota in the Service Quotas "
    'console ("All <class> Spot Instance Requests", e.g. L-3819A6DF for G), or set '
    'aws.market = "on-demand"',
    "SpotMaxPriceTooLow": "raise aws.spot_max_price above the Spot price AWS names, or remove "
    "it (the cap is then the On-Demand price)",
    "InvalidAMIID.NotFound": "check aws.ami: the image does not exist in this region",
    "InvalidAMIID.Malformed": "check aws.ami",
    "InvalidAMIID.Unavailable": "check aws.ami: the image is not available",
    "AuthFailure": "check the AWS credentials",
    "UnauthorizedOperation": "grant the caller ec2:RunInstances (and what the modules need)",
    "ReservationCapacityExceeded": "the capacity reservation is full: free a slot or ask for "
    "fewer nodes",
    "InsufficientReservedInstanceCapacity": "the capacity reservation is full: free a slot or "
    "ask for fewer nodes",
}

Outcome = Literal["ok", "capacity", "fatal", "error"]

_API_ERROR = re.compile(r"api error (?P<code>[A-Za-z][A-Za-z0-9.]*): (?P<message>[^\n]*)")
# Older providers (AWS SDK for Go v1): "<Code>: <Message>" without the "api error" prefix.
_BARE_CODE = re.compile(
    r"\b(?P<code>" + "|".join(re.escape(c) for c in sorted(CAPACITY_CODES | FATAL_CODES)) + r")"
    r": (?P<message>[^\n]*)"
)
# "status code: 500, request id: ..." (SDK v1) trails the message; cut it off.
_TRAILER = re.compile(r"\s*(\n|\tstatus code:|, status code:).*$", re.S)


@dataclass(frozen=True)
class Failure:
    """An apply error as far as capacity is concerned: ``outcome`` capacity (another zone may
    have room), fatal (no zone will do better) or error (not an EC2 refusal we know)."""

    outcome: Outcome
    code: str
    message: str

    def hint(self) -> str:
        return FATAL_HINTS.get(self.code, "")


def classify(text: str) -> Failure:
    """What Terraform's error text (its diagnostics) says, as a :class:`Failure`; the first
    EC2 refusal we know of wins, an unknown one reads as ``error``."""
    found: list[tuple[str, str]] = [
        (m["code"], m["message"]) for m in _API_ERROR.finditer(text)
    ] + [(m["code"], m["message"]) for m in _BARE_CODE.finditer(text)]
    for code, message in found:
        if code in CAPACITY_CODES or code in FATAL_CODES:
            outcome: Outcome = "capacity" if code in CAPACITY_CODES else "fatal"
            return Failure(outcome, code, _TRAILER.sub("", message).strip())
    if found:
        code, message = found[0]
        return Failure("error", code, _TRAILER.sub("", message).strip())
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return Failure("error", "", first)


# ---------------------------------------------------------------- zones

_ZONE_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")


def parse_zones(value: Any, field_name: str, region: str) -> tuple[str, ...]:
    """``aws.zones`` / ``--zones``: zone names of ``region`` (a list, or "a,b,c"); a bare
    letter ("b") means the region's zone. SpecError naming the bad entry."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise SpecError(
            field_name, value, f'availability zones of {region}, e.g. ["{region}a", "{region}b"]'
        )
    zones: list[str] = []
    for i, item in enumerate(items):
        name = item.strip() if isinstance(item, str) else item
        if isinstance(name, str) and re.fullmatch(r"[a-z]", name):
            name = f"{region}{name}"
        if not isinstance(name, str) or not _ZONE_RE.match(name) or not name.startswith(region):
            raise SpecError(
                f"{field_name}[{i}]", item, f"an availability zone of {region}, e.g. {region}a"
            )
        if name not in zones:
            zones.append(name)
    return tuple(zones)


def zone_order(
    offered: Sequence[str], *, wanted: Sequence[str] = (), previous: str | None = None
) -> tuple[list[str], list[str]]:
    """(zones to try in order, zones of ``wanted`` that do not offer the type).

    ``wanted`` (aws.zones / --zones) limits and orders the candidates; without it every
    offering zone in name order, the zone a previous `up` used first."""
    if wanted:
        return [z for z in wanted if z in offered], [z for z in wanted if z not in offered]
    order = sorted(offered)
    if previous in order:
        order.remove(previous)
        order.insert(0, previous)
    return order, []


# ---------------------------------------------------------------- waiting

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")


def parse_duration(value: str, field_name: str) -> float:
    """ "90s", "30m", "2h" or plain seconds -> seconds (at most a day)."""
    match = _DURATION_RE.match(value or "")
    seconds = 0.0
    if match:
        seconds = float(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2] or "s"]
    if not match or not 0 < seconds <= 24 * 3600:
        raise SpecError(field_name, value, 'a duration up to a day, e.g. "90s", "30m" or "2h"')
    return seconds


def backoff_s(round_index: int, *, base_s: float, cap_s: float) -> float:
    """Seconds to wait after failed round ``round_index`` (0-based): doubling from
    ``base_s``, never more than ``cap_s``."""
    return float(min(cap_s, base_s * (2 ** min(round_index, 30))))


# ---------------------------------------------------------------- the attempt log

# Where the cluster went and why (documented in docs/guides/aws.md, "Capacity").
LOG_FILE = "capacity.json"
LOG_SCHEMA = 1
# The log keeps this many attempts (the newest); older `up`s' fall off.
KEEP_ATTEMPTS = 100


@dataclass(frozen=True)
class Attempt:
    """One apply of the cluster into one zone."""

    up: str  # when the `up` that made it started (ISO 8601, UTC)
    round: int  # 1-based round of --retry-for
    zone: str
    asked: str  # "2 x p4d.24xlarge"
    outcome: Outcome
    code: str  # EC2's error code ("" when ok)
    message: str  # EC2's message, or "up"
    started: str
    duration_s: float

    def answer(self) -> str:
        return "ok" if self.outcome == "ok" else (self.code or self.outcome)


@dataclass
class CapacityLog:
    """The document in LOG_FILE: the cluster's zone (None: nowhere), the zone it would have
    gone to first, why it is not there (None: it is), its capacity reservation, and the
    attempts."""

    zone: str | None = None
    first_choice: str | None = None
    reason: str | None = None
    reservation: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    # Spot (issue 26): each node's market as launched ({}: not known), and, when Spot could
    # not place some nodes in any zone and aws.spot_fallback = "on-demand" launched them
    # On-Demand, which nodes and why (None: no fallback).
    markets: dict[str, str] = field(default_factory=dict)
    spot_fallback: SpotFallback | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": LOG_SCHEMA,
            "zone": self.zone,
            "first_choice": self.first_choice,
            "reason": self.reason,
            "capacity_reservation_id": self.reservation,
            "markets": dict(self.markets),
            "spot_fallback": None if self.spot_fallback is None else asdict(self.spot_fallback),
            "attempts": [asdict(a) for a in self.attempts[-KEEP_ATTEMPTS:]],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CapacityLog:
        attempts = [Attempt(**a) for a in raw.get("attempts") or [] if isinstance(a, dict)]
        fallback = raw.get("spot_fallback")
        markets = raw.get("markets")
        return cls(
            zone=raw.get("zone"),
            first_choice=raw.get("first_choice"),
            reason=raw.get("reason"),
            reservation=raw.get("capacity_reservation_id"),
            attempts=attempts,
            markets=(
                {str(k): str(v) for k, v in markets.items()} if isinstance(markets, dict) else {}
            ),
            spot_fallback=(
                SpotFallback(
                    nodes=[str(n) for n in fallback.get("nodes") or []],
                    reason=str(fallback.get("reason") or ""),
                )
                if isinstance(fallback, dict)
                else None
            ),
        )


@dataclass(frozen=True)
class SpotFallback:
    """Nodes meant for Spot that were launched On-Demand (aws.spot_fallback), and why."""

    nodes: list[str]
    reason: str


def asked_text(nodes: int, instance_type: str, markets: Mapping[str, str]) -> str:
    """What an attempt asks EC2 for: "2 x p4d.24xlarge", "(1 on Spot)" added when some are."""
    spot = sum(1 for market in markets.values() if market == "spot")
    return f"{nodes} x {instance_type}" + (f" ({spot} on Spot)" if spot else "")


def spot_fallback_reason(attempts: Iterable[Attempt], zones: Sequence[str]) -> str:
    """Why Spot could not place the nodes: the zones tried and the last refusal."""
    refusals = [a for a in attempts if a.outcome == "capacity"]
    last = (
        f"; last: {refusals[-1].zone} {refusals[-1].code} ({refusals[-1].message})"
        if refusals
        else ""
    )
    return f"no Spot capacity in any zone tried ({', '.join(zones)}){last}"


def failover_reason(attempts: Iterable[Attempt], first_choice: str, zone: str) -> str | None:
    """Why the cluster is in ``zone`` and not in ``first_choice`` (None: it is there)."""
    if zone == first_choice:
        return None
    refusals = [a for a in attempts if a.zone == first_choice and a.outcome != "ok"]
    if not refusals:
        return f"{first_choice} was not tried"
    last = refusals[-1]
    return f"{first_choice} refused {last.asked}: {last.code} ({last.message})"


def attempt_table(attempts: Sequence[Attempt]) -> str:
    """The attempts as an aligned text table (one line each, a header first)."""
    rows = [("#", "round", "zone", "asked", "AWS answered", "took")]
    for i, a in enumerate(attempts, 1):
        rows.append((str(i), str(a.round), a.zone, a.asked, a.answer(), f"{a.duration_s:.1f} s"))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return "\n".join(
        "  " + "  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip()
        for row in rows
    )
