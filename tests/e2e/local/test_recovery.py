"""Restarts on the same nodes (`run --max-restarts N`, `--retry-on error`), end to end on one
2-node local cluster (shared by the module): a worker SIGKILLed in attempt 1 restarts the job
by itself as attempt 2 with the same env and secrets, attached or detached; an exception is
not retried unless `--retry-on error`, and then fails with the last attempt's code; bad input
starts nothing. Real processes only."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from skyinfra_runtime.jobs.records import DEAD_PEER_GRACE_S, END_GRACE_S

import skyinfra
from tests.conftest import skyinfra_argv
from tests.support import local_jobs
from tests.support.local_jobs import cli, cluster_up, module_env, node_processes
from tests.support.resume_proof import kill_node_processes, lose_node, lose_node_1
from tests.support.waits import wait_until
from tests.support.workers import wait_for_line

pytestmark = pytest.mark.slow

NAME = "recovery"
SPEC = f"""\
name = "{NAME}"
nodes = 2
"""
SECRET = "s3cret-recovery-value"
ENTRY = """\
import hashlib, os, signal, time


def _where():
    attempt = int(os.environ["SKYINFRA_ATTEMPT"])
    node = os.environ["SKYINFRA_NODE"]
    print(f"attempt {attempt} on node {node}", flush=True)
    return attempt, node


def killed_once():
    attempt, node = _where()
    if attempt == 1 and node == "1":
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does
    if attempt == 1:
        time.sleep(120)  # node 0 waits in attempt 1 until the job ends it
    return {
        "attempt": attempt,
        "greeting": os.environ.get("GREETING"),
        "secret_sha256": hashlib.sha256(os.environ.get("TOKEN", "").encode()).hexdigest(),
    }


def waits_in_attempt_1():
    attempt, node = _where()
    if attempt == 1:
        time.sleep(120)  # until node 1 is lost and the job ends node 0
    secret_sha256 = hashlib.sha256(os.environ["TOKEN"].encode()).hexdigest()
    return {"attempt": attempt, "secret_sha256": secret_sha256}


def raises():
    attempt, node = _where()
    if node == "1":
        raise RuntimeError(f"attempt {attempt} fails on purpose")
    time.sleep(120)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return {**module_env(tmp_path_factory, tf_plugin_cache, "recovery"), "TOKEN": SECRET}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("recovery-project")
    (proj / "skyinfra.toml").write_text(SPEC)
    (proj / "entry.py").write_text(ENTRY)
    with cluster_up(proj, env, NAME):
        yield proj
    assert node_processes(proj / ".skyinfra" / "clusters" / NAME / "nodes") == []


