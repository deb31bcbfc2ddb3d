"""A node's standby workers as real processes, with a warmup that imports only ``json`` (the
jax and keras standbys are proven end to end in tests/e2e/local/test_warm_workers.py): the
node's runtime reports a waiting standby and its resident memory (`skyinfra status`), and a
standby that took a job gives the launcher the job's exit code even when its keeper (its
parent) was killed while the job ran; a slot a job took gets a fresh standby once the
launcher asks again; a launcher sent SIGTERM while it waits for a standby's imports (a held
`import jax`) still ends the worker it takes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from skyinfra_runtime import exitcodes, nodefacts, standbys, warm
from skyinfra_runtime.jobrecord import WorkerStart
from skyinfra_runtime.topology import NODE_ENV, TOPOLOGY_ENV, load_topology
from skyinfra_runtime.warm import Warmup, standby_env

from tests.integration.runtime.launch_harness import ENTRIES, launch_argv, launcher_env, topology

BASICS = ENTRIES / "basics.py"

WARMUP = Warmup(("json",))
# A job that waits for its go file, then exits with 0.
ENTRY = """\
import os, pathlib, time


def main():
    go = pathlib.Path(os.environ["GO_FILE"])
    while not go.exists():
        time.sleep(0.05)
    return "done"
"""


def wait_until(what: str, done: object) -> None:
    until = time.monotonic() + 60  # a bound on the wait, not an assertion on time
    while not done():  # type: ignore[operator]
        assert time.monotonic() < until, f"never: {what}"
        time.sleep(0.05)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def job_for(tmp_path: Path, go: Path) -> standbys.Job:
    """ENTRY as a worker's job in ``tmp_path``, as the launcher hands it to a standby."""
    (tmp_path / "job.py").write_text(ENTRY)
    env = {
        **os.environ,
        TOPOLOGY_ENV: json.dumps(topology(nodes=1)),
        NODE_ENV: "0",
        "GO_FILE": str(go),
    }
    argv = ["job.py:main", str(tmp_path / "result.json"), str(tmp_path / "status"), "--"]
    return standbys.Job(argv, env, str(tmp_path), [])


StandbyNode = tuple[Path, Path, dict[str, str]]


@pytest.fixture
def standby_node(tmp_path: Path) -> Iterator[StandbyNode]:
    """A node folder whose keeper holds one standby of WARMUP, waiting: (node folder, its
    standby folder, the standbys' environment). A live keeper ends its standbys at the end;
    those of a killed one ended with it (their PR_SET_PDEATHSIG)."""
    node_dir = tmp_path / "node-0"
    folder = standbys.folder(node_dir)
    env = {**standby_env(os.environ), "SKYINFRA_NODE_DIR": str(node_dir)}
    standbys.ensure(folder, 1, WARMUP, env)
    try:
        wait_until("a standby waits", lambda: nodefacts.waiting_standbys(node_dir))
        yield node_dir, folder, env
    finally:
        standbys.stop(folder)


def test_a_slot_a_job_took_is_filled_again_when_the_launcher_asks(
    tmp_path: Path, standby_node: StandbyNode
) -> None:
    node_dir, folder, env = standby_node
    go = tmp_path / "go"
    worker, start = standbys.take(folder, 0, WARMUP, job_for(tmp_path, go))
    assert worker is not None and start.warm, start
    # The launcher asks as its job starts (a node with cores to spare), right after the
    # take: the keeper often notices both in one pass, and must still refill the slot.
    standbys.ensure(folder, 1, WARMUP, env)
    wait_until(
        "a fresh standby waits in slot 0 while the job runs",
        lambda: [s.pid for s in nodefacts.waiting_standbys(node_dir)] not in ([], [worker.pid]),
    )
    go.touch()
    assert worker.wait(timeout=60) == 0


def test_a_warm_worker_whose_keeper_dies_still_gives_its_exit_code(
    tmp_path: Path, standby_node: StandbyNode
) -> None:
    node_dir, folder, _ = standby_node
    # What `status` shows of the node: the standby waiting, and the memory it holds.
    facts = nodefacts.node_facts(node_dir)
    (standby,) = facts.standbys
    assert standby.slot == 0 and standby.rss_bytes > 1 << 20, facts
    said = json.loads(json.dumps(facts.to_dict()))  # the line the operator reads
    assert nodefacts.NodeFacts.from_dict(said).to_dict() == said

    go = tmp_path / "go"
    worker, start = standbys.take(folder, 0, WARMUP, job_for(tmp_path, go))
    assert worker is not None and start.warm, start
    assert worker.pid == standby.pid

    keeper = parent_of(worker.pid)
    os.kill(keeper, signal.SIGKILL)  # the keeper dies while the worker runs the job
    wait_until("the keeper is gone", lambda: not standbys.keeper_running(folder))
    go.touch()
    assert worker.wait(timeout=60) == 0
    assert json.loads((tmp_path / "result.json").read_text())["value"] == "done"


