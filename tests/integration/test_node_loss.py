"""How the local resume proofs lose a node (tests/support/resume_proof.py), checked itself: a
lost node's processes end together, so none of them acts on another's end.

The folder was moved aside first and the processes killed as a scan of /proc found them: until
then they ran on, and one writing into the folder by its path made the folder anew, without
the marker bootstrap-node.sh leaves. `up` then refused to replace the node (a 6-worker
`make test`: tests/e2e/local/test_recovery.py's lost head)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from skyinfra.targets.local.processes import NODE_ENV
from tests.support.resume_proof import kill_node_processes, lose_node

# A stand-in for a node's supervisor: writes its heartbeat into the node's folder (by the
# absolute path its environment names, as the runtime's processes do) again and again.
SUPERVISOR = """
import pathlib, sys, time
beat = pathlib.Path(sys.argv[1])
while True:
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.write_text(str(time.time()))
    if not sys.stdout.closed:
        print("ready", flush=True)
        sys.stdout.close()
    time.sleep(0.0001)
"""


def start_supervisor(node_dir: Path) -> subprocess.Popen[str]:
    beat = node_dir / "runs" / "job" / "heartbeat"
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(beat)],
        env={**os.environ, NODE_ENV: str(node_dir)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert supervisor.stdout is not None and supervisor.stdout.readline() == "ready\n"
    return supervisor


def test_a_lost_node_writes_nothing_where_its_folder_was(tmp_path: Path) -> None:
    """Its processes are stopped before the folder goes: before, they ran on while the helper
    scanned /proc for them, and the heartbeat made the folder anew (this test failed)."""
    workspace = tmp_path / "cluster"
    node_dir = workspace / "nodes" / "node-0"
    node_dir.mkdir(parents=True)
    supervisor = start_supervisor(node_dir)
    lose_node(workspace, 0)
    assert supervisor.wait(timeout=30) == -9
    assert not node_dir.exists(), sorted(node_dir.rglob("*"))
    assert list((workspace / "nodes").iterdir()) == []


def test_killed_node_processes_leave_the_folder(tmp_path: Path) -> None:
    workspace = tmp_path / "cluster"
    node_dir = workspace / "nodes" / "node-0"
    node_dir.mkdir(parents=True)
    (node_dir / ".skyinfra-node").write_text("")
    supervisor = start_supervisor(node_dir)
    kill_node_processes(workspace, 0)
    assert supervisor.wait(timeout=30) == -9
    assert (node_dir / ".skyinfra-node").exists()
