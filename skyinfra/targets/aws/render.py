"""Render the per-cluster AWS root module from plain parameters (pure: only reads templates).

The root module only wires the static modules of ``infra/modules/aws`` together (the workspace
holds a copy of them under ``modules/aws/``); every value lives in ``terraform.tfvars.json``
so a reviewer sees the settings in one place.
"""

from __future__ import annotations

import base64
import gzip
import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from skyinfra.errors import InternalError, RenderError, SpecError
from skyinfra.render import render_root
from skyinfra.spec import check_name
from skyinfra.targets.aws.addressing import (
    DEFAULT_HOST_OFFSET,
    DEFAULT_VPC_CIDR,
    RESERVED_LOW,
    max_nodes,
    public_subnet_for,
)
from skyinfra.targets.aws.endpoints import (
    EMULATOR_CONFIG_FILE,
    EMULATOR_PROFILE,
    Emulator,
    emulator_config_text,
)
from skyinfra.targets.aws.network_spec import BASTION_DEFAULT_USER
from skyinfra.targets.aws.spec import MARKETS, MAX_AWS_NODES, SPOT
from skyinfra.targets.aws.spec_parsing import AMI_EXPECTED, AMI_RE, check_ssh_cidrs
from skyinfra.terraform.backend import LOCK_SUFFIX

# The root module's values (the settings of the last `up`, which the next one pins from).
TFVARS_FILE = "terraform.tfvars.json"
# The static modules the root module calls (copied into the workspace under modules/aws/).
MODULES = ("aws/network", "aws/security", "aws/nodes", "aws/bastion")

# The provider version the modules are applied with in our tests (the local mirror holds it).
AWS_PROVIDER_VERSION = "5.100.0"

# The provider's max_retries (its default is 25, which makes a zone without capacity answer
# only after many minutes; see the root template). An emulator on loopback needs fewer, but
# not too few: on a loaded 2-core CI machine the emulator's threaded HTTP server once dropped a
# connection mid-response twice in a row ("use of closed network connection" on DescribeVpcs
# while `down` waited for the VPC to go), and with 2 attempts that failed the destroy.
PROVIDER_MAX_RETRIES = 5
EMULATOR_MAX_RETRIES = 4

# EC2 limits user data to 16 KB before base64:
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html
USER_DATA_LIMIT_BYTES = 16 * 1024


# The bastion's type (aws.bastion): it only forwards SSH. x86_64, like the image its module
# looks up (Amazon Linux 2023 minimal), not the nodes' GPU image.
BASTION_INSTANCE_TYPE = "t3.micro"


@dataclass(frozen=True)
class PrivateNetwork:
    """A private network (issue 46, aws.network = "private"): no node has a public address,
    the way in is a bastion (or node-0 without one), S3 through a gateway endpoint, the
    internet only through a NAT gateway (``nat``), Session Manager endpoints with ``ssm``."""

    bastion: bool = True
    nat: bool = False
    ssm: bool = False
    bastion_instance_type: str = BASTION_INSTANCE_TYPE
    # aws.bastion_ami and its login user; None: the module's Amazon Linux 2023 minimal.
    bastion_ami: str | None = None
    bastion_user: str = BASTION_DEFAULT_USER


