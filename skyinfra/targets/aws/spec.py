"""The ``[aws]`` table of the spec: region, instance type, who may reach the nodes, and how."""

from __future__ import annotations

import importlib.metadata
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from skyinfra_runtime.s3 import URL_EXPECTED, url_problem

from skyinfra.errors import SpecError
from skyinfra.guardrail_table import Guardrails
from skyinfra.spec import ClusterSpec, Problems, read_bool, read_int, read_str, reject_unknown
from skyinfra.target_registry import DiagramPart, PlanTraits, TargetOption
from skyinfra.targets.aws.addressing import MAX_NODES_DEFAULT_VPC
from skyinfra.targets.aws.capacity import parse_zones

# The jax[EXTRA] every AWS node installs; "none" installs no jax (a torch-only cluster, or an
# image that brings its own).
NO_JAX = "none"
JAX_EXTRAS = ("cuda12", "cuda13", "cpu", NO_JAX)
# As many nodes as the default VPC holds (one fixed private address each, addressing.py);
# the renderer checks a smaller or existing subnet, the preflight the account's quotas.
MAX_AWS_NODES = MAX_NODES_DEFAULT_VPC
# The private key `run` reaches AWS nodes with; its public half (<path>.pub) is installed.
DEFAULT_SSH_KEY = "~/.ssh/id_ed25519"
# Idle shutdown is on by default: a forgotten GPU node ends itself after an hour idle.
DEFAULT_IDLE_SHUTDOWN_MINUTES = 60
MIN_IDLE_SHUTDOWN_MINUTES = 5

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

AWS_KEYS = (
    "region",
    "instance_type",
    "ami",
    "disk_gb",
    "ssh_cidrs",
    "ssh_key",
    "ssh_user",
    "subnet_id",
    "vpc_id",
    "placement_group",
    "efa",
    "idle_shutdown_minutes",
    "jax_extra",
    "jax_version",
    "allow_ssh_from_anywhere",
    # Capacity (issue 13): candidate zones in order, and a capacity reservation to launch into.
    "zones",
    "capacity_reservation_id",
    "max_lifetime_hours",
    # Checkpoints (issue 25): the S3 prefix the nodes' checkpoint directories are kept under.
    "checkpoints_url",
    # Spot (issue 26): the workers' market, the head's, a price cap, and what to do when Spot
    # has no capacity in any zone.
    "market",
    "head_market",
    "spot_max_price",
    "spot_fallback",
    # Unattended recovery (issue 26): the head replaces lost and interrupted workers itself.
    "recover",
)
# Spot (issue 26). The head (node 0) runs the coordinator: it stays On-Demand unless asked.
ON_DEMAND = "on-demand"
SPOT = "spot"
MARKETS = (ON_DEMAND, SPOT)
# What `up` does with nodes Spot could not place in any zone: launch them On-Demand, or fail.
SPOT_FALLBACKS = (ON_DEMAND, "none")
# A cap on spot_max_price: far above any EC2 On-Demand price (a p5en.48xlarge is under
# $100/h), so a typo such as 4500 for 4.5 is caught.
MAX_SPOT_PRICE_USD = 1000.0
# Left out of to_dict() at these values: a spec without Spot reads as it did before issue 26.
_QUIET_DEFAULTS = {
    "market": ON_DEMAND,
    "head_market": ON_DEMAND,
    "spot_fallback": "none",
    "recover": False,
}
# The longest max_lifetime_hours: 30 days.
MAX_LIFETIME_HOURS = 30 * 24


