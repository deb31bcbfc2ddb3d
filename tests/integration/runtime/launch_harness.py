"""Run the runtime launcher as real processes on loopback, one per simulated node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    base_env.update(env or {})
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
