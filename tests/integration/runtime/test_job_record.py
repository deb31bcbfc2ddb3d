"""The record a real supervisor writes goes through the type (skyinfra_runtime.jobrecord) and
keeps today's JSON: the same keys, with values of the same types, as the record the
supervisor wrote before the type existed (tests/unit/runtime/job_records/), and the keys added
since (the job's own ports and nodes). A one-node job on
a temporary node folder whose first attempt's launcher SIGKILLs itself; the second exits 0."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from skyinfra_runtime.jobrecord import FINAL_STATES, JobRecord

RUNTIME = str(Path(sys.executable).parent / "skyinfra-runtime")
TODAY = Path(__file__).parents[2] / "unit" / "runtime" / "job_records"
# The launcher: attempt 1 (no marker yet) kills itself with SIGKILL, attempt 2 ends with 0.
LAUNCHER = (
    "import os, signal, pathlib\n"
    "m = pathlib.Path({marker!r})\n"
    "print('hello', flush=True)\n"
    "if not m.exists():\n"
    "    m.write_text('')\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
)


def shape(value: Any) -> Any:
    """``value`` with each number replaced by its type: what stays the same from run to run."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return type(value).__name__
    return value


def test_a_real_supervisors_record_keeps_todays_json(tmp_path: Path) -> None:
    node = tmp_path / "node"
    meta = {
        "entry": "train.py",
        "args": ["--steps", "3"],
        "started_by": "tester@here",
        "nodes_total": 1,
        "checkpoints": "j1",
        "env": {"A": "1"},
        "secrets": ["TOKEN"],
    }
    argv = [RUNTIME, "supervise", "--job", "j1", "--node-dir", str(node), "--node", "0"]
    argv += ["--nodes", "1", "--meta", json.dumps(meta), "--timeout", "600"]
    argv += ["--max-restarts", "2", "--", sys.executable, "-c"]
    argv += [LAUNCHER.format(marker=str(tmp_path / "marker"))]
    started = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stdout + started.stderr
    path = node / "jobs" / "j1.json"
    until = time.monotonic() + 60  # a bound on the wait, not an assertion on time
    while time.monotonic() < until:
        written = json.loads(path.read_text(encoding="utf-8"))
        if written["state"] in FINAL_STATES:
            break
        time.sleep(0.1)
    assert written["state"] == "succeeded", written
    listed = subprocess.run(
        [RUNTIME, "jobs", "--node-dir", str(node)], capture_output=True, text=True, check=True
    )
    [as_listed] = json.loads(listed.stdout)
    before = json.loads((TODAY / "restarted_after_sigkill.json").read_text(encoding="utf-8"))
    for data in (written, as_listed):
        assert JobRecord.from_dict(data).to_dict() == data
        # Added since: the job's own ports (a bare node folder: the default head_port's pair)
        # and nodes (every node of the cluster: its one).
        assert data["ports"] == {"jax": 29500, "torch": 29501}, data
        assert data["world"] == [0], data
        # and its place in the head's submission order (priorities order the queue by it).
        assert data["seq"] == 1, data
        added = ("checked_at", "ports", "world", "seq")
        kept = {k: v for k, v in data.items() if k not in added}
        assert shape(kept) == shape(before)
    assert as_listed == {**written, "checked_at": as_listed["checked_at"]}
