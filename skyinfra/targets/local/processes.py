"""Knowing which processes on this machine belong to a local node, and ending only those.

Two records, the same ones the node bootstrap's ``--remove`` reads (infra/scripts/
bootstrap-node.sh):
- every process the local transport starts (and each of its children) carries
  ``SKYINFRA_LOCAL_NODE_DIR=<node dir>`` in its environment, as does the bootstrap itself;
- the transport writes ``pids/<tag>.pid`` as ``"PID START"``, START being when that process
  started (field 22 of ``/proc/PID/stat``). A pid file outlives its process when `run` is
  killed; the pid may then belong to an unrelated process, which the start time tells apart:
  the bootstrap's ``--remove`` never signals it.

Linux (``/proc``) only; elsewhere nothing is found and nothing is signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

NODE_ENV = "SKYINFRA_LOCAL_NODE_DIR"
_PROC = Path("/proc")
# How long the KILLs repeat (a process in uninterruptible sleep may outlast them).
KILL_LOOKS_S = 5.0


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (the state first, then the
    parent's pid, ...), or None when the process is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    return stat[stat.rindex(")") + 2 :].split()


def start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot), or None when it is gone."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def write_pid_file(path: Path, pid: int) -> None:
    """Record ``pid`` with its start time (private: 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{pid} {start_time(pid) or ''}\n")
    tmp.replace(path)


def _ancestors() -> set[int]:
    spared, pid = set(), os.getpid()
    while pid > 0 and pid not in spared:
        spared.add(pid)
        fields = _stat_fields(pid)
        try:
            pid = int(fields[1]) if fields is not None else 0
        except (ValueError, IndexError):
            break
    return spared


def marked_processes(node_dirs: Iterable[Path]) -> list[int]:
    """Processes whose environment marks them as belonging to one of ``node_dirs`` (or to a
    node inside one of them), except this process and its ancestors."""
    roots = [str(Path(d)) for d in node_dirs]
    wanted = [f"{NODE_ENV}={root}".encode() for root in roots]
    inside = [f"{NODE_ENV}={root}/".encode() for root in roots]
    spared = _ancestors()
    found = []
    for entry in _PROC.glob("[0-9]*"):
        pid = int(entry.name) if entry.name.isdigit() else 0
        if pid <= 0 or pid in spared:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(v in wanted or any(v.startswith(p) for p in inside) for v in environ):
            found.append(pid)
    return sorted(found)


def _running(pid: int, started: str | None) -> bool:
    """Process ``pid`` (the one that started at ``started``) has not ended: it exists and is
    not a zombie. One whose environment can no longer be read may still be exiting."""
    fields = _stat_fields(pid)
    if not fields:
        return False
    return fields[0] not in ("Z", "X") and fields[19:20] == [started]


def end_processes(node_dirs: Iterable[Path], grace_s: float = 5.0) -> list[int]:
    """TERM every process of ``node_dirs`` (``marked_processes``), and each one a later look
    finds (a process may start another while it ends: a launcher's SIGTERM handler asks for a
    standby keeper); after ``grace_s`` KILL what a fresh look finds, again until one finds
    nothing. Returns once every process it signalled has ended; the pids it found."""
    dirs = list(node_dirs)
    found: dict[int, str | None] = {}

    def left() -> list[int]:
        ending = [pid for pid, started in found.items() if _running(pid, started)]
        return sorted({*marked_processes(dirs), *ending})

    def signal_all(pids: list[int], sig: signal.Signals, only_new: bool) -> None:
        for pid in pids:
            if only_new and pid in found:
                continue
            found.setdefault(pid, start_time(pid))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    deadline = time.monotonic() + grace_s
    pids = left()
    while pids and time.monotonic() < deadline:
        signal_all(pids, signal.SIGTERM, only_new=True)
        time.sleep(0.1)
        pids = left()
    # A process killed just after it started a child leaves that child: look again.
    until = time.monotonic() + KILL_LOOKS_S
    while pids and time.monotonic() < until:
        signal_all(pids, signal.SIGKILL, only_new=False)
        time.sleep(0.05)
        pids = left()
    return sorted(found)
