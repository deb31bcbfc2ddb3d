"""A worker's framework start-up work, as its launcher sees it: the time of the worker's status
file (see worker.py) is when it last entered a phase or did start-up work (the jax plugin
notes every compile). A node without cores to spare asks for its standbys again once every
worker there is running its entry and has been quiet for a while (warm.past_start): the
refill's imports then share the cores with the job's steps, not with its start.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# The launcher's pid, set by the launcher for its workers (a worker ends with its launcher).
LAUNCHER_PID_ENV = "SKYINFRA_LAUNCHER_PID"

# The phases a worker writes to its status file (worker.py), which its launcher reads: set-up
# ("setup", then "setup:NAME" while plugin NAME sets up), its entry running, done.
SETUP = "setup"
RUNNING = "running"
DONE = "done"


def plugin_setup(name: str) -> str:
    """The phase while plugin ``name`` sets up."""
    return f"{SETUP}:{name}"


_status: Path | None = None


def mark_in(status: Path) -> None:
    """This worker's status file, whose time note() moves."""
    global _status
    _status = status


def note() -> None:
    """Start-up work (a compile) just ended in this worker."""
    if _status is None:
        return
    # Gone with its launcher's folder: nobody is left to read it.
    with contextlib.suppress(OSError):
        os.utime(_status)
