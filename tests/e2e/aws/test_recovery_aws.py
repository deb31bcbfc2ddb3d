"""Restarts and node replacement on emulated AWS, end to end (issue 25): one 2-node cluster
brought up once for the module (real Terraform and the AWS provider against moto, the nodes'
provisioning script run for real in a root per node, `run` reaching them over a real sshd on
loopback), checkpoints in an S3 `checkpoints_url` on moto. With `run --max-restarts 1`
attached:

- a worker SIGKILLed in attempt 1 restarts the job on the same nodes as attempt 2, which
  resumes from the step each node saved, with every node's files restored from S3;
- a node lost (its instance terminated through the EC2 API, its processes killed and its disk
  gone) is replaced by Terraform as `up` would (same shape, ranks and private addresses, a new
  instance), and attempt 2 resumes there from the checkpoint the node had uploaded; the same
  with node 0, the job's head, lost (EC2 says its instance is terminated).

The entry is plain Python: a loop that writes its step into $SKYINFRA_CHECKPOINT_DIR and
resumes from it. The same proofs with frameworks are the local target's (test_checkpoints*)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra.targets.aws.endpoints import EMULATED_NODES_ENV_VAR, ENDPOINT_ENV_VAR
from skyinfra.targets.aws.ssh import SshTarget
from skyinfra.terraform import MIRROR_ENV
from tests.conftest import REPO_ROOT, skyinfra_argv
from tests.e2e.aws.test_run_over_ssh import provision_in_root
from tests.support.aws import REGION, user_data_text
from tests.support.aws_e2e import (
    NO_SPACE,
    UBUNTU_DLAMI,
    count_cluster_resources,
    patch_moto_like_ec2,
    skyinfra,
)
from tests.support.aws_fixtures import seed_dlami, unseed_dlami

pytestmark = pytest.mark.slow

NAME = "aws-recovery"
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
    # Node 0 has saved step 3 by then: both resume from step 3.
    time.sleep(3)
    if node == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does
    time.sleep(120)  # node 0 waits until the job ends it


def _lost(node):
    print(f"node {node} waits at step 3", flush=True)
    time.sleep(120)  # until the test takes node 1 away and the job ends node 0


def killed_at_3():
    return _train(_killed)


def lost_at_3():
    return _train(_lost)
"""


