"""Figure 8 on the local target, through the CLI as a user runs it: a re-run after a one-line
change in a project holding 200 MB of data files, against a full copy of that project and
against an empty project; each project has a 2-node cluster of its own, and their re-runs
take turns, so that both see the same load (the full copies run before them, and their
write-back to disk is waited for).

- start: from the launch of `skyinfra run` to the entry's first line on the last node (the
  entry returns time.time(); summary.json holds it per node);
- sent: the bytes the copy sent to each node, copy: the longest node's copy time (both from
  runs/<id>/copy.json; the scan and hashing of the project come before, in the start);
- full copy: every node's runs/ removed before the run, so nothing is there to link from (what
  every run cost before the incremental copy); the workspace's hash cache is warm, as for a
  re-run, so this measures the copy itself;
- the data files are dated an hour back (a user's data is not written the second before
  `run`: a file written within a second of its hash is hashed again, tree.py);
- over SSH (ssh_copy.py): the AWS target's transport to a loopback sshd, copy time alone.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import base_env, cli, project, stats
from ssh_copy import ssh_copy

DATA_FILES, FILE_MB = 20, 10
START_ENTRY = "import time\n\n\ndef main():\n    return time.time()\n"
NAME = "bench"


def _run(root: Path, env: dict[str, str]) -> dict[str, Any]:
    launched = time.time()
    wall, _ = cli(["run", "start_entry.py:main"], root, env)
    runs = root / ".skyinfra" / "clusters" / NAME / "runs"
    newest = sorted(runs.iterdir())[-1]
    summary = json.loads((newest / "summary.json").read_text())
    copies = json.loads((newest / "copy.json").read_text())
    entered = max(n["result"]["workers"][0]["value"] for n in summary["nodes"])
    return {
        "wall": wall,
        "start": entered - launched,
        "sent_per_node": max(c["sent_bytes"] for c in copies.values()),
        "copy_ms": 1000 * max(c["seconds"] for c in copies.values()),
        "linked_per_node": max(c["linked_bytes"] for c in copies.values()),
    }


def _scans(root: Path) -> dict[str, Any]:
    """`run`'s scan of the project in this process: every file hashed (no cache), and with
    the cache a run leaves (what a re-run does)."""
    from skyinfra.run.ignore import make_ignore, read_ignore_patterns
    from skyinfra.transport.tree import scan

    ignore = make_ignore(read_ignore_patterns(root))
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "copy-cache.json"
        started = time.perf_counter()
        scan(root, ignore, cache)
        cold = time.perf_counter() - started
        started = time.perf_counter()
        scan(root, ignore, cache)
        warm = time.perf_counter() - started
    return {"scan_no_cache_s": round(cold, 3), "scan_cached_s": round(warm, 3)}


def _series(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "run_s": stats([s["wall"] for s in samples]),
        "start_s": stats([s["start"] for s in samples]),
        "copy_ms": stats([s["copy_ms"] for s in samples]),
        "sent_bytes_per_node": max(s["sent_per_node"] for s in samples),
        "linked_bytes_per_node": max(s["linked_per_node"] for s in samples),
    }


def rerun(reps: int) -> dict[str, Any]:
    env = base_env()
    with project(2) as empty_root, project(2) as root:
        for r in (empty_root, root):
            (r / "start_entry.py").write_text(START_ENTRY)
        cli(["up", "--yes"], empty_root, env)
        try:
            cli(["up", "--yes"], root, env)
            try:
                result = _measure(empty_root, root, env, reps)
            finally:
                cli(["down", "--yes"], root, env)
        finally:
            cli(["down", "--yes"], empty_root, env)
    try:
        result["over_ssh"] = ssh_copy(reps, DATA_FILES, FILE_MB)
    except Exception as err:  # the local part still counts
        result["over_ssh"] = {"error": f"{type(err).__name__}: {err}"[:500]}
    return result


def _measure(empty_root: Path, root: Path, env: dict[str, str], reps: int) -> dict[str, Any]:
    """The full copies, then the empty project's re-runs interleaved with the 200 MB
    project's, each project on its own cluster, so that both see the same load."""
    _run(empty_root, env)  # the first copy of the empty project
    data = root / "data"
    data.mkdir()
    hour_ago = time.time() - 3600
    for i in range(DATA_FILES):
        part = data / f"part-{i:02d}.bin"
        part.write_bytes(os.urandom(FILE_MB * 1024 * 1024))
        os.utime(part, (hour_ago, hour_ago))
    (root / "config.py").write_text("LR = 0.1\n")
    first = _run(root, env)  # hashes 200 MB, copies it all
    scans = _scans(root)
    full = []
    for _ in range(reps):
        for node in (root / ".skyinfra" / "clusters" / NAME / "nodes").iterdir():
            shutil.rmtree(node / "runs", ignore_errors=True)
        os.sync()
        full.append(_run(root, env))
    # The full copies' 400 MB on disk first: their write-back would slow whatever runs next.
    os.sync()
    empty, again = [], []
    for rep in range(reps):
        empty.append(_run(empty_root, env))
        with (root / "config.py").open("a") as f:
            f.write(f"EPOCHS = {rep + 2}\n")  # the one-line change
        again.append(_run(root, env))
    return {
        "data_bytes": DATA_FILES * FILE_MB * 1024 * 1024,
        "empty_project": _series(empty),
        "first_run_cold_cache": _series([first]),
        **scans,
        "full_copy": _series(full),
        "rerun_one_line": _series(again),
        "start_ratio_rerun_to_empty": round(
            stats([s["start"] for s in again])["median"]
            / stats([s["start"] for s in empty])["median"],
            2,
        ),
    }
