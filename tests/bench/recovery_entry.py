"""The recovery benchmark's user code: Keras on JAX (``main``) or a torch DDP loop
(``torch_main``); records when its first step ends and, in the job's first attempt, with
KILL_NODE_1 set, node 1's worker SIGKILLs itself after its second step (noting when)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _killer() -> bool:
    attempt = int(os.environ["SKYINFRA_ATTEMPT"])
    return attempt == 1 and os.environ["SKYINFRA_NODE"] == "1" and "KILL_NODE_1" in os.environ


def _die() -> None:
    # A failure later in the job (the node's standby had time to import): seconds to wait.
    time.sleep(float(os.environ.get("KILL_AFTER_S", "0")))
    died_at = Path(os.environ["SKYINFRA_CHECKPOINT_DIR"]) / "died_at"
    died_at.parent.mkdir(parents=True, exist_ok=True)
    died_at.write_text(str(time.time()))
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does


def main() -> dict[str, float]:
    entered = time.time()  # plugins are set up before the entry is even imported
    import keras
    import numpy as np
    from skyinfra_runtime import shard

    killer = _killer()
    times: dict[str, float] = {"attempt": float(os.environ["SKYINFRA_ATTEMPT"]), "entered": entered}

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            times.setdefault("first_step", time.time())
            if killer and batch == 1:
                _die()

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


def torch_main() -> dict[str, float]:
    """torch_first_step_entry.py's DDP loop (recovery.py copies it beside this file)."""
    from torch_first_step_entry import train

    killer = _killer()
    times = train(lambda step: _die() if killer and step == 1 else None)
    times["attempt"] = float(os.environ["SKYINFRA_ATTEMPT"])
    return times