@pytest.fixture(scope="module")
def env(
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
    # Dummy credentials, never real ones; no instance metadata service (beyond loopback).
    aws = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("SKYINFRA_", "AWS_"))}
    shell.update(
        {
            **aws,
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
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            mp.delenv(name, raising=False)
        for name, value in aws.items():
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


def ws(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


def provision(project: Path, env: dict[str, str], node: int, cluster: str = NAME) -> None:
    """What cloud-init does at a node's first boot: the node's user data, run in its root."""
    workspace = project / ".skyinfra" / "clusters" / cluster
    tfvars = json.loads((workspace / "terraform.tfvars.json").read_text())
    done = provision_in_root(
        user_data_text(tfvars["user_data"][f"node-{node}"]), node_root(env, node)
    )
    assert done.returncode == 0, done.stdout + done.stderr


def processes_under(root: Path) -> list[int]:
    """The processes a stand-in node runs: their command line names its root (the node's
    venv, its node dir)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(root) in cmd and entry.name != str(os.getpid()):
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def project(
    env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, sshd: Any
) -> Iterator[Path]:
    target, key = sshd
    client(env, "s3").create_bucket(Bucket=BUCKET)
    proj = tmp_path_factory.mktemp("aws-recovery-project")
    (proj / "skyinfra.toml").write_text(
        f'name = "{NAME}"\nprovider = "aws"\nnodes = 2\n[aws]\n'
        f'region = "{REGION}"\ninstance_type = "t3.micro"\nssh_cidrs = ["203.0.113.7/32"]\n'
        f'ssh_key = "{key}"\nssh_user = "{target.user}"\nplacement_group = false\n'
        'jax_extra = "none"\nidle_shutdown_minutes = 0\n'
        f'checkpoints_url = "s3://{BUCKET}/{CKPT_PREFIX}"\n'
    )
    (proj / "entry.py").write_text(ENTRY)
    up = skyinfra("up", cwd=proj, env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        for node in range(2):
            provision(proj, env, node)
        yield proj
    finally:
        for node in range(2):
            kill_all(processes_under(node_root(env, node)))
        down = skyinfra("down", "--yes", cwd=proj, env=env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert count_cluster_resources(client(env, "ec2"), NAME) == NO_SPACE


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def job_record(project: Path, env: dict[str, str], job: str) -> dict[str, Any]:
    shown = skyinfra("jobs", job, "--json", cwd=project, env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return dict(json.loads(shown.stdout))


def results(project: Path, job: str) -> list[dict[str, Any]]:
    summary = json.loads((ws(project) / "runs" / job / "summary.json").read_text())
    return [n["result"]["workers"][0]["value"] for n in summary["nodes"]]


def newest_job(project: Path) -> str:
    return max((ws(project) / "runs").iterdir(), key=lambda p: p.stat().st_mtime).name


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


def test_a_killed_worker_restarts_on_the_same_nodes_and_resumes_from_s3(
    project: Path, env: dict[str, str]
) -> None:
    argv = ["run", "--max-restarts", "1", "--checkpoints", "killed", "entry.py:killed_at_3"]
    run = skyinfra(*argv, cwd=project, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "attempt 1 ended: node-1 exit 137 (a worker was killed by signal SIGKILL)" in out, out
    assert "restarting the job as attempt 2 on the same nodes" in out
    job = newest_job(project)
    record = job_record(project, env, job)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    first, second = record["attempts"]
    assert first["cause"] == {
        "node": 1,
        "exit_code": 137,
        "meaning": "a worker was killed by signal SIGKILL",
        "kind": "signal",
    }
    assert first["outcome"] == "failed" and second["outcome"] == "succeeded"
    assert second["recovery_s"] >= 0
    # Attempt 2 resumed from step 3 on both nodes, not from zero; each node found the other
    # node's step file too, which only S3 holds (restored from node-<i>'s manifest).
    values = results(project, job)
    assert [(v["attempt"], v["node"], v["resumed_after"]) for v in values] == [(2, 0, 3), (2, 1, 3)]
    for v in values:
        assert {"step-node-0.txt", "step-node-1.txt"} <= set(v["files_at_start"]), v
    # The job's end uploaded the last step of each node.
    assert [saved_step(env, "killed", i) for i in range(2)] == [6, 6]
    # Node 0's agent fetched node 1's file before attempt 2 (its own was there already).
    log = (node_root(env, 0) / "opt/skyinfra/node/runs" / job / "agent.log").read_text()
    assert "restored 2 file(s) of 2 node(s)" in log and "(1 fetched, 1 already there)" in log


def lose_node_during_a_run(
    project: Path, env: dict[str, str], node: int, name: str
) -> tuple[str, int, dict[str, Any], dict[str, Any], list[str]]:
    """`run --max-restarts 1` of lost_at_3 on checkpoint set ``name``; once ``node`` uploaded
    step 3, it is lost (EC2 terminates its instance, its processes and disk go with it) and
    its replacement is provisioned as cloud-init would once Terraform made it. The run's
    output, exit code, the topology before and after, and the replacement's instance id."""
    ec2 = client(env, "ec2")
    before = json.loads((ws(project) / "topology.json").read_text())
    root = node_root(env, node)
    out_file = project / f"lost-{name}.out"
    replaced: list[str] = []
    errors: list[BaseException] = []

    def boot_the_replacement() -> None:
        boot_replacement(project, env, node, before, replaced, errors)

    with out_file.open("w+") as out:
        argv = ["run", "--max-restarts", "1", "--checkpoints", name, "entry.py:lost_at_3"]
        proc = subprocess.Popen(
            [*skyinfra_argv(), *argv], cwd=project, env=env, stdout=out,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        booter = threading.Thread(target=boot_the_replacement, daemon=True)
        try:
            # The node has uploaded step 3 (the agent's poll takes a file once it settled).
            until = time.monotonic() + 120  # a bound on the wait, not an assertion on time
            while saved_step(env, name, node) != 3:
                assert proc.poll() is None, out_file.read_text()
                assert time.monotonic() < until, out_file.read_text()
                time.sleep(0.5)
            ec2.terminate_instances(InstanceIds=[before["nodes"][node]["instance_id"]])
            kill_all(processes_under(root))
            shutil.rmtree(root)
            booter.start()
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        booter.join(timeout=60)
        said = out_file.read_text()
    assert not errors, errors
    after = json.loads((ws(project) / "topology.json").read_text())
    return said, code, before, after, replaced


def boot_replacement(
    project: Path,
    env: dict[str, str],
    node: int,
    before: dict[str, Any],
    replaced: list[str],
    errors: list[BaseException],
    cluster: str = NAME,
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


def replaced_and_resumed(
    project: Path, env: dict[str, str], node: int, name: str, lost: tuple[Any, ...]
) -> None:
    """What a lost node's run must come to: Terraform made only the missing instance (same
    ranks and addresses, a new instance for ``node``), and attempt 2 resumed from step 3 on
    both nodes, the new node's disk restored from S3."""
    said, code, before, after, replaced = lost
    assert code == 0, said
    assert f"node-{node} lost: replacing it" in said, said
    if node != 0:  # a peer's agent gone: said so, not as an unknown exit code
        assert "node-1 failed first: its agent went away without an exit code" in said, said
        assert "exit 255" not in said, said
    # As `up` would: Terraform makes the missing instance and touches nothing else.
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in said, said
    assert [(n["index"], n["private_ip"]) for n in after["nodes"]] == [
        (n["index"], n["private_ip"]) for n in before["nodes"]
    ]
    other = 1 - node
    assert after["nodes"][other]["instance_id"] == before["nodes"][other]["instance_id"]
    assert (
        after["nodes"][node]["instance_id"] == replaced[0] != before["nodes"][node]["instance_id"]
    )

    job = newest_job(project)
    record = job_record(project, env, job)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    first, second = record["attempts"]
    assert first["cause"]["node"] == node and first["cause"]["kind"] == "lost", first
    assert first["restarted_by"] == "the operator, after replacing the lost node(s)"
    assert second["outcome"] == "succeeded" and second["recovery_s"] >= 0
    values = results(project, job)
    assert [(v["attempt"], v["node"], v["resumed_after"]) for v in values] == [(2, 0, 3), (2, 1, 3)]
    assert {"step-node-0.txt", "step-node-1.txt"} <= set(values[node]["files_at_start"])
    assert [saved_step(env, name, i) for i in range(2)] == [6, 6]


def test_a_lost_node_is_replaced_by_terraform_and_the_job_resumes_there(
    project: Path, env: dict[str, str]
) -> None:
    replaced_and_resumed(project, env, 1, "lost", lose_node_during_a_run(project, env, 1, "lost"))


def test_a_lost_head_is_replaced_by_terraform_and_the_job_resumes_there(
    project: Path, env: dict[str, str]
) -> None:
    """Node 0 lost: the job's supervisor and record go with it. `run` cannot read the record
    any more, EC2 says the instance is terminated, so the job goes on as one that lost its
    head: node 1's part ended, node 0 replaced, the job started again there from the
    record's last copy."""
    lost = lose_node_during_a_run(project, env, 0, "head")
    said = lost[0]
    assert "node-0 (the job's head) was lost: its machine is gone" in said, said
    replaced_and_resumed(project, env, 0, "head", lost)
