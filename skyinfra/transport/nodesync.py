"""The node's half of `run`'s incremental copy: standard library only, because it runs on the
node (the local transport calls it in-process; the SSH transport sends this file's source to
the node's Python on stdin, with the request: ``serve``).

A copy of the project lives in ``<node root>/runs/<id>/work``; once a copy is complete,
``runs/<id>/manifest.json`` records what it holds, as the node sees it: every path with its
type, mode, and for a file its size, mtime (ns), inode and sha256. A new run's copy:

1. ``prepare``: takes the newest run directory with a manifest as its base, and trusts a base
   file only when the node's ``lstat`` still matches its manifest entry (size, mtime, inode,
   mode): a run directory removed, a node replaced, a file a run rewrote leave nothing or
   fewer files to trust, never a wrong one. Into the new (fresh, empty) work directory it
   makes the directories and symlinks, hard-links every wanted file whose content (sha256) a
   trusted base file has with the same mode, copies on the node those whose mode differs,
   and answers with the files that must travel.
2. The transport writes those files into the new directory (new files: fresh inodes).
3. ``finish``: sets the directories' modes and writes the new manifest (temp file, rename),
   last: a copy that broke off midway has no manifest and is never a base.

Nothing here writes into another run's directory: a changed file is a new file in the new
directory, and hard links are only made to files whose content is unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Mapping
from typing import Any

MANIFEST = "manifest.json"
SCHEMA = 1
# skyinfra_runtime.rundirs.RUN_ID_RE (this file cannot import it: it runs on its own).
RUN_ID = re.compile(r"^\d{8}-\d{6}-(\d{6}-[0-9a-f]{4}|[0-9a-f]{6})$")

# An entry: {"type": "file", "mode": 0o644, "size": N, "mtime_ns": N, "sha256": HEX,
# "ino": N (node side only)} | {"type": "dir", "mode": M} | {"type": "link", "target": T}.
Entries = dict[str, dict[str, Any]]


def run_paths(root: str, run_id: str) -> tuple[str, str]:
    """(the run's directory, its work directory) under the node root."""
    run = os.path.join(root, "runs", run_id)
    return run, os.path.join(run, "work")


def find_base(root: str, run_id: str) -> tuple[str | None, Entries]:
    """The newest other run with a readable manifest, and its entries; (None, {}) when none."""
    runs = os.path.join(root, "runs")
    try:
        names = sorted((n for n in os.listdir(runs) if RUN_ID.match(n)), reverse=True)
    except OSError:
        return None, {}
    for name in names:
        if name == run_id:
            continue
        try:
            with open(os.path.join(runs, name, MANIFEST), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            entries = data.get("entries")
            if isinstance(entries, dict):
                return name, entries
    return None, {}


def trusted_files(work: str, entries: Entries) -> dict[str, tuple[str, int]]:
    """sha256 -> (path, mode) of the base's files whose node stat still matches the entry."""
    found: dict[str, tuple[str, int]] = {}
    for rel, entry in entries.items():
        if entry.get("type") != "file" or entry.get("sha256") in found:
            continue
        try:
            st = os.lstat(os.path.join(work, rel))
        except OSError:
            continue
        if (
            stat.S_ISREG(st.st_mode)
            and st.st_size == entry.get("size")
            and st.st_mtime_ns == entry.get("mtime_ns")
            and st.st_ino == entry.get("ino")
            and stat.S_IMODE(st.st_mode) == entry.get("mode")
        ):
            found[str(entry["sha256"])] = (rel, stat.S_IMODE(st.st_mode))
    return found


def plan(
    wanted: Entries, trusted: Mapping[str, tuple[str, int]]
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """Pure: for each wanted file, where its content comes from. Returns (link: path -> base
    path with the same content and mode, copy: path -> base path with the same content but
    another mode, send: paths whose content the node does not have), each sorted by path."""
    link: dict[str, str] = {}
    copy: dict[str, str] = {}
    send: list[str] = []
    for rel in sorted(wanted):
        entry = wanted[rel]
        if entry["type"] != "file":
            continue
        base = trusted.get(entry["sha256"])
        if base is None:
            send.append(rel)
        elif base[1] == entry["mode"]:
            link[rel] = base[0]
        else:
            copy[rel] = base[0]
    return link, copy, send


def prepare(root: str, run_id: str, wanted: Entries) -> dict[str, Any]:
    """Step 1 (module doc). The new work directory must not exist yet."""
    _, work = run_paths(root, run_id)
    base_id, base_entries = find_base(root, run_id)
    base_work = run_paths(root, base_id)[1] if base_id else ""
    trusted = trusted_files(base_work, base_entries) if base_id else {}
    link, copy, send = plan(wanted, trusted)
    os.makedirs(work)
    for rel in sorted(wanted):
        entry = wanted[rel]
        path = os.path.join(work, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if entry["type"] == "dir":
            os.makedirs(path, exist_ok=True)
        elif entry["type"] == "link":
            os.symlink(entry["target"], path)
    linked_bytes = 0
    for rel, base_rel in link.items():
        try:
            os.link(os.path.join(base_work, base_rel), os.path.join(work, rel))
        except OSError:  # a file system without hard links, a file at its link limit
            copy[rel] = base_rel
            continue
        linked_bytes += int(wanted[rel]["size"])
    for rel, base_rel in list(copy.items()):
        try:
            shutil.copy2(os.path.join(base_work, base_rel), os.path.join(work, rel))
            os.chmod(os.path.join(work, rel), wanted[rel]["mode"])
        except OSError:  # gone since it was checked (pruned by another run's start)
            del copy[rel]
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(work, rel))
            send.append(rel)
    files = [e for e in base_entries.values() if e.get("type") == "file"]
    return {
        "base": base_id,
        "base_files": len(files),
        # Base files the node no longer holds as recorded (changed, removed): not trusted.
        "base_untrusted": len(files) - sum(1 for e in files if e.get("sha256") in trusted),
        "linked_files": len(link) - sum(1 for rel in link if rel in copy or rel in send),
        "linked_bytes": linked_bytes,
        "node_copied_files": len(copy),
        "send": sorted(send),
    }


def finish(root: str, run_id: str, wanted: Entries, sent: Mapping[str, str]) -> Entries:
    """Step 3 (module doc): ``sent`` holds the sha256 of each file as it was written."""
    run, work = run_paths(root, run_id)
    entries: Entries = {}
    for rel in sorted(wanted, key=lambda p: p.count("/"), reverse=True):
        entry = wanted[rel]
        path = os.path.join(work, rel)
        if entry["type"] == "dir":
            os.chmod(path, entry["mode"])
            entries[rel] = {"type": "dir", "mode": entry["mode"]}
        elif entry["type"] == "link":
            entries[rel] = {"type": "link", "target": entry["target"]}
        else:
            st = os.lstat(path)
            entries[rel] = {
                "type": "file",
                "mode": stat.S_IMODE(st.st_mode),
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "ino": st.st_ino,
                "sha256": sent.get(rel, entry["sha256"]),
            }
    entries = dict(sorted(entries.items()))
    tmp = os.path.join(run, f".{MANIFEST}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"schema": SCHEMA, "run_id": run_id, "entries": entries}, f)
    os.replace(tmp, os.path.join(run, MANIFEST))
    return entries


def serve(request: dict[str, Any]) -> None:
    """One step for a transport: ``request["step"]`` is ``prepare`` (with root, run_id,
    wanted: prints prepare's answer) or ``finish`` (and sent: prints {"files": N}), as JSON
    on the last line of stdout."""
    root, run_id, wanted = request["root"], request["run_id"], request["wanted"]
    if request["step"] == "prepare":
        answer: dict[str, Any] = prepare(root, run_id, wanted)
    elif request["step"] == "finish":
        answer = {"files": len(finish(root, run_id, wanted, request["sent"]))}
    else:
        raise SystemExit(f"nodesync: no step {request['step']!r} (prepare, finish)")
    sys.stdout.write("\n" + json.dumps(answer) + "\n")


if __name__ == "__main__":
    serve(json.load(sys.stdin))
