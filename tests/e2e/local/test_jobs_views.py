"""Jobs seen from outside, end to end on one 2-node local cluster (shared by the module): the
last output's age and a stalled job in `jobs`, a function's result in `jobs JOB`, running jobs
in `status` and in `down`'s confirmation, `skyinfra ssh` on a local node, and `run --detach`
whose CLI gets SIGHUP or SIGKILL while it starts the job. Real processes only."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import skyinfra_argv
from tests.support.local_jobs import cli, job_record, module_env, node_processes, wait_until_ended
from tests.support.waits import wait_until

pytestmark = pytest.mark.slow

NAME = "views"

CODE = """\
import os, sys, time


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for step in range(1, steps + 1):
        print(f"step {step} on node {os.environ['SKYINFRA_NODE']}", flush=True)
        time.sleep(0.5)
    return {"node": int(os.environ["SKYINFRA_NODE"]), "steps": steps}


def quiet():
    # One line, then silence until the test opens the gate in the node's shared folder.
    print("waiting", flush=True)
    gate = os.path.join(os.environ["SKYINFRA_SHARED_DIR"], "gate-" + os.environ["SKYINFRA_RUN_ID"])
    while not os.path.exists(gate):
        time.sleep(0.1)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return module_env(tmp_path_factory, tf_plugin_cache, "views")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    """One 2-node local cluster; at the end `down --yes` while a job runs names it and ends
    it (nothing of the cluster is left)."""
    proj = tmp_path_factory.mktemp("views-project")
    (proj / "code.py").write_text(CODE)
    up = cli(["up", "--name", NAME, "--nodes", "2"], proj, env, timeout=600)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield proj
    finally:
        job = detach(proj, env, "code.py:quiet")
        down = cli(["down", "--yes", "--cluster", NAME], proj, env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert f"ending the running job(s) {job} with the cluster" in down.stdout, down.stdout
        assert cluster_processes(proj) == [], "processes left after down"


def cluster_processes(project: Path) -> list[str]:
    return node_processes(nodes_dir(project))


def nodes_dir(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME / "nodes"


def jobs_json(project: Path, env: dict[str, str], *args: str) -> object:
    res = cli(["jobs", "--cluster", NAME, "--json", *args], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def wait_for(project: Path, env: dict[str, str], job: str, done: str = "ended") -> dict[str, Any]:
    """The job's record once it has ended (``done="stalled"``: once it reads stalled with
    --stall-after 0.02, that is 1.2 s); a deadline only guards against a hang."""
    if done == "stalled":
        return wait_until(
            f"job {job} stalled (--stall-after 0.02)",
            lambda: job_record(NAME, project, env, job, "--stall-after", "0.02"),
            lambda rec: bool(rec["stalled"]),
            deadline_s=60,
        )
    return wait_until_ended(NAME, project, env, job)


def detach(project: Path, env: dict[str, str], *args: str) -> str:
    res = cli(["run", "--cluster", NAME, "--detach", *args], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.split("job ", 1)[1].split()[0]


def open_gate(project: Path, job: str) -> None:
    for i in (0, 1):
        (nodes_dir(project) / f"node-{i}" / "shared" / f"gate-{job}").write_text("")


def test_a_functions_result_and_the_last_outputs_age(project: Path, env: dict[str, str]) -> None:
    job = detach(project, env, "code.py:main", "--", "2")
    rec = wait_for(project, env, job)
    assert rec["state"] == "succeeded", rec
    values = [n["result"]["workers"][0]["value"] for n in rec["nodes"]]
    assert values == [{"node": 0, "steps": 2}, {"node": 1, "steps": 2}]
    assert rec["stalled"] is False and rec["last_output_age_s"] >= 0
    shown = cli(["jobs", "--cluster", NAME, job], project, env)
    assert 'node-1 worker 0: {"node": 1, "steps": 2}' in shown.stdout, shown.stdout
    assert "last output:" in shown.stdout
    table = cli(["jobs", "--cluster", NAME], project, env)
    assert "LAST OUTPUT" in table.stdout.splitlines()[0]
    assert " ago" in table.stdout
    # A script entry returns nothing: no result is looked for.
    listed = jobs_json(project, env)
    assert isinstance(listed, list) and all("result" not in n for n in listed[0]["nodes"])


def test_a_silent_job_reads_stalled_status_lists_it_and_down_names_it(
    project: Path, env: dict[str, str]
) -> None:
    job = detach(project, env, "code.py:quiet")
    try:
        rec = wait_for(project, env, job, done="stalled")
        assert rec["stalled"] is True and rec["state"] == "running", rec
        # The default (30 minutes) does not call a job silent for seconds stalled.
        rec = jobs_json(project, env, job)
        assert isinstance(rec, dict) and rec["stalled"] is False
        table = cli(["jobs", "--cluster", NAME, "--stall-after", "0.02"], project, env)
        assert "running (STALLED)" in table.stdout, table.stdout
        bad = cli(["jobs", "--cluster", NAME, "--stall-after", "0"], project, env)
        assert bad.returncode == 2 and "--stall-after" in bad.stderr

        status = cli(["status", "--cluster", NAME], project, env)
        assert status.returncode == 0, status.stderr
        assert "running jobs: 1" in status.stdout and job in status.stdout, status.stdout
        info = json.loads(cli(["status", "--cluster", NAME, "--json"], project, env).stdout)
        assert [j["id"] for j in info["jobs"]] == [job]

        # Off a terminal without --yes: refused, the job named, nothing changed.
        down = cli(["down", "--cluster", NAME], project, env)
        assert down.returncode == 2, down.stdout + down.stderr
        assert f"end its running job(s) {job}" in down.stderr
        assert f"running job {job} (code.py:quiet" in down.stdout
        rec = jobs_json(project, env, job)
        assert isinstance(rec, dict) and rec["state"] == "running"
    finally:
        open_gate(project, job)
    assert wait_for(project, env, job)["state"] == "succeeded"
    status = cli(["status", "--cluster", NAME], project, env)
    assert "running jobs: 0" in status.stdout, status.stdout


def test_ssh_runs_a_command_on_a_local_node(project: Path, env: dict[str, str]) -> None:
    res = cli(
        ["ssh", "--cluster", NAME, "1", "--", "echo node=$SKYINFRA_NODE; pwd; command -v python;",
         "exit", "3"],
        project,
        env,
    )  # fmt: skip
    node1 = nodes_dir(project) / "node-1"
    assert res.returncode == 3, res.stdout + res.stderr
    assert res.stdout.splitlines() == [
        "node=1",
        str(node1),
        str(node1 / "venv" / "bin" / "python"),
    ]
    # No command: the user's shell in the node's folder (here reading its commands from stdin).
    shell = subprocess.run(
        [*skyinfra_argv(), "ssh", "--cluster", NAME, "node-1"],
        cwd=project,
        env=env,
        input="echo in=$SKYINFRA_NODE $PWD\nexit 4\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 4 and shell.stdout == f"in=1 {node1}\n", shell.stdout + shell.stderr
    first = cli(["ssh", "--cluster", NAME, "--", "echo", "$SKYINFRA_NODE"], project, env)
    assert first.returncode == 0 and first.stdout == "0\n", first.stdout + first.stderr
    named = cli(["ssh", "--cluster", NAME, f"{NAME}-node-1", "--", "true"], project, env)
    assert named.returncode == 0, named.stderr
    out = cli(["ssh", "--cluster", NAME, "2", "--", "true"], project, env)
    assert out.returncode == 2 and "NODE 2: the cluster has nodes 0 to 1" in out.stderr
    config = cli(["ssh", "--cluster", NAME, "--config"], project, env)
    assert config.returncode == 2 and "local target" in config.stderr


def new_job(project: Path, before: set[str]) -> str:
    """The id of the job whose record appears on the head (a deadline guards a hang)."""
    jobs = nodes_dir(project) / "node-0" / "jobs"
    end = time.monotonic() + 120
    while time.monotonic() < end:
        found = {p.stem for p in jobs.glob("*.json")} - before if jobs.is_dir() else set()
        if found:
            return found.pop()
        time.sleep(0.01)
    raise AssertionError("no job record appeared")


def known_jobs(project: Path) -> set[str]:
    return {p.stem for p in (nodes_dir(project) / "node-0" / "jobs").glob("*.json")}


def start_detached(project: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*skyinfra_argv(), "run", "--cluster", NAME, "--detach", "code.py:main", "--", "3"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # as a terminal's: the hang-up reaches skyinfra only
    )


def check_finished(project: Path, env: dict[str, str], job: str) -> None:
    rec = wait_for(project, env, job)
    assert rec["state"] == "succeeded" and [n["exit_code"] for n in rec["nodes"]] == [0, 0], rec
    logs = cli(["logs", "--cluster", NAME, job, "--all"], project, env)
    for i in (0, 1):
        for step in (1, 2, 3):
            assert f"[node-{i}] step {step} on node {i}" in logs.stdout, logs.stdout
    table = cli(["jobs", "--cluster", NAME], project, env)
    assert any(job in line and "succeeded" in line and "0:0 1:0" in line
               for line in table.stdout.splitlines()), table.stdout  # fmt: skip


def test_run_detach_survives_sighup_while_it_starts_the_job(
    project: Path, env: dict[str, str]
) -> None:
    before = known_jobs(project)
    proc = start_detached(project, env)
    job = new_job(project, before)
    # The head's agent is up; the CLI is still starting the peer or waiting for it. Stopped,
    # hung up on, continued: it starts every node first, then leaves saying how to follow.
    proc.send_signal(signal.SIGSTOP)
    proc.send_signal(signal.SIGHUP)
    proc.send_signal(signal.SIGCONT)
    assert proc.stdout is not None
    out = proc.stdout.read()
    code = proc.wait(60)
    assert code in (130, 0), out  # 0: it had returned before the hang-up
    if code == 130:
        assert "the job goes on" in out and f"skyinfra logs --cluster {NAME} {job}" in out, out
    check_finished(project, env, job)


def test_run_detach_survives_sigkill_once_the_nodes_started(
    project: Path, env: dict[str, str]
) -> None:
    before = known_jobs(project)
    proc = start_detached(project, env)
    job = new_job(project, before)
    peer_pid = nodes_dir(project) / "node-1" / "pids" / f"{job}.pid"
    end = time.monotonic() + 60
    while not peer_pid.exists() and time.monotonic() < end and proc.poll() is None:
        time.sleep(0.01)
    proc.kill()
    proc.wait(30)
    check_finished(project, env, job)
