"""Waiting in a test for something to become true: a condition polled at a growing interval
(0.2 s, growing to 2 s), so that a long wait costs a few polls, not a core. The deadline only
bounds a hang: past it the test fails naming what it waited for and the last value seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")

FIRST_S = 0.2
LONGEST_S = 2.0
GROWTH = 1.5


def wait_until(
    what: str,
    probe: Callable[[], T],
    done: Callable[[T], bool] = bool,
    deadline_s: float = 300.0,
) -> T:
    """``probe()``'s value once ``done`` holds for it. Past ``deadline_s`` (a bound on a
    hang, not an assertion on time) the test fails naming ``what`` and the last value."""
    until = time.monotonic() + deadline_s
    interval = FIRST_S
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() >= until:
            pytest.fail(f"waited {deadline_s:g} s for {what}; last seen: {value!r}")
        time.sleep(interval)
        interval = min(interval * GROWTH, LONGEST_S)