def test_a_job_right_after_a_take_waits_for_the_refill_its_keeper_was_asked_for(
    tmp_path: Path, standby_node: StandbyNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart or the next job on a node without cores to spare comes moments after the
    node's part of the last one ended and asked for a refill: it waits for the keeper to
    start it instead of starting cold beside it."""
    _, folder, env = standby_node
    monkeypatch.setattr(standbys, "REFILL_WAIT_S", 120.0)  # a bound on the wait, not a time
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    first, start = standbys.take(folder, 0, WARMUP, job_for(first_dir, first_dir / "go"))
    assert first is not None and start.warm, start
    (first_dir / "go").touch()
    assert first.wait(timeout=60) == 0
    standbys.ensure(folder, 1, WARMUP, env)  # as the launcher does once its part ended
    second, start = standbys.take(folder, 0, WARMUP, job_for(second_dir, second_dir / "go"))
    assert second is not None and start.warm, start
    assert second.pid != first.pid
    (second_dir / "go").touch()
    assert second.wait(timeout=60) == 0


SLOW_IMPORT = """\
import os, pathlib, time

pathlib.Path(os.environ["IMPORT_STARTED"]).touch()
while not pathlib.Path(os.environ["IMPORT_GO"]).exists():
    time.sleep(0.02)
"""


def test_a_job_takes_a_standby_still_importing_and_waits_for_its_imports(tmp_path: Path) -> None:
    """A job that comes while the only standby still imports (a node's first job right
    after `up`, or the next job before the refill is ready) takes it and waits for the rest
    of its imports: starting cold would redo them beside the standby's, on the same cores."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "slow_framework.py").write_text(SLOW_IMPORT)
    started, go_import = tmp_path / "import-started", tmp_path / "import-go"
    node_dir = tmp_path / "node-0"
    folder = standbys.folder(node_dir)
    env = {
        **standby_env(os.environ),
        "SKYINFRA_NODE_DIR": str(node_dir),
        "PYTHONPATH": str(mods),
        "IMPORT_STARTED": str(started),
        "IMPORT_GO": str(go_import),
    }
    warmup = Warmup(("slow_framework",))
    standbys.ensure(folder, 1, warmup, env)
    try:
        wait_until("the standby imports", started.exists)
        assert not nodefacts.waiting_standbys(node_dir)  # not ready: not counted as waiting
        taken: list[tuple[standbys.WarmWorker | None, WorkerStart]] = []
        go = tmp_path / "go"
        job = job_for(tmp_path, go)
        taker = threading.Thread(target=lambda: taken.append(standbys.take(folder, 0, warmup, job)))
        taker.start()
        # The launcher is connected and waits: it neither took the job nor went cold.
        wait_until("the launcher connects", lambda: _connections_to(folder) > 0)
        assert not taken
        go_import.touch()
        taker.join(timeout=60)
        ((worker, start),) = taken
        assert worker is not None and start.warm, start
        assert start.imports_s is not None and start.imports_s >= 0
        go.touch()
        assert worker.wait(timeout=60) == 0
        assert json.loads((tmp_path / "result.json").read_text())["value"] == "done"
    finally:
        go_import.touch()
        standbys.stop(folder)


def _connections_to(folder: Path) -> int:
    """Connections to the importing standby's socket (/proc/net/unix: the name it was bound
    with, relative to its folder, state 03 connected)."""
    bound = [f".{p.name}.tmp" for p in folder.glob("w0-*.importing")]
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    return sum(1 for line in lines if line.split()[5] == "03" and line.split()[-1] in bound)


# The standby's `import jax`, held until the test lets it go, then the real jax in its place
# (the import system returns what sys.modules holds once the module ran).
HELD_JAX = """\
import os, pathlib, sys, time

pathlib.Path(os.environ["IMPORT_STARTED"]).touch()
while not pathlib.Path(os.environ["IMPORT_GO"]).exists():
    time.sleep(0.02)
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules["jax"]
import jax  # noqa: E402,F401
"""


def test_a_sigterm_while_the_launcher_waits_for_a_standbys_imports_still_ends_the_worker(
    tmp_path: Path,
) -> None:
    """The launcher forwards SIGTERM to the workers it started; one it was still taking from
    a standby (waiting for its imports: seconds, for torch on a GPU node) was not among them,
    and ran the job to its end, deaf to the cancel or notice. The standby is in its keeper's
    session, out of the launcher's group: nothing else told it."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "jax.py").write_text(HELD_JAX)
    started, go_import = tmp_path / "import-started", tmp_path / "import-go"
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    folder = standbys.folder(node_dir)
    plugins = [{"name": "jax", "options": {}}]
    topo = topology(nodes=1, plugins=plugins)
    warmup = warm.node_warmup(load_topology(json.dumps(topo)).plugins, 1, os.environ)
    assert warmup == Warmup(("jax",))  # the standby the launcher looks for
    keeper_env = {
        **standby_env(os.environ),
        "SKYINFRA_NODE_DIR": str(node_dir),
        "PYTHONPATH": str(mods),
        "IMPORT_STARTED": str(started),
        "IMPORT_GO": str(go_import),
    }
    standbys.ensure(folder, 1, warmup, keeper_env)
    env = launcher_env(SKYINFRA_NODE_DIR=str(node_dir))
    output = tmp_path / "launcher.out"
    launcher = None
    try:
        wait_until("the standby imports", started.exists)
        with output.open("w") as out:
            launcher = subprocess.Popen(
                launch_argv("--topology", json.dumps(topo), f"{BASICS}:sleep_forever"),
                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_until("the launcher connects", lambda: _connections_to(folder) > 0)
        launcher.send_signal(signal.SIGTERM)  # the launcher alone: the standby is not its group
        go_import.touch()
        try:
            code = launcher.wait(timeout=120)  # a bound on a hang; the worker sleeps 600 s
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker taken from the standby ran on:\n{output.read_text()}")
        assert code == exitcodes.INTERRUPTED, output.read_text()
        said = output.read_text()
        assert "Traceback" not in said, said
    finally:
        go_import.touch()
        if launcher is not None:
            launcher.kill()
        standbys.stop(folder)
