"""`skyinfra verify`: node and rendezvous checks on every node, with pytest-testinfra.

- runner.py runs the checks (pytest in-process, plugin.py parametrizing them over the nodes);
- checks/ holds the built-in checks (testinfra test modules), node/ the scripts they run on the
  nodes with the node's own Python;
- context.py is what the checks see; hosts.py makes each node's testinfra Host from the
  cluster's transport (local backend, or paramiko over `run`'s own pinned SSH connection);
- collective.py launches the short real collective through the runtime;
- report.py renders the table and the JSON (pure).

:func:`verify_cluster` is the entry point for the CLI (`verify`, and `run --verify`).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path

from skyinfra import lifecycle
from skyinfra.errors import ClusterDownError, SkyinfraError, UsageError, VerifyFailedError
from skyinfra.run.job import running_job
from skyinfra.spec import ClusterSpec
from skyinfra.topology import Topology, read_topology
from skyinfra.transport.base import NodeTransport
from skyinfra.transport.readiness import wait_until_ready
from skyinfra.verify.context import Expectations, frameworks_of
from skyinfra.verify.report import VerifyReport, render_table, to_json, verdict
from skyinfra.verify.runner import run_verify
from skyinfra.wheel import RUNTIME_DIR_ENV, RUNTIME_DIST, tree_source
from skyinfra.workspace import Workspace

DEFAULT_MIN_FREE_GB = 5.0
DEFAULT_COLLECTIVE_TIMEOUT_S = 60.0


def operator_runtime_version() -> str:
    """The runtime version the operator installs on nodes (the wheel `up` builds)."""
    runtime_dir = os.environ.get(RUNTIME_DIR_ENV)
    if runtime_dir:
        return tree_source(Path(runtime_dir)).version
    return importlib.metadata.version(RUNTIME_DIST)


def expectations(
    spec: ClusterSpec,
    topology: Topology,
    *,
    min_free_gb: float = DEFAULT_MIN_FREE_GB,
    collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
) -> Expectations:
    """What every node of ``spec``'s cluster should have. EFA and the idle timer come from the
    target's section when it has such settings (aws.efa, aws.idle_shutdown_minutes)."""
    return Expectations(
        runtime_version=operator_runtime_version(),
        frameworks=frameworks_of(topology),
        efa=bool(getattr(spec.section, "efa", False)),
        idle_timer=bool(getattr(spec.section, "idle_shutdown_minutes", 0)),
        min_free_bytes=int(min_free_gb * 1024**3),
        collective_timeout_s=collective_timeout_s,
    )


def verify_cluster(
    transport: NodeTransport,
    topology: Topology,
    expect: Expectations,
    *,
    topology_file: Path,
    project: Path | None,
    select: str | None = None,
) -> VerifyReport:
    """The checks on every node; those that take the rendezvous ports (the listener, the
    collective) are skipped, naming the job, while a job runs on the cluster."""
    try:
        busy = running_job(transport)
    except SkyinfraError:
        busy = None  # the head cannot say (not ready, unreachable): its checks will tell
    return run_verify(
        transport,
        topology,
        expect,
        topology_file=topology_file,
        project=project,
        select=select,
        running_job=busy,
    )


def verify_workspace(
    ws: Workspace,
    *,
    project: Path | None,
    select: str | None = None,
    min_free_gb: float = DEFAULT_MIN_FREE_GB,
    collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
) -> VerifyReport:
    """`skyinfra verify`: the checks on every node of the workspace's cluster. A -k that
    selects nothing is a UsageError (before any table)."""
    if not ws.topology_file.is_file():
        raise ClusterDownError(ws.name)
    topology = read_topology(ws.topology_file)
    spec = ws.spec()
    expect = expectations(
        spec, topology, min_free_gb=min_free_gb, collective_timeout_s=collective_timeout_s
    )
    # The rendezvous checks hold the cluster's ports: not while a run of it uses them.
    with ws.lock("verify"):
        transport = lifecycle.transport_for(ws, topology, spec=spec)
        try:
            report = verify_cluster(
                transport,
                topology,
                expect,
                topology_file=ws.topology_file,
                project=project,
                select=select,
            )
        finally:
            transport.close()
    if not report.results:
        raise_for_failures(report)
    return report


def gate(
    ws: Workspace,
    spec: ClusterSpec,
    topology: Topology,
    transport: NodeTransport,
    *,
    wait_ready_s: float,
    echo: Callable[[str], None],
) -> None:
    """`run --verify` (or ``verify = true``): wait for bootstrapping nodes (checks on them
    would only say they are not ready yet), run every check, and raise VerifyFailedError,
    after the table, when one fails: the run starts nothing."""
    wait_until_ready(transport, topology, timeout_s=wait_ready_s, echo=echo)
    echo("[skyinfra] verify: checking every node before the run")
    report = verify_cluster(
        transport,
        topology,
        expectations(spec, topology),
        topology_file=ws.topology_file,
        project=Path.cwd(),
    )
    if not report.ok:
        echo(render_table(report).rstrip("\n"))
    raise_for_failures(report)
    echo(verdict(report))


def raise_for_failures(report: VerifyReport) -> None:
    """VerifyFailedError naming each failing node and check; UsageError when no check ran
    (a -k that selects none)."""
    if report.ok:
        return
    if not report.results:
        raise UsageError("-k selects no check: see the check names in `skyinfra verify`'s table")
    failures = [(report.node_name(f.node), f.check, f.reason) for f in report.failures()]
    raise VerifyFailedError(failures)


__all__ = [
    "DEFAULT_COLLECTIVE_TIMEOUT_S",
    "DEFAULT_MIN_FREE_GB",
    "Expectations",
    "VerifyReport",
    "expectations",
    "gate",
    "operator_runtime_version",
    "raise_for_failures",
    "render_table",
    "to_json",
    "verdict",
    "verify_cluster",
    "verify_workspace",
]
