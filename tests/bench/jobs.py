"""Figures 8 and 9, jobs on the local target through the CLI as a user runs it:

8. `run --detach` on 2 nodes: the wall time until it returns (every node's agent started),
   beside an attached `run` of an entry that does nothing (start to finish);
9. `skyinfra jobs` on 8 nodes holding several finished jobs: the table, `--json`, and one
   job in full (`jobs JOB` of a function entry, which fetches each node's result.json).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from common import BenchError, base_env, cli, project, stats

# The detached job's entry: long enough that `run --detach` returns while it runs.
SLEEP_ENTRY = "import time\n\n\ndef main():\n    time.sleep(5)\n    return 0\n"
JOBS_ON_8 = 3


def _wait_ended(root: Path, env: dict[str, str], timeout_s: float = 120) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        _, out = cli(["jobs", "--json"], root, env)
        if all(j["state"] not in ("starting", "running") for j in json.loads(out)):
            return
        time.sleep(0.5)
    raise BenchError("jobs did not end")


def detach(reps: int) -> dict[str, Any]:
    """Figure 8."""
    env = base_env()
    detached, attached = [], []
    with project(2) as root:
        (root / "sleep_entry.py").write_text(SLEEP_ENTRY)
        cli(["up", "--yes"], root, env)
        try:
            for _ in range(reps):
                detached.append(cli(["run", "--detach", "sleep_entry.py:main"], root, env)[0])
                _wait_ended(root, env)
                attached.append(cli(["run", "trivial_entry.py:main"], root, env)[0])
        finally:
            cli(["down", "--yes"], root, env)
    return {"run_detach_s": stats(detached), "run_attached_trivial_s": stats(attached)}


def jobs_list(reps: int, nodes: int = 8) -> dict[str, Any]:
    """Figure 9."""
    env = base_env()
    table, as_json, one = [], [], []
    with project(nodes) as root:
        cli(["up", "--yes"], root, env)
        try:
            for _ in range(JOBS_ON_8):
                cli(["run", "--detach", "trivial_entry.py:main"], root, env)
            _wait_ended(root, env)
            _, out = cli(["jobs", "--json"], root, env)
            newest = json.loads(out)[0]["id"]
            for _ in range(reps):
                table.append(cli(["jobs"], root, env)[0])
                as_json.append(cli(["jobs", "--json"], root, env)[0])
                one.append(cli(["jobs", newest], root, env)[0])
        finally:
            cli(["down", "--yes"], root, env)
    return {
        "nodes": nodes,
        "jobs": JOBS_ON_8,
        "jobs_table_s": stats(table),
        "jobs_json_s": stats(as_json),
        "jobs_one_s": stats(one),
    }
