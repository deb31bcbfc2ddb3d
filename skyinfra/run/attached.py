"""Following a run or job from this process (attached): start every node, stream its output
until all ended, and what a lost head (node 0, or only the job's supervisor) leaves: the
attempt recorded from the record's last copy."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack

from skyinfra_runtime.topology import Topology

from skyinfra.errors import (
    CancelledByCtrlC,
    CancelledInQueue,
    Detached,
    HeadLostError,
    SkyinfraError,
    SupervisorGoneError,
    TransportError,
)
from skyinfra.run.job import (
    HEAD_LOST,
    RECORD_EVERY_S,
    JobClient,
    JobNodeProcess,
    JobRecord,
    cancel_job,
    end_node_part,
    head_gone,
    queue_words,
    queued_hint,
)
from skyinfra.run.jobcopies import JOB_COPY
from skyinfra.run.launch import JobLaunch
from skyinfra.run.nodes import start_all, start_job_attempt
from skyinfra.run.report import RunReport
from skyinfra.run.startup import HeadStartup
from skyinfra.run.watch import TAIL_LINES, Echo, Live, end_nodes, pump, pump_until_done
from skyinfra.transport.base import NodeTransport


def run_attempt(
    transport: NodeTransport,
    topology: Topology | None,
    report: RunReport,
    launch: JobLaunch,
    *,
    echo: Echo,
    startup: HeadStartup | None = None,
    skip_lines: Mapping[int, int] | None = None,
    start: bool = True,
) -> None:
    """Start every node and stream until all have ended; each node's output also goes to
    runs/<id>/node-<i>.log. Ctrl-C ends every node started so far. With ``topology``, the
    nodes run a job and this follows it: ``Detached`` stops following and leaves it running
    (``start=False``: the job runs already, node 0 started its attempt: only followed). A job
    started again goes on after the report's attempts."""
    attempts_before = list(report.attempts)
    live = Live(startup=startup)
    live.shown = set(report.outcomes) if launch.all_logs else {0}
    with ExitStack() as stack:
        logs = {
            # Appended: a job started again after a lost node follows on in the same files.
            i: stack.enter_context((report.run_dir / f"node-{i}.log").open("a", encoding="utf-8"))
            for i in report.outcomes
        }
        started = False
        client: JobClient | None = None
        try:
            if topology is None:
                start_all(transport, report, launch, live)
            else:
                if start:
                    start_job_attempt(transport, topology, report, launch, attempts_before)
                else:  # node 0 started this attempt: on nodes this run does not know
                    report.agents = []
                started = True
                client = follow_job(transport, report, live, skip_lines or {})
                if report.queued is not None:
                    say_queued(topology.cluster, report, client, echo, launch.ctrl_c_cancels_queued)
            # The job's supervisor enforces the timeout itself; this one only reports it.
            pump_until_done(report, live, logs, echo=echo, enforce_timeout=topology is None)
            for proc in live.procs.values():
                if isinstance(proc, JobNodeProcess):
                    proc.finish()
            if client is not None:
                rec = client.record(fresh=True)
                # Never left the queue (not even to run before a preemption).
                queue = rec.queue if rec is not None and rec.started_at is None else None
                if queue is not None and queue.left_at is None:
                    raise CancelledInQueue(report.run_id)  # it never left the queue
                take_attempts(report, rec)
                if rec is not None and rec.world:  # `run --nodes K`: only its K were in it
                    for i in [i for i in report.outcomes if i not in rec.world]:
                        del report.outcomes[i]
        except TransportError as err:
            # Node 0 gone once the job started (its folder, on the local target): not an error
            # of this run's own, but the job's head lost, which a restart may recover from.
            # Node 0 there but the job's supervisor on it killed: the same, with node 0 kept.
            node_0_kept = isinstance(err, SupervisorGoneError)
            if not (started and (node_0_kept or head_gone(transport))):
                raise
            for proc in live.procs.values():
                if isinstance(proc, JobNodeProcess):
                    proc.stop_following()
            rec = client.last_record if client is not None else None
            why = str(err) if isinstance(err, HeadLostError) else HEAD_LOST
            record_head_lost(
                transport, report, rec, launch, attempts_before, why, echo, node_0_kept=node_0_kept
            )
        except KeyboardInterrupt:
            if client is not None and report.queued is not None and still_queued(client):
                # Ctrl-C leaves a queued job queued by default: nothing of it runs yet, and the
                # head starts it when its turn comes (`skyinfra cancel JOB` removes it).
                for proc in live.procs.values():
                    if isinstance(proc, JobNodeProcess):
                        proc.stop_following()
                cancelled = launch.ctrl_c_cancels_queued
                if cancelled:  # the head takes it out of the queue, as `cancel JOB` does
                    cancel_job(transport, report.run_id)
                raise CancelledByCtrlC(
                    report.run_id, started=True, queued=True, cancelled=cancelled
                ) from None
            end_nodes(report, live, list(live.running), "after Ctrl-C", echo)
            if topology is None:
                raise
            raise CancelledByCtrlC(report.run_id, started=started) from None
        except Detached as hup:
            for proc in live.procs.values():
                if isinstance(proc, JobNodeProcess):
                    proc.stop_following()
            raise Detached(hup.job_id or (report.run_id if started else ""), hup.signum) from None