@dataclass(frozen=True)
class AwsClusterParams:
    """Everything the AWS root module needs, already resolved (concrete AMI id, EFA count)."""

    cluster_name: str
    region: str
    availability_zone: str
    instance_type: str
    ami_id: str
    node_count: int
    ssh_public_key: str
    ssh_ingress_cidrs: Sequence[str] = ()
    enable_ssh: bool = True
    allow_ssh_from_anywhere: bool = False
    root_volume_size_gb: int = 200
    placement_group: bool = False
    efa_interface_count: int = 0
    vpc_cidr_block: str = DEFAULT_VPC_CIDR
    # skyinfra's own subnet is sized for the cluster by addressing.subnet_for (the target).
    subnet_cidr_block: str = "10.42.0.0/24"
    existing_vpc_id: str | None = None
    existing_subnet_id: str | None = None
    private_ip_host_offset: int = DEFAULT_HOST_OFFSET
    head_port: int = 29500
    # GPU name and count per node (DescribeInstanceTypes GpuInfo), or None for none/unknown.
    accelerator: tuple[str, int] | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    # Where the runtime wheel is staged (bucket, prefix): the nodes' role may read it.
    staging: tuple[str, str] | None = None
    # A private network's S3 wheelhouse (issue 46): its prefix in the staging bucket, which
    # the nodes' role may read too (wheelhouse.py); None: the nodes install from the indexes.
    wheelhouse_prefix: str | None = None
    # A capacity reservation the nodes launch into: (id, is a Capacity Block), or None.
    capacity_reservation: tuple[str, bool] | None = None
    # Checkpoints (issue 25): the (bucket, prefix) the nodes' role may read and write.
    checkpoints: tuple[str, str] | None = None
    # Spot (issue 26): each node's market by name ("on-demand" or "spot"; a node not named
    # is On-Demand), and the Spot nodes' price cap in USD per hour (None: the On-Demand price).
    node_markets: Mapping[str, str] = field(default_factory=dict)
    spot_max_price: float | None = None
    # Unattended recovery (issue 26, aws.recover): the (bucket, key) of the cluster's state
    # object in S3, which node-0 reads and writes with a role of its own (the nodes module's
    # head_recovery); None: off, and the rendered files are those of a cluster without it.
    head_recovery: tuple[str, str] | None = None
    # Issue 46: a private network, or None (public: every node has a public address, and the
    # rendered files are those of a cluster from before it).
    private_network: PrivateNetwork | None = None

    def spot_nodes(self) -> list[str]:
        """The nodes bought on Spot, in node order."""
        return [n for n in node_names(self.node_count) if self.node_markets.get(n) == SPOT]


def head_recovery_keys(state: tuple[str, str]) -> dict[str, str]:
    """The nodes module's ``head_recovery``: the state bucket and key, and Terraform's S3 lock
    object beside the state (``use_lockfile``)."""
    bucket, key = state
    return {"bucket": bucket, "state_key": key, "lock_key": f"{key}{LOCK_SUFFIX}"}


def node_names(node_count: int) -> list[str]:
    """The node names the nodes module uses as keys (node-0, node-1, ...)."""
    return [f"node-{index}" for index in range(node_count)]


def planned_private_ips(params: AwsClusterParams) -> dict[str, str]:
    """The fixed private address of every node, as the nodes module computes it (cidrhost)."""
    subnet = ipaddress.ip_network(params.subnet_cidr_block, strict=False)
    return {
        name: str(subnet.network_address + params.private_ip_host_offset + index)
        for index, name in enumerate(node_names(params.node_count))
    }


def encode_user_data(document: str) -> dict[str, str]:
    """The nodes module's user_data entry: plain text when it fits, else gzip + base64.

    EC2 counts the raw bytes against its 16 KB limit; gzip-compressed data must go through
    ``user_data_base64`` or the provider corrupts it (aws_instance docs). cloud-init detects
    and unpacks gzip by itself.
    """
    raw = document.encode()
    if len(raw) <= USER_DATA_LIMIT_BYTES:
        return {"text": document}
    packed = gzip.compress(raw, compresslevel=9, mtime=0)
    if len(packed) > USER_DATA_LIMIT_BYTES:
        raise RenderError(
            "user_data",
            f"{len(packed)} bytes after gzip",
            f"at most {USER_DATA_LIMIT_BYTES} bytes (EC2's user-data limit); embed less",
        )
    return {"base64": base64.b64encode(packed).decode()}


def _check_network(params: AwsClusterParams) -> None:
    """The spec's subnet (both ids or neither), and room for the nodes' addresses in it or in
    skyinfra's own."""
    if (params.existing_vpc_id is None) != (params.existing_subnet_id is None):
        # The target resolves the VPC from aws.subnet_id: one without the other is a bug.
        raise InternalError(
            f"existing_vpc_id={params.existing_vpc_id!r} and "
            f"existing_subnet_id={params.existing_subnet_id!r}: both or neither"
        )
    subnet = ipaddress.ip_network(params.subnet_cidr_block, strict=False)
    if params.existing_subnet_id is None:
        vpc = ipaddress.ip_network(params.vpc_cidr_block, strict=False)
        if not subnet.subnet_of(vpc):  # type: ignore[arg-type]
            raise InternalError(f"subnet {subnet} does not lie in the VPC {vpc}")
    # One fixed address per node (EFA-only interfaces hold none: addressing.py); AWS keeps
    # the first four and the last address of every subnet.
    room = max_nodes(
        params.subnet_cidr_block, params.private_ip_host_offset, params.efa_interface_count
    )
    if params.private_ip_host_offset < RESERVED_LOW or params.node_count > room:
        where = f"subnet {params.subnet_cidr_block}" + (
            f" ({params.existing_subnet_id}, aws.subnet_id)" if params.existing_subnet_id else ""
        )
        raise SpecError(
            "nodes",
            params.node_count,
            f"at most {room} nodes: one fixed private address each, from host "
            f"{params.private_ip_host_offset} of {where} (AWS reserves the subnet's first "
            "four and last addresses)",
        )


