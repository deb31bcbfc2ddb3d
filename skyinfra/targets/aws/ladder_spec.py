"""The ladder's fields of ``[aws]``: ``accelerators``, ``instance_types``, ``regions``,
``min_gpu_memory_gib``, ``allow_reshape``, beside the one-rung spellings ``instance_type`` and
``region``. Checked offline (accelerators.py's table), each problem naming its field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyinfra.errors import SpecError
from skyinfra.targets.aws.accelerators import (
    Accelerators,
    check_region,
    check_regions,
    narrow_types,
    parse_accelerators,
    types_carrying,
)

LADDER_KEYS = ("accelerators", "instance_types", "regions", "min_gpu_memory_gib", "allow_reshape")
INSTANCE_TYPE_RE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
# The most GPU memory any GPU has is under 300 GiB (B300): a bound that catches MiB for GiB.
MAX_GPU_MEMORY_GIB = 1024
# Fields that pin one region or one zone: with a ladder of several regions they cannot hold.
ONE_PLACE_KEYS = ("zones", "subnet_id", "vpc_id", "capacity_reservation_id")


@dataclass(frozen=True)
class LadderFields:
    """What the ladder fields say. ``instance_types`` and ``regions`` are the full lists in
    order (one entry each for the one-rung spellings)."""

    instance_types: tuple[str, ...]
    regions: tuple[str, ...]
    accelerators: Accelerators | None = None
    min_gpu_memory_gib: float | None = None
    allow_reshape: bool = False
    # Whether the lists were written as lists (or resolved from accelerators): spec.json keeps
    # the list then, and the one-rung spelling otherwise.
    types_listed: bool = False
    regions_listed: bool = False


def _both(one: str, many: str, value: Any) -> SpecError:
    return SpecError(
        f"aws.{many}",
        value,
        f"either aws.{one} (one) or aws.{many} (a list in order of preference), not both",
    )


def check_instance_types(value: Any) -> tuple[str, ...]:
    """``aws.instance_types``: a non-empty list of instance type names, each once."""
    example = '["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge"]'
    if not isinstance(value, list | tuple) or not value:
        raise SpecError(
            "aws.instance_types",
            list(value) if isinstance(value, tuple) else value,
            f"a non-empty list of instance types in order of preference, e.g. {example}",
        )
    for i, name in enumerate(value):
        if not isinstance(name, str) or not INSTANCE_TYPE_RE.match(name):
            raise SpecError(f"aws.instance_types[{i}]", name, "an instance type like 'p5.48xlarge'")
        if name in value[:i]:
            raise SpecError(f"aws.instance_types[{i}]", name, "each type once")
    return tuple(value)


def _min_memory(raw: Mapping[str, Any]) -> float | None:
    value = raw.get("min_gpu_memory_gib")
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_GPU_MEMORY_GIB
    ):
        raise SpecError(
            "aws.min_gpu_memory_gib",
            value,
            f"GiB of memory per GPU above 0 and at most {MAX_GPU_MEMORY_GIB}, e.g. 80",
        )
    return float(value)


def _allow_reshape(raw: Mapping[str, Any]) -> bool:
    value = raw.get("allow_reshape", False)
    if not isinstance(value, bool):
        raise SpecError("aws.allow_reshape", value, "true or false")
    return value


def parse_ladder(
    raw: Mapping[str, Any], instance_type: str | None, region: str | None
) -> LadderFields:
    """The ladder from ``[aws]`` (``instance_type`` and ``region`` as already read, None when
    absent). Raises the first problem; the caller collects it with the rest."""
    accelerators = (
        parse_accelerators(raw["accelerators"]) if raw.get("accelerators") is not None else None
    )
    min_memory = _min_memory(raw)
    if "instance_types" in raw:
        if "instance_type" in raw:
            raise _both("instance_type", "instance_types", raw["instance_types"])
        types = check_instance_types(raw["instance_types"])
        narrow_types(accelerators, types)
        listed = True
    elif instance_type is not None:
        narrow_types(accelerators, [instance_type], "aws.instance_type")
        types, listed = (instance_type,), False
    elif accelerators is not None:
        types, listed = types_carrying(accelerators, min_memory), True
        if not types:
            raise SpecError(
                "aws.min_gpu_memory_gib",
                min_memory,
                f"at most the memory of a {accelerators.name} GPU: no type with {accelerators} "
                "has that much",
            )
    else:
        types, listed = (), False
    if "regions" in raw:
        if "region" in raw:
            raise _both("region", "regions", raw["regions"])
        regions, regions_listed = check_regions(raw["regions"]), True
    else:
        regions = (check_region(region, "aws.region"),) if region else ()
        regions_listed = False
    if len(regions) > 1:
        for key in ONE_PLACE_KEYS:
            if key in raw:
                raise SpecError(
                    f"aws.{key}",
                    raw[key],
                    f"absent with several aws.regions ({', '.join(regions)}): it belongs to one "
                    "region",
                )
    return LadderFields(
        instance_types=types,
        regions=regions,
        accelerators=accelerators,
        min_gpu_memory_gib=min_memory,
        allow_reshape=_allow_reshape(raw),
        types_listed=listed,
        regions_listed=regions_listed,
    )
