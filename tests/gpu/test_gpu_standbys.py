"""A node's JAX and torch standbys on a real NVIDIA GPU: while one waits it holds no CUDA
context (nothing of it in the driver's list of compute processes), the job it takes computes
on the GPU (torch's: the torch plugin's process group on NCCL), and worker start to the
first GPU step is printed cold and warm (a measurement for the benchmark notes, never
asserted). Skips without a GPU, as the rest of tests/gpu."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from skyinfra_runtime import nodefacts, standbys
from skyinfra_runtime.topology import NODE_ENV, TOPOLOGY_ENV, WORKER_ENV, WORKERS_PER_NODE_ENV
from skyinfra_runtime.warm import TORCH_IMPORTS, Warmup, standby_env

from tests.gpu.test_gpu_paths import ENTRIES, GPUS, aws_topology

pytestmark = pytest.mark.skipif(
    GPUS == 0 or shutil.which("nvidia-smi") is None,
    reason="needs an NVIDIA GPU and nvidia-smi; CI and the dev VM have none",
)
JAX = Warmup(("jax",))
TORCH = Warmup(TORCH_IMPORTS)  # one worker: the torch plugin leaves OMP_NUM_THREADS alone
RUNTIME_SRC = Path(__file__).resolve().parents[2] / "runtime" / "src"
ROUNDS = 3


def wait_until(what: str, done: Callable[[], object]) -> None:
    until = time.monotonic() + 120  # a bound on the wait, not an assertion on time
    while not done():
        assert time.monotonic() < until, f"never: {what}"
        time.sleep(0.05)


def gpu_processes() -> set[int]:
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {int(line) for line in out.split() if line.strip().isdigit()}


def job_env(tmp_path: Path, plugin: str = "jax", **more: str) -> dict[str, str]:
    topo = aws_topology({"name": plugin, "options": {"init_timeout": 60}})
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(RUNTIME_SRC), os.environ.get("PYTHONPATH", "")]),
        TOPOLOGY_ENV: json.dumps(topo),
        NODE_ENV: "0",
        WORKER_ENV: "0",
        WORKERS_PER_NODE_ENV: "1",
        **more,
    }


def job_argv(tmp_path: Path, entry: str, name: str) -> list[str]:
    return [
        f"{ENTRIES}:{entry}",
        str(tmp_path / f"{name}.json"),
        str(tmp_path / f"{name}.st"),
        "--",
    ]


def value(tmp_path: Path, name: str) -> dict[str, object]:
    return json.loads((tmp_path / f"{name}.json").read_text())["value"]  # type: ignore[no-any-return]


def waiting_pid(node_dir: Path, not_pid: int = 0) -> int:
    wait_until(
        "a standby waits",
        lambda: [s for s in nodefacts.waiting_standbys(node_dir) if s.pid != not_pid],
    )
    (standby,) = [s for s in nodefacts.waiting_standbys(node_dir) if s.pid != not_pid]
    return standby.pid


@dataclass
class StandbyNode:
    """A node folder whose keeper keeps one standby of ``warmup`` (the runtime from the
    source tree, as a node's own environment would have it installed)."""

    tmp_path: Path
    warmup: Warmup
    plugin: str

    @property
    def node_dir(self) -> Path:
        return self.tmp_path / "node-0"

    @property
    def folder(self) -> Path:
        return standbys.folder(self.node_dir)

    def ensure(self) -> None:
        env = {
            **standby_env(os.environ),
            "SKYINFRA_NODE_DIR": str(self.node_dir),
            "PYTHONPATH": str(RUNTIME_SRC),
        }
        standbys.ensure(self.folder, 1, self.warmup, env)

    def take(self, entry: str, name: str, **more: str) -> standbys.WarmWorker:
        job = standbys.Job(
            job_argv(self.tmp_path, entry, name),
            job_env(self.tmp_path, self.plugin, **more),
            str(self.tmp_path),
            [],
        )
        worker, start = standbys.take(self.folder, 0, self.warmup, job)
        assert worker is not None and start.warm, start
        return worker


def holds_no_gpu_until_its_job(node: StandbyNode, held_entry: str) -> dict[str, object]:
    """A waiting standby is not among the driver's compute processes; the same process, once
    it took a job that computes on the GPU and holds it, is (so the first check would have seen
    it). The held job's value."""
    pid = waiting_pid(node.node_dir)
    assert pid not in gpu_processes(), "a waiting standby holds a CUDA context"
    maps = Path(f"/proc/{pid}/maps").read_text()
    print(f"waiting {node.plugin} standby {pid}: libcuda mapped: {'libcuda.so' in maps}")
    held, go = node.tmp_path / "held", node.tmp_path / "go"
    worker = node.take(held_entry, "held", HELD_FILE=str(held), GO_FILE=str(go))
    wait_until("the job computed on the GPU", held.exists)
    assert worker.pid in gpu_processes()
    go.touch()
    assert worker.wait(timeout=120) == 0
    return {**value(node.tmp_path, "held"), "worker_pid": worker.pid}


def cold_and_warm_rounds(
    node: StandbyNode, entry: str, check: Callable[[dict[str, object]], None], taken: int
) -> tuple[list[float], list[float]]:
    """Worker start to ``entry``'s "at" (its first GPU step), cold and on a standby, in turns:
    the seconds of each (printed by the caller, never asserted). ``taken``: the standby a
    job took last, whose slot the keeper fills again."""
    cold, warm = [], []
    for round_ in range(ROUNDS):
        name = f"cold{round_}"
        began = time.time()
        argv = [sys.executable, "-m", "skyinfra_runtime.worker"]
        proc = subprocess.run(
            [*argv, *job_argv(node.tmp_path, entry, name)],
            env=job_env(node.tmp_path, node.plugin),
            cwd=node.tmp_path,
            timeout=300,
        )
        assert proc.returncode == 0
        check(value(node.tmp_path, name))
        cold.append(float(value(node.tmp_path, name)["at"]) - began)  # type: ignore[arg-type]

        node.ensure()
        waiting_pid(node.node_dir, not_pid=taken)
        name = f"warm{round_}"
        began = time.time()
        worker = node.take(entry, name)
        assert worker.wait(timeout=300) == 0
        taken = worker.pid
        check(value(node.tmp_path, name))
        warm.append(float(value(node.tmp_path, name)["at"]) - began)  # type: ignore[arg-type]
    return cold, warm


def said(what: str, cold: list[float], warm: list[float]) -> str:
    return (
        f"{what}, {ROUNDS} rounds: cold {[round(c, 2) for c in cold]}"
        f" (median {statistics.median(cold):.2f} s), warm {[round(w, 2) for w in warm]}"
        f" (median {statistics.median(warm):.2f} s)"
    )


def test_a_jax_standby_holds_no_gpu_until_its_job_computes_on_it(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    node = StandbyNode(tmp_path, JAX, "jax")
    node.ensure()
    try:
        done = holds_no_gpu_until_its_job(node, "jax_gpu_held")
        assert done["sum"] == 12.0

        def on_gpu(value: dict[str, object]) -> None:
            assert value["platform"] == "gpu"

        cold, warm = cold_and_warm_rounds(
            node,
            "jax_gpu_first_step",
            on_gpu,
            int(done["worker_pid"]),  # type: ignore[call-overload]
        )
        print(said("worker start to first GPU step", cold, warm))
    finally:
        standbys.stop(node.folder)


def test_a_torch_standby_holds_no_gpu_and_its_job_runs_nccl_on_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    node = StandbyNode(tmp_path, TORCH, "torch")
    node.ensure()
    try:
        # torch and torch._dynamo imported, no CUDA initialised: no compute process waits.
        done = holds_no_gpu_until_its_job(node, "torch_nccl_held")
        assert done["pid"] == done["worker_pid"]
        assert done["backend"] == "nccl"  # the plugin's choice on a GPU node
        assert done["device"] == done["parameters_on"] == "cuda:0"
        assert (done["world"], done["all_reduce"]) == (1, 1.0)

        def on_nccl(value: dict[str, object]) -> None:
            assert value["backend"] == "nccl"

        cold, warm = cold_and_warm_rounds(
            node,
            "torch_first_step",
            on_nccl,
            int(done["worker_pid"]),  # type: ignore[call-overload]
        )
        print(said("torch worker start to first NCCL all-reduce", cold, warm))
    finally:
        standbys.stop(node.folder)
