"""The recovery of a job that lost nodes: replace them (or, when only its supervisor was
killed, keep them), copy the project to the new ones and start the job again as its next
attempt, following it or not."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path

from skyinfra_runtime.topology import Topology

from skyinfra.errors import InternalError, TransportError, UsageError
from skyinfra.run.attached import run_attempt, take_attempts
from skyinfra.run.job import JOB_COPY, RECOVERABLE_STATES, JobClient, JobState, find_job
from skyinfra.run.launch import ClusterNodes, JobLaunch
from skyinfra.run.nodes import copy_to_nodes, start_and_wait
from skyinfra.run.report import RunReport
from skyinfra.run.watch import Echo
from skyinfra.topology import read_topology
from skyinfra.transport.base import NodeTransport
from skyinfra.transport.nodesync import Entries


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
    report.job_state = "running"
    echo(f"[skyinfra] job {report.run_id} started as attempt {len(report.attempts) + 1}")


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
