"""A higher-priority job's ask that a running one give up its nodes, between the two jobs'
supervisors on the head: a file beside the victim's record (``Paths.preempt_ask``, written
under the start lock: the decision and the ask are one step) and SIGUSR1 to the victim's
supervisor, which then ends its attempt through the Spot notice's path (every node's workers
get SIGTERM and $SKYINFRA_PREEMPT_DEADLINE, the final checkpoint upload follows) and goes back
in the queue, ``preempted``.

Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from skyinfra_runtime.jobs.files import Paths, now, pid_alive, read_json, write_json

# The time a preempted job's workers get to save, as a Spot notice's two minutes give them
# theirs (less agent.PREEMPT_MARGIN_S for the final upload): seconds_left() counts it down.
PREEMPT_NOTICE_S = 30.0
ASK_SIGNAL = signal.SIGUSR1


@dataclass(frozen=True)
class Ask:
    by: str  # the job that takes the nodes
    priority: int  # its priority
    deadline: float  # when the preempted job's workers must be done (epoch seconds)


def ask(node_dir: Path, victim: str, by: str, priority: int) -> None:
    """Ask ``victim`` to give up its nodes for ``by`` (called under the start lock)."""
    paths = Paths(node_dir, victim)
    deadline = now() + PREEMPT_NOTICE_S
    write_json(paths.preempt_ask, {"by": by, "priority": priority, "deadline": deadline})
    pid = pid_alive(paths.pid_file)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, ASK_SIGNAL)


def read_ask(paths: Paths) -> Ask | None:
    """The ask waiting for this job, if any (a file of the wrong shape counts as none)."""
    data = read_json(paths.preempt_ask)
    if not isinstance(data, dict):
        return None
    deadline, priority = data.get("deadline"), data.get("priority")
    if not isinstance(deadline, int | float) or not isinstance(priority, int):
        return None
    return Ask(by=str(data.get("by") or "?"), priority=priority, deadline=float(deadline))
