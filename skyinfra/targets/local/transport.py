"""LocalTransport: every node is a directory on this machine, reached with subprocesses.

Each process starts in its own session (process group), and its id and start time are
recorded in the node's ``pids/`` folder while it runs, so `kill` ends the whole tree (the
runtime may spawn one worker per device); each also carries the node's mark in its environment
(processes.py), so the destroy provisioner ends everything a node left behind, and never an
unrelated process that reused a stale pid.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from skyinfra.errors import TransportError
from skyinfra.targets.local.processes import NODE_ENV, write_pid_file
from skyinfra.transport import nodesync, tree
from skyinfra.transport.base import Readiness
from skyinfra.transport.nodesync import Entries
from skyinfra.transport.tree import CopyStats

# What a local node keeps of the operator's environment: what a process needs to run (as
# an AWS node's login shell has it), nothing else. The operator's cloud credentials, tokens
# and framework settings stay here; a job gets variables through `env`, --env and --secret
# (the same on every target).
KEEP_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "LANGUAGE")
KEEP_ENV_PREFIXES = ("LC_",)


def node_environment(node_dir: Path) -> dict[str, str]:
    """The environment a node's processes start from: PATH (the node's venv first), HOME,
    user, temp folder, time zone and locale of this one; nothing else of the operator's."""
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV or k.startswith(KEEP_ENV_PREFIXES)}
    env["PATH"] = f"{node_dir / 'venv' / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    env["VIRTUAL_ENV"] = str(node_dir / "venv")
    return env


