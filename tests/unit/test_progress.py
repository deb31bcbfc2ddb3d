"""Live progress while `run` waits for nodes (a bar on a terminal, plain lines in a log),
and the head's way to its entrypoint that `run` prints (pure: fake clocks and streams); the
nodes asked in parallel."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

import pytest

from skyinfra.errors import TransportError
from skyinfra.progress import ProgressLine, bar
from skyinfra.run.startup import HeadStartup
from skyinfra.transport import readiness
from skyinfra.transport.base import Readiness
from skyinfra.transport.readiness import check_readiness, wait_until_ready
from tests.support.topologies import local_topology


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bar_fills_with_the_done_fraction() -> None:
    assert bar(0, 4, width=8) == "[........]"
    assert bar(1, 4, width=8) == "[##......]"
    assert bar(4, 4, width=8) == "[########]"


def test_on_a_terminal_the_line_is_redrawn_in_place() -> None:
    term, lines = Terminal(), []
    progress = ProgressLine(lines.append, stream=term)
    progress.update("waiting for node-1 (jax 12 s)", 1, 2)
    progress.update("waiting", 1, 2)
    progress.close()
    out = term.getvalue()
    assert out.startswith("\r[##########..........] 1/2 waiting for node-1 (jax 12 s)")
    # The shorter line blanks what is left of the longer one, and close ends the line.
    blank = " " * len(" for node-1 (jax 12 s)")
    assert out.endswith("\r[##########..........] 1/2 waiting" + blank + "\n")
    assert lines == []


def test_in_a_log_a_line_only_when_something_changed_or_time_passed() -> None:
    clock, lines = Clock(), []
    progress = ProgressLine(lines.append, stream=io.StringIO(), every_s=30, clock=clock)
    assert not progress.on_terminal
    progress.update("jax 1 s", 0, 1, key="jax")
    clock.now = 10
    progress.update("jax 11 s", 0, 1, key="jax")  # same key, too soon: nothing
    clock.now = 31
    progress.update("jax 31 s", 0, 1, key="jax")  # 30 s passed: said again
    progress.update("ready-ish", 0, 1, key="wheel")  # changed: said at once
    assert lines == ["jax 1 s", "jax 31 s", "ready-ish"]


class PhasedNodes:
    """Node 1 goes through bootstrap phases, then is ready (node 0 is ready throughout)."""

    def __init__(self, states: list[Readiness]) -> None:
        self._states: Iterator[Readiness] = iter(states)
        self._last = states[-1]

    def readiness(self, node: int) -> Readiness:
        if node == 0:
            return Readiness("ready")
        self._last = next(self._states, self._last)
        return self._last


def test_waiting_shows_each_nodes_phase_as_lines_or_a_bar() -> None:
    states = [
        Readiness("pending", "booting", phase="uv", phase_s=3.0, bootstrap_s=40.0),
        Readiness("pending", "booting", phase="jax", phase_s=1.0, bootstrap_s=50.0),
        Readiness("pending", "booting", phase="jax", phase_s=2.0, bootstrap_s=51.0),
        Readiness("ready"),
    ]
    lines: list[str] = []
    wait_until_ready(
        PhasedNodes(states),  # type: ignore[arg-type]
        local_topology(2),
        timeout_s=60,
        echo=lines.append,
        poll_s=0,
    )
    assert [line.split(" (1/2")[0] for line in lines[:2]] == [
        "[skyinfra] waiting for node-1 (uv 3 s) to finish bootstrap",
        "[skyinfra] waiting for node-1 (jax 1 s) to finish bootstrap",
    ]
    assert len(lines) == 3 and lines[2].startswith("[skyinfra] all 2 node(s) ready after")

    term, lines = Terminal(), []
    wait_until_ready(
        PhasedNodes(states),  # type: ignore[arg-type]
        local_topology(2),
        timeout_s=60,
        echo=lines.append,
        poll_s=0,
        terminal=term,
    )
    assert term.getvalue().count("\r") == 3 and "1/2 ready; waiting for node-1 (jax 2 s)" in (
        term.getvalue()
    )
    assert lines == [lines[0]] and lines[0].startswith("[skyinfra] all 2 node(s) ready")


def test_the_heads_way_to_its_entrypoint() -> None:
    clock = Clock()
    startup = HeadStartup(clock=clock)
    assert startup.summary() is None
    clock.now = 0.5
    startup.mark("ready")
    clock.now = 0.75
    startup.mark("copied")
    clock.now = 3.0
    startup.on_head_line("skyinfra-runtime: plugin jax ready in 1.5s")
    clock.now = 4.0
    startup.on_head_line("some output of the user's code")
    startup.on_head_line("skyinfra-runtime: plugin keras ready in 0.75s")
    startup.on_head_line("skyinfra-runtime: plugin jax ready in 9.0s")  # a second worker
    assert startup.summary() == (
        "[skyinfra] node-0 reached its entrypoint 4.0 s after `run` began: ready check 0.5 s, "
        "copy 0.2 s, launch 1.0 s, plugin jax 1.5 s, plugin keras 0.8 s"
    )


def test_every_node_is_asked_at_once_and_a_bug_in_an_answer_is_raised() -> None:
    """check_readiness asks the nodes in parallel (each waits until every one is asked: one at
    a time, the first would wait forever); a SkyinfraError is an unreachable node, anything
    else a bug that reaches the caller."""
    topology = local_topology(3)
    everyone = threading.Barrier(3, timeout=60)

    class Nodes:
        def readiness(self, node: int) -> Readiness:
            everyone.wait()
            if node == 1:
                raise TransportError("node 1 refused")
            return Readiness("ready")

    found = check_readiness(Nodes(), topology)  # type: ignore[arg-type]
    assert [found[i].state for i in (0, 1, 2)] == ["ready", "unreachable", "ready"]

    class Broken:
        def readiness(self, node: int) -> Readiness:
            if node == 2:
                raise KeyError("a bug")
            return Readiness("ready")

    with pytest.raises(KeyError):
        check_readiness(Broken(), topology)  # type: ignore[arg-type]


def test_at_most_max_asking_nodes_are_asked_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ask may be an SSH session: a large cluster's nodes are asked by MAX_ASKING
    threads, each taking the next node, as the thread pool before them was bounded."""
    monkeypatch.setattr(readiness, "MAX_ASKING", 3)
    started: list[threading.Thread] = []

    class CountedThread(threading.Thread):
        def start(self) -> None:
            started.append(self)
            super().start()

    monkeypatch.setattr(readiness.threading, "Thread", CountedThread)

    class Nodes:
        def readiness(self, node: int) -> Readiness:
            return Readiness("ready")

    found = check_readiness(Nodes(), local_topology(10))  # type: ignore[arg-type]
    assert sorted(found) == list(range(10))
    assert len(started) == 3