def ws(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


def newest_summary(project: Path) -> dict[str, object]:
    run_dir = max((ws(project) / "runs").iterdir())
    return dict(json.loads((run_dir / "summary.json").read_text()))


# The job's env (GREETING) and a secret (TOKEN: its sha256 comes back, never the value).
JOB_ENV = ["--env", "GREETING=hello", "--secret", "TOKEN"]
SECRET_SHA256 = hashlib.sha256(SECRET.encode()).hexdigest()


def start_detached(project: Path, env: dict[str, str], *argv: str) -> str:
    """`run -d ARGV`: the job's id."""
    started = cli(["run", "-d", *argv], project, env)
    assert started.returncode == 0, started.stdout + started.stderr
    return started.stdout.split("job ", 1)[1].split()[0]


def wait_until_ended(project: Path, env: dict[str, str], job: str) -> dict[str, Any]:
    """The job's record (`jobs JOB --json`) once it is final or waits for a node."""
    return local_jobs.wait_until_ended(None, project, env, job)


def assert_attempt_2_on_both_nodes(record: dict[str, Any]) -> None:
    """Every node's worker of waits_in_attempt_1 returned from attempt 2, with the secret."""
    values = [n["result"]["workers"][0]["value"] for n in record["nodes"]]
    assert values == [{"attempt": 2, "secret_sha256": SECRET_SHA256}] * 2


def test_a_worker_killed_by_a_signal_restarts_the_job_on_the_same_nodes(
    project: Path, env: dict[str, str]
) -> None:
    run = cli(["run", "--max-restarts", "1", *JOB_ENV, "entry.py:killed_once"], project, env)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    # On the terminal: the restart as the head's supervisor said it, and the attempts.
    assert "attempt 1 ended: node-1 exit 137 (a worker was killed by signal SIGKILL)" in out, out
    assert "restarting the job as attempt 2 on the same nodes" in out
    assert "attempt 2 started on every node" in out
    assert "attempt 1: failed (node-1 exit 137" in out and "attempt 2: succeeded" in out
    summary = newest_summary(project)
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    first, second = attempts
    assert first["cause"] == {
        "node": 1,
        "exit_code": 137,
        "meaning": "a worker was killed by signal SIGKILL",
        "kind": "signal",
    }
    assert first["outcome"] == "failed" and first["lost_s"] >= 0
    # Node 0 was blocked on a dead peer: ended at once, not after the clean-stop grace.
    assert first["end_grace_s"] == DEAD_PEER_GRACE_S
    assert second["outcome"] == "succeeded" and second["cause"] is None
    assert second["recovery_s"] >= 0 and second["started_at"] >= first["failed_at"]
    assert summary["max_restarts"] == 1 and summary["exit_code"] == 0
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert values == [{"attempt": 2, "greeting": "hello", "secret_sha256": SECRET_SHA256}] * 2
    # The secret reached attempt 2 from the agents' memory: no file holds it.
    for path in ws(project).rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert SECRET.encode() not in path.read_bytes(), path


def test_without_max_restarts_a_killed_worker_ends_the_job_as_before(
    project: Path, env: dict[str, str]
) -> None:
    run = cli(["run", *JOB_ENV, "entry.py:killed_once"], project, env)
    assert run.returncode == 4, run.stdout + run.stderr
    assert "restarting" not in run.stdout
    attempts = newest_summary(project)["attempts"]
    assert isinstance(attempts, list) and len(attempts) == 1
    assert attempts[0]["not_restarted"] == "no restart left (--max-restarts 0)"


def test_an_exception_is_retried_only_with_retry_on_error(
    project: Path, env: dict[str, str]
) -> None:
    run = cli(["run", "--max-restarts", "2", "entry.py:raises"], project, env)
    assert run.returncode == 4, run.stdout + run.stderr
    summary = newest_summary(project)
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and len(attempts) == 1
    assert attempts[0]["cause"]["kind"] == "error" and attempts[0]["cause"]["exit_code"] == 1
    # An exception leaves the others able to stop cleanly: they get the whole grace.
    assert attempts[0]["end_grace_s"] == END_GRACE_S
    assert "without --retry-on error" in attempts[0]["not_restarted"]

    run = cli(
        ["run", "--max-restarts", "2", "--retry-on", "error", "entry.py:raises"], project, env
    )
    assert run.returncode == 4, run.stdout + run.stderr
    assert "attempt 3 fails on purpose" in run.stdout + run.stderr
    summary = newest_summary(project)
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2, 3]
    assert [a["cause"]["exit_code"] for a in attempts] == [1, 1, 1]
    assert attempts[-1]["not_restarted"] == "no restart left (--max-restarts 2)"
    # The job fails with the last attempt's exit code, on the node that failed.
    assert summary["first_failure"] == 1
    nodes = summary["nodes"]
    assert isinstance(nodes, list) and nodes[1]["exit_code"] == 1


def test_a_detached_job_restarts_with_nobody_attached(project: Path, env: dict[str, str]) -> None:
    # The spec's max_restarts, with no flag (./skyinfra.toml names the cluster: no `up` needed).
    spec = project / "skyinfra.toml"
    spec.write_text(SPEC + "max_restarts = 1\n")
    try:
        started = cli(["run", "-d", *JOB_ENV, "entry.py:killed_once"], project, env)
    finally:
        spec.write_text(SPEC)
    assert started.returncode == 0, started.stdout + started.stderr
    job = started.stdout.split("job ", 1)[1].split()[0]
    record = wait_until_ended(project, env, job)
    assert record["state"] == "succeeded", record
    assert record["attempt"] == 2
    attempts = record["attempts"]
    assert isinstance(attempts, list) and attempts[0]["cause"]["exit_code"] == 137
    text = cli(["jobs", job], project, env).stdout
    assert "succeeded (attempt 2)" in text, text
    assert "restarts:   up to 1 on the same nodes" in text
    assert "attempt 1: failed (node-1 exit 137: a worker was killed by signal SIGKILL)" in text
    assert "attempt 2: succeeded" in text and "after the failure (recovery)" in text


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--max-restarts", "-1"], "'--max-restarts': -1 is not in the range 0<=x<=1000"),
        (["--retry-on", "oom"], "'--retry-on': 'oom' is not one of 'signal', 'error'"),
    ],
)
def test_bad_restart_flags_start_nothing(
    project: Path, env: dict[str, str], flags: list[str], named: str
) -> None:
    runs = sorted((ws(project) / "runs").iterdir()) if (ws(project) / "runs").is_dir() else []
    bad = cli(["run", *flags, "entry.py:raises"], project, env)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert named in bad.stderr, bad.stderr
    now = sorted((ws(project) / "runs").iterdir()) if (ws(project) / "runs").is_dir() else []
    assert now == runs


