"""A node process that is hard to end: it ignores SIGTERM and keeps starting children (each
`sleep 300`, ignoring SIGTERM too) every few milliseconds, so that a sweep that KILLs what
one look found leaves the children started since that look."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.local_jobs import node_processes
from tests.support.waits import wait_until

# Bash: `trap '' TERM` is inherited by the children as an ignored signal.
SCRIPT = "trap '' TERM; while :; do sleep 300 & sleep 0.005; done"


def start_spawner(node_dir: Path) -> subprocess.Popen[bytes]:
    """The spawner, as a process of the node ``node_dir``, once it has started children (its
    trap is set by then)."""
    env = {"SKYINFRA_LOCAL_NODE_DIR": str(node_dir), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(["bash", "-c", SCRIPT], env=env, start_new_session=True)
    wait_until("the spawner's children", lambda: len(node_pids(node_dir)) >= 3)
    return proc


def node_pids(node_dir: Path) -> list[int]:
    """The pids of the processes marked as ``node_dir``'s (local_jobs.node_processes)."""
    return [int(line.split()[0]) for line in node_processes(node_dir)]
