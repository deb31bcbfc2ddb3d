"""One job holds a cluster's nodes at a time, decided on the head: `skyinfra-runtime
supervise` queues a job while another job's supervisor runs there (or jobs wait ahead of it),
naming what it waits for, and the head starts the queued jobs itself, one at a time, in the
order they were submitted; two starts at the same moment never both get the nodes (the head's
start lock). A queued job cancelled never starts. Real supervisors on a temporary node
folder, their launchers waiting on a gate file; nothing is timed."""

from __future__ import annotations

import itertools
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
FINAL = ("succeeded", "failed", "cancelled", "timed_out")


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


def record(node: Path, job: str) -> dict[str, Any]:
    data = json.loads((node / "jobs" / f"{job}.json").read_text())
    assert isinstance(data, dict)
    return data


def wait_final(node: Path, job: str) -> str:
    until = time.monotonic() + 60  # a bound on the wait, not an assertion on time
    while time.monotonic() < until:
        state = record(node, job).get("state")
        if state in FINAL:
            return str(state)
        time.sleep(0.1)
    raise AssertionError(f"{job} did not end: {record(node, job)}")


def test_a_second_job_is_queued_naming_the_running_one_and_starts_after_it(
    tmp_path: Path,
) -> None:
    node, gate = tmp_path / "node", tmp_path / "gate"
    first = supervise(node, "job-1", gate)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "queued" not in said(first)
    try:
        second = supervise(node, "job-2", gate)
        assert second.returncode == 0, second.stdout + second.stderr
        queued = said(second)["queued"]
        assert (queued["position"], queued["held_by"]) == (1, "job-1"), queued
        assert queued["waits_for"] == "1 node, 0 free; node 0 held by job job-1", queued
        rec = record(node, "job-2")
        assert rec["state"] == "queued" and rec["queue"]["seq"] == queued["seq"], rec
        third = supervise(node, "job-3", gate)
        assert said(third)["queued"]["position"] == 2, third.stdout
        assert "1 job(s) queued ahead of it (next: job-2)" in said(third)["queued"]["waits_for"]
        assert not (node / "runs" / "job-2" / "output.log").exists()  # nothing of it ran
    finally:
        gate.write_text("")
    for job in ("job-1", "job-2", "job-3"):
        assert wait_final(node, job) == "succeeded", record(node, job)
    one, two, three = (record(node, j) for j in ("job-1", "job-2", "job-3"))
    # The head started each when the one before had ended: in submission order.
    assert one["ended_at"] <= two["started_at"] and two["ended_at"] <= three["started_at"]
    assert two["queue"]["left_at"] >= one["ended_at"], two
    assert one.get("queue") is None  # it never waited
    # Each got the head's ports as it started (a queued one when it left the queue); one job
    # at a time: the first pair each time (a bare node folder: the default head_port).
    assert said(first)["ports"] == {"jax": 29500, "torch": 29501}
    assert [r["ports"] for r in (one, two, three)] == [{"jax": 29500, "torch": 29501}] * 3


def test_a_queued_job_cancelled_never_starts(tmp_path: Path) -> None:
    node, gate = tmp_path / "node", tmp_path / "gate"
    assert supervise(node, "job-1", gate).returncode == 0
    try:
        assert "queued" in said(supervise(node, "job-2", gate))
        assert "queued" in said(supervise(node, "job-3", gate))
        cancel = [RUNTIME, "cancel", "--job", "job-2", "--node-dir", str(node)]
        done = subprocess.run(cancel, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert said(done) == {"was_running": True, "was_queued": True, "state": "cancelled"}
        # job-3 moved up: job-2 no longer waits ahead of it.
        until = time.monotonic() + 60
        while record(node, "job-3")["queue"]["position"] != 1:
            assert time.monotonic() < until, record(node, "job-3")
            time.sleep(0.1)
    finally:
        gate.write_text("")
    assert wait_final(node, "job-3") == "succeeded"
    never = record(node, "job-2")
    assert never["state"] == "cancelled" and never["started_at"] is None, never
    assert never["attempts"] == [] and never["queue"]["left_at"] is None, never
    assert not (node / "runs" / "job-2" / "output.log").exists()
    assert not (node / "pids" / "job-2.pid").exists()


def test_of_two_starts_at_once_exactly_one_gets_the_nodes(tmp_path: Path) -> None:
    node, gate = tmp_path / "node", tmp_path / "gate"
    try:
        with ThreadPoolExecutor(4) as pool:
            done = list(pool.map(lambda j: supervise(node, j, gate), ["a", "b", "c", "d"]))
        assert all(d.returncode == 0 for d in done), [d.stdout + d.stderr for d in done]
        started = [d for d in done if "queued" not in said(d)]
        queued = [said(d)["queued"] for d in done if "queued" in said(d)]
        assert len(started) == 1 and len(queued) == 3, [d.stdout for d in done]
        # Every job takes its place in the submission order: the one started, seq 1.
        assert sorted(q["seq"] for q in queued) == [2, 3, 4]
        assert sorted(q["position"] for q in queued) == [1, 2, 3]
    finally:
        gate.write_text("")
    jobs = ["a", "b", "c", "d"]
    assert all(wait_final(node, j) == "succeeded" for j in jobs)
    spans = sorted((record(node, j)["started_at"], record(node, j)["ended_at"]) for j in jobs)
    for (_, ended), (started_at, _) in itertools.pairwise(spans):
        assert ended <= started_at, spans  # never two at once
