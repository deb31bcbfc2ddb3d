"""Keras on JAX across nodes: the handwritten digits beside this file, sharded with shard().

Run with the jax and keras plugins:
    skyinfra up --name demo --nodes 2 --plugin jax --plugin keras:backend=jax
    skyinfra run examples/keras_digits.py:main

The keras plugin sets up DataParallel over every device of every node, so each node trains on
its own shard while gradients are averaged: all nodes end with the same weights, which the
returned checksum shows.

digits.csv.gz is the test set of the UCI "Optical Recognition of Handwritten Digits" data set
(E. Alpaydin and C. Kaynak, 1998; CC BY 4.0), the file scikit-learn ships for its
load_digits(): 1797 rows of 64 pixel counts (0-16) and the digit. Kept here, the example needs
jax and keras only (Keras imports scikit-learn whenever it is installed: about 0.9 CPU-s more
in every worker).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

DIGITS_FILE = Path(__file__).with_name("digits.csv.gz")


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """(pixels scaled to 0-1 as float32, digit as int32): scikit-learn's load_digits() data."""
    data = np.loadtxt(DIGITS_FILE, delimiter=",")
    return (data[:, :-1] / 16.0).astype("float32"), data[:, -1].astype("int32")


def batch_plan(samples: int, devices: int, *, target: int) -> tuple[int, int]:
    """(batch size, samples to use) for one process with ``devices`` devices: the batch is
    ``target`` rounded up to a multiple of ``devices``, and the samples are cut to a multiple
    of ``devices`` too, so that every batch, the last partial one included, splits evenly (JAX
    refuses an uneven split with IndivisibleError)."""
    if devices < 1 or target < 1:
        raise ValueError(f"devices ({devices}) and target ({target}) must be >= 1")
    batch = -(-target // devices) * devices
    return batch, samples - samples % devices


def main(epochs: int = 8) -> dict[str, object]:
    import keras
    from skyinfra_runtime import instance_info, shard

    keras.utils.set_random_seed(0)  # same initial weights on every node
    x, y = load_digits()
    # A fixed split so every node evaluates on the same held-out digits.
    order = np.random.default_rng(0).permutation(len(x))
    test, train = order[:297], order[297:]
    # drop_last: every node gets the same number of samples, hence the same number of steps
    # (a node with one more batch would wait forever in the gradient all-reduce).
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
    # The keras plugin spreads every batch over this process's devices (DataParallel): each
    # batch, the last one included, must divide by their number (1, or 4 and 8 on GPU nodes).
    devices = len(keras.distribution.list_devices()) // max(1, instance_info().total_workers)
    batch, used = batch_plan(len(x_train), devices, target=50)
    x_train, y_train = x_train[:used], y_train[:used]
    eval_batch, eval_used = batch_plan(len(test), devices, target=99)
    x_test, y_test = x[test][:eval_used], y[test][:eval_used]
    model.fit(x_train, y_train, epochs=epochs, batch_size=batch, shuffle=False, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, batch_size=eval_batch, verbose=0)

    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(np.asarray(weight, dtype=np.float32).tobytes())
    info = instance_info()
    return {
        "node": info.node,
        "train_samples": len(x_train),
        "devices": devices,
        "batch_size": batch,
        "accuracy": round(float(accuracy), 4),
        "weights_sha256": digest.hexdigest(),
    }


if __name__ == "__main__":
    print(main())
