"""`run`'s incremental copy: the pure plan (nodesync.plan), the project scan and its hash
cache (tree.scan), the line `run` prints, and the local transport's copy into node folders
(in-process: the node's half is the same code the SSH transport runs on a node)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from skyinfra.errors import TransportError
from skyinfra.run.report import copy_line
from skyinfra.targets.local.transport import LocalTransport
from skyinfra.transport import nodesync, tree
from skyinfra.transport.nodesync import Entries, plan
from skyinfra.transport.tree import CopyStats, scan

RUN_A = "20261125-100000-000000-aaaa"
RUN_B = "20261125-100001-000000-bbbb"
RUN_C = "20261125-100002-000000-cccc"


def file(sha: str, mode: int = 0o644, size: int = 1) -> dict[str, object]:
    return {"type": "file", "mode": mode, "size": size, "mtime_ns": 0, "sha256": sha}


def test_plan_links_same_content_and_mode_copies_on_a_mode_change_sends_the_rest() -> None:
    wanted: Entries = {
        "same.py": file("s1"),
        "moved/renamed.py": file("s2"),  # content the base holds under another name
        "run.sh": file("s3", mode=0o755),  # chmod +x since the base
        "new.py": file("s4"),
        "pkg": {"type": "dir", "mode": 0o755},
        "latest": {"type": "link", "target": "same.py"},
    }
    trusted = {"s1": ("same.py", 0o644), "s2": ("old.py", 0o644), "s3": ("run.sh", 0o644)}
    link, copy, send = plan(wanted, trusted)
    assert link == {"moved/renamed.py": "old.py", "same.py": "same.py"}
    assert copy == {"run.sh": "run.sh"}
    assert send == ["new.py"]
    assert plan(wanted, {}) == ({}, {}, ["moved/renamed.py", "new.py", "run.sh", "same.py"])


def test_copy_line_sums_the_nodes_and_says_why_a_node_got_everything() -> None:
    copies = {
        0: CopyStats(RUN_A, 1, 1200, 20, 200_000_000, 0, 0, 0.1),
        1: CopyStats(None, 21, 200_001_200, 0, 0, 0, 0, 2.0),
        2: CopyStats(RUN_A, 3, 5000, 18, 180_000_000, 0, 2, 0.2),
    }
    assert copy_line(copies) == (
        "[skyinfra] copy to 3 node(s): 25 file(s) sent (200.0 MB), 38 unchanged kept from the "
        "nodes' previous copy (380.0 MB linked); no earlier copy on node-1; node-2: 2 file(s) "
        f"of run {RUN_A} differ from its manifest (changed or removed on the node), not reused"
    )


def project(root: Path) -> Path:
    src = root / "project"
    (src / "pkg").mkdir(parents=True)
    (src / "data").mkdir()
    (src / "train.py").write_text("def main():\n    return 1\n")
    (src / "pkg" / "model.py").write_text("W = 1\n")
    (src / "data" / "big.bin").write_bytes(os.urandom(256 * 1024))
    (src / "old.txt").write_text("to be deleted\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "latest").symlink_to("train.py")
    (src / "empty").mkdir()
    return src


@pytest.fixture
def node(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    root.mkdir()
    (root / ".skyinfra-node").write_text("")
    return root


def work(node: Path, run_id: str) -> Path:
    return node / "runs" / run_id / "work"


def listing(top: Path) -> list[str]:
    return sorted(p.relative_to(top).as_posix() for p in top.rglob("*"))


def copy(node: Path, src: Path, run_id: str) -> CopyStats:
    return LocalTransport({0: node}).copy_tree(0, src, scan(src, lambda rel: False), run_id)


def test_a_rerun_sends_only_new_and_changed_files_and_never_touches_the_old_run(
    tmp_path: Path, node: Path
) -> None:
    src = project(tmp_path)
    first = copy(node, src, RUN_A)
    assert (first.base, first.sent_files, first.linked_files) == (None, 5, 0)
    files = [p for p in src.rglob("*") if p.is_file() and not p.is_symlink()]
    assert first.sent_bytes == sum(p.stat().st_size for p in files)
    assert listing(work(node, RUN_A)) == listing(src)
    manifest = json.loads((node / "runs" / RUN_A / nodesync.MANIFEST).read_text())
    assert manifest["entries"]["data/big.bin"]["size"] == 256 * 1024
    old_train = (work(node, RUN_A) / "train.py").read_bytes()

    # One line changed, one file deleted, one added, one made executable.
    (src / "train.py").write_text("def main():\n    return 2\n")
    (src / "old.txt").unlink()
    (src / "pkg" / "new.py").write_text("X = 2\n")
    (src / "run.sh").chmod(0o755)
    second = copy(node, src, RUN_B)

    assert second.base == RUN_A
    assert second.sent_files == 2  # train.py and pkg/new.py
    assert second.sent_bytes == len("def main():\n    return 2\n") + len("X = 2\n")
    assert (second.linked_files, second.node_copied_files) == (2, 1)  # big.bin, model.py; run.sh
    assert second.linked_bytes == 256 * 1024 + len("W = 1\n")
    a, b = work(node, RUN_A), work(node, RUN_B)
    assert listing(b) == listing(src)  # old.txt is gone, the new file and empty/ are there
    assert (b / "latest").is_symlink() and os.readlink(b / "latest") == "train.py"
    # Unchanged: one inode in both runs. Changed: a new inode; the old run keeps its bytes.
    assert (b / "data" / "big.bin").stat().st_ino == (a / "data" / "big.bin").stat().st_ino
    assert (b / "train.py").stat().st_ino != (a / "train.py").stat().st_ino
    assert (a / "train.py").read_bytes() == old_train
    assert (a / "old.txt").is_file()
    # The mode change did not reach the old run's file (it is a copy, not a link).
    assert os.access(b / "run.sh", os.X_OK) and not os.access(a / "run.sh", os.X_OK)
    # Editing a changed file in the new run leaves the old run alone.
    (b / "train.py").write_text("edited in run B\n")
    assert (a / "train.py").read_bytes() == old_train


def test_no_earlier_copy_on_the_node_means_a_full_copy(tmp_path: Path, node: Path) -> None:
    """The previous run's directory was removed (or the node replaced): nothing to trust."""
    src = project(tmp_path)
    copy(node, src, RUN_A)
    for p in sorted(work(node, RUN_A).rglob("*"), reverse=True):
        p.unlink() if not p.is_dir() or p.is_symlink() else p.rmdir()
    work(node, RUN_A).rmdir()  # the manifest is left: it must not be believed
    stats = copy(node, src, RUN_B)
    assert (stats.base, stats.sent_files, stats.linked_files) == (RUN_A, 5, 0)
    assert stats.base_untrusted == 5
    assert listing(work(node, RUN_B)) == listing(src)