def validate_params(params: AwsClusterParams) -> None:
    """Refuse bad values before anything is written, naming the field and what is valid.

    The user's values go through the spec's own rules (skyinfra/spec/, aws/spec_parsing.py); the
    rest are the renderer's invariants."""
    check_name(params.cluster_name)
    if not 1 <= params.node_count <= MAX_AWS_NODES:
        raise SpecError("nodes", params.node_count, f"a whole number from 1 to {MAX_AWS_NODES}")
    if not AMI_RE.match(params.ami_id):
        raise SpecError("aws.ami", params.ami_id, f"a concrete AMI id ({AMI_EXPECTED})")
    if params.enable_ssh or params.ssh_ingress_cidrs:
        check_ssh_cidrs(
            list(params.ssh_ingress_cidrs), allow_anywhere=params.allow_ssh_from_anywhere
        )
    _check_network(params)
    if params.efa_interface_count < 0:
        raise SpecError("aws.efa", params.efa_interface_count, "0 (off) or the type's EFA count")
    names = node_names(params.node_count)
    for node, market in params.node_markets.items():
        if node not in names or market not in MARKETS:
            raise InternalError(f"node_markets[{node!r}] = {market!r}: not a node or a market")
    if params.spot_nodes() and params.capacity_reservation is not None:
        raise SpecError(
            "aws.market",
            SPOT,
            "On-Demand nodes with a capacity reservation (Spot nodes cannot use one)",
        )
    if params.spot_max_price is not None and not params.spot_max_price > 0:
        raise SpecError("aws.spot_max_price", params.spot_max_price, "a price above 0")
    if params.head_recovery is not None:
        _check_head_recovery(params.head_recovery)
    if params.private_network is not None:
        _check_private(params)


def _check_private(params: AwsClusterParams) -> None:
    """A private network builds its own VPC and subnets, and never opens SSH to everyone
    (the spec's rules, spec_parsing.py, say the same to the user)."""
    if params.existing_subnet_id is not None:
        raise SpecError(
            "aws.network",
            "private",
            '"public" with aws.subnet_id: a private network builds its own VPC and subnets',
        )
    if params.allow_ssh_from_anywhere:
        raise SpecError(
            "aws.allow_ssh_from_anywhere",
            True,
            'false with aws.network = "private": its way in takes SSH from aws.ssh_cidrs only',
        )
    public = ipaddress.ip_network(public_subnet_for(params.vpc_cidr_block))
    if public.overlaps(ipaddress.ip_network(params.subnet_cidr_block, strict=False)):
        raise SpecError(
            "nodes",
            params.node_count,
            f"fewer nodes: their subnet {params.subnet_cidr_block} would take the public "
            f"subnet {public} of the private network (the bastion's and the NAT gateway's)",
        )


def private_network_vars(params: AwsClusterParams) -> dict[str, object]:
    """The tfvars' network fields; none for a public network (its tfvars stay as before)."""
    private = params.private_network
    if private is None:
        return {}
    return {
        "network": "private",
        "bastion": private.bastion,
        "bastion_instance_type": private.bastion_instance_type,
        "bastion_ami": private.bastion_ami,
        "bastion_user": private.bastion_user,
        "public_subnet_cidr_block": (
            public_subnet_for(params.vpc_cidr_block) if private.bastion or private.nat else None
        ),
        "nat": private.nat,
        "ssm": private.ssm,
    }


def _check_head_recovery(state: tuple[str, str]) -> None:
    """The state key goes into the head role's policy as an ARN and an s3:prefix condition:
    a wildcard would widen it past this cluster's state (the nodes module refuses it too)."""
    bucket, key = state
    if "/" not in key or any(c in key for c in "*?$") or ".." in key.split("/"):
        raise SpecError(
            "backend",
            f"s3://{bucket}/{key}",
            "with aws.recover, a prefix without wildcards (* or ?): node-0's role may use the "
            "cluster's state object only, and a wildcard in its key would widen that",
        )


