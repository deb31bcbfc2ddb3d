"""The idle shutdown and jobs: a node running its part of a job is busy, a node whose job has
ended (or whose job's agent died: a lost job) is idle. infra/scripts/idle-check.sh as the
user data ships it, run for real against a temporary node folder holding a real job started
by `skyinfra-runtime supervise` (its record, its pid file), with stand-ins for shutdown,
logger and who. No timed assertion: the last-busy stamp is aged by hand."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.aws.test_lifetime import SERVICE, unit_files

RUNTIME = str(Path(sys.executable).parent / "skyinfra-runtime")
# The job's launcher: waits until the test opens the gate, then ends with exit 0.
WAIT = "import os, time\nwhile not os.path.exists({gate!r}):\n    time.sleep(0.05)\n"


def idle_check(tmp_path: Path, node: Path) -> bool:
    """Run idle-check.sh as its systemd unit would (idle after 1 minute); True: it shut the
    node down. The last-busy stamp, when there is one, is made 2 minutes old first."""
    files = unit_files(idle_shutdown_minutes=1)
    (line,) = [x for x in files[SERVICE].splitlines() if x.startswith("Environment=")]
    env = dict(pair.split("=", 1) for pair in line.removeprefix("Environment=").split())
    state, stubs = tmp_path / "state", tmp_path / "stubs"
    state.mkdir(exist_ok=True)
    (state / "ready").write_text("")
    stamp = state / "last-busy"
    if stamp.exists():
        old = time.time() - 120
        os.utime(stamp, (old, old))
    stubs.mkdir(exist_ok=True)
    shut = tmp_path / "shutdown-called"
    shut.unlink(missing_ok=True)
    for name, body in {"shutdown": f'echo "$@" > {shut}', "logger": ":", "who": ":"}.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    script = tmp_path / "idle-check.sh"
    script.write_text(next(v for k, v in files.items() if k.endswith("/idle-check.sh")))
    env.update(STATE_DIR=str(state), NODE_DIR=str(node), PATH=f"{stubs}:/usr/bin:/bin")
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return shut.is_file()


def start_job(node: Path, job: str, gate: Path) -> int:
    """A one-node job on ``node``, as `run` starts it; the supervisor's pid."""
    meta = json.dumps({"entry": "wait.py:main", "args": []})
    argv = [RUNTIME, "supervise", "--job", job, "--node-dir", str(node), "--node", "0"]
    argv += ["--nodes", "1", "--meta", meta, "--", sys.executable, "-c"]
    argv += [WAIT.format(gate=str(gate))]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return int(json.loads(done.stdout.splitlines()[-1])["pid"])


def record(node: Path, job: str) -> dict[str, object]:
    data = json.loads((node / "jobs" / f"{job}.json").read_text())
    assert isinstance(data, dict)
    return data


def wait_gone(pid_file: Path) -> None:
    end = time.monotonic() + 60
    while pid_file.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert not pid_file.exists(), "the job's agent did not end"


def test_a_running_job_is_busy_and_a_finished_one_idle(tmp_path: Path) -> None:
    node = tmp_path / "node"
    (node / "pids").mkdir(parents=True)
    assert idle_check(tmp_path, node) is False  # first look: stamps busy, never shuts down
    assert idle_check(tmp_path, node) is True  # nothing runs: idle past the minute

    gate = tmp_path / "gate"
    start_job(node, "job-1", gate)
    try:
        assert record(node, "job-1")["state"] in ("starting", "running")
        assert idle_check(tmp_path, node) is False  # the stamp was 2 minutes old: busy now
        assert idle_check(tmp_path, node) is False
    finally:
        gate.write_text("")
    wait_gone(node / "pids" / "job-1.pid")
    assert record(node, "job-1")["state"] == "succeeded"
    assert idle_check(tmp_path, node) is True


def test_a_lost_job_does_not_keep_the_node_busy(tmp_path: Path) -> None:
    """A job whose supervisor was killed reads "running" in its record forever; its pid file
    names a process that is gone (or, later, an unrelated one): the node is idle."""
    node = tmp_path / "node"
    (node / "pids").mkdir(parents=True)
    gate = tmp_path / "gate"
    pid = start_job(node, "job-2", gate)
    pid_file = node / "pids" / "job-2.pid"
    kept = pid_file.read_text()
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < end:
        time.sleep(0.05)
    pid_file.write_text(kept)  # as a killed agent leaves it
    assert record(node, "job-2")["state"] in ("starting", "running")
    assert idle_check(tmp_path, node) is False  # first look: stamps
    assert idle_check(tmp_path, node) is True
    # A pid file whose pid is alive but started at another time (a reused pid): idle too.
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        pid_file.write_text(f"{sleeper.pid} 1\n")
        assert idle_check(tmp_path, node) is True
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_non_empty_queue_keeps_the_node_busy(tmp_path: Path) -> None:
    """A queued job's agent holds its pid file from its submission until it leaves the queue
    and ends (or is cancelled there): a node whose only job waits in the queue is busy.
    Shown on a node folder holding only the queued job's pid file, as the head has it."""
    node, gate = tmp_path / "node", tmp_path / "gate"
    (node / "pids").mkdir(parents=True)
    queued_only = tmp_path / "queued-only"
    (queued_only / "pids").mkdir(parents=True)
    try:
        start_job(node, "job-1", gate)
        start_job(node, "job-2", gate)
        assert record(node, "job-2")["state"] == "queued"
        pid_file = node / "pids" / "job-2.pid"
        held = pid_file.read_text()
        (queued_only / "pids" / "job-2.pid").write_text(held)
        assert idle_check(tmp_path, queued_only) is False  # first look: stamps
        assert idle_check(tmp_path, queued_only) is False  # the queued job: busy
        cancel = [RUNTIME, "cancel", "--job", "job-2", "--node-dir", str(node)]
        assert subprocess.run(cancel, capture_output=True, timeout=60).returncode == 0
        assert record(node, "job-2")["state"] == "cancelled"
        pid = int(held.split()[0])
        end = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < end:
            time.sleep(0.05)  # its agent removed the pid file and ends
        assert idle_check(tmp_path, queued_only) is True  # cancelled: nothing waits any more
    finally:
        gate.write_text("")
    wait_gone(node / "pids" / "job-1.pid")
