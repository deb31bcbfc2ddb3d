"""Cluster workspaces: ``<dir>/<name>/`` holds the rendered root module, tfvars, state,
the spec it was made from, ``topology.json``, the local nodes and ``runs/<id>/``.

``<dir>`` defaults to ``.skyinfra/clusters`` under the current directory; ``--dir`` (or
``SKYINFRA_DIR``) picks another, e.g. a folder a team commits.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra.errors import WorkspaceError

DEFAULT_DIR = Path(".skyinfra") / "clusters"
DIR_ENV = "SKYINFRA_DIR"


def clusters_dir(option: str | Path | None) -> Path:
    chosen = option or os.environ.get(DIR_ENV) or DEFAULT_DIR
    return Path(chosen).absolute()


@dataclass(frozen=True)
class Workspace:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def spec_file(self) -> Path:
        return self.path / "spec.json"

    @property
    def topology_file(self) -> Path:
        return self.path / "topology.json"

    @property
    def nodes_dir(self) -> Path:
        return self.path / "nodes"

    @property
    def runs_dir(self) -> Path:
        return self.path / "runs"

    @property
    def state_file(self) -> Path:
        return self.path / "terraform.tfstate"

    def exists(self) -> bool:
        return self.spec_file.is_file()

    def write_files(self, files: Mapping[str, str], *, owned_dirs: Iterable[str] = ()) -> None:
        """Write rendered files (names are relative, ``/``-separated, may name sub-folders);
        each is replaced atomically so a crash leaves old or new. Files under ``owned_dirs``
        that ``files`` does not name are left over from an earlier render and are removed."""
        self.path.mkdir(parents=True, exist_ok=True)
        for name in files:
            parts = name.split("/")
            if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
                raise WorkspaceError(f"refusing to write {name!r}: not a plain relative path")
        for name, text in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(target)
        wanted = {self.path / name for name in files}
        for owned in owned_dirs:
            root = self.path / owned
            if not root.is_dir():
                continue
            for stale in sorted(p for p in root.rglob("*") if p.is_file() and p not in wanted):
                stale.unlink()
            for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
                if not any(folder.iterdir()):
                    folder.rmdir()

    def write_json(self, target: Path, data: Any) -> None:
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        tmp.replace(target)

    def read_json(self, target: Path) -> Any:
        try:
            return json.loads(target.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise WorkspaceError(
                f"cluster {self.name!r}: {target.name} is missing in {self.path}"
                " (was `skyinfra up` run for it?)"
            ) from None
        except json.JSONDecodeError as err:
            raise WorkspaceError(
                f"cluster {self.name!r}: {target} is not valid JSON ({err})"
            ) from err


def find_workspace(base: Path, name: str | None, default_name: str | None = None) -> Workspace:
    """The named cluster, else the spec's name, else the only cluster in ``base``."""
    if name is None:
        existing = (
            sorted(p.name for p in base.iterdir() if (p / "spec.json").is_file())
            if base.is_dir()
            else []
        )
        if default_name is not None and default_name in existing:
            name = default_name
        elif len(existing) == 1:
            name = existing[0]
        elif not existing:
            raise WorkspaceError(f"no clusters in {base}; bring one up with `skyinfra up`")
        else:
            raise WorkspaceError(
                f"several clusters in {base}: {', '.join(existing)}; choose one with --cluster NAME"
            )
    ws = Workspace(base / name)
    if not ws.exists():
        raise WorkspaceError(
            f"no cluster named {name!r} in {base}; bring it up with `skyinfra up --name {name}`"
        )
    return ws
