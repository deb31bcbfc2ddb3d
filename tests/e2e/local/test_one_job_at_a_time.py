"""Nothing kills a running job by accident (issue 42): on a 2-node local cluster with the jax
plugin, while a detached JAX job holds the cluster (its coordinator on head_port), a second
`run`, attached or detached, is queued on the head (issue 47) naming the job it waits for and
how to cancel it, and nothing of it starts before that job ended; `run --verify` is refused
(exit 2: its collective would join the job's) and starts nothing; `verify` leaves the job's
ports alone and says which job holds them. The job then ends as it would have alone
(succeeded), the queued jobs run after it, each once the one before it had ended (the next
`run` gets the cluster). Before issue 42, the second job joined the first one's coordinator
and both nodes of the first aborted. While the job holds its ports, a second cluster on the
same machine, on other addresses with the same head_port, runs its own JAX and torch job:
each JAX coordinator and each torch rendezvous store listens on its head's own address (they
listened on every interface, so the second cluster's processes reached the first's JAX
coordinator, and its torch store could not listen at all). The job waits on a gate file the
test opens: nothing here is timed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import skyinfra_argv
from tests.support.local_jobs import cli as run_cli
from tests.support.local_jobs import (
    cluster_up,
    job_record,
    module_env,
    wait_for_state,
    wait_until_ended,
)

pytestmark = pytest.mark.slow

NAME = "one-job"
PORT = 47200


def spec(name: str, base_address: str, extra: str = "") -> str:
    return (
        f'name = "{name}"\nnodes = 2\nplugins = ["jax", "torch"]\nhead_port = {PORT}\n{extra}'
        f'[local]\nbase_address = "{base_address}"\n'
    )


ENTRY = """\
import os, pathlib, time

import jax
import torch.distributed as dist


def hold():
    # The plugins have initialised jax.distributed and torch's process group: the coordinator
    # holds the head's port, the torch store the next one.
    gate = pathlib.Path(os.environ["GATE"])
    while not gate.exists():
        time.sleep(0.1)
    return min(jax.process_count(), dist.get_world_size())


def quick():
    return min(jax.process_count(), dist.get_world_size())