def detached_job_that_lost_node_1(
    project: Path, env: dict[str, str], flags: tuple[str, ...] = ()
) -> str:
    """A detached job (one restart allowed, a secret) whose node 1 is lost in attempt 1: its
    id, once the job waits as needs_nodes for node 1."""
    job = start_detached(
        project, env, "--max-restarts", "1", "--secret", "TOKEN", *flags,
        "entry.py:waits_in_attempt_1",
    )  # fmt: skip
    wait_for_line(ws(project) / "nodes" / "node-1" / "runs" / job / "output.log", "attempt 1 on")
    lose_node_1(ws(project), job)
    record = wait_until_ended(project, env, job)
    assert record["state"] == "needs_nodes" and record["needs_nodes"] == [1], record
    return job


def test_a_detached_job_that_lost_a_node_waits_and_jobs_recover_replaces_it(
    project: Path, env: dict[str, str]
) -> None:
    job = detached_job_that_lost_node_1(project, env)
    listed = cli(["jobs"], project, env).stdout
    assert f"run `skyinfra jobs recover {job}`" in listed, listed
    shown = cli(["jobs", job], project, env).stdout
    assert (
        f"needs nodes: node-1 lost; from the project's folder run: skyinfra jobs recover {job}"
        in shown
    )

    # A secret's value comes from the environment again: without it, exit 2, nothing started.
    no_secret = cli(
        ["jobs", "recover", job], project, {k: v for k, v in env.items() if k != "TOKEN"}
    )
    assert no_secret.returncode == 2, no_secret.stdout + no_secret.stderr
    assert "TOKEN" in no_secret.stderr
    assert not (ws(project) / "nodes" / "node-1").exists()

    recovered = cli(["jobs", "recover", job], project, env)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert "node-1 lost: replacing it" in recovered.stdout
    record = json.loads(cli(["jobs", job, "--json"], project, env).stdout)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    attempts = record["attempts"]
    assert isinstance(attempts, list) and attempts[0]["cause"]["kind"] == "lost"
    assert attempts[0]["restarted_by"] == "the operator, after replacing the lost node(s)"
    assert attempts[1]["outcome"] == "succeeded" and attempts[1]["recovery_s"] >= 0
    assert_attempt_2_on_both_nodes(record)
    again = cli(["jobs", "recover", job], project, env)
    assert again.returncode == 2 and "only a job that lost a node" in again.stderr


