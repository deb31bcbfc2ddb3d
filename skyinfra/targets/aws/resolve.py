"""What the Terraform needs as concrete values, looked up at `up` and pinned for later ones.

:func:`resolve` runs the preflight (its checks, or with ``--skip-preflight`` only its lookups:
one path, see preflight.py) and returns a :class:`Resolved`. Values found at the first `up`
are pinned in the workspace's tfvars and reused by later ones: the AMI id (a new Deep Learning
AMI release must never show up as node replacements) and the availability zone (the subnet
lives there).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from skyinfra.errors import PreflightError, SpecError, WorkspaceError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.ami import (
    check_image_architecture,
    resolve_bastion_user,
    resolve_login_user,
)
from skyinfra.targets.aws.network_spec import elastic_ips
from skyinfra.targets.aws.preflight import (
    PreflightRequest,
    aws_errors,
    check_credentials,
    run_preflight,
)
from skyinfra.targets.aws.render import TFVARS_FILE
from skyinfra.targets.aws.session import AwsClients
from skyinfra.targets.aws.spec import AwsSpec
from skyinfra.workspace import Workspace

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Resolved:
    """What the preflight (or, when skipped, its lookups alone) found, and the spec's subnet."""

    account_id: str
    availability_zone: str
    ami_id: str
    ssh_user: str
    accelerator: tuple[str, int] | None
    efa_interface_count: int
    existing_vpc_id: str | None = None
    existing_subnet_id: str | None = None
    subnet_cidr_block: str | None = None
    # The instance type's EC2 architectures (the S3 wheelhouse's platform, wheelhouse.py).
    architectures: tuple[str, ...] = ()
    # The login user of aws.bastion_ami; None: no such field (the module's default image's).
    bastion_user: str | None = None


def previous_settings(ws: Workspace, region: str) -> dict[str, Any]:
    """The cluster settings of the last `up` (its tfvars), when it was in the same region."""
    path = ws.path / TFVARS_FILE
    if not ws.exists() or not path.is_file():
        return {}
    try:
        tfvars = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise WorkspaceError(f"cluster {ws.name!r}: {path} is not valid JSON ({err})") from err
    cluster = tfvars.get("cluster") if isinstance(tfvars, dict) else None
    if tfvars.get("region") != region or not isinstance(cluster, dict):
        return {}
    return cluster


def _describe_subnet(clients: AwsClients, spec_aws: AwsSpec) -> dict[str, Any]:
    with aws_errors(f"looking up subnet {spec_aws.subnet_id}"):
        try:
            subnets = clients.client("ec2").describe_subnets(SubnetIds=[spec_aws.subnet_id])
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "InvalidSubnetID.NotFound":
                raise
            subnets = {"Subnets": []}
    if not subnets["Subnets"]:
        raise PreflightError(
            f"subnet {spec_aws.subnet_id} (aws.subnet_id) does not exist in {spec_aws.region}; "
            "check the id and the region"
        )
    return dict(subnets["Subnets"][0])


def _existing_network(clients: AwsClients, spec_aws: AwsSpec) -> dict[str, str] | None:
    """VPC, CIDR block and zone of the subnet the spec names (None: skyinfra makes its own)."""
    if spec_aws.subnet_id is None:
        if spec_aws.vpc_id is not None:
            raise SpecError(
                "aws.subnet_id",
                None,
                f"a subnet of {spec_aws.vpc_id} too: with aws.vpc_id the nodes go into an "
                "existing subnet (or drop aws.vpc_id and skyinfra creates VPC and subnet)",
            )
        return None
    subnet = _describe_subnet(clients, spec_aws)
    if spec_aws.vpc_id is not None and subnet["VpcId"] != spec_aws.vpc_id:
        raise SpecError(
            "aws.vpc_id", spec_aws.vpc_id, f"the VPC of {spec_aws.subnet_id}: {subnet['VpcId']}"
        )
    return {
        "vpc_id": str(subnet["VpcId"]),
        "cidr_block": str(subnet["CidrBlock"]),
        "availability_zone": str(subnet["AvailabilityZone"]),
    }