@dataclass(frozen=True)
class AwsSpec:
    region: str
    instance_type: str
    ssh_cidrs: tuple[str, ...]
    ami: str | None = None
    disk_gb: int = 200
    # Path of the private key; the AWS target installs "<ssh_key>.pub" as the nodes' key pair.
    ssh_key: str = DEFAULT_SSH_KEY
    # None: the login user of the AMI (ubuntu for the Deep Learning AMI), looked up at `up`.
    ssh_user: str | None = None
    subnet_id: str | None = None
    vpc_id: str | None = None
    # Parsing defaults it to ``efa``: AWS recommends running EFA instances in a cluster
    # placement group (https://docs.aws.amazon.com/parallelcluster/latest/ug/efa-v3.html,
    # https://docs.aws.amazon.com/pcs/latest/userguide/working-with_networking_efa_create-placement-group.html).
    placement_group: bool = False
    efa: bool = False
    # Minutes without a skyinfra process before a node shuts itself down (and so terminates);
    # 0 turns the idle timer off.
    idle_shutdown_minutes: int = DEFAULT_IDLE_SHUTDOWN_MINUTES
    jax_extra: str = "cuda12"
    # The jax version the nodes install; None: the operator's own (jax_requirement()).
    jax_version: str | None = None
    # 0.0.0.0/0 in ssh_cidrs opens port 22 to the internet: only when asked for by name.
    allow_ssh_from_anywhere: bool = False
    # Availability zones `up` may use, in order (empty: every zone offering the type).
    zones: tuple[str, ...] = ()
    # An On-Demand Capacity Reservation or Capacity Block (cr-...): fixes the zone.
    capacity_reservation_id: str | None = None
    # Hours after launch when a node ends itself, busy or not (idle-check.sh); None: no limit.
    # `skyinfra plan` prices the cluster's lifetime from it.
    max_lifetime_hours: float | None = None
    # s3://bucket/prefix where every job's checkpoint set is kept (<prefix>/<NAME>/); None:
    # the account's checkpoint bucket, under <cluster>/checkpoints (checkpoint_store.py).
    checkpoints_url: str | None = None
    # Spot (issue 26): the market of the workers (nodes 1..n-1) and of the head (node 0);
    # the highest price per node-hour in USD (None: AWS's default cap, the On-Demand price);
    # "on-demand": nodes Spot could not place in any zone are launched On-Demand instead.
    market: str = ON_DEMAND
    head_market: str = ON_DEMAND
    spot_max_price: float | None = None
    spot_fallback: str = "none"
    # Unattended recovery: node 0 (On-Demand) replaces a detached job's lost or interrupted
    # workers itself, with Terraform on the shared state (the spec's S3 backend) and a role
    # limited to the cluster's own resources (skyinfra.run.head_recovery).
    recover: bool = False

    @property
    def needs_backend(self) -> str | None:
        """The field that needs the state in S3 (the spec's ``backend``), if any: the head
        applies the cluster's Terraform itself, under the same lock as the operators."""
        return "aws.recover" if self.recover else None

    def to_dict(self) -> dict[str, Any]:
        """The table as the spec file holds it (absent optional values left out)."""
        table: dict[str, Any] = {}
        for key in AWS_KEYS:
            value = getattr(self, key)
            if value is not None and value != () and _QUIET_DEFAULTS.get(key) != value:
                table[key] = list(value) if isinstance(value, tuple) else value
        return table

    @property
    def uses_spot(self) -> bool:
        return SPOT in (self.market, self.head_market)


def node_markets(aws: AwsSpec, nodes: int) -> dict[str, str]:
    """Every node's market by name: node-0 (the head) ``head_market``, the workers ``market``."""
    return {
        f"node-{index}": aws.head_market if index == 0 else aws.market for index in range(nodes)
    }


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
    if region is None and "region" not in raw:
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
    if instance_type is None and "instance_type" not in raw:
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
    )
    problems.found.extend(_spot_problems(table))
    problems.raise_any()
    return table


def check_ssh_key_file(aws: AwsSpec) -> Path:
    """The private key file ``aws.ssh_key`` names must exist on this machine (`run` reaches
    the nodes with it; its .pub is installed). Checked offline, before any AWS call."""
    private = Path(aws.ssh_key).expanduser()
    if not private.is_file():
        hint = f"create one with `ssh-keygen -t ed25519 -f {aws.ssh_key}`, or set aws.ssh_key"
        raise SpecError("aws.ssh_key", aws.ssh_key, f"an existing SSH private key file ({hint})")
    return private


