"""A process that ends when its parent dies (Linux's PR_SET_PDEATHSIG), set from the child
itself once it runs: never by a ``preexec_fn``, which runs Python between fork and exec in a
parent with threads (a job's agent has several), where a lock another thread held at the
fork (the loader's, say, for the ``ctypes`` it needs) is never released in the child."""

from __future__ import annotations

import contextlib
import os

PR_SET_PDEATHSIG = 1
# Set by a job's agent for the launcher it starts: the pid the launcher must not outlive.
AGENT_PID_ENV = "SKYINFRA_AGENT_PID"


def signal_on_parent_death(sig: int) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies (0: no longer);
    nothing where the call does not exist (not Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


def end_with_parent(sig: int, parent: str | None) -> bool:
    """``sig`` when the parent dies; False when the parent it was started by (``parent``, a
    pid as text; None: this process's parent now) is already gone, before the call took
    effect: the caller then ends at once, as the signal would have ended it."""
    expected = str(os.getppid()) if parent is None else parent
    signal_on_parent_death(sig)
    return str(os.getppid()) == expected
