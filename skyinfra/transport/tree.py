"""The operator's half of `run`'s incremental copy (the node's half: nodesync.py): what the
project holds, as nodesync entries, and what a copy to one node came to.

Hashing the whole project on every run would cost a second per few hundred MB, so the scan
keeps the sha256 of each file in a cache in the operator's workspace and hashes again only a
file whose size, mtime, ctime or inode changed, or whose mtime is within a second of the
scan that hashed it (a write in the same clock tick as that hash would keep the mtime: git's
"racily clean" rule). The cache only saves time: losing it costs a hash of every file.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from skyinfra.transport.nodesync import Entries

CACHE_SCHEMA = 1
# A cached hash counts only for a file last written this long before the scan that hashed it.
RACY_NS = 1_000_000_000
CHUNK = 1 << 20


@dataclass(frozen=True)
class CopyStats:
    """What copying the project to one node came to (summary.json's ``copy``)."""

    base: str | None  # the run whose copy on the node the new one was built from
    sent_files: int
    sent_bytes: int
    linked_files: int  # hard links to the base's unchanged files: nothing sent
    linked_bytes: int
    node_copied_files: int  # content the node had, copied there (mode changed, no hard link)
    base_untrusted: int  # base files the node no longer holds as its manifest says
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def stats(prepared: dict[str, Any], sent_bytes: int, seconds: float) -> CopyStats:
    """CopyStats from nodesync.prepare's answer and what the transport sent."""
    return CopyStats(
        base=prepared["base"],
        sent_files=len(prepared["send"]),
        sent_bytes=sent_bytes,
        linked_files=int(prepared["linked_files"]),
        linked_bytes=int(prepared["linked_bytes"]),
        node_copied_files=int(prepared["node_copied_files"]),
        base_untrusted=int(prepared["base_untrusted"]),
        seconds=round(seconds, 3),
    )


def stream(src: Path, write: Callable[[bytes], object]) -> tuple[int, str]:
    """Write ``src``'s bytes through ``write``; (bytes written, their sha256). The hash is of
    what was sent, even when the file changed since the scan."""
    digest = hashlib.sha256()
    size = 0
    with src.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
            write(block)
            size += len(block)
    return size, digest.hexdigest()


def _sha256(path: Path) -> str:  # a function of its own: the tests count its calls
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_cache(cache_file: Path | None, src: Path) -> tuple[int, dict[str, list[Any]]]:
    if cache_file is None:
        return 0, {}
    try:
        data = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0, {}
    if not isinstance(data, dict) or (data.get("schema"), data.get("src")) != (
        CACHE_SCHEMA,
        str(src),
    ):
        return 0, {}
    files = data.get("files")
    return int(data.get("scanned_ns", 0)), files if isinstance(files, dict) else {}


def _save_cache(cache_file: Path, src: Path, scanned_ns: int, files: dict[str, list[Any]]) -> None:
    data = {"schema": CACHE_SCHEMA, "src": str(src), "scanned_ns": scanned_ns, "files": files}
    # Per writer: two runs (or two threads of the Python API) may save it at once.
    tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, cache_file)
    except OSError:
        tmp.unlink(missing_ok=True)  # the cache only saves time


def scan(src: Path, ignore: Callable[[str], bool], cache_file: Path | None = None) -> Entries:
    """Every path under ``src`` that `run` copies (``ignore`` decides, for a directory once
    for all it holds), as nodesync entries; symlinks stay symlinks, as in a copy."""
    src = src.resolve()
    scanned_ns = time.time_ns()
    cached_at, cached = _load_cache(cache_file, src)
    files: dict[str, list[Any]] = {}
    entries: Entries = {}
    for directory, dirs, names in os.walk(src):
        rel_dir = os.path.relpath(directory, src)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        kept = []
        for name in sorted(dirs) + sorted(names):
            rel = prefix + name
            if ignore(rel):
                continue
            path = Path(directory, name)
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                entries[rel] = {"type": "link", "target": os.readlink(path)}
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = {"type": "dir", "mode": stat.S_IMODE(st.st_mode)}
                kept.append(name)
            elif stat.S_ISREG(st.st_mode):
                key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
                old = cached.get(rel)
                if old is not None and old[:4] == key and st.st_mtime_ns < cached_at - RACY_NS:
                    sha = str(old[4])
                else:
                    sha = _sha256(path)
                files[rel] = [*key, sha]
                entries[rel] = {
                    "type": "file",
                    "mode": stat.S_IMODE(st.st_mode),
                    "size": st.st_size,
                    "mtime_ns": st.st_mtime_ns,
                    "sha256": sha,
                }
            # sockets, fifos, devices: not copied (nor were they by a plain copy)
        dirs[:] = [d for d in dirs if d in kept]
    if cache_file is not None:
        _save_cache(cache_file, src, scanned_ns, files)
    return entries


def open_exclusive(path: Path) -> BinaryIO:
    """A new file (never one that exists: that could be another run's, through a link)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("xb")
