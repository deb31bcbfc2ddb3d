"""The launcher as a user's node runs it: results, exit codes, messages, signals, workers."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from skyinfra_runtime import standbys

from tests.integration.runtime.launch_harness import (
    ENTRIES,
    interrupt_after,
    launch_argv,
    launch_in_its_own_group,
    launcher_env,
    rest_of_output,
    run_nodes,
    topology,
)
from tests.support.workers import alive, until_first_line

BASICS = ENTRIES / "basics.py"


def launch(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        launch_argv(*args), cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env
    )


def test_single_node_without_topology_runs_as_node_0_of_1(tmp_path: Path) -> None:
    result = tmp_path / "r.json"
    proc = launch(tmp_path, "--result", str(result), f"{BASICS}:info")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(result.read_text())
    assert data["node"] == 0
    (worker,) = data["workers"]
    assert worker["value"]["total_nodes"] == 1
    assert worker["value"]["is_head"] is True


def test_every_node_sees_populated_peers_and_its_own_index(tmp_path: Path) -> None:
    runs = run_nodes(tmp_path, topology(nodes=3), f"{BASICS}:info", args=["--lr", "0.1"])
    for run in runs:
        assert run.returncode == 0, run.stderr
        (value,) = run.values()
        assert value["node"] == run.node
        assert value["total_nodes"] == 3
        assert value["is_head"] is (run.node == 0)
        assert value["peers"] == ["127.0.0.1"] * 3
        assert value["argv"] == ["--lr", "0.1"]


def test_two_workers_per_node_get_global_indices(tmp_path: Path) -> None:
    runs = run_nodes(tmp_path, topology(nodes=2, procs_per_node=2), f"{BASICS}:info")
    seen = sorted(
        (v["node"], v["worker"], v["global_index"], v["total_workers"])
        for run in runs
        for v in run.values()
    )
    assert seen == [(0, 0, 0, 4), (0, 1, 1, 4), (1, 0, 2, 4), (1, 1, 3, 4)]


def test_procs_per_node_auto_follows_the_accelerator_count(tmp_path: Path) -> None:
    runs = run_nodes(
        tmp_path,
        topology(nodes=1, accelerators=3),
        f"{BASICS}:info",
        extra=["--procs-per-node", "auto"],
    )
    assert [v["worker"] for v in runs[0].values()] == [0, 1, 2]


def test_script_entry_runs_as_main_with_arguments(tmp_path: Path) -> None:
    (run,) = run_nodes(
        tmp_path, topology(nodes=1), str(ENTRIES / "script_with_args.py"), args=["a", "--b"]
    )
    assert run.returncode == 0, run.stderr
    assert "script node=0 args=['a', '--b']" in run.stdout


def test_module_function_entry(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(ENTRIES)}
    (run,) = run_nodes(tmp_path, topology(nodes=1), "basics:info", env=env)
    assert run.returncode == 0, run.stderr
    assert run.values()[0]["node"] == 0


def test_user_exception_exits_1_with_its_traceback(tmp_path: Path) -> None:
    (run,) = run_nodes(tmp_path, topology(nodes=1), f"{BASICS}:fail")
    assert run.returncode == 1
    assert "Traceback" in run.stderr
    assert "ValueError: the user's code raised" in run.stderr
    assert run.result is None


def test_first_failing_worker_ends_the_others_on_its_node(tmp_path: Path) -> None:
    (run,) = run_nodes(tmp_path, topology(nodes=1, procs_per_node=2), f"{BASICS}:fail_on_worker_1")
    # worker 0 sleeps 600 s, past the run deadline: finishing at all shows it was ended.
    assert run.returncode == 1
    assert "RuntimeError: worker 1 gives up" in run.stderr


def test_non_json_return_value_is_recorded_as_repr(tmp_path: Path) -> None:
    script = tmp_path / "obj.py"
    script.write_text("def main():\n    return object()\n")
    (run,) = run_nodes(tmp_path, topology(nodes=1), f"{script}:main")
    assert run.returncode == 0, run.stderr
    assert run.values()[0]["repr"].startswith("<object object")
    assert "not JSON" in run.stderr


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("no_such_module_here:main", "cannot be found"),
        ("missing_script.py", "does not exist"),
        ("pkg.mod", "without a function"),
        ("pkg.mod:not-a-name", "malformed"),
        (":main", "malformed"),
        ("1pkg:main", "not a module name"),
    ],
)
def test_bad_entrypoint_exits_2_naming_it(tmp_path: Path, entry: str, message: str) -> None:
    proc = launch(tmp_path, entry)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_entry_naming_a_missing_function_exits_2(tmp_path: Path) -> None:
    proc = launch(tmp_path, f"{BASICS}:no_such_function")
    assert proc.returncode == 2
    assert "'no_such_function' is not a function" in proc.stderr


def _topology_text(**changes: object) -> str:
    topo = topology(nodes=2)
    topo.update(changes)
    return json.dumps(topo)


BAD_TOPOLOGIES = [
    ("no-such-file.json", "neither an existing file nor inline JSON"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "topology must be a JSON object, got list"),
    ('{"schema": 2}', "'schema' is 2"),
    (_topology_text(nodes=[]), "'nodes' must be a non-empty list"),
    (_topology_text(head_port="29500"), "'head_port' is '29500'"),
    (_topology_text(head_port=70000), "'head_port' is 70000"),
    (_topology_text(head_addr=""), "'head_addr'"),
    (_topology_text(cluster=None), "'cluster'"),
    (
        _topology_text(nodes=[{"index": 0, "public_ip": None, "instance_id": "i"}]),
        "nodes[0] field 'private_ip' is missing",
    ),
    (
        _topology_text(
            nodes=[
                {"index": 0, "private_ip": "10.0.0.1", "instance_id": "a"},
                {"index": 0, "private_ip": "10.0.0.2", "instance_id": "b"},
            ]
        ),
        "expected 0..1, each once",
    ),
    (
        _topology_text(
            nodes=[
                {
                    "index": 0,
                    "private_ip": "10.0.0.1",
                    "instance_id": "a",
                    "accelerator": {"type": "H100", "count": "8"},
                }
            ]
        ),
        "nodes[0].accelerator field 'count'",
    ),
    (_topology_text(procs_per_node=0), "'procs_per_node' is 0"),
    (_topology_text(plugins=[{"name": "horovod"}]), "unknown plugin 'horovod'"),
    (
        _topology_text(plugins=[{"name": "jax", "options": {"coordinator": "x"}}]),
        "plugin 'jax' has no option 'coordinator'",
    ),
    (
        _topology_text(plugins=[{"name": "keras", "options": {"backend": "theano"}}]),
        "keras backend 'theano' is not valid",
    ),
    (
        _topology_text(plugins=[{"name": "torch", "options": {"backend": "ucc"}}]),
        "torch backend 'ucc' is not valid",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_TOPOLOGIES)
def test_bad_topology_exits_3_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    proc = launch(tmp_path, "--topology", text, f"{BASICS}:info")
    assert proc.returncode == 3, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("node", "message"), [("2", "out of range"), ("one", "not an integer")])
def test_bad_node_index_exits_3(tmp_path: Path, node: str, message: str) -> None:
    proc = launch(tmp_path, "--topology", _topology_text(), "--node", node, f"{BASICS}:info")
    assert proc.returncode == 3
    assert message in proc.stderr


def test_topology_and_node_from_the_environment(tmp_path: Path) -> None:
    env = {"SKYINFRA_TOPOLOGY": _topology_text(), "SKYINFRA_NODE": "5", "PATH": "/usr/bin"}
    proc = launch(tmp_path, f"{BASICS}:info", env=env)
    assert proc.returncode == 3
    assert "node index 5 is out of range" in proc.stderr


def test_bad_plugin_flag_exits_2(tmp_path: Path) -> None:
    proc = launch(tmp_path, "--plugin", "jax:init_timeout", f"{BASICS}:info")
    assert proc.returncode == 2
    assert "not key=value" in proc.stderr


def test_interrupt_ends_the_worker_and_exits_130(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        launch_argv(f"{BASICS}:sleep_forever"),
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        interrupt_after(proc, "sleeping")
        assert proc.wait(timeout=30) == 130
    finally:
        proc.kill()


def test_a_sigterm_to_the_launchers_group_ends_each_worker_once_without_a_traceback(
    tmp_path: Path,
) -> None:
    """As the job's agent ends a node: SIGTERM to the launcher's whole group, which the
    launcher forwards to its workers again. The second one used to land in the worker's
    teardown and cut it short with a traceback (4 runs in 5 here); a race, so five runs."""
    for _ in range(5):
        proc = launch_in_its_own_group(tmp_path, f"{BASICS}:sleep_forever")
        try:
            until_first_line(proc, "sleeping")
            os.killpg(proc.pid, signal.SIGTERM)
            rest = rest_of_output(proc)
            assert proc.wait(timeout=30) == 130, rest
        finally:
            proc.kill()
        assert "Traceback" not in rest and "_Terminated" not in rest, rest


def test_a_sigterm_lost_in_a_finalizer_leaves_the_worker_ending_on_the_next(
    tmp_path: Path,
) -> None:
    """Python drops an exception raised in a __del__, so a SIGTERM handled while one ran was
    lost; the worker, which let only its first SIGTERM raise, then ignored every later one and
    ran on (until the agent's SIGKILL, its teardown skipped; a launcher run by hand: for
    ever)."""
    proc = launch_in_its_own_group(
        tmp_path, f"{BASICS}:sleep_forever_after_a_sigterm_lost_in_a_finalizer"
    )
    try:
        seen = until_first_line(proc, "sleeping")
        assert any("Exception ignored in" in line for line in seen), seen  # the lost one
        os.killpg(proc.pid, signal.SIGTERM)
        rest = rest_of_output(proc, 60)  # a bound on a hang: the worker sleeps 600 s
        assert proc.wait(timeout=30) == 130, rest
    finally:
        proc.kill()


def test_workers_run_on_the_launchers_interpreter(tmp_path: Path) -> None:
    """Every worker process is started with the interpreter the launcher runs on (the node's
    venv), never a `python` found on PATH."""
    runs = run_nodes(tmp_path, topology(nodes=1, procs_per_node=2), f"{BASICS}:interpreter")
    (run,) = runs
    assert run.returncode == 0, run.stderr
    assert run.values() == [sys.executable, sys.executable]


def test_plugin_flag_values_are_json_and_checked_by_the_table(tmp_path: Path) -> None:
    # Commas inside the list do not split options; the table then refuses a mesh without
    # axis names and layout map, before any peer is waited for. A bad flag is the user's
    # usage (exit 2, issue 8), not a set-up failure.
    proc = launch(
        tmp_path, "--plugin", "jax", "--plugin", "keras:mesh_shape=[1, 2]", f"{BASICS}:info"
    )
    assert proc.returncode == 2, proc.stderr
    assert "mesh_shape, axis_names and layout_map together" in proc.stderr
    assert "Traceback" not in proc.stderr


def console_script(tmp_path: Path) -> Path:
    """`skyinfra-runtime` as pip installs it: a script in a bin/ folder, so that sys.path[0]
    is that folder, not the current directory (unlike `python -m`)."""
    script = tmp_path / "bin" / "skyinfra-runtime"
    script.parent.mkdir()
    script.write_text("from skyinfra_runtime.launcher import main\n\nmain()\n")
    return script


def test_module_entry_from_the_project_in_the_current_directory(tmp_path: Path) -> None:
    """The project (the launcher's cwd, as `skyinfra run` starts it) is found without any
    PYTHONPATH of the user's: first on the launcher's sys.path and on the workers'."""
    project = tmp_path / "project"
    (project / "mypkg").mkdir(parents=True)
    (project / "mypkg" / "__init__.py").write_text("")
    (project / "mypkg" / "train.py").write_text(
        "import os, sys\n\n\ndef main():\n"
        "    return {'cwd': os.getcwd(), 'path0': sys.path[0], 'file': __file__}\n"
    )
    # A module of the same name elsewhere on the path must not win over the project's.
    other = tmp_path / "other" / "mypkg"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise ImportError('the wrong mypkg')\n")
    env = launcher_env()
    env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), str(other.parent)])
    result = tmp_path / "result.json"
    script = str(console_script(tmp_path))
    proc = subprocess.run(
        [sys.executable, script, "launch", "--result", str(result), "mypkg.train:main"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (worker,) = json.loads(result.read_text())["workers"]
    assert worker["value"]["file"] == str(project / "mypkg" / "train.py")
    assert worker["value"]["cwd"] == str(project)


def test_a_worker_killed_by_a_signal_is_not_reported_as_user_code_raising(
    tmp_path: Path,
) -> None:
    (tmp_path / "die.py").write_text(
        "import os, signal\n\n\ndef main():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = launch(tmp_path, "die.py:main")
    assert proc.returncode == 128 + 9, proc.stderr
    assert "worker 0 on node 0 was killed by signal SIGKILL during running" in proc.stderr
    from skyinfra_runtime.exitcodes import describe

    assert describe(proc.returncode) == "a worker was killed by signal SIGKILL"
    assert describe(-9) == "killed by signal SIGKILL"


def test_workers_die_with_a_killed_launcher(tmp_path: Path) -> None:
    """SIGKILL to the launcher alone: its worker does not linger (holding the node's output
    open and its peers waiting), and the workers' result and status files it could not clean
    up are in the run's directory (they go with the run), not in the node's /tmp."""
    (tmp_path / "hang.py").write_text(
        "import os, time\n\n\ndef main():\n"
        "    open('worker.pid', 'w').write(str(os.getpid()))\n"
        "    time.sleep(600)\n"
    )
    temp, run_dir = tmp_path / "tmp", tmp_path / "node" / "runs" / "20260101-000000-000000-abcd"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "SKYINFRA_RUN_DIR": str(run_dir)}
    proc = subprocess.Popen(launch_argv("hang.py:main"), cwd=tmp_path, env=env)
    pid_file = tmp_path / "worker.pid"
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(worker, signal.SIGKILL)
        raise AssertionError("the worker outlived its launcher")
    assert list(temp.iterdir()) == []
    assert len([p for p in run_dir.iterdir() if p.name.startswith(".launch-")]) == 1


def test_a_worker_killed_before_the_launchers_sigterm_is_the_launchers_exit(
    tmp_path: Path,
) -> None:
    """A worker killed by a signal, then the job's ending of its node (SIGTERM to the launcher,
    as when a peer's collective failed because of that death and its node ended first): the
    launcher exits 137, a killed worker (the job's record then names this node as the cause,
    and restarts it), never 130 (ended by the job) nor -15 (killed while it exited)."""
    (tmp_path / "die.py").write_text(
        "import os, signal\n\n\ndef main():\n"
        "    open('worker.pid', 'w').write(str(os.getpid()))\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.Popen(
        launch_argv("die.py:main"), cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    pid_file = tmp_path / "worker.pid"

    def dead() -> bool:  # a zombie its launcher has not reaped yet, or reaped
        text = pid_file.read_text() if pid_file.is_file() else ""
        return bool(text) and not alive(int(text))

    try:
        # Polled fast on purpose: the SIGTERM should land while the launcher has not yet
        # seen the death (it looks every 0.05 s), the order that lost the worker's code.
        deadline = time.monotonic() + 60
        while not dead() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 137, err
    assert "was killed by signal SIGKILL" in err


def test_the_shared_dir_is_made_and_old_runs_pruned(tmp_path: Path) -> None:
    node = tmp_path / "node"
    runs = node / "runs"
    ids = [f"20260101-00000{i}-abcdef" for i in range(6)]
    for run_id in ids:
        (runs / run_id / "work").mkdir(parents=True)
    (runs / "my-notes").mkdir()  # not a run id: never touched
    (node / "pids").mkdir()
    (node / "pids" / f"{ids[0]}.pid").write_text(str(os.getpid()))  # alive, but not a launcher
    (node / "pids" / f"{ids[1]}.pid").write_text("999999999")  # gone
    current = runs / ids[3]  # the newest is not necessarily the current one
    env = {
        "SKYINFRA_NODE_DIR": str(node),
        "SKYINFRA_RUN_DIR": str(current),
        "SKYINFRA_SHARED_DIR": str(node / "shared"),
        "SKYINFRA_KEEP_RUNS": "3",
    }
    from skyinfra_runtime.rundirs import prepare

    removed = prepare(env)
    assert sorted(p.name for p in removed) == ids[:3]
    assert sorted(p.name for p in runs.iterdir()) == sorted([*ids[3:], "my-notes"])
    assert (node / "shared").is_dir()
    # 0: keep every run.
    assert prepare({**env, "SKYINFRA_KEEP_RUNS": "0"}) == []


OLD_RUN, CURRENT_RUN = "20260101-000000-aaaaaa", "20260101-000001-bbbbbb"


@contextlib.contextmanager
def old_run_held_by(tmp_path: Path, argv: list[str], marker: bytes) -> Iterator[Path]:
    """A node folder with two runs whose older one's pid file names a live process started
    from ``argv`` (once its command line shows ``marker``: it has exec'd); the runs folder."""
    runs = tmp_path / "node" / "runs"
    (runs / OLD_RUN).mkdir(parents=True)
    (runs / CURRENT_RUN).mkdir()
    pids = tmp_path / "node" / "pids"
    pids.mkdir()
    sleeper = subprocess.Popen(argv)
    try:
        cmdline = Path(f"/proc/{sleeper.pid}/cmdline")
        deadline = time.monotonic() + 30
        while marker not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)  # until the child has exec'd
        (pids / f"{OLD_RUN}.pid").write_text(str(sleeper.pid))
        yield runs
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_live_process_that_only_lives_under_a_skyinfra_folder_is_not_a_launcher(
    tmp_path: Path,
) -> None:
    """A pid file naming a live process whose command line passes through a folder called
    skyinfra (a checkout, a venv: this suite's own workers in a clone named so) but is no
    launcher: its run is pruned like any finished one."""
    from skyinfra_runtime.rundirs import prune

    folder = tmp_path / "skyinfra" / "skyinfra-cold.x"
    folder.mkdir(parents=True)
    script = folder / "sleep.py"
    script.write_text("import time\ntime.sleep(60)\n")
    with old_run_held_by(tmp_path, [sys.executable, str(script)], b"sleep.py") as runs:
        removed = prune(runs / CURRENT_RUN, 1, runs.parent / "pids")
        assert [p.name for p in removed] == [OLD_RUN]


def test_a_run_still_going_is_not_pruned(tmp_path: Path) -> None:
    from skyinfra_runtime.rundirs import prune

    argv = [sys.executable, "-c", "import time; time.sleep(60)", "skyinfra"]
    with old_run_held_by(tmp_path, argv, b"skyinfra") as runs:
        assert prune(runs / CURRENT_RUN, 1, runs.parent / "pids") == []
        assert (runs / OLD_RUN).is_dir()


def test_a_node_that_cannot_keep_standbys_still_runs_the_job(tmp_path: Path) -> None:
    """Asking for standbys (as a job starts on a node with cores to spare, or once its part
    ended) failed the launcher with a traceback when the node's standbys folder could not be
    written (a full disk): after the job's part, or inside its SIGTERM handler, where the
    workers then died with it. Here a file stands where the folder goes."""
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    standbys.folder(node_dir).write_text("")
    env = launcher_env(SKYINFRA_NODE_DIR=str(node_dir))
    topo = json.dumps(topology(nodes=1, plugins=[{"name": "jax", "options": {}}]))
    proc = launch(tmp_path, "--topology", topo, f"{BASICS}:info", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "skyinfra-runtime: standby workers not asked for (" in proc.stderr, proc.stderr
    assert "the next job on this node starts cold" in proc.stderr
