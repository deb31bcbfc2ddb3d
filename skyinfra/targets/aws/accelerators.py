"""GPUs by name and count (``aws.accelerators = "H100:8"``), resolved offline against a built-in
table of EC2's GPU instance types.

The table is what EC2's DescribeInstanceTypes says of each type's GpuInfo (GPU name, count per
instance, memory per GPU), EfaSupported and DefaultVCpus; tests/unit/aws/test_accelerators.py
keeps it equal to moto's copy of that answer. Types with a fraction of a GPU (g6f: count 0) are
left out: they cannot carry ``NAME:N``. Pure: no boto3, no network.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from skyinfra.errors import SpecError


@dataclass(frozen=True)
class GpuType:
    """One GPU instance type: its GPUs (name, count, memory of each in MiB), EFA, vCPUs."""

    instance_type: str
    gpu_name: str
    gpu_count: int
    gpu_memory_mib: int
    efa: bool
    vcpus: int

    @property
    def gpu_memory_gib(self) -> float:
        """Memory of one GPU in GiB (EC2 reports MiB; an A10G's 22888 MiB is 22.4 GiB)."""
        return self.gpu_memory_mib / 1024


# DescribeInstanceTypes, GPU types with whole GPUs, as of 2026-11 (moto 5.2.5's copy).
GPU_TYPES: tuple[GpuType, ...] = (
    GpuType("g4dn.12xlarge", "T4", 4, 16384, True, 48),
    GpuType("g4dn.16xlarge", "T4", 1, 16384, True, 64),
    GpuType("g4dn.2xlarge", "T4", 1, 16384, False, 8),
    GpuType("g4dn.4xlarge", "T4", 1, 16384, False, 16),
    GpuType("g4dn.8xlarge", "T4", 1, 16384, True, 32),
    GpuType("g4dn.metal", "T4", 8, 16384, True, 96),
    GpuType("g4dn.xlarge", "T4", 1, 16384, False, 4),
    GpuType("g5.12xlarge", "A10G", 4, 22888, True, 48),
    GpuType("g5.16xlarge", "A10G", 1, 22888, True, 64),
    GpuType("g5.24xlarge", "A10G", 4, 22888, True, 96),
    GpuType("g5.2xlarge", "A10G", 1, 22888, False, 8),
    GpuType("g5.48xlarge", "A10G", 8, 22888, True, 192),
    GpuType("g5.4xlarge", "A10G", 1, 22888, False, 16),
    GpuType("g5.8xlarge", "A10G", 1, 22888, True, 32),
    GpuType("g5.xlarge", "A10G", 1, 22888, False, 4),
    GpuType("g5g.16xlarge", "T4g", 2, 16384, False, 64),
    GpuType("g5g.2xlarge", "T4g", 1, 16384, False, 8),
    GpuType("g5g.4xlarge", "T4g", 1, 16384, False, 16),
    GpuType("g5g.8xlarge", "T4g", 1, 16384, False, 32),
    GpuType("g5g.metal", "T4g", 2, 16384, False, 64),
    GpuType("g5g.xlarge", "T4g", 1, 16384, False, 4),
    GpuType("g6.12xlarge", "L4", 4, 22888, True, 48),
    GpuType("g6.16xlarge", "L4", 1, 22888, True, 64),
    GpuType("g6.24xlarge", "L4", 4, 22888, True, 96),
    GpuType("g6.2xlarge", "L4", 1, 22888, False, 8),
    GpuType("g6.48xlarge", "L4", 8, 22888, True, 192),
    GpuType("g6.4xlarge", "L4", 1, 22888, False, 16),
    GpuType("g6.8xlarge", "L4", 1, 22888, True, 32),
    GpuType("g6.xlarge", "L4", 1, 22888, False, 4),
    GpuType("g6e.12xlarge", "L40S", 4, 45776, True, 48),
    GpuType("g6e.16xlarge", "L40S", 1, 45776, True, 64),
    GpuType("g6e.24xlarge", "L40S", 4, 45776, True, 96),
    GpuType("g6e.2xlarge", "L40S", 1, 45776, False, 8),
    GpuType("g6e.48xlarge", "L40S", 8, 45776, True, 192),
    GpuType("g6e.4xlarge", "L40S", 1, 45776, False, 16),
    GpuType("g6e.8xlarge", "L40S", 1, 45776, True, 32),
    GpuType("g6e.xlarge", "L40S", 1, 45776, False, 4),
    GpuType("g7.12xlarge", "RTX PRO 4500", 2, 32768, True, 48),
    GpuType("g7.24xlarge", "RTX PRO 4500", 4, 32768, True, 96),
    GpuType("g7.2xlarge", "RTX PRO 4500", 1, 32768, False, 8),
    GpuType("g7.48xlarge", "RTX PRO 4500", 8, 32768, True, 192),
    GpuType("g7.4xlarge", "RTX PRO 4500", 1, 32768, False, 16),
    GpuType("g7.8xlarge", "RTX PRO 4500", 1, 32768, True, 32),
    GpuType("g7e.12xlarge", "RTX PRO Server 6000", 2, 98304, True, 48),
    GpuType("g7e.24xlarge", "RTX PRO Server 6000", 4, 98304, True, 96),
    GpuType("g7e.2xlarge", "RTX PRO Server 6000", 1, 98304, False, 8),
    GpuType("g7e.48xlarge", "RTX PRO Server 6000", 8, 98304, True, 192),
    GpuType("g7e.4xlarge", "RTX PRO Server 6000", 1, 98304, False, 16),
    GpuType("g7e.8xlarge", "RTX PRO Server 6000", 1, 98304, True, 32),
    GpuType("gr6.4xlarge", "L4", 1, 22888, False, 16),
    GpuType("gr6.8xlarge", "L4", 1, 22888, True, 32),
    GpuType("p3dn.24xlarge", "V100", 8, 32768, True, 96),
    GpuType("p4d.24xlarge", "A100", 8, 40960, True, 96),
    GpuType("p4de.24xlarge", "A100", 8, 81920, True, 96),
    GpuType("p5.48xlarge", "H100", 8, 81920, True, 192),
    GpuType("p5.4xlarge", "H100", 1, 81920, True, 16),
    GpuType("p5e.48xlarge", "H200", 8, 144384, True, 192),
    GpuType("p5en.48xlarge", "H200", 8, 144384, True, 192),
    GpuType("p6-b200.48xlarge", "B200", 8, 183359, True, 192),
    GpuType("p6-b300.48xlarge", "B300", 8, 275040, True, 192),
)
_BY_TYPE = {row.instance_type: row for row in GPU_TYPES}
# GPU names as EC2 spells them, each with the counts per instance some type has.
GPU_COUNTS: dict[str, tuple[int, ...]] = {
    name: tuple(sorted({r.gpu_count for r in GPU_TYPES if r.gpu_name == name}))
    for name in sorted({r.gpu_name for r in GPU_TYPES})
}

# The AWS regions a ladder may name (the commercial and GovCloud partitions).
AWS_REGIONS: tuple[str, ...] = (
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "ca-central-1",
    "ca-west-1",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "mx-central-1",
    "sa-east-1",
    "us-east-1",
    "us-east-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "us-west-1",
    "us-west-2",
)

_ACCELERATORS_RE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9 ]*?)\s*:\s*(?P<count>\d+)$")
ACCELERATORS_EXPECTED = 'GPU name and count per node, e.g. "H100:8", "A100:8", "L4:1", "A10G:4"'


