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
from pathlib import Path

import pytest
from skyinfra_runtime import nodefacts, standbys
from skyinfra_runtime.topology import NODE_ENV, TOPOLOGY_ENV, WORKER_ENV, WORKERS_PER_NODE_ENV
from skyinfra_runtime.warm import Warmup, standby_env

from tests.gpu.test_gpu_paths import ENTRIES, GPUS, aws_topology

pytestmark = pytest.mark.skipif(
    GPUS == 0 or shutil.which("nvidia-smi") is None,
    reason="needs an NVIDIA GPU and nvidia-smi; CI and the dev VM have none",
)
JAX = Warmup(("jax",))
TORCH = Warmup(("torch",))  # one worker: the torch plugin leaves OMP_NUM_THREADS alone
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


def test_a_jax_standby_holds_no_gpu_until_its_job_computes_on_it(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    node_dir = tmp_path / "node-0"
    folder = standbys.folder(node_dir)
    # A node's runtime is installed in its environment; here it is the source tree.
    env = {
        **standby_env(os.environ),
        "SKYINFRA_NODE_DIR": str(node_dir),
        "PYTHONPATH": str(RUNTIME_SRC),
    }
    standbys.ensure(folder, 1, JAX, env)
    try:
        pid = waiting_pid(node_dir)
        assert pid not in gpu_processes(), "a waiting standby holds a CUDA context"
        maps = Path(f"/proc/{pid}/maps").read_text()
        print(f"waiting standby {pid}: libcuda mapped: {'libcuda.so' in maps}")

        held, go = tmp_path / "held", tmp_path / "go"
        job = standbys.Job(
            job_argv(tmp_path, "jax_gpu_held", "held"),
            job_env(tmp_path, HELD_FILE=str(held), GO_FILE=str(go)),
            str(tmp_path),
            [],
        )
        worker, start = standbys.take(folder, 0, JAX, job)
        assert worker is not None and start.warm, start
        wait_until("the job computed on the GPU", held.exists)
        # The same process, now a job's worker, is in the driver's list: the check above
        # would have seen the standby had it held the GPU.
        assert worker.pid in gpu_processes()
        go.touch()
        assert worker.wait(timeout=120) == 0
        assert value(tmp_path, "held")["sum"] == 12.0

        cold, warm = [], []
        for round_ in range(ROUNDS):
            name = f"cold{round_}"
            began = time.time()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "skyinfra_runtime.worker",
                    *job_argv(tmp_path, "jax_gpu_first_step", name),
                ],
                env=job_env(tmp_path),
                cwd=tmp_path,
                timeout=300,
            )
            assert proc.returncode == 0
            assert value(tmp_path, name)["platform"] == "gpu"
            cold.append(float(value(tmp_path, name)["at"]) - began)  # type: ignore[arg-type]

            standbys.ensure(folder, 1, JAX, env)
            waiting_pid(node_dir, not_pid=worker.pid)
            name = f"warm{round_}"
            job = standbys.Job(
                job_argv(tmp_path, "jax_gpu_first_step", name), job_env(tmp_path), str(tmp_path), []
            )
            began = time.time()
            worker, start = standbys.take(folder, 0, JAX, job)
            assert worker is not None and start.warm, start
            assert worker.wait(timeout=300) == 0
            assert value(tmp_path, name)["platform"] == "gpu"
            warm.append(float(value(tmp_path, name)["at"]) - began)  # type: ignore[arg-type]
        print(
            f"worker start to first GPU step, {ROUNDS} rounds: cold {[round(c, 2) for c in cold]}"
            f" (median {statistics.median(cold):.2f} s), warm {[round(w, 2) for w in warm]}"
            f" (median {statistics.median(warm):.2f} s)"
        )
    finally:
        standbys.stop(folder)


def test_a_torch_standby_holds_no_gpu_and_its_job_runs_nccl_on_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    node_dir = tmp_path / "node-0"
    folder = standbys.folder(node_dir)
    env = {
        **standby_env(os.environ),
        "SKYINFRA_NODE_DIR": str(node_dir),
        "PYTHONPATH": str(RUNTIME_SRC),
    }
    standbys.ensure(folder, 1, TORCH, env)
    try:
        pid = waiting_pid(node_dir)
        # `import torch` initialises no CUDA: the waiting standby is no compute process.
        assert pid not in gpu_processes(), "a waiting torch standby holds a CUDA context"
        maps = Path(f"/proc/{pid}/maps").read_text()
        print(f"waiting torch standby {pid}: libcuda mapped: {'libcuda.so' in maps}")

        held, go = tmp_path / "held", tmp_path / "go"
        job = standbys.Job(
            job_argv(tmp_path, "torch_nccl_held", "held"),
            job_env(tmp_path, "torch", HELD_FILE=str(held), GO_FILE=str(go)),
            str(tmp_path),
            [],
        )
        worker, start = standbys.take(folder, 0, TORCH, job)
        assert worker is not None and start.warm, start
        wait_until("the job ran DDP steps on the GPU", held.exists)
        assert worker.pid in gpu_processes()  # the same process, now the job's, holds it
        go.touch()
        assert worker.wait(timeout=120) == 0
        done = value(tmp_path, "held")
        assert done["pid"] == worker.pid
        assert done["backend"] == "nccl"  # the plugin's choice on a GPU node
        assert done["device"] == done["parameters_on"] == "cuda:0"
        assert (done["world"], done["all_reduce"]) == (1, 1.0)

        cold, warm = [], []
        for round_ in range(ROUNDS):
            name = f"cold{round_}"
            began = time.time()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "skyinfra_runtime.worker",
                    *job_argv(tmp_path, "torch_first_step", name),
                ],
                env=job_env(tmp_path, "torch"),
                cwd=tmp_path,
                timeout=300,
            )
            assert proc.returncode == 0
            assert value(tmp_path, name)["backend"] == "nccl"
            cold.append(float(value(tmp_path, name)["at"]) - began)  # type: ignore[arg-type]

            standbys.ensure(folder, 1, TORCH, env)
            waiting_pid(node_dir, not_pid=worker.pid)
            name = f"warm{round_}"
            job = standbys.Job(
                job_argv(tmp_path, "torch_first_step", name),
                job_env(tmp_path, "torch"),
                str(tmp_path),
                [],
            )
            began = time.time()
            worker, start = standbys.take(folder, 0, TORCH, job)
            assert worker is not None and start.warm, start
            assert worker.wait(timeout=300) == 0
            assert value(tmp_path, name)["backend"] == "nccl"
            warm.append(float(value(tmp_path, name)["at"]) - began)  # type: ignore[arg-type]
        print(
            f"torch worker start to first NCCL all-reduce, {ROUNDS} rounds:"
            f" cold {[round(c, 2) for c in cold]} (median {statistics.median(cold):.2f} s),"
            f" warm {[round(w, 2) for w in warm]} (median {statistics.median(warm):.2f} s)"
        )
    finally:
        standbys.stop(folder)
