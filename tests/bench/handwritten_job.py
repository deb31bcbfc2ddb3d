"""Figure 2's baseline: one of two processes doing the distributed set-up by hand (what the
skyinfra runtime's jax and keras plugins do), then the same fit as first_step_entry.py.

Usage: handwritten_job.py PROCESS_ID PORT TIMES_JSON
"""

from __future__ import annotations

import json
import os
import sys
import time

entered = time.time()
os.environ["KERAS_BACKEND"] = "jax"
process_id, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

import jax  # noqa: E402

# On CPU, cross-process collectives need gloo (https://docs.jax.dev/en/latest/multi_process.html).
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras.src.backend.jax.distribution_lib import initialize_rng  # noqa: E402

# The data is split by hand below: Keras must not shard the NumPy input again.
distribution = keras.distribution.DataParallel(devices=jax.devices(), auto_shard_dataset=False)
keras.distribution.set_distribution(distribution)
initialize_rng()
times: dict[str, float] = {"entered": entered, "imported": time.time()}


class FirstStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        times.setdefault("first_step", time.time())


rng = np.random.default_rng(0)
x = rng.normal(size=(512, 32)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
x, y = x[process_id::2], y[process_id::2]
model = keras.Sequential(
    [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer="adam", loss="mse")
times["fit_start"] = time.time()
model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[FirstStep()])
times["done"] = time.time()
jax.distributed.shutdown()
with open(out, "w") as f:
    json.dump(times, f)
