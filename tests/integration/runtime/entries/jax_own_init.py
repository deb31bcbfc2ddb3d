"""A multi-process JAX script that initialises JAX itself from the documented variables."""

import os

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

jax.distributed.initialize(
    num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
    process_id=int(os.environ["JAX_PROCESS_ID"]),
    initialization_timeout=30,
)
mine = jnp.array([jax.process_index() + 1], dtype=jnp.int32)
total = int(multihost_utils.process_allgather(mine).sum())
print(f"jax process {jax.process_index()} of {jax.process_count()} sum={total}", flush=True)
jax.distributed.shutdown()
