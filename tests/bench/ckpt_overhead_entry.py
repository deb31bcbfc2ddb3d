"""The checkpoint-overhead benchmark's user code: the demo's model and data
(examples/keras_digits.py: its digits, Dense 64 + Dense 10, Adam, batch 50 per
node), trained for --epochs epochs, with `keras.callbacks.BackupAndRestore` on the job's
checkpoint directory when --checkpoint is given (the keras plugin puts skyinfra's multi-process
one in its place). Returns each epoch's wall time: from its start to the next one's (or to the
end of training), so a checkpoint written at an epoch's end counts in that epoch."""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from typing import Any


def main() -> dict[str, Any]:
    import keras
    import numpy as np
    from keras_digits import batch_plan, load_digits
    from skyinfra_runtime import instance_info, shard

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--checkpoint", action="store_true")
    ns = parser.parse_args(sys.argv[1:])

    keras.utils.set_random_seed(0)
    x, y = load_digits()
    train = np.random.default_rng(0).permutation(len(x))[297:]
    x_train, y_train = shard(x[train], y[train], shuffle=True, seed=42, drop_last=True)
    model = keras.Sequential(
        [
            keras.Input(shape=(64,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    devices = len(keras.distribution.list_devices()) // max(1, instance_info().total_workers)
    batch, used = batch_plan(len(x_train), devices, target=50)
    starts: list[float] = []

    class EpochClock(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            starts.append(time.perf_counter())

        def on_train_end(self, logs: Any = None) -> None:
            starts.append(time.perf_counter())

    callbacks: list[Any] = [EpochClock()]
    if ns.checkpoint:
        # Keras's own deletes its backups when training ends: keep them (as a job that is
        # resumed later would), so the end of training costs no deletion either.
        directory = os.environ["SKYINFRA_CHECKPOINT_DIR"]
        callbacks.append(keras.callbacks.BackupAndRestore(directory, delete_checkpoint=False))
    model.fit(
        x_train[:used],
        y_train[:used],
        epochs=ns.epochs,
        batch_size=batch,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )
    epochs = [b - a for a, b in itertools.pairwise(starts)]
    return {"steps_per_epoch": used // batch, "epoch_s": epochs}
