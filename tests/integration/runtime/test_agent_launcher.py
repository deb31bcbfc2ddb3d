"""A job's agent and the launcher it starts, real processes: the launcher never outlives its
agent, even one ended by SIGKILL, and starting it runs no Python between fork and exec (the
agent has threads: a lock one of them held at the fork would never be released there)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.runtime.launch_harness import (
    ENTRIES,
    group_members,
    launch_argv,
    launcher_env,
    topology,
)
from tests.support.waits import wait_until
from tests.support.workers import alive

# An agent of its own process, as a node's supervise daemon is: it starts the launcher, says
# what it saw, and waits to be killed. Fork hooks run only where Python runs in the child.
AGENT = """
import json, os, sys, time
from pathlib import Path
from skyinfra_runtime.jobs.agent import Agent
from skyinfra_runtime.jobs.files import Paths
forks = []
os.register_at_fork(before=lambda: forks.append(1))
agent = Agent(Paths(Path(sys.argv[1]), "job-1"), 0, sys.argv[2:])
agent.start()
print(json.dumps({"launcher": agent.proc.pid, "python_in_child": len(forks)}), flush=True)
time.sleep(600)
"""


def test_a_launcher_ends_with_its_agent_and_starts_without_python_in_the_child(
    tmp_path: Path,
) -> None:
    topo_file = tmp_path / "topology.json"
    topo_file.write_text(json.dumps(topology(nodes=1)))
    launcher = launch_argv(
        "--topology", str(topo_file), "--node", "0", f"{ENTRIES}/basics.py:sleep_forever"
    )
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(tmp_path), *launcher],
        env=launcher_env(TMPDIR=str(tmp_path)),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    started: list[int] = []  # the launcher, then its worker: ended here if the test fails
    try:
        assert agent.stdout is not None
        said = json.loads(agent.stdout.readline())
        started.append(said["launcher"])
        assert said["python_in_child"] == 0
        log = tmp_path / "runs" / "job-1" / "output.log"
        wait_until(
            "the worker's first line in the agent's log",
            lambda: log.read_text() if log.is_file() else "",
            lambda text: "sleeping" in text,
            deadline_s=120,
        )
        # The launcher leads a group of its own (start_new_session), its worker in it.
        started = group_members(said["launcher"])
        assert len(started) == 2 and said["launcher"] in started, f"its group: {started}"
        agent.kill()  # SIGKILL: nothing of the agent's own runs
        agent.wait()
        for pid in started:
            wait_until(f"process {pid} to end", lambda p=pid: alive(p), lambda up: not up, 60)
    finally:
        agent.kill()
        agent.wait()
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
