"""A workspace's identity: a random id minted at its first `up` and kept in the workspace.

Targets tag what they create with it (on AWS ``skyinfra:workspace``, beside
``skyinfra:cluster``), so that what a cluster left behind can be told from another project's
cluster of the same name, and resources no workspace knows about can be listed (``skyinfra
gc``). It is an id, not a path: moving or renaming the project folder keeps it.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from skyinfra.workspace import Workspace

WORKSPACE_ID_FILE = "workspace-id.json"
_ID_RE = re.compile(r"^ws-[0-9a-f]{16}$")

CLUSTER_TAG = "skyinfra:cluster"
WORKSPACE_TAG = "skyinfra:workspace"


def read_workspace_id(path: Path) -> str | None:
    """The id stored in the workspace folder ``path``, or None (never up, or unreadable)."""
    try:
        value = json.loads((path / WORKSPACE_ID_FILE).read_text(encoding="utf-8")).get("id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and _ID_RE.match(value) else None


def workspace_id(ws: Workspace) -> str:
    """The workspace's id: the stored one, or a new one (the caller writes it, see
    :func:`workspace_id_file`)."""
    return read_workspace_id(ws.path) or f"ws-{secrets.token_hex(8)}"


def workspace_id_file(value: str) -> dict[str, str]:
    """The rendered file that keeps ``value`` (a target's render adds it to its files)."""
    return {WORKSPACE_ID_FILE: json.dumps({"id": value}, indent=2) + "\n"}
