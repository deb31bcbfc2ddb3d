"""A job's worker processes on a local cluster, for tests that kill one at a chosen point."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


def worker_pid(job: str, node: int) -> int | None:
    """The pid of node ``node``'s worker of job ``job``: a cold worker's environment says
    which; a warm one (a standby that took the job) keeps the environment it started with,
    and its working directory, the job's copy on that node, says which."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cwd = os.readlink(f"/proc/{pid}/cwd") if b"skyinfra_runtime.standby\0" in cmd else ""
        except OSError:
            continue
        if (
            b"skyinfra_runtime.worker" in cmd
            and f"SKYINFRA_RUN_ID={job}".encode() in environ
            and f"SKYINFRA_NODE={node}".encode() in environ
        ) or (f"/node-{node}/runs/{job}/" in cwd + "/"):
            return int(pid)
    return None


def wait_for_line(log: Path, line: str, timeout_s: float = 180) -> None:
    """Until ``line`` is in ``log`` (a node's output.log): a point in the job, not a sleep."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if log.is_file() and line in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{line!r} not in {log} after {timeout_s} s")


def alive(pid: int) -> bool:
    """Running: not gone, and not a zombie (dead, its parent has not reaped it yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def kill_all(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` that is still there."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def processes_under(root: Path) -> list[int]:
    """The processes an emulated AWS node runs: their command line names its root (the
    node's venv, its node dir)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(root) in cmd and entry.name != str(os.getpid()):
            found.append(int(entry.name))
    return [pid for pid in found if alive(pid)]


def end_all_under(root: Path, within_s: float = 10.0) -> list[int]:
    """SIGKILL every process of an emulated node, look again, and repeat until a look finds
    none: a standby keeper may start a standby between one look and its kill. Returns what
    is still there after ``within_s`` (nothing, unless something outruns the kills)."""
    deadline = time.monotonic() + within_s
    while (found := processes_under(root)) and time.monotonic() < deadline:
        kill_all(found)
        time.sleep(0.05)
    return found


def until_first_line(proc: subprocess.Popen[str], text: str) -> list[str]:
    """``proc``'s stdout lines up to the first that holds ``text`` (its end: a failure)."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never came: {''.join(seen)}")
