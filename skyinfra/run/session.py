"""`skyinfra run`: copy the working directory to every node, launch the runtime on all of them
in parallel, stream output, stop at the first failure or at the timeout, and collect results
into runs/<id>/.

The session in steps: check ENTRY, wait until every node is ready, copy, start all, pump
output until every node ended (ending the others at the first failure, or all at the
timeout), collect results, write summary.json.

On each node a run has its own directory and leaves a shared one alone
(skyinfra_runtime.rundirs): ``<node root>/runs/<id>/work`` is the copy of the project and the
entry's working directory, ``<node root>/shared`` is never deleted by a run.
"""

from __future__ import annotations

import collections
import json
import queue
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, TextIO

from skyinfra_runtime import exitcodes as node_exitcodes
from skyinfra_runtime.entry import Entrypoint
from skyinfra_runtime.rundirs import (
    KEEP_RUNS_ENV,
    NODE_DIR_ENV,
    RUN_DIR_ENV,
    RUN_ID_ENV,
    SHARED_DIR_ENV,
)
from skyinfra_runtime.topology import NODE_ENV, TOPOLOGY_ENV, Topology

from skyinfra.errors import Detached, SkyinfraError
from skyinfra.run import DEFAULT_KEEP_RUNS
from skyinfra.run.entry_check import check_entry
from skyinfra.run.ignore import make_ignore, read_ignore_patterns, secrets_left_out
from skyinfra.run.job import JobClient, JobNodeProcess, start_job, wait_started
from skyinfra.run.report import NodeOutcome, RunReport, write_summary
from skyinfra.run.startup import HeadStartup
from skyinfra.transport.base import IgnoreFn, NodeProcess, NodeTransport
from skyinfra.transport.readiness import READY_POLL_S, wait_until_ready

Echo = Callable[[str], None]
# A node's output line, or None once its stream closed.
Event = tuple[int, str | None]

# Ending nodes (after a failure, at the timeout, on Ctrl-C): SIGTERM to the node's process
# group, SIGKILL after this many seconds. Frameworks blocked in a collective (JAX) ignore
# SIGTERM, so this bounds how long the others take to stop: under 5 s, all nodes at once.
END_GRACE_S = 3.0
# How long a node that was ended (SIGKILL sent) may take to report its exit.
ENDED_WAIT_S = 5.0
# How often running nodes are polled for their exit (a node counts as ended when its process
# does, even if a child of it still holds its output open).
POLL_S = 0.2
# After the last node ended: how long to wait for output still on its way.
DRAIN_S = 2.0
# The copy of the job's record (from the head) in runs/<id>/.
JOB_COPY = "job.json"
# How many of a node's last lines are shown when it fails first (or hangs past --timeout)
# and its output was not streamed.
TAIL_LINES = 20


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


@dataclass
class _Live:
    """The processes started so far, the queue their output lines arrive on, the nodes still
    running and still streaming, and each node's last lines."""

    procs: dict[int, NodeProcess] = field(default_factory=dict)
    events: queue.Queue[Event] = field(default_factory=queue.Queue)
    running: set[int] = field(default_factory=set)
    streaming: set[int] = field(default_factory=set)
    tails: dict[int, collections.deque[str]] = field(default_factory=dict)
    shown: set[int] = field(default_factory=set)  # nodes whose output was streamed
    startup: HeadStartup | None = None  # the head's way to its entrypoint (run/startup.py)


