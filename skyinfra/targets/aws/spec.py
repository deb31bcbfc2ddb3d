"""The ``[aws]`` table of the spec: region, instance type, who may reach the nodes, and how.

Its type (:class:`AwsSpec`) and values, with what follows from them (each node's market, the jax
the nodes install); spec_parsing.py reads the table, declaration.py declares the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra.errors import SpecError
from skyinfra.targets.aws.accelerators import Accelerators, parse_accelerators
from skyinfra.targets.aws.addressing import MAX_NODES_DEFAULT_VPC
from skyinfra.targets.aws.ladder_spec import LADDER_KEYS
from skyinfra.targets.aws.network_spec import NETWORK_KEYS, PUBLIC, NetworkFields

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
    # The ladder (issue 44): GPUs asked for, instance types and regions in order.
    *LADDER_KEYS,
    # The network (issue 46): public or private, the bastion, NAT, Session Manager.
    *NETWORK_KEYS,
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
    "allow_reshape": False,
    "network": PUBLIC,
    "nat": False,
    "ssm": False,
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
    # The ladder (issue 44, ladder_spec.py): the instance types and regions `up` may take, in
    # order, when more than instance_type and region (which are then the first of each); the
    # GPUs per node asked for ("H100:8"), and the rules a rung is held to.
    instance_types: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    accelerators: str | None = None
    min_gpu_memory_gib: float | None = None
    allow_reshape: bool = False
    # The network (issue 46, network_spec.py): "public" or "private"; a private network's
    # way in is a bastion unless bastion = false (then node 0); a NAT gateway; SSM endpoints.
    network: str = PUBLIC
    bastion: bool | None = None
    nat: bool = False
    ssm: bool = False
    # The bastion's own image (None: Amazon Linux 2023 minimal, looked up by its module).
    bastion_ami: str | None = None
    # Not a key of [aws]: the region of the default checkpoint bucket when the ladder's lists
    # were dropped from this spec (ladder_shell.only_rung); None: ladder_regions' first.
    checkpoints_region: str | None = None

    @property
    def default_checkpoints_region(self) -> str:
        """Where the default checkpoint bucket is (without aws.checkpoints_url): the ladder's
        first region, whichever rung the cluster is on, so that a job resumed on a rung in
        another region finds its checkpoints (checkpoint_store.py)."""
        return self.checkpoints_region or self.ladder_regions[0]

    @property
    def network_fields(self) -> NetworkFields:
        return NetworkFields(self.network, self.bastion, self.nat, self.ssm, self.bastion_ami)

    @property
    def ladder_types(self) -> tuple[str, ...]:
        return self.instance_types or (self.instance_type,)

    @property
    def ladder_regions(self) -> tuple[str, ...]:
        return self.regions or (self.region,)

    @property
    def accelerators_parsed(self) -> Accelerators | None:
        return None if self.accelerators is None else parse_accelerators(self.accelerators)

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
        # A list stands for its one-rung spelling (which holds its first entry).
        if self.instance_types:
            table.pop("instance_type", None)
        if self.regions:
            table.pop("region", None)
        return table

    @property
    def uses_spot(self) -> bool:
        return SPOT in (self.market, self.head_market)


def node_markets(aws: AwsSpec, nodes: int) -> dict[str, str]:
    """Every node's market by name: node-0 (the head) ``head_market``, the workers ``market``."""
    return {
        f"node-{index}": aws.head_market if index == 0 else aws.market for index in range(nodes)
    }


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
    # Imported here: every command imports this module (the target registry), and
    # importlib.metadata (email, zipfile, csv) was a tenth of a command's start.
    import importlib.metadata

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
