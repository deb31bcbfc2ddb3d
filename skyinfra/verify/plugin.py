"""The pytest plugin `skyinfra verify` runs the checks with: one test per check and node.

Any test that asks for ``host`` (testinfra's fixture name, so users' own check files work
unchanged), ``node`` or ``facts`` runs once per node. The plugin records each outcome as a
:class:`~skyinfra.verify.report.CheckResult`: a failed assertion's message is the reason, a
skip is "not applicable".
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import testinfra.host

from skyinfra.verify.context import VerifyContext
from skyinfra.verify.report import CheckResult, Status

NODE_PARAM = "_skyinfra_node"
BUILTIN_DIR = Path(__file__).parent / "checks"
# The built-in checks that read what the probe finds by importing the frameworks.
FRAMEWORK_CHECKS = ("test_framework", "test_gpus_visible")


class VerifyPlugin:
    def __init__(self, context: VerifyContext, project: Path | None = None) -> None:
        self.context = context
        self.project = project
        self.results: list[CheckResult] = []

    # ------------------------------------------------------------------ fixtures

    @pytest.fixture(scope="session")
    def cluster(self) -> VerifyContext:
        return self.context

    @pytest.fixture
    def _skyinfra_node(self, request: pytest.FixtureRequest) -> int:
        index: int = request.param
        return index

    @pytest.fixture
    def node(self, _skyinfra_node: int) -> int:
        """This node's index."""
        return _skyinfra_node

    @pytest.fixture
    def host(self, _skyinfra_node: int) -> testinfra.host.Host:
        """testinfra's Host for this node."""
        return self.context.hosts[_skyinfra_node]

    @pytest.fixture
    def facts(self, _skyinfra_node: int) -> dict[str, Any]:
        """What node/probe.py found on this node."""
        found = self.context.facts(_skyinfra_node)
        if "error" in found:
            pytest.fail(found["error"], pytrace=False)
        return found

    # ------------------------------------------------------------------ hooks

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Import the frameworks on the nodes only when a selected check looks at them
        (importing torch or jax takes seconds)."""
        self.context.probe_frameworks = any(
            getattr(item, "originalname", "") in FRAMEWORK_CHECKS for item in session.items
        )

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if NODE_PARAM in metafunc.fixturenames:
            nodes = self.context.topology.nodes
            metafunc.parametrize(
                NODE_PARAM, [n.index for n in nodes], ids=[n.name for n in nodes], indirect=True
            )
        if "framework" in metafunc.fixturenames and metafunc.definition.path.parent == BUILTIN_DIR:
            names = [name for name, _ in self.context.expect.frameworks]
            metafunc.parametrize("framework", names, ids=names)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if report.when == "call" or report.outcome != "passed":
            if report.when == "teardown" and report.outcome == "passed":
                return
            self._record(item, report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            name = self._check_name_of_path(Path(str(report.fspath)), None)
            reason = _reason(report)
            for node in self.context.topology.nodes:
                self.results.append(CheckResult(f"{name} (collection)", node.index, "fail", reason))

    # ------------------------------------------------------------------ results

    def _record(self, item: pytest.Item, report: pytest.TestReport) -> None:
        status: Status = {"passed": "pass", "skipped": "n/a"}.get(report.outcome, "fail")  # type: ignore[assignment]
        details = [str(v) for k, v in report.user_properties if k == "detail"]
        reason = " ".join(details) if status == "pass" else _reason(report)
        name = self._check_name_of_path(Path(str(item.path)), getattr(item, "originalname", None))
        callspec = getattr(item, "callspec", None)
        params = dict(callspec.params) if callspec is not None else {}
        name += "".join(f" {v}" for k, v in params.items() if k != NODE_PARAM)
        if callspec is not None and NODE_PARAM in callspec.params:
            indices = [int(callspec.params[NODE_PARAM])]
        else:  # a check that asks for no node: its outcome holds for every node
            indices = [n.index for n in self.context.topology.nodes]
        for index in indices:
            # setup failed, then teardown: keep the first failure of a check on a node
            if any(r.check == name and r.node == index for r in self.results):
                continue
            self.results.append(CheckResult(name, index, status, reason))

    def _check_name_of_path(self, path: Path, function: str | None) -> str:
        short = (function or "").removeprefix("test_")
        if path.parent == BUILTIN_DIR:
            return short.replace("_", " ")
        where = path.name
        if self.project is not None:
            with contextlib.suppress(ValueError):  # a file outside the project
                where = path.resolve().relative_to(self.project.resolve()).as_posix()
        return f"{where}::{function}" if function else where


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (file, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = str(crash.message) if crash is not None else str(longrepr)
    kept = []
    for line in text.splitlines():
        if line.startswith("assert ") or line.startswith("+  where"):
            break
        kept.append(line)
    message = " ".join(" ".join(kept).split())
    for prefix in ("AssertionError: ", "Failed: "):
        message = message.removeprefix(prefix)
    return message or text.strip().splitlines()[-1]
