"""A job's files on a node: where they are, how they are written and read, whose pid is alive.

Apart from records.py, which needs the job record's and the topology's types: ``skyinfra-runtime
logs`` (a follower for every node of every attached run) and each node's metadata stand-in
need only these, and start without the typed records' imports (dataclasses pulls in inspect:
about half of a follower's start). Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, NamedTuple


def now() -> float:
    return time.time()


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` atomically (a reader sees the old or the new file), private (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def process_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: tells a live process from an unrelated one reusing its pid.
    None when it is gone, or a zombie nobody reaped (where no init reaps orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else None


def pid_alive(pid_file: Path) -> int | None:
    """The pid recorded in ``pid_file`` ("PID START") when that very process still runs."""
    try:
        pid_s, _, start = pid_file.read_text().strip().partition(" ")
        pid = int(pid_s)
    except (OSError, ValueError):
        return None
    now_start = process_start_time(pid)
    if now_start is None or (start and now_start != start):
        return None
    return pid


class Paths(NamedTuple):
    """Where one job's files are in one node's folder (a NamedTuple, not a dataclass: this
    module is imported without dataclasses and inspect)."""

    node_dir: Path
    job_id: str

    @property
    def run(self) -> Path:
        return self.node_dir / "runs" / self.job_id

    @property
    def log(self) -> Path:
        return self.run / "output.log"

    @property
    def node_state(self) -> Path:
        return self.run / "node.json"

    @property
    def agent_log(self) -> Path:
        return self.run / "agent.log"

    @property
    def pid_file(self) -> Path:
        # Named like the run: rundirs never prunes the directory of a run whose agent lives.
        return self.node_dir / "pids" / f"{self.job_id}.pid"

    @property
    def record(self) -> Path:
        return self.node_dir / "jobs" / f"{self.job_id}.json"

    @property
    def preempt_ask(self) -> Path:
        """A higher-priority job's ask that this one give up its nodes (jobprio.py): written
        by that job's supervisor under the start lock, gone once this one is back in the
        queue. Not a ``.json``: the scans of the records pass it over."""
        return self.node_dir / "jobs" / f"{self.job_id}.preempt"
