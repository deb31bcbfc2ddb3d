"""Whether an AWS node's machine is certainly gone (skyinfra/targets/aws/reach.py
instances_gone), asked of EC2 on moto's server over loopback: a job that loses its head on
AWS goes on as one that lost node 0 only when EC2 says the instance went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra.spec import validate_spec
from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR
from skyinfra.targets.aws.reach import instances_gone
from skyinfra.topology import Node, Topology
from skyinfra.transport.ssh import SshKeys, SshTransport
from tests.support.aws import REGION


def test_a_node_is_gone_once_its_instance_is_terminated_or_unknown(
    aws_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENDPOINT_ENV_VAR, aws_env)
    ec2: Any = boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ids = [
        i["InstanceId"]
        for i in ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2)["Instances"]
    ]
    spec = validate_spec(
        {
            "name": "g",
            "provider": "aws",
            "nodes": 3,
            "aws": {"region": REGION, "instance_type": "t3.micro", "ssh_cidrs": ["10.0.0.0/8"]},
        }
    )
    nodes = (
        Node(0, "node-0", "10.0.0.10", None, ids[0]),
        Node(1, "node-1", "10.0.0.11", None, ids[1]),
        Node(2, "node-2", "10.0.0.12", None, "i-0000000000000dead"),  # never existed
    )
    gone = instances_gone(spec, Topology("g", "aws", "10.0.0.10", 29500, nodes))
    assert [gone(i) for i in range(3)] == [False, False, True]
    ec2.terminate_instances(InstanceIds=[ids[0]])
    assert [gone(i) for i in range(3)] == [True, False, True]
    # The transport asks it, and says nothing without it.
    transport = SshTransport({}, keys=SshKeys(tmp_path / "k", tmp_path / "kh"), gone=gone)
    assert transport.node_gone(0) and not transport.node_gone(1)
    bare = SshTransport({}, keys=SshKeys(tmp_path / "k", tmp_path / "kh"))
    assert not bare.node_gone(0)