def run_on_cluster(
    *,
    transport: NodeTransport,
    topology: Topology,
    topology_file: Path,
    runs_dir: Path,
    src: Path,
    entry: str,
    args: Sequence[str],
    all_logs: bool,
    extra_ignores: Sequence[str] = (),
    echo: Echo = print,
    wait_ready_s: float = 0.0,
    ready_poll_s: float = READY_POLL_S,
    timeout_s: float | None = None,
    keep_runs: int = DEFAULT_KEEP_RUNS,
    terminal: TextIO | None = None,
    as_job: bool = False,
    detach: bool = False,
) -> RunReport:
    """``wait_ready_s``: how long to wait for nodes still bootstrapping (0: they must be
    ready now); nothing is copied or started before ENTRY was checked (UsageError) and every
    node is ready. ``timeout_s``: end every node when the run (from the start of the nodes)
    takes longer. ``keep_runs``: run directories each node keeps (0: all). ``terminal``:
    where the readiness wait redraws its progress bar (None, or not a terminal: lines).
    ``as_job``: the nodes run the job (skyinfra.run.job), this process follows it and can
    go (SIGHUP: ``Detached``) without ending it; ``detach``: start the job, return once every
    node started (the report holds only the id and directory)."""
    startup = HeadStartup()
    patterns = read_ignore_patterns(src)
    ignore = make_ignore(patterns, extra_ignores)
    for note in check_entry(src, entry, ignore):
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
    left_out = secrets_left_out(src, patterns)
    if left_out:
        echo(
            f"[skyinfra] not copied (secrets): {', '.join(left_out)}; "
            "a `!PATTERN` line in .skyinfraignore sends one"
        )
    report = _new_report(runs_dir, [n.index for n in topology.nodes])
    report.timeout_s = timeout_s
    _copy_to_nodes(transport, report, src, topology_file, ignore)
    startup.mark("copied")
    if detach:
        _start_job(transport, topology, report, entry, args, keep_runs)
        wait_started(JobClient(transport, report.run_id, report.run_dir / JOB_COPY))
        return report
    _run_all(
        transport,
        report,
        entry,
        args,
        all_logs=all_logs,
        echo=echo,
        keep_runs=keep_runs,
        startup=startup,
        topology=topology if as_job else None,
    )
    said = startup.summary()
    if said:
        echo(said)
    _collect_results(transport, report)
    write_summary(report, entry=entry, args=args)
    return report


def _new_report(runs_dir: Path, nodes: Sequence[int]) -> RunReport:
    run_id = new_run_id()
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True)
    return RunReport(run_id, run_dir, {i: NodeOutcome(i) for i in nodes})


def _dirs(transport: NodeTransport, node: int, run_id: str) -> NodeDirs:
    return NodeDirs(transport.node_root(node), run_id)


def _copy_to_nodes(
    transport: NodeTransport, report: RunReport, src: Path, topology_file: Path, ignore: IgnoreFn
) -> None:
    for i in report.outcomes:
        dirs = _dirs(transport, i, report.run_id)
        transport.copy_dir(i, src, dirs.work, ignore)
        transport.put_file(i, topology_file, dirs.topology)


def _run_all(
    transport: NodeTransport,
    report: RunReport,
    entry: str,
    args: Sequence[str],
    *,
    all_logs: bool,
    echo: Echo,
    keep_runs: int,
    startup: HeadStartup | None = None,
    topology: Topology | None = None,
) -> None:
    """Start every node and stream until all have ended; each node's output also goes to
    runs/<id>/node-<i>.log. Ctrl-C ends every node started so far. With ``topology``, the
    nodes run a job and this follows it: ``Detached`` stops following and leaves it running."""
    live = _Live(startup=startup)
    live.shown = set(report.outcomes) if all_logs else {0}
    with ExitStack() as stack:
        logs = {
            i: stack.enter_context((report.run_dir / f"node-{i}.log").open("w", encoding="utf-8"))
            for i in report.outcomes
        }
        started = False
        try:
            if topology is None:
                _start_all(
                    transport, report.run_id, list(report.outcomes), entry, args, live, keep_runs
                )
            else:
                _start_job(transport, topology, report, entry, args, keep_runs)
                started = True
                _follow_job(transport, report, live)
            # The job's supervisor enforces the timeout itself; this one only reports it.
            _pump_until_done(report, live, logs, echo=echo, enforce_timeout=topology is None)
            for proc in live.procs.values():
                if isinstance(proc, JobNodeProcess):
                    proc.finish()
        except KeyboardInterrupt:
            _end_nodes(report, live, list(live.running), "after Ctrl-C", echo)
            raise
        except Detached:
            for proc in live.procs.values():
                if isinstance(proc, JobNodeProcess):
                    proc.stop_following()
            raise Detached(report.run_id if started else "") from None


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


def _start_all(
    transport: NodeTransport,
    run_id: str,
    nodes: Sequence[int],
    entry: str,
    args: Sequence[str],
    live: _Live,
    keep_runs: int,
) -> None:
    """Start the runtime on every node, each with a thread that queues its output lines."""
    for i in nodes:
        dirs = _dirs(transport, i, run_id)
        proc = transport.start(
            i,
            _launch_argv(dirs, i, entry, args),
            env=_launch_env(dirs, i, keep_runs),
            cwd=dirs.work,
            tag=run_id,
        )
        live.procs[i] = proc
        live.running.add(i)
        live.streaming.add(i)
        live.tails[i] = collections.deque(maxlen=TAIL_LINES)
        threading.Thread(target=_pump, args=(i, proc, live.events), daemon=True).start()


