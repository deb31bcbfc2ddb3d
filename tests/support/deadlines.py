"""A deadline for each thing the suite waits on, so that a slow machine fails naming what was
slow instead of a test whose fixture ate its time.

- A test's own timeout (pytest-timeout's `timeout`, with `timeout_func_only`) counts the test
  function alone; an end-to-end test without one of its own gets `E2E_TEST_S`.
- Every fixture's set-up has a deadline of its own: `DEFAULT_SETUP_S` by its scope, or what
  `@setup_deadline(seconds)` (under `@pytest.fixture`) says for a fixture with more work.
- Every test's teardown (the fixtures' finalizers: a `down`, a server's stop) has
  `TEARDOWN_S`.
- Inside a fixture, `stage("what", seconds)` bounds one step (an `up`, a node's provisioning).

When one runs out, the test fails with `DeadlineExceeded`, naming the stage, its budget and
the stages around it. The deadlines are SIGALRM timers in the main thread, as pytest-timeout's
own; a stage never arms over a timer it did not set (a fixture requested from inside a test
runs under the test's timeout). The budgets are ceilings for a stuck step, several times what
the work takes on a slow 2-core machine: a test's verdict never depends on the machine's
speed."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

# Ceilings by fixture scope; a fixture with more work names its own (setup_deadline).
DEFAULT_SETUP_S = {"function": 300.0, "class": 600.0, "module": 900.0, "package": 900.0}
SESSION_SETUP_S = 900.0
TEARDOWN_S = 600.0
_DEADLINE_ATTR = "_skyinfra_setup_deadline_s"
# Stages of the emulated AWS fixtures: an `up` or `down` with real Terraform against moto
# (about 40-60 s on an idle 2-core machine, the provider's fixed waits included), and a
# node's provisioning (its user data run as cloud-init would: a venv, uv, the wheels).
UP_S = 480.0
PROVISION_S = 480.0

# A test function's own ceiling where none is marked: pyproject's `timeout` for most tests;
# an end-to-end test drives whole clusters, and the slowest unmarked ones took up to 235 s
# of a 300 s ceiling in CI on a slow 2-core VM.
E2E_TEST_S = 900.0

F = TypeVar("F", bound=Callable[..., Any])


class DeadlineExceeded(pytest.fail.Exception):  # type: ignore[name-defined,misc]
    """A stage of a fixture or a teardown ran past its deadline."""


@dataclass
class _Stage:
    what: str
    seconds: float
    deadline: float
    fired: bool = False


_stages: list[_Stage] = []
_previous_handler: Any = None


def _arm() -> None:
    pending = [s.deadline for s in _stages if not s.fired]
    if not pending:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    signal.setitimer(signal.ITIMER_REAL, max(min(pending) - time.monotonic(), 0.001))


def _expired(signum: int, frame: Any) -> None:
    now = time.monotonic()
    late = [s for s in _stages if not s.fired and s.deadline <= now]
    if not late:  # woken early: the earliest deadline is still ahead
        _arm()
        return
    stage_ = min(late, key=lambda s: s.deadline)
    stage_.fired = True  # its own clean-up (a finally: block) runs unbounded by it
    _arm()
    outer = [s.what for s in _stages if s is not stage_]
    within = f" (within: {' > '.join(outer)})" if outer else ""
    raise DeadlineExceeded(
        f"{stage_.what} ran past its deadline of {stage_.seconds:g} s{within}: that step was "
        "slow or stuck (a test's own timeout counts only the test function)"
    )


def _can_arm() -> bool:
    if threading.current_thread() is not threading.main_thread():
        return False
    # A timer we did not set is pytest-timeout's for a test function: leave it in charge.
    return bool(_stages) or signal.getitimer(signal.ITIMER_REAL)[0] == 0


@contextmanager
def stage(what: str, seconds: float) -> Iterator[None]:
    """Bound one step: past ``seconds``, fail naming ``what`` (DeadlineExceeded)."""
    global _previous_handler
    if not _can_arm():
        yield
        return
    if not _stages:
        _previous_handler = signal.signal(signal.SIGALRM, _expired)
    entry = _Stage(what, seconds, time.monotonic() + seconds)
    _stages.append(entry)
    _arm()
    try:
        yield
    finally:
        _stages.remove(entry)
        _arm()
        if not _stages:
            signal.signal(signal.SIGALRM, _previous_handler)


def setup_deadline(seconds: float) -> Callable[[F], F]:
    """The set-up deadline of the fixture below it (under ``@pytest.fixture``)."""

    def mark(func: F) -> F:
        setattr(func, _DEADLINE_ATTR, seconds)
        return func

    return mark


def _setup_seconds(fixturedef: pytest.FixtureDef[Any]) -> float:
    named = getattr(fixturedef.func, _DEADLINE_ATTR, None)
    if named is not None:
        return float(named)
    return DEFAULT_SETUP_S.get(fixturedef.scope, SESSION_SETUP_S)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    seconds = _setup_seconds(fixturedef)
    with stage(f"set-up of the {fixturedef.scope} fixture {fixturedef.argname!r}", seconds):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, Any, Any]:
    with stage(f"teardown after {item.nodeid}", TEARDOWN_S):
        return (yield)


def pytest_itemcollected(item: pytest.Item) -> None:
    """An end-to-end test without a timeout of its own gets `E2E_TEST_S`."""
    if item.nodeid.startswith("tests/e2e/") and item.get_closest_marker("timeout") is None:
        item.add_marker(pytest.mark.timeout(E2E_TEST_S))
