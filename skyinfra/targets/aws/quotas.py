"""The region's quotas the preflight checks `up` against: the EC2 vCPU quotas by instance class
(On-Demand and Spot, Service Quotas codes), the vCPUs running against them, and the Elastic
IPs and network interfaces EFA nodes take.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from skyinfra.errors import PreflightError
from skyinfra.targets.aws.session import AwsClients

# Service Quotas code of "EC2-VPC Elastic IPs" (5 per region unless raised): an EFA node
# reachable from outside takes one (infra/modules/aws/nodes, aws_eip.node).
# https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html
EIP_QUOTA = ("L-0263D0A3", "EC2-VPC Elastic IPs")
# Service Quotas code of "Network interfaces per Region" (service vpc, 5000 by default): an
# EFA node has one interface per network card, 32 on a p5.48xlarge.
ENI_QUOTA = ("L-DF5E4CA3", "Network interfaces per Region")

# Service Quotas codes of the EC2 "Running On-Demand <class> instances" quotas, which count
# vCPUs across every running instance of the class in the region:
# https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html
ON_DEMAND_VCPU_QUOTAS: dict[str, tuple[str, str]] = {
    "standard": ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "vt": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "x": ("L-7295265B", "Running On-Demand X instances"),
    "f": ("L-74FC7D96", "Running On-Demand F instances"),
    "inf": ("L-1945791B", "Running On-Demand Inf instances"),
    "dl": ("L-6E869C2A", "Running On-Demand DL instances"),
    "trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
}
# Service Quotas codes of the EC2 "All <class> Spot Instance Requests" quotas (issue 26): vCPUs
# of the running Spot instances and open Spot requests of the class in the region, apart from
# the On-Demand ones above; most are 0 in a new account (Standard: 5). The codes are the ones
# AWS's Spot quota page links to:
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html
SPOT_VCPU_QUOTAS: dict[str, tuple[str, str]] = {
    "standard": ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    "p": ("L-7212CCBC", "All P Spot Instance Requests"),
    "g": ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    "vt": ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    "x": ("L-E3A00192", "All X Spot Instance Requests"),
    "f": ("L-88CF9481", "All F Spot Instance Requests"),
    "inf": ("L-B5D1601B", "All Inf Spot Instance Requests"),
    "dl": ("L-85EED4F7", "All DL Spot Instance Requests"),
    "trn": ("L-6B0D517C", "All Trn Spot Instance Requests"),
}
_STANDARD_LETTERS = set("acdhimrtz")


def quota_class(instance_type: str) -> str | None:
    """The on-demand quota class of an instance type ("p" for p4d.24xlarge), or None."""
    match = re.match(r"^([a-z]+)", instance_type)
    if match is None:
        return None
    letters = match.group(1)
    for prefix in ("trn", "inf", "dl", "vt"):
        if letters.startswith(prefix):
            return prefix
    first = letters[0]
    if first in ("p", "g", "x", "f"):
        return first
    if first in _STANDARD_LETTERS:
        return "standard"
    return None


def running_vcpus(
    ec2: Any, klass: str, vcpus_of: Callable[[str], int], *, spot: bool = False
) -> int:
    """vCPUs of the running/pending instances in the region that count against ``klass``'s
    quota: the On-Demand one, or with ``spot`` the Spot one (InstanceLifecycle "spot"; an
    On-Demand instance has none)."""
    total = 0
    paginator = ec2.get_paginator("describe_instances")
    states = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    for page in paginator.paginate(Filters=states):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                if (instance.get("InstanceLifecycle") == "spot") != spot:
                    continue
                if quota_class(instance["InstanceType"]) == klass:
                    cpu = instance.get("CpuOptions") or {}
                    count = cpu.get("CoreCount", 0) * cpu.get("ThreadsPerCore", 0)
                    total += count or vcpus_of(instance["InstanceType"])
    return total


def quota_vcpus(quotas: Any, quota_code: str, service: str = "ec2") -> float | None:
    """The applied quota value, else the AWS default, else None (no answer)."""
    for call in (quotas.get_service_quota, quotas.get_aws_default_service_quota):
        try:
            return float(call(ServiceCode=service, QuotaCode=quota_code)["Quota"]["Value"])
        except (ClientError, KeyError):
            continue
    return None


def check_efa_quotas(
    clients: AwsClients, counts: tuple[int, int], cards: int, warnings: list[str]
) -> None:
    """PreflightError when the EFA nodes' Elastic IPs or network interfaces (one per card
    each) would pass the region's quota; a warning when a quota has no answer. ``counts``:
    (nodes, Elastic IPs: one per node on a public network, issue 46)."""
    nodes, eips = counts
    ec2 = clients.client("ec2")
    allocated = len(ec2.describe_addresses()["Addresses"])
    interfaces = sum(
        len(page["NetworkInterfaces"])
        for page in ec2.get_paginator("describe_network_interfaces").paginate()
    )
    wanted = (
        (
            EIP_QUOTA,
            "ec2",
            eips,
            allocated,
            "each EFA node is reached through an Elastic IP "
            "(AWS gives no public address to an instance with EFA interfaces)",
        ),
        (
            ENI_QUOTA,
            "vpc",
            nodes * cards,
            interfaces,
            f"each node has {cards} EFA interface(s), one per network card",
        ),
    )
    for (code, title), service, needed, used, why in wanted:
        quota = quota_vcpus(clients.client("service-quotas"), code, service)
        if quota is None:
            warnings.append(f"Service Quotas gave no answer for {title} ({code}); not checked")
        elif used + needed > quota:
            raise PreflightError(
                f"not enough {title} quota: {why}; {needed} are needed, {used} are in use and "
                f"{title} ({code}) is {quota:g} in {clients.region}. Request an increase in "
                f"the Service Quotas console (quota {code}), free unused ones, or ask for "
                "fewer nodes."
            )
