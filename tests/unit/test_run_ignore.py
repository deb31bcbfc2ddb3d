"""What `skyinfra run` copies to nodes: defaults and .skyinfraignore patterns."""

from __future__ import annotations

from pathlib import Path

from skyinfra.run.ignore import make_ignore, read_ignore_patterns, topology_path_inside


def test_defaults_keep_workspaces_and_environments_out(tmp_path: Path) -> None:
    ignored = make_ignore(read_ignore_patterns(tmp_path))
    for rel in (".skyinfra", ".git", ".venv", "pkg/__pycache__", "pkg/mod.pyc"):
        assert ignored(rel), rel
    for rel in ("train.py", "data/digits.csv", "pkg/mod.py"):
        assert not ignored(rel), rel


def test_ignore_file_patterns(tmp_path: Path) -> None:
    (tmp_path / ".skyinfraignore").write_text("# comment\n\n*.ckpt\ndata/raw/\n/notes.md\n")
    ignored = make_ignore(read_ignore_patterns(tmp_path), extra_paths=["infra/clusters"])
    assert ignored("model.ckpt")
    assert ignored("sub/model.ckpt")
    assert ignored("raw") is False  # 'data/raw' holds a '/': matched against the full path only
    assert ignored("data/raw")
    assert ignored("notes.md")
    assert ignored("infra/clusters")
    assert not ignored("train.py")


def test_the_workspaces_folder_inside_the_copied_directory_is_left_out(tmp_path: Path) -> None:
    assert topology_path_inside(tmp_path, tmp_path / "infra" / "clusters" / "c1") == [
        "infra/clusters"
    ]
    # Workspaces directly in the copied directory: the directory itself is not left out.
    assert topology_path_inside(tmp_path, tmp_path / "c1") == []
    # Workspaces elsewhere: nothing to leave out.
    assert topology_path_inside(tmp_path / "src", tmp_path / "clusters" / "c1") == []
