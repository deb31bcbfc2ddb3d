"""The workspace lock's modes (issue 47): submissions share it, everything else holds it
alone, and a shared holder that must change the cluster (an attached `run` replacing its lost
nodes) gets it alone only while no other command holds it, keeping its own hold either way.
Files two sharing commands may both write are replaced through temporary files of their own."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyinfra.errors import WorkspaceBusyError
from skyinfra.lock_holders import HOLDERS_DIR
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
        with ws.lock("run b.py", shared=True), refused as upgrade, hold.exclusively():
            pass
        assert "run a.py" not in str(upgrade.value)  # the refused one is not its own obstacle
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


# A submission in a process of its own, holding the workspace shared until its stdin closes.
HOLD_SHARED = """
import sys
from pathlib import Path
from skyinfra.workspace import Workspace
with Workspace(Path(sys.argv[1])).lock(sys.argv[2], shared=True):
    print("held", flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def holding(ws: Workspace, command: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_SHARED, str(ws.path), command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        yield proc
    finally:
        leave(proc)


def leave(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        assert proc.stdin is not None
        proc.stdin.close()
    proc.wait(timeout=60)


def refusal(ws: Workspace) -> str:
    with pytest.raises(WorkspaceBusyError) as refused, ws.lock("up"):
        pass
    return str(refused.value)


def named(proc: subprocess.Popen[str], command: str) -> str:
    return f"`skyinfra {command}` (pid {proc.pid} on "


def test_a_refusal_names_every_live_holder_and_no_dead_one(tmp_path: Path) -> None:
    """Several submissions share the lock: the refusal of an exclusive command names each one
    still holding it (the lock file held one holder: the last to leave but one emptied it while
    another held on, and the refusal said "another skyinfra command"); one killed with SIGKILL
    leaves its file behind but is not named, and the next command alone removes the file."""
    ws = Workspace(tmp_path / "holders")
    with holding(ws, "run a.py") as a, holding(ws, "run b.py") as b:
        said = refusal(ws)
        assert named(a, "run a.py") in said and named(b, "run b.py") in said, said
        assert " hold it " in said and "wait for them" in said, said
        leave(b)
        said = refusal(ws)
        assert named(a, "run a.py") in said and "run b.py" not in said, said
        with holding(ws, "run c.py") as c:
            a.kill()
            a.wait(timeout=60)
            files = list((ws.path / HOLDERS_DIR).iterdir())
            assert sorted(f.name.split("-")[0] for f in files) == sorted([str(a.pid), str(c.pid)])
            assert {oct(f.stat().st_mode & 0o777) for f in files} == {"0o600"}
            assert oct((ws.path / HOLDERS_DIR).stat().st_mode & 0o777) == "0o700"
            said = refusal(ws)
            assert named(c, "run c.py") in said and "run a.py" not in said, said
    assert ws.lock_holders() == []
    with ws.lock("up"):
        assert [h.command for h in ws.lock_holders()] == ["up"]
    assert list((ws.path / HOLDERS_DIR).iterdir()) == []


def test_a_holder_file_whose_pid_another_process_took_is_not_named(tmp_path: Path) -> None:
    """A holder killed with SIGKILL leaves its file, and the kernel may give its pid to a later
    process: that process is not the holder (its start time is not the one the file
    records). Posed with a live holder's pid and an earlier start than its own."""
    ws = Workspace(tmp_path / "reused")
    with holding(ws, "run a.py") as a:
        [own] = (ws.path / HOLDERS_DIR).glob(f"{a.pid}-*.json")
        stat = Path(f"/proc/{a.pid}/stat").read_text()
        started = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: ticks after boot
        earlier = dict(json.loads(own.read_text()), command="run old.py", started=started - 1)
        stale = ws.path / HOLDERS_DIR / f"{a.pid}-0000beef.json"
        stale.write_text(json.dumps(earlier))
        os.utime(stale, ns=(0, 0))  # written before a's own file
        said = refusal(ws)
        assert named(a, "run a.py") in said and "run old.py" not in said, said
        assert [h.command for h in ws.lock_holders()] == ["run a.py"]


def test_holders_taken_within_one_tick_of_the_file_clock_are_listed_in_the_order_taken(
    tmp_path: Path,
) -> None:
    """File times come from the kernel's coarse clock (a tick of a few ms): two holds taken
    within one tick have the same mtime, and their files' names (pid and a random token) then
    decided the order. Here the two files carry one mtime and names that sort the other way."""
    ws = Workspace(tmp_path / "tick")
    with ws.lock("run a.py", shared=True), ws.lock("run b.py", shared=True):
        folder = ws.path / HOLDERS_DIR
        by_command = {json.loads(p.read_text())["command"]: p for p in folder.glob("*.json")}
        first = by_command["run a.py"].rename(folder / f"{os.getpid()}-ffffffff.json")
        second = by_command["run b.py"].rename(folder / f"{os.getpid()}-00000000.json")
        same = first.stat().st_mtime_ns
        os.utime(first, ns=(same, same))
        os.utime(second, ns=(same, same))
        assert [h.command for h in ws.lock_holders()] == ["run a.py", "run b.py"]
        refused = pytest.raises(WorkspaceBusyError, match=r"run a\.py.* and .*run b\.py")
        with refused, ws.lock("up"):
            pass
