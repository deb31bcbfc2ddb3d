"""Where a secret's bytes landed: the files under a folder that hold a value (the secret tests
plant one and check that no file of a workspace or a node holds it)."""

from __future__ import annotations

import os
from pathlib import Path


def files_holding(root: Path, value: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``value`` (links left out)."""
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink() and path.is_file() and value.encode() in path.read_bytes():
                found.append(str(path))
    return found
