"""Reading the ``[aws]`` table: every field checked (the patterns of ids and names, who may
reach port 22, the markets and Spot, idle shutdown, lifetime), all the problems raised together
(:func:`parse_aws_section`); the table's type and values are spec.py's.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from skyinfra_runtime.s3 import URL_EXPECTED, url_problem

from skyinfra.errors import SpecError
from skyinfra.spec import Problems, read_bool, read_int, read_str, reject_unknown
from skyinfra.targets.aws.capacity import parse_zones
from skyinfra.targets.aws.ladder_spec import LadderFields, parse_ladder
from skyinfra.targets.aws.network_spec import network_problems, parse_network
from skyinfra.targets.aws.spec import (
    AWS_KEYS,
    DEFAULT_IDLE_SHUTDOWN_MINUTES,
    DEFAULT_SSH_KEY,
    JAX_EXTRAS,
    MARKETS,
    MAX_LIFETIME_HOURS,
    MAX_SPOT_PRICE_USD,
    MIN_IDLE_SHUTDOWN_MINUTES,
    ON_DEMAND,
    SPOT,
    SPOT_FALLBACKS,
    AwsSpec,
)

_REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
_INSTANCE_TYPE_RE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
AMI_RE = re.compile(r"^ami-[0-9a-f]{8,17}$")
AMI_EXPECTED = "an AMI id like 'ami-0123456789abcdef0'"
_SUBNET_RE = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_VPC_RE = re.compile(r"^vpc-[0-9a-f]{8,17}$")
# A file path on one line (no control characters); whether the key exists is checked when
# the AWS target renders, not here (validation stays pure).
_SSH_KEY_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,4096}$")
_CAPACITY_RESERVATION_RE = re.compile(r"^cr-[0-9a-f]{8,17}$")
_JAX_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){1,3}([a-z0-9.+]*)$")
_SSH_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


def check_ssh_cidrs(value: Any, *, allow_anywhere: bool) -> tuple[str, ...]:
    """Who may reach port 22: IPv4 CIDR blocks with host bits zero (the security module opens
    IPv4 only), never the whole internet unless ``allow_anywhere``. The one rule, used by the
    spec and by the renderer."""
    if not isinstance(value, list | tuple) or not value:
        raise SpecError(
            "aws.ssh_cidrs",
            list(value) if isinstance(value, tuple) else value,
            'a non-empty list of CIDRs, e.g. ["203.0.113.4/32"]: the addresses allowed to '
            "reach port 22; there is no open-to-the-world default",
        )
    for i, cidr in enumerate(value):
        try:
            network = ipaddress.ip_network(cidr, strict=True)
        except (TypeError, ValueError):
            network = None
        if network is None or network.version != 4:
            raise SpecError(
                f"aws.ssh_cidrs[{i}]",
                cidr,
                "an IPv4 CIDR with host bits zero, e.g. 203.0.113.4/32",
            )
        if network.prefixlen == 0 and not allow_anywhere:
            raise SpecError(
                f"aws.ssh_cidrs[{i}]",
                cidr,
                "narrower CIDR blocks; 0.0.0.0/0 opens SSH to the internet and needs "
                "aws.allow_ssh_from_anywhere = true",
            )
    # Blocks that together cover every address (0.0.0.0/1 + 128.0.0.0/1) are the internet too.
    networks = [ipaddress.IPv4Network(cidr) for cidr in value]
    if not allow_anywhere and ipaddress.IPv4Network("0.0.0.0/0") in set(
        ipaddress.collapse_addresses(networks)
    ):
        raise SpecError(
            "aws.ssh_cidrs",
            list(value),
            "blocks that do not cover the whole internet together (these do); narrow them, or "
            "set aws.allow_ssh_from_anywhere = true to open SSH to everyone on purpose",
        )
    return tuple(value)


def check_checkpoints_url(value: Any) -> str:
    """``aws.checkpoints_url``: ``s3://bucket/prefix`` by the nodes' own rule (the runtime's
    s3.url_problem, which the nodes apply again)."""
    problem = url_problem(value)
    if problem:
        raise SpecError("aws.checkpoints_url", value, f"{URL_EXPECTED} ({problem})")
    return str(value)


def check_jax_extra(value: Any) -> str:
    """The jax[EXTRA] nodes install. pip drops an extra the chosen jax lacks with only a
    warning (and then installs a CPU-only jaxlib), so an unknown one is refused here."""
    if value not in JAX_EXTRAS:
        raise SpecError(
            "aws.jax_extra",
            value,
            f"one of {list(JAX_EXTRAS)} (cuda12/cuda13: NVIDIA GPUs; cpu; none: no jax)",
        )
    return str(value)


def _market(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key, ON_DEMAND)
    if value not in MARKETS:
        who = "node 0 (the head) is" if key == "head_market" else "the workers (nodes 1..) are"
        raise SpecError(
            f"aws.{key}",
            value,
            f'one of {list(MARKETS)}: how {who} bought (default "{ON_DEMAND}")',
        )
    return str(value)


def _spot_max_price(raw: Mapping[str, Any]) -> float | None:
    value = raw.get("spot_max_price")
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_SPOT_PRICE_USD
    ):
        raise SpecError(
            "aws.spot_max_price",
            value,
            f"a price in USD per node-hour above 0 and at most {MAX_SPOT_PRICE_USD:g}, e.g. "
            "1.25 (absent: AWS caps Spot at the On-Demand price)",
        )
    return float(value)


def _spot_fallback(raw: Mapping[str, Any]) -> str:
    value = raw.get("spot_fallback", "none")
    if value not in SPOT_FALLBACKS:
        raise SpecError(
            "aws.spot_fallback",
            value,
            f"one of {list(SPOT_FALLBACKS)}: launch the nodes Spot could not place in any zone "
            'On-Demand ("on-demand"), or fail ("none", the default)',
        )
    return str(value)


def _spot_problems(table: AwsSpec) -> list[SpecError]:
    """What the Spot fields refuse together with the rest of the table."""
    found: list[SpecError] = []
    spot_key = "market" if table.market == SPOT else "head_market"
    if table.uses_spot and table.capacity_reservation_id is not None:
        # A capacity reservation (ODCR) is On-Demand capacity, and a Capacity Block has its
        # own market type (capacity-block): a Spot node can use neither.
        # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-using.html
        found.append(
            SpecError(
                f"aws.{spot_key}",
                SPOT,
                f'"{ON_DEMAND}" with aws.capacity_reservation_id '
                f"({table.capacity_reservation_id}): a capacity reservation holds On-Demand "
                "capacity (a Capacity Block its own market), which Spot nodes cannot use; "
                "drop one of the two",
            )
        )
    if table.recover and table.head_market == SPOT:
        # The head is what replaces the others: an interrupted head takes the job's record
        # and its recovery with it.
        found.append(
            SpecError(
                "aws.recover",
                True,
                f'false, or aws.head_market = "{ON_DEMAND}": node 0 replaces the interrupted '
                "workers, so it must not be a Spot node itself",
            )
        )
    if table.spot_max_price is not None and not table.uses_spot:
        found.append(
            SpecError(
                "aws.spot_max_price",
                table.spot_max_price,
                'absent, or aws.market = "spot" (or aws.head_market = "spot"): it caps the '
                "price of Spot nodes, and this spec has none",
            )
        )
    return found


def _idle_minutes(raw: Mapping[str, Any]) -> int:
    value = raw.get("idle_shutdown_minutes", DEFAULT_IDLE_SHUTDOWN_MINUTES)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (value == 0 or MIN_IDLE_SHUTDOWN_MINUTES <= value <= 7 * 24 * 60)
    ):
        raise SpecError(
            "aws.idle_shutdown_minutes",
            value,
            f"0 (idle shutdown off) or minutes from {MIN_IDLE_SHUTDOWN_MINUTES} to {7 * 24 * 60}",
        )
    return value


def _lifetime_hours(raw: Mapping[str, Any]) -> float | None:
    value = raw.get("max_lifetime_hours")
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0.1 <= value <= MAX_LIFETIME_HOURS
    ):
        raise SpecError(
            "aws.max_lifetime_hours",
            value,
            f"hours from 0.1 to {MAX_LIFETIME_HOURS} after which every node ends itself "
            "(absent: no limit)",
        )
    return value


def _first_rung(
    ladder: LadderFields | None, region: str | None, instance_type: str | None
) -> tuple[str | None, str | None]:
    """instance_type and region: the first of the ladder's lists when it has them."""
    if ladder is None:
        return region, instance_type
    return (
        ladder.regions[0] if ladder.regions else region,
        ladder.instance_types[0] if ladder.instance_types else instance_type,
    )