def record_head_lost(
    transport: NodeTransport,
    report: RunReport,
    rec: JobRecord | None,
    launch: JobLaunch,
    attempts_before: Sequence[Mapping[str, object]],
    why: str,
    echo: Echo,
    *,
    node_0_kept: bool = False,
) -> None:
    """Node 0 went while the job ran, and with it the job's supervisor and its record: the
    other nodes' parts are ended here (their agents would end them, having lost the head;
    this waits until they did), the attempt is recorded from the record's last copy, and the
    job waits for node 0 (needs_nodes: `run` replaces it and starts the next attempt) while
    restarts are left, else ends "lost". ``node_0_kept``: node 0 is there, only the job's
    supervisor on it was killed: nothing is replaced, the next attempt starts on the same
    nodes (needs_nodes with no node in it)."""
    echo(
        f"[skyinfra] {why}"
        + ("" if node_0_kept else "; the job's supervisor and record were on it")
    )
    for i in sorted(report.outcomes):
        if i == 0:
            continue
        try:
            end_node_part(transport, i, report.run_id)
        except TransportError as err:
            echo(f"[skyinfra] could not end node-{i}'s part of the job: {err}")
    take_attempts(report, rec)
    if not report.attempts:
        report.attempts = [dict(a) for a in attempts_before] + [
            {"attempt": len(attempts_before) + 1}
        ]
    restarts = launch.restarts
    report.max_restarts = restarts.max_restarts if restarts is not None else 0
    current = report.attempts[-1]
    seen, started = time.time(), current.get("started_at")
    current.update(
        ended_at=seen,
        outcome="failed",
        cause={
            "node": 0,
            "exit_code": None,
            "meaning": "the job's supervisor on node-0 was killed"
            if node_0_kept
            else "node-0 (the head) lost, with the job's supervisor",
            "kind": "lost",
        },
        failed_at=seen,
        lost_s=round(seen - float(started), 3) if isinstance(started, int | float) else None,
    )
    report.first_failure = 0
    for i, outcome in report.outcomes.items():
        outcome.exit_code = None if i == 0 else outcome.exit_code
        if i != 0:
            outcome.ended_by_us, outcome.ended_reason = True, "after node-0 (the head) was lost"
    left = report.max_restarts - (len(report.attempts) - 1)
    if left > 0:
        current["not_restarted"] = (
            "the job's supervisor on node-0 killed: the operator starts the next attempt"
            if node_0_kept
            else "node-0 lost: waiting for the operator to replace it"
        )
        if node_0_kept:  # what the next attempt's record says about who restarted it
            current["restarted_why"] = "after the job's supervisor on node-0 was killed"
        report.job_state, report.needs_nodes = "needs_nodes", [] if node_0_kept else [0]
        return
    current["not_restarted"] = f"no restart left (--max-restarts {report.max_restarts})"
    report.job_state, report.needs_nodes = "lost", []
    name = launch.checkpoints or (rec.checkpoints if rec is not None else "") or report.run_id
    echo(
        f"[skyinfra] the job cannot go on without its "
        f"{'supervisor' if node_0_kept else 'head'} and has no restart left "
        f"(--max-restarts {report.max_restarts}): "
        f"{'' if node_0_kept else '`skyinfra up` replaces node-0, then '}"
        f"`skyinfra run --checkpoints {name} ...` starts the job again from the "
        "checkpoint set's last checkpoint (the set outlives the nodes)"
    )


