"""How `skyinfra run` watches its nodes once they started: each node's output lines arrive on
one queue (a thread a node), are logged and echoed; each node's exit is polled; the first node
to fail ends the others (all at once, SIGTERM then SIGKILL), and the timeout ends every node
still running. The session (session.py, nodes.py) starts the nodes and collects what they leave.
"""

from __future__ import annotations

import collections
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from skyinfra_runtime import exitcodes as node_exitcodes

from skyinfra.errors import SkyinfraError
from skyinfra.run.job import JobNodeProcess
from skyinfra.run.report import RunReport
from skyinfra.run.startup import HeadStartup
from skyinfra.transport.base import NodeProcess

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
# How many of a node's last lines are shown when it fails first (or hangs past --timeout)
# and its output was not streamed.
TAIL_LINES = 20


@dataclass
class Live:
    """The processes started so far, the queue their output lines arrive on, the nodes still
    running and still streaming, and each node's last lines."""

    procs: dict[int, NodeProcess] = field(default_factory=dict)
    events: queue.Queue[Event] = field(default_factory=queue.Queue)
    running: set[int] = field(default_factory=set)
    streaming: set[int] = field(default_factory=set)
    tails: dict[int, collections.deque[str]] = field(default_factory=dict)
    shown: set[int] = field(default_factory=set)  # nodes whose output was streamed
    startup: HeadStartup | None = None  # the head's way to its entrypoint (run/startup.py)


def job_reason(proc: NodeProcess) -> str:
    """Why the job's supervisor ended the node ("" when it did not, or not a job's node)."""
    return proc.job_reason() if isinstance(proc, JobNodeProcess) else ""


def pump(node: int, proc: NodeProcess, events: queue.Queue[Event]) -> None:
    try:
        for line in proc.lines():
            events.put((node, line))
    finally:
        events.put((node, None))


def pump_until_done(
    report: RunReport,
    live: Live,
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
        take_events(live, logs, echo, wait)
        polled = {i: live.procs[i].poll() for i in sorted(live.running)}
        reasons = {i: job_reason(live.procs[i]) for i, code in polled.items() if code is not None}
        if any(r.startswith("at --timeout") for r in reasons.values()) and not report.timed_out:
            time_out(report, live, echo)
            continue
        # A node the job ended after another failed is recorded after the one that failed.
        for i in sorted(polled, key=lambda i: (bool(reasons.get(i)), i)):
            if i not in live.running:  # ended (and recorded) after another node failed
                continue
            code = polled[i]
            if code is not None:
                record_exit(report, live, logs, i, code, echo)
        timed_out = deadline is not None and time.monotonic() >= deadline
        if timed_out and live.running and not report.timed_out:
            time_out(report, live, echo)
    drain(live, logs, echo, DRAIN_S)


def take_events(live: Live, logs: Mapping[int, IO[str]], echo: Echo, wait: float) -> None:
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


def drain(live: Live, logs: Mapping[int, IO[str]], echo: Echo, timeout: float) -> None:
    """Take output until every stream closed or ``timeout`` passed (a child the node's
    process left behind may hold its output open)."""
    end = time.monotonic() + timeout
    while live.streaming and time.monotonic() < end:
        take_events(live, logs, echo, min(POLL_S, max(0.0, end - time.monotonic())))
    take_events(live, logs, echo, 0.0)


def record_exit(
    report: RunReport,
    live: Live,
    logs: Mapping[int, IO[str]],
    node: int,
    code: int,
    echo: Echo,
) -> None:
    """The node's exit code; the first node to fail ends every other node still running."""
    live.running.discard(node)
    outcome = report.outcomes[node]
    outcome.exit_code = code
    outcome.ended_reason = outcome.ended_reason or job_reason(live.procs[node])
    if outcome.ended_reason:  # skyinfra ended it; a node that finished anyway is not "ended"
        outcome.ended_by_us = code != 0
        return
    if code == 0 or report.first_failure is not None:
        return
    report.first_failure = node
    others = sorted(live.running)
    ending = (
        f"; ending {names(others)} (SIGTERM, SIGKILL after {END_GRACE_S:g} s)" if others else ""
    )
    proc = live.procs[node]
    if isinstance(proc, JobNodeProcess) and proc.vanished():  # its agent went: no exit code
        how = "its agent went away without an exit code (the node lost?)"
    else:
        how = f"exit {code} ({node_exitcodes.describe(code)})"
    echo(f"[skyinfra] node-{node} failed first: {how}{ending}")
    stopper = end_nodes_in_background(report, live, others, f"after node-{node} failed", echo)
    if node not in live.shown:
        # Its own error: the lines it printed before it ended (give them a moment to arrive).
        end = time.monotonic() + 1.0
        while node in live.streaming and time.monotonic() < end:
            take_events(live, logs, echo, POLL_S)
        show_tail(live, node, echo)
        live.shown.add(node)
    stopper.join()
    record_ended(report, live, others)


def time_out(report: RunReport, live: Live, echo: Echo) -> None:
    still = sorted(live.running)
    report.timed_out = still
    echo(
        f"[skyinfra] --timeout {report.timeout_s:g} s passed; still running: {names(still)}; "
        f"ending them (SIGTERM, SIGKILL after {END_GRACE_S:g} s)"
    )
    job = any(isinstance(live.procs[i], JobNodeProcess) for i in still)
    if not job:
        for i in still:
            if i not in live.shown:
                show_tail(live, i, echo, lines=5)
    end_nodes(report, live, still, f"at --timeout {report.timeout_s:g} s", echo)
    if job:
        # The job's supervisor ended them already: their lines from before its SIGTERM.
        for i in still:
            if i not in live.shown:
                show_tail(live, i, echo, lines=5, tail=tail_at_end(live.procs[i]))


def end_nodes(report: RunReport, live: Live, nodes: Iterable[int], reason: str, echo: Echo) -> None:
    nodes = sorted(nodes)
    end_nodes_in_background(report, live, nodes, reason, echo).join()
    record_ended(report, live, nodes)


def end_nodes_in_background(
    report: RunReport, live: Live, nodes: Sequence[int], reason: str, echo: Echo
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


def record_ended(report: RunReport, live: Live, nodes: Iterable[int]) -> None:
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


def tail_at_end(proc: NodeProcess) -> list[str] | None:
    return proc.tail_at_end() if isinstance(proc, JobNodeProcess) else None


def show_tail(
    live: Live,
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


def names(nodes: Iterable[int]) -> str:
    return ", ".join(f"node-{i}" for i in nodes)
