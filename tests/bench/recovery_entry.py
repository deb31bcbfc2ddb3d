"""The recovery benchmark's user code: Keras on JAX; records when its first step ends and, in
the job's first attempt, with KILL_NODE_1 set, node 1's worker SIGKILLs itself after its second
step (noting when)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def main() -> dict[str, float]:
    entered = time.time()  # plugins are set up before the entry is even imported
    import keras
    import numpy as np
    from skyinfra_runtime import shard

    attempt = int(os.environ["SKYINFRA_ATTEMPT"])
    killer = attempt == 1 and os.environ["SKYINFRA_NODE"] == "1" and "KILL_NODE_1" in os.environ
    died_at = Path(os.environ["SKYINFRA_CHECKPOINT_DIR"]) / "died_at"
    times: dict[str, float] = {"attempt": float(attempt), "entered": entered}

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            times.setdefault("first_step", time.time())
            if killer and batch == 1:
                # A failure later in the job (the node's standby had time to import, when it
                # has cores to spare): seconds to wait first.
                time.sleep(float(os.environ.get("KILL_AFTER_S", "0")))
                died_at.parent.mkdir(parents=True, exist_ok=True)
                died_at.write_text(str(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does

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
    return times
