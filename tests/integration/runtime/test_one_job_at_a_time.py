"""One job holds a cluster's nodes at a time, decided on the head: `skyinfra-runtime
supervise` refuses to start a job while another job's supervisor runs there, naming it, and
two starts at the same moment never both get in (the head's start lock). Real supervisors on
a temporary node folder, their launchers waiting on a gate file; nothing is timed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

RUNTIME = str(Path(sys.executable).parent / "skyinfra-runtime")
# The job's launcher: waits until the test opens the gate, then ends with exit 0.
WAIT = "import os, time\nwhile not os.path.exists({gate!r}):\n    time.sleep(0.05)\n"


def supervise(node: Path, job: str, gate: Path) -> subprocess.CompletedProcess[str]:
    """Start a one-node job on ``node`` as `run` does; the start command's outcome."""
    meta = json.dumps({"entry": f"{job}.py:main", "args": [], "started_by": "tester@here"})
    argv = [RUNTIME, "supervise", "--job", job, "--node-dir", str(node), "--node", "0"]
    argv += ["--nodes", "1", "--meta", meta, "--", sys.executable, "-c"]
    argv += [WAIT.format(gate=str(gate))]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def said(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data = json.loads(done.stdout.splitlines()[-1])
    assert isinstance(data, dict)
    return data


def wait_final(node: Path, job: str) -> str:
    record = node / "jobs" / f"{job}.json"
    until = time.monotonic() + 60  # a bound on the wait, not an assertion on time
    while time.monotonic() < until:
        state = json.loads(record.read_text()).get("state")
        if state in ("succeeded", "failed", "cancelled"):
            return str(state)
        time.sleep(0.1)
    raise AssertionError(f"{job} did not end: {record.read_text()}")


def test_a_second_job_is_refused_naming_the_running_one(tmp_path: Path) -> None:
    node, gate = tmp_path / "node", tmp_path / "gate"
    first = supervise(node, "job-1", gate)
    assert first.returncode == 0, first.stdout + first.stderr
    try:
        second = supervise(node, "job-2", gate)
        assert second.returncode == 2, second.stdout + second.stderr
        busy = said(second)["busy"]
        assert (busy["id"], busy["entry"], busy["started_by"]) == (
            "job-1",
            "job-1.py:main",
            "tester@here",
        )
        assert busy["state"] in ("starting", "running")
        assert not (node / "jobs" / "job-2.json").exists()  # nothing of it was made
    finally:
        gate.write_text("")
    assert wait_final(node, "job-1") == "succeeded"
    gate.unlink()
    third = supervise(node, "job-3", gate)  # the nodes are free again
    try:
        assert third.returncode == 0, third.stdout + third.stderr
        assert "pid" in said(third)
    finally:
        gate.write_text("")
    assert wait_final(node, "job-3") == "succeeded"


def test_of_two_starts_at_once_exactly_one_gets_the_nodes(tmp_path: Path) -> None:
    node, gate = tmp_path / "node", tmp_path / "gate"
    try:
        with ThreadPoolExecutor(4) as pool:
            done = list(pool.map(lambda j: supervise(node, j, gate), ["a", "b", "c", "d"]))
        started = [d for d in done if d.returncode == 0]
        refused = [d for d in done if d.returncode == 2]
        assert len(started) == 1 and len(refused) == 3, [d.stdout + d.stderr for d in done]
        winner = next(p.stem for p in (node / "jobs").glob("*.json"))
        assert {said(d)["busy"]["id"] for d in refused} == {winner}
    finally:
        gate.write_text("")
    assert wait_final(node, winner) == "succeeded"
