"""SshTransport against a real sshd on 127.0.0.1, started by the test with throwaway keys."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from skyinfra.errors import TransportError
from skyinfra.transport.bootstrap import NODE_ENV_FILE
from skyinfra.transport.ssh import SshKeys, SshTarget, SshTransport
from skyinfra.transport.tree import scan


@pytest.fixture
def transport(sshd: tuple[SshTarget, Path], tmp_path: Path) -> Iterator[SshTransport]:
    target, key = sshd
    root = tmp_path / "node"
    ssh = SshTransport(
        {0: target}, keys=SshKeys(key, tmp_path / "known_hosts"), node_root=str(root)
    )
    yield ssh
    ssh.close()


def test_run_streams_output_with_env_and_cwd(transport: SshTransport, tmp_path: Path) -> None:
    work = tmp_path / "work dir"
    work.mkdir()
    proc = transport.start(
        0,
        ["sh", "-c", 'echo "cwd=$(pwd)"; echo "x=$SKY_X"; echo oops >&2; exit 3'],
        env={"SKY_X": "it's a value"},
        cwd=str(work),
        tag="t1",
    )
    lines = list(proc.lines())
    assert proc.wait(timeout=30) == 3
    assert lines == [f"cwd={work}", "x=it's a value", "oops"]
    assert (tmp_path / "known_hosts").read_text().startswith("[127.0.0.1]:")


def test_node_env_file_is_sourced_and_the_callers_env_wins(
    transport: SshTransport, tmp_path: Path
) -> None:
    """The node folder's node-env.sh (the user data writes efa-env.sh there with aws.efa)
    is sourced before every process; the variables `run` passes override it."""
    root = tmp_path / "node"
    root.mkdir()
    (root / NODE_ENV_FILE).write_text("export FI_PROVIDER=efa\nexport SKY_X=from-node\n")
    proc = transport.start(
        0,
        ["sh", "-c", 'echo "$FI_PROVIDER $SKY_X"'],
        env={"SKY_X": "from-run"},
        cwd=str(tmp_path),
        tag="env",
    )
    lines = list(proc.lines())
    assert proc.wait(timeout=30) == 0
    assert lines == ["efa from-run"]


def test_copy_tree_put_and_fetch(transport: SshTransport, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "train.py").write_text("print('hi')\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref\n")
    run_id = "20261125-100000-000000-aaaa"
    stats = transport.copy_tree(0, src, scan(src, lambda rel: rel == ".git"), run_id)
    dest = tmp_path / "node" / "runs" / run_id / "work"
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        "pkg",
        "pkg/train.py",
        "run.sh",
    ]
    assert (stats.sent_files, stats.sent_bytes) == (2, len("print('hi')\n#!/bin/sh\n"))
    assert os.access(dest / "run.sh", os.X_OK)
    transport.put_file(0, src / "pkg" / "train.py", str(tmp_path / "remote" / "a" / "b.py"))
    assert (tmp_path / "remote" / "a" / "b.py").read_text() == "print('hi')\n"
    back = tmp_path / "back" / "train.py"
    assert transport.fetch(0, str(dest / "pkg" / "train.py"), back)
    assert back.read_text() == "print('hi')\n"
    assert not transport.fetch(0, str(dest / "missing.json"), tmp_path / "missing.json")


def test_kill_ends_the_whole_process_group(transport: SshTransport, tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    proc = transport.start(
        0,
        ["sh", "-c", f"sleep 300 & echo $! > {marker}; echo started; wait"],
        env={},
        cwd=str(tmp_path),
        tag="long",
    )
    lines = proc.lines()
    assert next(lines) == "started"
    child = int(marker.read_text())
    os.kill(child, 0)  # the grandchild runs
    assert proc.poll() is None
    proc.kill(grace_s=1)
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the child sleep survived kill()")
    assert proc.poll() is not None
    assert not (tmp_path / "node" / "pids" / "long.pid").exists()


def test_kill_never_signals_a_process_that_reused_a_stale_pid(
    transport: SshTransport, tmp_path: Path
) -> None:
    proc = transport.start(0, ["true"], env={}, cwd=str(tmp_path), tag="gone")
    assert proc.wait(timeout=30) == 0
    pid_file = tmp_path / "node" / "pids" / "gone.pid"
    pid, start = pid_file.read_text().split()  # the pid and its start time are recorded
    assert int(pid) > 0 and start.isdigit()
    # The pid file outlived its process; an unrelated process group now has a pid it names.
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        for stale in (f"{bystander.pid}\n", f"{bystander.pid} {start}\n"):
            pid_file.write_text(stale)
            proc.kill(grace_s=0.5)
            assert bystander.poll() is None, f"kill signalled an unrelated process ({stale!r})"
            assert not pid_file.exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_wrong_key_is_a_transport_error(sshd: tuple[SshTarget, Path], tmp_path: Path) -> None:
    target, _ = sshd
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    ssh = SshTransport({0: target}, keys=SshKeys(other, tmp_path / "kh"))
    with pytest.raises(TransportError, match="cannot connect to"):
        ssh.check_call(0, "true")
    with pytest.raises(TransportError, match="no node 5"):
        ssh.check_call(5, "true")


def test_changed_host_key_is_refused(sshd: tuple[SshTarget, Path], tmp_path: Path) -> None:
    target, key = sshd
    known = tmp_path / "known_hosts"
    forged = tmp_path / "forged"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(forged)], check=True)
    key_type, key_b64 = (tmp_path / "forged.pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{target.port} {key_type} {key_b64}\n")
    ssh = SshTransport({0: target}, keys=SshKeys(key, known))
    with pytest.raises(TransportError, match="host key changed"):
        ssh.check_call(0, "true")


def test_a_file_gone_during_fetch_is_missing_and_the_local_copy_stays(
    transport: SshTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's file can go between the look and the copy (its node lost, its folder gone):
    fetch says it is missing, and the caller's earlier copy is kept whole (a follower's copy
    of a job's record is what `jobs recover` works from once the head is gone)."""
    remote = tmp_path / "node" / "record.json"
    remote.parent.mkdir()
    remote.write_text('{"state": "running"}')
    local = tmp_path / "copy" / "record.json"
    local.parent.mkdir()
    local.write_text('{"state": "starting"}')
    real_stat = paramiko.SFTPClient.stat

    def stat_then_lose_the_node(self: paramiko.SFTPClient, path: str) -> paramiko.SFTPAttributes:
        found = real_stat(self, path)
        remote.unlink()  # the node's disk goes right after the look
        return found

    monkeypatch.setattr(paramiko.SFTPClient, "stat", stat_then_lose_the_node)
    assert transport.fetch(0, str(remote), local) is False
    assert local.read_text() == '{"state": "starting"}'
    assert [p.name for p in local.parent.iterdir()] == ["record.json"]  # no temporary left


