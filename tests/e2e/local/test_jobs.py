"""Jobs that outlive the terminal, end to end on one 2-node local cluster (shared by the
module): `run --detach`, SIGHUP and SIGKILL to `skyinfra`, `jobs`, `logs`, `cancel`,
fail-fast and the timeout while nobody follows, and the exit-2 cases. Real processes only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, skyinfra_argv
from tests.support.local_jobs import cli, module_env, node_processes, wait_until_ended
from tests.support.waits import wait_until

pytestmark = pytest.mark.slow

NAME = "jobs"

STEPS = """\
import os, sys, time


def main():
    steps = sys.argv[1] if len(sys.argv) > 1 else "4"  # a function's ARGS are its sys.argv
    out = os.path.join(os.environ["SKYINFRA_SHARED_DIR"], "steps-" + os.environ["SKYINFRA_RUN_ID"])
    for step in range(1, int(steps) + 1):
        print(f"step {step} on node {os.environ['SKYINFRA_NODE']}", flush=True)
        with open(out, "a") as f:
            f.write(f"{step}\\n")
        time.sleep(1)
    return int(steps)


def fail_on_node1():
    if os.environ["SKYINFRA_NODE"] == "1":
        time.sleep(1)
        raise RuntimeError("node 1 fails on purpose")
    while True:
        time.sleep(1)


