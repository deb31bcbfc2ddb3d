"""Where the suite's time goes: after every run, the time of each tests/ folder (two levels:
tests/e2e/aws, tests/unit, ...) split into set-up (fixtures: servers, Terraform init, wheels),
the tests' own calls and teardown. With pytest-xdist the figures are summed over workers.
Beside `--durations` (the slowest tests), this shows which folders and fixtures to speed up."""

from __future__ import annotations

from collections import defaultdict

import pytest

PHASES = ("setup", "call", "teardown")
_seconds: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PHASES, 0.0))
_tests: dict[str, set[str]] = defaultdict(set)


def folder_of(nodeid: str) -> str:
    """tests/e2e/aws/test_cli.py::test_x -> tests/e2e/aws; tests/unit/test_spec.py -> tests/unit."""
    parts = nodeid.split("::", 1)[0].split("/")[:-1]
    return "/".join(parts[:3]) or "."


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    folder = folder_of(report.nodeid)
    _seconds[folder][report.when] += report.duration
    _tests[folder].add(report.nodeid)


def row(name: str, tests: int, seconds: list[float]) -> str:
    return f"{name:<28}{tests:>6}" + "".join(f"{v:>10.1f}" for v in [*seconds, sum(seconds)])


def table() -> list[str]:
    """The per-folder lines, slowest first, and a total."""
    rows = sorted(_seconds.items(), key=lambda item: -sum(item[1].values()))
    lines = [f"{'folder':<28}{'tests':>6}" + "".join(f"{h:>10}" for h in (*PHASES, "total"))]
    lines += [row(folder, len(_tests[folder]), [s[p] for p in PHASES]) for folder, s in rows]
    totals = [sum(s[p] for s in _seconds.values()) for p in PHASES]
    return [*lines, row("all", sum(len(t) for t in _tests.values()), totals)]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds:
        return
    terminalreporter.write_sep("=", "seconds per folder (set-up is fixtures: servers, Terraform)")
    for line in table():
        terminalreporter.write_line(line)
