"""A workspace as bytes and modes, to prove a refused command left it exactly as it was."""

from __future__ import annotations

import stat
from pathlib import Path

# path relative to the root -> (file bytes, or None for a folder; permission bits)
Snapshot = dict[str, tuple[bytes | None, int]]


def snapshot(root: Path) -> Snapshot:
    """Every file's bytes and mode and every folder's mode under ``root``, Terraform's
    provider cache (``.terraform/``: not the cluster's, and large) left out."""
    taken: Snapshot = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == ".terraform":
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        taken[rel.as_posix()] = (None if path.is_dir() else path.read_bytes(), mode)
    return taken


def differences(before: Snapshot, after: Snapshot) -> list[str]:
    """What changed, one line per path (empty: byte-identical)."""
    lines = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None:
            lines.append(f"added {name}")
        elif new is None:
            lines.append(f"removed {name}")
        elif old[1] != new[1]:
            lines.append(f"mode of {name}: {oct(old[1])} -> {oct(new[1])}")
        else:
            lines.append(f"changed {name}")
    return lines
