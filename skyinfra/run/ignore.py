"""What `skyinfra run` leaves out of the copy of the working directory: the defaults below,
the patterns in ``.skyinfraignore``, and skyinfra's own workspaces when they lie inside it."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from pathlib import Path

IGNORE_FILE = ".skyinfraignore"
# Never shipped: VCS data, environments, caches, and skyinfra's own workspaces.
DEFAULT_IGNORES = (
    ".git",
    ".venv",
    "venv",
    ".skyinfra",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".mypy_cache",
)


def read_ignore_patterns(src: Path) -> list[str]:
    patterns = list(DEFAULT_IGNORES)
    ignore_file = src / IGNORE_FILE
    if ignore_file.is_file():
        for line in ignore_file.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                patterns.append(line.rstrip("/"))
    return patterns


def make_ignore(patterns: Sequence[str], extra_paths: Sequence[str] = ()) -> Callable[[str], bool]:
    """gitignore-like: a pattern with '/' matches the relative path, else any path component."""

    def ignored(rel: str) -> bool:
        if rel in extra_paths:
            return True
        name = rel.rsplit("/", 1)[-1]
        for pattern in patterns:
            p = pattern.lstrip("/")
            if "/" in pattern:
                if fnmatch.fnmatchcase(rel, p):
                    return True
            elif fnmatch.fnmatchcase(name, p):
                return True
        return False

    return ignored


def topology_path_inside(src: Path, workspace_dir: Path) -> list[str]:
    """The folder holding the workspaces (``workspace_dir``'s parent) as a path relative to
    the copied directory ``src`` when it lies under it, to keep it out of the copy."""
    try:
        rel = workspace_dir.parent.resolve().relative_to(src.resolve())
    except ValueError:
        return []
    return [str(rel)] if str(rel) != "." else []