def test_a_file_changed_on_the_node_since_its_copy_is_not_reused(
    tmp_path: Path, node: Path
) -> None:
    """A run that rewrote a project file in its work directory: the manifest no longer
    matches that file, so the next run gets the operator's bytes, not the rewritten ones."""
    src = project(tmp_path)
    copy(node, src, RUN_A)
    rewritten = work(node, RUN_A) / "pkg" / "model.py"
    rewritten.write_text("W = 9\n")  # same size, another content, a new mtime
    stats = copy(node, src, RUN_B)
    assert (stats.sent_files, stats.base_untrusted) == (1, 1)
    assert (work(node, RUN_B) / "pkg" / "model.py").read_text() == "W = 1\n"


def test_a_copy_that_broke_off_is_never_a_base(tmp_path: Path, node: Path) -> None:
    src = project(tmp_path)
    copy(node, src, RUN_A)
    copy(node, src, RUN_B)
    (node / "runs" / RUN_B / nodesync.MANIFEST).unlink()  # as if B stopped midway
    (work(node, RUN_B) / "train.py").unlink()  # B's train.py: a new file, half written
    (work(node, RUN_B) / "train.py").write_text("half")
    stats = copy(node, src, RUN_C)
    assert stats.base == RUN_A and stats.sent_files == 0
    assert (work(node, RUN_C) / "train.py").read_text() == (src / "train.py").read_text()


