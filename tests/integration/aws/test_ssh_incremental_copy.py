"""`run`'s incremental copy over the SSH transport, against the suite's real sshd on
127.0.0.1: the node's half runs in a Python started over SSH, files travel over SFTP, and the
bytes that travelled are counted."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyinfra.run.ignore import make_ignore, read_ignore_patterns
from skyinfra.transport.nodesync import MANIFEST
from skyinfra.transport.ssh import SshKeys, SshTarget, SshTransport
from skyinfra.transport.tree import CopyStats, scan

RUNS = [f"20261125-10000{i}-000000-000{i}" for i in range(5)]
TRAIN = "def main():\n    return {}\n"


@pytest.fixture
def node(sshd: tuple[SshTarget, Path], tmp_path: Path) -> Iterator[tuple[SshTransport, Path]]:
    target, key = sshd
    root = tmp_path / "node"
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").symlink_to(sys.executable)  # the node's own Python
    ssh = SshTransport(
        {0: target}, keys=SshKeys(key, tmp_path / "known_hosts"), node_root=str(root)
    )
    yield ssh, root
    ssh.close()


def project(tmp_path: Path) -> Path:
    src = tmp_path / "project"
    (src / "data").mkdir(parents=True)
    for i in range(4):
        (src / "data" / f"shard-{i}.bin").write_bytes(os.urandom(512 * 1024))
    (src / "train.py").write_text(TRAIN.format(1))
    (src / "notes.txt").write_text("to be deleted\n")
    (src / ".env").write_text("API_TOKEN=secret\n")
    (src / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    return src


def copy(ssh: SshTransport, src: Path, run_id: str) -> CopyStats:
    ignore = make_ignore(read_ignore_patterns(src))
    return ssh.copy_tree(0, src, scan(src, ignore), run_id)


def files(root: Path, run_id: str) -> list[str]:
    work = root / "runs" / run_id / "work"
    return sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file())


def test_a_rerun_sends_only_the_changed_file_and_never_a_secret(
    node: tuple[SshTransport, Path], tmp_path: Path
) -> None:
    ssh, root = node
    src = project(tmp_path)
    first = copy(ssh, src, RUNS[0])
    data = 4 * 512 * 1024
    assert first.base is None
    assert first.sent_bytes == data + len(TRAIN.format(1)) + len("to be deleted\n")
    assert files(root, RUNS[0]) == [*(f"data/shard-{i}.bin" for i in range(4)), "notes.txt",
                                    "train.py"]  # fmt: skip

    # A one-line change, a deleted file, and a new secret (which must not travel either).
    (src / "train.py").write_text(TRAIN.format(2))
    (src / "notes.txt").unlink()
    (src / ".env.production").write_text("DB_PASSWORD=x\n")
    second = copy(ssh, src, RUNS[1])
    assert second.base == RUNS[0]
    assert (second.sent_files, second.sent_bytes) == (1, len(TRAIN.format(2)))
    assert (second.linked_files, second.linked_bytes) == (4, data)
    assert files(root, RUNS[1]) == [*(f"data/shard-{i}.bin" for i in range(4)), "train.py"]
    a, b = root / "runs" / RUNS[0] / "work", root / "runs" / RUNS[1] / "work"
    assert (b / "train.py").read_text() == TRAIN.format(2)
    assert (a / "train.py").read_text() == TRAIN.format(1)  # the earlier run is as it was
    assert (a / "train.py").stat().st_ino != (b / "train.py").stat().st_ino
    assert (a / "data/shard-0.bin").stat().st_ino == (b / "data/shard-0.bin").stat().st_ino
    assert (root / "runs" / RUNS[1] / MANIFEST).is_file()

    # Nothing changed: nothing travels.
    third = copy(ssh, src, RUNS[2])
    assert (third.base, third.sent_files, third.sent_bytes) == (RUNS[1], 0, 0)


def test_a_node_without_its_earlier_copies_gets_a_full_copy(
    node: tuple[SshTransport, Path], tmp_path: Path
) -> None:
    """The run directories were removed (or the node replaced by a fresh one): the copy
    does not trust what it sent before, it sends everything again."""
    ssh, root = node
    src = project(tmp_path)
    full = copy(ssh, src, RUNS[0]).sent_bytes
    copy(ssh, src, RUNS[1])
    shutil.rmtree(root / "runs" / RUNS[1])
    shutil.rmtree(root / "runs" / RUNS[0] / "work")  # the manifest stays, and is not believed
    again = copy(ssh, src, RUNS[2])
    assert (again.base, again.sent_bytes, again.linked_files) == (RUNS[0], full, 0)
    assert again.base_untrusted == 6
    listed = files(root, RUNS[2])
    assert len(listed) == 6
    shutil.rmtree(root / "runs")
    fresh = copy(ssh, src, RUNS[3])
    assert (fresh.base, fresh.sent_bytes) == (None, full)
    assert files(root, RUNS[3]) == listed


def test_a_file_a_run_changed_on_the_node_is_sent_again(
    node: tuple[SshTransport, Path], tmp_path: Path
) -> None:
    ssh, root = node
    src = project(tmp_path)
    copy(ssh, src, RUNS[0])
    shard = root / "runs" / RUNS[0] / "work" / "data" / "shard-1.bin"
    with shard.open("r+b") as f:  # rewritten in place by the run, same size
        f.write(b"\0" * 16)
    stats = copy(ssh, src, RUNS[1])
    assert (stats.sent_files, stats.sent_bytes, stats.base_untrusted) == (1, 512 * 1024, 1)
    fresh = root / "runs" / RUNS[1] / "work" / "data" / "shard-1.bin"
    assert fresh.read_bytes() == (src / "data" / "shard-1.bin").read_bytes()
