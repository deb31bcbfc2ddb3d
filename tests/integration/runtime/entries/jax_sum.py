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


def cache_use() -> dict[str, int]:
    """Compile one program and count what the persistent compilation cache did for it."""
    import jax
    import jax.numpy as jnp

    counts = {"requests": 0, "hits": 0}
    names = {
        "/jax/compilation_cache/compile_requests_use_cache": "requests",
        "/jax/compilation_cache/cache_hits": "hits",
    }

    def count(event: str, **kwargs: object) -> None:
        if event in names:
            counts[names[event]] += 1

    jax.monitoring.register_event_listener(count)
    # A program of this process's own (a shape no other test compiles), run once.
    jax.jit(lambda x: jnp.tanh(x) * 3 + 1)(jnp.ones((7, 3))).block_until_ready()
    return counts
