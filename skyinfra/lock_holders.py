"""Who holds a cluster's workspace lock: one small private file per holder, in a folder beside
the lock (``.skyinfra.holders/<pid>-<token>.json``), written when a hold is taken and removed
when it ends. Several submissions share the lock, so one file could name only one of them.

These files are only words for the refusal and `status`: the kernel's flock on the lock file
alone decides who holds it. A file whose process is dead (SIGKILL leaves its file behind) is
ignored, and removed by the next command that takes the lock; so is one whose pid another
process took since (the start time the file records is not that process's).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

HOLDERS_DIR = ".skyinfra.holders"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


@dataclass(frozen=True)
class LockHolder:
    """One command holding the workspace, as its holder file says (the file's JSON)."""

    command: str
    pid: int
    host: str
    since: str
    # The process's start in clock ticks after boot (/proc/PID/stat), which tells a holder from
    # a later process given its pid; None: not known (another system, an older file).
    started: str | None = None
    # When the hold was taken, in ns since the epoch: orders holders taken within one tick of
    # the coarse clock that file times come from. None: an older file (its mtime orders it).
    taken_ns: int | None = None

    @classmethod
    def of_this_process(cls, command: str) -> LockHolder:
        return cls(
            command=command,
            pid=os.getpid(),
            host=socket.gethostname(),
            since=time.strftime("%Y-%m-%d %H:%M:%S %z"),
            started=_process_start(os.getpid()),
            taken_ns=time.time_ns(),
        )

    @classmethod
    def from_json(cls, text: str) -> LockHolder | None:
        """The holder ``text`` names, or None where it is not one (a half-written file)."""
        try:
            data = json.loads(text)
            holder = cls(
                command=str(data["command"]),
                pid=int(data["pid"]),
                host=str(data["host"]),
                since=str(data["since"]),
                started=None if data.get("started") is None else str(data["started"]),
                taken_ns=None if data.get("taken_ns") is None else int(data["taken_ns"]),
            )
        except (ValueError, KeyError, TypeError):
            return None
        return holder

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def describe(self) -> str:
        return f"`skyinfra {self.command}` (pid {self.pid} on {self.host}, since {self.since})"

    def is_alive(self) -> bool:
        """False only where its process is known dead (on this host), or its pid is another
        process's now (a start time that differs); one on another host sharing the folder
        cannot be checked and counts as alive."""
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # another user's live process
        if self.started is None:
            return True
        # Gone meanwhile or a zombie (None) holds no lock; another start: another process.
        return _process_start(self.pid) == self.started


def _process_start(pid: int) -> str | None:
    # The job records' own reading of /proc (imported here only: every command imports this).
    from skyinfra_runtime.jobs.files import process_start_time

    return process_start_time(pid)


def write_holder(workspace: Path, holder: LockHolder) -> Path:
    """The holder file of a hold just taken (private, a name of its own)."""
    folder = workspace / HOLDERS_DIR
    folder.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
    folder.chmod(PRIVATE_DIR_MODE)
    path = folder / f"{holder.pid}-{secrets.token_hex(4)}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # the umask may have narrowed it; never wider
        os.write(fd, holder.to_json().encode())
    finally:
        os.close(fd)
    return path


def _holder_files(workspace: Path) -> Iterator[tuple[Path, LockHolder | None]]:
    """Each holder file and what it says, in the order the holds were taken."""
    folder = workspace / HOLDERS_DIR
    written: list[tuple[int, Path, LockHolder | None]] = []
    try:
        paths = list(folder.glob("*.json"))
    except OSError:
        return
    for path in paths:
        try:
            mtime_ns, text = path.stat().st_mtime_ns, path.read_text(encoding="utf-8")
        except OSError:
            continue  # removed meanwhile: its holder left
        holder = LockHolder.from_json(text)
        taken = holder.taken_ns if holder is not None else None
        written.append((mtime_ns if taken is None else taken, path, holder))
    for _, path, holder in sorted(written, key=lambda w: (w[0], w[1])):
        yield path, holder


def live_holders(workspace: Path, *, besides: Path | None = None) -> list[LockHolder]:
    """The holders whose process lives, oldest first; ``besides``: the asker's own file."""
    return [
        holder
        for path, holder in _holder_files(workspace)
        if holder is not None and path != besides and holder.is_alive()
    ]


def remove_stale(workspace: Path, *, alone: bool) -> None:
    """Remove the files of holders that are gone: those of dead processes, or, by a command
    that holds the lock ``alone`` (nobody else can hold it then), every one. A file that does
    not parse may be another holder's being written: only a command alone removes it."""
    for path, holder in _holder_files(workspace):
        if alone or (holder is not None and not holder.is_alive()):
            path.unlink(missing_ok=True)