def _start_job(
    transport: NodeTransport,
    topology: Topology,
    report: RunReport,
    entry: str,
    args: Sequence[str],
    keep_runs: int,
) -> None:
    launch = {}
    for i in report.outcomes:
        dirs = _dirs(transport, i, report.run_id)
        launch[i] = (_launch_argv(dirs, i, entry, args), _launch_env(dirs, i, keep_runs), dirs.work)
    start_job(
        transport,
        topology,
        report.run_id,
        launch=launch,
        entry=entry,
        args=args,
        timeout_s=report.timeout_s,
    )


def _follow_job(transport: NodeTransport, report: RunReport, live: _Live) -> None:
    """Each node of the job as a process whose output is its log, followed."""
    client = JobClient(transport, report.run_id, report.run_dir / JOB_COPY)
    for i in report.outcomes:
        proc = JobNodeProcess(i, client)
        live.procs[i] = proc
        live.running.add(i)
        live.streaming.add(i)
        live.tails[i] = collections.deque(maxlen=TAIL_LINES)
        threading.Thread(target=_pump, args=(i, proc, live.events), daemon=True).start()


def _job_reason(proc: NodeProcess) -> str:
    """Why the job's supervisor ended the node ("" when it did not, or not a job's node)."""
    return proc.job_reason() if isinstance(proc, JobNodeProcess) else ""


def _pump(node: int, proc: NodeProcess, events: queue.Queue[Event]) -> None:
    try:
        for line in proc.lines():
            events.put((node, line))
    finally:
        events.put((node, None))


def _pump_until_done(
    report: RunReport,
    live: _Live,
    logs: Mapping[int, IO[str]],
    *,
    echo: Echo,
    enforce_timeout: bool = True,
) -> None:
    """Log and echo output lines and record each node's exit (polled) until every node ended,
    then take the output still on its way; end every node when the timeout passes (a job's
    supervisor does that itself: here it is only reported)."""
    started = time.monotonic()
    timeout = report.timeout_s if enforce_timeout else None
    deadline = None if timeout is None else started + timeout
    while live.running:
        wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
        _take_events(live, logs, echo, wait)
        polled = {i: live.procs[i].poll() for i in sorted(live.running)}
        reasons = {i: _job_reason(live.procs[i]) for i, code in polled.items() if code is not None}
        if any(r.startswith("at --timeout") for r in reasons.values()) and not report.timed_out:
            _time_out(report, live, echo)
            continue
        # A node the job ended after another failed is recorded after the one that failed.
        for i in sorted(polled, key=lambda i: (bool(reasons.get(i)), i)):
            if i not in live.running:  # ended (and recorded) after another node failed
                continue
            code = polled[i]
            if code is not None:
                _record_exit(report, live, logs, i, code, echo)
        timed_out = deadline is not None and time.monotonic() >= deadline
        if timed_out and live.running and not report.timed_out:
            _time_out(report, live, echo)
    _drain(live, logs, echo, DRAIN_S)


def _take_events(live: _Live, logs: Mapping[int, IO[str]], echo: Echo, wait: float) -> None:
    """Handle the events that arrive within ``wait`` seconds (all that are queued, at least)."""
    end = time.monotonic() + wait
    while True:
        try:
            i, line = live.events.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            return
        if line is None:
            live.streaming.discard(i)
            continue
        logs[i].write(line + "\n")
        logs[i].flush()
        live.tails[i].append(line)
        if i == 0 and live.startup is not None:
            live.startup.on_head_line(line)
        if i in live.shown:
            echo(f"[node-{i}] {line}")


def _drain(live: _Live, logs: Mapping[int, IO[str]], echo: Echo, timeout: float) -> None:
    """Take output until every stream closed or ``timeout`` passed (a child the node's
    process left behind may hold its output open)."""
    end = time.monotonic() + timeout
    while live.streaming and time.monotonic() < end:
        _take_events(live, logs, echo, min(POLL_S, max(0.0, end - time.monotonic())))
    _take_events(live, logs, echo, 0.0)


