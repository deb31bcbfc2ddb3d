"""`skyinfra run`: copy the working directory to every node, launch the runtime on all of them
in parallel, stream output, stop at the first failure or at the timeout, and collect results
into runs/<id>/.

The session in steps: check ENTRY, wait until every node is ready, copy, start all, pump
output until every node ended (ending the others at the first failure, or all at the
timeout: watch.py), collect results, write summary.json. The copy sends only what each
node's newest copy lacks (skyinfra.transport.nodesync).

On each node a run has its own directory and leaves a shared one alone
(skyinfra_runtime.rundirs): ``<node root>/runs/<id>/work`` is the copy of the project and the
entry's working directory, ``<node root>/shared`` is never deleted by a run.
"""

from __future__ import annotations

import collections
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

from skyinfra_runtime.entry import Entrypoint
from skyinfra_runtime.rundirs import (
    KEEP_RUNS_ENV,
    NODE_DIR_ENV,
    RUN_DIR_ENV,
    RUN_ID_ENV,
    SHARED_DIR_ENV,
)
from skyinfra_runtime.topology import NODE_ENV, TOPOLOGY_ENV, Topology

from skyinfra.errors import (
    CancelledByCtrlC,
    Detached,
    HeadLostError,
    InternalError,
    SupervisorGoneError,
    TransportError,
    UsageError,
)
from skyinfra.run.entry_check import check_entry
from skyinfra.run.ignore import make_ignore, read_ignore_patterns, secrets_left_out
from skyinfra.run.job import (
    HEAD_LOST,
    JOB_COPY,
    RECOVERABLE_STATES,
    JobClient,
    JobNodeProcess,
    JobRecord,
    JobState,
    end_node_part,
    find_job,
    head_gone,
    refuse_if_busy,
    start_job,
    wait_started,
)
from skyinfra.run.launch import ClusterNodes, JobLaunch
from skyinfra.run.report import COPY_RECORD, NodeOutcome, RunReport, copy_line, write_summary
from skyinfra.run.startup import HeadStartup
from skyinfra.run.watch import TAIL_LINES, Echo, Live, end_nodes, pump, pump_until_done
from skyinfra.topology import read_topology
from skyinfra.transport.base import IgnoreFn, NodeTransport
from skyinfra.transport.nodesync import Entries
from skyinfra.transport.readiness import READY_POLL_S, wait_until_ready
from skyinfra.transport.tree import scan


def new_run_id() -> str:
    """YYYYmmdd-HHMMSS-ffffff-<4 hex>: sorts in start order even for runs started within the
    same second (pruning keeps the newest by this order), and two operators never collide."""
    return datetime.now().strftime("%Y%m%d-%H%M%S-%f") + "-" + secrets.token_hex(2)


@dataclass(frozen=True)
class NodeDirs:
    """One run's paths on one node (see the module doc)."""

    root: str
    run_id: str

    @property
    def run(self) -> str:
        return f"{self.root}/runs/{self.run_id}"

    @property
    def work(self) -> str:
        return f"{self.run}/work"

    @property
    def shared(self) -> str:
        return f"{self.root}/shared"

    @property
    def result(self) -> str:
        return f"{self.run}/result.json"

    @property
    def topology(self) -> str:
        return f"{self.root}/topology.json"