def _pinned_ami(spec_aws: AwsSpec, previous: dict[str, Any], echo: Echo) -> str | None:
    """The spec's AMI, else the one the first `up` resolved, else None (look it up)."""
    if spec_aws.ami is not None or not previous.get("ami_id"):
        return spec_aws.ami
    ami = str(previous["ami_id"])
    echo(f"[skyinfra] AMI {ami} (resolved at the first `up`; set aws.ami to change it)")
    return ami


def _announce(spec: ClusterSpec, zone: str | None, *, checks: bool) -> str:
    spec_aws = spec.section_as(AwsSpec)
    if not checks:
        return "[skyinfra] --skip-preflight: instance type offering and vCPU quota not checked"
    where = zone or "the first zone offering it"
    return (
        f"[skyinfra] preflight: credentials, {spec.nodes} x {spec_aws.instance_type} in "
        f"{where}, AMI, vCPU quota"
    )


def resolve(
    spec: ClusterSpec,
    ws: Workspace,
    clients: AwsClients,
    *,
    echo: Echo,
    skip_preflight: bool,
    zone: str | None = None,
    spot_nodes: int = 0,
) -> Resolved:
    """Run the preflight (or only its lookups when skipped) and pin the values. ``zone``:
    the zone capacity failover chose (failover.py); else the subnet's, else the pinned one.
    ``spot_nodes``: how many nodes are Spot (checked against the Spot vCPU quota)."""
    spec_aws = spec.section_as(AwsSpec)
    previous = previous_settings(ws, spec_aws.region)

    def warn(message: str) -> None:
        echo(f"[skyinfra] warning: {message}")

    # Credentials first, in both modes: every later failure would otherwise look like
    # something else, and the account id names the staging bucket.
    with aws_errors("checking the AWS credentials"):
        account = check_credentials(clients.client("sts"))
    network = _existing_network(clients, spec_aws) or {}
    zone = network.get("availability_zone") or zone or previous.get("availability_zone")
    ami = _pinned_ami(spec_aws, previous, echo)
    echo(_announce(spec, zone, checks=not skip_preflight))
    asked = PreflightRequest(
        region=spec_aws.region,
        availability_zone=zone,
        zones=tuple(spec_aws.zones),
        instance_type=spec_aws.instance_type,
        node_count=spec.nodes,
        ami_id=ami,
        # EFA nodes: an Elastic IP each, an interface per card (infra/modules/aws/nodes).
        efa=spec_aws.efa,
        spot_nodes=spot_nodes,
        elastic_ips=elastic_ips(spec_aws.network_fields),
    )
    found = run_preflight(asked, clients=clients, checks=not skip_preflight)
    for message in found.warnings:
        warn(message)
    if spec_aws.efa and found.efa_interface_count == 0:
        raise PreflightError(
            f"instance type {spec_aws.instance_type!r} has no EFA interfaces; set aws.efa = false "
            "or pick an EFA type (for example p4d.24xlarge or p5.48xlarge)"
        )
    if not skip_preflight:
        check_image_architecture(clients, found.ami_id, found.architectures, spec_aws.instance_type)
    user = resolve_login_user(clients, spec_aws, found.ami_id, warn=warn, strict=not skip_preflight)
    bastion_ami = spec_aws.bastion_ami if spec_aws.network_fields.has_bastion else None
    bastion_user = (
        None
        if bastion_ami is None
        else resolve_bastion_user(clients, bastion_ami, warn=warn, strict=not skip_preflight)
    )
    return Resolved(
        account_id=account,
        availability_zone=found.availability_zone,
        ami_id=found.ami_id,
        ssh_user=user,
        accelerator=found.accelerator,
        efa_interface_count=found.efa_interface_count if spec_aws.efa else 0,
        existing_vpc_id=network.get("vpc_id"),
        existing_subnet_id=spec_aws.subnet_id,
        subnet_cidr_block=network.get("cidr_block"),
        architectures=found.architectures,
        bastion_user=bastion_user,
    )
