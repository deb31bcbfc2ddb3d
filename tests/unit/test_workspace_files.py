"""Writing a rendered workspace: nested files, stale copies pruned, deterministic bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

import skyinfra
from skyinfra.errors import WorkspaceError
from skyinfra.render import OWNED_DIRS
from skyinfra.spec import validate_spec
from skyinfra.targets import get_target
from skyinfra.targets.local.target import operator_uv
from skyinfra.workspace import Workspace


def test_nested_files_are_written_and_stale_copies_removed(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "demo")
    ws.write_files(
        {"main.tf": "a\n", "modules/local/main.tf": "m\n", "modules/old/gone.tf": "x\n"},
        owned_dirs=OWNED_DIRS,
    )
    assert (ws.path / "modules" / "old" / "gone.tf").read_text() == "x\n"
    (ws.path / "terraform.tfstate").write_text("{}")
    ws.write_files({"main.tf": "b\n", "modules/local/main.tf": "n\n"}, owned_dirs=OWNED_DIRS)
    assert sorted(p.relative_to(ws.path).as_posix() for p in ws.path.rglob("*")) == [
        "main.tf",
        "modules",
        "modules/local",
        "modules/local/main.tf",
        "terraform.tfstate",  # outside the owned folders: never touched
    ]
    assert (ws.path / "modules" / "local" / "main.tf").read_text() == "n\n"


@pytest.mark.parametrize("name", ["/etc/passwd", "../x.tf", "modules/../../x.tf", "a//b"])
def test_only_plain_relative_names_are_written(tmp_path: Path, name: str) -> None:
    with pytest.raises(WorkspaceError, match="plain relative path"):
        Workspace(tmp_path / "demo").write_files({name: ""})
    assert not (tmp_path / "demo" / "x.tf").exists()


def test_local_render_is_deterministic_and_points_nowhere_else(
    tmp_path: Path, minimal_runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same spec, same bytes (wheel hash included); no file names where skyinfra lives."""
    monkeypatch.setenv("SKYINFRA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SKYINFRA_RUNTIME_DIR", str(minimal_runtime_dir))
    spec = validate_spec({"name": "demo", "nodes": 2, "local": {"python": "/usr/bin/python3"}})
    ws = Workspace(tmp_path / "clusters" / "demo")
    local = get_target("local")
    first = local.render(spec, ws, echo=print, options={})
    assert local.render(spec, ws, echo=print, options={}) == first
    assert "modules/local/main.tf" in first and "scripts/bootstrap-node.sh" in first
    package = Path(skyinfra.__file__).resolve().parent
    # The operator's uv is a tool of this machine, like local.python (in a checkout's .venv it
    # sits under the repository); anything else under skyinfra's folders must not appear.
    uv = operator_uv()
    for name, text in first.items():
        text = text.replace(uv, "<uv>") if uv else text
        assert str(package) not in text and str(package.parent) not in text, name


def test_detached_submissions_share_the_workspace_and_nothing_else_does(tmp_path: Path) -> None:
    """`run` (attached or detached, without verify) holds the workspace shared: several submit
    at once (a sweep from several shells), while an exclusive holder (`up`, `down`, `tf`,
    verify) refuses them and is refused by them, naming the holder; the last shared holder out
    leaves no holder behind."""
    from skyinfra.errors import WorkspaceBusyError

    ws = Workspace(tmp_path / "sweep")
    with ws.lock("run a.py", shared=True), ws.lock("run b.py", shared=True):
        with pytest.raises(WorkspaceBusyError, match=r"skyinfra run b\.py"), ws.lock("up"):
            pass
        assert [h.command for h in ws.lock_holders()] == ["run a.py", "run b.py"]
    assert ws.lock_holders() == []
    busy = pytest.raises(WorkspaceBusyError, match="skyinfra up")
    with ws.lock("up"), busy, ws.lock("run", shared=True):
        pass
