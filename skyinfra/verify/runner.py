"""Run `skyinfra verify`'s checks on every node of a cluster: pytest in this process, with
the plugin (plugin.py) that parametrizes the checks over the nodes and records the outcomes.

The built-in checks (checks/) run first, in a fixed order, then the project's own
``verify/test_*.py`` files (testinfra style: each function takes ``host``). ``select`` is
pytest's ``-k`` expression. Nothing of the project's own pytest configuration applies.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
from pathlib import Path
from typing import Any

import paramiko
import pytest
from skyinfra_runtime.topology import Topology

from skyinfra.errors import HostKeyChangedError, InternalError, SkyinfraError, UsageError
from skyinfra.transport.base import NodeTransport
from skyinfra.verify.context import Expectations, VerifyContext
from skyinfra.verify.plugin import BUILTIN_DIR, VerifyPlugin
from skyinfra.verify.report import VerifyReport

# The built-in check modules, in the order they run (the listener must be gone before the
# collective binds the same ports).
BUILTIN_CHECKS = (
    "test_node.py",
    "test_rendezvous.py",
    "test_collective.py",
    "test_accelerators.py",
)
USER_CHECKS_DIR = "verify"


def user_check_files(project: Path | None) -> list[Path]:
    """The project's own check files: verify/test_*.py."""
    if project is None or not (project / USER_CHECKS_DIR).is_dir():
        return []
    return sorted((project / USER_CHECKS_DIR).glob("test_*.py"))


def ship_missing_topology(context: VerifyContext, topology_file: Path) -> list[int]:
    """Give the cluster's topology to nodes that have none at the path `run` uses (a fresh
    local cluster's nodes get theirs at the first run); a copy that is there is checked as is."""
    shipped = []
    for node in context.topology.nodes:
        try:
            path = context.topology_path(node.index)
            if context.hosts[node.index].run(f"test -e {shlex.quote(path)}").rc != 0:
                context.transport.put_file(node.index, topology_file, path)
                shipped.append(node.index)
        except HostKeyChangedError:
            raise  # refused loudly, never a row of the table
        except (SkyinfraError, OSError, paramiko.SSHException):
            continue  # a node that cannot be reached: its checks say so, one by one
    return shipped


def run_verify(
    transport: NodeTransport,
    topology: Topology,
    expect: Expectations,
    *,
    topology_file: Path,
    project: Path | None = None,
    select: str | None = None,
    running_job: dict[str, Any] | None = None,
) -> VerifyReport:
    context = VerifyContext(transport, topology, expect, running_job=running_job)
    ship_missing_topology(context, topology_file)
    plugin = VerifyPlugin(context, project)
    files = [str(BUILTIN_DIR / name) for name in BUILTIN_CHECKS]
    files += [str(p) for p in user_check_files(project)]
    args = [
        *files,
        "-q",
        "-p", "no:cacheprovider",
        "-p", "no:pytest11.testinfra",  # its host fixture would shadow ours
        "-p", "no:randomly",
        "-c", os.devnull,  # none of the project's pytest settings (addopts, timeouts...)
        "--rootdir", str(project or BUILTIN_DIR),
        "--import-mode=importlib",
        "-o", "python_files=test_*.py",
        "--no-header",
    ]  # fmt: skip
    if select:
        args += ["-k", select]
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        code = pytest.main(args, plugins=[plugin])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) and not plugin.results:
        if code == pytest.ExitCode.USAGE_ERROR:
            said = [ln.removeprefix("ERROR: ") for ln in output.getvalue().splitlines()]
            errors = [ln for ln in said if "-k" in ln or "expression" in ln.lower()]
            raise UsageError(errors[0] if errors else f"-k {select!r} is not a -k expression")
        if code == pytest.ExitCode.NO_TESTS_COLLECTED:
            return VerifyReport(topology.cluster, tuple(n.name for n in topology.nodes))
        raise InternalError(f"the checks did not run (pytest exit {code}):\n{output.getvalue()}")
    return VerifyReport(
        topology.cluster, tuple(n.name for n in topology.nodes), list(plugin.results)
    )


__all__ = ["BUILTIN_CHECKS", "run_verify", "user_check_files"]
