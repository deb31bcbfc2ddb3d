"""`skyinfra run`: copy the working directory to every node, launch the runtime on all of them
in parallel, stream output, stop at the first failure, and collect results into runs/<id>/.

The session in steps: wait until every node is ready, copy, start all, pump output until the
streams close (ending the others at the first failure), collect results, write summary.json.
"""

from __future__ import annotations

import json
import queue
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from skyinfra_runtime.topology import NODE_ENV, TOPOLOGY_ENV, Topology

from skyinfra.run.ignore import make_ignore, read_ignore_patterns
from skyinfra.run.report import NodeOutcome, RunReport, write_summary
from skyinfra.transport.base import IgnoreFn, NodeProcess, NodeTransport
from skyinfra.transport.readiness import READY_POLL_S, wait_until_ready

Echo = Callable[[str], None]
# A node's output line, or None once its stream closed.
Event = tuple[int, str | None]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass
class _Live:
    """The processes started so far and the queue their output lines arrive on."""

    procs: dict[int, NodeProcess] = field(default_factory=dict)
    events: queue.Queue[Event] = field(default_factory=queue.Queue)


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
) -> RunReport:
    """``wait_ready_s``: how long to wait for nodes still bootstrapping (0: they must be
    ready now); nothing is copied or started before every node is ready."""
    wait_until_ready(transport, topology, timeout_s=wait_ready_s, echo=echo, poll_s=ready_poll_s)
    report = _new_report(runs_dir, [n.index for n in topology.nodes])
    ignore = make_ignore(read_ignore_patterns(src), extra_ignores)
    _copy_to_nodes(transport, report, src, topology_file, ignore)
    _run_all(transport, report, entry, args, all_logs=all_logs, echo=echo)
    _collect_results(transport, report)
    write_summary(report, entry=entry, args=args)
    return report


def _new_report(runs_dir: Path, nodes: Sequence[int]) -> RunReport:
    run_id = new_run_id()
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True)
    return RunReport(run_id, run_dir, {i: NodeOutcome(i) for i in nodes})


def _copy_to_nodes(
    transport: NodeTransport, report: RunReport, src: Path, topology_file: Path, ignore: IgnoreFn
) -> None:
    for i in report.outcomes:
        root = transport.node_root(i)
        transport.copy_dir(i, src, f"{root}/work", ignore)
        transport.put_file(i, topology_file, f"{root}/topology.json")


def _run_all(
    transport: NodeTransport,
    report: RunReport,
    entry: str,
    args: Sequence[str],
    *,
    all_logs: bool,
    echo: Echo,
) -> None:
    """Start every node and stream until all have ended; each node's output also goes to
    runs/<id>/node-<i>.log. Ctrl-C ends every node started so far."""
    live = _Live()
    with ExitStack() as stack:
        logs = {
            i: stack.enter_context((report.run_dir / f"node-{i}.log").open("w", encoding="utf-8"))
            for i in report.outcomes
        }
        try:
            _start_all(transport, report.run_id, list(report.outcomes), entry, args, live)
            _pump_until_first_failure(report, live, logs, all_logs=all_logs, echo=echo)
        except KeyboardInterrupt:
            for proc in live.procs.values():
                proc.kill()
            raise


def _launch_argv(root: str, node: int, run_id: str, entry: str, args: Sequence[str]) -> list[str]:
    argv = [
        f"{root}/venv/bin/skyinfra-runtime", "launch",
        "--topology", f"{root}/topology.json",
        "--node", str(node),
        "--result", f"{root}/runs/{run_id}/result.json",
        entry,
    ]  # fmt: skip
    return [*argv, "--", *args] if args else argv


def _launch_env(root: str, node: int, run_id: str) -> dict[str, str]:
    return {
        TOPOLOGY_ENV: f"{root}/topology.json",
        NODE_ENV: str(node),
        "SKYINFRA_RUN_ID": run_id,
        "PYTHONUNBUFFERED": "1",
    }


def _start_all(
    transport: NodeTransport,
    run_id: str,
    nodes: Sequence[int],
    entry: str,
    args: Sequence[str],
    live: _Live,
) -> None:
    """Start the runtime on every node, each with a thread that queues its output lines."""
    for i in nodes:
        root = transport.node_root(i)
        proc = transport.start(
            i,
            _launch_argv(root, i, run_id, entry, args),
            env=_launch_env(root, i, run_id),
            cwd=f"{root}/work",
            tag=run_id,
        )
        live.procs[i] = proc
        threading.Thread(target=_pump, args=(i, proc, live.events), daemon=True).start()


def _pump(node: int, proc: NodeProcess, events: queue.Queue[Event]) -> None:
    for line in proc.lines():
        events.put((node, line))
    events.put((node, None))


def _pump_until_first_failure(
    report: RunReport,
    live: _Live,
    logs: Mapping[int, IO[str]],
    *,
    all_logs: bool,
    echo: Echo,
) -> None:
    """Log and echo output lines until every stream closed; record each exit as it comes."""
    open_streams = set(live.procs)
    while open_streams:
        i, line = live.events.get()
        if line is None:
            open_streams.discard(i)
            _record_exit(report, live, i, echo)
            continue
        logs[i].write(line + "\n")
        logs[i].flush()
        if all_logs or i == 0:
            echo(f"[node-{i}] {line}")


def _record_exit(report: RunReport, live: _Live, node: int, echo: Echo) -> None:
    """The node's exit code; the first node to fail ends every other node still running."""
    code = live.procs[node].wait()
    report.outcomes[node].exit_code = code
    if code == 0 or report.first_failure is not None:
        return
    report.first_failure = node
    echo(f"[skyinfra] node-{node} exited with {code}; ending the other nodes")
    for j, other in live.procs.items():
        if j != node and other.poll() is None:
            report.outcomes[j].ended_by_us = True
            other.kill()


def _collect_results(transport: NodeTransport, report: RunReport) -> None:
    """Fetch each node's result.json into runs/<id>/node-<i>.result.json (None if unreadable)."""
    for i, outcome in report.outcomes.items():
        local = report.run_dir / f"node-{i}.result.json"
        remote = f"{transport.node_root(i)}/runs/{report.run_id}/result.json"
        if transport.fetch(i, remote, local):
            try:
                outcome.result = json.loads(local.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                outcome.result = None
