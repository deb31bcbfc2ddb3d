"""The local clusters of this user on this machine, wherever their project folders are, so
that `up` refuses a cluster whose head would take the address and ports of one that is up:
their jobs' coordinators would meet, and the second job would end the first.

One small file per workspace under ``<cache>/local-clusters/`` (the cache is $SKYINFRA_CACHE,
else ~/.cache/skyinfra) names the workspace, its head address and its ports. Nothing has to
remove it: a cluster whose workspace has no topology (down, or never up) or is gone holds
nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from skyinfra.workspace import Workspace, write_private

REGISTRY_DIR = "local-clusters"


def registry_dir() -> Path:
    from skyinfra.wheel import cache_root  # the wheel builder's module: `up`'s, not every command's

    return cache_root() / REGISTRY_DIR


def _entry_file(workspace: Path) -> Path:
    name = hashlib.sha256(str(workspace).encode()).hexdigest()[:20]
    return registry_dir() / f"{name}.json"


def holder_of(
    workspace: Path, head_address: str, ports: set[int], *, cluster: str, backend: str | None
) -> dict[str, Any] | None:
    """Another local cluster that is up with its head on ``head_address`` and one of
    ``ports``: its entry (cluster, workspace, head_address, ports, backend), or None. A
    workspace of the same cluster through the same shared state (another operator's, or an
    `attach`) is that cluster, not another."""
    folder = registry_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entry = json.loads(path.read_text())
            other = Path(entry["workspace"])
            theirs = {int(p) for p in entry["ports"]}
            address = str(entry["head_address"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # half-written or foreign: not a claim
        if other == workspace or address != head_address or not theirs & ports:
            continue
        if backend is not None and (entry.get("cluster"), entry.get("backend")) == (
            cluster,
            backend,
        ):
            continue
        if Workspace(other).topology_file.is_file():
            return dict(entry)
    return None


def claim(
    workspace: Path, cluster: str, head_address: str, ports: set[int], backend: str | None
) -> None:
    """Record that ``workspace``'s cluster uses ``head_address`` and ``ports``."""
    path = _entry_file(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "cluster": cluster,
        "workspace": str(workspace),
        "head_address": head_address,
        "ports": sorted(ports),
        "backend": backend,
    }
    write_private(path, json.dumps(entry, indent=2) + "\n")
