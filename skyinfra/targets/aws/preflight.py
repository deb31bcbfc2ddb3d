"""boto3 checks before any Terraform runs: credentials, instance type in the AZ, AMI, vCPU quota.

Every failure is one :class:`PreflightError` saying what to do. The checks take a boto3
session (and an optional emulator) so they run unchanged against AWS, LocalStack or moto.

The lookups later steps need (the concrete AMI id, the zone, the type's GPUs and EFA
interfaces) are made here too, with the checks or without them (``run_preflight(checks=False)``,
for ``--skip-preflight``): there is one lookup path, not one per mode. The quotas it checks
against (vCPUs, Elastic IPs, network interfaces) are quotas.py's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from skyinfra.errors import PreflightError
from skyinfra.targets.aws.quotas import (
    ON_DEMAND_VCPU_QUOTAS,
    SPOT_VCPU_QUOTAS,
    check_efa_quotas,
    quota_class,
    quota_vcpus,
    running_vcpus,
)
from skyinfra.targets.aws.session import AwsClients

# The Deep Learning Base OSS Nvidia Driver GPU AMI, Ubuntu 24.04, through its public SSM
# parameter (https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html), for the
# instance type's architecture. Ubuntu 24.04 because its python3 is 3.12: the 22.04 image's
# 3.10 caps jax at 0.6.2 (jax >= 0.7 needs 3.11, jax[cuda13] first exists in 0.7) and Keras
# at 3.12; the DLAMI release notes give each image's python_location.
DLAMI_PARAMETER = (
    "/aws/service/deeplearning/ami/{arch}/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
)
DLAMI_ARCHITECTURES = ("x86_64", "arm64")
DEFAULT_DLAMI_PARAMETER = DLAMI_PARAMETER.format(arch="x86_64")

_BAD_CREDENTIAL_CODES = {
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "AuthFailure",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidAccessKeyId",
}


@dataclass(frozen=True)
class InstanceTypeFacts:
    """What skyinfra reads from an instance type's DescribeInstanceTypes entry."""

    vcpus: int
    gpu_name: str | None
    gpu_count: int
    efa_interface_count: int
    # ProcessorInfo.SupportedArchitectures: x86_64, arm64 (g5g), i386 ...
    architectures: tuple[str, ...] = ("x86_64",)

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> InstanceTypeFacts:
        gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
        network = info.get("NetworkInfo") or {}
        efa = (
            int((network.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0))
            if network.get("EfaSupported")
            else 0
        )
        return cls(
            vcpus=int(info["VCpuInfo"]["DefaultVCpus"]),
            gpu_name=str(gpus[0]["Name"]) if gpus else None,
            gpu_count=sum(int(g.get("Count", 0)) for g in gpus),
            efa_interface_count=efa,
            architectures=tuple(
                str(a) for a in (info.get("ProcessorInfo") or {}).get("SupportedArchitectures", [])
            )
            or ("x86_64",),
        )


def dlami_parameter(architectures: tuple[str, ...]) -> str:
    """The DLAMI's SSM parameter for an instance type's architectures (arm64 for Graviton
    GPU types such as g5g: an x86_64 image would be refused by RunInstances)."""
    for arch in DLAMI_ARCHITECTURES:
        if arch in architectures:
            return DLAMI_PARAMETER.format(arch=arch)
    raise PreflightError(
        f"no Deep Learning AMI for architectures {list(architectures)}: skyinfra knows "
        f"{list(DLAMI_ARCHITECTURES)}. Set aws.ami to an AMI of that architecture."
    )


# An instance type the lookups could not describe (only with the checks off).
UNDESCRIBED = InstanceTypeFacts(vcpus=0, gpu_name=None, gpu_count=0, efa_interface_count=0)


@dataclass(frozen=True)
class PreflightResult:
    """What later steps need: the concrete AMI, the account, the type's accelerators and EFA."""

    account_id: str
    region: str
    availability_zone: str
    instance_type: str
    ami_id: str
    vcpus_per_node: int
    gpu_name: str | None
    gpu_count: int
    efa_interface_count: int
    quota_vcpus: float | None
    running_vcpus: int
    warnings: list[str] = field(default_factory=list)
    # The type's ProcessorInfo.SupportedArchitectures; empty when it was not described.
    architectures: tuple[str, ...] = ()
    # The Spot vCPU quota of the type's class, when Spot nodes were checked against it.
    spot_quota_vcpus: float | None = None

    @property
    def accelerator(self) -> tuple[str, int] | None:
        """GPU name and count per node, or None (no GPU, or not described)."""
        return (self.gpu_name, self.gpu_count) if self.gpu_name else None


def _credentials_error(err: Exception) -> PreflightError:
    return PreflightError(
        f"AWS rejected the credentials ({err}). Check AWS_PROFILE / AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (or run `aws sso login`), then try again."
    )


