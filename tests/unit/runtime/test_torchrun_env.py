"""torchrun's per-worker environment and the rank -> GPU mapping (pure functions)."""

from __future__ import annotations

from pathlib import Path

import pytest
from skyinfra_runtime.devices import jax_local_devices, torch_device, torch_procs
from skyinfra_runtime.errors import PluginError
from skyinfra_runtime.torchrun import torchrun_env

# What torchrun 2.13 gives each worker (LocalElasticAgent._start_workers and around it).
TORCHRUN_KEYS = {
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
}  # fmt: skip


def env(**kw: object) -> dict[str, str]:
    args: dict[str, object] = {
        "node": 1,
        "nodes": 2,
        "local_rank": 1,
        "procs_per_node": 2,
        "master_addr": "10.0.0.5",
        "master_port": 29501,
        "run_id": "20261123-abc",
        "inherited": {},
    }
    args.update(kw)
    return torchrun_env(**args)  # type: ignore[arg-type]


def test_every_torchrun_variable_for_rank_3_of_4() -> None:
    e = env()
    assert set(e) == TORCHRUN_KEYS | {"NODE_RANK", "OMP_NUM_THREADS"}
    assert (e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"], e["NODE_RANK"]) == ("3", "1", "1", "1")
    assert (e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["GROUP_WORLD_SIZE"]) == ("4", "2", "2")
    assert (e["ROLE_RANK"], e["ROLE_WORLD_SIZE"], e["ROLE_NAME"]) == ("3", "4", "default")
    assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("10.0.0.5", "29501")
    assert e["TORCHELASTIC_RUN_ID"] == "20261123-abc"  # is_torchelastic_launched() reads it
    # As under torchrun, a store is hosted for the ranks (rank 0's torch plugin: its agent).
    assert e["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert e["OMP_NUM_THREADS"] == "1"  # torchrun's default with several processes per node


def test_one_process_per_node_leaves_omp_alone_and_the_users_values_win() -> None:
    assert "OMP_NUM_THREADS" not in env(procs_per_node=1, local_rank=0)
    mine = {"OMP_NUM_THREADS": "6", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
    e = env(inherited=mine)
    assert (e["OMP_NUM_THREADS"], e["TORCH_NCCL_ASYNC_ERROR_HANDLING"]) == ("6", "3")
    assert env(run_id=None)["TORCHELASTIC_RUN_ID"] == "none"  # torchrun's default id


def test_the_restart_count_is_the_jobs_attempt_less_one() -> None:
    assert env()["TORCHELASTIC_RESTART_COUNT"] == "0"
    assert env(inherited={"SKYINFRA_ATTEMPT": "3"})["TORCHELASTIC_RESTART_COUNT"] == "2"
    assert env(inherited={"SKYINFRA_ATTEMPT": "x"})["TORCHELASTIC_RESTART_COUNT"] == "0"


@pytest.mark.parametrize("gpus", [4, 8])
@pytest.mark.parametrize("procs", [1, 2, 4, 8])
def test_torch_ranks_get_distinct_gpus(gpus: int, procs: int) -> None:
    if procs > gpus:
        with pytest.raises(PluginError, match=f"{procs} processes per node but the node has"):
            torch_device(0, procs, gpus)
        return
    used = [torch_device(rank, procs, gpus) for rank in range(procs)]
    assert len(set(used)) == procs and all(0 <= g < gpus for g in used)


@pytest.mark.parametrize("gpus", [4, 8])
@pytest.mark.parametrize("procs", [2, 4, 8])
def test_jax_workers_get_disjoint_blocks_covering_every_gpu(gpus: int, procs: int) -> None:
    if procs > gpus:
        with pytest.raises(PluginError, match="can hang NCCL"):
            jax_local_devices(0, procs, gpus)
        return
    blocks = [jax_local_devices(w, procs, gpus) for w in range(procs)]
    flat = [g for block in blocks for g in block or []]
    assert sorted(flat) == list(range(gpus))  # every GPU once, none shared
    assert {len(block or []) for block in blocks} == {gpus // procs}


def test_jax_uneven_split_is_refused_and_one_process_sees_every_gpu() -> None:
    with pytest.raises(PluginError, match="cannot split 8 GPUs evenly"):
        jax_local_devices(0, 3, 8)
    assert jax_local_devices(0, 1, 8) is None  # one process per node: JAX sees all GPUs
    assert jax_local_devices(1, 2, 0) is None  # no GPU (or unknown): nothing to choose


@pytest.mark.parametrize(
    ("procs", "gpus", "chosen", "expected"),
    [
        (1, 8, False, 8),  # the default becomes one process per GPU
        (1, 4, False, 4),
        (1, 0, False, 1),  # CPU nodes: unchanged
        (1, 1, False, 1),
        (2, 4, False, 2),  # an explicit count is kept
        (1, 4, True, 1),  # --procs-per-node 1 given: kept
    ],
)
def test_torch_defaults_to_one_process_per_gpu(
    procs: int, gpus: int, chosen: bool, expected: int
) -> None:
    assert torch_procs(procs, gpus, chosen=chosen) == expected


def test_torch_refuses_more_processes_than_gpus() -> None:
    with pytest.raises(PluginError, match="8 processes per node but the node has 4 GPU"):
        torch_procs(8, 4, chosen=True)


def test_jax_initialize_is_a_boolean_option() -> None:
    from skyinfra_runtime.errors import PluginOptionError
    from skyinfra_runtime.plugins import from_name, parse_plugin_flag, validate_plugin

    assert validate_plugin("jax", parse_plugin_flag("jax:initialize=false").options) == {
        "initialize": False
    }
    assert from_name("jax", {"initialize": False}).initialize is False  # type: ignore[attr-defined]
    with pytest.raises(PluginOptionError, match="option 'initialize' is 'no'; expected true or"):
        validate_plugin("jax", {"initialize": "no"})


def test_the_gpu_count_falls_back_to_what_the_machine_shows(tmp_path: Path) -> None:
    from skyinfra_runtime.devices import node_gpus

    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    assert node_gpus(8, "aws", dev=tmp_path, env={}) == 8  # the topology knows
    assert node_gpus(0, "aws", dev=tmp_path, env={}) == 3  # one /dev/nvidiaN per GPU
    assert node_gpus(0, "aws", dev=tmp_path, env={"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert node_gpus(0, "aws", dev=tmp_path / "absent", env={}) == 0  # no GPU here
    assert node_gpus(0, "local", dev=tmp_path, env={}) == 0  # local nodes share the machine
