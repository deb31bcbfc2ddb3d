"""The suite's deadlines (tests/support/deadlines.py): a test's timeout counts the test alone,
and a slow fixture or teardown fails naming its stage. An inner pytest session with the
suite's hooks, on fixtures that block until their deadline fires: no verdict here depends on
the machine's speed (a blocked step stays blocked, however fast the machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.deadlines import E2E_TEST_S

CONFTEST = """
import threading
import time

import pytest

from tests.support import deadlines
from tests.support.deadlines import (
    pytest_fixture_setup,
    pytest_runtest_teardown,
    setup_deadline,
    stage,
)

deadlines.TEARDOWN_S = 0.2
never = threading.Event()


@pytest.fixture
@setup_deadline(0.2)
def stuck():
    never.wait()


@pytest.fixture(scope="module")
def stuck_in_a_stage():
    with stage("`up` of the module's cluster", 0.2):
        never.wait()


@pytest.fixture
def slower_than_the_test_timeout():
    time.sleep(0.6)


@pytest.fixture
def stuck_in_teardown():
    yield
    never.wait()
"""

TESTS = """
import time


def test_stuck_fixture(stuck):
    pass


def test_stuck_stage(stuck_in_a_stage):
    pass


def test_slow_fixture_is_not_the_tests_time(slower_than_the_test_timeout):
    pass


def test_stuck_teardown(stuck_in_teardown):
    pass


def test_the_test_itself_still_times_out():
    time.sleep(30)
"""


def test_the_suite_times_the_test_function_alone(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getini("timeout_func_only") is True


def test_fixtures_and_teardowns_fail_naming_the_stage_that_ran_out(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 0.3\ntimeout_func_only = true\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:randomly",
         "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        cwd=tmp_path, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = done.stdout + done.stderr
    lines = {line.split(" ", 2)[1]: line for line in out.splitlines() if "test_inner.py::" in line}
    stuck = lines["test_inner.py::test_stuck_fixture"]
    assert stuck.startswith("ERROR"), out
    assert "set-up of the function fixture 'stuck' ran past its deadline of 0.2 s" in out, out
    assert lines["test_inner.py::test_stuck_stage"].startswith("ERROR"), out
    assert (
        "`up` of the module's cluster ran past its deadline of 0.2 s (within: set-up of the "
        "module fixture 'stuck_in_a_stage')" in out
    ), out
    # The fixture took twice the test's timeout; the test's own time was nothing.
    assert lines["test_inner.py::test_slow_fixture_is_not_the_tests_time"].startswith("PASSED")
    assert "ERROR test_inner.py::test_stuck_teardown" in out, out
    assert "teardown after test_inner.py::test_stuck_teardown ran past its deadline" in out, out
    assert lines["test_inner.py::test_the_test_itself_still_times_out"].startswith("FAILED")
    assert "Timeout" in lines["test_inner.py::test_the_test_itself_still_times_out"], out
    assert "1 failed, 2 passed, 3 errors" in out, out


def test_an_end_to_end_test_without_a_timeout_of_its_own_gets_the_e2e_ceiling(
    tmp_path: Path,
) -> None:
    """The inner tests read their own ceiling: an unmarked one under tests/e2e gets
    `E2E_TEST_S`; a marked one keeps its mark; one elsewhere keeps the ini's timeout."""
    (tmp_path / "conftest.py").write_text(
        "from tests.support.deadlines import pytest_itemcollected\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 300\ntimeout_func_only = true\n")
    ceiling = (
        "import pytest\n\n"
        "def ceiling(request):\n"
        "    mark = request.node.get_closest_marker('timeout')\n"
        "    return mark.args[0] if mark else None\n\n"
    )
    e2e = tmp_path / "tests" / "e2e"
    e2e.mkdir(parents=True)
    (e2e / "test_cluster.py").write_text(
        ceiling + f"def test_unmarked(request):\n    assert ceiling(request) == {E2E_TEST_S}\n\n"
        "@pytest.mark.timeout(1200)\n"
        "def test_marked(request):\n    assert ceiling(request) == 1200\n"
    )
    unit = tmp_path / "tests" / "unit"
    unit.mkdir()
    (unit / "test_fast.py").write_text(
        ceiling + "def test_elsewhere(request):\n    assert ceiling(request) is None\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
         "-p", "no:cacheprovider", "-p", "no:xdist", "tests"],
        cwd=tmp_path, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert "3 passed" in out, out
