"""Where a run lives on a node, and what outlives it.

``skyinfra run`` gives every run its own directory and keeps one that no run deletes::

    $SKYINFRA_NODE_DIR/                the node's own directory (venv/, topology.json, ...)
        runs/<run id>/                 $SKYINFRA_RUN_DIR: this run (result.json)
            work/                      the copy of the project; the entry's working directory
                                       (files unchanged since the run before are hard links
                                       to that run's: replace a project file, never rewrite
                                       it in place)
            manifest.json              what work/ held when skyinfra run's copy ended
            .launch-*/                 the launcher's scratch (its workers' result and status
                                       files) while it runs; a killed launcher's stays here
        shared/                        $SKYINFRA_SHARED_DIR: never deleted by a run
        cache/jax/                     the jax plugin's compilation cache (plugins/jax.py)

The launcher creates the shared directory and removes the oldest run directories beyond
``$SKYINFRA_KEEP_RUNS`` (0 or unset: keeps every run). Only directories named like a run id
are removed, never the current run's and never one whose run is still going (its pid file in
``$SKYINFRA_NODE_DIR/pids/`` is there).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

# A command the operator hands a node may name the node's directory with this field, which
# the node fills in (the operator may not know it: skyinfra_runtime.jobs.recovery).
NODE_DIR_FIELD = "{node_dir}"

NODE_DIR_ENV = "SKYINFRA_NODE_DIR"
# What marks a node's processes for its bootstrap's --remove, which ends every process that
# carries one for its folder (infra/scripts/bootstrap-node.sh): a local node's every process
# (skyinfra.targets.local.processes.NODE_ENV), and what the runtime starts on any target.
NODE_MARK_ENVS = ("SKYINFRA_LOCAL_NODE_DIR", NODE_DIR_ENV)
RUN_DIR_ENV = "SKYINFRA_RUN_DIR"
SHARED_DIR_ENV = "SKYINFRA_SHARED_DIR"
KEEP_RUNS_ENV = "SKYINFRA_KEEP_RUNS"
RUN_ID_ENV = "SKYINFRA_RUN_ID"

# YYYYmmdd-HHMMSS-ffffff-<4 hex>: sorts by start time (skyinfra.run.nodes.new_run_id).
# The older form YYYYmmdd-HHMMSS-<6 hex> is still recognised, so earlier runs get pruned too.
RUN_ID_RE = re.compile(r"^\d{8}-\d{6}-(\d{6}-[0-9a-f]{4}|[0-9a-f]{6})$")


def prepare(environ: dict[str, str] | None = None) -> list[Path]:
    """Create the shared directory, prune old runs; returns the run directories removed.

    Never fails a run: a directory that cannot be created or removed is reported on stderr.
    """
    env = os.environ if environ is None else environ
    shared = env.get(SHARED_DIR_ENV)
    if shared:
        try:
            Path(shared).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            _say(f"cannot create the shared directory {shared}: {exc}")
    run_dir = env.get(RUN_DIR_ENV)
    try:
        keep = int(env.get(KEEP_RUNS_ENV) or 0)
    except ValueError:
        _say(f"${KEEP_RUNS_ENV}={env.get(KEEP_RUNS_ENV)!r} is not an integer; keeping every run")
        keep = 0
    if not run_dir or keep <= 0:
        return []
    node_dir = env.get(NODE_DIR_ENV)
    return prune(Path(run_dir), keep, Path(node_dir) / "pids" if node_dir else None)


def prune(run_dir: Path, keep: int, pids: Path | None) -> list[Path]:
    """Remove the oldest run directories beside ``run_dir`` so that ``keep`` remain."""
    current = run_dir.name
    try:
        runs = sorted(p for p in run_dir.parent.iterdir() if p.is_dir() and RUN_ID_RE.match(p.name))
    except OSError:
        return []
    older = [p for p in runs if p.name != current]
    removable = older[: max(0, len(runs) - keep)]
    removed = []
    for path in removable:
        if pids is not None and _still_running(pids / f"{path.name}.pid"):
            continue
        try:
            shutil.rmtree(path)
            removed.append(path)
        except OSError as exc:
            _say(f"cannot remove the old run directory {path}: {exc}")
    return removed


# What a run's launcher is called on its command line: the console script, the module, or
# the operator's CLI that started it.
LAUNCHER_NAMES = frozenset({"skyinfra-runtime", "skyinfra_runtime", "skyinfra"})


def _still_running(pid_file: Path) -> bool:
    """Whether the run that recorded ``pid_file`` still runs (a launcher of it is alive).

    A pid file can outlive its run (the SSH transport leaves it); a live process with that
    pid counts only when it is a skyinfra-runtime launcher (Linux /proc; elsewhere any live
    process counts, erring on keeping the directory)."""
    try:
        pid = int(pid_file.read_text().split()[0])  # "PID" or "PID START"
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        pass  # alive, another user's
    except OSError:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    # One of its arguments is the launcher (a script or module named so), not merely a path
    # that passes through a folder called skyinfra (a checkout, a venv).
    names = (os.path.basename(arg) for arg in cmdline.decode(errors="replace").split("\0"))
    return any(name in LAUNCHER_NAMES for name in names)


def _say(message: str) -> None:
    print(f"skyinfra-runtime: {message}", file=sys.stderr, flush=True)
