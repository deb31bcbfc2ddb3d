"""Run the runtime launcher as real processes on loopback, one per simulated node."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.ports import free_port_pair

ENTRIES = Path(__file__).resolve().parent / "entries"
# Generous bound for a whole run; a hang fails the test instead of blocking the suite.
RUN_DEADLINE = 120.0


def topology(
    nodes: int = 2,
    plugins: Sequence[dict[str, Any]] = (),
    procs_per_node: int | str = 1,
    accelerators: int | None = None,
) -> dict[str, Any]:
    return {
        "schema": 1,
        "cluster": "runtime-test",
        "provider": "local",
        "head_addr": "127.0.0.1",
        "head_port": free_port_pair(),
        "procs_per_node": procs_per_node,
        "plugins": list(plugins),
        "nodes": [
            {
                "index": i,
                "name": f"node-{i}",
                "private_ip": "127.0.0.1",
                "public_ip": None,
                "instance_id": f"local-{i}",
                "accelerator": (
                    {"type": "test-gpu", "count": accelerators} if accelerators else None
                ),
            }
            for i in range(nodes)
        ],
    }


@dataclass
class NodeRun:
    node: int
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None

    def values(self) -> list[Any]:
        assert self.result is not None, f"node {self.node} wrote no result:\n{self.stderr}"
        return [w["value"] for w in self.result["workers"]]


def launcher_env(**extra: str) -> dict[str, str]:
    """This process's environment less the suite's own SKYINFRA_ variables (a node's launcher
    gets only what its node sets), with ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    return {**env, **extra}


def launch_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "skyinfra_runtime", "launch", *args]


def run_nodes(
    tmp_path: Path,
    topo: dict[str, Any],
    entry: str,
    *,
    nodes: Sequence[int] | None = None,
    extra: Sequence[str] = (),
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    node_env: dict[int, dict[str, str]] | None = None,
) -> list[NodeRun]:
    """Start ``launch`` for each node in parallel (as `skyinfra run` does) and collect them;
    ``node_env``: more variables for some nodes (each node's own directory, say)."""
    topo_file = tmp_path / "topology.json"
    topo_file.write_text(json.dumps(topo))
    indices = range(len(topo["nodes"])) if nodes is None else nodes
    # Launchers without a run directory keep their scratch in TMPDIR: the test's, should the
    # deadline below kill them.
    base_env = launcher_env(**{"TMPDIR": str(tmp_path), **(env or {})})
    procs = {}
    for i in indices:
        result = tmp_path / f"result-{i}.json"
        result.unlink(missing_ok=True)
        argv = launch_argv(
            "--topology",
            str(topo_file),
            "--node",
            str(i),
            "--result",
            str(result),
            *extra,
            entry,
            *(["--", *args] if args else []),
        )
        procs[i] = subprocess.Popen(
            argv,
            env={**base_env, **(node_env or {}).get(i, {})},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    runs = []
    deadline = time.monotonic() + RUN_DEADLINE
    for i, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs.values():
                other.kill()
            raise
        result = tmp_path / f"result-{i}.json"
        data = json.loads(result.read_text()) if result.is_file() else None
        runs.append(NodeRun(i, proc.returncode, out, err, data))
    return runs


def interrupt_after(proc: subprocess.Popen[str], marker: str, sig: int = signal.SIGINT) -> None:
    """Wait until ``marker`` shows up on the process's stdout, then send it ``sig``."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if marker in line:
            proc.send_signal(sig)
            return
    raise AssertionError(f"process ended before printing {marker!r}")


# Set for a launcher whose hang a test must be able to explain: SIGABRT then makes each
# Python process of its group print every thread's stack (faulthandler) before it ends.
FAULTHANDLER_ENV = {"PYTHONFAULTHANDLER": "1"}


def launch_in_its_own_group(tmp_path: Path, entry: str) -> subprocess.Popen[str]:
    """The launcher as the job's agent starts it (a session and group of its own), its output
    and errors on one pipe, ready to explain a hang (FAULTHANDLER_ENV)."""
    return subprocess.Popen(
        launch_argv(entry),
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **FAULTHANDLER_ENV},
    )


def rest_of_output(proc: subprocess.Popen[str], seconds: float = RUN_DEADLINE) -> str:
    """What ``proc`` prints until it ends, at most ``seconds``; past that, fail with the
    evidence: each process of its group (state, signals pending, blocked, caught, where it
    waits in the kernel) and, from faulthandler, its Python stacks."""
    assert proc.stdout is not None
    stream = proc.stdout
    chunks: list[str] = []
    # A thread, not communicate(): the stream's buffer may already hold what was read ahead.
    reader = threading.Thread(target=lambda: chunks.append(stream.read()), daemon=True)
    reader.start()
    reader.join(seconds)
    if not reader.is_alive():
        return "".join(chunks)
    evidence = [_process_state(pid) for pid in group_members(proc.pid)]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGABRT)
    reader.join(30)
    raise AssertionError(
        f"the launcher's group did not end within {seconds:g} s:\n"
        + "\n".join(evidence)
        + "\n--- its output, with each process's stacks after SIGABRT ---\n"
        + "".join(chunks)
    )


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (a launcher's: itself and its workers)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # Fields after the command's closing parenthesis: state, ppid, pgrp, ...
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return sorted(members)


def _process_state(pid: int) -> str:
    proc_dir = Path("/proc") / str(pid)
    try:
        argv = proc_dir.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode()
        wchan = proc_dir.joinpath("wchan").read_text()
        status = proc_dir.joinpath("status").read_text().splitlines()
    except OSError as exc:
        return f"pid {pid}: gone ({exc})"
    wanted = ("State", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
    lines = [line for line in status if line.split(":")[0] in wanted]
    return f"pid {pid} (waits in {wchan or '?'}): {argv}\n  " + "\n  ".join(lines)
