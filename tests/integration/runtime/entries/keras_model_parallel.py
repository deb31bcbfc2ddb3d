"""Keras ModelParallel across processes: a kernel split over the 'model' axis."""

from __future__ import annotations


def main() -> dict[str, object]:
    import keras
    import numpy as np
    from jax.experimental import multihost_utils

    distribution = keras.distribution.distribution()
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(4, name="wide"), keras.layers.Dense(1, name="out")]
    )
    model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    kernel = model.get_layer("wide").kernel.value
    # Each process holds only its columns of the kernel; gather them to compare the whole.
    whole = multihost_utils.process_allgather(kernel, tiled=True)
    return {
        "distribution": type(distribution).__name__,
        "kernel_spec": [axis for axis in kernel.sharding.spec],
        "local_shard_shape": list(kernel.addressable_shards[0].data.shape),
        "global_shape": list(kernel.shape),
        "kernel_sum": round(float(np.asarray(whole).sum()), 5),
    }


def with_backup() -> dict[str, object]:
    """BackupAndRestore on a split kernel: process 0 alone saves, and does not hold the whole
    kernel. Refused before the first step, not at the first backup."""
    import tempfile

    import keras
    import numpy as np

    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(4, name="wide"), keras.layers.Dense(1, name="out")]
    )
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((32, 8), dtype="float32")
    steps = []

    class Steps(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            steps.append(batch)

    backup = keras.callbacks.BackupAndRestore(tempfile.mkdtemp())
    try:
        model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=[backup, Steps()])
    except ValueError as err:
        return {"refused": str(err), "steps": len(steps)}
    return {"refused": None, "steps": len(steps)}