def forever():
    while True:
        print("still here", flush=True)
        time.sleep(1)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return module_env(tmp_path_factory, tf_plugin_cache, "jobs")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    """One 2-node local cluster for the whole module, destroyed at the end with nothing left."""
    proj = tmp_path_factory.mktemp("jobs-project")
    (proj / "steps.py").write_text(STEPS)
    up = cli(["up", "--name", NAME, "--nodes", "2"], proj, env, timeout=600)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield proj
    finally:
        down = cli(["down", "--yes", "--cluster", NAME], proj, env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert job_processes(proj) == [], "processes left after down"


def nodes_dir(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME / "nodes"


def job_processes(project: Path, job: str | None = None) -> list[str]:
    return node_processes(nodes_dir(project), job)


def jobs_json(project: Path, env: dict[str, str], job: str | None = None) -> object:
    res = cli(["jobs", "--cluster", NAME, "--json", *([job] if job else [])], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def wait_state(project: Path, env: dict[str, str], job: str) -> dict[str, Any]:
    return wait_until_ended(NAME, project, env, job)


def steps_done(project: Path, job: str) -> dict[int, list[str]]:
    out = {}
    for i in (0, 1):
        f = nodes_dir(project) / f"node-{i}" / "shared" / f"steps-{job}"
        out[i] = f.read_text().split() if f.is_file() else []
    return out


def detach(project: Path, env: dict[str, str], *args: str) -> str:
    res = cli(["run", "--cluster", NAME, "--detach", *args], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.split("job ", 1)[1].split()[0]
    assert f"skyinfra logs --cluster {NAME} {job} --follow" in res.stdout
    return job


def test_a_detached_job_finishes_after_the_cli_is_killed(
    project: Path, env: dict[str, str]
) -> None:
    proc = subprocess.Popen(
        [*skyinfra_argv(), "run", "--cluster", NAME, "--detach", "steps.py:main", "--", "4"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    assert proc.wait(120) == 0, out
    job = out.split("job ", 1)[1].split()[0]
    # Every node had started when `run --detach` returned.
    rec = jobs_json(project, env, job)
    assert isinstance(rec, dict) and rec["state"] == "running", rec
    rec = wait_state(project, env, job)
    assert rec["state"] == "succeeded", rec
    assert [n["exit_code"] for n in rec["nodes"]] == [0, 0]
    assert rec["entry"] == "steps.py:main" and rec["args"] == ["4"]
    assert all(n["last_output_at"] for n in rec["nodes"])
    record = nodes_dir(project) / "node-0" / "jobs" / f"{job}.json"
    assert record.stat().st_mode & 0o777 == 0o600
    assert (nodes_dir(project) / "node-1" / "runs" / job / "output.log").stat().st_mode & 0o077 == 0
    assert steps_done(project, job) == {0: ["1", "2", "3", "4"], 1: ["1", "2", "3", "4"]}
    listed = jobs_json(project, env)
    assert isinstance(listed, list) and listed[0]["id"] == job
    table = cli(["jobs", "--cluster", NAME], project, env)
    assert job in table.stdout and "succeeded" in table.stdout and "0:0 1:0" in table.stdout
    logs = cli(["logs", "--cluster", NAME, job, "--all"], project, env)
    assert logs.returncode == 0, logs.stderr
    for i in (0, 1):
        assert f"[node-{i}] step 4 on node {i}" in logs.stdout
    tail = cli(["logs", "--cluster", NAME, job, "--node", "1", "--tail", "1"], project, env)
    assert tail.stdout.strip() == "[node-1] step 4 on node 1"
    follow = cli(["logs", "--cluster", NAME, job, "--follow"], project, env)
    assert follow.returncode == 0 and "[node-0] step 4 on node 0" in follow.stdout
    assert job_processes(project, job) == []


def attached_run(
    project: Path, env: dict[str, str], args: list[str], *, until: str, own_session: bool = False
) -> subprocess.Popen[str]:
    """`skyinfra run ARGS` following its job, read until a line holding ``until`` arrives."""
    proc = subprocess.Popen(
        [*skyinfra_argv(), "run", "--cluster", NAME, *args],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=own_session,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if until in line:
            break
    return proc


def test_sigkill_of_a_following_cli_leaves_the_job_running(
    project: Path, env: dict[str, str]
) -> None:
    proc = attached_run(project, env, ["steps.py:main", "--", "5"], until="step 1 on node 0")
    proc.kill()
    proc.wait(10)
    job = newest_job(project, env)
    follow = cli(["logs", "--cluster", NAME, job, "--follow"], project, env)
    assert follow.returncode == 0, follow.stdout + follow.stderr
    assert "[node-0] step 5 on node 0" in follow.stdout
    assert steps_done(project, job)[1] == ["1", "2", "3", "4", "5"]


def newest_job(project: Path, env: dict[str, str]) -> str:
    listed = jobs_json(project, env)
    assert isinstance(listed, list) and listed
    return str(listed[0]["id"])


@pytest.mark.parametrize(
    ("sig", "said", "code"),
    [(signal.SIGHUP, "hang-up", 130), (signal.SIGTERM, "SIGTERM", 143)],
    ids=["SIGHUP", "SIGTERM"],
)
def test_an_attached_run_survives_sighup_and_sigterm(
    project: Path, env: dict[str, str], sig: signal.Signals, said: str, code: int
) -> None:
    """A closed terminal (SIGHUP) and what CI runners, `timeout` and `kill` send (SIGTERM)
    stop following and leave the job running, saying how to come back to it."""
    # In a session of its own, as a terminal's: the signal reaches skyinfra only.
    proc = attached_run(
        project, env, ["steps.py:main", "--", "5"], until="step 2 on node 0", own_session=True
    )
    assert proc.stdout is not None
    proc.send_signal(sig)
    rest = proc.stdout.read()
    assert proc.wait(30) == code, rest
    assert f"[skyinfra] {said}: stopped following; the job goes on on the nodes" in rest, rest
    assert "skyinfra logs --cluster" in rest and "skyinfra cancel --cluster" in rest, rest
    job = newest_job(project, env)
    rec = wait_state(project, env, job)
    assert rec["state"] == "succeeded", rec
    assert steps_done(project, job) == {i: ["1", "2", "3", "4", "5"] for i in (0, 1)}
    assert job_processes(project, job) == []


def test_ctrl_c_on_an_attached_run_cancels_the_job(project: Path, env: dict[str, str]) -> None:
    proc = attached_run(project, env, ["steps.py:forever"], until="still here")
    assert proc.stdout is not None
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    assert proc.wait(30) == 130, rest
    job = newest_job(project, env)
    rec = jobs_json(project, env, job)
    assert isinstance(rec, dict) and rec["state"] == "cancelled", rec
    assert job_processes(project, job) == []


def test_a_killed_supervisor_takes_its_launcher_and_the_peers_with_it(
    project: Path, env: dict[str, str]
) -> None:
    job = detach(project, env, "steps.py:forever")
    pid = int((nodes_dir(project) / "node-0" / "pids" / f"{job}.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    wait_until(
        f"no process of job {job} on any node",
        lambda: job_processes(project, job),
        lambda found: not found,
        deadline_s=60,
    )
    rec = jobs_json(project, env, job)
    assert isinstance(rec, dict) and rec["state"] == "lost", rec


def test_cancel_leaves_nothing_of_the_job_on_any_node(project: Path, env: dict[str, str]) -> None:
    job = detach(project, env, "steps.py:forever")
    assert job_processes(project, job), "the job should be running"
    no = cli(["cancel", "--cluster", NAME, job], project, env)
    assert no.returncode == 2 and "--yes" in no.stderr
    res = cli(["cancel", "--cluster", NAME, job, "--yes"], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cancelled" in res.stdout
    assert job_processes(project, job) == []
    rec = jobs_json(project, env, job)
    assert isinstance(rec, dict) and rec["state"] == "cancelled"
    again = cli(["cancel", "--cluster", NAME, job, "--yes"], project, env)
    assert again.returncode == 2 and f"job {job} is not queued or running" in again.stderr
    follow = cli(["logs", "--cluster", NAME, job, "--follow"], project, env)
    assert follow.returncode == 130


def test_fail_fast_while_nobody_follows(project: Path, env: dict[str, str]) -> None:
    job = detach(project, env, "steps.py:fail_on_node1")
    rec = wait_state(project, env, job)
    assert rec["state"] == "failed" and rec["first_failure"] == 1, rec
    n0, n1 = rec["nodes"]
    assert n1["exit_code"] == 1 and n1["meaning"] == "user code raised"
    # node 0's entry would run forever: only skyinfra ending it, for node 1's failure, ends it
    # (its record says why; no clock is read, so a slow machine cannot fail this)
    assert n0["ended_reason"] == "after node-1 failed", rec
    assert n0["ended_at"] >= n1["ended_at"], rec
    follow = cli(["logs", "--cluster", NAME, job, "--node", "1", "--follow"], project, env)
    assert follow.returncode == 4 and "node 1 fails on purpose" in follow.stdout
    assert job_processes(project, job) == []


def test_timeout_while_nobody_follows(project: Path, env: dict[str, str]) -> None:
    job = detach(project, env, "--timeout", "3", "steps.py:forever")
    rec = wait_state(project, env, job)
    assert rec["state"] == "timed_out" and rec["timed_out"] == [0, 1], rec
    assert all(n["ended_reason"] == "at --timeout 3 s" for n in rec["nodes"])
    assert job_processes(project, job) == []


def test_unknown_job_node_out_of_range_and_a_cluster_that_is_down(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    def records() -> object:
        """The records as kept (without the reading's time and the ages counted from it)."""
        listed = jobs_json(project, env)
        assert isinstance(listed, list)
        volatile = ("checked_at", "last_output_age_s")
        return [{k: v for k, v in j.items() if k not in volatile} for j in listed]

    before = records()
    for args in (["jobs", "nope"], ["logs", "nope"], ["cancel", "nope", "--yes"]):
        res = cli([*args[:1], "--cluster", NAME, *args[1:]], project, env)
        assert res.returncode == 2 and "'nope'" in res.stderr, res.stderr
    job = str(before[0]["id"]) if isinstance(before, list) and before else "x"
    res = cli(["logs", "--cluster", NAME, job, "--node", "7"], project, env)
    assert res.returncode == 2 and "--node 7" in res.stderr, res.stderr
    assert records() == before
    # A cluster that is down: its workspace has no topology.
    ws = tmp_path / ".skyinfra" / "clusters" / "gone"
    ws.mkdir(parents=True)
    res = cli(["jobs", "--cluster", "gone"], tmp_path, env)
    assert res.returncode == 2 and "gone" in res.stderr, res.stderr


assert (REPO_ROOT / "runtime" / "src" / "skyinfra_runtime" / "jobs" / "supervisor.py").is_file()


def test_a_job_is_named_by_last_or_a_part_of_its_id_only_it_has(
    project: Path, env: dict[str, str]
) -> None:
    """`jobs`, `logs` and `cancel` take `last` (the newest job), or a part of an id that only
    one job's id starts or ends with; a part several ids share lists them (exit 2)."""
    first = detach(project, env, "steps.py:main", "--", "1")
    assert wait_state(project, env, first)["state"] == "succeeded"
    job = detach(project, env, "steps.py:main", "--", "1")
    assert wait_state(project, env, job)["state"] == "succeeded"
    for given in ("last", job[-6:], job[: len(job) - 2]):
        rec = jobs_json(project, env, given)
        assert isinstance(rec, dict) and rec["id"] == job, (given, rec)
    logs = cli(["logs", "--cluster", NAME, job[-6:]], project, env)
    assert logs.returncode == 0 and "[node-0] step 1 on node 0" in logs.stdout, logs.stderr
    done = cli(["cancel", "--cluster", NAME, "--yes", "last"], project, env)
    said = f"job {job} is not queued or running: it ended (succeeded)"
    assert done.returncode == 2 and said in done.stderr, done.stdout + done.stderr
    same = 0
    while first[same] == job[same]:
        same += 1
    shared = job[:same]  # ids begin with the date and time: the two share at least the date
    both = cli(["jobs", "--cluster", NAME, shared], project, env)
    assert both.returncode == 2, both.stdout + both.stderr
    assert f"job '{shared}' matches" in both.stderr and first in both.stderr, both.stderr
    assert job in both.stderr and "give more of the id" in both.stderr, both.stderr
    none = cli(["logs", "--cluster", NAME, "no-such-job"], project, env)
    assert none.returncode == 2 and "no job 'no-such-job' on this cluster" in none.stderr
