"""The job's checkpoint directory: ``$SKYINFRA_CHECKPOINT_DIR``.

Every worker of a job gets ``SKYINFRA_CHECKPOINT_DIR``: a local path, the same for every
attempt of the job, whose contents outlive the nodes. It holds one *checkpoint set*, named by
the job id by default, or by ``skyinfra run --checkpoints NAME`` (``checkpoints = "NAME"`` in
the spec) so that several jobs share it (a fresh job resumes where an earlier one stopped).

The operator passes the set's name to every node's agent (``skyinfra-runtime supervise
--checkpoints NAME``, and in the job's record); the agent resolves the directory for its
target and puts it in the launcher's environment:

- local target: ``<workspace>/checkpoints/<NAME>``, a folder of the cluster beside its node
  folders (``<workspace>/nodes/node-<i>``), seen by every node: it survives a node folder's
  deletion, a job's restart and ``down``;
- AWS: ``<node dir>/checkpoints/<NAME>`` on each node, kept in step with an S3 prefix
  (restored before the entry starts, uploaded as checkpoints are written).

Standard library only: this runs on the nodes, and the operator checks names with it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

CHECKPOINT_DIR_ENV = "SKYINFRA_CHECKPOINT_DIR"
# The set's name, for code that wants to say which set it resumes from.
CHECKPOINTS_NAME_ENV = "SKYINFRA_CHECKPOINTS"
# Under the node dir (AWS) or the workspace (local): one folder per checkpoint set.
CHECKPOINTS_FOLDER = "checkpoints"

# One safe path component: no separator, no "." or "..", no leading dot or dash (hidden
# files and options), at most 128 characters. A job id (20261125-094840-123456-ab12) is one.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
NAME_EXPECTED = (
    "1-128 letters, digits, '.', '_' or '-', starting with a letter or digit "
    "(one folder name: no '/', no leading '.' or '-')"
)

# A step directory (``step-<n>``, written by the helpers below) is complete once this file is
# in it: written last, atomically. A step without it (a writer killed half-way) is ignored.
COMMIT_MARKER = "COMMITTED"


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a checkpoint set (None: it can), naming what is valid."""
    if not isinstance(name, str) or not NAME_RE.match(name) or ".." in name:
        return NAME_EXPECTED
    return None


def root_for(node_dir: str | Path, provider: str) -> Path:
    """Where a target keeps its checkpoint sets, seen from a node's directory."""
    node = Path(node_dir)
    if provider == "local":
        # <workspace>/nodes/node-<i> -> <workspace>/checkpoints
        return node.parent.parent / CHECKPOINTS_FOLDER
    return node / CHECKPOINTS_FOLDER


def checkpoint_dir(node_dir: str | Path, name: str, provider: str) -> Path:
    """The checkpoint set ``name``'s directory on this node (ValueError on a bad name)."""
    problem = name_problem(name)
    if problem:
        raise ValueError(f"checkpoint set name {name!r}: expected {problem}")
    return root_for(node_dir, provider) / name


def provider_of(node_dir: str | Path) -> str:
    """The target, from the node's ``topology.json`` ("none" when it cannot be read)."""
    try:
        data = json.loads((Path(node_dir) / "topology.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "none"
    provider = data.get("provider") if isinstance(data, dict) else None
    return provider if isinstance(provider, str) else "none"


def job_env(node_dir: str | Path, name: str) -> dict[str, str]:
    """The variables the agent adds to the launcher's environment (the directory created, so
    that a worker writes into it as it is; remove_if_unused takes it away again at the job's
    end when the job never used it)."""
    path = checkpoint_dir(node_dir, name, provider_of(node_dir))
    path.mkdir(parents=True, exist_ok=True)
    return {CHECKPOINT_DIR_ENV: str(path), CHECKPOINTS_NAME_ENV: name}


def unused_mark(path: str | Path) -> dict[str, int]:
    """The set's directory as the job found it (its inode and mtime), taken when the job's
    agent starts: remove_if_unused compares with it at the end."""
    st = os.lstat(path)
    return {"ino": st.st_ino, "mtime_ns": st.st_mtime_ns}


def remove_if_unused(path: str | Path, mark: dict[str, int] | None) -> bool:
    """Remove the set's directory when the job never used it: empty, and the folder it found
    (``mark``, unused_mark) unchanged, so nothing was ever created or removed in it (a file
    written under it and deleted again since changed it: a set that was used stays, emptied
    or not). A job that wrote no checkpoint leaves no set. Called once none of the job's
    workers can write any more; rmdir never removes a folder that holds anything, so a file
    written meanwhile keeps the set. True when the set is gone."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if mark is None or (st.st_ino, st.st_mtime_ns) != (mark.get("ino"), mark.get("mtime_ns")):
        return False
    try:
        os.rmdir(path)
    except OSError:  # not empty (or not a folder): used
        return False
    return True


def directory() -> Path | None:
    """``$SKYINFRA_CHECKPOINT_DIR`` in a worker (None outside a skyinfra job)."""
    value = os.environ.get(CHECKPOINT_DIR_ENV)
    return Path(value) if value else None


# ------------------------------------------------------------------ committed steps


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def commit(path: str | Path, meta: dict[str, object] | None = None) -> None:
    """Mark a step directory complete: its marker, written last and atomically (fsync'd)."""
    target = Path(path) / COMMIT_MARKER
    tmp = target.with_name(f".{COMMIT_MARKER}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(meta or {}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def committed_steps(root: str | Path) -> list[int]:
    """The steps under ``root`` whose marker exists, oldest first (half-written ones left out)."""
    steps = []
    try:
        entries = list(Path(root).iterdir())
    except OSError:
        return []
    for entry in entries:
        m = re.fullmatch(r"step-(\d+)", entry.name)
        if m and (entry / COMMIT_MARKER).is_file():
            steps.append(int(m.group(1)))
    return sorted(steps)


def latest_step(root: str | Path) -> int | None:
    steps = committed_steps(root)
    return steps[-1] if steps else None
