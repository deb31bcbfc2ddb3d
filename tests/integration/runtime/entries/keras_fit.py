"""A few steps of Keras fit() on JAX across processes; returns a checksum of the weights.

``main`` relies on the keras plugin. ``without_rng_sync`` is the control: the same
DataParallel distribution set up by hand, but without ``initialize_rng()``.
"""

from __future__ import annotations

import hashlib


def _data():  # type: ignore[no-untyped-def]
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    return x, y


def _train() -> dict[str, object]:
    import keras
    import numpy as np
    from skyinfra_runtime import instance_info, shard

    x, y = _data()
    x, y = shard(x, y, shuffle=True, seed=7, drop_last=True)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse")
    initial = np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False)
    final = np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])
    return {
        "process": instance_info().global_index,
        "rows": len(x),
        "initial": hashlib.sha256(initial.tobytes()).hexdigest(),
        "final": hashlib.sha256(final.tobytes()).hexdigest(),
    }


def main() -> dict[str, object]:
    return _train()


def without_rng_sync() -> dict[str, object]:
    import keras

    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
    )
    return _train()
