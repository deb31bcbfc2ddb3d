"""How `skyinfra jobs` shows jobs: the table (newest first), one job in full, and what a job
that lost a node or its supervisor needs, in words."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from skyinfra.cli.resolve import echo

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skyinfra_runtime.jobrecord import Interruption, JobRecord, WorkerStart

    from skyinfra.run.jobview import JobView
    from skyinfra.workspace import Workspace


def _when(t: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _duration(view: JobView) -> str:
    job = view.record
    start = job.started_at or job.created_at
    # A kept copy of a job that had not ended: when it did is not known; a queued job has
    # not started.
    if not start or view.shown_state is not None or job.queued:
        return "-"
    end = job.ended_at or time.time()
    s = int(end - start)
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"
        if s >= 3600
        else f"{s // 60}m{s % 60:02d}s"
    )


def _codes(job: JobRecord) -> str:
    return " ".join(f"{n.node}:{'-' if n.exit_code is None else n.exit_code}" for n in job.nodes)


def _age(seconds: Any) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s ago"
    return f"{s // 3600}h{s % 3600 // 60:02d}m ago"


def interruption_words(item: Interruption) -> str:
    """One Spot interruption notice of a job's record in words."""
    return (
        f"node-{item.node} interrupted at {_when(item.noticed_at)} (Spot notice: "
        f"{item.action} at {_when(item.time)})"
    )


def _state(view: JobView) -> str:
    state = view.state
    queue = view.record.queue
    if view.record.queued and view.shown_state is None and queue is not None:
        state += f" (#{queue.position})"
    if view.record.attempt > 1:
        state += f" (attempt {view.record.attempt})"
    return f"{state} (STALLED)" if view.stalled else state