def _record_exit(
    report: RunReport,
    live: _Live,
    logs: Mapping[int, IO[str]],
    node: int,
    code: int,
    echo: Echo,
) -> None:
    """The node's exit code; the first node to fail ends every other node still running."""
    live.running.discard(node)
    outcome = report.outcomes[node]
    outcome.exit_code = code
    outcome.ended_reason = outcome.ended_reason or _job_reason(live.procs[node])
    if outcome.ended_reason:  # skyinfra ended it; a node that finished anyway is not "ended"
        outcome.ended_by_us = code != 0
        return
    if code == 0 or report.first_failure is not None:
        return
    report.first_failure = node
    others = sorted(live.running)
    ending = (
        f"; ending {_names(others)} (SIGTERM, SIGKILL after {END_GRACE_S:g} s)" if others else ""
    )
    echo(
        f"[skyinfra] node-{node} failed first: exit {code} "
        f"({node_exitcodes.describe(code)}){ending}"
    )
    stopper = _end_nodes_in_background(report, live, others, f"after node-{node} failed", echo)
    if node not in live.shown:
        # Its own error: the lines it printed before it ended (give them a moment to arrive).
        end = time.monotonic() + 1.0
        while node in live.streaming and time.monotonic() < end:
            _take_events(live, logs, echo, POLL_S)
        _show_tail(live, node, echo)
        live.shown.add(node)
    stopper.join()
    _record_ended(report, live, others)


def _time_out(report: RunReport, live: _Live, echo: Echo) -> None:
    still = sorted(live.running)
    report.timed_out = still
    echo(
        f"[skyinfra] --timeout {report.timeout_s:g} s passed; still running: {_names(still)}; "
        f"ending them (SIGTERM, SIGKILL after {END_GRACE_S:g} s)"
    )
    job = any(isinstance(live.procs[i], JobNodeProcess) for i in still)
    if not job:
        for i in still:
            if i not in live.shown:
                _show_tail(live, i, echo, lines=5)
    _end_nodes(report, live, still, f"at --timeout {report.timeout_s:g} s", echo)
    if job:
        # The job's supervisor ended them already: their lines from before its SIGTERM.
        for i in still:
            if i not in live.shown:
                _show_tail(live, i, echo, lines=5, tail=_tail_at_end(live.procs[i]))


def _end_nodes(
    report: RunReport, live: _Live, nodes: Iterable[int], reason: str, echo: Echo
) -> None:
    nodes = sorted(nodes)
    _end_nodes_in_background(report, live, nodes, reason, echo).join()
    _record_ended(report, live, nodes)


def _end_nodes_in_background(
    report: RunReport, live: _Live, nodes: Sequence[int], reason: str, echo: Echo
) -> threading.Thread:
    """End ``nodes`` all at once (one thread each); the returned thread joins them."""
    for i in nodes:
        report.outcomes[i].ended_reason = reason

    def end(i: int) -> None:
        try:
            live.procs[i].kill(grace_s=END_GRACE_S)
        except (SkyinfraError, OSError) as err:
            echo(f"[skyinfra] could not end node-{i}: {err}")

    threads = [threading.Thread(target=end, args=(i,), daemon=True) for i in nodes]
    for t in threads:
        t.start()

    def join() -> None:
        for t in threads:
            t.join()

    joiner = threading.Thread(target=join, daemon=True)
    joiner.start()
    return joiner


def _record_ended(report: RunReport, live: _Live, nodes: Iterable[int]) -> None:
    """Record the exit of nodes that were just ended; one that has not ended a few seconds
    later is given up on (exit code unknown) instead of being waited for forever."""
    for i in nodes:
        if i not in live.running:
            continue
        try:
            code: int | None = live.procs[i].wait(timeout=ENDED_WAIT_S)
        except (TimeoutError, subprocess.TimeoutExpired):
            code = None
        live.running.discard(i)
        report.outcomes[i].exit_code = code
        report.outcomes[i].ended_by_us = code != 0


def _tail_at_end(proc: NodeProcess) -> list[str] | None:
    return proc.tail_at_end() if isinstance(proc, JobNodeProcess) else None


def _show_tail(
    live: _Live,
    node: int,
    echo: Echo,
    *,
    lines: int = TAIL_LINES,
    tail: list[str] | None = None,
) -> None:
    tail = list(live.tails.get(node, ()) if tail is None else tail)[-lines:]
    if not tail:
        echo(f"[skyinfra] node-{node} printed nothing")
        return
    echo(f"[skyinfra] last {len(tail)} line(s) of node-{node}:")
    for line in tail:
        echo(f"[node-{node}] {line}")


def _names(nodes: Iterable[int]) -> str:
    return ", ".join(f"node-{i}" for i in nodes)


def _collect_results(transport: NodeTransport, report: RunReport) -> None:
    """Fetch each node's result.json into runs/<id>/node-<i>.result.json (None if unreadable)."""
    for i, outcome in report.outcomes.items():
        local = report.run_dir / f"node-{i}.result.json"
        remote = _dirs(transport, i, report.run_id).result
        if transport.fetch(i, remote, local):
            try:
                outcome.result = json.loads(local.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                outcome.result = None
