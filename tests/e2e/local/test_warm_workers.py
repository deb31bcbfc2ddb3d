"""Warm workers end to end on one 2-node local cluster with the jax and keras plugins: `up`
leaves one standby waiting on each node before any job ran (`status` shows it and its
memory); the first job's workers are those standbys and train bit for bit what a cold worker
trains (a job whose --env sets KERAS_BACKEND starts cold, and its timeline says why); a
secret passed with a job is in no standby's environment or command line; the job's record
says how each worker started; a used standby is replaced after the job, and one killed while
it waits at once; on nodes without cores to spare a job past its start has its standbys
replaced while it runs; `down` leaves no standby. Three small jobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import skyinfra_argv
from tests.support.local_jobs import cli as run_cli
from tests.support.local_jobs import cluster_up, module_env, node_processes
from tests.support.waits import wait_until

# Three Keras jobs on 2 nodes and the standbys' imports: minutes on a loaded 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

NAME = "warm"
SECRET = "warm-" + "secret-7c41d09e"
SPEC = f"""\
name = "{NAME}"
nodes = 2
plugins = ["jax", "keras:backend=jax"]
"""
ENTRY = """\
import hashlib, os, sys


def train():
    import keras
    import numpy as np
    from skyinfra_runtime import shard

    keras.utils.set_random_seed(7)
    x = np.linspace(-1.0, 1.0, 64, dtype="float32").reshape(32, 2)
    y = (x[:, :1] * 0.5 - x[:, 1:] * 2.0).astype("float32")
    x, y = shard(x, y, drop_last=True)
    model = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(np.asarray(weight, dtype=np.float32).tobytes())
    return {
        "weights_sha256": digest.hexdigest(),
        "backend": keras.backend.backend(),
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "secret_here": os.environ.get("WARM_SECRET") is not None,
    }
"""

# Compiles a program (its node's start-up work), says where it runs, then holds until told.
HOLD_ENTRY = """\
import os, pathlib, time


def hold():
    import jax
    from skyinfra_runtime import instance_info

    jax.jit(lambda x: x * 2.0)(jax.numpy.ones(4)).block_until_ready()
    folder = pathlib.Path(os.environ["HOLD_DIR"])
    node = instance_info().node
    launcher = int(os.environ["SKYINFRA_LAUNCHER_PID"])  # it decides when to refill
    (folder / f"cores-{node}").write_text(str(len(os.sched_getaffinity(launcher))))
    (folder / f"worker-{node}").write_text(str(os.getpid()))
    while not (folder / "go").exists():
        time.sleep(0.05)
"""


def cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(args, cwd, env, timeout=600)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    env = module_env(tmp_path_factory, tf_plugin_cache, "warm")
    env["WARM_SECRET"] = SECRET
    return env


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("warm-project")
    (proj / "skyinfra.toml").write_text(SPEC)
    (proj / "warm_entry.py").write_text(ENTRY)
    (proj / "hold_entry.py").write_text(HOLD_ENTRY)
    nodes = proj / ".skyinfra" / "clusters" / NAME / "nodes"
    with cluster_up(proj, env, NAME):
        yield proj
    # `down` ended every standby and keeper with the nodes' other processes.
    assert standby_processes(nodes) == {}
    assert node_processes(nodes) == []


def standby_processes(nodes: Path) -> dict[int, str]:
    """pid -> command line of each standby worker and keeper of the cluster's nodes."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "skyinfra_runtime.standby" in cmd and str(nodes) in cmd:
            found[int(entry.name)] = cmd
    return found


def wait_for_standbys(nodes: Path) -> None:
    """Until node 0 and node 1 each have a standby waiting (its socket)."""
    wait_until(
        "a standby waiting on node 0 and node 1",
        lambda: standby_folders(nodes),
        lambda _: all(list((nodes / f"node-{i}" / "standby").glob("w0-*.sock")) for i in (0, 1)),
        deadline_s=200,
    )


def standby_folders(nodes: Path) -> dict[str, str]:
    """What the nodes' standby folders hold (a log's last lines), for a failure's message."""
    found = {}
    for path in sorted(nodes.glob("node-*/standby/*")):
        tail = path.read_text(errors="replace")[-2000:] if path.suffix == ".log" else ""
        found[str(path.relative_to(nodes))] = tail
    return found


def run_job(project: Path, env: dict[str, str], *flags: str) -> tuple[list[Any], str]:
    """Each node's value and the job's id."""
    run = cli(["run", "--cluster", NAME, *flags, "warm_entry.py:train"], project, env)
    assert run.returncode == 0, run.stdout + run.stderr
    run_dir = max((project / ".skyinfra" / "clusters" / NAME / "runs").iterdir())
    summary = json.loads(run_dir.joinpath("summary.json").read_text())
    return [n["result"]["workers"][0]["value"] for n in summary["nodes"]], summary["run_id"]


def starts(nodes: Path, job: str) -> list[dict[str, Any]]:
    """Each node's worker 0 as its timeline recorded it (warm or cold, waited, why)."""
    found = []
    for i in (0, 1):
        timeline = json.loads((nodes / f"node-{i}" / "runs" / job / "timeline.json").read_text())
        found.append(timeline["attempts"][-1]["workers"][0])
    return found


