"""An EFA node's Elastic IP is a cluster resource like the others: `down` counts one left
behind, `gc` lists one no state knows (moto's EC2 over HTTP)."""

from __future__ import annotations

from pathlib import Path

import boto3

from skyinfra.targets.aws.endpoints import Emulator
from skyinfra.targets.aws.session import AwsClients
from skyinfra.targets.aws.tagged import count_tagged, orphans
from tests.support.aws import REGION


def test_tagged_elastic_ip_is_counted_and_listed(aws_env: str, tmp_path: Path) -> None:
    clients = AwsClients(boto3.session.Session(), REGION, Emulator(url=aws_env))
    ec2 = clients.client("ec2")
    tags = [
        {"Key": "skyinfra:cluster", "Value": "eipc"},
        {"Key": "skyinfra:workspace", "Value": "w1"},
    ]
    allocation = ec2.allocate_address(
        Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}]
    )["AllocationId"]
    try:
        left, unchecked = count_tagged(
            clients, {"skyinfra:cluster": "eipc", "skyinfra:workspace": "w1"}, iam_role="eipc-node"
        )
        assert unchecked == []
        assert any(line.startswith(f"elastic-ip {allocation} ") for line in left), left
        lines, _ = orphans([clients], [tmp_path])
        assert any(f"elastic-ip {allocation} " in line for line in lines), lines
    finally:
        ec2.release_address(AllocationId=allocation)