def run_on_cluster(
    launch: JobLaunch,
    cluster: ClusterNodes,
    *,
    echo: Echo = print,
    wait_ready_s: float = 0.0,
    ready_poll_s: float = READY_POLL_S,
    terminal: TextIO | None = None,
) -> RunReport:
    """Run ``launch`` on ``cluster`` (skyinfra.run.launch says what each field does).
    ``wait_ready_s``: how long to wait for nodes still bootstrapping (0: they must be ready
    now); nothing is copied or started before ENTRY was checked (UsageError) and every node
    is ready. ``terminal``: where the readiness wait redraws its progress bar (None, or not a
    terminal: lines). A detached launch returns once every node started (the report holds
    only the id and directory). A job that lost a node with restarts left, on a cluster with
    ``replace_nodes``: the nodes are replaced, the project copied again and the job started
    as its next attempt, followed here (skyinfra.run.recovery)."""
    if (launch.job_env.env or launch.job_env.secrets) and not launch.is_job:
        raise InternalError("a run's env and secrets need it to be a job (as_job)")
    if launch.restarts is not None and launch.restarts.max_restarts and not launch.is_job:
        raise InternalError("restarts need the run to be a job (as_job)")
    transport, topology = cluster.transport, cluster.topology
    startup = HeadStartup()
    patterns = read_ignore_patterns(launch.src)
    ignore = make_ignore(patterns, launch.extra_ignores)
    for note in check_entry(launch.src, launch.entry, ignore, run_files=launch.run_files):
        echo(f"[skyinfra] {note}")
    wait_until_ready(
        transport,
        topology,
        timeout_s=wait_ready_s,
        echo=echo,
        poll_s=ready_poll_s,
        terminal=terminal,
    )
    startup.mark("ready")
    if launch.is_job:
        refuse_if_busy(transport, topology.cluster)
    left_out = secrets_left_out(launch.src, patterns)
    if left_out:
        echo(
            f"[skyinfra] not copied (secrets): {', '.join(left_out)}; "
            "a `!PATTERN` line in .skyinfraignore sends one"
        )
    wanted = scan_checked(launch.src, ignore, launch.copy_cache)
    report = new_report(cluster.runs_dir, [n.index for n in topology.nodes])
    report.timeout_s = launch.timeout_s
    copy_to_nodes(transport, report, launch, cluster.topology_file, wanted, echo)
    startup.mark("copied")
    if launch.detach:
        start_and_wait(transport, topology, report, launch)
        return report
    run_attempt(
        transport,
        topology if launch.as_job else None,
        report,
        launch,
        echo=echo,
        startup=startup,
    )
    if launch.as_job and cluster.replace_nodes is not None:
        replaced = restart_on_replaced_nodes(report, launch, cluster, wanted, echo)
        transport = replaced or transport
    said = startup.summary()
    if said:
        echo(said)
    collect_results(transport, report)
    write_summary(report, entry=launch.entry, args=launch.args)
    return report


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


def start_and_wait(
    transport: NodeTransport, topology: Topology, report: RunReport, launch: JobLaunch
) -> None:
    """The job started on every node, not followed: returns once every agent said so. A
    hang-up (``Detached``) names the job once its agents were started, none before. A job
    started again goes on after the report's attempts."""
    started = False
    try:
        start_job_attempt(transport, topology, report, launch, report.attempts)
        started = True
        wait_started(JobClient(transport, report.run_id, report.run_dir / JOB_COPY))
    except Detached as hup:
        raise Detached(hup.job_id or (report.run_id if started else ""), hup.signum) from None


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


def scan_project(
    src: Path, extra_ignores: Sequence[str] = (), copy_cache: Path | None = None
) -> Entries:
    """What a copy of ``src`` to the nodes holds (its ignore patterns and ``extra_ignores``)."""
    return scan_checked(src, make_ignore(read_ignore_patterns(src), extra_ignores), copy_cache)


def collect_and_summarise(transport: NodeTransport, report: RunReport, launch: JobLaunch) -> None:
    """Each node's result.json into the run's directory, then summary.json."""
    collect_results(transport, report)
    write_summary(report, entry=launch.entry, args=launch.args)


def new_report(runs_dir: Path, nodes: Sequence[int]) -> RunReport:
    run_id = new_run_id()
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True)
    return RunReport(run_id, run_dir, {i: NodeOutcome(i) for i in nodes})


def node_dirs(transport: NodeTransport, node: int, run_id: str) -> NodeDirs:
    return NodeDirs(transport.node_root(node), run_id)


def scan_checked(src: Path, ignore: IgnoreFn, cache_file: Path | None) -> Entries:
    """What the copy holds, read once for every node (after the readiness wait: a file
    changed during it is sent as it is now). A file that cannot be read: UsageError."""
    try:
        return scan(src, ignore, cache_file)
    except OSError as err:
        raise UsageError(
            f"cannot read {err.filename} to copy it to the nodes ({err.strerror}); "
            "a line in .skyinfraignore leaves it out"
        ) from err