@dataclass(frozen=True)
class Accelerators:
    """``NAME:COUNT``: the GPU (as EC2 names it) and how many each node carries."""

    name: str
    count: int

    def __str__(self) -> str:
        return f"{self.name}:{self.count}"


def gpu_type(instance_type: str) -> GpuType | None:
    """The table's row of ``instance_type`` (None: not a GPU type skyinfra knows)."""
    return _BY_TYPE.get(instance_type)


def _known_names() -> str:
    return ", ".join(GPU_COUNTS)


def parse_accelerators(value: Any, field_name: str = "aws.accelerators") -> Accelerators:
    """``"H100:8"`` -> Accelerators("H100", 8). The name is matched without regard to case
    and kept as EC2 spells it; the count must be one some instance type has."""
    match = _ACCELERATORS_RE.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise SpecError(field_name, value, ACCELERATORS_EXPECTED)
    wanted = match.group("name").strip().lower()
    name = next((n for n in GPU_COUNTS if n.lower() == wanted), None)
    if name is None:
        raise SpecError(field_name, value, f"a GPU name EC2 offers ({_known_names()}) and a count")
    count = int(match.group("count"))
    counts = GPU_COUNTS[name]
    if count not in counts:
        shown = ", ".join(f'"{name}:{c}"' for c in counts)
        raise SpecError(
            field_name,
            value,
            f"a count of {name} GPUs some instance type has per node: {shown}",
        )
    return Accelerators(name, count)