@contextmanager
def aws_errors(what: str | None = None) -> Iterator[None]:
    """Turn a boto3 failure into one PreflightError saying what to do.

    ``what`` names the lookup that failed ("looking up AMI ami-..."); without it the message
    speaks of "an AWS check" (the preflight's own checks).
    """
    try:
        yield
    except NoRegionError:
        raise PreflightError("no AWS region given: set aws.region in the spec.") from None
    except NoCredentialsError:
        raise PreflightError(
            "no AWS credentials found. Set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, then try again."
        ) from None
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in _BAD_CREDENTIAL_CODES:
            raise _credentials_error(err) from None
        raise PreflightError(f"{what or 'an AWS check'} failed: {err}") from None
    except BotoCoreError as err:
        prefix = f"{what}: " if what else ""
        raise PreflightError(
            f"{prefix}could not reach AWS: {err}. Check the network and region."
        ) from None


def check_credentials(sts: Any) -> str:
    """The account id of the caller; PreflightError when there are no valid credentials."""
    try:
        return str(sts.get_caller_identity()["Account"])
    except NoCredentialsError:
        raise PreflightError(
            "no AWS credentials found. Set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or run `aws configure`, then try again."
        ) from None
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in _BAD_CREDENTIAL_CODES:
            raise _credentials_error(err) from None
        raise PreflightError(f"could not check the AWS credentials: {err}") from None


def describe_type(ec2: Any, instance_type: str) -> dict[str, Any]:
    try:
        types = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in (
            "InvalidInstanceType",
            "InvalidParameterValue",
        ):
            types = []
        else:
            raise PreflightError(
                f"could not describe instance type {instance_type!r}: {err}"
            ) from None
    if not types:
        raise PreflightError(
            f"instance type {instance_type!r} does not exist in this region. Pick one listed by "
            "`aws ec2 describe-instance-types` (for example g5.xlarge or p4d.24xlarge) and set "
            "aws.instance_type."
        )
    return dict(types[0])


def offering_zones(ec2: Any, instance_type: str) -> list[str]:
    """The availability zones of the region that offer ``instance_type``, sorted."""
    offerings = ec2.describe_instance_type_offerings(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )["InstanceTypeOfferings"]
    return sorted({str(o["Location"]) for o in offerings})


def check_offered(ec2: Any, instance_type: str, availability_zone: str) -> None:
    zones = offering_zones(ec2, instance_type)
    if availability_zone not in zones:
        where = (
            f"it is offered in {', '.join(zones)}" if zones else "no zone of this region offers it"
        )
        raise PreflightError(
            f"instance type {instance_type!r} is not offered in {availability_zone}; {where}. "
            "Choose another availability zone or instance type."
        )