def test_two_fetches_of_one_file_at_once_each_copy_whole(
    transport: SshTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads of one process fetch into one local file at once (a follower and a
    `jobs` view of one record): each copies into a temporary file of its own, so the first,
    whose copy is made but not yet in place when the second puts its own there, still puts
    its whole copy in place (they shared a name by pid: the first found its copy taken)."""
    node = tmp_path / "node"
    node.mkdir()
    (node / "first.json").write_text('{"from": "first"}')
    (node / "second.json").write_text('{"from": "second"}')
    local = tmp_path / "copy" / "record.json"
    local.parent.mkdir()
    copied, second_done = threading.Event(), threading.Event()
    real_get = paramiko.SFTPClient.get

    def get_then_wait_for_the_second(self: paramiko.SFTPClient, remote: str, part: str) -> None:
        real_get(self, remote, part)
        if remote.endswith("first.json"):  # the first fetch: its copy made, not yet in place
            copied.set()
            assert second_done.wait(timeout=60)

    monkeypatch.setattr(paramiko.SFTPClient, "get", get_then_wait_for_the_second)
    first: list[bool] = []
    fetching = threading.Thread(
        target=lambda: first.append(transport.fetch(0, str(node / "first.json"), local))
    )
    fetching.start()
    try:
        assert copied.wait(timeout=60)
        assert transport.fetch(0, str(node / "second.json"), local) is True
        assert local.read_text() == '{"from": "second"}'
    finally:
        second_done.set()
        fetching.join(timeout=60)
    assert first == [True], first
    assert local.read_text() == '{"from": "first"}'
    assert [p.name for p in local.parent.iterdir()] == ["record.json"]  # no temporary left
