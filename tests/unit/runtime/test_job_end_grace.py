"""How a node's part of a job is ended: the grace an "end" names, and a launcher that ignores
SIGTERM (as a worker blocked in a collective does) ended by the SIGKILL after it. Real
processes."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from skyinfra_runtime.jobs.agent import Agent, _grace
from skyinfra_runtime.jobs.files import Paths
from skyinfra_runtime.jobs.records import DEAD_PEER_GRACE_S, END_GRACE_S


def test_an_end_names_its_grace_within_the_usual_one() -> None:
    assert _grace({"cmd": "end", "grace_s": DEAD_PEER_GRACE_S}) == DEAD_PEER_GRACE_S
    assert _grace({"cmd": "end", "grace_s": 0}) == 0.0
    # A head that names none (an older one), or a value that is not a grace: the usual one.
    for bad in (None, "0.1", True, -1, [0.1]):
        assert _grace({"cmd": "end", "grace_s": bad}) == END_GRACE_S
    assert _grace({"cmd": "end"}) == END_GRACE_S
    # Never longer than the usual grace, whatever the message says.
    assert _grace({"cmd": "end", "grace_s": 3600}) == END_GRACE_S


def test_a_launcher_that_ignores_sigterm_is_killed_after_the_short_grace(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"pathlib.Path({str(ready)!r}).write_text('x')\n"
        "time.sleep(600)\n"
    )
    agent = Agent(Paths(tmp_path, "job-1"), 0, [sys.executable, "-c", code])
    agent.start()
    assert agent.proc is not None
    while not ready.exists():  # its SIGTERM handler is in place
        assert agent.poll() is None, "the launcher ended before it was ready"
        time.sleep(0.02)
    agent.end("after node-1 failed", DEAD_PEER_GRACE_S)
    assert agent.proc.wait(10) == -signal.SIGKILL
    assert agent.ended_reason == "after node-1 failed"
