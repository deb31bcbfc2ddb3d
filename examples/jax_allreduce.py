"""A cross-node all-reduce with JAX: every process contributes process_index + 1.

    skyinfra up --name ar --nodes 2 --plugin jax
    skyinfra run examples/jax_allreduce.py:main

With N processes every one of them must see the sum N * (N + 1) / 2.
"""

from __future__ import annotations


def main() -> dict[str, object]:
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    mine = jnp.array([jax.process_index() + 1], dtype=jnp.int32)
    gathered = multihost_utils.process_allgather(mine)
    total = int(gathered.sum())
    n = jax.process_count()
    return {
        "process": jax.process_index(),
        "processes": n,
        "sum": total,
        "expected": n * (n + 1) // 2,
        "devices": jax.device_count(),
    }


if __name__ == "__main__":
    print(main())