def render_root_module(
    params: AwsClusterParams,
    *,
    modules_source: str,
    user_data: Mapping[str, str],
    emulator: Emulator | None = None,
) -> dict[str, str]:
    """Files of the per-cluster root module: ``{"main.tf": ..., "terraform.tfvars.json": ...}``
    (and, for an emulator, the AWS config file its provider block names).

    ``modules_source`` is how the root module reaches its copy of ``infra/modules/aws``
    (``./modules/aws`` in a workspace, see :data:`MODULES`; Terraform wants local sources to
    start with ./ or ../); ``user_data`` maps every node name to its cloud-init document.
    """
    validate_params(params)
    expected = node_names(params.node_count)
    if sorted(user_data) != sorted(expected):
        raise RenderError("user_data", sorted(user_data), f"one document for each of {expected}")
    # infra/templates/aws/root/: main.tf only (the values go into the tfvars below).
    files = render_root(
        "aws",
        {
            "cluster_name": params.cluster_name,
            "provider_version": AWS_PROVIDER_VERSION,
            "modules_source": modules_source.rstrip("/"),
            "emulator": emulator,
            "emulator_profile": EMULATOR_PROFILE,
            "emulator_config_file": EMULATOR_CONFIG_FILE,
            "max_retries": EMULATOR_MAX_RETRIES if emulator else PROVIDER_MAX_RETRIES,
            "head_recovery": params.head_recovery is not None,
            "private": params.private_network is not None,
        },
    )
    tfvars = {
        "region": params.region,
        "cluster": {
            "name": params.cluster_name,
            "availability_zone": params.availability_zone,
            "vpc_cidr_block": params.vpc_cidr_block,
            "subnet_cidr_block": params.subnet_cidr_block,
            "existing_vpc_id": params.existing_vpc_id,
            "existing_subnet_id": params.existing_subnet_id,
            "enable_ssh": params.enable_ssh,
            "ssh_ingress_cidrs": list(params.ssh_ingress_cidrs),
            "allow_ssh_from_anywhere": params.allow_ssh_from_anywhere,
            "node_count": params.node_count,
            "instance_type": params.instance_type,
            "ami_id": params.ami_id,
            "ssh_public_key": params.ssh_public_key.strip(),
            "root_volume_size_gb": params.root_volume_size_gb,
            "private_ip_host_offset": params.private_ip_host_offset,
            "placement_group_enabled": params.placement_group,
            "efa_interface_count": params.efa_interface_count,
            "head_port": params.head_port,
            "accelerator": (
                None
                if params.accelerator is None
                else {"type": params.accelerator[0], "count": params.accelerator[1]}
            ),
            "tags": dict(sorted(params.tags.items())),
            "capacity_reservation": (
                None
                if params.capacity_reservation is None
                else {
                    "id": params.capacity_reservation[0],
                    "capacity_block": params.capacity_reservation[1],
                }
            ),
            # Every node's market, so the committed tfvars say which nodes are Spot.
            "node_markets": {name: params.node_markets.get(name, "on-demand") for name in expected},
            "spot_max_price": params.spot_max_price,
            **private_network_vars(params),
        },
        "staging": (
            None
            if params.staging is None
            else {
                "bucket": params.staging[0],
                "prefix": params.staging[1],
                # Only with a wheelhouse: a public cluster's tfvars are as they were.
                **(
                    {"wheelhouse": params.wheelhouse_prefix}
                    if params.wheelhouse_prefix is not None
                    else {}
                ),
            }
        ),
        "checkpoints": (
            None
            if params.checkpoints is None
            else {"bucket": params.checkpoints[0], "prefix": params.checkpoints[1]}
        ),
        # Only with aws.recover: without it the tfvars are what they were before it existed.
        **(
            {}
            if params.head_recovery is None
            else {"head_recovery": head_recovery_keys(params.head_recovery)}
        ),
        "user_data": {name: encode_user_data(user_data[name]) for name in expected},
    }
    files[TFVARS_FILE] = json.dumps(tfvars, indent=2, sort_keys=False) + "\n"
    if emulator is not None:
        files[EMULATOR_CONFIG_FILE] = emulator_config_text(emulator)
    return files
