"""`jobs recover --all`'s order (issue 47): the jobs a lost head took with it start again in the
order it had them: those that held nodes in their start order, then its queue (a preempted
job waiting to resume among the queued ones), higher priority first, then submission order;
never the newest-first order `jobs` lists them in."""

from __future__ import annotations

import os
from pathlib import Path

from skyinfra_runtime.jobrecord import Attempt, JobRecord, JobState, QueueWait

from skyinfra.run.recovery import recovery_order
from tests.support.local_jobs import cli


def lost(
    job: str,
    *,
    seq: int,
    started: float | None = None,
    prio: int = 0,
    preempted_by: str | None = None,
    attempt: bool = False,
) -> JobRecord:
    """A job lost with its head: ``attempt`` (or a start): it has an attempt entry."""
    attempts = (
        (Attempt(1, started_at=started, preempted_by=preempted_by),)
        if attempt or started is not None
        else ()
    )
    return JobRecord(
        job, JobState.LOST, attempts=attempts, priority=prio, seq=seq, queue=QueueWait(seq=seq)
    )


def test_held_jobs_first_in_start_order_then_the_queue_by_priority_then_submission() -> None:
    jobs = [
        lost("q-late", seq=9),
        lost("q-urgent", prio=5, seq=8),
        lost("held-second", started=20.0, seq=2),
        lost("preempted", started=5.0, seq=1, preempted_by="held-second"),
        lost("q-early", seq=3),
        lost("held-first", started=10.0, seq=4),
        lost("q-queued-attempt", seq=4, attempt=True),  # an attempt entry, not started
    ]
    order = [j.id for j in recovery_order(jobs)]
    assert order == [
        "held-first",
        "held-second",
        "q-urgent",
        "preempted",
        "q-early",
        "q-queued-attempt",
        "q-late",
    ]


def test_all_goes_with_recover_alone_exit_2_naming_what_came(tmp_path: Path) -> None:
    """Bad input: `jobs --all` with a job (or without `recover`) exits 2 naming what came,
    before any workspace is read (none here)."""
    res = cli(["jobs", "recover", "JOB", "--all"], tmp_path, dict(os.environ), timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--all goes with `jobs recover` alone (got 'recover JOB')" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
