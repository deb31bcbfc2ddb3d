"""The Spot-notice benchmark's user code: Keras on JAX with BackupAndRestore on
$SKYINFRA_CHECKPOINT_DIR, a short sleep per step so that the job is mid-epoch when the drill
comes; on SIGTERM it leaves fit at the end of the epoch (once its backup is written) and node 0
notes when (``saved_at``); node 0 notes ``training`` once epoch 2 began (when the driver may
send the drill) and every attempt returns when its first step ended."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def main() -> dict[str, float]:
    import keras
    import numpy as np
    from skyinfra_runtime import shard

    attempt = int(os.environ["SKYINFRA_ATTEMPT"])
    head = os.environ["SKYINFRA_NODE"] == "0"
    ckpt = Path(os.environ["SKYINFRA_CHECKPOINT_DIR"])
    ckpt.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {"attempt": float(attempt)}
    asked: list[float] = []
    signal.signal(signal.SIGTERM, lambda *_: asked.append(time.time()))

    class Notice(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
            if head and attempt == 1 and epoch == 1:
                (ckpt / "training").write_text(str(time.time()))

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            times.setdefault("first_step", time.time())
            time.sleep(0.05)  # a step of a real model takes longer than this one's

        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            if asked:  # BackupAndRestore (before this callback) has written this epoch
                if head:
                    (ckpt / "saved_at").write_text(f"{time.time()} {epoch + 1}")
                sys.exit(130)  # not fit's normal end: its on_train_end deletes the backup

    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 32)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    x, y = shard(x, y, drop_last=True)
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    backup = keras.callbacks.BackupAndRestore(str(ckpt))
    model.fit(
        x, y, batch_size=32, epochs=12, shuffle=False, verbose=0, callbacks=[backup, Notice()]
    )
    return times