def types_carrying(
    accelerators: Accelerators, min_gpu_memory_gib: float | None = None
) -> tuple[str, ...]:
    """The instance types with exactly ``accelerators`` per node (and at least
    ``min_gpu_memory_gib`` on each GPU), fewest vCPUs first (the smaller host is the cheaper
    one), then by name."""
    rows = [
        r
        for r in GPU_TYPES
        if (r.gpu_name, r.gpu_count) == (accelerators.name, accelerators.count)
        and (min_gpu_memory_gib is None or r.gpu_memory_gib >= min_gpu_memory_gib)
    ]
    return tuple(r.instance_type for r in sorted(rows, key=lambda r: (r.vcpus, r.instance_type)))


def check_region(value: Any, field_name: str) -> str:
    """A region the table knows; the message names the nearest ones."""
    if isinstance(value, str) and value in AWS_REGIONS:
        return value
    prefix = value.split("-")[0] if isinstance(value, str) else ""
    near = [r for r in AWS_REGIONS if r.startswith(f"{prefix}-")] or list(AWS_REGIONS[:6])
    raise SpecError(field_name, value, f"an AWS region such as {', '.join(near)}")


def check_regions(value: Any, field_name: str = "aws.regions") -> tuple[str, ...]:
    """``aws.regions``: a non-empty list of known regions, each once, in order of preference."""
    if not isinstance(value, list | tuple) or not value:
        raise SpecError(
            field_name,
            value,
            'a non-empty list of AWS regions in order, e.g. ["us-east-1", "us-west-2"]',
        )
    regions = tuple(check_region(r, f"{field_name}[{i}]") for i, r in enumerate(value))
    _no_repeats(regions, field_name)
    return regions


def _no_repeats(values: Sequence[str], field_name: str) -> None:
    for i, item in enumerate(values):
        if item in values[:i]:
            raise SpecError(
                f"{field_name}[{i}]", item, f"each entry once ({item!r} is listed twice)"
            )


def narrow_types(
    accelerators: Accelerators | None,
    instance_types: Iterable[str],
    field_name: str = "aws.instance_types",
) -> None:
    """With ``accelerators``, every listed type must carry exactly them; SpecError naming the
    entry and the types that would do."""
    if accelerators is None:
        return
    valid = types_carrying(accelerators)
    for i, name in enumerate(instance_types):
        if name not in valid:
            row = gpu_type(name)
            has = f"{row.gpu_name}:{row.gpu_count}" if row else "no GPUs skyinfra knows"
            raise SpecError(
                f"{field_name}[{i}]",
                name,
                f"a type with {accelerators} per node ({', '.join(valid)}); {name} has {has}",
            )