def test_the_python_api_recovers_a_job_that_lost_a_node_as_jobs_recover_does(
    project: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cluster.recover goes through the same recovery as `jobs recover` (run/recovery.py):
    node 1 replaced, the job's next attempt started from the project's folder and followed
    until it ends, with the secret's value from this environment."""
    job = detached_job_that_lost_node_1(project, env)
    for key in [k for k in os.environ if k.startswith("SKYINFRA_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(project)
    said: list[str] = []

    assert skyinfra.Cluster(name=NAME, echo=said.append).recover(job) == "succeeded"
    assert any("node-1 lost: replacing it" in line for line in said), said
    record = json.loads(cli(["jobs", job, "--json"], project, env).stdout)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    assert record["attempts"][0]["restarted_by"] == (
        "the operator, after replacing the lost node(s)"
    )
    assert_attempt_2_on_both_nodes(record)
    with pytest.raises(skyinfra.UsageError, match="only a job that lost a node"):
        skyinfra.Cluster(name=NAME, echo=said.append).recover(job)


def test_a_drill_on_a_detached_job_waits_for_jobs_recover_which_replaces_the_node(
    project: Path, env: dict[str, str]
) -> None:
    """A Spot notice (`drill interrupt`, the node's IMDS stand-in) on node 1 of a detached
    job: the head ends the attempt (cause interrupted), the job waits as needs_nodes with
    nobody attached, `jobs` shows the notice and what to run; `jobs recover` replaces the
    interrupted node and the job ends succeeded as attempt 2."""
    job = start_detached(
        project, env, "--max-restarts", "1", "--secret", "TOKEN", "entry.py:waits_in_attempt_1"
    )
    node_1 = ws(project) / "nodes" / "node-1"
    wait_for_line(node_1 / "runs" / job / "output.log", "attempt 1 on")
    # A file on the old node's disk: a replacement starts from an empty one (an inode number
    # is no identity, the file system reuses it at once).
    (node_1 / "old-node.marker").write_text("")
    drill = cli(["drill", "interrupt", "node-1", "--notice-seconds", "60", "--yes"], project, env)
    assert drill.returncode == 0, drill.stdout + drill.stderr
    record = wait_until_ended(project, env, job)
    assert record["state"] == "needs_nodes" and record["needs_nodes"] == [1], record
    listed = cli(["jobs"], project, env).stdout
    assert f"job {job}: node-1 interrupted at" in listed, listed
    assert f"run `skyinfra jobs recover {job}`" in listed, listed

    recovered = cli(["jobs", "recover", job], project, env)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert "node-1 interrupted: replacing it" in recovered.stdout, recovered.stdout
    record = json.loads(cli(["jobs", job, "--json"], project, env).stdout)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    attempts = record["attempts"]
    assert attempts[0]["cause"]["kind"] == "interrupted" and attempts[0]["cause"]["node"] == 1
    assert attempts[0]["interruptions"][0]["action"] == "terminate"
    assert_attempt_2_on_both_nodes(record)
    assert not (node_1 / "old-node.marker").exists()  # a new node 1, with a stand-in of its own
    assert (node_1 / "notice.json").is_file()


def test_cancel_of_a_job_that_waits_for_its_lost_node_ends_it(
    project: Path, env: dict[str, str]
) -> None:
    job = detached_job_that_lost_node_1(project, env, ("--timeout", "3600"))
    # The job's --timeout counts from its first start, across its attempts and the wait for
    # its node: one that ran out meanwhile is not started again (its clock moved back here).
    head_record = ws(project) / "nodes" / "node-0" / "jobs" / f"{job}.json"
    record = json.loads(head_record.read_text())
    record["created_at"] -= 3600
    head_record.write_text(json.dumps(record))
    late = cli(["jobs", "recover", job], project, env)
    assert late.returncode == 2, late.stdout + late.stderr
    assert f"job {job} ran out of its --timeout (3600 s from its start at " in late.stderr
    assert f"`skyinfra run --checkpoints {job} --timeout S ...`" in late.stderr
    assert not (ws(project) / "nodes" / "node-1").exists()  # nothing replaced
    cancelled = cli(["cancel", job, "--yes"], project, env)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert f"job {job}: cancelled" in cancelled.stdout, cancelled.stdout
    refused = cli(["jobs", "recover", job], project, env)
    assert refused.returncode == 2 and "is cancelled" in refused.stderr, refused.stderr
    # `up` puts node 1 back for the module's other tests.
    assert cli(["up"], project, env).returncode == 0


def run_dirs(project: Path) -> set[Path]:
    runs = ws(project) / "runs"
    return set(runs.iterdir()) if runs.is_dir() else set()


def attached_run_hurt_in_attempt_1(
    project: Path,
    env: dict[str, str],
    flags: list[str],
    out_name: str,
    hurt: Callable[[str], None],
    timeout_s: float,
) -> tuple[int, str, str]:
    """`run FLAGS --env/--secret entry.py:waits_in_attempt_1`, attached; once node 0 is in
    attempt 1, ``hurt(job)``. The run's exit code, its output and the job's id."""
    before = run_dirs(project)
    with (project / out_name).open("w+") as out:
        proc = subprocess.Popen(
            [*skyinfra_argv(), "run", *flags, *JOB_ENV, "entry.py:waits_in_attempt_1"],
            cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            until = time.monotonic() + 120  # a bound on the wait, not an assertion on time
            while not run_dirs(project) - before:
                assert proc.poll() is None and time.monotonic() < until
                time.sleep(0.1)
            job = max(run_dirs(project) - before).name
            node_0 = ws(project) / "nodes" / "node-0"
            wait_for_line(node_0 / "runs" / job / "output.log", "attempt 1 on")
            hurt(job)
            code = proc.wait(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return code, (project / out_name).read_text(), job


def test_an_attached_run_whose_head_processes_are_killed_starts_the_job_again(
    project: Path, env: dict[str, str]
) -> None:
    """Node 0's processes (the job's supervisor, launcher and worker) SIGKILLed while its
    folder stays: nothing will write the job's record again. The attached run notices (the
    record stands still and the head says the supervisor is gone), and starts the job again
    as attempt 2 on the same nodes, nothing replaced; the timeout still counts from the
    job's first start."""
    node_1 = ws(project) / "nodes" / "node-1"
    node_1_id = node_1.stat().st_ino
    created: list[float] = []

    def kill_head_processes(job: str) -> None:
        record = ws(project) / "nodes" / "node-0" / "jobs" / f"{job}.json"
        created.append(json.loads(record.read_text())["created_at"])
        kill_node_processes(ws(project), 0)

    code, said, job = attached_run_hurt_in_attempt_1(
        project,
        env,
        ["--max-restarts", "1", "--timeout", "900"],
        "killed-head.out",
        kill_head_processes,
        timeout_s=180,
    )
    assert code == 0, said
    assert "the job's supervisor on node-0 is gone (pid " in said, said
    assert "starting the job again as attempt 2 on the same nodes" in said, said
    attempts = newest_summary(project)["attempts"]
    assert isinstance(attempts, list) and len(attempts) == 2
    assert attempts[0]["cause"] == {
        "node": 0,
        "exit_code": None,
        "meaning": "the job's supervisor on node-0 was killed",
        "kind": "lost",
    }
    assert attempts[0]["restarted_by"] == (
        "the operator, after the job's supervisor on node-0 was killed"
    )
    record = json.loads(cli(["jobs", job, "--json"], project, env).stdout)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    assert [record["created_at"]] == created and record["timeout_s"] == 900
    assert_attempt_2_on_both_nodes(record)
    assert node_1.stat().st_ino == node_1_id  # the same node 1, not a replacement
    assert node_processes(ws(project) / "nodes", job) == []


def test_a_detached_job_whose_head_processes_are_killed_is_recovered_on_the_same_nodes(
    project: Path, env: dict[str, str]
) -> None:
    job = start_detached(
        project, env, "--max-restarts", "1", "--secret", "TOKEN", "entry.py:waits_in_attempt_1"
    )
    node_0 = ws(project) / "nodes" / "node-0"
    wait_for_line(node_0 / "runs" / job / "output.log", "attempt 1 on")
    kill_node_processes(ws(project), 0)
    # Node 1's agent ends its part by itself once the head's connection closed.
    wait_until(
        f"no process of job {job} on any node",
        lambda: node_processes(ws(project) / "nodes", job),
        lambda found: not found,
        deadline_s=60,
    )
    listed = cli(["jobs"], project, env).stdout
    assert (
        f"job {job}: its supervisor on node-0 was killed (nothing of it runs any more): from "
        f"the project's folder, `skyinfra jobs recover {job}` starts it again on the same nodes"
    ) in listed, listed
    assert json.loads(cli(["jobs", job, "--json"], project, env).stdout)["state"] == "lost"

    recovered = cli(["jobs", "recover", job], project, env)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert "starting the job again as attempt 2 on the same nodes" in recovered.stdout
    record = json.loads(cli(["jobs", job, "--json"], project, env).stdout)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    attempts = record["attempts"]
    assert attempts[0]["cause"]["meaning"] == "the job's supervisor on node-0 was killed"
    assert_attempt_2_on_both_nodes(record)
    # Without a restart left it says what runs it again instead.
    job = start_detached(project, env, "--secret", "TOKEN", "entry.py:waits_in_attempt_1")
    wait_for_line(node_0 / "runs" / job / "output.log", "attempt 1 on")
    kill_node_processes(ws(project), 0)
    refused = cli(["jobs", "recover", job], project, env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "has no restart left (--max-restarts 0): `skyinfra run --checkpoints" in refused.stderr
    cli(["cancel", job, "--yes"], project, env)


def test_a_detached_job_that_lost_its_head_is_recovered_from_the_workspaces_copy(
    project: Path, env: dict[str, str]
) -> None:
    """Node 0 lost under a detached job: its record went with it, nobody was there to notice.
    `jobs` says what to run; `jobs recover` takes the job from the copy of its record that
    `run -d` kept, replaces node 0 and starts the job as attempt 2 (same env and secrets)."""
    job = start_detached(
        project, env, "--max-restarts", "1", "--secret", "TOKEN", "entry.py:waits_in_attempt_1"
    )
    wait_for_line(ws(project) / "nodes" / "node-0" / "runs" / job / "output.log", "attempt 1 on")
    lose_node(ws(project), 0)
    listed = cli(["jobs"], project, env)
    assert listed.returncode == 1, listed.stdout + listed.stderr
    assert "`skyinfra jobs recover JOB` replaces node-0 and starts it" in listed.stderr

    recovered = cli(["jobs", "recover", job], project, env)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert "node-0 lost: replacing it" in recovered.stdout, recovered.stdout
    record = json.loads(cli(["jobs", job, "--json"], project, env).stdout)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    attempts = record["attempts"]
    assert attempts[0]["cause"]["meaning"] == "node-0 (the head) lost, with the job's supervisor"
    assert attempts[0]["restarted_by"] == "the operator, after replacing the lost node(s)"
    assert_attempt_2_on_both_nodes(record)
    assert node_processes(ws(project) / "nodes", job) == []


def test_a_lost_head_without_a_restart_left_says_what_happened_and_what_to_run(
    project: Path, env: dict[str, str]
) -> None:
    code, said, job = attached_run_hurt_in_attempt_1(
        project,
        env,
        ["--checkpoints", "kept"],
        "lost-head.out",
        lambda job: lose_node(ws(project), 0),
        timeout_s=120,
    )
    assert code == 4, said
    assert (
        "node-0 (the job's head) was lost: its machine is gone (its folder, or its instance)"
        in said
    ), said
    assert "has no restart left (--max-restarts 0)" in said, said
    assert "`skyinfra up` replaces node-0, then `skyinfra run --checkpoints kept ...`" in said
    attempts = newest_summary(project)["attempts"]
    assert isinstance(attempts, list) and len(attempts) == 1
    assert attempts[0]["cause"]["node"] == 0 and attempts[0]["cause"]["kind"] == "lost"
    assert attempts[0]["not_restarted"] == "no restart left (--max-restarts 0)"
    # Nothing of the job runs on node 1 once the run ended: it ended node 1's part itself.
    assert node_processes(ws(project) / "nodes", job) == []
    # `jobs` (a detached job's way back) says what happened and what to run.
    listed = cli(["jobs"], project, env)
    assert listed.returncode == 1, listed.stdout + listed.stderr
    assert "node-0 (the job's head) was lost" in listed.stderr
    assert "`skyinfra up` replaces node-0" in listed.stderr
    # `up` puts node 0 back for the module's other tests.
    assert cli(["up"], project, env).returncode == 0


def test_checkpoints_delete_refuses_a_set_that_a_running_job_uses(
    project: Path, env: dict[str, str]
) -> None:
    job = start_detached(project, env, "--checkpoints", "busy", "entry.py:waits_in_attempt_1")
    busy = ws(project) / "checkpoints" / "busy"
    # A checkpoint of the job's: a set the job wrote nothing to goes at its end by itself.
    (busy / "step-1").mkdir()
    (busy / "step-1" / "state.bin").write_bytes(b"state")
    refused = cli(["checkpoints", "delete", "busy", "--yes"], project, env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"job(s) {job} of cluster 'recovery' use it" in refused.stderr, refused.stderr
    assert "nothing was deleted" in refused.stderr and busy.is_dir()
    cancelled = cli(["cancel", job, "--yes"], project, env)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    gone = cli(["checkpoints", "delete", "busy", "--yes"], project, env)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not busy.exists()
