"""The records `down` ends a local node's processes by: the node mark in every process's
environment and pid files with the process's start time (real processes)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from skyinfra.spec import validate_spec
from skyinfra.targets.local.processes import NODE_ENV, end_processes, marked_processes, start_time
from skyinfra.targets.local.target import LocalTarget
from skyinfra.targets.local.transport import LocalTransport
from skyinfra.workspace import Workspace
from tests.support.spawner import node_pids, start_spawner
from tests.support.workers import kill_all


def test_node_processes_carry_the_node_mark_and_pid_files_the_start_time(tmp_path: Path) -> None:
    node = tmp_path / "nodes" / "node-0"
    (node / "pids").mkdir(parents=True)
    (node / ".skyinfra-node").touch()
    proc = LocalTransport({0: node}).start(
        0, ["sh", "-c", f'echo "${NODE_ENV}"; sleep 300'], env={}, cwd=str(tmp_path), tag="t"
    )
    try:
        assert next(iter(proc.lines())) == str(node)
        assert proc._popen.pid in marked_processes([node])
        assert proc._popen.pid in marked_processes([tmp_path / "nodes"])
        assert marked_processes([tmp_path / "nodes" / "node-1"]) == []
        pid, start = (node / "pids" / "t.pid").read_text().split()
        assert int(pid) == proc._popen.pid
        assert start == start_time(int(pid))
    finally:
        proc.kill()


def test_end_processes_ends_marked_processes_only(tmp_path: Path) -> None:
    node = tmp_path / "nodes" / "node-0"
    marked = subprocess.Popen(["sleep", "300"], env={NODE_ENV: str(node), "PATH": "/usr/bin:/bin"})
    other = subprocess.Popen(["sleep", "300"], env={NODE_ENV: str(tmp_path / "elsewhere")})
    try:
        assert end_processes([tmp_path / "nodes"], grace_s=2) == [marked.pid]
        assert marked.wait(timeout=5) is not None
        assert other.poll() is None
    finally:
        for proc in (marked, other):
            proc.kill()
            proc.wait()


def test_end_processes_ends_the_children_a_process_starts_while_it_is_ended(
    tmp_path: Path,
) -> None:
    # A launcher's SIGTERM handler asks for a standby keeper; a keeper starts a standby just
    # before its KILL: one KILL of what a look found left those (a standby outlived `down`).
    node = tmp_path / "nodes" / "node-0"
    spawner = start_spawner(node)
    try:
        assert end_processes([tmp_path / "nodes"], grace_s=0.5)[0] == spawner.pid
        assert spawner.wait(timeout=5) == -9
        assert node_pids(node) == []
    finally:
        kill_all([spawner.pid, *node_pids(node)])


def test_down_does_not_name_a_node_process_that_is_still_ending(tmp_path: Path) -> None:
    # A process keeps its working directory until late in its exit, after its memory (and
    # the environment that marks it as a node's) is gone: freeing a standby's frameworks takes
    # a while, and `down` named a standby it had just ended as left behind.
    ws = Workspace(tmp_path / "ws")
    folder = ws.nodes_dir / "node-0" / "standby"
    folder.mkdir(parents=True)
    big = "b = bytearray(1 << 29); print('ready', flush=True); import time; time.sleep(300)"
    ending = subprocess.Popen([sys.executable, "-c", big], cwd=folder, stdout=subprocess.PIPE)
    try:
        assert ending.stdout is not None and ending.stdout.readline() == b"ready\n"
        shutil.rmtree(ws.nodes_dir)
        ending.kill()
        spec = validate_spec({"name": "c", "nodes": 1})
        assert LocalTarget().leftovers(ws, spec, echo=print) == []
    finally:
        ending.kill()
        ending.wait()


def test_start_time_reads_past_a_command_name_with_spaces(tmp_path: Path) -> None:
    odd = tmp_path / "a b) c d"  # the command name in /proc/PID/stat: "(a b) c d)"
    shutil.copyfile(shutil.which("sleep") or "/bin/sleep", odd)
    odd.chmod(0o755)
    proc = subprocess.Popen([str(odd), "300"])
    plain = subprocess.Popen(["sleep", "300"])
    try:
        assert start_time(proc.pid) is not None
        # Both started within the same few clock ticks, nothing like another field.
        assert abs(int(start_time(proc.pid) or 0) - int(start_time(plain.pid) or 0)) < 500
    finally:
        plain.kill()
        plain.wait()
        proc.kill()
        proc.wait()
    assert start_time(proc.pid) is None
