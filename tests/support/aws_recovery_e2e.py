"""What the AWS recovery end-to-end tests share (tests/e2e/aws: test_recovery_aws.py and
test_unattended_recovery_aws.py): the training entry that checkpoints each step and resumes,
the checkpoint bucket, the operator's shell for a module whose nodes are emulated (each node a
root of its own reached over the tests' sshd; the `recovery_env` fixture, which each module
wraps as its `env`), provisioning a node and a replacement node as cloud-init would, and the
step a node last uploaded to S3. Ending what a stand-in node runs is tests/support/workers.py's
(end_all_under).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra.targets.aws.endpoints import EMULATED_NODES_ENV_VAR, ENDPOINT_ENV_VAR
from skyinfra.terraform import MIRROR_ENV
from skyinfra.transport.ssh import SshTarget
from tests.conftest import REPO_ROOT
from tests.support.aws import (
    AMBIENT_AWS_CREDENTIALS,
    DUMMY_AWS_ENV,
    REGION,
    user_data_text,
)
from tests.support.aws_e2e import UBUNTU_DLAMI, patch_moto_like_ec2, provision_in_root
from tests.support.aws_fixtures import seed_dlami, unseed_dlami

BUCKET = "team-ckpts-recovery"
CKPT_PREFIX = "train"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

ENTRY = """\
import os, pathlib, signal, time

TOTAL = 6


def _train(stop_at_3):
    d = pathlib.Path(os.environ["SKYINFRA_CHECKPOINT_DIR"])
    node = int(os.environ["SKYINFRA_NODE"])
    attempt = int(os.environ["SKYINFRA_ATTEMPT"])
    mine = d / f"step-node-{node}.txt"
    start = int(mine.read_text()) if mine.is_file() else 0
    there = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
    print(f"attempt {attempt} on node {node}: resuming after step {start}", flush=True)
    for step in range(start + 1, TOTAL + 1):
        part = d / f".step-node-{node}.tmp"
        part.write_text(str(step))
        os.replace(part, mine)  # a kill never leaves a half-written step
        print(f"attempt {attempt} node {node} step {step}", flush=True)
        if attempt == 1 and step == 3:
            stop_at_3(node)
        time.sleep(0.2)
    return {"attempt": attempt, "node": node, "resumed_after": start, "files_at_start": there}


def _killed(node):
    if node == 1:
        # Node 1 dies once node 0 has saved step 3 too, so that both resume from step 3 however
        # slow the machine. The stand-in nodes share it: node 0's folder is beside this one's.
        here = os.environ["SKYINFRA_CHECKPOINT_DIR"]
        theirs = pathlib.Path(here.replace("emulated-node-1", "emulated-node-0"))
        until = time.monotonic() + 300
        while time.monotonic() < until:
            saved = theirs / "step-node-0.txt"
            if saved.is_file() and saved.read_text() == "3":
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does
    time.sleep(600)  # node 0 waits until the job ends it


def _lost(node):
    print(f"node {node} waits at step 3", flush=True)
    time.sleep(600)  # until the test takes node 1 away and the job ends node 0


def killed_at_3():
    return _train(_killed)


def lost_at_3():
    return _train(_lost)