def _ladder_fields(ladder: LadderFields | None) -> dict[str, Any]:
    if ladder is None:
        return {}
    return {
        "instance_types": ladder.instance_types if ladder.types_listed else (),
        "regions": ladder.regions if ladder.regions_listed else (),
        "accelerators": None if ladder.accelerators is None else str(ladder.accelerators),
        "min_gpu_memory_gib": ladder.min_gpu_memory_gib,
        "allow_reshape": ladder.allow_reshape,
    }


def parse_aws_section(raw: Any) -> AwsSpec:
    """``[aws]``; every field is checked, and all the problems found are raised together."""
    if not isinstance(raw, dict):
        raise SpecError("aws", raw, "a table with at least region, instance_type and ssh_cidrs")
    problems = Problems()
    problems.check(lambda: reject_unknown(raw, AWS_KEYS, "aws."), None)
    region = problems.check(
        lambda: read_str(raw, "region", "aws.region", _REGION_RE, "an AWS region like 'us-east-1'"),
        None,
    )
    if region is None and "region" not in raw and "regions" not in raw:
        problems.found.append(
            SpecError(
                "aws.region", None, "an AWS region like 'us-east-1' (required for provider aws)"
            )
        )
    instance_type = problems.check(
        lambda: read_str(
            raw,
            "instance_type",
            "aws.instance_type",
            _INSTANCE_TYPE_RE,
            "an instance type like 'g5.xlarge'",
        ),
        None,
    )
    if instance_type is None and not {"instance_type", "instance_types", "accelerators"} & set(raw):
        problems.found.append(
            SpecError("aws.instance_type", None, "an instance type like 'g5.xlarge' (required)")
        )
    allow_anywhere = problems.check(
        lambda: read_bool(raw, "allow_ssh_from_anywhere", "aws.allow_ssh_from_anywhere", False),
        False,
    )
    no_cidrs: tuple[str, ...] = ()
    cidrs = problems.check(
        lambda: check_ssh_cidrs(raw.get("ssh_cidrs"), allow_anywhere=allow_anywhere), no_cidrs
    )
    ladder = problems.check(lambda: parse_ladder(raw, instance_type, region), None)
    region, instance_type = _first_rung(ladder, region, instance_type)
    jax_extra = problems.check(lambda: check_jax_extra(raw.get("jax_extra", "cuda12")), "cuda12")
    efa = problems.check(lambda: read_bool(raw, "efa", "aws.efa", False), False)
    table = AwsSpec(
        region=region or "",
        instance_type=instance_type or "",
        ssh_cidrs=cidrs,
        allow_ssh_from_anywhere=allow_anywhere,
        ami=problems.check(
            lambda: read_str(raw, "ami", "aws.ami", AMI_RE, f"{AMI_EXPECTED} or absent"), None
        ),
        disk_gb=problems.check(lambda: read_int(raw, "disk_gb", "aws.disk_gb", 200, 8, 16384), 200),
        ssh_key=problems.check(
            lambda: read_str(
                raw,
                "ssh_key",
                "aws.ssh_key",
                _SSH_KEY_RE,
                "the path of an SSH private key, e.g. '~/.ssh/id_ed25519' (its .pub is installed)",
            ),
            None,
        )
        or DEFAULT_SSH_KEY,
        ssh_user=problems.check(
            lambda: read_str(raw, "ssh_user", "aws.ssh_user", _SSH_USER_RE, "a Unix user name"),
            None,
        ),
        subnet_id=problems.check(
            lambda: read_str(
                raw, "subnet_id", "aws.subnet_id", _SUBNET_RE, "a subnet id like 'subnet-0abc1234'"
            ),
            None,
        ),
        vpc_id=problems.check(
            lambda: read_str(raw, "vpc_id", "aws.vpc_id", _VPC_RE, "a VPC id like 'vpc-0abc1234'"),
            None,
        ),
        placement_group=problems.check(
            lambda: read_bool(raw, "placement_group", "aws.placement_group", efa), efa
        ),
        efa=efa,
        idle_shutdown_minutes=problems.check(
            lambda: _idle_minutes(raw), DEFAULT_IDLE_SHUTDOWN_MINUTES
        ),
        jax_extra=jax_extra,
        max_lifetime_hours=problems.check(lambda: _lifetime_hours(raw), None),
        jax_version=problems.check(
            lambda: read_str(
                raw,
                "jax_version",
                "aws.jax_version",
                _JAX_VERSION_RE,
                "a jax version such as '0.10.2'",
            ),
            None,
        ),
        zones=problems.check(
            lambda: parse_zones(raw["zones"], "aws.zones", region) if "zones" in raw else (),
            (),
        )
        if region is not None
        else (),
        checkpoints_url=problems.check(
            lambda: (
                check_checkpoints_url(raw["checkpoints_url"]) if "checkpoints_url" in raw else None
            ),
            None,
        ),
        capacity_reservation_id=problems.check(
            lambda: read_str(
                raw,
                "capacity_reservation_id",
                "aws.capacity_reservation_id",
                _CAPACITY_RESERVATION_RE,
                "a capacity reservation id like 'cr-0123456789abcdef0' (ODCR or Capacity Block)",
            ),
            None,
        ),
        market=problems.check(lambda: _market(raw, "market"), ON_DEMAND),
        head_market=problems.check(lambda: _market(raw, "head_market"), ON_DEMAND),
        spot_max_price=problems.check(lambda: _spot_max_price(raw), None),
        spot_fallback=problems.check(lambda: _spot_fallback(raw), "none"),
        recover=problems.check(lambda: read_bool(raw, "recover", "aws.recover", False), False),
        **_ladder_fields(ladder),
    )
    problems.found.extend(_spot_problems(table))
    problems.check(
        lambda: read_str(
            raw, "bastion_ami", "aws.bastion_ami", AMI_RE, f"{AMI_EXPECTED} or absent"
        ),
        None,
    )
    network = network_problems(raw, allow_ssh_from_anywhere=allow_anywhere)
    problems.found.extend(network)
    problems.raise_any()
    fields = parse_network(raw)
    return replace(
        table,
        network=fields.network,
        bastion=fields.bastion,
        nat=fields.nat,
        ssm=fields.ssm,
        bastion_ami=fields.bastion_ami,
    )
