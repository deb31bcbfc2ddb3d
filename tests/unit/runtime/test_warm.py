"""Warm workers' decisions (skyinfra_runtime.warm, pure): what a standby imports, which
environment it starts with, and when a job must start cold instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from skyinfra_runtime import Topology, TopologyError, nodewarm
from skyinfra_runtime.rundirs import NODE_DIR_ENV
from skyinfra_runtime.topology import PluginRef
from skyinfra_runtime.torchrun import torchrun_env
from skyinfra_runtime.warm import (
    JOB_ENV_NAMES_ENV,
    TORCH_IMPORTS,
    Warmup,
    cold_reason,
    cores_to_spare,
    job_names_env,
    nodes_on_host,
    past_start,
    slots_to_fill,
    standby_env,
    standby_warmup,
)

from tests.integration.runtime.launch_harness import topology


def ref(name: str, **options: object) -> PluginRef:
    return PluginRef(name, options)


@pytest.mark.parametrize(
    ("plugins", "want"),
    [
        ([], None),  # no framework plugin: no standby at all
        ([ref("jax")], Warmup(("jax",))),
        ([ref("keras", backend="jax")], Warmup(("jax", "keras"), (("KERAS_BACKEND", "jax"),))),
        ([ref("keras")], Warmup(("jax", "keras"), (("KERAS_BACKEND", "jax"),))),
        (
            [ref("jax"), ref("keras", backend="jax")],
            Warmup(("jax", "keras"), (("KERAS_BACKEND", "jax"),)),
        ),
        ([ref("keras", backend="tensorflow")], None),  # tensorflow's start is not warmed
        # One worker: the torch plugin leaves OMP_NUM_THREADS unset, and so does the standby.
        ([ref("torch")], Warmup(TORCH_IMPORTS)),
        (
            [ref("torch"), ref("keras", backend="torch")],
            Warmup((*TORCH_IMPORTS, "keras"), (("KERAS_BACKEND", "torch"),)),
        ),
        (
            [ref("keras", backend="torch")],  # keras on torch without the torch plugin
            Warmup(("torch", "keras"), (("KERAS_BACKEND", "torch"),)),
        ),
        ([ref("jax"), ref("torch")], Warmup(("jax", *TORCH_IMPORTS))),
    ],
)
def test_a_standby_imports_what_the_plugins_name(
    plugins: list[PluginRef], want: Warmup | None
) -> None:
    assert standby_warmup(plugins) == want
    if want is not None:
        assert Warmup.from_dict(want.to_dict()) == want


@pytest.mark.parametrize(
    ("procs", "node_env", "want"),
    [
        (1, {}, ()),  # torch's own default: its OpenMP runtime's, as a cold worker's
        (2, {}, (("OMP_NUM_THREADS", "1"),)),  # torchrun's 1 with several workers
        (2, {"OMP_NUM_THREADS": "3"}, (("OMP_NUM_THREADS", "3"),)),  # the node's value wins
        (1, {"OMP_NUM_THREADS": "3"}, (("OMP_NUM_THREADS", "3"),)),
    ],
)
def test_a_torch_standby_imports_torch_with_the_thread_count_the_plugin_sets(
    procs: int, node_env: dict[str, str], want: tuple[tuple[str, str], ...]
) -> None:
    """torch reads OMP_NUM_THREADS as it is imported: the standby's is the torch plugin's."""
    warmup = standby_warmup([ref("torch")], procs, node_env)
    assert warmup == Warmup(TORCH_IMPORTS, want)
    plugin_sets = torchrun_env(
        node=0,
        nodes=2,
        local_rank=0,
        procs_per_node=procs,
        master_addr="127.0.0.2",
        master_port=29500,
        run_id=None,
        inherited=node_env,
    )
    assert dict(warmup.env).get("OMP_NUM_THREADS") == plugin_sets.get("OMP_NUM_THREADS")
    # A job with another worker count finds a standby of another key, and starts cold.
    other = standby_warmup([ref("torch")], 1 if procs > 1 else 2, {})
    assert other is not None and (other.key != warmup.key or "OMP_NUM_THREADS" in node_env)


def test_the_key_tells_standbys_of_other_frameworks_apart() -> None:
    jax = standby_warmup([ref("jax")])
    keras = standby_warmup([ref("keras", backend="jax")])
    assert jax is not None and keras is not None and jax.key != keras.key


@pytest.mark.parametrize(
    "name",
    [
        "KERAS_BACKEND",
        "XLA_FLAGS",
        "JAX_PLATFORMS",
        "JAX_ENABLE_X64",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "KERAS_HOME",
        "TORCH_HOME",
        "CUDA_VISIBLE_DEVICES",
        "NCCL_DEBUG",
        "OMP_NUM_THREADS",  # torch sizes its thread pool as it is imported
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "PYTORCH_CUDA_ALLOC_CONF",
        "TORCHDYNAMO_VERBOSE",  # read as a torch standby imports torch._dynamo
        "TORCHINDUCTOR_CACHE_DIR",
        "PYTHONHASHSEED",
        "PYTHONUNBUFFERED",
    ],
)
def test_a_job_setting_a_framework_or_interpreter_variable_starts_cold(name: str) -> None:
    env = {name: "1"}
    reason = cold_reason([name], env, {})
    assert reason is not None and name in reason


def test_a_job_with_only_its_own_variables_starts_warm() -> None:
    env = {"LEARNING_RATE": "0.1", "API_TOKEN": "s3cret", "PATH": "/usr/bin"}
    assert cold_reason(["LEARNING_RATE", "API_TOKEN"], env, {"PATH": "/usr/bin"}) is None
    # The project's PYTHONPATH is the launcher's, per job: the standby takes it on sys.path.
    assert cold_reason([], {"PYTHONPATH": "/run/work"}, {}) is None


def test_a_node_variable_changed_since_the_standby_started_makes_it_cold() -> None:
    reason = cold_reason([], {"XLA_FLAGS": "--xla_cpu_x"}, {"XLA_FLAGS": "--xla_cpu_y"})
    assert reason is not None and "XLA_FLAGS" in reason
    assert cold_reason([], {"XLA_FLAGS": "a"}, {"XLA_FLAGS": "a"}) is None


def test_a_standby_starts_with_the_nodes_environment_and_no_job_variable() -> None:
    launcher = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "API_TOKEN": "s3cret",
        "LEARNING_RATE": "0.1",
        "PYTHONPATH": "/run/work",
        "SKYINFRA_NODE_DIR": "/nodes/n0",
        "SKYINFRA_LOCAL_NODE_DIR": "/nodes/n0",
        "SKYINFRA_RUN_DIR": "/nodes/n0/runs/j1",
        "SKYINFRA_SECRET_NAMES": "API_TOKEN",
        "SKYINFRA_ATTEMPT": "1",
        **job_names_env(["API_TOKEN", "LEARNING_RATE"]),
    }
    assert JOB_ENV_NAMES_ENV in launcher
    assert standby_env(launcher) == {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "SKYINFRA_NODE_DIR": "/nodes/n0",
        "SKYINFRA_LOCAL_NODE_DIR": "/nodes/n0",
    }


def test_warm_workers_travels_in_the_topology_only_when_off() -> None:
    data = topology(nodes=2)
    on = Topology.from_dict(data)
    assert on.warm_workers and "warm_workers" not in on.to_dict()
    off = Topology.from_dict({**data, "warm_workers": False})
    assert not off.warm_workers and Topology.from_dict(off.to_dict()) == off
    with pytest.raises(TopologyError, match="'warm_workers' is 'no'; expected a boolean"):
        Topology.from_dict({**data, "warm_workers": "no"})


@pytest.mark.parametrize(
    ("cores", "nodes_on_host", "procs", "spare"),
    [
        (2, 2, 1, False),  # a 2-node local cluster on 2 cores: one core per node, one worker
        (2, 1, 1, True),
        (16, 2, 1, True),  # 2 local nodes on 16 cores
        (96, 1, 8, True),  # a GPU instance: 8 workers, 96 cores
        (8, 1, 8, False),  # as many workers as cores
        (4, 0, 1, True),  # no node at its address (never in a topology): the host alone
    ],
)
def test_a_node_asks_for_standbys_at_once_only_with_cores_to_spare(
    cores: int, nodes_on_host: int, procs: int, spare: bool
) -> None:
    assert cores_to_spare(cores, nodes_on_host, procs) is spare


@pytest.mark.parametrize(
    ("phases", "past"),
    [
        ([("running", 90.0)], True),  # quiet for 10 s
        ([("running", 98.0)], False),  # compiled 2 s ago
        ([("running", 97.0)], True),  # exactly the quiet time
        ([("running", 90.0), ("running", 99.5)], False),  # every worker, not the first
        ([("done", 99.9), ("running", 90.0)], True),  # an ended worker is past its start
        ([("setup:jax", 10.0)], False),  # still in a plugin's set-up, however long
        ([("setup", 10.0)], False),
        ([None], False),  # no status written yet
        ([("", 10.0)], False),  # read while being written
    ],
)
def test_a_node_without_cores_to_spare_refills_once_every_worker_is_past_its_start(
    phases: list[tuple[str, float] | None], past: bool
) -> None:
    assert past_start(phases, now=100.0, quiet_s=3.0) is past


def test_a_slot_a_job_took_waits_for_the_next_ask_and_a_dead_one_does_not() -> None:
    assert slots_to_fill(2, waiting=[], taken=[]) == [0, 1]
    assert slots_to_fill(2, waiting=[1], taken=[0]) == []  # slot 0's job runs: not yet
    assert slots_to_fill(2, waiting=[1], taken=[]) == [0]  # died waiting, or asked again
    assert slots_to_fill(1, waiting=[0], taken=[0]) == []


def test_nodes_at_one_address_or_all_on_loopback_share_a_host() -> None:
    local = ["127.0.0.2", "127.0.0.3"]  # a 2-node local cluster: one host
    assert nodes_on_host(local, "127.0.0.3") == 2
    assert nodes_on_host(["10.0.0.5", "10.0.0.6"], "10.0.0.6") == 1  # two instances
    assert nodes_on_host(["10.0.0.5", "10.0.0.5", "10.0.0.6"], "10.0.0.5") == 2  # ssh: one box
    assert nodes_on_host(["gpu-a", "gpu-b", "127.0.0.2"], "gpu-a") == 1


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        ({"plugins": [{"name": "jax"}], "procs_per_node": 2}, (2, Warmup(("jax",)))),
        ({"plugins": [{"name": "jax"}], "warm_workers": False}, (0, None)),
        ({"plugins": [{"name": "torch"}]}, (1, Warmup(TORCH_IMPORTS))),
        # As the launcher keys it: torchrun's OMP_NUM_THREADS=1 with 2 workers, imported with.
        (
            {"plugins": [{"name": "torch"}], "procs_per_node": 2},
            (2, Warmup(TORCH_IMPORTS, (("OMP_NUM_THREADS", "1"),))),
        ),
        ({}, (0, None)),  # no framework plugin
    ],
)
def test_a_ready_node_wants_one_standby_per_worker_slot_unless_turned_off(
    changes: dict[str, object], want: tuple[int, Warmup | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert nodewarm.wanted(Topology.from_dict({**topology(nodes=2), **changes}), 1) == want


def test_warm_up_on_a_cluster_that_wants_none_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    off = json.dumps({**topology(nodes=1), "plugins": [{"name": "jax"}], "warm_workers": False})
    monkeypatch.setenv(NODE_DIR_ENV, str(tmp_path))
    assert nodewarm.main(["--topology", off, "--node", "0"]) == 0
    assert json.loads(capsys.readouterr().out) == {"slots": 0, "ready": 0}
    assert list(tmp_path.iterdir()) == []  # no keeper, no standby folder
    monkeypatch.delenv(NODE_DIR_ENV)
    assert nodewarm.main(["--topology", off, "--node", "0"]) == 2
    assert f"${NODE_DIR_ENV} is not set" in capsys.readouterr().out