"""


@pytest.fixture(scope="module")
def recovery_env(
    moto_url: str,
    plugin_mirror: Path,
    tf_plugin_cache: Path,
    sshd: tuple[SshTarget, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, str]]:
    """The operator's shell for the module (dummy credentials, the emulator, the provider
    mirror, the real runtime, the nodes mapped to the sshd); moto seeded and read back like
    EC2 (tests/support/aws_e2e.py) for as long as the module's cluster lives."""
    target, key = sshd
    base = tmp_path_factory.mktemp("aws-recovery")
    roots = {f"node-{i}": base / f"emulated-node-{i}" for i in range(2)}
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("SKYINFRA_", "AWS_"))}
    shell.update(
        {
            **DUMMY_AWS_ENV,
            ENDPOINT_ENV_VAR: moto_url,
            MIRROR_ENV: str(plugin_mirror),
            "SKYINFRA_CACHE": str(base / "cache"),
            "SKYINFRA_TF_PLUGIN_CACHE": str(tf_plugin_cache),
            "SKYINFRA_RUNTIME_DIR": str(REPO_ROOT / "runtime"),
            EMULATED_NODES_ENV_VAR: json.dumps(
                {
                    name: {"ssh": f"{target.host}:{target.port}", "root": str(root)}
                    for name, root in roots.items()
                }
            ),
        }
    )
    # The nodes' consoles show the stand-in sshd's host key (test_run_over_ssh.py).
    import moto.ec2.responses.general as general

    host_key = " ".join((key.parent / "host_ed25519.pub").read_text().split()[:2])
    seed_dlami(UBUNTU_DLAMI)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            general,
            "SAMPLE_CONSOLE_OUTPUT",
            "-----BEGIN SSH HOST KEY KEYS-----\n"
            f"{host_key} root@node\n-----END SSH HOST KEY KEYS-----\n",
        )
        patch_moto_like_ec2(mp)
        # The stand-in nodes' provisioning (fetch-s3-object.py) takes this process's env.
        for name in AMBIENT_AWS_CREDENTIALS:
            mp.delenv(name, raising=False)
        for name, value in DUMMY_AWS_ENV.items():
            mp.setenv(name, value)
        try:
            yield shell
        finally:
            unseed_dlami()


def client(env: dict[str, str], service: str) -> Any:
    return boto3.client(
        service, region_name=REGION, endpoint_url=env[ENDPOINT_ENV_VAR], **CREDENTIALS
    )


def node_root(env: dict[str, str], node: int) -> Path:
    return Path(json.loads(env[EMULATED_NODES_ENV_VAR])[f"node-{node}"]["root"])


def provision(project: Path, env: dict[str, str], node: int, cluster: str) -> str:
    """What cloud-init does at a node's first boot: the node's user data, run in its root;
    what it printed."""
    workspace = project / ".skyinfra" / "clusters" / cluster
    tfvars = json.loads((workspace / "terraform.tfvars.json").read_text())
    done = provision_in_root(
        user_data_text(tfvars["user_data"][f"node-{node}"]), node_root(env, node)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def manifest(env: dict[str, str], name: str, node: int) -> dict[str, Any] | None:
    key = f"{CKPT_PREFIX}/{name}/nodes/node-{node}/manifest.json"
    try:
        body = client(env, "s3").get_object(Bucket=BUCKET, Key=key)["Body"].read()
    except client(env, "s3").exceptions.NoSuchKey:
        return None
    return dict(json.loads(body))


def saved_step(env: dict[str, str], name: str, node: int) -> int | None:
    """The step node ``node`` last uploaded to the set (its manifest's step file)."""
    found = manifest(env, name, node)
    entry = (found or {}).get("files", {}).get(f"step-node-{node}.txt")
    if entry is None:
        return None
    key = f"{CKPT_PREFIX}/{name}/nodes/node-{node}/objects/{entry['sha256']}"
    return int(client(env, "s3").get_object(Bucket=BUCKET, Key=key)["Body"].read())


def boot_replacement(
    project: Path,
    env: dict[str, str],
    node: int,
    before: dict[str, Any],
    replaced: list[str],
    errors: list[BaseException],
    cluster: str,
) -> None:
    """Cloud-init's part on the instance Terraform makes for ``node`` (whoever runs it): once
    EC2 lists it, provision its root. Run in a thread: its ids go to ``replaced``, a failure
    to ``errors``."""
    try:
        ec2 = client(env, "ec2")
        old = {n["instance_id"] for n in before["nodes"]}
        until = time.monotonic() + 300
        while time.monotonic() < until:
            live = ec2.describe_instances(
                Filters=[
                    {"Name": "tag:skyinfra:cluster", "Values": [cluster]},
                    {"Name": "instance-state-name", "Values": ["pending", "running"]},
                ]
            )
            new = [
                i["InstanceId"]
                for r in live["Reservations"]
                for i in r["Instances"]
                if i["InstanceId"] not in old
            ]
            tfvars = project / ".skyinfra" / "clusters" / cluster / "terraform.tfvars.json"
            if new and tfvars.is_file():
                replaced.extend(new)
                provision(project, env, node, cluster)
                return
            time.sleep(0.5)
    except BaseException as err:  # said by the test, not lost in the thread
        errors.append(err)