def node_shell(
    node_dir: Path, index: int, command: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """`skyinfra ssh` on a local node: ``command`` run by /bin/sh (its words joined by spaces,
    as ssh does), or the user's shell, with the node's environment: its venv first on PATH,
    SKYINFRA_NODE, SKYINFRA_NODE_DIR, SKYINFRA_SHARED_DIR, and the node's mark (`down` ends
    what it started). The caller runs it in ``node_dir``."""
    env = node_environment(node_dir)
    env.update(
        {
            NODE_ENV: str(node_dir),
            "SKYINFRA_NODE": str(index),
            "SKYINFRA_NODE_DIR": str(node_dir),
            "SKYINFRA_SHARED_DIR": str(node_dir / "shared"),
        }
    )
    argv = ["/bin/sh", "-c", " ".join(command)] if command else [env.get("SHELL") or "/bin/sh"]
    return argv, env


def node_problem(node_dir: Path) -> str | None:
    """Why ``node_dir`` is not a usable node (None: it is): what `status` reports as failed
    and `up` replaces."""
    if not (node_dir / ".skyinfra-node").is_file():
        return f"{node_dir} is not a bootstrapped node directory (run `skyinfra up`)"
    return None


def _feed(popen: subprocess.Popen[str], data: bytes) -> None:
    """Write ``data`` (UTF-8 text) to the process's stdin and close it (a pipe: nothing on
    disk)."""
    assert popen.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        popen.stdin.write(data.decode())
        popen.stdin.flush()
    with contextlib.suppress(BrokenPipeError):
        popen.stdin.close()


class LocalProcess:
    def __init__(self, node: int, popen: subprocess.Popen[str], pid_file: Path) -> None:
        self.node = node
        self._popen = popen
        self._pid_file = pid_file

    def lines(self) -> Iterator[str]:
        assert self._popen.stdout is not None
        for line in self._popen.stdout:
            yield line.rstrip("\n")

    def poll(self) -> int | None:
        code = self._popen.poll()
        if code is not None:
            self._pid_file.unlink(missing_ok=True)
        return code

    def wait(self, timeout: float | None = None) -> int:
        code = self._popen.wait(timeout)
        self._pid_file.unlink(missing_ok=True)
        return code

    def kill(self, grace_s: float = 10.0) -> None:
        """TERM the process group, then KILL what is left after ``grace_s`` seconds."""
        pgid = self._popen.pid
        for sig, grace in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self._popen.wait(grace)
            except subprocess.TimeoutExpired:
                continue
            # The leader is gone; make sure no child of it lingers in the group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            break
        self._pid_file.unlink(missing_ok=True)


class LocalTransport:
    def __init__(self, node_dirs: Mapping[int, Path]) -> None:
        self._dirs = {i: Path(d) for i, d in node_dirs.items()}

    def _dir(self, node: int) -> Path:
        try:
            d = self._dirs[node]
        except KeyError:
            raise TransportError(f"no node {node} (nodes: {sorted(self._dirs)})") from None
        if not (d / ".skyinfra-node").is_file():
            raise TransportError(
                f"node {node}: {d} is not a bootstrapped node directory (run `skyinfra up`)"
            )
        return d

    def node_root(self, node: int) -> str:
        return str(self._dir(node))

    def node_gone(self, node: int) -> bool:
        """The node's folder is gone (a lost machine, on this target): nothing of it answers,
        and only `up` brings it back. A failed read elsewhere may pass; this does not."""
        d = self._dirs.get(node)
        return d is not None and node_problem(d) is not None

    def close(self) -> None:
        """Nothing to let go of: each command is a process of its own."""

    def readiness(self, node: int) -> Readiness:
        """Ready once the bootstrap made the node directory; `up` is synchronous, so a node
        that is not ready here will not become ready by waiting."""
        d = self._dirs.get(node)
        if d is None:
            return Readiness("failed", f"no such node (nodes: {sorted(self._dirs)})")
        problem = node_problem(d)
        return Readiness("failed", problem) if problem else Readiness("ready")

    def copy_tree(self, node: int, src: Path, wanted: Entries, run_id: str) -> CopyStats:
        """The node's half in-process (nodesync.py); the files that must travel are copied
        into the new run's directory as new files."""
        started = time.monotonic()
        root = self.node_root(node)
        work = Path(nodesync.run_paths(root, run_id)[1])
        src = src.resolve()
        try:
            prepared = nodesync.prepare(root, run_id, wanted)
            sent: dict[str, str] = {}
            sent_bytes = 0
            for rel in prepared["send"]:
                dest = work / rel
                with tree.open_exclusive(dest) as out:
                    size, sent[rel] = tree.stream(src / rel, out.write)
                sent_bytes += size
                os.chmod(dest, wanted[rel]["mode"])
                os.utime(dest, ns=(wanted[rel]["mtime_ns"], wanted[rel]["mtime_ns"]))
            nodesync.finish(root, run_id, wanted, sent)
        except OSError as err:
            raise TransportError(f"node {node}: copying {src} to {work} failed: {err}") from err
        return tree.stats(prepared, sent_bytes, time.monotonic() - started)

    def put_file(self, node: int, src: Path, dest: str) -> None:
        """``dest`` replaced whole (a part file renamed over it): every run puts the node's
        topology.json, which another job's launcher may be reading at that moment."""
        target = Path(dest)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
        try:
            shutil.copyfile(src, part)
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)

    def start(
        self,
        node: int,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        tag: str,
        stdin: bytes | None = None,
    ) -> LocalProcess:
        node_dir = self._dir(node)
        full_env = node_environment(node_dir)
        full_env.update(env)
        full_env[NODE_ENV] = str(node_dir)  # how `down` finds every process of the node
        try:
            popen = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                start_new_session=True,  # own process group: kill() reaches every child
            )
        except OSError as err:
            raise TransportError(f"node {node}: cannot start {argv[0]}: {err}", argv=argv) from err
        if stdin is not None:
            _feed(popen, stdin)
        pid_file = node_dir / "pids" / f"{tag}.pid"
        write_pid_file(pid_file, popen.pid)
        return LocalProcess(node, popen, pid_file)

    def fetch(self, node: int, remote: str, local: Path) -> bool:
        src = Path(remote)
        if not src.is_file():
            return False
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, local)
        return True
