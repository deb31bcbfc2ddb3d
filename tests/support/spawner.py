"""A node process that is hard to end: it ignores SIGTERM and keeps starting children (each
`sleep 300`, ignoring SIGTERM too) every few milliseconds, so that a sweep that KILLs what
one look found leaves the children started since that look."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.waits import wait_until
from tests.support.workers import alive

# Bash: `trap '' TERM` is inherited by the children as an ignored signal.
SCRIPT = "trap '' TERM; while :; do sleep 300 & sleep 0.005; done"


def start_spawner(env: dict[str, str], mark: str) -> subprocess.Popen[bytes]:
    """The spawner, once it has started children (its trap is set by then)."""
    proc = subprocess.Popen(["bash", "-c", SCRIPT], env=env, start_new_session=True)
    wait_until("the spawner's children", lambda: len(marked_by(mark)) >= 3)
    return proc


def marked_by(mark: str) -> list[int]:
    """Live (not zombie) processes with ``mark`` (NAME=VALUE) in their environment."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark.encode() in environ and alive(int(entry.name)):
            found.append(int(entry.name))
    return found
