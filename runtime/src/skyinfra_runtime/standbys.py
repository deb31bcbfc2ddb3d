"""A node's standby workers: the keeper that holds one per worker slot, and the launcher's
side (``ensure`` the keeper, ``take`` a standby for a worker, ``WarmWorker`` to wait on it).

Everything lives in ``$SKYINFRA_NODE_DIR/standby/`` (0700): ``want.json`` (the slots and the
warmup the latest job asked for), ``keeper.lock`` (held by the one keeper), a socket per
waiting standby (``w<slot>-<pid>.sock``, 0600; ``.importing`` while it imports), and
``exit-<pid>`` (a taken standby's exit status, written by the keeper, its parent, and read
once by the launcher). Nothing there is a pid file of ``pids/``: the idle shutdown
(infra/scripts/idle-check.sh) never counts a standby as busy, and `down` ends them with the
node's other processes.

The keeper (``python -m skyinfra_runtime.standbys DIR``) starts a standby in each slot that
has none, a fresh one as soon as one dies, and one in a slot a job took once the launcher
asks again (``ensure``: at once on a node with cores to spare, else after the job); it starts
no more after three standbys in a row failed before they were ready (a framework that does
not import), and ends once ``want.json`` asks for no slot (or is gone with the node folder)
and no taken standby still runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from skyinfra_runtime.jobrecord import WorkerStart
from skyinfra_runtime.warm import (
    Warmup,
    cold_reason,
    importing_path,
    job_sets_framework,
    slots_to_fill,
    socket_path,
    taken_file,
)

FOLDER = "standby"
WANT_FILE = "want.json"
LOCK_FILE = "keeper.lock"
POLL_S = 0.2
MAX_FAILED_STARTS = 3
# How long a taken standby that is gone may lack its exit file while the keeper lives.
EXIT_FILE_GRACE_S = 5.0
# How long a job waits for a standby still importing before it starts cold after all (an
# import that hangs); a cold worker would pay the same imports, so this is rarely reached.
IMPORT_WAIT_S = 300.0
# A refill asked for moments ago (the previous attempt's or job's part on this node just
# ended) appears within the keeper's poll and an interpreter's start: the job waits that long
# for it rather than starting cold beside it.
REFILL_ASKED_S = 5.0
REFILL_WAIT_S = 1.0


def folder(node_dir: str | os.PathLike[str]) -> Path:
    return Path(node_dir) / FOLDER


def _private_folder(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    tmp.replace(path)


def _log(path: Path) -> BinaryIO:
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")


def keeper_running(path: Path) -> bool:
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def ensure(path: Path, slots: int, warmup: Warmup, env: dict[str, str]) -> None:
    """Ask for ``slots`` standbys doing ``warmup``; start the keeper (with ``env``, the
    node's environment: no job's variable, no secret) when none runs."""
    _private_folder(path)
    _write_json(
        path / WANT_FILE,
        {
            "slots": slots,
            "warmup": warmup.to_dict(),
            "executable": sys.executable,
            # Each ask is new: the keeper refills the slots jobs took since the last one.
            "asked": time.time_ns(),
        },
    )
    if keeper_running(path):
        return
    with _log(path / "keeper.log") as log:
        subprocess.Popen(
            [sys.executable, "-m", "skyinfra_runtime.standbys", str(path)],
            env=env,
            cwd=path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not in the launcher's group: outlives the job
        )


def stop(path: Path) -> None:
    """No more standbys here (``warm_workers = false``): the keeper ends the waiting ones."""
    if (path / WANT_FILE).exists():
        _write_json(path / WANT_FILE, {"slots": 0})


@dataclass(frozen=True)
class Job:
    """What a standby needs to become a job's worker (the same a cold one is started with)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    job_names: list[str]