def test_the_run_directory_must_be_new(tmp_path: Path, node: Path) -> None:
    src = project(tmp_path)
    copy(node, src, RUN_A)
    with pytest.raises(TransportError, match=r"copying .* failed: .*File exists"):
        copy(node, src, RUN_A)


def test_scan_hashes_again_only_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = project(tmp_path)
    old = time.time() - 60
    for p in src.rglob("*"):
        if p.is_file() and not p.is_symlink():
            os.utime(p, (old, old))
    cache = tmp_path / "ws" / "copy-cache.json"
    hashed: list[str] = []
    real = tree._sha256

    def counting(path: Path) -> str:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr(tree, "_sha256", counting)
    first = scan(src, lambda rel: rel == "empty", cache)
    assert sorted(hashed) == ["big.bin", "model.py", "old.txt", "run.sh", "train.py"]
    assert "empty" not in first and first["latest"] == {"type": "link", "target": "train.py"}
    hashed.clear()
    (src / "train.py").write_text("def main():\n    return 2\n")
    second = scan(src, lambda rel: rel == "empty", cache)
    assert hashed == ["train.py"]  # changed; the rest from the cache
    assert second["train.py"]["sha256"] != first["train.py"]["sha256"]
    assert second["data/big.bin"] == first["data/big.bin"]
    # Written within a second of the scan that hashed it: hashed again (the same clock tick
    # could hold a later write with the same mtime).
    hashed.clear()
    scan(src, lambda rel: rel == "empty", cache)
    assert hashed == ["train.py"]
    # Another project in the same workspace: the cache is not its.
    hashed.clear()
    other = tmp_path / "other"
    other.mkdir()
    (other / "train.py").write_text("x")
    os.utime(other / "train.py", (old, old))
    scan(other, lambda rel: False, cache)
    assert hashed == ["train.py"]


def test_without_hard_links_the_node_copies_and_a_vanished_base_file_is_sent(
    tmp_path: Path, node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = project(tmp_path)
    copy(node, src, RUN_A)

    def no_link(a: str, b: str) -> None:
        raise OSError(1, "hard links not supported here")

    monkeypatch.setattr(nodesync.os, "link", no_link)
    stats = copy(node, src, RUN_B)  # copied on the node: still nothing sent
    assert (stats.sent_files, stats.linked_files, stats.node_copied_files) == (0, 0, 5)
    b = work(node, RUN_B)
    assert (b / "train.py").stat().st_ino != (work(node, RUN_A) / "train.py").stat().st_ino

    def gone(a: str, b: str) -> None:
        raise FileNotFoundError(2, "pruned meanwhile", a)

    monkeypatch.setattr(nodesync.shutil, "copy2", gone)
    stats = copy(node, src, RUN_C)  # neither link nor copy: the operator sends it
    assert (stats.sent_files, stats.node_copied_files) == (5, 0)
    assert listing(work(node, RUN_C)) == listing(src)


def test_a_node_file_put_again_is_replaced_whole_never_rewritten_in_place(
    tmp_path: Path, node: Path
) -> None:
    """Every run puts the node's topology.json; a launcher of another job reading it at that
    moment (runs submitted at once) must see the old file or the new, never a truncated one:
    the put renames a whole new file over it, so a reader's open file keeps the old one."""
    dest = node / "topology.json"
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text('{"nodes": 2}')
    new.write_text('{"nodes": 2, "cluster": "c"}')
    transport = LocalTransport({0: node})
    transport.put_file(0, old, str(dest))
    with dest.open() as reading:
        transport.put_file(0, new, str(dest))
        assert reading.read() == '{"nodes": 2}'
    assert dest.read_text() == '{"nodes": 2, "cluster": "c"}'
    assert sorted(p.name for p in node.iterdir()) == [".skyinfra-node", "topology.json"]
