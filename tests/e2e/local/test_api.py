"""The Python API end to end on one 2-node local cluster (shared by the module, brought up and
down by `with skyinfra.Cluster(...)`): a function of a script's `__main__` and a closure over a
NumPy array run on both nodes and return arrays, an exception on node 1 comes back with its
traceback, `nodes=`, detached jobs, bad arguments that change nothing, and a call by value
refused before anything is copied when the nodes run another Python. Real processes only."""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import skyinfra
from skyinfra.api.jobs import Job
from tests.support.local_jobs import node_processes
from tests.support.resume_proof import kill_node_processes
from tests.support.workers import wait_for_line

pytestmark = pytest.mark.slow

NAME = "api"

SCRIPT = """\
import sys

import numpy as np

import skyinfra
from skyinfra.api.jobs import Job


def scaled(k):
    from skyinfra_runtime import instance_info

    node = instance_info().node
    print(f"scaling on node {node}", flush=True)
    return np.arange(4) * k + node


if __name__ == "__main__":
    cluster = skyinfra.Cluster.from_spec("skyinfra.toml")
    values = cluster.run(scaled, 10)
    print("RESULT", [v.tolist() for v in values], [type(v).__name__ for v in values])
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("api-project")
    (proj / "skyinfra.toml").write_text(f'name = "{NAME}"\nnodes = 2\n')
    (proj / "scaled.py").write_text(SCRIPT)
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("SKYINFRA_")]:
            mp.delenv(key)
        mp.setenv("SKYINFRA_CACHE", str(proj.parent / "api-cache"))
        mp.setenv("SKYINFRA_TF_PLUGIN_CACHE", str(tf_plugin_cache))
        mp.chdir(proj)
        yield proj


@pytest.fixture(scope="module")
def cluster(project: Path) -> Iterator[skyinfra.Cluster]:
    """Up on entering the block, down on leaving it, nothing left."""
    nodes_dir = project / ".skyinfra" / "clusters" / NAME / "nodes"
    with skyinfra.Cluster(name=NAME, provider="local", nodes=2) as made:
        assert [n.private_ip for n in made.topology.nodes] == ["127.0.0.2", "127.0.0.3"]
        yield made
    assert not list(nodes_dir.glob("node-*"))
    assert node_processes(nodes_dir) == []


@pytest.fixture(autouse=True)
def in_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)


def test_a_function_of_a_script_s_main_returns_arrays_from_both_nodes(
    cluster: skyinfra.Cluster, project: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "scaled.py"], cwd=project, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT [[0, 10, 20, 30], [1, 11, 21, 31]] ['ndarray', 'ndarray']" in done.stdout
    assert "[node-0] scaling on node 0" in done.stdout  # streamed, prefixed by node
    # stdout is a pipe here: plain lines, no terminal control codes.
    assert "\x1b" not in done.stdout and "\r" not in done.stdout


def test_a_closure_over_an_array_returns_arrays_in_rank_order(cluster: skyinfra.Cluster) -> None:
    data = np.linspace(0.0, 1.0, 5)

    def weighted(scale: float) -> np.ndarray:
        from skyinfra_runtime import instance_info

        return data * scale * (instance_info().node + 1)

    out = cluster.run(weighted, scale=2.0)
    assert len(out) == 2
    np.testing.assert_allclose(out[0], data * 2)
    np.testing.assert_allclose(out[1], data * 4)


def test_an_exception_on_node_1_raises_with_its_traceback(cluster: skyinfra.Cluster) -> None:
    def fails_on_node_1() -> str:
        from skyinfra_runtime import instance_info

        if instance_info().node == 1:
            raise KeyError("node 1 has no such key")
        return "fine"

    with pytest.raises(skyinfra.RemoteError) as caught:
        cluster.run(fails_on_node_1)
    err = caught.value
    assert err.node == 1 and err.exit_codes[1] == 1
    assert "in fails_on_node_1" in err.traceback
    assert "KeyError: 'node 1 has no such key'" in err.traceback
    assert err.traceback.rstrip() in str(err)
    assert set(err.outcomes) == {0, 1} and err.outcomes[1]["meaning"] == "user code raised"
    assert (err.run_dir / "node-1.log").is_file()


def test_max_restarts_restarts_a_call_whose_worker_was_killed(cluster: skyinfra.Cluster) -> None:
    """`max_restarts` on the Cluster object (a spec field): the call's job restarts by
    itself after node 1's worker is SIGKILLed, and returns attempt 2's values."""
    restarting = skyinfra.Cluster(name=NAME, provider="local", nodes=2, max_restarts=1)

    def killed_once() -> int:
        import os
        import signal
        import time

        attempt = int(os.environ["SKYINFRA_ATTEMPT"])
        if attempt == 1:
            if os.environ["SKYINFRA_NODE"] == "1":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(120)  # node 0, until the job ends it
        return attempt

    assert restarting.run(killed_once) == [2, 2]


def test_nodes_runs_on_some_nodes_numbered_from_0(
    cluster: skyinfra.Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def where() -> tuple[int, int, str]:
        from skyinfra_runtime import instance_info

        info = instance_info()
        return info.node, info.total_nodes, os.path.basename(os.environ["SKYINFRA_NODE_DIR"])

    def hold(gate: str) -> int:
        import time

        while not os.path.exists(gate):
            time.sleep(0.1)
        return 1

    # nodes=[1] goes through the head's queue (it ran at once as a cluster of its own beside
    # it, and met whatever job held node 1): behind a job on every node it waits; a bad
    # priority= is refused first.
    with pytest.raises(skyinfra.UsageError, match=r"priority='high': expected an integer"):
        cluster.submit(where, nodes=[1], priority="high")  # type: ignore[arg-type]
    gate = tmp_path / "gate"
    holder = cluster.submit(hold, str(gate))
    # submit says what happened, in `run --detach`'s words (the call's name after the id).
    assert ".hold) started on every node\n" in said_of(holder, capsys), holder.id
    try:
        waiting = cluster.submit(where, nodes=[1], priority=0)
        assert waiting.state == "queued", waiting.record()
        waits = waiting.record()["queue"]["waits_for"]
        assert waits == f"node 1; nodes 0-1 held by job {holder.id}", waits
        said = said_of(waiting, capsys)
        assert f".where) is queued (position 1): it waits for {waits}\n" in said, said
    finally:
        gate.write_text("")
    assert waiting.result(timeout=120) == [(0, 1, "node-1")]
    assert holder.result(timeout=120) == [1, 1]
    first, then = holder.record(), waiting.record()
    assert first["ended_at"] <= then["started_at"] and then["world"] == [1], (first, then)
    alone = cluster.submit(where, nodes=[1])
    assert said_of(alone, capsys).endswith(".where) started on node 1\n"), alone.id
    assert alone.result(timeout=120) == [(0, 1, "node-1")]
    # nodes=K: any K free nodes, through the head's queue (an idle cluster: the lowest).
    assert cluster.run(where, nodes=1) == [(0, 1, "node-0")]
    # The node's own topology is the cluster's again (`verify` compares them).
    ws = cluster.workspace
    on_node = ws / "nodes" / "node-1" / "topology.json"
    assert on_node.read_text() == (ws / "topology.json").read_text()


def said_of(job: Job, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``submit`` printed of ``job``, from its id on."""
    out = capsys.readouterr().out
    assert f"[skyinfra] job {job.id} (" in out, out
    return out.split(f"[skyinfra] job {job.id} (", 1)[1]


