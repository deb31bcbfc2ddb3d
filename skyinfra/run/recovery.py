"""The recovery of a job that lost nodes: replace them (or, when only its supervisor was
killed, keep them), copy the project to the new ones and start the job again as its next
attempt, following it or not."""

from __future__ import annotations

import contextlib
import enum
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from skyinfra_runtime.s3 import Credentials
from skyinfra_runtime.topology import Topology

from skyinfra.errors import (
    HeadLostError,
    InternalError,
    JobNoLongerWaits,
    TransportError,
    UsageError,
    WorkspaceBusyError,
)
from skyinfra.run import DEFAULT_KEEP_RUNS
from skyinfra.run.attached import record_head_lost, run_attempt, take_attempts
from skyinfra.run.job import (
    HEAD_LOST,
    RECOVERABLE_STATES,
    JobClient,
    JobRecord,
    JobState,
    find_job,
    head_gone,
    queue_words,
)
from skyinfra.run.jobcopies import JOB_COPY
from skyinfra.run.jobenv import resolve
from skyinfra.run.launch import ClusterNodes, JobLaunch, Restarts
from skyinfra.run.nodes import collect_and_summarise, copy_to_nodes, scan_project, start_and_wait
from skyinfra.run.report import NodeOutcome, RunReport
from skyinfra.run.watch import Echo
from skyinfra.topology import read_topology
from skyinfra.transport.base import NodeTransport
from skyinfra.transport.nodesync import Entries

if TYPE_CHECKING:
    from skyinfra.run.head_recovery import HeadRecovery
    from skyinfra.workspace import Workspace


def restart_on_replaced_nodes(
    report: RunReport,
    launch: JobLaunch,
    cluster: ClusterNodes,
    wanted: Entries,
    echo: Echo,
) -> NodeTransport | None:
    """While the job ended needing nodes (a node lost, restarts left): replace them, copy the
    project to them, start the job again as its next attempt and follow it; the transport of
    the replaced cluster (None when nothing was replaced). ``cluster``'s transport: the
    cluster's before, to see an interrupted node go before it is replaced; its
    ``replace_nodes`` replaces them. A detached ``launch``: return once the next attempt
    started on every node (the head's unattended recovery), unless the job was cancelled
    meanwhile. When node 0 recovers the job itself and an attached run leaves it to node 0
    (HeadRecovery.attached_run_waits: AWS), this waits for node 0's attempt and follows it
    on the cluster as ``reload_nodes`` gives it (node 0 changed the state)."""
    replaced = None
    transport, restarts = cluster.transport, launch.restarts
    while report.job_state == "needs_nodes":
        started_by_head = False
        lost = report.needs_nodes
        left = time_left(report)
        if left is not None and left <= 0:
            echo(
                f"[skyinfra] the job's --timeout ({report.timeout_s:g} s from its start) has "
                "run out: it is not started again"
            )
            break
        if not lost:
            # Only the job's supervisor was lost (node 0 is there): the same nodes go on.
            echo(
                f"[skyinfra] starting the job again as attempt {len(report.attempts) + 1} on "
                "the same nodes (every node is there; the job's supervisor was killed)"
            )
            topology = read_topology(cluster.topology_file)
        elif (
            not launch.detach
            and restarts is not None
            and restarts.head_recovery is not None
            and restarts.head_recovery.attached_run_waits
            and head_recovered(transport, report, echo)
        ):
            # Node 0 replaced the nodes and started the next attempt itself: follow it.
            started_by_head = True
            if cluster.reload_nodes is not None:
                transport, topology = cluster.reload_nodes()
                replaced = transport
            else:
                topology = read_topology(cluster.topology_file)
        else:
            wait_for_interrupted_nodes(transport, report, lost, echo)
            noticed = {i.node for i in report.interruptions}
            how = "interrupted" if noticed >= set(lost) else "lost"
            echo(
                f"[skyinfra] {', '.join(f'node-{i}' for i in lost)} {how}: replacing "
                f"{'it' if len(lost) == 1 else 'them'} (Terraform recreates what is missing, "
                f"as `up`; ranks kept), then starting the job again as attempt "
                f"{len(report.attempts) + 1}"
            )
            if cluster.replace_nodes is None:
                raise InternalError("a job that lost nodes needs replace_nodes to go on")
            transport, topology = cluster.replace_nodes(lost)
            replaced = transport
            copy_to_nodes(transport, report, launch, cluster.topology_file, wanted, echo, only=lost)
        report.first_failure, report.timed_out = None, []
        for outcome in report.outcomes.values():
            outcome.exit_code, outcome.ended_by_us, outcome.ended_reason = None, False, ""
        if launch.detach:
            start_detached_attempt(transport, topology, report, launch, echo)
            break
        # A surviving node's log goes on where it was; a replaced node's starts anew.
        shown = {i: lines_in(report.run_dir / f"node-{i}.log") for i in report.outcomes}
        run_attempt(
            transport,
            topology,
            report,
            launch,
            echo=echo,
            skip_lines={i: n for i, n in shown.items() if i not in lost},
            start=not started_by_head,
        )
    return replaced


