"""shard(): property tests over every worker of a cluster, and type preservation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from skyinfra_runtime import shard, shard_indices

lengths = st.integers(min_value=0, max_value=300)
counts = st.integers(min_value=1, max_value=17)
seeds = st.integers(min_value=0, max_value=2**32)


def all_parts(length: int, count: int, **kwargs: object) -> list[list[int]]:
    return [shard_indices(length, i, count, **kwargs) for i in range(count)]  # type: ignore[arg-type]


@given(lengths, counts, st.booleans(), seeds)
def test_parts_are_disjoint_and_complete(length: int, count: int, shuffle: bool, seed: int) -> None:
    parts = all_parts(length, count, shuffle=shuffle, seed=seed)
    flat = [i for part in parts for i in part]
    assert sorted(flat) == list(range(length))  # complete and disjoint at once
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


@given(lengths, counts, st.booleans(), seeds)
def test_drop_last_gives_every_worker_the_same_count(
    length: int, count: int, shuffle: bool, seed: int
) -> None:
    parts = all_parts(length, count, shuffle=shuffle, seed=seed, drop_last=True)
    assert {len(p) for p in parts} == {length // count}
    flat = [i for part in parts for i in part]
    assert len(set(flat)) == len(flat)
    assert len(flat) == length - length % count


@given(lengths, counts, seeds)
def test_shuffle_is_a_function_of_the_seed_only(length: int, count: int, seed: int) -> None:
    assert all_parts(length, count, shuffle=True, seed=seed) == all_parts(
        length, count, shuffle=True, seed=seed
    )


def test_same_permutation_in_separate_processes() -> None:
    """Every node computes its part independently: hash randomisation must not matter."""
    code = (
        "import json; from skyinfra_runtime import shard_indices;"
        "print(json.dumps([shard_indices(1000, i, 3, shuffle=True, seed=42) for i in range(3)]))"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        outputs.add(subprocess.check_output([sys.executable, "-c", code], env=env, text=True))
    assert len(outputs) == 1
    parts = json.loads(outputs.pop())
    assert parts != all_parts(1000, 3)  # really shuffled


@settings(deadline=None, max_examples=30)
@given(st.integers(min_value=1, max_value=60), counts, seeds)
def test_equal_length_arrays_stay_aligned_across_types(length: int, count: int, seed: int) -> None:
    import torch

    keys = list(range(length))
    x = np.arange(length) * 10
    t = torch.arange(length) * 100
    for i in range(count):
        k, xs, ts = shard(keys, x, t, shuffle=True, seed=seed, index=i, count=count)
        assert [v * 10 for v in k] == xs.tolist()
        assert [v * 100 for v in k] == ts.tolist()


# torch, jax and pandas are imported by the tests that use them, not when the suite is
# collected: every pytest worker collects every file, and torch alone is about 1.5 s of CPU.
def _torch_tensor() -> tuple[object, type]:
    import torch

    return torch.arange(10), torch.Tensor


def _data_frame() -> tuple[object, type]:
    import pandas as pd

    return pd.DataFrame({"a": range(10)}), pd.DataFrame


def _series() -> tuple[object, type]:
    import pandas as pd

    return pd.Series(range(10)), pd.Series


SAMPLES: dict[str, Callable[[], tuple[object, type]]] = {
    "list": lambda: (list(range(10)), list),
    "tuple": lambda: (tuple(range(10)), tuple),
    "ndarray": lambda: (np.arange(10), np.ndarray),
    "MaskedArray": lambda: (np.ma.masked_array(np.arange(10)), np.ma.MaskedArray),
    "Tensor": _torch_tensor,
    "DataFrame": _data_frame,
    "Series": _series,
}


@pytest.mark.parametrize("kind_name", SAMPLES)
@pytest.mark.parametrize("drop_last", [False, True])
def test_types_are_preserved(kind_name: str, drop_last: bool) -> None:
    data, kind = SAMPLES[kind_name]()
    part = shard(data, index=1, count=3, shuffle=True, seed=1, drop_last=drop_last)
    assert type(part) is kind
    assert len(part) == 3


def test_jax_arrays_stay_jax_arrays() -> None:
    # In a process of its own: JAX's threads in a pytest worker make every later fork there
    # (subprocess, in the tests that follow) warn of a deadlock, and risk one.
    code = (
        "import jax, jax.numpy as jnp; from skyinfra_runtime import shard;"
        "part = shard(jnp.arange(10), index=0, count=3);"
        "print(isinstance(part, jax.Array), part.tolist())"
    )
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert said.stdout.strip() == "True [0, 1, 2, 3]", said.stdout + said.stderr


def test_empty_torch_shard_is_still_a_tensor() -> None:
    import torch

    part = shard(torch.arange(2), index=2, count=3)
    assert isinstance(part, torch.Tensor)
    assert part.numel() == 0


def test_pandas_shards_by_position_not_label() -> None:
    import pandas as pd

    frame = pd.DataFrame({"a": range(6)}, index=[50, 40, 30, 20, 10, 0])
    part = shard(frame, index=0, count=2)
    assert part["a"].tolist() == [0, 1, 2]


def test_one_in_one_out_several_in_a_tuple_out() -> None:
    assert shard([1, 2, 3, 4], index=0, count=2) == [1, 2]
    assert shard([1, 2], [3, 4], index=1, count=2) == ([2], [4])


def test_outside_a_cluster_the_single_worker_gets_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SKYINFRA_TOPOLOGY", "SKYINFRA_NODE", "SKYINFRA_WORKER"):
        monkeypatch.delenv(name, raising=False)
    assert shard(list(range(5))) == [0, 1, 2, 3, 4]


def test_uses_the_global_worker_index_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = [{"index": i, "private_ip": "127.0.0.1", "instance_id": f"i-{i}"} for i in range(2)]
    topology = {
        "schema": 1,
        "cluster": "c",
        "provider": "local",
        "head_addr": "127.0.0.1",
        "head_port": 29500,
        "nodes": nodes,
    }
    monkeypatch.setenv("SKYINFRA_TOPOLOGY", json.dumps(topology))
    monkeypatch.setenv("SKYINFRA_NODE", "1")
    monkeypatch.setenv("SKYINFRA_WORKER", "1")
    monkeypatch.setenv("SKYINFRA_WORKERS_PER_NODE", "2")
    # global index 3 of 4 workers
    assert shard(list(range(8))) == [6, 7]


@pytest.mark.parametrize(
    ("args", "message"),
    [((), "at least one array"), (("text",), "pass a list of items"), ((5,), "has no length")],
)
def test_bad_arguments(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        shard(*args, index=0, count=1)
