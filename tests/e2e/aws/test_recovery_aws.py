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

The entry (ENTRY, tests/support/aws_recovery_e2e.py) is plain Python: a loop that writes its
step into $SKYINFRA_CHECKPOINT_DIR and resumes from it. The same proofs with frameworks are the
local target's (test_checkpoints*)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import skyinfra_argv
from tests.support.aws import REGION
from tests.support.aws_e2e import (
    NO_SPACE,
    count_cluster_resources,
    skyinfra,
)
from tests.support.aws_recovery_e2e import (  # noqa: F401 (the fixture)
    BUCKET,
    CKPT_PREFIX,
    ENTRY,
    boot_replacement,
    client,
    node_root,
    provision,
    recovery_env,
    saved_step,
)
from tests.support.deadlines import PROVISION_S, UP_S, setup_deadline, stage
from tests.support.workers import end_all_under

# The waits inside (a run to step 3, Terraform replacing a node, the resumed attempt) have
# bounds of their own that name what is slow; the test's timeout is only the last resort.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

NAME = "aws-recovery"


@pytest.fixture(scope="module")
def env(recovery_env: dict[str, str]) -> dict[str, str]:  # noqa: F811
    return recovery_env


def ws(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


@pytest.fixture(scope="module")
@setup_deadline(UP_S + 2 * PROVISION_S)
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
    with stage(f"`up` of {NAME} (emulated AWS)", UP_S):
        up = skyinfra("up", cwd=proj, env=env, timeout=2 * UP_S)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        for node in range(2):
            with stage(f"provisioning of node {node} (its user data, as cloud-init)", PROVISION_S):
                provision(proj, env, node, NAME)
        yield proj
    finally:
        for node in range(2):
            end_all_under(node_root(env, node))
        with stage(f"`down` of {NAME}", UP_S):
            down = skyinfra("down", "--yes", cwd=proj, env=env, timeout=2 * UP_S)
        assert down.returncode == 0, down.stdout + down.stderr
        assert count_cluster_resources(client(env, "ec2"), NAME) == NO_SPACE


def job_record(project: Path, env: dict[str, str], job: str) -> dict[str, Any]:
    shown = skyinfra("jobs", job, "--json", cwd=project, env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return dict(json.loads(shown.stdout))


def results(project: Path, job: str) -> list[dict[str, Any]]:
    summary = json.loads((ws(project) / "runs" / job / "summary.json").read_text())
    return [n["result"]["workers"][0]["value"] for n in summary["nodes"]]


def newest_job(project: Path) -> str:
    return max((ws(project) / "runs").iterdir(), key=lambda p: p.stat().st_mtime).name


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
        boot_replacement(project, env, node, before, replaced, errors, NAME)

    with out_file.open("w+") as out:
        argv = ["run", "--max-restarts", "1", "--checkpoints", name, "entry.py:lost_at_3"]
        proc = subprocess.Popen(
            [*skyinfra_argv(), *argv], cwd=project, env=env, stdout=out,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        booter = threading.Thread(target=boot_the_replacement, daemon=True)
        try:
            # Both nodes have uploaded step 3 (the agent's poll takes a file once it settled),
            # so that both resume from it however slow the machine.
            until = time.monotonic() + 300  # a bound on the wait, not an assertion on time
            while [saved_step(env, name, i) for i in range(2)] != [3, 3]:
                assert proc.poll() is None, out_file.read_text()
                assert time.monotonic() < until, out_file.read_text()
                time.sleep(0.5)
            ec2.terminate_instances(InstanceIds=[before["nodes"][node]["instance_id"]])
            end_all_under(root)
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
