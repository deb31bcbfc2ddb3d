"""A cluster's checkpoint sets, seen from the operator: list, delete, what `down` keeps.

A job's workers write checkpoints to ``$SKYINFRA_CHECKPOINT_DIR`` (skyinfra_runtime.checkpoints
resolves it on the nodes). On the local target every set is a folder
``<workspace>/checkpoints/<NAME>``, outside the node folders, kept by `down`; which jobs used a
set is recorded by `run` in ``<workspace>/runs/<job id>/checkpoints.json``. Other targets keep
their sets elsewhere (AWS: an S3 prefix) and have no local folder here.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skyinfra_runtime.checkpoints import CHECKPOINTS_FOLDER, name_problem

from skyinfra.errors import UsageError
from skyinfra.workspace import Workspace

USE_RECORD = "checkpoints.json"


@dataclass(frozen=True)
class CheckpointSet:
    name: str
    path: Path
    size_bytes: int
    files: int
    modified: float | None  # the newest file's mtime (None: empty)
    jobs: tuple[str, ...]  # the jobs that used it, oldest first

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "size_bytes": self.size_bytes,
            "files": self.files,
            "modified": _iso(self.modified),
            "jobs": list(self.jobs),
        }


def local_root(ws: Workspace) -> Path:
    """Where the local target keeps the cluster's sets (the nodes see it as
    ``<node dir>/../../checkpoints``: skyinfra_runtime.checkpoints.root_for)."""
    return ws.path / CHECKPOINTS_FOLDER


def record_use(run_dir: Path, name: str) -> None:
    """`run`: job ``run_dir.name`` uses set ``name``."""
    (run_dir / USE_RECORD).write_text(json.dumps({"checkpoints": name}) + "\n", encoding="utf-8")


def uses(ws: Workspace) -> dict[str, list[str]]:
    """Each set's jobs (by `run`'s records in the workspace), oldest first."""
    found: dict[str, list[str]] = {}
    for record in sorted(ws.runs_dir.glob(f"*/{USE_RECORD}")):
        try:
            name = json.loads(record.read_text(encoding="utf-8")).get("checkpoints")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(name, str):
            found.setdefault(name, []).append(record.parent.name)
    return found


def list_sets(ws: Workspace) -> list[CheckpointSet]:
    root = local_root(ws)
    if not root.is_dir():
        return []
    used = uses(ws)
    out = []
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not name_problem(p.name)):
        size, files, newest = _measure(path)
        out.append(
            CheckpointSet(path.name, path, size, files, newest, tuple(used.get(path.name, ())))
        )
    return out


def find_set(ws: Workspace, name: str) -> CheckpointSet:
    problem = name_problem(name)
    if problem:
        raise UsageError(f"checkpoint set {name!r}: expected {problem}")
    for found in list_sets(ws):
        if found.name == name:
            return found
    names = ", ".join(s.name for s in list_sets(ws)) or "none"
    raise UsageError(
        f"checkpoint set {name!r}: cluster {ws.name!r} has no such set (it has: {names})"
    )


def delete_set(found: CheckpointSet) -> None:
    shutil.rmtree(found.path)


def kept_line(ws: Workspace) -> str | None:
    """What `down` keeps, in words (None: no set)."""
    sets = list_sets(ws)
    if not sets:
        return None
    total = sum(s.size_bytes for s in sets)
    return (
        f"[skyinfra] kept {len(sets)} checkpoint set(s) in {local_root(ws)} "
        f"({human_size(total)}): `skyinfra checkpoints` lists them, "
        "`skyinfra checkpoints delete NAME` deletes one"
    )


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _measure(path: Path) -> tuple[int, int, float | None]:
    size = files = 0
    newest: float | None = None
    for item in path.rglob("*"):
        try:
            st = item.lstat()
        except OSError:
            continue
        if item.is_file() and not item.is_symlink():
            size += st.st_size
            files += 1
            newest = st.st_mtime if newest is None else max(newest, st.st_mtime)
    return size, files, newest


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
