"""The benchmark's user code: Keras on JAX, records wall-clock times of its first step."""

from __future__ import annotations

import time


def main() -> dict[str, float]:
    entered = time.time()  # plugins are set up before the entry is even imported
    import keras
    import numpy as np
    from skyinfra_runtime import shard

    times: dict[str, float] = {"entered": entered, "imported": time.time()}

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            times.setdefault("first_step", time.time())

    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 32)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    x, y = shard(x, y, shuffle=True, seed=1, drop_last=True)
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    times["fit_start"] = time.time()
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[FirstStep()])
    times["done"] = time.time()
    return times
