"""A cross-process sum with jax: every process contributes global_index + 1."""

from __future__ import annotations


def main() -> dict[str, object]:
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    from skyinfra_runtime import instance_info

    mine = jnp.array([instance_info().global_index + 1.0])
    gathered = multihost_utils.process_allgather(mine)
    return {
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "sum": float(gathered.sum()),
        "collectives": jax.config.jax_cpu_collectives_implementation,
    }