def operator_jax_version() -> str | None:
    """The jax installed beside skyinfra (what the user tested with); None without one."""
    try:
        return importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return None


def jax_requirement(spec_aws: AwsSpec, operator_version: str | None = None) -> str | None:
    """What every node installs: ``jax[EXTRA]==VERSION`` with aws.jax_version, else the
    operator's jax version (``operator_version``; looked up when None), so that nodes run the
    jax the code was tested with; unpinned without either; None for jax_extra = "none"."""
    if spec_aws.jax_extra == NO_JAX:
        return None
    version = spec_aws.jax_version or operator_version or operator_jax_version()
    return f"jax[{spec_aws.jax_extra}]" + (f"=={version}" if version else "")


# ---------------------------------------------------------------- the declaration

SKIP_PREFLIGHT = TargetOption(
    name="skip_preflight",
    flag="--skip-preflight",
    help="skip the boto3 checks before Terraform (instance type offered in the zone, vCPU "
    "quota); values such as the AMI id are still looked up.",
    commands=("up", "plan", "render"),
)
ZONES = TargetOption(
    name="zones",
    flag="--zones",
    metavar="ZONES",
    help="availability zones to try, in order (e.g. us-east-1a,us-east-1c, or a,c); "
    "default aws.zones, else every zone offering the type. A new cluster whose zone has no "
    "capacity moves to the next one.",
)
RETRY_FOR = TargetOption(
    name="retry_for",
    flag="--retry-for",
    metavar="DURATION",
    help="keep cycling the zones, with back-off, until capacity appears or DURATION (e.g. "
    "30m) has passed.",
)


class AwsDeclaration:
    """The aws target as the spec and the CLI know it (skyinfra.target_registry); reading an
    aws spec loads no boto3. AwsTarget (target.py) adds the verbs."""

    name: ClassVar[str] = "aws"
    max_nodes: ClassVar[int] = MAX_AWS_NODES
    options: ClassVar[tuple[TargetOption, ...]] = (SKIP_PREFLIGHT, ZONES, RETRY_FOR)
    plan_traits: ClassVar[PlanTraits] = PlanTraits(
        node_resource="aws_instance",
        node_noun="GPU node",
        diagram_parts=(
            DiagramPart("vpc", "VPC", "aws_vpc", "VPC (existing)"),
            DiagramPart("subnet", "subnet", "aws_subnet", "subnet (existing)"),
            DiagramPart("sg", "security group", "aws_security_group"),
        ),
        priced=True,
    )

    def parse_section(self, raw: Any, *, nodes: int) -> AwsSpec:
        return parse_aws_section(raw)

    def environment_problems(self, spec: ClusterSpec) -> list[SpecError]:
        # Nodes install their frameworks themselves (cloud-init): nothing from this machine.
        return []

    def offline_problems(self, section: Any, guardrails: Guardrails) -> list[SpecError]:
        problems = Problems()
        problems.check(lambda: check_ssh_key_file(section), None)
        if guardrails.require_idle_shutdown and section.idle_shutdown_minutes == 0:
            problems.found.append(
                SpecError(
                    "guardrails.require_idle_shutdown",
                    True,
                    "aws.idle_shutdown_minutes above 0 (it is 0: the idle shutdown is off), "
                    "or guardrails.require_idle_shutdown = false",
                )
            )
        world = [c for c in section.ssh_cidrs if c.endswith("/0")]
        if world and not guardrails.allow_world_ssh:
            problems.found.append(
                SpecError(
                    "guardrails.allow_world_ssh",
                    False,
                    f"true to open SSH to the internet ({world[0]} in aws.ssh_cidrs), or "
                    "narrower aws.ssh_cidrs",
                )
            )
        return problems.found