"""


def cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(args, cwd, env, timeout=600)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return module_env(tmp_path_factory, tf_plugin_cache, "one-job")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("one-job-project")
    (proj / "skyinfra.toml").write_text(spec(NAME, "127.0.200.40"))
    (proj / "work.py").write_text(ENTRY)
    with cluster_up(proj, env, NAME):
        yield proj


def runs_on_the_operator(project: Path) -> list[str]:
    runs = project / ".skyinfra" / "clusters" / NAME / "runs"
    return sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []


def hold(project: Path, env: dict[str, str], gate: Path) -> str:
    """A detached JAX job that runs until ``gate`` exists; its id, once it runs."""
    started = cli(
        ["run", "--cluster", NAME, "-d", "--env", f"GATE={gate}", "work.py:hold"], project, env
    )
    assert started.returncode == 0, started.stdout + started.stderr
    job = started.stdout.split("job ", 1)[1].split()[0]
    assert wait_for_state(NAME, project, env, job, ("running", "failed", "succeeded")) == "running"
    return job


def ended_alone(project: Path, env: dict[str, str], job: str) -> None:
    """The job ended as it would have alone: succeeded, both processes of it counted."""
    ended = wait_until_ended(NAME, project, env, job)
    assert ended["state"] == "succeeded", ended
    assert [n["result"]["workers"][0]["value"] for n in ended["nodes"]] == [2, 2], ended


def test_a_second_run_and_verify_leave_a_running_jax_job_alone(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    # A second cluster on the same machine, on other addresses with the same head_port, up
    # before the job holds its ports (`up` refuses ports in use anywhere on the machine).
    other = another_project(tmp_path, "one-job-b", "127.0.201.40")
    with cluster_up(other, env, "one-job-b"):
        job = hold(project, env, gate)
        try:
            before = runs_on_the_operator(project)
            # --verify is refused: its port and collective checks would meet the job's coordinator.
            second = cli(["run", "--cluster", NAME, "--verify", "work.py:quick"], project, env)
            assert second.returncode == 2, second.stdout + second.stderr
            assert "verify:" not in second.stdout, second.stdout  # refused before checking
            said = second.stderr
            assert f"cluster '{NAME}' is busy: job {job} is running on it" in said, said
            assert "entry work.py:hold" in said and "nothing was started" in said, said
            assert f"skyinfra logs --cluster {NAME} {job} --follow" in said, said
            assert f"skyinfra cancel --cluster {NAME} {job}" in said, said
            assert "Traceback" not in said
            assert runs_on_the_operator(project) == before  # nothing copied, nothing recorded
            # `run --detach`: queued behind the job, nothing of it started.
            detached = cli(["run", "--cluster", NAME, "-d", "work.py:quick"], project, env)
            assert detached.returncode == 0, detached.stdout + detached.stderr
            queued = detached.stdout.split("job ", 1)[1].split()[0]
            waits = (
                f"job {queued} is queued (position 1): it waits for 2 nodes, 0 free; "
                f"nodes 0-1 held by job {job}"
            )
            assert waits in detached.stdout, detached.stdout
            assert f"skyinfra cancel --cluster {NAME} {queued}" in detached.stdout, detached.stdout
            assert job_record(NAME, project, env, queued)["state"] == "queued"

            checked = cli(
                ["verify", "--cluster", NAME, "--min-free-gb", "0.1", "--json"], project, env
            )
            assert checked.returncode == 0, checked.stdout + checked.stderr
            report = json.loads(checked.stdout)
            rows = {row["check"]: row["nodes"] for row in report["checks"]}
            held = f"not checked: job {job} is running and holds the rendezvous ports"
            for check in ("ports free on head", "ports reachable", "collective"):
                for node in ("node-0", "node-1"):
                    cell = rows[check][node]
                    assert cell["status"] == "n/a" and cell["reason"].startswith(held), (
                        check,
                        cell,
                    )
            assert rows["runtime"]["node-0"]["status"] == "pass"  # the other checks ran
            table = cli(["verify", "--cluster", NAME, "--min-free-gb", "0.1"], project, env)
            assert table.returncode == 0 and held in table.stdout, table.stdout + table.stderr
            # An attached `run`: queued behind the other, it waits and says so.
            follower = subprocess.Popen(
                [*skyinfra_argv(), "run", "--cluster", NAME, "work.py:quick"],
                cwd=project,
                env={**env, "PYTHONUNBUFFERED": "1"},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            assert follower.stdout is not None
            shown = ""
            for line in follower.stdout:  # bounded by the process: it says so, or ends
                shown += line
                if "Ctrl-C stops waiting and leaves it queued" in line:
                    break
            assert (
                "is queued (position 2): it waits for 2 nodes, 0 free; nodes 0-1 held by job " + job
                in shown
            ), shown
            # The second cluster runs its own JAX and torch job beside the held one (its
            # coordinator and store on its own head's address).
            beside = cli(["run", "--cluster", "one-job-b", "work.py:quick"], other, env)
            assert beside.returncode == 0, beside.stdout + beside.stderr
            assert job_record(NAME, project, env, job)["state"] == "running"
            assert job_record(NAME, project, env, queued)["state"] == "queued"
        finally:
            gate.write_text("")
    ended_alone(project, env, job)
    out = follower.communicate(timeout=600)[0]
    assert follower.returncode == 0, shown + out
    assert "left the queue: starting on every node" in out, out
    attached = shown.split(" is queued (position 2)", 1)[0].rsplit("job ", 1)[1]
    held = job_record(NAME, project, env, job)
    ran = [wait_until_ended(NAME, project, env, later) for later in (queued, attached)]
    assert [r["state"] for r in ran] == ["succeeded", "succeeded"], ran
    # Each started by the head once the nodes were free: the queued job once the held one had
    # ended (never beside it), the attached `run` once the queued one had: the next job gets
    # the cluster each time.
    assert ran[0]["started_at"] >= held["ended_at"], (ran[0], held)
    assert ran[1]["started_at"] >= ran[0]["ended_at"], ran


def another_project(tmp_path: Path, name: str, base_address: str) -> Path:
    """A second project folder with its own cluster spec (head_port as the module's), with no
    standby workers: its job's plugins bind the same cold or warm, and standbys would only
    import jax and torch for nothing before its `down`."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "skyinfra.toml").write_text(spec(name, base_address, "warm_workers = false\n"))
    (folder / "work.py").write_text(ENTRY)
    return folder


def test_a_spec_copied_to_another_folder_is_refused_the_same_address_and_port(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    copy = another_project(tmp_path, "one-job-copy", "127.0.200.40")
    refused = cli(["up"], copy, env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stderr
    assert "invalid spec field 'local.base_address': got '127.0.200.40'" in said, said
    assert f"cluster '{NAME}' ({project / '.skyinfra' / 'clusters' / NAME}) is up" in said, said
    assert f"127.0.200.40 with ports {PORT}-{PORT + 1}" in said, said
    assert not (copy / ".skyinfra" / "clusters" / "one-job-copy" / "topology.json").exists()
    assert "terraform" not in refused.stdout
