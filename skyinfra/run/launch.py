"""What a launch of code on a cluster carries (`skyinfra run`, the Python API, a recovery)."""

from __future__ import annotations

from dataclasses import dataclass

from skyinfra.run.head_recovery import HeadRecovery


@dataclass(frozen=True)
class Restarts:
    """How often the head's supervisor restarts a failed job on the same nodes, and after
    which failures (skyinfra_runtime.restarts); ``head_recovery``: what the head runs itself
    when the job lost nodes with restarts left (None: it waits for `jobs recover`)."""

    max_restarts: int = 0
    retry_on: str = "signal"
    head_recovery: HeadRecovery | None = None
