"""One standby worker: ``python -m skyinfra_runtime.standby DIR SLOT KEEPER_PID WARMUP_JSON``.

Started by the node's keeper (standbys.py) in the node's environment, it imports the
frameworks its warmup names, initialises nothing, and waits on a Unix socket in DIR (the
node's private standby folder) for one job. The launcher sends the job (argv, env, cwd) and
its stdin, stdout and stderr; from then on this process is that job's worker, exactly as
``python -m skyinfra_runtime.worker`` would have been, and it is never reused.

The socket listens from the start, named ``w<slot>-<pid>.importing`` while the imports run
and renamed ``w<slot>-<pid>.sock`` once they are done (ready). A launcher that finds only an
importing standby takes it and waits for the rest of its imports: a cold worker would redo
them from the start, beside the standby's, on the same cores.

Handshake (one JSON line each way, then the job): the standby says hello (pid, warmup key,
the environment it was started with, its interpreter, when it became ready: null while it
imports, and then a second line ``{"ready_at": T}`` once it is ready); the launcher
either closes (it starts cold: the standby waits on) or sends one byte with the three file
descriptors (SCM_RIGHTS) and the job as a JSON line; the standby answers ``{"taken": true}``.
The connection then stays open for the job's life: when it closes before the worker ends,
the launcher is gone and the worker ends (its own process group, SIGKILL), as a cold
worker does with PR_SET_PDEATHSIG. The worker says its exit code on it (``{"exit": N}``)
as it leaves: the launcher knows it even when the keeper, the worker's parent, is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from skyinfra_runtime import worker
from skyinfra_runtime.parentdeath import end_with_parent, signal_on_parent_death
from skyinfra_runtime.warm import PATH_NAME, Warmup, importing_path, socket_path, taken_file

HANDSHAKE_TIMEOUT_S = 30.0


def main(argv: list[str]) -> int:
    folder, slot, keeper, warmup = Path(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    if not end_with_parent(signal.SIGKILL, str(keeper)):  # a waiting standby ends with its keeper
        return 1
    # Before any framework registers its own: runs last, as in a cold worker.
    atexit.register(worker._EndBeforeTeardown.hook)
    started_env = dict(os.environ)
    plan = Warmup.from_dict(json.loads(warmup))
    hello: dict[str, Any] = {
        "pid": os.getpid(),
        "key": plan.key,
        "env": started_env,
        "executable": sys.executable,
        "ready_at": None,
    }
    importing = importing_path(folder, slot, os.getpid())
    listener = _listen(folder, importing)
    imported = threading.Event()
    handed: queue.Queue[tuple[socket.socket, list[int], dict[str, Any]]] = queue.Queue(1)
    threading.Thread(target=_serve, args=(listener, hello, imported, handed), daemon=True).start()
    os.environ.update(dict(plan.env))
    for module in plan.imports:
        importlib.import_module(module)
    hello["ready_at"] = time.time()
    imported.set()
    path = socket_path(folder, slot, os.getpid())
    importing.replace(path)  # ready: the keeper and `status` count it from now
    conn, fds, job = handed.get()
    taken_file(folder, os.getpid()).touch(mode=0o600)  # the keeper starts the next one
    path.unlink(missing_ok=True)
    listener.close()
    # From now on the launcher's, not the keeper's: before it hears "taken", so that a
    # keeper that dies once the job is handed over does not take the worker with it.
    signal_on_parent_death(0)
    conn.sendall(b'{"taken": true}\n')
    conn.settimeout(None)
    _become_worker(job, fds, conn)
    return 0  # not reached: worker.main() exits


def _listen(folder: Path, path: Path) -> socket.socket:
    tmp = folder / f".{path.name}.tmp"
    tmp.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Relative to the folder (the keeper's cwd for it): a socket's path is limited to 107
    # bytes, less than a deep project's node folder.
    os.chdir(folder)
    listener.bind(tmp.name)
    os.chmod(tmp, 0o600)
    listener.listen(4)
    tmp.replace(path)  # connectable once it has its name
    return listener


def _line(data: dict[str, Any]) -> bytes:
    return (json.dumps(data) + "\n").encode()


def _serve(
    listener: socket.socket,
    hello: dict[str, Any],
    imported: threading.Event,
    handed: queue.Queue[tuple[socket.socket, list[int], dict[str, Any]]],
) -> None:
    """Answer launchers one at a time, from the start (a thread: the main one imports),
    until one hands over a job."""
    while True:
        conn, _ = listener.accept()
        conn.settimeout(HANDSHAKE_TIMEOUT_S)
        fds: list[int] = []
        try:
            ready = imported.is_set()
            conn.sendall(_line({**hello, "ready_at": hello["ready_at"] if ready else None}))
            if not ready:  # the launcher waits for the rest of the imports
                imported.wait()
                conn.sendall(_line({"ready_at": hello["ready_at"]}))
            data, fds, _, _ = socket.recv_fds(conn, 1, 3)
            if data and len(fds) == 3:
                job = json.loads(conn.makefile("rb").readline())
                handed.put((conn, fds, job))
                return
        except (OSError, ValueError):
            pass
        for fd in fds:  # a launcher that chose cold (or went): wait on
            os.close(fd)
        conn.close()


def _become_worker(job: dict[str, Any], fds: list[int], conn: socket.socket) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    cwd = str(job["cwd"])
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(job["env"])
    # As `python -m skyinfra_runtime.worker` in cwd sets them: cwd first, then PYTHONPATH.
    extra = [p for p in os.environ.get(PATH_NAME, "").split(os.pathsep) if p]
    sys.path[0:1] = [cwd, *extra]
    threading.Thread(target=_end_with_launcher, args=(conn,), daemon=True).start()
    sys.argv = [worker.__file__, *job["argv"]]
    worker.main(warm=True, on_exit=lambda code: _tell_exit(conn, code))


def _tell_exit(conn: socket.socket, code: int) -> None:
    """The launcher is not this process's parent: it hears the exit code from here, and so
    still knows it when the keeper (the parent) is gone."""
    with contextlib.suppress(OSError):
        conn.sendall((json.dumps({"exit": code}) + "\n").encode())


def _end_with_launcher(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while conn.recv(64):
            pass
    with contextlib.suppress(OSError):
        os.killpg(os.getpgid(0), signal.SIGKILL)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
