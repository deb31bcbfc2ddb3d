"""Keras's ``BackupAndRestore``, correct on several processes (JAX backend, DataParallel).

Keras 3's own callback (``keras.callbacks.BackupAndRestore``) is written for one process:

- every process writes ``latest.weights.h5`` itself, in place: on a directory the nodes share,
  two processes collide on HDF5's file lock (``BlockingIOError: [Errno 11] Unable to
  synchronously create file``); on per-node folders, each process truncates its file when it
  starts a save and fills it once the epoch's last steps have run. Under JAX's asynchronous
  dispatch a process's Python reaches the end of an epoch (and truncates its backup) well
  before that epoch's all-reduces finish, so a peer killed in that window leaves the
  truncated file beside the previous epoch's ``training_metadata.json``;
- on restore each process loads whatever file it finds. A truncated one loads nothing
  ("Skipping variable loading for optimizer 'adam', because it has 10 variables whereas the
  saved optimizer has 0 variables", and the layers' weights silently stay at their
  initial values) while the other processes load theirs: the processes now issue different
  collectives (``jax.device_put`` checks each loaded variable across processes), and gloo
  aborts (``op.preamble.length <= op.nbytes``, SIGABRT).

This one keeps Keras's arguments and what it restores (weights, optimizer state, the epoch)
and changes how: process 0 alone writes each backup into a new step folder
(``step-<optimizer iteration>/``; the others save too, to a file they throw away: a save
issues collectives) and marks it complete last (``COMMITTED``,
skyinfra_runtime.checkpoints); a folder without the mark is ignored. On restore process 0
picks the newest complete step and every process loads that same step (a broadcast), with
the optimizer built first so Adam's moments are restored. The two newest steps are kept.

The keras plugin puts this class in place of ``keras.callbacks.BackupAndRestore`` when a job
runs on several JAX processes, so a script that uses Keras's name gets it unchanged; import
it from here to use it by name. Data parallel only (replicated variables): with a
``ModelParallel`` layout process 0 does not hold every variable.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from skyinfra_runtime import checkpoints

KEEP_STEPS = 2
WEIGHTS = "latest.weights.h5"
METADATA = "training_metadata.json"

_made: dict[str, Any] = {}


def backup_and_restore_class() -> Any:
    """The callback class (made once: it subclasses keras's, imported only here)."""
    if "cls" not in _made:
        _made["cls"] = _make()
    return _made["cls"]


def __getattr__(name: str) -> Any:
    if name == "BackupAndRestore":
        return backup_and_restore_class()
    raise AttributeError(name)


def _process() -> tuple[int, int]:
    import keras

    if keras.backend.backend() != "jax":
        return 0, 1
    import jax

    return int(jax.process_index()), int(jax.process_count())


def _agree(step: int) -> int:
    """Process 0's ``step``, on every process (-1: none)."""
    if _process()[1] == 1:
        return step
    import numpy as np
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.asarray(step, dtype=np.int64)))


def _make() -> Any:
    import keras

    base = keras.callbacks.BackupAndRestore

    class BackupAndRestore(base):  # type: ignore[misc, valid-type]
        """keras.callbacks.BackupAndRestore's arguments and meaning, correct on several
        processes (skyinfra_runtime.keras_backup)."""

        skyinfra = True

        def __init__(
            self,
            backup_dir: str | Path,
            save_freq: str | int = "epoch",
            double_checkpoint: bool = False,
            delete_checkpoint: bool = True,
        ) -> None:
            super().__init__(
                str(backup_dir),
                save_freq=save_freq,
                double_checkpoint=double_checkpoint,
                delete_checkpoint=delete_checkpoint,
            )
            self.restored_step: int | None = None

        # ------------------------------------------------------------- restore
        def on_train_begin(self, logs: Any = None) -> None:
            self._load_model()

        def _load_model(self) -> None:
            if not self.model.built:
                raise ValueError(
                    "To use the BackupAndRestore callback, your model must be built before "
                    f"you call `fit()`. Model {self.model} is unbuilt."
                )
            index, _ = _process()
            mine = checkpoints.latest_step(self.backup_dir)
            step = _agree(mine if (index == 0 and mine is not None) else -1)
            if step < 0:
                return
            folder = checkpoints.step_dir(self.backup_dir, step)
            if not (folder / checkpoints.COMMIT_MARKER).is_file():
                raise FileNotFoundError(
                    f"process {index}: backup step {step} chosen by process 0 is not complete "
                    f"in {folder}: every process must see the same checkpoint directory"
                )
            optimizer = self.model.optimizer
            if optimizer is not None and not optimizer.built:
                optimizer.build(self.model.trainable_variables)
            self.model.load_weights(str(folder / WEIGHTS))
            meta = json.loads((folder / METADATA).read_text(encoding="utf-8"))
            self.model._initial_epoch = int(meta["epoch"])
            self._current_epoch = int(meta["epoch"])
            self.restored_step = step
            print(
                f"skyinfra-runtime: BackupAndRestore: resumed from {folder} "
                f"(epoch {meta['epoch']}, step {step})",
                flush=True,
            )

        # ---------------------------------------------------------------- save
        def _save_model(self) -> None:
            sync = getattr(self.model, "jax_state_sync", None)
            if callable(sync):
                sync()  # mid-epoch the JAX trainer holds the state outside the variables
            index, _ = _process()
            optimizer = self.model.optimizer
            step = int(optimizer.iterations.numpy()) if optimizer is not None else 0
            if index != 0:
                # Saving issues collectives (jax.device_put checks every variable across
                # processes): every process saves, the others to a file they throw away.
                with tempfile.TemporaryDirectory(prefix="skyinfra-backup-") as tmp:
                    self.model.save_weights(str(Path(tmp) / WEIGHTS), overwrite=True)
                return
            folder = checkpoints.step_dir(self.backup_dir, step)
            if folder.exists():
                shutil.rmtree(folder)  # an earlier attempt's half-written step
            folder.mkdir(parents=True)
            self.model.save_weights(str(folder / WEIGHTS), overwrite=True)
            meta = {"epoch": self._current_epoch, "batch": self._last_batch_seen, "step": step}
            (folder / METADATA).write_text(json.dumps(meta), encoding="utf-8")
            checkpoints.commit(folder, meta)
            for old in checkpoints.committed_steps(self.backup_dir)[:-KEEP_STEPS]:
                shutil.rmtree(checkpoints.step_dir(self.backup_dir, old), ignore_errors=True)

        def on_train_end(self, logs: Any = None) -> None:
            if not self.delete_checkpoint or _process()[0] != 0:
                return
            root = Path(self.backup_dir)
            if root.is_dir():
                for child in root.iterdir():  # the steps, not the directory (the job's own)
                    if child.name.startswith("step-"):
                        shutil.rmtree(child, ignore_errors=True)

    BackupAndRestore.__name__ = BackupAndRestore.__qualname__ = "BackupAndRestore"
    BackupAndRestore.__module__ = __name__
    return BackupAndRestore
