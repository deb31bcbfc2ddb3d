"""Unattended recovery on emulated AWS (issue 26, ``aws.recover = true``), end to end: a
2-node cluster with its state in S3 (moto), brought up with real Terraform; each node's user
data run in a root of its own as cloud-init would (node 0's installs skyinfra from the staged
wheel into its head venv); the nodes reached over a real sshd on loopback.

A detached job loses node 1 (its instance terminated through the EC2 API, its processes and
disk gone) with nobody attached and nobody running `jobs recover`. Node 0's supervisor runs
its skyinfra on the kit `run` copied there: Terraform re-creates only node 1's instance
against the shared state, node 0 reaches the new node with the cluster's own key (never the
operator's), copies the project and starts the job as attempt 2, which resumes from the step
node 1 had uploaded to S3."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import skyinfra_argv
from tests.support.aws import user_data_text
from tests.support.aws_e2e import NO_SPACE, count_cluster_resources, skyinfra
from tests.support.aws_recovery_e2e import (  # noqa: F401 (the fixture)
    BUCKET,
    CKPT_PREFIX,
    ENTRY,
    boot_replacement,
    client,
    node_root,
    recovery_env,
    saved_step,
)
from tests.support.aws_recovery_e2e import provision as recovery_provision
from tests.support.deadlines import PROVISION_S, UP_S, setup_deadline, stage
from tests.support.leaks import files_holding
from tests.support.workers import end_all_under

# The waits inside (a run to step 3, node 0's Terraform replacing node 1, the resumed
# attempt) have bounds of their own; the test's timeout is only the last resort.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

NAME = "aws-unattended"
STATE_BUCKET = "team-state-unattended"


@pytest.fixture(scope="module")
def env(recovery_env: dict[str, str]) -> dict[str, str]:  # noqa: F811
    return recovery_env


def ws(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


def provision(project: Path, env: dict[str, str], node: int) -> str:
    return recovery_provision(project, env, node, NAME)


def authorize_the_clusters_key(project: Path, sshd_dir: Path) -> str:
    """What cloud-init does with the user data's ssh_authorized_keys on every node, for the
    one sshd the emulated nodes share: the cluster's key, from the emulated private network
    (loopback) only. The line as the user data has it, but for that address."""
    tfvars = json.loads((ws(project) / "terraform.tfvars.json").read_text())
    document = yaml.safe_load(user_data_text(tfvars["user_data"]["node-1"]))
    (line,) = document["ssh_authorized_keys"]
    public = (ws(project) / "head_key.pub").read_text().strip()
    assert line.endswith(public) and re.match(r'^from="10\.[0-9./]+",no-agent-forwarding', line)
    loopback = re.sub(r'^from="[^"]+"', 'from="127.0.0.1"', line)
    with (sshd_dir / "authorized_keys").open("a") as f:
        f.write(loopback + "\n")
    return loopback


@pytest.fixture(scope="module")
@setup_deadline(UP_S + 2 * PROVISION_S)
def project(
    env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, sshd: Any
) -> Iterator[Path]:
    target, key = sshd
    client(env, "s3").create_bucket(Bucket=STATE_BUCKET)
    client(env, "s3").create_bucket(Bucket=BUCKET)
    proj = tmp_path_factory.mktemp("aws-unattended-project")
    (proj / "skyinfra.toml").write_text(
        f'name = "{NAME}"\nprovider = "aws"\nnodes = 2\n'
        f'backend = "s3://{STATE_BUCKET}/sky"\n[aws]\n'
        f'region = "us-east-1"\ninstance_type = "t3.micro"\nssh_cidrs = ["203.0.113.7/32"]\n'
        f'ssh_key = "{key}"\nssh_user = "{target.user}"\nplacement_group = false\n'
        'jax_extra = "none"\nidle_shutdown_minutes = 0\nrecover = true\n'
        f'checkpoints_url = "s3://{BUCKET}/{CKPT_PREFIX}"\n'
    )
    (proj / "entry.py").write_text(ENTRY)
    with stage(f"`up` of {NAME} (emulated AWS, S3 state)", UP_S):
        up = skyinfra("up", cwd=proj, env=env, timeout=2 * UP_S)
    sshd_dir = key.parent
    authorized = (sshd_dir / "authorized_keys").read_text()
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "skyinfra wheel for node 0 staged at s3://" in up.stdout, up.stdout
        assert (ws(proj) / "head_key").stat().st_mode & 0o777 == 0o600
        authorize_the_clusters_key(proj, sshd_dir)
        for node in range(2):
            with stage(f"provisioning of node {node} (its user data, as cloud-init)", PROVISION_S):
                said = provision(proj, env, node)
            # Node 0's head venv (skyinfra and its dependencies) made with uv, not pip.
            assert ("provision.sh: head venv with uv" in said) == (node == 0), said
        yield proj
    finally:
        (sshd_dir / "authorized_keys").write_text(authorized)
        for node in range(2):
            end_all_under(node_root(env, node))
        with stage(f"`down` of {NAME}", UP_S):
            down = skyinfra("down", "--yes", cwd=proj, env=env, timeout=2 * UP_S)
        assert down.returncode == 0, down.stdout + down.stderr
        assert count_cluster_resources(client(env, "ec2"), NAME) == NO_SPACE


def record_of(project: Path, env: dict[str, str], job: str) -> dict[str, Any]:
    shown = skyinfra("jobs", job, "--json", cwd=project, env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return dict(json.loads(shown.stdout))


def lose_node_1(
    project: Path, env: dict[str, str], before: dict[str, Any]
) -> tuple[threading.Thread, list[str], list[BaseException]]:
    """Node 1 lost as a machine is (EC2 terminates its instance, its processes and disk go),
    and cloud-init's part on the instance node 0's Terraform makes for it, in a thread."""
    client(env, "ec2").terminate_instances(InstanceIds=[before["nodes"][1]["instance_id"]])
    root = node_root(env, 1)
    end_all_under(root)
    shutil.rmtree(root)
    replaced: list[str] = []
    errors: list[BaseException] = []
    booter = threading.Thread(
        target=boot_replacement,
        args=(project, env, 1, before, replaced, errors, NAME),
        daemon=True,
    )
    booter.start()
    return booter, replaced, errors


def test_node_0_replaces_a_lost_worker_of_a_detached_job_with_nobody_attached(
    project: Path, env: dict[str, str], sshd: Any
) -> None:
    operator_key_path = sshd[1]
    before = json.loads((ws(project) / "topology.json").read_text())
    started = skyinfra(
        "run", "-d", "--max-restarts", "1", "--checkpoints", "unattended",
        "entry.py:lost_at_3", cwd=project, env=env,
    )  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    job = started.stdout.split("job ", 1)[1].split()[0]
    head = node_root(env, 0) / "opt/skyinfra/node"
    # The kit: node 0's copy of the workspace, its marker, the key (0600), no state.
    kit = head / "head" / "clusters" / NAME
    assert (kit / "head.json").is_file() and (kit / "backend.tf").is_file()
    assert (head / "head" / "head_key").stat().st_mode & 0o777 == 0o600
    assert not (kit / "terraform.tfstate").exists()

    until = time.monotonic() + 300  # a bound on the wait, not an assertion on time
    while [saved_step(env, "unattended", i) for i in range(2)] != [3, 3]:
        assert time.monotonic() < until, record_of(project, env, job)
        time.sleep(0.5)
    booter, replaced, errors = lose_node_1(project, env, before)

    # Followed in node 0's record on its disk (written whole, atomically): the file `jobs`
    # fetches over SSH, without a CLI and a Terraform `output` of the S3 state every second.
    record: dict[str, Any] = {}
    until = time.monotonic() + 600
    while record.get("state") not in ("succeeded", "failed", "cancelled", "timed_out"):
        assert time.monotonic() < until, record
        time.sleep(1)
        record = json.loads((head / "jobs" / f"{job}.json").read_text())
        said = record.get("head_recovery") or {}
        log = head / "runs" / job / "recover.log"
        assert said.get("state") != "failed", log.read_text() if log.is_file() else said
    record = record_of(project, env, job)  # what the operator's `jobs JOB --json` says
    booter.join(timeout=60)
    assert not errors, errors
    log_text = (head / "runs" / job / "recover.log").read_text()
    assert record["state"] == "succeeded" and record["attempt"] == 2, (record, log_text)
    first = record["attempts"][0]
    assert first["cause"]["node"] == 1 and first["cause"]["kind"] == "lost", first
    assert first["restarted_by"] == "node-0 (unattended recovery), after replacing the lost node(s)"
    # Terraform on node 0 made the missing instance and nothing else.
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in log_text, log_text
    assert replaced, log_text
    # Node 0 wrote the new instance into the shared state, under the operators' lock.
    shared = client(env, "s3").get_object(Bucket=STATE_BUCKET, Key=f"sky/{NAME}/terraform.tfstate")
    assert replaced[0] in shared["Body"].read().decode()
    # Attempt 2 resumed from step 3 on both nodes (node 1's disk restored from S3).
    values = [n["result"]["workers"][0]["value"] for n in record["nodes"]]
    assert [(v["attempt"], v["node"], v["resumed_after"]) for v in values] == [(2, 0, 3), (2, 1, 3)]
    # The operator's key never reached node 0; the cluster's own key did.
    operator_key = operator_key_path.read_text().splitlines()[1]
    assert files_holding(node_root(env, 0), operator_key) == []


def test_an_attached_run_follows_the_attempt_node_0_starts(
    project: Path, env: dict[str, str]
) -> None:
    """On AWS an attached `run` leaves the lost node to node 0 (two replacing it would race),
    waits for node 0's attempt and follows it to the end."""
    out_file = project / "attached.out"
    argv = ["run", "--max-restarts", "1", "--checkpoints", "attached", "entry.py:lost_at_3"]
    with out_file.open("w+") as out:
        proc = subprocess.Popen(
            [*skyinfra_argv(), *argv], cwd=project, env=env, stdout=out,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            until = time.monotonic() + 300  # a bound on the wait, not an assertion on time
            while [saved_step(env, "attached", i) for i in range(2)] != [3, 3]:
                assert proc.poll() is None and time.monotonic() < until, out_file.read_text()
                time.sleep(0.5)
            # `run` refreshed topology.json from the shared state before it started.
            before = json.loads((ws(project) / "topology.json").read_text())
            booter, replaced, errors = lose_node_1(project, env, before)
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    booter.join(timeout=60)
    said = out_file.read_text()
    assert not errors, errors
    assert code == 0, said
    assert "node-0 replaces the lost node(s) and starts the next attempt itself" in said, said
    assert "node-1 lost: replacing it" not in said, said  # not from here
    assert replaced, said
    job = max((ws(project) / "runs").iterdir(), key=lambda p: p.stat().st_mtime).name
    record = record_of(project, env, job)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    first = record["attempts"][0]
    assert first["restarted_by"] == "node-0 (unattended recovery), after replacing the lost node(s)"
    values = [n["result"]["workers"][0]["value"] for n in record["nodes"]]
    assert [(v["attempt"], v["node"], v["resumed_after"]) for v in values] == [(2, 0, 3), (2, 1, 3)]


def _by_sid(policy: str) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for s in json.loads(policy)["Statement"]}


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def test_the_heads_role_is_node_0s_alone_and_scoped_to_the_cluster(
    project: Path, env: dict[str, str]
) -> None:
    """What `up` applied (read back from the shared state: the policy's ARNs are known only
    once applied): node-0 has the head's profile, node-1 the node profile, and the recover
    policy holds this cluster's conditions and nothing to delete or terminate with."""
    state = client(env, "s3").get_object(Bucket=STATE_BUCKET, Key=f"sky/{NAME}/terraform.tfstate")
    resources = {
        (r.get("module", ""), r["type"], r["name"]): r["instances"]
        for r in json.loads(state["Body"].read())["resources"]
        if r["mode"] == "managed"
    }

    def values(rtype: str, name: str, key: Any = None) -> dict[str, Any]:
        for instance in resources[("module.nodes", rtype, name)]:
            if instance.get("index_key") == key:
                return dict(instance["attributes"])
        raise AssertionError(f"no {rtype}.{name}[{key!r}] in the state")

    assert values("aws_instance", "this", "node-0")["iam_instance_profile"] == f"{NAME}-head"
    assert values("aws_instance", "this", "node-1")["iam_instance_profile"] == f"{NAME}-node"
    node_role = values("aws_iam_role", "this")["arn"]
    subnet = values("aws_instance", "this", "node-1")["subnet_id"]
    recover = values("aws_iam_role_policy", "head_recover", 0)
    assert recover["role"] == f"{NAME}-head" and recover["name"] == f"{NAME}-recover"
    sids = _by_sid(recover["policy"])
    assert sids["ListTheClusterStateFolder"]["Condition"] == {
        "StringLike": {"s3:prefix": f"sky/{NAME}/*"}
    }
    state_arn = f"arn:aws:s3:::{STATE_BUCKET}/sky/{NAME}/terraform.tfstate"
    assert sids["ReadWriteTheClusterState"]["Resource"] == state_arn
    assert sorted(_listed(sids["TakeAndReleaseTheStateLock"]["Action"])) == [
        "s3:DeleteObject",
        "s3:GetObject",
        "s3:PutObject",
    ]
    assert sids["TakeAndReleaseTheStateLock"]["Resource"] == f"{state_arn}.tflock"
    assert sids["DescribeForTheRefresh"]["Resource"] == "*"
    assert sids["ReadTheClusterConsoles"]["Condition"] == {
        "StringEquals": {"ec2:ResourceTag/skyinfra:cluster": NAME}
    }
    launch = sids["LaunchOnlyInstancesTaggedForTheCluster"]
    assert launch["Condition"] == {"StringEquals": {"aws:RequestTag/skyinfra:cluster": NAME}}
    assert sorted(r.rsplit(":", 1)[1] for r in _listed(launch["Resource"])) == [
        "instance/*",
        "volume/*",
    ]
    interfaces = sids["LaunchInterfacesInTheClusterSubnet"]["Condition"]
    assert interfaces["StringEquals"]["ec2:Subnet"].endswith(f":subnet/{subnet}")
    assert interfaces["StringEqualsIfExists"] == {"ec2:ResourceTag/skyinfra:cluster": NAME}
    network = _listed(sids["LaunchWithTheClusterNetworkAndKey"]["Resource"])
    assert any(r.endswith(f":subnet/{subnet}") for r in network)
    assert not any(r.endswith("/*") for r in network), network  # exact ARNs only
    assert sids["TagOnlyAtLaunch"]["Condition"] == {
        "StringEquals": {"ec2:CreateAction": "RunInstances"}
    }
    assert sids["PassTheNodeRoleToEC2"]["Resource"] == node_role
    assert sids["PassTheNodeRoleToEC2"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}
    }
    actions = {a for s in sids.values() for a in _listed(s["Action"])}
    assert not {a for a in actions if a.split(":")[1].startswith(("Terminate", "Delete"))} - {
        "s3:DeleteObject"
    }
    assert not {a for a in actions if a.startswith("iam:")} - {
        "iam:PassRole",
        "iam:GetRole",
        "iam:GetRolePolicy",
        "iam:ListRolePolicies",
        "iam:ListAttachedRolePolicies",
        "iam:GetInstanceProfile",
    }
