"""Where the suite's time goes: after every run, the time of each tests/ folder (two levels:
tests/e2e/aws, tests/unit, ...) split into set-up (fixtures: servers, Terraform init, wheels),
the tests' own calls and teardown. With pytest-xdist the figures are summed over workers.
Beside `--durations` (the slowest tests), this shows which folders and fixtures to speed up.
With SKYINFRA_RECORD_DURATIONS=1 (`make test-durations`) it also writes each test file's seconds
to tests/durations.json, the order tests/support/schedule.py hands files out in. With
SKYINFRA_CPU_PROFILE=FOLDER each xdist worker writes when each file's phases ran, and in which
network namespace, for tests/bench/cpu_by_file.py (`make bench-suite-cpu`)."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from tests.support.schedule import durations_file

PHASES = ("setup", "call", "teardown")
_seconds: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PHASES, 0.0))
_tests: dict[str, set[str]] = defaultdict(set)
_file_seconds: dict[str, float] = defaultdict(float)
RECORD_ENV = "SKYINFRA_RECORD_DURATIONS"
CPU_PROFILE_ENV = "SKYINFRA_CPU_PROFILE"


def folder_of(nodeid: str) -> str:
    """tests/e2e/aws/test_cli.py::test_x -> tests/e2e/aws; tests/unit/test_spec.py -> tests/unit."""
    parts = nodeid.split("::", 1)[0].split("/")[:-1]
    return "/".join(parts[:3]) or "."


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    folder = folder_of(report.nodeid)
    _seconds[folder][report.when] += report.duration
    _tests[folder].add(report.nodeid)
    _file_seconds[report.nodeid.split("::", 1)[0]] += report.duration
    profile = os.environ.get(CPU_PROFILE_ENV)
    if profile and os.environ.get("PYTEST_XDIST_WORKER"):
        _write_phase(profile, report)


def _write_phase(folder: str, report: pytest.TestReport) -> None:
    """One phase of a test (set-up holds a module's fixtures), in this worker's namespace."""
    netns = os.readlink("/proc/self/ns/net")[5:-1]  # "net:[4026532281]"
    phase = {
        "netns": int(netns),
        "start": report.start,
        "stop": report.stop,
        "file": report.nodeid.split("::", 1)[0],
    }
    with open(os.path.join(folder, f"phases-{os.getpid()}.jsonl"), "a") as out:
        out.write(json.dumps(phase) + "\n")


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


def pytest_sessionfinish(session: pytest.Session) -> None:
    # The controller sees every worker's reports; a worker (workerinput) sees only its own.
    if os.environ.get(RECORD_ENV) != "1" or hasattr(session.config, "workerinput"):
        return
    record = {file: round(seconds, 1) for file, seconds in sorted(_file_seconds.items())}
    durations_file().write_text(json.dumps(record, indent=1) + "\n")
