"""JAX across nodes that resumes where it stopped, with orbax-checkpoint's CheckpointManager
on the job's checkpoint directory (orbax renames a step into place once it is complete, so a
half-written step is never listed).

The state is replicated, so process 0 holds all of it and saves it alone, with a manager over
process 0 only; every process restores from its own directory. Why not orbax's multi-host
save, where every process writes its part: it assumes one filesystem every host sees, and on
AWS each node's $SKYINFRA_CHECKPOINT_DIR is its own disk, synced through S3 (the local target's
folder is shared, which hid this). There, process 0 waits at the first save for the other
processes' files, which it never sees: the job hangs. A state sharded across processes (each
holding a part no other has) needs that shared filesystem.

    skyinfra up --name jx --nodes 2 --plugin jax          # python_packages = ["orbax-checkpoint"]
    skyinfra run --checkpoints jx examples/jax_orbax_resume.py:main
    # kill it and run the same line again: it goes on from the last epoch it finished.

The parameters and the optimizer's momentum are replicated over every device of every process;
each process feeds its own shard of the batch (``shard()``), and the jitted step's mean over
the global batch is the all-reduce. The data order is a permutation seeded by the epoch, so a
resumed run computes what an uninterrupted one does.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from typing import Any

import numpy as np

SEED = 5


def main() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    from skyinfra_runtime import shard

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    ns = parser.parse_args(sys.argv[1:])
    root = os.environ.get("SKYINFRA_CHECKPOINT_DIR") or tempfile.mkdtemp()

    rng = np.random.default_rng(SEED)
    x_all = rng.normal(size=(256, 8)).astype(np.float32)
    y_all = (x_all @ rng.normal(size=(8, 1)) + 0.1).astype(np.float32)
    x, y = shard(x_all, y_all, drop_last=True)  # this process's part, the same every run

    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, P())
    batched = NamedSharding(mesh, P("data"))

    def init() -> dict[str, Any]:
        w = np.random.default_rng(SEED + 1).normal(size=(8, 1)).astype(np.float32) * 0.1
        params = {"w": w, "b": np.zeros((1,), np.float32)}
        state = {"params": params, "momentum": jax.tree.map(np.zeros_like, params)}
        return jax.tree.map(lambda a: jax.device_put(a, replicated), state)

    @jax.jit
    def step(state: dict[str, Any], xb: jax.Array, yb: jax.Array) -> tuple[dict[str, Any], Any]:
        def loss_fn(params: dict[str, Any]) -> Any:
            return jnp.mean((xb @ params["w"] + params["b"] - yb) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state["params"])
        momentum = jax.tree.map(lambda m, g: 0.9 * m + g, state["momentum"], grads)
        params = jax.tree.map(lambda p, m: p - 0.01 * m, state["params"], momentum)
        return {"params": params, "momentum": momentum}, loss

    state = init()
    me = jax.process_index()
    # A manager over this process alone (orbax's MultiprocessingOptions.active_processes): no
    # barrier with the other processes, whose directories may be other disks. Only process 0
    # saves; `create` is not allowed with active_processes (the runtime made the directory).
    manager = ocp.CheckpointManager(
        root,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=2,
            create=False,
            multiprocessing_options=ocp.options.MultiprocessingOptions(
                primary_host=me, active_processes={me}, barrier_sync_key_prefix=f"process-{me}"
            ),
        ),
    )

    def host_copy(tree: Any) -> Any:
        """This process's copy of a replicated state, as NumPy arrays."""
        return jax.tree.map(lambda a: np.asarray(a.addressable_data(0)), tree)

    # Every process reads its own directory: the restored checkpoint set (the same on every
    # node), so each picks the same step.
    start = manager.latest_step() or 0
    if start:
        restored = manager.restore(start, args=ocp.args.StandardRestore(host_copy(state)))
        state = jax.tree.map(lambda a: jax.device_put(a, replicated), restored)
        print(f"resumed from {root}/{start} (epoch {start})", flush=True)

    per_process = ns.batch_size
    for epoch in range(start + 1, ns.epochs + 1):
        print(f"epoch {epoch} begins", flush=True)
        order = np.random.default_rng([SEED, epoch]).permutation(len(x))
        for batch in range(len(x) // per_process):
            take = order[batch * per_process : (batch + 1) * per_process]
            xb = jax.make_array_from_process_local_data(batched, x[take])
            yb = jax.make_array_from_process_local_data(batched, y[take])
            state, loss = step(state, xb, yb)
            print(f"epoch {epoch} batch {batch + 1} loss {float(loss):.6f}", flush=True)
        if me == 0:
            manager.save(epoch, args=ocp.args.StandardSave(host_copy(state)))
        print(f"epoch {epoch} ends", flush=True)
    manager.wait_until_finished()
    manager.close()

    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(state):
        digest.update(np.asarray(leaf).tobytes())
    sha = digest.hexdigest()
    print(f"weights sha256 {sha}", flush=True)
    return {"process": jax.process_index(), "resumed_epoch": start or None, "weights_sha256": sha}
