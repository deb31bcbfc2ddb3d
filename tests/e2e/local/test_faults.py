"""Faults on the local target, with real Terraform and real processes (no mocks): `up` killed
while Terraform applies, a node folder deleted by hand, a stale pid file, a state write that
fails. Each ends with the same check: the next `up` converges and `down` leaves nothing (no
node folder, no process of the cluster, empty state).

The runtime wheel comes from the minimal runtime tree (conftest): these tests are about
Terraform, the bootstrap and the operator, not the runtime.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyinfra import exitcodes
from skyinfra.targets.local.transport import LocalTransport
from skyinfra.terraform._embedded import SCRIPT as EMBEDDED_SCRIPT
from skyinfra.workspace import Workspace
from tests.conftest import skyinfra_argv
from tests.support.local_jobs import cli
from tests.support.workers import alive

pytestmark = pytest.mark.slow

NAME = "faults"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel cache for the module: the runtime wheel is built once."""
    return tmp_path_factory.mktemp("faults-cache")


@pytest.fixture
def env(clean_env: dict[str, str], minimal_runtime_dir: Path, shared_cache: Path) -> dict[str, str]:
    return {
        **clean_env,
        "SKYINFRA_RUNTIME_DIR": str(minimal_runtime_dir),
        "SKYINFRA_CACHE": str(shared_cache / "cache"),
        "SKYINFRA_TF_PLUGIN_CACHE": str(shared_cache / "tf-plugins"),
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "project"
    proj.mkdir()
    return proj


def workspace(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


def up(project: Path, env: dict[str, str], nodes: int = 2) -> subprocess.CompletedProcess[str]:
    return cli(["up", "--name", NAME, "--nodes", str(nodes)], project, env)


def state_list(project: Path, env: dict[str, str]) -> list[str]:
    result = cli(["tf", "--cluster", NAME, "--", "state", "list"], project, env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.split()


def readiness(project: Path, env: dict[str, str]) -> dict[str, str]:
    """Each node's readiness by `status --json`, which exits CLUSTER_UNHEALTHY when one failed."""
    result = cli(["status", "--cluster", NAME, "--json"], project, env)
    found = {n["name"]: n["readiness"] for n in json.loads(result.stdout)["nodes"]}
    failed = "failed" in found.values()
    expected = exitcodes.CLUSTER_UNHEALTHY if failed else exitcodes.OK
    assert result.returncode == expected, result.stdout + result.stderr
    assert json.loads(result.stdout)["healthy"] is not failed
    return found


def terraform_running(ws: Path) -> bool:
    """Whether a Terraform child still works in ``ws`` (its cwd)."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(entry / "cwd")) != ws:
                continue
            if EMBEDDED_SCRIPT.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                return True
        except OSError:
            continue
    return False


def wait_for_terraform(ws: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while terraform_running(ws):
        assert time.monotonic() < deadline, "Terraform still running in the workspace"
        time.sleep(0.2)


def cluster_processes(ws: Path) -> list[str]:
    """Every process of the cluster: one whose command line or environment names a node
    folder (the transport marks each node's processes with SKYINFRA_LOCAL_NODE_DIR)."""
    nodes = str(ws / "nodes").encode()
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        if int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if nodes in cmdline or b"SKYINFRA_LOCAL_NODE_DIR=" + nodes in environ:
            out.append(f"{entry.name}: {cmdline!r}")
    return out


def down_leaves_nothing(project: Path, env: dict[str, str]) -> None:
    ws = workspace(project)
    down = cli(["down", "--yes", "--cluster", NAME], project, env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not list((ws / "nodes").glob("*")), "node folders left after down"
    assert state_list(project, env) == []
    assert cluster_processes(ws) == [], "processes left after down"


def up_converges(project: Path, env: dict[str, str]) -> None:
    again = up(project, env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert readiness(project, env) == {"node-0": "ready", "node-1": "ready"}
    assert not (workspace(project) / "skyinfra.tfplan").exists()


def up_interrupted(project: Path, env: dict[str, str], sig: signal.Signals) -> str:
    """`skyinfra up` of two nodes, ``sig`` sent to its process group (as a terminal's Ctrl-C
    or hang-up, or a supervisor, does) once Terraform has started creating the nodes."""
    proc = subprocess.Popen(
        [*skyinfra_argv(), "up", "--name", NAME, "--nodes", "2"],
        cwd=project,
        # pip's bootstrap takes seconds where uv's takes a fraction of one: the signal below
        # then lands inside the bootstrap, which is what these tests interrupt.
        env={**env, "SKYINFRA_NODE_INSTALLER": "pip"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "Creating..." in line:
                time.sleep(0.5)  # into the node's bootstrap
                os.killpg(proc.pid, sig)
                break
        seen.append(proc.stdout.read())
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(seen)
    assert "Creating..." in output, output
    assert proc.returncode != 0, output
    return output


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name
)
def test_up_killed_during_apply_loses_no_node(
    project: Path, env: dict[str, str], sig: signal.Signals
) -> None:
    output = up_interrupted(project, env, sig)
    ws = workspace(project)
    # Terraform was allowed to finish: every node folder there is, its state knows.
    wait_for_terraform(ws)
    in_state = state_list(project, env)
    for node_dir in sorted((ws / "nodes").glob("node-*")):
        address = f'module.nodes.terraform_data.node["{node_dir.name}"]'
        assert address in in_state, f"{node_dir} exists, the state lost it:\n{output}"
    if sig != signal.SIGKILL:  # nothing runs a finally after SIGKILL
        assert "saved its state" in output, output
        assert not (ws / "skyinfra.tfplan").exists(), "the saved plan outlived `up`"
    up_converges(project, env)
    down_leaves_nothing(project, env)


def test_status_of_an_interrupted_up_says_incomplete_and_what_to_run(
    project: Path, env: dict[str, str]
) -> None:
    """Ctrl-C during `up` left resources in the state and no topology.json; `status` said
    `up, 2 resource(s)` and exited 0 while `run` said the cluster is down (issue 42, item 5).
    The SIGINT lands once a node's bootstrap has begun (its folder exists), so that Terraform,
    allowed to finish, leaves that node in the state."""
    ws = workspace(project)
    proc = subprocess.Popen(
        [*skyinfra_argv(), "up", "--name", NAME, "--nodes", "2"],
        cwd=project,
        env={**env, "SKYINFRA_NODE_INSTALLER": "pip"},  # a bootstrap of seconds to land in
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list((ws / "nodes").glob("node-*/.skyinfra-node")):
            assert proc.poll() is None and time.monotonic() < deadline, "no node bootstrap began"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == exitcodes.INTERRUPTED, output
    wait_for_terraform(ws)
    assert state_list(project, env) and not (ws / "topology.json").exists(), output
    status = cli(["status", "--cluster", NAME], project, env)
    assert status.returncode == exitcodes.CLUSTER_UNHEALTHY, status.stdout + status.stderr
    assert f"cluster {NAME} (local): incomplete," in status.stdout
    assert "an `up` did not finish (interrupted, or it failed)" in status.stdout
    assert f"`skyinfra up --name {NAME}` again to finish it" in status.stdout
    assert f"`skyinfra down --cluster {NAME}`" in status.stdout
    as_json = cli(["status", "--cluster", NAME, "--json"], project, env)
    assert as_json.returncode == exitcodes.CLUSTER_UNHEALTHY, as_json.stdout + as_json.stderr
    info = json.loads(as_json.stdout)
    assert info["state"] == "incomplete" and info["healthy"] is False
    assert "an `up` did not finish" in info["problems"][0]
    # `run` agrees with `status`: not "down", but part-made, with the same two ways out.
    run = cli(["run", "--cluster", NAME, "work.py:main"], project, env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"cluster '{NAME}' is not up: an `up` did not finish" in run.stderr, run.stderr
    assert f"`skyinfra up --name {NAME}` again to finish it" in run.stderr, run.stderr
    with Workspace(ws).lock("up"):  # while an `up` holds the cluster, wait for that one
        busy = cli(["status", "--cluster", NAME], project, env)
    assert busy.returncode == exitcodes.CLUSTER_UNHEALTHY, busy.stdout + busy.stderr
    assert f"`skyinfra up` (pid {os.getpid()}) is changing the cluster now" in busy.stdout
    # What it says to run finishes the cluster; then it is up and healthy.
    up_converges(project, env)
    finished = cli(["status", "--cluster", NAME, "--json"], project, env)
    assert finished.returncode == 0 and json.loads(finished.stdout)["state"] == "up"
    down_leaves_nothing(project, env)


def test_up_applies_a_plan_that_changes_only_outputs(project: Path, env: dict[str, str]) -> None:
    """Terraform stopped after it saved the nodes but before the outputs: `up` must apply the
    output-only plan rather than call it "no changes" and fail reading the outputs."""
    first = up(project, env)
    assert first.returncode == 0, first.stdout + first.stderr
    state_file = workspace(project) / "terraform.tfstate"
    state = json.loads(state_file.read_text())
    state["outputs"] = {}
    state["serial"] += 1
    state_file.write_text(json.dumps(state))
    up_converges(project, env)
    down_leaves_nothing(project, env)


def start_on_node(ws: Path, node: int, tag: str) -> int:
    """A long process on a node, started the way `run` starts one; its pid."""
    dirs = {i: ws / "nodes" / f"node-{i}" for i in range(2)}
    proc = LocalTransport(dirs).start(node, ["sleep", "300"], env={}, cwd=str(dirs[node]), tag=tag)
    return proc._popen.pid


def test_up_repairs_a_node_folder_deleted_by_hand(project: Path, env: dict[str, str]) -> None:
    first = up(project, env)
    assert first.returncode == 0, first.stdout + first.stderr
    ws = workspace(project)
    shutil.rmtree(ws / "nodes" / "node-1")
    assert readiness(project, env) == {"node-0": "ready", "node-1": "failed"}
    # A failed node is not a healthy cluster: `status` says so and exits non-zero (issue 42).
    status = cli(["status", "--cluster", NAME], project, env)
    assert status.returncode == exitcodes.CLUSTER_UNHEALTHY, status.stdout + status.stderr
    assert "node-1: 127.0.0.3 local-faults-1 FAILED" in status.stdout
    repaired = up(project, env)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert readiness(project, env) == {"node-0": "ready", "node-1": "ready"}
    assert 'replacing broken node(s): module.nodes.terraform_data.node["node-1"]' in (
        repaired.stdout
    )
    down_leaves_nothing(project, env)


def test_down_ends_the_processes_of_a_deleted_node(project: Path, env: dict[str, str]) -> None:
    first = up(project, env)
    assert first.returncode == 0, first.stdout + first.stderr
    ws = workspace(project)
    pid = start_on_node(ws, 1, "job")
    try:
        shutil.rmtree(ws / "nodes" / "node-1")  # its pid file goes with it
        assert alive(pid)
        down_leaves_nothing(project, env)
        assert not alive(pid), "down left the deleted node's process running"
    finally:
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_down_never_signals_a_process_that_reused_a_stale_pid(
    project: Path, env: dict[str, str]
) -> None:
    first = up(project, env, nodes=2)
    assert first.returncode == 0, first.stdout + first.stderr
    ws = workspace(project)
    # An unrelated process group, as a pid reused after `run` was killed would be; the pid
    # files name it, without its start time (an old file) or with another one.
    bystanders = [subprocess.Popen(["sleep", "300"], start_new_session=True) for _ in range(2)]
    try:
        (ws / "nodes" / "node-0" / "pids" / "old.pid").write_text(f"{bystanders[0].pid}\n")
        (ws / "nodes" / "node-1" / "pids" / "stale.pid").write_text(f"{bystanders[1].pid} 1\n")
        down_leaves_nothing(project, env)
        for proc in bystanders:
            assert proc.poll() is None, f"down signalled the unrelated process {proc.pid}"
    finally:
        for proc in bystanders:
            proc.kill()
            proc.wait()


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """An 8 KiB tmpfs: two nodes' state (about 9 KiB) does not fit, one node's does."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def state_on(project: Path, env: dict[str, str], mount_point: Path) -> Path:
    """One node up, its state file moved onto ``mount_point`` (a symlink in its place)."""
    first = up(project, env, nodes=1)
    assert first.returncode == 0, first.stdout + first.stderr
    state_file = workspace(project) / "terraform.tfstate"
    shutil.copyfile(state_file, mount_point / "terraform.tfstate")
    state_file.unlink()
    state_file.symlink_to(mount_point / "terraform.tfstate")
    return state_file


def recover(project: Path, env: dict[str, str], state_file: Path, message: str) -> None:
    """Make the state writable again, run the command the error named, check both nodes."""
    state_file.unlink()
    shutil.copyfile(state_file.with_name("terraform.tfstate.backup"), state_file)
    command = re.search(r"^ +(skyinfra tf .* -- state push .*)$", message, re.M)
    assert command, message
    argv = shlex.split(command.group(1))
    pushed = cli(argv[1:], project, env)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert len([a for a in state_list(project, env) if "terraform_data.node" in a]) == 2
    down_leaves_nothing(project, env)


def test_full_disk_during_state_write_keeps_errored_tfstate(
    project: Path, env: dict[str, str], tiny_tmpfs: Path
) -> None:
    state_file = state_on(project, env, tiny_tmpfs)
    failed = up(project, env, nodes=2)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    errored = workspace(project) / "errored.tfstate"
    assert "no space left on device" in failed.stderr
    assert f"the state it holds is in {errored}" in failed.stderr
    assert "--cluster faults -- state push errored.tfstate" in failed.stderr
    assert len(json.loads(errored.read_text())["resources"][0]["instances"]) == 2
    assert not (workspace(project) / "skyinfra.tfplan").exists()
    recover(project, env, state_file, failed.stderr)


def test_full_disk_and_no_room_for_errored_tfstate_keeps_the_printed_state(
    project: Path, env: dict[str, str], tiny_tmpfs: Path
) -> None:
    """Terraform can write neither the state nor errored.tfstate and prints the state:
    skyinfra saves it to a file and names it."""
    state_file = state_on(project, env, tiny_tmpfs)
    (workspace(project) / "errored.tfstate").mkdir()
    failed = up(project, env, nodes=2)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    saved = re.search(r"the state it holds is in (\S+)\.", failed.stderr)
    assert saved, failed.stderr
    dump = json.loads(Path(saved.group(1)).read_text())
    assert len(dump["resources"][0]["instances"]) == 2
    assert oct(Path(saved.group(1)).stat().st_mode & 0o777) == "0o600"
    recover(project, env, state_file, failed.stderr)
