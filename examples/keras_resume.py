"""Keras on JAX that resumes where it stopped: ``keras.callbacks.BackupAndRestore`` on the
job's checkpoint directory, unchanged Keras code.

    skyinfra up --name demo --nodes 2 --plugin jax --plugin keras:backend=jax
    skyinfra run --checkpoints digits examples/keras_resume.py:main
    # kill it (a node, a worker, Ctrl-C) and run the same line again: it goes on from the
    # last epoch it finished, and ends with the weights an uninterrupted run ends with.

$SKYINFRA_CHECKPOINT_DIR is the same folder for every job run with ``--checkpoints digits``
and outlives the nodes. On several processes the keras plugin puts
``skyinfra_runtime.keras_backup.BackupAndRestore`` in place of Keras's: process 0 writes each
epoch's backup into a new folder marked complete last, and every process restores the same
one, optimizer state included (docs/guides/checkpoints.md).

A resumed run computes what an uninterrupted one does only if everything else is a function
of the epoch too: here the data order is (a permutation seeded by the epoch), the initial
weights are seeded, and the optimizer's state and iteration count come back with the weights.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from typing import Any

import numpy as np

SEED = 7


def make_data(samples: int = 256, features: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(samples, features)).astype("float32")
    y = (x @ rng.normal(size=(features, 1)) + 0.1).astype("float32")
    return x, y


def weights_sha256(model: Any) -> str:
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(np.asarray(weight, dtype=np.float32).tobytes())
    return digest.hexdigest()


def main() -> dict[str, Any]:
    """``skyinfra run ... keras_resume.py:main -- --epochs 5 --keep``: --keep leaves the last
    backups in place when training ends (Keras deletes them by default)."""
    import argparse

    import keras
    from skyinfra_runtime import instance_info, shard

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--keep", action="store_true")
    ns = parser.parse_args(sys.argv[1:])
    epochs, batch_size = ns.epochs, ns.batch_size
    info = instance_info()
    keras.utils.set_random_seed(SEED)  # the same initial weights on every node, every run
    x, y = shard(*make_data(), drop_last=True)  # this process's part, the same every run

    class EpochBatches(keras.utils.PyDataset):  # type: ignore[misc]
        """The local part in an order that is a function of the epoch alone."""

        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0

        def __len__(self) -> int:
            return len(x) // batch_size

        def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
            order = np.random.default_rng([SEED, self.epoch]).permutation(len(x))
            take = order[i * batch_size : (i + 1) * batch_size]
            return x[take], y[take]

    data = EpochBatches()

    class Progress(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            data.epoch = epoch
            print(f"epoch {epoch + 1} begins", flush=True)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            # float() waits for the step: the line means the step (and the one before it,
            # gradients averaged across nodes) really ran.
            loss = float((logs or {}).get("loss", 0.0))
            print(f"epoch {data.epoch + 1} batch {batch + 1} loss {loss:.6f}", flush=True)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            print(f"epoch {epoch + 1} ends", flush=True)

    model = keras.Sequential(
        [
            keras.Input((x.shape[1],)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    backup_dir = os.environ.get("SKYINFRA_CHECKPOINT_DIR") or tempfile.mkdtemp()
    backup = keras.callbacks.BackupAndRestore(backup_dir, delete_checkpoint=not ns.keep)
    # Progress first: it sets the epoch before the data are read. shuffle=False: fit's own
    # shuffle draws from Python's global random state, which no checkpoint restores (a
    # resumed run would see other batches); the data order here is the epoch's permutation.
    history = model.fit(
        data, epochs=epochs, shuffle=False, verbose=0, callbacks=[Progress(), backup]
    )
    sha = weights_sha256(model)
    print(f"weights sha256 {sha}", flush=True)
    return {
        "node": info.node,
        "epochs_run": len(history.history.get("loss", [])),
        "resumed_step": getattr(backup, "restored_step", None),
        "weights_sha256": sha,
    }