def kept_job_copies(ws: Workspace) -> list[JobRecord]:
    """The job records `run` copied into the workspace's runs/<id>/job.json, newest first."""
    from skyinfra.run.job import JobRecord
    from skyinfra.run.jobcopies import JOB_COPY

    found = []
    for copy in ws.runs_dir.glob(f"*/{JOB_COPY}"):
        try:
            record = JobRecord.from_dict(json.loads(copy.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        if record.id == copy.parent.name:
            found.append(record)
    return sorted(found, key=lambda j: float(j.created_at or 0), reverse=True)


def as_last_seen(job: JobRecord) -> JobView:
    """A kept copy of a job's record, for the table: a job the copy saw unfinished ended
    with the cluster or before, when is unknown (no duration, no last output)."""
    from skyinfra.run.jobview import JobView

    if job.ended_by_down:
        return JobView(job, shown_state=f"ended by down (was {job.state})")
    if not job.final:
        return JobView(job, shown_state=f"unknown (last seen {job.state})")
    return JobView(job)


def start_words(workers: Sequence[WorkerStart]) -> str:
    """How a node's workers started in the current attempt: warm (on a standby, which had
    waited so long) or cold (and why)."""
    said = [
        f"worker {w.worker} warm ({_warm_words(w)})"
        if w.warm
        else f"worker {w.worker} cold" + (f" ({w.reason})" if w.reason else "")
        for w in workers
    ]
    return f"; {', '.join(said)}" if said else ""


def _warm_words(start: WorkerStart) -> str:
    if start.imports_s is not None:
        return f"its standby was still importing: {start.imports_s:.1f} s more"
    return f"its standby waited {start.waited_s or 0:.0f} s"


def print_jobs(found: list[JobView]) -> None:
    from skyinfra.run.job import JobState

    rows = [
        ("JOB", "ENTRY", "STATE", "PRIO", "STARTED", "DURATION", "LAST OUTPUT", "EXIT (node:code)")
    ]
    for view in found:
        j = view.record
        rows.append(
            (
                j.id,
                " ".join([j.entry, *j.args]),
                _state(view),
                str(j.priority),
                _when(j.created_at),
                _duration(view),
                _age(view.last_output_age_s),
                _codes(j),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    from skyinfra.run.job import queue_words

    for view in found:
        j = view.record
        if view.shown_state is None and j.queued and j.queue is not None:
            echo(queue_words(j.id, j.queue.to_dict()))
            if j.state is JobState.PREEMPTED:
                echo(f"job {j.id}: {preempted_words(j)}")
        for item in j.interruptions:
            echo(f"job {j.id}: {interruption_words(item)}")
        if view.shown_state is None and j.state is JobState.NEEDS_NODES:
            echo(f"job {j.id} lost a node and waits for it: {needs_nodes_words(j)}")
        if view.shown_state is None and j.state is JobState.LOST:
            echo(f"job {j.id}: {_supervisor_gone_words(j)}")


def preempted_words(job: JobRecord) -> str:
    """A preempted job waiting to resume: by whom, and how it goes on."""
    by = next((a.preempted_by for a in reversed(job.attempts) if a.preempted_by), None)
    return (
        f"preempted by job {by or '?'} (a higher priority); it resumes on the same nodes "
        "from its checkpoints when its turn comes (no restart spent)"
    )


def needs_nodes_words(job: JobRecord, *, in_full: bool = False) -> str:
    """Who replaces a job's lost nodes: node 0 itself (unattended recovery, running or
    failed), or the operator, and what to run (``in_full``: as `jobs JOB` says it)."""
    run = (
        f"from the project's folder run: skyinfra jobs recover {job.id}"
        if in_full
        else f"from the project's folder run `skyinfra jobs recover {job.id}`"
    )
    said = job.head_recovery
    if said is None:
        return run
    if said.failed:
        return (
            f"node-0's unattended recovery failed (exit {said.exit_code}; its log: "
            f"{said.log} on node-0): {run}"
        )
    return (
        "node-0 is replacing it and starting the next attempt itself (unattended recovery; "
        f"its log: {said.log} on node-0)"
    )


def _supervisor_gone_words(job: JobRecord) -> str:
    """What a job whose supervisor was killed (state lost, node 0 there) needs."""
    said = "its supervisor on node-0 was killed (nothing of it runs any more)"
    if job.restarts_left > 0:
        return (
            f"{said}: from the project's folder, `skyinfra jobs recover {job.id}` "
            "starts it again on the same nodes"
        )
    name = job.checkpoints or job.id
    return f"{said}: `skyinfra run --checkpoints {name} ...` starts it again from its checkpoints"


def show_job(view: JobView) -> None:
    from skyinfra.run.job import JobState

    job = view.record
    echo(f"job {job.id}: {_state(view)}")
    for item in job.interruptions:
        echo(f"  {interruption_words(item)}")
    if job.state is JobState.NEEDS_NODES:
        lost = ", ".join(f"node-{i}" for i in job.needs_nodes)
        echo(f"  needs nodes: {lost} lost; {needs_nodes_words(job, in_full=True)}")
        for line in job.head_recovery.tail if job.head_recovery is not None else ():
            echo(f"    {line}")
    if job.state is JobState.LOST:
        echo(f"  {_supervisor_gone_words(job)}")
    if job.state is JobState.PREEMPTED and view.shown_state is None:
        echo(f"  {preempted_words(job)}")
    echo(f"  entry:      {' '.join([job.entry, *job.args])}")
    if job.priority or job.preemptions:
        echo(f"  priority:   {job.priority} (preempted {job.preemptions} time(s))")
    queue = job.queue
    if queue is not None and job.queued and view.shown_state is None:
        echo(
            f"  queued:     position {queue.position} since {_when(queue.queued_at)}: waits "
            f"for {queue.waits_for or 'the nodes'}"
        )
    elif queue is not None and queue.left_at and queue.queued_at:
        waited = int(queue.left_at - queue.queued_at)
        echo(f"  queued:     {waited} s, from {_when(queue.queued_at)} to {_when(queue.left_at)}")
    elif queue is not None and job.state is JobState.CANCELLED:
        echo(f"  queued:     from {_when(queue.queued_at)}; cancelled there, never started")
    echo(f"  started by: {job.started_by}")
    if job.world and len(job.world) < job.nodes_total:  # `run --nodes K`
        echo(f"  nodes:      {', '.join(f'node-{i}' for i in job.world)} (rank order)")
    if job.ports is not None:
        echo(f"  ports:      jax coordinator {job.ports.jax}, torch rendezvous {job.ports.torch}")
    echo(f"  started:    {_when(job.created_at)}   ended: {_when(job.ended_at)}")
    echo(f"  duration:   {_duration(view)}")
    echo(f"  last output: {_age(view.last_output_age_s)}")
    if job.timeout_s:
        echo(f"  timeout:    {job.timeout_s:g} s")
    if job.checkpoints:
        echo(f"  checkpoints: {job.checkpoints} ($SKYINFRA_CHECKPOINT_DIR)")
    if job.max_restarts:
        echo(
            f"  restarts:   up to {job.max_restarts} on the same nodes, after a "
            + ("signal or an error exit" if job.retry_on == "error" else "signal")
        )
    from skyinfra.run.report import attempt_lines

    for line in attempt_lines([a.to_dict() for a in job.attempts]):
        echo(f"  {line}")
    from skyinfra.run.jobenv import shown

    variables = shown(job.to_dict())
    if variables:
        echo(f"  env:        {variables[0]}")
        for line in variables[1:]:
            echo(f"              {line}")
    for n in job.nodes:
        said = f"exit {n.exit_code} ({n.meaning})" if n.ended else n.state
        why = f", ended by the job {n.ended_reason}" if n.ended_reason else ""
        last = f"; last output {_when(n.last_output_at)}" if n.last_output_at else ""
        echo(f"  node-{n.node}: {said}{why}{last}{start_words(n.workers)}")
    for n in job.nodes if view.results is not None else ():
        result = (view.results or {}).get(n.node)
        if not isinstance(result, dict):
            echo(f"  node-{n.node} result: none (the function did not return there)")
            continue
        for worker in result.get("workers", []):
            if "value" not in worker:  # a script's: it returns nothing
                continue
            value = json.dumps(worker["value"], sort_keys=True)
            echo(f"  node-{n.node} worker {worker.get('worker')}: {value}")
