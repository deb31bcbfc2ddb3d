"""A run's nodes: its id and directories on each node, the copy of the project, the
launch of the runtime (directly, or as a job's agents: skyinfra.run.jobstart), and the results
collected into runs/<id>/ (the steps skyinfra.run.session puts together)."""

from __future__ import annotations

import collections
import json
import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from skyinfra_runtime.entry import Entrypoint
from skyinfra_runtime.rundirs import (
    KEEP_RUNS_ENV,
    NODE_DIR_ENV,
    RUN_DIR_ENV,
    RUN_ID_ENV,
    SHARED_DIR_ENV,
)
from skyinfra_runtime.topology import NODE_ENV, TOPOLOGY_ENV, Topology

from skyinfra.errors import Detached, TransportError, UsageError
from skyinfra.run.ignore import make_ignore, read_ignore_patterns
from skyinfra.run.job import JobClient, wait_started
from skyinfra.run.jobcopies import JOB_COPY
from skyinfra.run.jobstart import start_job
from skyinfra.run.launch import JobLaunch
from skyinfra.run.report import COPY_RECORD, NodeOutcome, RunReport, copy_line, write_summary
from skyinfra.run.watch import TAIL_LINES, Echo, Live, pump
from skyinfra.transport.base import IgnoreFn, NodeTransport
from skyinfra.transport.nodesync import Entries
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


def start_and_wait(
    transport: NodeTransport, topology: Topology, report: RunReport, launch: JobLaunch
) -> None:
    """The job started on every node, not followed: returns once every agent said so (or,
    for a job the head queued, once every agent waits: ``report.queued`` says where). A
    hang-up (``Detached``) names the job once its agents were started, none before. A job
    started again goes on after the report's attempts."""
    started = False
    try:
        start_job_attempt(transport, topology, report, launch, report.attempts)
        started = True
        if report.queued is None:  # a queued job's nodes start when the head starts it
            rec = wait_started(JobClient(transport, report.run_id, report.run_dir / JOB_COPY))
            report.world = list(rec.world)
    except Detached as hup:
        raise Detached(hup.job_id or (report.run_id if started else ""), hup.signum) from None


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


def _launch_argv(dirs: NodeDirs, node: int, entry: str, args: Sequence[str]) -> list[str]:
    argv = [
        f"{dirs.root}/venv/bin/skyinfra-runtime", "launch",
        "--topology", dirs.topology,
        "--node", str(node),
        "--result", dirs.result,
        *Entrypoint.parse(entry).argv(),  # "-m NAME" goes as two arguments
    ]  # fmt: skip
    return [*argv, "--", *args] if args else argv


# What every launcher (and the standbys its workers may be: lifecycle/standbys.py) starts
# with beyond the transport's environment, besides skyinfra's own variables.
NODE_PROCESS_ENV = {"PYTHONUNBUFFERED": "1"}


def _launch_env(dirs: NodeDirs, node: int, keep_runs: int) -> dict[str, str]:
    return {
        **NODE_PROCESS_ENV,
        TOPOLOGY_ENV: dirs.topology,
        NODE_ENV: str(node),
        RUN_ID_ENV: dirs.run_id,
        NODE_DIR_ENV: dirs.root,
        RUN_DIR_ENV: dirs.run,
        SHARED_DIR_ENV: dirs.shared,
        KEEP_RUNS_ENV: str(keep_runs),
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
    said = start_job(
        transport,
        topology,
        report.run_id,
        launch,
        per_node,
        timeout_s=report.timeout_s,
        attempts_before=attempts_before,
        created_at=report.created_at if attempts_before else None,
    )
    report.queued, report.agents = said.queued, list(said.agents)
    if said.world:
        report.world = list(said.world)


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
