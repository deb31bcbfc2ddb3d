"""The spec's ``[guardrails]`` table: the limits a planned change must keep.

Parsed with the rest of the spec; the checks against a plan are skyinfra/review/guardrails.py.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from skyinfra.errors import SpecError

GUARDRAIL_KEYS = (
    "max_hourly_usd",
    "require_idle_shutdown",
    "allow_world_ssh",
    # Issue 46: a private network's nodes may reach 0.0.0.0/0 (aws.nat = true).
    "allow_internet_egress",
)
_SWITCHES = ("require_idle_shutdown", "allow_world_ssh", "allow_internet_egress")


@dataclass(frozen=True)
class Guardrails:
    """The spec's ``[guardrails]`` table (absent: no limits, world SSH refused)."""

    max_hourly_usd: float | None = None
    require_idle_shutdown: bool = False
    allow_world_ssh: bool = False
    allow_internet_egress: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The table as the spec file holds it (defaults left out)."""
        default = Guardrails()
        return {k: v for k, v in asdict(self).items() if v != getattr(default, k)}


def parse_guardrails(raw: Any) -> Guardrails:
    """``[guardrails]``; SpecError naming the field."""
    if raw is None:
        return Guardrails()
    if not isinstance(raw, dict):
        raise SpecError("guardrails", raw, f"a table with keys among {list(GUARDRAIL_KEYS)}")
    for key in raw:
        if key not in GUARDRAIL_KEYS:
            raise SpecError(f"guardrails.{key}", raw[key], f"one of {list(GUARDRAIL_KEYS)}")
    limit = raw.get("max_hourly_usd")
    if limit is not None and (
        isinstance(limit, bool)
        or not isinstance(limit, int | float)
        or not math.isfinite(limit)
        or limit < 0
    ):
        raise SpecError("guardrails.max_hourly_usd", limit, "a number of dollars >= 0, e.g. 50")
    flags = {}
    for key in _SWITCHES:
        value = raw.get(key, False)
        if not isinstance(value, bool):
            raise SpecError(f"guardrails.{key}", value, "true or false")
        flags[key] = value
    return Guardrails(
        max_hourly_usd=None if limit is None else float(limit),
        require_idle_shutdown=flags["require_idle_shutdown"],
        allow_world_ssh=flags["allow_world_ssh"],
        allow_internet_egress=flags["allow_internet_egress"],
    )