def take_attempts(report: RunReport, rec: JobRecord | None) -> None:
    """The job's attempts (each one's cause, lost and recovery time), its restart settings,
    state and lost nodes, from its record (the head's; None: not read yet)."""
    if rec is None:
        report.attempts, report.max_restarts, report.retry_on = [], 0, "signal"
        report.job_state, report.needs_nodes = "", []
        report.interruptions, report.head_recovery = [], None
        return
    # The report's attempts stay JSON: the run adds the attempts it records itself.
    report.attempts = [a.to_dict() for a in rec.attempts]
    report.max_restarts = rec.max_restarts
    report.retry_on = rec.retry_on
    report.job_state = rec.state.value
    report.needs_nodes = list(rec.needs_nodes)
    if rec.created_at is not None:
        report.created_at = float(rec.created_at)
    if rec.timeout_s is not None:
        report.timeout_s = float(rec.timeout_s)
    # The last attempt's notices: the nodes an earlier one lost have been replaced since.
    last = rec.attempts[-1] if rec.attempts else None
    report.interruptions = list(last.interruptions) if last is not None else []
    report.head_recovery = rec.head_recovery


def follow_job(
    transport: NodeTransport, report: RunReport, live: Live, skip: Mapping[int, int]
) -> JobClient:
    """Each node of the job as a process whose output is its log, followed (``skip``: the
    lines of each node's log already shown, by an earlier pass of this run)."""
    client = JobClient(transport, report.run_id, report.run_dir / JOB_COPY)
    # A node without an agent of the job (outside the world of a job the head started at
    # once) has no log to follow, and no end for a follower to wait for.
    followed = [i for i in report.outcomes if not report.agents or i in report.agents]
    for i in followed:
        proc = JobNodeProcess(i, client, skip.get(i, 0))
        live.procs[i] = proc
        live.running.add(i)
        live.streaming.add(i)
        live.tails[i] = collections.deque(maxlen=TAIL_LINES)
        threading.Thread(target=pump, args=(i, proc, live.events), daemon=True).start()
    return client


def say_queued(
    cluster: str, report: RunReport, client: JobClient, echo: Echo, ctrl_c_cancels: bool
) -> None:
    """An attached run of a job the head queued: say where it waits, what Ctrl-C does to it
    (``ctrl_c_cancels``: cancels it), and (from a thread of its own, while the nodes' output
    is followed) when it leaves the queue."""
    queued = report.queued or {}
    echo(f"[skyinfra] {queue_words(report.run_id, queued)}")
    echo(
        f"[skyinfra] waiting for it here; {queued_hint(cluster, report.run_id)}; Ctrl-C "
        + (
            "stops waiting and cancels it (--ctrl-c-while-queued cancel)"
            if ctrl_c_cancels
            else "stops waiting and leaves it queued"
        )
    )

    def watch() -> None:
        while True:
            try:
                rec = client.record()
            except (SkyinfraError, OSError):
                return  # the follow says what went wrong
            if rec is not None and not rec.queued:
                if not rec.final:
                    echo(f"[skyinfra] job {report.run_id} left the queue: starting on every node")
                return
            time.sleep(RECORD_EVERY_S)

    threading.Thread(target=watch, daemon=True).start()


def still_queued(client: JobClient) -> bool:
    """The job still waits in the head's queue (as the head's record says now)."""
    try:
        rec = client.record(fresh=True)
    except (SkyinfraError, OSError):
        return False
    return rec is not None and rec.queued
