"""Unattended recovery (issue 26), end to end on a 2-node local cluster with
``local.recover = true``: a detached job whose node 1 is interrupted (`drill interrupt`, the
node's IMDS stand-in) or lost, with nobody attached and nobody running `jobs recover`, is
recovered by node 0's supervisor itself: node 1 replaced as `up` replaces it, the job started
again as attempt 2 with the same env and secret (handed over from the supervisor's memory),
and it ends succeeded. Real processes and real Terraform only."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyinfra.workspace import Workspace
from tests.conftest import skyinfra_argv
from tests.support.local_jobs import cli, cluster_up, module_env, node_processes, wait_for_record
from tests.support.resume_proof import lose_node_1
from tests.support.workers import wait_for_line

pytestmark = pytest.mark.slow

NAME = "unattended"
SPEC = f"""\
name = "{NAME}"
nodes = 2

[local]
recover = true
"""
SECRET = "s3cret-unattended-value"
SECRET_SHA256 = hashlib.sha256(SECRET.encode()).hexdigest()
ENTRY = """\
import hashlib, os, time


def waits_in_attempt_1():
    attempt = int(os.environ["SKYINFRA_ATTEMPT"])
    print(f"attempt {attempt} on node {os.environ['SKYINFRA_NODE']}", flush=True)
    if attempt == 1:
        time.sleep(120)  # until node 1 goes and the job ends node 0
    return {
        "attempt": attempt,
        "greeting": os.environ.get("GREETING"),
        "secret_sha256": hashlib.sha256(os.environ["TOKEN"].encode()).hexdigest(),
    }
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return {**module_env(tmp_path_factory, tf_plugin_cache, NAME), "TOKEN": SECRET}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("unattended-project")
    (proj / "skyinfra.toml").write_text(SPEC)
    (proj / "entry.py").write_text(ENTRY)
    with cluster_up(proj, env, NAME):
        yield proj
    assert node_processes(proj / ".skyinfra" / "clusters" / NAME / "nodes") == []


def ws(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


def start_detached(project: Path, env: dict[str, str]) -> str:
    """`run -d` of a job with one restart, an env variable and a secret; its id once node 1's
    worker runs attempt 1."""
    started = cli(
        ["run", "-d", "--max-restarts", "1", "--env", "GREETING=hello", "--secret", "TOKEN",
         "entry.py:waits_in_attempt_1"],
        project,
        env,
    )  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    job = started.stdout.split("job ", 1)[1].split()[0]
    wait_for_line(ws(project) / "nodes" / "node-1" / "runs" / job / "output.log", "attempt 1 on")
    return job


def wait_until_succeeded(project: Path, env: dict[str, str], job: str) -> dict[str, Any]:
    """The job's record once it ended (through needs_nodes while node 0 replaces node 1); a
    head recovery that failed fails at once."""

    def ended(record: dict[str, Any]) -> bool:
        failed = (record.get("head_recovery") or {}).get("state") == "failed"
        assert not failed, record["head_recovery"]
        return record["state"] in ("failed", "succeeded", "lost", "cancelled")

    return wait_for_record(None, project, env, job, ended, "ended", deadline_s=240)


def assert_recovered_by_node_0(record: dict[str, Any], cause: str) -> None:
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    first, second = record["attempts"]
    assert first["cause"]["kind"] == cause and first["cause"]["node"] == 1, first
    assert first["restarted_by"] == (
        "node-0 (unattended recovery), after replacing the lost node(s)"
    ), first
    assert second["outcome"] == "succeeded" and second["recovery_s"] >= 0, second
    values = [n["result"]["workers"][0]["value"] for n in record["nodes"]]
    expected = {"attempt": 2, "greeting": "hello", "secret_sha256": SECRET_SHA256}
    assert values == [expected, expected], values


def test_a_drill_on_a_detached_job_is_recovered_by_node_0_with_nobody_attached(
    project: Path, env: dict[str, str]
) -> None:
    job = start_detached(project, env)
    node_1 = ws(project) / "nodes" / "node-1"
    # A file on the old node's disk: a replacement starts from an empty one (an inode number
    # is no identity, the file system reuses it at once).
    (node_1 / "old-node.marker").write_text("")
    drill = cli(["drill", "interrupt", "node-1", "--notice-seconds", "60", "--yes"], project, env)
    assert drill.returncode == 0, drill.stdout + drill.stderr

    record = wait_until_succeeded(project, env, job)
    assert_recovered_by_node_0(record, "interrupted")
    assert not (node_1 / "old-node.marker").exists()  # a new node 1
    # What node 0's recovery did, in its log on node 0 (no secret in it).
    log_file = ws(project) / "nodes" / "node-0" / "runs" / job / "recover.log"
    log = log_file.read_text()
    assert "node-1 interrupted: replacing it" in log, log
    assert f"job {job} started as attempt 2" in log, log
    assert SECRET not in log
    assert log_file.stat().st_mode & 0o77 == 0


def test_a_lost_node_is_replaced_by_node_0_once_the_workspace_is_free(
    project: Path, env: dict[str, str]
) -> None:
    """Node 1 lost while another command holds the workspace (an attached `run`, an `up`):
    node 0's recovery waits for it, and meanwhile `jobs` says who replaces the node."""
    job = start_detached(project, env)
    # Held as another skyinfra command holds it: the lock, and a holder file that names it.
    with Workspace(ws(project)).lock("up (the test)"):
        lose_node_1(ws(project), job)
        log = ws(project) / "nodes" / "node-0" / "runs" / job / "recover.log"
        wait_for_line(log, "waiting for it")
        holder = f"`skyinfra up (the test)` (pid {os.getpid()} on "
        assert holder in log.read_text(), log.read_text()
        listed = cli(["jobs"], project, env).stdout
        assert (
            f"job {job} lost a node and waits for it: node-0 is replacing it and starting the "
            "next attempt itself (unattended recovery" in listed
        ), listed
        shown = cli(["jobs", job], project, env).stdout
        assert "needs nodes: node-1 lost; node-0 is replacing it" in shown, shown
    record = wait_until_succeeded(project, env, job)
    assert_recovered_by_node_0(record, "lost")


def test_an_attached_run_recovers_its_job_itself_and_node_0_stands_down(
    project: Path, env: dict[str, str]
) -> None:
    """On the local target an attached `run` holds the workspace: it replaces the lost node
    itself, and node 0's command, waiting for the workspace, finds nothing left to do."""
    out_file = project / "attached.out"
    with out_file.open("w+") as out:
        proc = subprocess.Popen(
            [*skyinfra_argv(), "run", "--all-logs", "--max-restarts", "1", "--secret", "TOKEN",
             "--env", "GREETING=hello", "entry.py:waits_in_attempt_1"],
            cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            until = time.monotonic() + 120  # a bound on the wait, not an assertion on time
            while "attempt 1 on node 1" not in out_file.read_text():
                assert proc.poll() is None and time.monotonic() < until, out_file.read_text()
                time.sleep(0.2)
            job = max((ws(project) / "runs").iterdir(), key=lambda p: p.stat().st_mtime).name
            lose_node_1(ws(project), job)
            assert proc.wait(timeout=240) == 0, out_file.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    said = out_file.read_text()
    assert "node-1 lost: replacing it" in said, said
    record = json.loads(cli(["jobs", job, "--json"], project, env).stdout)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    assert record["attempts"][0]["restarted_by"] == (
        "the operator, after replacing the lost node(s)"
    )
    log = ws(project) / "nodes" / "node-0" / "runs" / job / "recover.log"
    wait_for_line(log, f"job {job} no longer waits for its nodes: nothing to do")