# How often a follower asks node 0's record whether its recovery started the next attempt.
HEAD_RECOVERY_POLL_S = 1.0


def head_recovered(transport: NodeTransport, report: RunReport, echo: Echo) -> bool:
    """When node 0 recovers the job itself (the cluster's recover setting): wait until its
    next attempt started (True), or until node 0 says its recovery failed (False: the caller
    replaces the nodes, as without it). No head recovery: False at once."""
    said = report.head_recovery
    if said is None or said.failed:
        return False
    echo(
        "[skyinfra] node-0 replaces the lost node(s) and starts the next attempt itself "
        f"(unattended recovery; its log: {said.log} on node-0): waiting for it"
    )
    client = JobClient(transport, report.run_id, report.run_dir / JOB_COPY)
    attempt = len(report.attempts)
    while True:
        rec = client.record(fresh=True)
        if rec is not None and rec.attempt > attempt:
            take_attempts(report, rec)
            return True
        said = rec.head_recovery if rec is not None else None
        if (rec is None or rec.state is not JobState.NEEDS_NODES) or (
            said is not None and said.failed
        ):
            tail = said.tail if said is not None else None
            echo(
                "[skyinfra] node-0's recovery did not start the next attempt"
                + (f" ({tail[-1]})" if tail else "")
                + ": replacing the node(s) from here"
            )
            return False
        time.sleep(HEAD_RECOVERY_POLL_S)


def start_detached_attempt(
    transport: NodeTransport, topology: Topology, report: RunReport, launch: JobLaunch, echo: Echo
) -> None:
    """The next attempt started on every node, not followed; not when the job's record on
    node 0 no longer waits (cancelled while its nodes were being replaced)."""
    with contextlib.suppress(TransportError, UsageError):  # node 0 replaced: no record
        state = find_job(transport, report.run_id).state
        if state not in RECOVERABLE_STATES:
            echo(f"[skyinfra] the job is {state} now: it is not started again")
            report.job_state = state.value
            return
    start_and_wait(transport, topology, report, launch)
    attempt = len(report.attempts) + 1
    if report.queued is not None:  # other jobs hold the nodes: it waits for its turn
        report.job_state = "queued"
        echo(f"[skyinfra] {queue_words(report.run_id, report.queued)} (as attempt {attempt})")
        return
    report.job_state = "running"
    echo(f"[skyinfra] job {report.run_id} started as attempt {attempt}")


def time_left(report: RunReport) -> float | None:
    """Seconds left of the job's --timeout, counted from its first start (None: no limit)."""
    if report.timeout_s is None or report.created_at is None:
        return None
    return report.created_at + report.timeout_s - time.time()


# How long past its notice's time an interrupted node may still answer before it is replaced
# all the same (EC2 terminates on time; a node that still answers is then Terraform's to see).
GONE_GRACE_S = 30.0


def wait_for_interrupted_nodes(
    transport: NodeTransport,
    report: RunReport,
    lost: Sequence[int],
    echo: Echo,
    poll_s: float = 0.5,
) -> None:
    """A node with a Spot interruption notice is still there until its instance goes (at the
    notice's time; a local node once its part of the job has ended): replacing it before
    would find nothing to replace. Wait until it no longer answers, or its time is past."""
    due = {
        i.node: float(i.time)
        for i in report.interruptions
        if i.node is not None and i.node in lost and i.time is not None
    }
    for node, when in sorted(due.items()):
        if not transport.readiness(node).ready:
            continue
        echo(
            f"[skyinfra] node-{node} has a Spot interruption notice: waiting for it to go "
            f"(by {time.strftime('%H:%M:%S', time.localtime(when))}) before replacing it"
        )
        until = when + GONE_GRACE_S
        while transport.readiness(node).ready and time.time() < until:
            time.sleep(poll_s)