def test_up_leaves_a_standby_waiting_on_each_node_and_status_shows_it(
    project: Path, env: dict[str, str]
) -> None:
    nodes = project / ".skyinfra" / "clusters" / NAME / "nodes"
    assert not list(nodes.glob("node-*/runs/*")), "no job ran yet"
    wait_for_standbys(nodes)
    status = cli(["status", "--cluster", NAME, "--json"], project, env)
    assert status.returncode == 0, status.stdout + status.stderr
    for node in json.loads(status.stdout)["nodes"]:
        (standby,) = node["standbys"]
        socket = nodes / node["name"] / "standby" / f"w0-{standby['pid']}.sock"
        assert standby["slot"] == 0 and socket.exists(), node
        assert standby["rss_bytes"] > 50 << 20, node  # jax and keras imported: tens of MiB


def test_a_standby_trains_bit_for_bit_what_a_cold_worker_trains_and_holds_no_secret(
    project: Path, env: dict[str, str]
) -> None:
    nodes = project / ".skyinfra" / "clusters" / NAME / "nodes"
    wait_for_standbys(nodes)  # `up` started them: the first job starts warm
    warm, job1 = run_job(project, env, "--secret", "WARM_SECRET")
    on_standby = starts(nodes, job1)
    assert [s["start"] for s in on_standby] == ["warm", "warm"], on_standby
    assert all(s["waited_s"] >= 0 for s in on_standby)
    assert all(v["secret_here"] for v in warm)  # the job's secret came with the job

    cold, job2 = run_job(project, env, "--env", "KERAS_BACKEND=jax")
    forced = starts(nodes, job2)
    assert [s["start"] for s in forced] == ["cold", "cold"], forced
    assert all("KERAS_BACKEND" in s["reason"] for s in forced), forced

    # The job's record (`jobs --json`) says what each node's timeline says, and `jobs JOB` too.
    listed = cli(["jobs", "--cluster", NAME, "--json"], project, env)
    records = {j["id"]: j for j in json.loads(listed.stdout)}
    for job in (job1, job2):
        assert [n["workers"][0] for n in records[job]["nodes"]] == starts(nodes, job), job
    shown = cli(["jobs", "--cluster", NAME, job1], project, env).stdout
    assert shown.count("worker 0 warm (its standby waited ") == 2, shown

    sums = {v["weights_sha256"] for v in warm + cold}
    assert len(sums) == 1, (warm, cold)  # every node, warm or cold: the same weights
    assert {v["backend"] for v in warm + cold} == {"jax"}
    assert len({v["pid"] for v in warm + cold}) == 4  # never a worker reused
    assert all(v["cwd"].endswith(f"/runs/{job1}/work") for v in warm)

    wait_for_standbys(nodes)  # the used ones were replaced: one standby per node, no more
    standbys = standby_processes(nodes)
    waiting = {pid: cmd for pid, cmd in standbys.items() if "skyinfra_runtime.standby " in cmd}
    assert len(waiting) == 2 and len(standbys) == 4, standbys  # and a keeper per node
    for pid, cmd in standbys.items():
        assert SECRET not in cmd
        assert SECRET.encode() not in Path(f"/proc/{pid}/environ").read_bytes(), cmd

    # A standby killed while it waits is replaced, its socket with it.
    folder = nodes / "node-1" / "standby"
    (killed,) = [pid for pid, cmd in waiting.items() if str(folder) in cmd]
    os.kill(killed, signal.SIGKILL)
    wait_until(
        "a standby in the killed one's place",
        lambda: [p.name for p in folder.glob("w0-*.sock")],
        lambda names: names not in ([], [f"w0-{killed}.sock"]),
    )
    assert len(list(folder.glob("w0-*.sock"))) == 1


def test_a_job_past_its_start_on_nodes_without_cores_to_spare_has_its_standbys_replaced(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Two nodes on one core (taskset): no core to spare, so the slots a job took are filled
    again only once its workers are past their start (their compiles done, then quiet), while
    it still runs: a restart later in the job finds standbys that imported."""
    nodes = project / ".skyinfra" / "clusters" / NAME / "nodes"
    wait_for_standbys(nodes)
    hold = tmp_path / "hold"
    hold.mkdir()
    argv = ["run", "--cluster", NAME, "--env", f"HOLD_DIR={hold}", "hold_entry.py:hold"]
    run = subprocess.Popen(
        ["taskset", "-c", str(min(os.sched_getaffinity(0))), *skyinfra_argv(), *argv],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def holding() -> dict[str, str]:
            if run.poll() is not None:
                pytest.fail(f"the job ended before it held: {run.communicate()[0]}")
            return {p.name: p.read_text() for p in hold.glob("worker-*")}

        workers = wait_until(
            "each node's worker holding",
            holding,
            lambda found: len(found) == 2 and all(found.values()),
            deadline_s=400,
        )
        assert {(hold / f"cores-{i}").read_text() for i in (0, 1)} == {"1"}
        for i in (0, 1):
            mine = f"w0-{workers[f'worker-{i}']}.sock"
            wait_until(
                f"a fresh standby on node {i} while its job still runs",
                lambda i=i: [p.name for p in (nodes / f"node-{i}" / "standby").glob("w0-*.sock")],
                lambda names, mine=mine: names not in ([], [mine]),
                deadline_s=200,
            )
        assert run.poll() is None, run.communicate()[0]
    finally:
        (hold / "go").touch()
        out = run.communicate(timeout=300)[0]
    assert run.returncode == 0, out
