"""Priorities on the head (`skyinfra-runtime supervise --priority N`): a higher-priority job
submitted while a lower-priority one holds the node preempts it through the Spot notice's path
(SIGTERM with the time left in $SKYINFRA_PREEMPT_DEADLINE); the preempted job is `preempted`,
waits in the queue, resumes from its checkpoints once the node frees, and ends with the sum an
uninterrupted run computes; its preemption spends no restart. Real supervisors on a temporary
node folder, plain Python workers using the runtime's checkpoint helpers; nothing is timed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RUNTIME = str(Path(sys.executable).parent / "skyinfra-runtime")
STEPS, PAUSE_AT = 6, 3
# A training loop of STEPS steps (step k adds k) that commits a checkpoint each step and, on
# its first attempt, waits after PAUSE_AT until the test lets it go or SIGTERM comes; on
# SIGTERM it records the time left and ends (its last step is already committed).
WORKER = """
import json, os, signal, sys, time
from skyinfra_runtime import checkpoints, spot
root = checkpoints.directory()
last = checkpoints.latest_step(root)
step, total = 0, 0
if last is not None:
    step = last
    total = json.loads((checkpoints.step_dir(root, last) / "state.json").read_text())["total"]
print(f"attempt {os.environ['SKYINFRA_ATTEMPT']} starts at step {step}", flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
resumed = last is not None
while step < STEPS:
    if stop:
        (root / "sigterm.json").write_text(json.dumps({"at": step, "left": spot.seconds_left()}))
        sys.exit(0)
    step += 1
    total += step
    d = checkpoints.step_dir(root, step)
    d.mkdir(parents=True, exist_ok=True)
    (d / "state.json").write_text(json.dumps({"total": total}))
    checkpoints.commit(d)
    while step == PAUSE_AT and not resumed and not stop and not os.path.exists(GO):
        time.sleep(0.05)
(root / "result.json").write_text(json.dumps({"total": total, "left": spot.seconds_left()}))
"""


def supervise(node: Path, job: str, code: str, priority: int) -> dict[str, Any]:
    meta = json.dumps({"entry": f"{job}.py:main", "args": [], "started_by": "tester@here"})
    argv = [RUNTIME, "supervise", "--job", job, "--node-dir", str(node), "--node", "0"]
    argv += ["--nodes", "1", "--priority", str(priority), "--meta", meta]
    argv += ["--", sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    assert isinstance(said, dict)
    return said


def record(node: Path, job: str) -> dict[str, Any]:
    data = json.loads((node / "jobs" / f"{job}.json").read_text())
    assert isinstance(data, dict)
    return data


def wait_state(node: Path, job: str, states: tuple[str, ...]) -> dict[str, Any]:
    until = time.monotonic() + 90  # a bound on the wait, not an assertion on time
    while time.monotonic() < until:
        rec = record(node, job)
        if rec.get("state") in states:
            return rec
        time.sleep(0.1)
    raise AssertionError(f"{job} never reached {states}: {record(node, job)}")


def test_a_higher_priority_job_preempts_and_the_preempted_one_resumes(tmp_path: Path) -> None:
    node, go = tmp_path / "node", tmp_path / "go"
    worker = f"GO = {str(go)!r}; STEPS = {STEPS}; PAUSE_AT = {PAUSE_AT}\n{WORKER}"
    low_dir = node / "checkpoints" / "low"
    try:
        assert "queued" not in supervise(node, "low", worker, priority=0)
        until = time.monotonic() + 60
        while not (low_dir / f"step-{PAUSE_AT:08d}" / "COMMITTED").exists():
            assert time.monotonic() < until, record(node, "low")
            time.sleep(0.05)
        # A job of the same priority queues behind it and preempts nothing.
        same = supervise(node, "same", "pass", priority=0)
        assert same["queued"]["position"] == 1, same
        assert same["queued"]["waits_for"] == "1 node, 0 free; node 0 held by job low", same
        # A higher one goes ahead of it in the queue and takes the node from `low`.
        high = supervise(node, "high", "print('urgent')", priority=5)
        assert high["queued"]["position"] == 1, high  # ahead of `same`
        preempted = wait_state(node, "low", ("preempted",))
        assert preempted["queue"]["seq"] < record(node, "same")["queue"]["seq"], preempted
    finally:
        go.write_text("")
    for job in ("high", "same", "low"):
        assert wait_state(node, job, ("succeeded", "failed", "cancelled"))["state"] == "succeeded"
    low, high_rec, same_rec = (record(node, j) for j in ("low", "high", "same"))
    first, second = low["attempts"]
    assert (first["outcome"], first["preempted_by"]) == ("preempted", "high"), first
    # In order: low's first attempt ended, then high ran, then low resumed ahead of `same`
    # (its place in the queue: submitted first), then `same`.
    assert first["ended_at"] <= high_rec["started_at"] <= high_rec["ended_at"], (low, high_rec)
    assert high_rec["ended_at"] <= second["started_at"], (low, high_rec)
    assert low["ended_at"] <= same_rec["started_at"], (low, same_rec)
    # SIGTERM came with the time left; the second attempt resumed from the last checkpoint
    # and its result is an uninterrupted run's; no restart spent (--max-restarts 0).
    sigterm = json.loads((low_dir / "sigterm.json").read_text())
    assert sigterm["at"] == PAUSE_AT and 0 < sigterm["left"] <= 30, sigterm
    result = json.loads((low_dir / "result.json").read_text())
    assert result == {"total": sum(range(1, STEPS + 1)), "left": None}, result
    log = (node / "runs" / "low" / "output.log").read_text()
    assert "attempt 1 starts at step 0" in log and f"attempt 2 starts at step {PAUSE_AT}" in log
    assert "preempted by job high (priority 5 > 0)" in log, log
    assert (low["preemptions"], low["max_restarts"], low["restarts_left"]) == (1, 0, 0), low
    assert (high_rec["priority"], low.get("priority", 0)) == (5, 0)


def test_a_preempted_job_cancelled_while_it_waits_never_resumes(tmp_path: Path) -> None:
    node, go, gate = tmp_path / "node", tmp_path / "go", tmp_path / "gate"
    worker = f"GO = {str(go)!r}; STEPS = {STEPS}; PAUSE_AT = {PAUSE_AT}\n{WORKER}"
    hold = f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
    try:
        supervise(node, "low", worker, priority=0)
        supervise(node, "high", hold, priority=1)
        assert wait_state(node, "low", ("preempted",))["queue"]["left_at"] is None
        cancel = [RUNTIME, "cancel", "--job", "low", "--node-dir", str(node)]
        done = subprocess.run(cancel, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        said = json.loads(done.stdout.splitlines()[-1])
        assert said == {"was_running": True, "was_queued": True, "state": "cancelled"}, said
    finally:
        gate.write_text("")
        go.write_text("")
    assert wait_state(node, "high", ("succeeded", "failed"))["state"] == "succeeded"
    low = record(node, "low")
    assert [a["outcome"] for a in low["attempts"]] == ["preempted"], low
    assert not (node / "checkpoints" / "low" / "result.json").exists()
    assert not (node / "jobs" / "low.preempt").exists()  # the ask went with the preemption