def copy_to_nodes(
    transport: NodeTransport,
    report: RunReport,
    launch: JobLaunch,
    topology_file: Path,
    wanted: Entries,
    echo: Echo,
    only: Sequence[int] | None = None,
) -> None:
    """Each node gets the project in the run's directory, built from its newest copy: only
    new and changed files travel (skyinfra.transport.nodesync); runs/<id>/copy.json and
    summary.json say what travelled to each node. ``only``: these nodes (replaced ones)."""
    for i, outcome in report.outcomes.items():
        if only is not None and i not in only:
            continue
        dirs = node_dirs(transport, i, report.run_id)
        outcome.copy = transport.copy_tree(i, launch.src, wanted, report.run_id)
        transport.put_file(i, topology_file, dirs.topology)
        for name, local in launch.run_files.items():
            transport.put_file(i, local, f"{dirs.run}/{name}")
    copies = {i: o.copy for i, o in report.outcomes.items() if o.copy is not None}
    (report.run_dir / COPY_RECORD).write_text(
        json.dumps({f"node-{i}": c.as_json() for i, c in copies.items()}, indent=2) + "\n",
        encoding="utf-8",
    )
    echo(copy_line(copies))


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
                started = True
                client = follow_job(transport, report, live, skip_lines or {})
            # The job's supervisor enforces the timeout itself; this one only reports it.
            pump_until_done(report, live, logs, echo=echo, enforce_timeout=topology is None)
            for proc in live.procs.values():
                if isinstance(proc, JobNodeProcess):
                    proc.finish()
            if client is not None:
                take_attempts(report, client.record(fresh=True))
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


def _launch_argv(dirs: NodeDirs, node: int, entry: str, args: Sequence[str]) -> list[str]:
    argv = [
        f"{dirs.root}/venv/bin/skyinfra-runtime", "launch",
        "--topology", dirs.topology,
        "--node", str(node),
        "--result", dirs.result,
        *Entrypoint.parse(entry).argv(),  # "-m NAME" goes as two arguments
    ]  # fmt: skip
    return [*argv, "--", *args] if args else argv


def _launch_env(dirs: NodeDirs, node: int, keep_runs: int) -> dict[str, str]:
    return {
        TOPOLOGY_ENV: dirs.topology,
        NODE_ENV: str(node),
        RUN_ID_ENV: dirs.run_id,
        NODE_DIR_ENV: dirs.root,
        RUN_DIR_ENV: dirs.run,
        SHARED_DIR_ENV: dirs.shared,
        KEEP_RUNS_ENV: str(keep_runs),
        "PYTHONUNBUFFERED": "1",
    }


def start_all(transport: NodeTransport, report: RunReport, launch: JobLaunch, live: Live) -> None:
    """Start the runtime on every node, each with a thread that queues its output lines."""
    for i in report.outcomes:
        dirs = node_dirs(transport, i, report.run_id)
        proc = transport.start(
            i,
            _launch_argv(dirs, i, launch.entry, launch.args),
            env=_launch_env(dirs, i, launch.keep_runs),
            cwd=dirs.work,
            tag=report.run_id,
        )
        live.procs[i] = proc
        live.running.add(i)
        live.streaming.add(i)
        live.tails[i] = collections.deque(maxlen=TAIL_LINES)
        threading.Thread(target=pump, args=(i, proc, live.events), daemon=True).start()


def start_job_attempt(
    transport: NodeTransport,
    topology: Topology,
    report: RunReport,
    launch: JobLaunch,
    attempts_before: Sequence[Mapping[str, object]] = (),
) -> None:
    from skyinfra.checkpoints import record_use

    record_use(report.run_dir, launch.checkpoints or report.run_id)
    per_node = {}
    for i in report.outcomes:
        dirs = node_dirs(transport, i, report.run_id)
        per_node[i] = (
            _launch_argv(dirs, i, launch.entry, launch.args),
            _launch_env(dirs, i, launch.keep_runs),
            dirs.work,
        )
    start_job(
        transport,
        topology,
        report.run_id,
        launch,
        per_node,
        timeout_s=report.timeout_s,
        attempts_before=attempts_before,
        created_at=report.created_at if attempts_before else None,
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
    for i in report.outcomes:
        proc = JobNodeProcess(i, client, skip.get(i, 0))
        live.procs[i] = proc
        live.running.add(i)
        live.streaming.add(i)
        live.tails[i] = collections.deque(maxlen=TAIL_LINES)
        threading.Thread(target=pump, args=(i, proc, live.events), daemon=True).start()
    return client


def collect_results(transport: NodeTransport, report: RunReport) -> None:
    """Fetch each node's result.json into runs/<id>/node-<i>.result.json (None if unreadable)."""
    for i, outcome in report.outcomes.items():
        local = report.run_dir / f"node-{i}.result.json"
        try:
            remote = node_dirs(transport, i, report.run_id).result
        except TransportError:
            continue  # a node that is gone (the head lost, not replaced) left no result
        if transport.fetch(i, remote, local):
            try:
                outcome.result = json.loads(local.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                outcome.result = None