class WarmWorker:
    """A taken standby, waited on as a ``subprocess.Popen`` (poll, wait, send_signal, kill):
    it is the keeper's child, whose exit status the keeper writes to ``exit-<pid>``; it also
    says its exit code on the job's connection as it leaves, which is what counts once the
    keeper is gone (a worker never depends on its keeper after it took a job)."""

    def __init__(self, path: Path, pid: int, conn: socket.socket) -> None:
        self.path, self.pid, self._conn = path, pid, conn
        self.returncode: int | None = None
        self._gone_since: float | None = None
        self._heard = b""
        self._said: int | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        exit_file = self.path / f"exit-{self.pid}"
        code: int | None = None
        with contextlib.suppress(OSError, ValueError):
            code = int(exit_file.read_text())
            exit_file.unlink()
        if code is None and not _alive(self.pid):
            # Reaped but not yet written, or its keeper is gone: then no status will come
            # from it, and the code the worker said is its exit (none: killed by a signal).
            self._gone_since = self._gone_since or time.monotonic()
            waited = time.monotonic() - self._gone_since
            if not keeper_running(self.path) or waited > EXIT_FILE_GRACE_S:
                said = self._said_exit()
                code = -signal.SIGKILL if said is None else said
        if code is not None:
            self.returncode = code
            self._conn.close()
        return self.returncode

    def _said_exit(self) -> int | None:
        """The exit code the worker said on the connection (standby._tell_exit), if any."""
        with contextlib.suppress(OSError):
            while chunk := self._conn.recv(4096, socket.MSG_DONTWAIT):
                self._heard += chunk
        for line in self._heard.splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                code = json.loads(line).get("exit")
                if isinstance(code, int):
                    self._said = code
        return self._said

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"standby {self.pid}", timeout or 0)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running (a zombie is not: with its keeper gone, whoever adopted it may never reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def take(path: Path, slot: int, warmup: Warmup, job: Job) -> tuple[WarmWorker | None, WorkerStart]:
    """Hand ``job`` to the standby waiting in ``slot`` (a ready one first, else one still
    importing, whose imports the job waits for); (None, why cold) when none may."""
    reason = job_sets_framework(job.job_names)
    if reason:  # known before asking any standby
        return None, WorkerStart(slot, warm=False, reason=reason)
    found = _standbys_in(path, slot)
    if not found and _refill_coming(path, slot):
        until = time.monotonic() + REFILL_WAIT_S
        while not found and time.monotonic() < until:
            time.sleep(0.02)
            found = _standbys_in(path, slot)
    for sock_file in found:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(10.0)
        try:
            _connect_found(conn, sock_file)
            reader = conn.makefile("rb")
            hello = json.loads(reader.readline())
            reason = _other_warmup(hello, warmup) or cold_reason(
                job.job_names, job.env, hello.get("env", {})
            )
            if reason:
                conn.close()
                return None, WorkerStart(slot, False, reason=reason)
            imports_s = None
            if hello.get("ready_at") is None:  # still importing: wait for the rest
                since = time.monotonic()
                conn.settimeout(IMPORT_WAIT_S)
                hello["ready_at"] = json.loads(reader.readline())["ready_at"]
                conn.settimeout(10.0)
                imports_s = time.monotonic() - since
            socket.send_fds(conn, [b"J"], [0, 1, 2])
            payload = {"argv": job.argv, "env": job.env, "cwd": job.cwd}
            conn.sendall((json.dumps(payload) + "\n").encode())
            if not json.loads(reader.readline() or b"{}").get("taken"):
                raise OSError("the standby did not take the job")
        except (OSError, ValueError, KeyError, TypeError):
            conn.close()
            continue  # gone meanwhile, or taken by another job: the next, else cold
        conn.settimeout(None)
        waited = max(0.0, time.time() - float(hello["ready_at"]))
        start = WorkerStart(slot, True, waited_s=waited, imports_s=imports_s)
        return WarmWorker(path, int(hello["pid"]), conn), start
    return None, WorkerStart(slot, False, reason="no standby was ready")


def _standbys_in(path: Path, slot: int) -> list[Path]:
    """The slot's standbys' sockets: the ready ones first, then those still importing."""
    return [*sorted(path.glob(f"w{slot}-*.sock")), *sorted(path.glob(f"w{slot}-*.importing"))]


def _refill_coming(path: Path, slot: int) -> bool:
    """The keeper runs and was asked moments ago to fill this slot."""
    want = _read_want(path)
    asked_ago = (time.time_ns() - int(want.get("asked", 0))) / 1e9
    return (
        int(want.get("slots", 0)) > slot
        and 0 <= asked_ago < REFILL_ASKED_S
        and keeper_running(path)
    )


def _other_warmup(hello: dict[str, Any], warmup: Warmup) -> str | None:
    """Why a standby's imports are not this job's (None: they are)."""
    if hello.get("executable") != sys.executable:
        return "the standby runs another interpreter"
    if hello.get("key") != warmup.key:  # other imports, or torch's other thread count
        return f"the standby's warmup {hello.get('key')!r} is not this job's {warmup.key!r}"
    return None


def _connect_found(conn: socket.socket, path: Path) -> None:
    """Connect to a standby's socket as found: one found importing may have been renamed
    ready (``.sock``) since."""
    try:
        _connect(conn, path)
    except FileNotFoundError:
        if path.suffix != ".importing":
            raise
        _connect(conn, path.with_suffix(".sock"))


def _connect(conn: socket.socket, path: Path) -> None:
    """Connect to a socket whose path may be longer than AF_UNIX takes (107 bytes): through
    the folder's descriptor (/proc/self/fd/N/NAME) where it is."""
    if len(os.fsencode(path)) < 100:
        conn.connect(str(path))
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        conn.connect(f"/proc/self/fd/{folder}/{path.name}")
    finally:
        os.close(folder)


# The keeper ---------------------------------------------------------------------------


@dataclass
class _Waiting:
    proc: subprocess.Popen[bytes]
    key: str
    ready: bool = False


def keep(path: Path) -> int:
    lock = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another keeper holds this node's standbys
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    waiting: dict[int, _Waiting] = {}
    busy: list[threading.Thread] = []
    taken: dict[int, int] = {}  # slot -> when a job took its standby (ns)
    failed = 0
    # A node folder removed (`down` on the ssh target) ends them too: want.json went with it.
    while not stopping.is_set():
        want = _read_want(path)
        warmup = Warmup.from_dict(want["warmup"]) if want.get("warmup") else None
        slots = int(want.get("slots", 0)) if warmup else 0
        for slot, standby in list(waiting.items()):
            pid = standby.proc.pid
            taken_at = _taken_at(path, pid)
            if taken_at is not None:  # a job's worker now: the slot is free
                taken[slot] = taken_at
                busy.append(_reap(path, standby.proc))
                del waiting[slot]
            elif standby.proc.poll() is not None:  # died waiting (killed, or failed)
                _remove_sockets(path, slot, pid)
                del waiting[slot]
                failed = 0 if standby.ready else failed + 1
            elif warmup is None or standby.key != warmup.key or slot >= slots:
                standby.proc.terminate()
                standby.proc.wait()
                _remove_sockets(path, slot, pid)
                del waiting[slot]
            elif socket_path(path, slot, pid).exists():
                standby.ready, failed = True, 0
        # A take before the launcher's latest ask is answered (by time, not by the order the
        # keeper noticed them in: an ask right after a take is often seen in the same pass).
        asked = int(want.get("asked", 0))
        taken = {slot: at for slot, at in taken.items() if at > asked}
        busy = [t for t in busy if t.is_alive()]
        if slots == 0 and not waiting and not busy:
            break
        if warmup is not None and failed < MAX_FAILED_STARTS:
            for slot in slots_to_fill(slots, waiting, taken):
                waiting[slot] = _Waiting(_start(path, slot, warmup), warmup.key)
        stopping.wait(POLL_S)
    for standby in waiting.values():
        standby.proc.terminate()
    return 0


def _remove_sockets(path: Path, slot: int, pid: int) -> None:
    """A gone standby's socket, whichever name it had (ready or still importing)."""
    socket_path(path, slot, pid).unlink(missing_ok=True)
    importing_path(path, slot, pid).unlink(missing_ok=True)


def _taken_at(path: Path, pid: int) -> int | None:
    """When the standby took a job (its taken file's time, ns); None: it has not."""
    try:
        return taken_file(path, pid).stat().st_mtime_ns
    except OSError:
        return None


def _read_want(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / WANT_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("executable", sys.executable) != sys.executable:
        return {}
    return data


def _start(path: Path, slot: int, warmup: Warmup) -> subprocess.Popen[bytes]:
    with _log(path / f"w{slot}.log") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "skyinfra_runtime.standby",
                str(path),
                str(slot),
                str(os.getpid()),
                json.dumps(warmup.to_dict()),
            ],
            cwd=path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: a worker's children end with it
        )


def _reap(path: Path, proc: subprocess.Popen[bytes]) -> threading.Thread:
    """Wait for a taken standby (the keeper is its parent) and write its exit status."""

    def wait() -> None:
        code = proc.wait()
        _write_json(path / f"exit-{proc.pid}", code)
        taken_file(path, proc.pid).unlink(missing_ok=True)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    raise SystemExit(keep(Path(sys.argv[1])))