STEPS = """\
import time


def steps(n):
    for step in range(n):
        print(f"step {step}", flush=True)
        time.sleep(0.5)
    return n * 10
"""


def project_function(project: Path) -> Callable[[int], int]:
    """``steps`` from a module of the project (work.py), imported as a user's code would be:
    it goes by reference."""
    (project / "work.py").write_text(STEPS)
    spec = importlib.util.spec_from_file_location("work", project / "work.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["work"] = module
    spec.loader.exec_module(module)
    steps: Callable[[int], int] = module.steps
    return steps


def test_submit_gives_a_job_to_follow_wait_for_and_cancel(
    cluster: skyinfra.Cluster, project: Path
) -> None:
    steps = project_function(project)
    job = cluster.submit(steps, 3)
    assert job.state in ("running", "succeeded")
    followed = job.logs(follow=True)
    assert "[node-0] step 2" in followed
    assert job.wait(60) == "succeeded"
    assert job.result() == [30, 30]
    assert "[node-1] step 0" in job.logs(node=1)

    forever = cluster.submit(steps, 1000)
    assert forever.cancel() == "cancelled"
    with pytest.raises(skyinfra.RunError, match="cancelled"):
        forever.result(timeout=30)


def test_a_job_whose_supervisor_was_killed_reads_lost_instead_of_running_for_ever(
    cluster: skyinfra.Cluster, project: Path
) -> None:
    """Node 0's processes SIGKILLed (its folder stays): nothing will write the job's record
    again; the job reads lost once the head says its supervisor is gone, so wait() ends."""
    ws = project / ".skyinfra" / "clusters" / NAME
    job = cluster.submit(project_function(project), 1000)
    wait_for_line(ws / "nodes" / "node-0" / "runs" / job.id / "output.log", "step 1")
    kill_node_processes(ws, 0)
    assert job.wait(120) == "lost"  # a bound on the wait, not an assertion on time
    assert job.state == "lost"
    with pytest.raises(skyinfra.RunError, match="lost"):
        job.result(timeout=30)


def _snapshot(ws: Path) -> list[str]:
    return sorted(str(p.relative_to(ws)) for p in ws.rglob("*") if "venv" not in p.parts)


def test_a_new_object_for_an_existing_cluster_keeps_what_was_applied(
    cluster: skyinfra.Cluster,
) -> None:
    """Cluster(name=N) of a cluster made with nodes=2 is that cluster, not a 1-node default
    whose `up` plans to destroy node-1 (issue 42, item 4, for the Python API); it says what
    it kept, and its `up` changes nothing (no confirmation needed)."""
    said: list[str] = []
    again = skyinfra.Cluster(name=NAME, echo=said.append)
    assert again.spec.nodes == 2
    kept = "[skyinfra] kept nodes = 2 from the applied cluster (change it with nodes= or "
    assert [line for line in said if line.startswith(kept)], said
    assert [n.instance_id for n in again.up().nodes] == [
        n.instance_id for n in cluster.topology.nodes
    ]


def test_bad_arguments_raise_naming_the_value_and_change_nothing(
    cluster: skyinfra.Cluster, project: Path
) -> None:
    steps = project_function(project)
    before = _snapshot(cluster.workspace)
    with pytest.raises(skyinfra.UsageError, match=r"nodes=\[2\].*from 0 to 1"):
        cluster.run(steps, 1, nodes=[2])
    with pytest.raises(skyinfra.UsageError, match=r"nodes=3: cluster 'api' has 2 node\(s\)"):
        cluster.run(steps, 1, nodes=3)
    with pytest.raises(skyinfra.UsageError, match="is not a function"):
        cluster.run(42)  # type: ignore[arg-type]
    with pytest.raises(skyinfra.UsageError, match="cannot be pickled"):
        cluster.run(steps, threading.Lock())
    with pytest.raises(skyinfra.SpecError) as caught:
        skyinfra.Cluster(name=NAME, nodes=2, plugins=["keras:backend=theano"])
    assert caught.value.field == "plugins[0].options.backend"
    # What the CLI confirms on a terminal needs yes=True: refused, nothing changed.
    with pytest.raises(skyinfra.ConfirmationRequired, match="nothing was changed"):
        cluster.down()
    assert _snapshot(cluster.workspace) == before
    assert cluster.status()["state"] == "up"


def other_python() -> str | None:
    """A real interpreter (3.10 or later) of another minor version than this one."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    names = [shutil.which(f"python3.{m}") for m in range(10, 16)]
    names += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.*/bin/python3")))
    for path in filter(None, names):
        try:
            said = subprocess.run(
                [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        minor = tuple(int(p) for p in said.split(".")) if said.count(".") == 1 else ()
        if minor >= (3, 10) and said != here:
            return path
    return None


def test_a_call_by_value_is_refused_before_any_copy_when_the_nodes_run_another_python(
    project: Path,
) -> None:
    """A 2-node cluster, 2 workers a node, whose environment is another Python (a real
    interpreter when this machine has one; else each node's venv says it is another version,
    as pyvenv.cfg does). By reference there is no such constraint, and results come back in
    rank order (node, then worker)."""
    python = other_python()
    local = {"base_address": "127.0.0.20", **({"python": python} if python else {})}
    cluster = skyinfra.Cluster(
        name="api-py", nodes=2, procs_per_node=2, head_port=29610, local=local
    )
    cluster.up()
    try:
        nodes = [cluster.workspace / "nodes" / f"node-{i}" for i in (0, 1)]
        if python is None:
            for node in nodes:
                cfg = node / "venv" / "pyvenv.cfg"
                lines = cfg.read_text().splitlines()
                said = ["version_info = 3.99.0" if ln.startswith("version") else ln for ln in lines]
                cfg.write_text("\n".join(said) + "\n")
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        with pytest.raises(skyinfra.PythonVersionError) as caught:
            cluster.run(lambda: 1)
        said = str(caught.value)
        assert f"this Python is {here}" in said
        assert sorted(caught.value.nodes) == [0, 1]
        theirs = caught.value.nodes[0]
        assert theirs != here and f"node-0 runs Python {theirs}" in said
        assert not any((node / "runs").exists() for node in nodes)
        runs = cluster.workspace / "runs"
        assert not runs.exists() or not any(runs.iterdir())
        # By reference (os.getenv: an installed module's function), in rank order.
        assert cluster.run(os.getenv, "SKYINFRA_NODE") == ["0", "0", "1", "1"]
        assert cluster.run(os.getenv, "SKYINFRA_WORKER") == ["0", "1", "0", "1"]
    finally:
        cluster.down(yes=True)
