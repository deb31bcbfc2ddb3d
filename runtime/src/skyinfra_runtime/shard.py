"""``shard()``: this worker's part of one or more arrays.

Semantics (the same on every node, so no coordination is needed):

- Workers are numbered by global index (``node * workers_per_node + worker``), so several
  processes on one node get different parts.
- The order is ``range(n)``, or with ``shuffle=True`` a permutation drawn from
  ``random.Random(seed)``: identical on every node for the same seed and length.
- That order is cut into contiguous blocks, one per worker, in worker order. Without
  ``drop_last`` the blocks differ by at most one element (the first ``n % workers`` workers get
  one more) and together cover every element exactly once. With ``drop_last`` every worker
  gets exactly ``n // workers`` elements and the last ``n % workers`` of the order are left
  out: data-parallel training needs the same number of steps on every worker.
- Arrays of equal length get the same permutation, so ``x[i]`` still matches ``y[i]``. Arrays
  of different lengths (say train and test sets) are each cut by their own length.
- Types are kept: list -> list, tuple -> tuple, numpy arrays (subclasses too) -> the same
  class, torch tensors -> tensors (also an empty shard), jax arrays -> jax arrays, pandas
  DataFrame/Series -> the same, by position (``.iloc``). Any other sequence -> list.
- One array in, one out; several in, a tuple out.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from typing import Any

from skyinfra_runtime.info import instance_info


def shard_indices(
    length: int,
    index: int,
    count: int,
    *,
    shuffle: bool = False,
    seed: int = 0,
    drop_last: bool = False,
) -> list[int]:
    """Positions of ``length`` elements that worker ``index`` of ``count`` owns (pure)."""
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    if not 0 <= index < count:
        raise ValueError(f"shard index must be in 0..{count - 1}, got {index}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    order = list(range(length))
    if shuffle:
        random.Random(seed).shuffle(order)
    base, extra = divmod(length, count)
    if drop_last:
        start, size = index * base, base
    else:
        start = index * base + min(index, extra)
        size = base + (1 if index < extra else 0)
    return order[start : start + size]


def shard(
    *arrays: Any,
    shuffle: bool = False,
    seed: int = 0,
    drop_last: bool = False,
    index: int | None = None,
    count: int | None = None,
) -> Any:
    """This worker's part of each array (see the module docstring for the semantics).

    ``index``/``count`` override the worker's global index and the total number of workers
    (both from :func:`instance_info` by default).
    """
    if not arrays:
        raise TypeError("shard() needs at least one array")
    if index is None or count is None:
        info = instance_info()
        index = info.global_index if index is None else index
        count = info.total_workers if count is None else count
    parts = []
    for position, data in enumerate(arrays):
        length = _length(data, position)
        picked = shard_indices(
            length, index, count, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
        parts.append(_take(data, picked))
    return parts[0] if len(parts) == 1 else tuple(parts)


def _length(data: Any, position: int) -> int:
    if isinstance(data, (str, bytes)):
        raise TypeError(
            f"shard() argument {position} is a {type(data).__name__}; pass a list of items instead"
        )
    try:
        return len(data)
    except TypeError:
        raise TypeError(
            f"shard() argument {position} ({type(data).__name__}) has no length; expected a"
            " list, tuple, numpy/torch/jax array or pandas object"
        ) from None


def _take(data: Any, picked: list[int]) -> Any:
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(data, numpy.ndarray):
        return data[numpy.asarray(picked, dtype=numpy.intp)]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(data, torch.Tensor):
        return data[torch.as_tensor(picked, dtype=torch.long, device=data.device)]
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(data, jax.Array):
        import jax.numpy as jnp

        return data[jnp.asarray(picked, dtype=jnp.int32)]
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(data, (pandas.DataFrame, pandas.Series)):
        return data.iloc[picked]
    if isinstance(data, tuple):
        return tuple(data[i] for i in picked)
    if isinstance(data, Sequence) or hasattr(data, "__getitem__"):
        return [data[i] for i in picked]
    raise TypeError(f"shard() cannot index a {type(data).__name__}")
