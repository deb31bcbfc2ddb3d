"""The workspace lock's modes (issue 47): submissions share it, everything else holds it
alone, and a shared holder that must change the cluster (an attached `run` replacing its lost
nodes) gets it alone only while no other command holds it, keeping its own hold either way.
Files two sharing commands may both write are replaced through temporary files of their own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skyinfra.errors import WorkspaceBusyError
from skyinfra.workspace import Workspace, write_private


def test_two_attached_runs_share_and_up_down_verify_are_refused(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "two")
    with ws.lock("run a.py", shared=True), ws.lock("run b.py", shared=True):
        for command in ("up", "down", "verify", "run --verify c.py"):
            refused = pytest.raises(WorkspaceBusyError, match=r"`skyinfra run b\.py` \(pid ")
            with refused, ws.lock(command):
                pass
    refused = pytest.raises(WorkspaceBusyError, match="skyinfra down")
    with ws.lock("down"), refused, ws.lock("run a.py", shared=True):
        pass


def test_a_shared_holder_gets_the_workspace_alone_only_while_nobody_else_holds_it(
    tmp_path: Path,
) -> None:
    ws = Workspace(tmp_path / "alone")
    with ws.lock("run a.py", shared=True) as hold:
        refused = pytest.raises(WorkspaceBusyError, match=r"skyinfra run b\.py")
        with ws.lock("run b.py", shared=True), refused, hold.exclusively():
            pass
        # The failed attempt kept the hold: an `up` is still refused.
        with pytest.raises(WorkspaceBusyError), ws.lock("up"):
            pass
        # Alone: even another submission is refused meanwhile.
        refused = pytest.raises(WorkspaceBusyError)
        with hold.exclusively(), refused, ws.lock("run c.py", shared=True):
            pass
        # Shared again: submissions join, `up` is still refused.
        with ws.lock("run d.py", shared=True):
            pass
        with pytest.raises(WorkspaceBusyError), ws.lock("up"):
            pass
    with ws.lock("up") as alone, alone.exclusively():  # an exclusive hold is alone already
        pass


def test_a_write_leaves_another_writers_temporary_file_alone(tmp_path: Path) -> None:
    """Two commands sharing the workspace may replace one file (topology.json) at once: the
    temporary file of one is never the other's (it was `.NAME.tmp` for every writer, and the
    second removed the first's before its rename)."""
    target = tmp_path / "topology.json"
    other = tmp_path / ".topology.json.tmp"  # what another writer has half written
    other.write_text("{}")
    write_private(target, '{"nodes": []}\n')
    assert other.read_text() == "{}"
    assert target.read_text() == '{"nodes": []}\n'
    assert oct(os.stat(target).st_mode & 0o777) == "0o600"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".topology.json.tmp", "topology.json"], left
