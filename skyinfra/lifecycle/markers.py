"""The unfinished marker: written when a command starts to change the cluster, removed once
topology.json is written; left behind, it tells `status` and the commands that need the nodes
that an `up` (or `apply`) stopped halfway.
"""

from __future__ import annotations

import contextlib
import time

from skyinfra.errors import ClusterDownError, WorkspaceError
from skyinfra.workspace import Workspace

# Written when `up` (or `apply`) starts to change the cluster, removed once topology.json is
# written: left behind, it tells `status` that an `up` was interrupted or failed halfway.
UNFINISHED_FILE = "unfinished.json"


def mark_unfinished(ws: Workspace, command: str) -> None:
    """From here until :func:`mark_finished`, the cluster is being changed by ``command``."""
    ws.write_json(ws.path / UNFINISHED_FILE, {"command": command, "since": time.time()})


def mark_finished(ws: Workspace) -> None:
    (ws.path / UNFINISHED_FILE).unlink(missing_ok=True)


def not_up_error(ws: Workspace) -> ClusterDownError:
    """What a command that needs the nodes raises when there is no topology.json: the cluster
    is down, or an `up` left it part-made (its marker), which takes another `up` or a `down`."""
    return ClusterDownError(ws.name, unfinished=unfinished_command(ws))


def unfinished_command(ws: Workspace) -> str | None:
    """The command whose marker says it began changing the cluster and did not finish
    (mark_unfinished), or None when none left one."""
    marker = ws.path / UNFINISHED_FILE
    if not marker.is_file():
        return None
    command = "up"
    with contextlib.suppress(WorkspaceError, OSError, ValueError, AttributeError):
        command = str(ws.read_json(marker).get("command") or "up")
    return command
