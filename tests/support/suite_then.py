"""`make bench-suite-then`: only the tests of an earlier suite, for a like-for-like measure.

Issue 21 set its goal against the suite as it was when the issue was filed (`make test`: 15 min
17 s on a 2-core machine). The suite has grown since, one issue after another; to compare the
same work, SKYINFRA_SUITE_THEN names a list of test functions (tests/bench/suite_at_issue_21.txt,
one `path::function` or `path::Class::method` a line, `#` comments) and every other test is
deselected, every parametrization of a listed function kept. A renamed test must not drop out
of the measure unseen: tests/unit/test_suite_then.py checks every entry of the list against the
test files in `make test`, and a serial run stops on a listed function it did not collect (a
pytest-xdist worker cannot say why it stopped, so the workers leave that to the unit test).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

SUITE_THEN_ENV = "SKYINFRA_SUITE_THEN"


def read_list(path: Path) -> set[str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("#")}


def function_id(nodeid: str) -> str:
    """A test's id without its parametrization: `f.py::test_x[a-b]` -> `f.py::test_x`."""
    return nodeid.split("[", 1)[0]


def select(nodeids: Iterable[str], wanted: set[str]) -> tuple[list[str], list[str], set[str]]:
    """(kept, deselected, listed functions that none of ``nodeids`` is)."""
    kept: list[str] = []
    dropped: list[str] = []
    for nodeid in nodeids:
        (kept if function_id(nodeid) in wanted else dropped).append(nodeid)
    return kept, dropped, wanted - {function_id(nodeid) for nodeid in kept}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listed = os.environ.get(SUITE_THEN_ENV)
    if not listed:
        return
    wanted = read_list(Path(listed))
    _, dropped, missing = select((item.nodeid for item in items), wanted)
    if missing and not hasattr(config, "workerinput"):
        raise pytest.UsageError(
            f"{SUITE_THEN_ENV}={listed}: {len(missing)} listed test(s) not found: "
            + ", ".join(sorted(missing)[:5])
        )
    gone = set(dropped)
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid in gone])
    items[:] = [item for item in items if item.nodeid not in gone]
