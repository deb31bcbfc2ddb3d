"""Which failures restart a job (``--max-restarts``, ``--retry-on``): the rule the head's
supervisor applies, and the operator checks its flags against. Standard library only."""

from __future__ import annotations

from skyinfra_runtime import exitcodes

# What `--retry-on` may say: which failures restart the job (while restarts are left).
RETRY_ON = ("signal", "error")


def failure_kind(code: int | None) -> str:
    """What ended a node, for the restart decision: "signal" (its launcher, or a worker of it,
    was killed by a signal), "error" (a non-zero exit: the user's code raised, or set-up
    failed), "lost" (no exit code: its agent went away)."""
    if code is None:
        return "lost"
    if code < 0 or code == exitcodes.INTERRUPTED:
        return "signal"
    if exitcodes.SIGNALLED < code < exitcodes.SIGNALLED + 65:
        return "signal"
    return "error"


def worker_killed(code: int | None) -> bool:
    """A worker killed by a signal while the entry ran, as its own launcher saw it (137 for
    SIGKILL): never what the job's own ending of a node produces (SIGTERM: 130; SIGKILL of the
    launcher's whole group: a negative code)."""
    return (
        code is not None
        and code != exitcodes.INTERRUPTED
        and exitcodes.SIGNALLED < code < exitcodes.SIGNALLED + 65
    )
