"""Credentials never land in a file, a tag or an output of `up`/`status`/`gc`/`down` on the AWS
target; `gc` and `down` check by tag (moved out of test_cli.py so that `make test`'s workers
can run it beside the other AWS end-to-end tests)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR
from skyinfra.targets.aws.target import TARGET_FILE
from tests.support.aws import REGION, user_data_text
from tests.support.aws_e2e import (
    NO_SPACE,
    UBUNTU_DLAMI,
    count_cluster_resources,
    instances_by_id,
    skyinfra,
    write_spec,
)

PLANTED = {
    "AWS_ACCESS_KEY_ID": "AKIAPLANTED0KEY04242",
    "AWS_SECRET_ACCESS_KEY": "PlantedSecret/4242/DoNotLeak+xQzVbNmKlJhGfDsA",
    "AWS_SESSION_TOKEN": "PlantedSessionToken4242DoNotLeakIQoJb3JpZ2luX2VjEXAMPLE==",
}


def files_holding(root: Path, values: dict[str, str]) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path}: {name}" for name, v in values.items() if v.encode() in data]
    return found


def tagged_instance(ec2: Any, tags: dict[str, str]) -> str:
    made = ec2.run_instances(
        ImageId=UBUNTU_DLAMI,
        MinCount=1,
        MaxCount=1,
        InstanceType="t3.micro",
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )
    return str(made["Instances"][0]["InstanceId"])


@pytest.mark.slow
def test_credentials_stay_out_of_files_tags_gc_and_down_checks_by_tag(
    cli_env: dict[str, str],
    dlami: None,
    moto_like_ec2: None,
    ssh_key: Path,
    ec2: Any,
    tmp_path: Path,
) -> None:
    """Planted credentials for `up`/`status`/`gc`/`down`: no value in any file of the project
    or workspace (tfvars, state, plan, settings) or in any output. Every resource carries the
    cluster and the workspace id; the nodes' role reads the staged wheel; `gc` lists a
    tagged instance no state knows; `down` refuses while the API still shows one of the
    workspace's instances, and once clean deletes the staged wheel."""
    project = tmp_path / "project"
    project.mkdir()
    write_spec(project / "skyinfra.toml", "leak-check", "t3.micro", ssh_key)
    env = {**cli_env, **PLANTED}
    ws = project / ".skyinfra" / "clusters" / "leak-check"
    runs: list[subprocess.CompletedProcess[str]] = []
    up = skyinfra("up", cwd=project, env=env)
    runs.append(up)
    stray = ghost = None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        ws_id = json.loads((ws / "workspace-id.json").read_text())["id"]
        settings = json.loads((ws / TARGET_FILE).read_text())
        assert settings["workspace_id"] == ws_id
        topology = json.loads((ws / "topology.json").read_text())
        ids = [n["instance_id"] for n in topology["nodes"]]
        for instance in instances_by_id(ec2, ids).values():
            tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
            assert (tags["skyinfra:cluster"], tags["skyinfra:workspace"]) == ("leak-check", ws_id)
        vpcs = ec2.describe_vpcs(Filters=[{"Name": "tag:skyinfra:workspace", "Values": [ws_id]}])
        assert len(vpcs["Vpcs"]) == 1
        # The user data names the object, not a presigned URL; the role may read the prefix.
        user_data = json.loads((ws / "terraform.tfvars.json").read_text())["user_data"]
        text = user_data_text(user_data["node-0"])
        prefix = settings["staging_prefix"]
        assert f"/{settings['staging_bucket']}/{prefix}" in text and "X-Amz-" not in text
        iam = boto3.client("iam", region_name=REGION, endpoint_url=cli_env[ENDPOINT_ENV_VAR])
        policy = iam.get_role_policy(
            RoleName="leak-check-node", PolicyName="leak-check-staged-read"
        )
        (statement,) = policy["PolicyDocument"]["Statement"]
        assert statement["Action"] == "s3:GetObject"
        assert statement["Resource"] == f"arn:aws:s3:::{settings['staging_bucket']}/{prefix}*"

        runs.append(skyinfra("status", cwd=project, env=env))
        # An instance tagged like a cluster's that no state knows about: `gc` lists it.
        ghost = tagged_instance(
            ec2, {"skyinfra:cluster": "gone", "skyinfra:workspace": "ws-00000000000000aa"}
        )
        gc = skyinfra("gc", cwd=project, env=env)
        runs.append(gc)
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert f"{REGION} instance {ghost} (skyinfra:cluster=gone" in gc.stdout
        assert not any(i in gc.stdout for i in ids)  # the cluster's own are in its state
        assert "nothing was deleted" in gc.stdout
        ec2.terminate_instances(InstanceIds=[ghost])
        # One of this workspace's instances that Terraform does not know: `down` says so.
        stray = tagged_instance(
            ec2, {"skyinfra:cluster": "leak-check", "skyinfra:workspace": ws_id}
        )
    finally:
        down = skyinfra("down", "--yes", cwd=project, env=env)
        runs.append(down)
    assert down.returncode != 0, down.stdout + down.stderr
    assert f"aws still shows 1 of its resource(s): instance {stray}" in down.stderr
    ec2.terminate_instances(InstanceIds=[stray])
    again = skyinfra("down", "--yes", cwd=project, env=env)
    runs.append(again)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "checked with aws: nothing of cluster 'leak-check' is left" in again.stdout
    assert count_cluster_resources(ec2, "leak-check") == NO_SPACE
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=cli_env[ENDPOINT_ENV_VAR])
    listed = s3.list_objects_v2(Bucket=settings["staging_bucket"], Prefix=prefix)
    assert listed["KeyCount"] == 0  # `down` deleted the staged wheel

    assert files_holding(tmp_path, PLANTED) == []
    for run in runs:
        for name, value in PLANTED.items():
            assert value not in run.stdout + run.stderr, name