def lines_in(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


class Recovery(enum.Enum):
    """Who recovers a job, and so what follows its next attempt's start."""

    FOLLOW = "follow"  # `jobs recover JOB`: it is followed to its end
    DETACHED = "detached"  # `jobs recover --all`: started (or queued), not followed
    # Node 0's supervisor (skyinfra.run.head_recovery): not followed, from node 0's copy of
    # the project, and a workspace busy with another command is waited for.
    UNATTENDED = "unattended"


def recover_job(
    ws: Workspace,
    cluster: ClusterNodes,
    job_id: str,
    *,
    head_recovery: Callable[[], HeadRecovery | None],
    src: Path,
    how: Recovery,
    echo: Echo,
    store_credentials: Callable[[], Credentials | None] = lambda: None,
) -> RunReport | None:
    """Replace the job's lost nodes (none when only its supervisor was killed), copy ``src``
    to them, start its next attempt and, as ``how`` says, follow it: its report (results and
    summary.json collected), or None where it is not followed. ``cluster``'s replace_nodes
    replaces them; ``head_recovery``: what node 0 runs to recover the next attempt itself
    (the cluster's setting); ``store_credentials``: what its agents sign the checkpoint
    store's requests with (JobLaunch)."""
    unattended = how is Recovery.UNATTENDED
    transport, total = cluster.transport, len(cluster.topology.nodes)
    head_lost = head_gone(transport)
    if head_lost:
        # The record went with node 0: this workspace's copy of it (`run` keeps one from the
        # job's start) says what the job was; it goes on as a job that lost its head.
        job = _job_copy(ws, job_id)
        state = JobState.LOST
    else:
        job = find_job(transport, job_id)
        state = job.state
    if state not in RECOVERABLE_STATES:
        raise UsageError(
            f"job {job_id} is {state}: only a job that lost a node and waits for it "
            "(needs_nodes), or whose supervisor was killed (lost), is recovered; "
            "`skyinfra run` starts a new one"
        )
    name = job.checkpoints or job_id
    if head_lost and job.restarts_left <= 0:
        raise UsageError(
            f"job {job_id} lost node-0, its head, and has no restart left (--max-restarts "
            f"{job.max_restarts}): `skyinfra up` replaces node-0, then "
            f"`skyinfra run --checkpoints {name} ...` starts it again from its checkpoint set"
        )
    if state is JobState.LOST and job.restarts_left <= 0:
        raise UsageError(
            f"job {job_id}'s supervisor on node-0 was killed and the job has no restart left "
            f"(--max-restarts {job.max_restarts}): `skyinfra run --checkpoints "
            f"{name} ...` starts it again from its checkpoint set's last checkpoint"
        )
    # The env from the record, the secrets' values from this environment (as `run` took them).
    job_env = resolve(
        spec_env=sorted(job.env.items()),
        spec_secrets=list(job.secrets),
        cli_env=(),
        cli_secrets=(),
        environ=os.environ,
    )
    run_dir = ws.runs_dir / job_id
    run_dir.mkdir(parents=True, exist_ok=True)
    report = RunReport(job_id, run_dir, {i: NodeOutcome(i) for i in range(total)})
    take_attempts(report, job)
    left = time_left(report)
    if left is not None and left <= 0 and report.created_at is not None:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.created_at))
        raise UsageError(
            f"job {job_id} ran out of its --timeout ({report.timeout_s:g} s from its start at "
            f"{started}): it is not started again; `skyinfra run "
            f"--checkpoints {name} --timeout S ...` starts it from its checkpoint set"
        )
    launch = JobLaunch(
        entry=job.entry,
        src=src,
        args=tuple(job.args),
        job_env=job_env,
        checkpoints=name,
        # The next attempt recovers itself too, when the cluster says so.
        restarts=Restarts(report.max_restarts, report.retry_on, head_recovery()),
        keep_runs=DEFAULT_KEEP_RUNS,
        as_job=True,
        detach=how is not Recovery.FOLLOW,
        # A job on K of the nodes (`run --nodes K`) goes on on K free ones; one on the nodes
        # it named (`run --nodes 0,2`) on those, in its rank order.
        world=nodes_asked(job, total),
        on=job.named_nodes or None,
        priority=job.priority,
        store_credentials=store_credentials(),
    )
    if unattended and report.attempts:
        report.attempts[-1]["restarted_who"] = "node-0 (unattended recovery)"
    copy_cache = None if unattended else ws.copy_cache_file  # node 0's copy: not the project

    def still_needed() -> bool:
        return find_job(transport, job_id).state in RECOVERABLE_STATES

    command = f"jobs recover {job_id}"
    with _workspace_lock(ws, command, echo, wait=unattended, still_needed=still_needed):
        if state is JobState.LOST:
            # Node 0 is there and its supervisor is not (or node 0 is gone with it): every
            # other node's part is ended, the attempt recorded, and the job goes on on the same
            # nodes (or on a new node 0, replaced as `up` does).
            record_head_lost(
                transport,
                report,
                job,
                launch,
                (),
                HEAD_LOST if head_lost else "the job's supervisor on node-0 was killed",
                echo,
                node_0_kept=not head_lost,
            )
        replaced = restart_on_replaced_nodes(
            report,
            launch,
            cluster,
            scan_project(launch.src, copy_cache=copy_cache),
            echo,
        )
        if how is not Recovery.FOLLOW:
            return None
        collect_and_summarise(replaced or transport, report, launch)
    return report


