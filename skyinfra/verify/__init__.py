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
from pathlib import Path

from skyinfra.errors import UsageError, VerifyFailedError
from skyinfra.spec import ClusterSpec
from skyinfra.topology import Topology
from skyinfra.transport.base import NodeTransport
from skyinfra.verify.context import Expectations, frameworks_of
from skyinfra.verify.report import VerifyReport, render_table, to_json, verdict
from skyinfra.verify.runner import run_verify
from skyinfra.wheel import RUNTIME_DIR_ENV, RUNTIME_DIST, tree_source

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
    return run_verify(
        transport, topology, expect, topology_file=topology_file, project=project, select=select
    )


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
    "operator_runtime_version",
    "raise_for_failures",
    "render_table",
    "to_json",
    "verdict",
    "verify_cluster",
]