def resolve_ami(ssm: Any, parameter: str) -> str:
    """Resolve the AMI's SSM parameter once, to a concrete id for the tfvars."""
    try:
        value = str(ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code")
        if code == "ParameterNotFound":
            raise PreflightError(
                f"the AMI parameter {parameter} does not exist in this region. Set aws.ami to a "
                "concrete AMI id, or pick a region where the Deep Learning AMI is published."
            ) from None
        if code == "AccessDeniedException":
            raise PreflightError(
                f"not allowed to read SSM parameter {parameter}: grant ssm:GetParameter, or set "
                "aws.ami to a concrete AMI id."
            ) from None
        raise PreflightError(f"could not resolve the AMI through {parameter}: {err}") from None
    if not re.match(r"^ami-[0-9a-f]{8,17}$", value):
        raise PreflightError(
            f"SSM parameter {parameter} holds {value!r}, not an AMI id; set aws.ami."
        )
    return value


def _type_facts(
    ec2: Any, instance_type: str, *, strict: bool, warnings: list[str]
) -> InstanceTypeFacts:
    """The type's facts; without ``strict`` a type that cannot be described is a warning."""
    if strict:
        return InstanceTypeFacts.of(describe_type(ec2, instance_type))
    try:
        return InstanceTypeFacts.of(describe_type(ec2, instance_type))
    except (PreflightError, ClientError, BotoCoreError) as err:
        warnings.append(f"instance type {instance_type} not described ({err}); no GPU info")
        return UNDESCRIBED


def _first_zone(ec2: Any, request: PreflightRequest, *, strict: bool, warnings: list[str]) -> str:
    """The first zone offering the type (of ``request.zones``, in their order, when given),
    else the first zone asked for or the region's first (the offering check then says
    whether the type is unknown or offered nowhere, or where it is)."""
    instance_type, region, wanted = request.instance_type, request.region, request.zones
    if strict:
        with aws_errors(f"looking up the zones offering {instance_type}"):
            zones = offering_zones(ec2, instance_type)
    else:
        try:
            zones = offering_zones(ec2, instance_type)
        except (ClientError, BotoCoreError) as err:
            warnings.append(f"could not look up the zones offering {instance_type}: {err}")
            zones = []
    offering = [z for z in wanted if z in zones] if wanted else zones
    return offering[0] if offering else (wanted or (f"{region}a",))[0]


def _check_quota(
    clients: AwsClients,
    *,
    instance_type: str,
    node_count: int,
    vcpus: int,
    warnings: list[str],
    spot: bool = False,
) -> tuple[float | None, int]:
    """(quota, vCPUs running) of the type's On-Demand class (with ``spot``, its Spot class);
    PreflightError when the nodes would not fit, a warning when there is no quota to check
    against."""
    klass = quota_class(instance_type)
    if klass is None:
        warnings.append(f"no known vCPU quota for {instance_type!r}; quota not checked")
        return None, 0
    code, title = (SPOT_VCPU_QUOTAS if spot else ON_DEMAND_VCPU_QUOTAS)[klass]
    quota = quota_vcpus(clients.client("service-quotas"), code)
    if quota is None:
        warnings.append(
            f"Service Quotas gave no answer for {title} ({code}); going on without a quota check"
        )
        return None, 0
    ec2 = clients.client("ec2")
    cache: dict[str, int] = {instance_type: vcpus}

    def vcpus_of(name: str) -> int:
        if name not in cache:
            cache[name] = InstanceTypeFacts.of(describe_type(ec2, name)).vcpus
        return cache[name]

    running = running_vcpus(ec2, klass, vcpus_of, spot=spot)
    requested = vcpus * node_count
    if running + requested > quota:
        on_spot = " on Spot" if spot else ""
        other = ', or aws.market = "on-demand"' if spot else ""
        raise PreflightError(
            f"not enough vCPU quota for {node_count} x {instance_type}{on_spot}: {title} "
            f"({code}) is {quota:g} vCPUs in {clients.region}, {running} are in use and "
            f"{requested} are requested. Request an increase in the Service Quotas "
            f"console (quota {code}) or ask for fewer/smaller nodes{other}."
        )
    return quota, running


@dataclass(frozen=True)
class PreflightRequest:
    """What the preflight checks: ``node_count`` x ``instance_type`` in ``region``.

    ``availability_zone`` None: the first zone offering the type (of ``zones``, aws.zones, when
    given: `plan` renders where `up` would try first). ``ami_id`` None: the AMI
    behind ``ami_parameter``, else the DLAMI for the type's architecture. ``efa``: the nodes
    get EFA interfaces and Elastic IPs, checked against the region's quotas. ``spot_nodes``:
    how many of the ``node_count`` nodes are Spot; they are checked against the class's Spot
    vCPU quota, the others against its On-Demand one."""

    region: str
    instance_type: str
    node_count: int
    availability_zone: str | None = None
    zones: tuple[str, ...] = ()
    ami_id: str | None = None
    ami_parameter: str | None = None
    efa: bool = False
    spot_nodes: int = 0
    # Elastic IPs the cluster takes; None: one per EFA node (a public network). A private
    # network's nodes take none (issue 46): node 0 one without a bastion, a NAT gateway one.
    elastic_ips: int | None = None


def run_preflight(
    request: PreflightRequest, *, clients: AwsClients, checks: bool = True
) -> PreflightResult:
    """All checks, in the order a user would fix them, and the lookups later steps need. No
    Terraform runs before this passes. ``clients``: the caller's boto3 clients, for
    ``request.region``.

    ``checks=False`` (``--skip-preflight``): the same lookups without the checks (offering in
    the zone, vCPU quota); a type that cannot be described, or whose zones cannot be listed,
    is a warning instead of an error. The credentials and the AMI are still required.
    """
    region, instance_type, node_count = request.region, request.instance_type, request.node_count
    availability_zone, ami_id, spot_nodes = (
        request.availability_zone,
        request.ami_id,
        request.spot_nodes,
    )
    warnings: list[str] = []
    with aws_errors():
        account = check_credentials(clients.client("sts"))
        ec2 = clients.client("ec2")
        facts = _type_facts(ec2, instance_type, strict=checks, warnings=warnings)
        zone = availability_zone or _first_zone(ec2, request, strict=checks, warnings=warnings)
        if checks:
            check_offered(ec2, instance_type, zone)
        ami = ami_id or resolve_ami(
            clients.client("ssm"), request.ami_parameter or dlami_parameter(facts.architectures)
        )
        if checks and request.efa and facts.efa_interface_count:
            eips = node_count if request.elastic_ips is None else request.elastic_ips
            check_efa_quotas(clients, (node_count, eips), facts.efa_interface_count, warnings)
        quota, running = (
            _check_quota(
                clients,
                instance_type=instance_type,
                node_count=node_count - spot_nodes,
                vcpus=facts.vcpus,
                warnings=warnings,
            )
            if checks
            else (None, 0)
        )
        spot_quota = (
            _check_quota(
                clients,
                instance_type=instance_type,
                node_count=spot_nodes,
                vcpus=facts.vcpus,
                warnings=warnings,
                spot=True,
            )[0]
            if checks and spot_nodes
            else None
        )
    return PreflightResult(
        account_id=account,
        region=region,
        availability_zone=zone,
        instance_type=instance_type,
        ami_id=ami,
        vcpus_per_node=facts.vcpus,
        gpu_name=facts.gpu_name,
        gpu_count=facts.gpu_count,
        efa_interface_count=facts.efa_interface_count,
        quota_vcpus=quota,
        running_vcpus=running,
        spot_quota_vcpus=spot_quota,
        warnings=warnings,
        architectures=() if facts is UNDESCRIBED else facts.architectures,
    )