# How long an unattended recovery waits for a workspace another command holds (an attached
# `run`, an `up`) before it gives up and leaves the job to `jobs recover`.
UNATTENDED_LOCK_WAIT_S = 30 * 60.0


LOCK_RETRY_S = 5.0


def recovery_order(jobs: Sequence[JobRecord]) -> list[JobRecord]:
    """Jobs a lost head took with it, in the order it had them (`jobs recover --all` starts
    them again in it): those that held nodes first, in their start order, then those that
    waited in its queue (queued, or preempted), higher priority first, then in submission
    order (the head gives each recovered start a new place in its queue, in the order they
    come)."""

    def place(job: JobRecord) -> tuple[int, float, float]:
        last = job.attempts[-1] if job.attempts else None  # a queued job's has not started
        if last is not None and last.started_at is not None and last.preempted_by is None:
            return (0, 0.0, last.started_at)
        seq = job.seq if job.seq is not None else (job.queue.seq if job.queue else 0)
        return (1, -float(job.priority), float(seq))

    return sorted(jobs, key=place)


def nodes_asked(job: JobRecord, total: int) -> int | None:
    """How many nodes a recovered job asks for again: the K of `run --nodes K` (kept from its
    submission on; older records: its world once it started). None: every node, or the nodes
    it named (those go on as they were)."""
    if job.named_nodes:
        return None
    asked = job.nodes_asked if job.nodes_asked is not None else len(job.world)
    return asked if 0 < asked < total else None


@contextlib.contextmanager
def _workspace_lock(
    ws: Workspace,
    command: str,
    echo: Echo,
    *,
    wait: bool,
    still_needed: Callable[[], bool] = lambda: True,
) -> Iterator[None]:
    """The workspace's lock; with ``wait``, a busy workspace is retried (said once) until
    UNATTENDED_LOCK_WAIT_S has passed, instead of refused at once, while ``still_needed``
    (else JobNoLongerWaits)."""
    give_up = time.monotonic() + UNATTENDED_LOCK_WAIT_S
    said = False
    with contextlib.ExitStack() as stack:
        while True:
            try:
                stack.enter_context(ws.lock(command))
                break
            except WorkspaceBusyError as err:
                if not wait or time.monotonic() >= give_up:
                    raise
                if not said:
                    echo(f"[skyinfra] {err}: waiting for it")
                    said = True
                time.sleep(LOCK_RETRY_S)
                if not still_needed():
                    raise JobNoLongerWaits from None
        yield


def _job_copy(ws: Workspace, job_id: str) -> JobRecord:
    """This workspace's copy of a job's record (runs/JOB/job.json, kept by the `run` that
    started it); HeadLostError when there is none (the job was started elsewhere)."""
    copy = ws.runs_dir / job_id / JOB_COPY
    try:
        data: JobRecord | None = JobRecord.from_dict(json.loads(copy.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        data = None
    if data is None or data.id != job_id:
        raise HeadLostError(
            f"cluster {ws.name!r}: {HEAD_LOST}, with job {job_id}'s record, and this workspace "
            f"has no copy of it ({copy}): `skyinfra up` replaces node-0, then `skyinfra run "
            "--checkpoints NAME ...` starts the job again from its checkpoint set"
        )
    return data
