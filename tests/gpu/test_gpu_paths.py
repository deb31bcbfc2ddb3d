"""The GPU paths of the runtime on a real NVIDIA GPU: the torch plugin picks NCCL, pins the
process to its GPU and trains with DDP on it; the node's GPU count comes from the driver's
device files when the topology has none (as for an instance type the operator could not
describe); more torch processes than GPUs are refused before any wait; JAX's plugin leaves
the GPU client alone (its gloo setting is for the CPU client). These skip without a GPU:
CI has none. Run them where there is one: `pytest --noconftest -o addopts= tests/gpu`
(the suite's conftest needs the operator's packages, which a GPU box need not have)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.runtime.launch_harness import run_nodes, topology

DEV = Path("/dev")
GPUS = sum(1 for p in DEV.iterdir() if re.fullmatch(r"nvidia\d+", p.name)) if DEV.is_dir() else 0
pytestmark = pytest.mark.skipif(
    GPUS == 0, reason="needs an NVIDIA GPU (no /dev/nvidiaN here); CI and the dev VM have none"
)
ENTRIES = Path(__file__).resolve().parent / "gpu_entries.py"


def aws_topology(plugin: dict[str, Any], procs: int | str = 1) -> dict[str, Any]:
    """One node as on AWS with no accelerator count: the launcher counts the GPUs itself."""
    topo = topology(nodes=1, plugins=[plugin], procs_per_node=procs)
    topo["provider"] = "aws"
    return topo


def test_torch_on_a_gpu_node_uses_nccl_on_the_process_gpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    topo = aws_topology({"name": "torch", "options": {"init_timeout": 60}})
    (run,) = run_nodes(tmp_path, topo, f"{ENTRIES}:torch_nccl")
    assert run.returncode == 0, run.stderr
    values = run.values()
    assert len(values) == GPUS  # one process per GPU: the default on a GPU node
    for rank, value in enumerate(sorted(values, key=lambda v: v["device"])):
        assert value["backend"] == "nccl"
        assert value["world"] == GPUS
        assert value["device"] == value["parameters_on"] == f"cuda:{rank}"
        assert value["all_reduce"] == GPUS * (GPUS + 1) / 2


def test_more_torch_processes_than_gpus_is_refused_before_any_wait(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    topo = aws_topology({"name": "torch", "options": {"init_timeout": 60}}, procs=GPUS + 1)
    (run,) = run_nodes(tmp_path, topo, f"{ENTRIES}:torch_nccl")
    assert run.returncode != 0
    assert f"{GPUS + 1} processes per node but the node has {GPUS} GPU(s)" in run.stderr


def test_jax_on_a_gpu_node_computes_on_the_gpu(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    topo = aws_topology({"name": "jax", "options": {"init_timeout": 60}})
    (run,) = run_nodes(tmp_path, topo, f"{ENTRIES}:jax_gpu")
    assert run.returncode == 0, run.stderr
    (value,) = run.values()
    assert value["platform"] == "gpu"
    assert value["process_count"] == 1
    assert value["local_devices"] == GPUS
    assert value["computed_on"] == ["gpu"]
    assert value["sum"] == 12.0
