"""How `make test` shares test files out among its pytest-xdist workers: the longest first.

pytest-xdist's `--dist loadfile` hands out files in collection order, two to a worker at the
start and another whenever a worker has two tests left. On this suite that put the two AWS
zone-failover files (together over 5 minutes) on one worker while the others ran out of work,
and a new file waited behind a worker's last, long test. Here, as in longest-processing-time
scheduling, files go out longest first (seconds from tests/durations.json, recorded by a
`make test-durations` run), and a worker gets its next file only when it is down to its last
test (pytest-xdist needs a worker's next test before it runs the current one). A file that is
not in the record counts SECONDS_PER_UNKNOWN_TEST per test: new files start early rather than
late.

Files that mostly wait (WAITING_PREFIXES: the AWS end-to-end tests, which sit through the AWS
provider's fixed delays of about 10 s after creating a VPC, a subnet or an instance and after
each termination) alternate with the others, each kind longest first. Sent strictly longest
first, the four longest files were all AWS ones: the run started with four workers waiting on
the provider at once and the two cores idle for half a minute (14, 9, 3, 5 and 2% busy over
five 5 s samples).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

DURATIONS_FILE = Path(__file__).resolve().parents[1] / "durations.json"
# Another record instead (the scheduler's own test runs a small suite with one).
DURATIONS_ENV = "SKYINFRA_TEST_DURATIONS"
# A new test file's guess: dearer than a unit test (0.05 s), cheaper than a cluster test.
SECONDS_PER_UNKNOWN_TEST = 2.0
# Test files that spend most of their time waiting rather than computing (see above).
WAITING_PREFIXES = ("tests/e2e/aws/",)


def durations_file() -> Path:
    return Path(os.environ.get(DURATIONS_ENV) or DURATIONS_FILE)


def load_durations(path: Path) -> dict[str, float]:
    """The recorded seconds per test file; none when the record is missing or unreadable
    (every file then counts SECONDS_PER_UNKNOWN_TEST per test: the most tests first)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)}


def expected_seconds(file: str, tests: int, durations: dict[str, float]) -> float:
    return durations.get(file, tests * SECONDS_PER_UNKNOWN_TEST)


def longest_first(units: dict[str, dict[str, bool]], durations: dict[str, float]) -> list[str]:
    """Files in the order they go out: the longest expected first, ties in collection order,
    files that mostly wait taking every other place while both kinds last (the kind of the
    longest file first)."""

    def seconds(file: str) -> float:
        return expected_seconds(file, len(units[file]), durations)

    ordered = sorted(units, key=lambda file: -seconds(file))
    waiting = [file for file in ordered if file.startswith(WAITING_PREFIXES)]
    working = [file for file in ordered if not file.startswith(WAITING_PREFIXES)]
    if waiting and working and seconds(working[0]) > seconds(waiting[0]):
        waiting, working = working, waiting
    merged: list[str] = []
    for pair in itertools.zip_longest(waiting, working):
        merged.extend(file for file in pair if file is not None)
    return merged


class LongestFileFirstScheduling(LoadFileScheduling):
    """`--dist loadfile` (a file's tests on one worker, so its module fixtures are made once),
    with files sent longest first and one at a time."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.durations = load_durations(durations_file())

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        # One test left: the one it runs now, held until it knows its next (or shutdown).
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        self._assign_work_unit(node)

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # after the first distribution: top nodes up
            for node in self.nodes:
                self._reschedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        if not self.collection:
            return
        units: dict[str, dict[str, bool]] = {}
        for nodeid in self.collection:
            units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
        for file in longest_first(units, self.durations):
            self.workqueue[file] = units[file]
        # More workers than files: the extra ones end at once.
        for _ in range(max(0, len(self.nodes) - len(self.workqueue))):
            unused, _assigned = self.assigned_work.popitem()
            unused.shutdown()
        for node in self.nodes:
            self._assign_work_unit(node)
        for node in self.nodes:
            self._reschedule(node)
        if not self.workqueue:
            for node in self.nodes:
                node.shutdown()


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") == "loadfile":
        return LongestFileFirstScheduling(config, log)
    return None
