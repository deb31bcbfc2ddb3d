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
(``step-<optimizer iteration>/``) and marks it complete last (``COMMITTED``,
skyinfra_runtime.checkpoints); a folder without the mark is ignored. On restore process 0
picks the newest complete step of its own ``backup_dir``, reads it, and sends its bytes to
every process (a broadcast, as the replicated weights are), with the optimizer built first
so Adam's moments are restored. So only process 0's ``backup_dir`` matters: one folder the
nodes share and a folder per node (``backup_dir=f".../node-{i}"``, the usual way around
Keras's own callback) both resume, bit-identically. The two newest steps are kept.

What could not resume is refused in ``on_train_begin``, before the first step, on every
process: a variable split across processes (ModelParallel: process 0 does not hold it), and a
``backup_dir`` that process 0 cannot write (the first backup would fail after an epoch).

A save is two phases (as CheckFreq's): at the epoch's end process 0 copies every variable's
local replica (data parallel: each process holds the whole value) into host memory, which
needs no collective and takes well under a millisecond for the demo model; a thread of its
own then writes ``state.npz`` (each variable by its Keras path), the metadata and the mark,
while training goes on. At most one write is in flight (the next save waits for it), and the
end of training waits for the last. Keras's ``model.save_weights`` took 25-30 ms an epoch on
every process (it reads each variable across processes), which was the whole overhead of a
checkpoint per epoch (BENCHMARKS figure 14). A step written by an earlier version
(``latest.weights.h5``) still restores, from a folder every process sees (each loads it).

The keras plugin puts this class in place of ``keras.callbacks.BackupAndRestore`` when a job
runs on several JAX processes, so a script that uses Keras's name gets it unchanged; import
it from here to use it by name. Data parallel only (replicated variables): with a
``ModelParallel`` layout process 0 does not hold every variable.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from skyinfra_runtime import checkpoints

KEEP_STEPS = 2
WEIGHTS = "latest.weights.h5"  # what earlier versions wrote: still restored
STATE = "state.npz"  # every variable of the model and its optimizer, by Keras path
METADATA = "training_metadata.json"
# What process 0 tells the others on restore (with the step and the epoch).
RESTORE_NONE, RESTORE_STATE, RESTORE_LEGACY, RESTORE_FAILED = 0, 1, 2, 3

_made: dict[str, Any] = {}
# Step folders being written in the background, so that a worker that leaves fit() another way
# (SystemExit from a callback on a Spot notice, SIGTERM) still completes its last backup: the
# keras plugin's teardown waits for them (wait_for_writes) before the worker exits.
_in_flight: set[_Writer] = set()
_in_flight_lock = threading.Lock()


def wait_for_writes() -> None:
    """Block until every backup being written has its COMMITTED mark; a write that failed is
    raised (the worker logs a failed teardown without changing its exit code)."""
    with _in_flight_lock:
        writers = list(_in_flight)
    for writer in writers:
        writer.finish()


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


def _agree(values: list[int]) -> list[int]:
    """Process 0's ``values`` (small integers), on every process."""
    if _process()[1] == 1:
        return values
    import numpy as np
    from jax.experimental import multihost_utils

    # int32: JAX without x64 would narrow an int64 anyway.
    sent = multihost_utils.broadcast_one_to_all(np.asarray(values, dtype=np.int32))
    return [int(v) for v in np.asarray(sent)]


def _share(layout: list[tuple[Any, tuple[int, ...]]], arrays: list[Any] | None) -> list[Any]:
    """Process 0's ``arrays`` (dtype and shape as ``layout``), on every process, bit for bit:
    their bytes travel as int32 words (a sum with the other processes' zeros, exact for
    integers, where a float sum would turn -0.0 into 0.0). The others pass None."""
    if _process()[1] == 1:
        assert arrays is not None  # one process: process 0 itself
        return arrays
    import numpy as np
    from jax.experimental import multihost_utils

    sizes = [int(np.prod(shape)) * np.dtype(dtype).itemsize for dtype, shape in layout]
    data = np.zeros((sum(sizes) + 3) // 4 * 4, dtype=np.uint8)
    if arrays is not None:
        at = 0
        for a, n in zip(arrays, sizes, strict=True):
            data[at : at + n] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            at += n
    data = np.asarray(multihost_utils.broadcast_one_to_all(data.view(np.int32))).view(np.uint8)
    out, at = [], 0
    for (dtype, shape), n in zip(layout, sizes, strict=True):
        out.append(np.frombuffer(data[at : at + n].tobytes(), dtype=dtype).reshape(shape))
        at += n
    return out


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
            self._writer: _Writer | None = None  # the step being written, if any

        # ------------------------------------------------------------- restore
        def on_train_begin(self, logs: Any = None) -> None:
            self._load_model()

        def _load_model(self) -> None:
            if not self.model.built:
                raise ValueError(
                    "To use the BackupAndRestore callback, your model must be built before "
                    f"you call `fit()`. Model {self.model} is unbuilt."
                )
            # The same model on every process: each refuses a split variable by itself.
            _refuse_split(_variables(self.model))
            index, _ = _process()
            # Process 0 alone reads: its newest complete step, whatever the others' folders.
            header, state, problem = [RESTORE_NONE, -1, 0], None, None
            if index == 0:
                try:
                    header, state = self._read_own_backup()
                except (OSError, ValueError, KeyError) as err:
                    header, problem = [RESTORE_FAILED, -1, 0], err
            code, step, epoch = _agree(header)
            if code == RESTORE_FAILED:
                if problem is not None:
                    raise problem
                raise RuntimeError(
                    f"process {index}: BackupAndRestore: process 0 could not use its "
                    "backup_dir (its error is in node-0's output); nothing was trained"
                )
            if code == RESTORE_NONE:
                return
            optimizer = self.model.optimizer
            if optimizer is not None and not optimizer.built:
                optimizer.build(self.model.trainable_variables)
            folder = checkpoints.step_dir(self.backup_dir, step)
            if code == RESTORE_LEGACY:
                self._load_legacy(folder, step, index)
            else:
                variables = _variables(self.model)
                layout = [(v.value.dtype, tuple(v.value.shape)) for v in variables]
                for v, value in zip(variables, _share(layout, state), strict=True):
                    v.assign(value)
            self.model._initial_epoch = epoch
            self._current_epoch = epoch
            self.restored_step = step
            # The others' backup_dir may be folders of their own: what they got is process 0's.
            source = folder if index == 0 or code == RESTORE_LEGACY else "process 0's backup"
            print(
                f"skyinfra-runtime: BackupAndRestore: resumed from {source} "
                f"(epoch {epoch}, step {step})",
                flush=True,
            )

        def _read_own_backup(self) -> tuple[list[int], list[Any] | None]:
            """Process 0: its backup_dir made and written to (a folder it cannot write is
            refused now, not after an epoch), then its newest complete step read: what to
            tell the others ([code, step, epoch]) and the state, in _variables' order."""
            root = Path(self.backup_dir)
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".skyinfra-writable-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
            step = checkpoints.latest_step(root)
            if step is None:
                return [RESTORE_NONE, -1, 0], None
            folder = checkpoints.step_dir(root, step)
            epoch = int(json.loads((folder / METADATA).read_text(encoding="utf-8"))["epoch"])
            if not (folder / STATE).is_file():
                return [RESTORE_LEGACY, step, epoch], None
            optimizer = self.model.optimizer
            if optimizer is not None and not optimizer.built:
                optimizer.build(self.model.trainable_variables)
            return [RESTORE_STATE, step, epoch], _read_state(self.model, folder / STATE)

        def _load_legacy(self, folder: Path, step: int, index: int) -> None:
            """A step of an earlier version (latest.weights.h5): Keras's loader reads it on
            every process, so every process must see the folder."""
            if not (folder / checkpoints.COMMIT_MARKER).is_file():
                raise FileNotFoundError(
                    f"process {index}: backup step {step} chosen by process 0 is not complete "
                    f"in {folder}: a backup written by an earlier version "
                    f"({WEIGHTS}) restores only from a backup_dir every process sees"
                )
            self.model.load_weights(str(folder / WEIGHTS))

        # ---------------------------------------------------------------- save
        def _save_model(self) -> None:
            sync = getattr(self.model, "jax_state_sync", None)
            if callable(sync):
                sync()  # mid-epoch the JAX trainer holds the state outside the variables
            if _process()[0] != 0:
                return  # process 0 reads its own replicas: no collective to take part in
            self._wait_for_write()
            optimizer = self.model.optimizer
            step = int(optimizer.iterations.numpy()) if optimizer is not None else 0
            meta = {"epoch": self._current_epoch, "batch": self._last_batch_seen, "step": step}
            snapshot = _snapshot(self.model)  # phase 1: host memory, before training goes on
            folder = checkpoints.step_dir(self.backup_dir, step)
            self._writer = _Writer(folder, snapshot, meta, Path(self.backup_dir))
            self._writer.start()  # phase 2: the files, in the background

        def _wait_for_write(self) -> None:
            writer = self._writer
            if writer is not None:
                self._writer = None
                writer.finish()

        def on_train_end(self, logs: Any = None) -> None:
            self._wait_for_write()  # the last checkpoint is complete before fit() returns
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


def _variables(model: Any) -> list[Any]:
    """The model's variables, then its optimizer's (iteration count and moments)."""
    found = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        found += list(optimizer.variables)
    return found


def _local(value: Any) -> Any:
    """A variable's value as a host array, from this process's own replica (no collective).
    A variable split across processes (a ModelParallel layout) has no whole local replica:
    an error, never a checkpoint that holds one shard as the whole value."""
    import numpy as np

    if getattr(value, "is_fully_replicated", True) is False:
        raise ValueError(
            "BackupAndRestore: a variable is split across processes (ModelParallel); this "
            "callback saves data-parallel (replicated) models only"
        )
    shards = getattr(value, "addressable_data", None)
    return np.array(shards(0) if callable(shards) else value, copy=True)


def _snapshot(model: Any) -> dict[str, Any]:
    """Every variable's value by its Keras path, copied to host memory."""
    out: dict[str, Any] = {}
    for v in _variables(model):
        if v.path in out:
            raise ValueError(f"BackupAndRestore: two variables share the path {v.path!r}")
        out[v.path] = _local(v.value)
    return out


def _refuse_split(variables: list[Any]) -> None:
    """A variable split across processes (a ModelParallel layout) has no whole replica on
    process 0, which alone saves: refused before training, never at the first save."""
    split = [v.path for v in variables if getattr(v.value, "is_fully_replicated", True) is False]
    if split:
        raise ValueError(
            f"BackupAndRestore: {len(split)} variable(s) are split across processes "
            f"(ModelParallel: {', '.join(split[:3])}{', ...' if len(split) > 3 else ''}); "
            "this callback saves data-parallel (replicated) models only: use DataParallel, "
            "or a checkpointer that saves every process's shards (Orbax)"
        )


def _read_state(model: Any, path: Path) -> list[Any]:
    """Every variable's value from ``path`` (a state.npz), in _variables' order, with the
    variable's dtype and shape: a variable the file lacks, one it has that the model lacks,
    or one of another shape, is an error naming it."""
    import numpy as np

    with np.load(path, allow_pickle=False) as saved:
        names = set(saved.files)
        variables = _variables(model)
        missing = [v.path for v in variables if v.path not in names]
        extra = sorted(names - {v.path for v in variables})
        if missing or extra:
            raise ValueError(
                f"BackupAndRestore: {path} does not match the model (missing: {missing}, "
                f"unknown: {extra}); was it written by another model?"
            )
        out = []
        for v in variables:
            value = np.asarray(saved[v.path])
            if tuple(value.shape) != tuple(v.value.shape):
                raise ValueError(
                    f"BackupAndRestore: {path}: {v.path} has shape {tuple(value.shape)}, the "
                    f"model's has {tuple(v.value.shape)}; was it written by another model?"
                )
            out.append(value.astype(v.value.dtype, copy=False))
        return out


class _Writer(threading.Thread):
    """Writes one step folder from a snapshot: state, metadata, then the mark; then prunes
    the older steps. Not a daemon: a worker that ends normally finishes its last write."""

    def __init__(
        self, folder: Path, snapshot: dict[str, Any], meta: dict[str, Any], root: Path
    ) -> None:
        super().__init__(name="skyinfra-backup-writer")
        self.folder, self.snapshot, self.meta, self.root = folder, snapshot, meta, root
        self.error: BaseException | None = None

    def start(self) -> None:
        with _in_flight_lock:
            _in_flight.add(self)
        super().start()

    def run(self) -> None:
        try:
            self._write()
        finally:
            with _in_flight_lock:
                _in_flight.discard(self)

    def _write(self) -> None:
        import numpy as np

        try:
            if self.folder.exists():
                shutil.rmtree(self.folder)  # an earlier attempt's half-written step
            self.folder.mkdir(parents=True)
            with (self.folder / STATE).open("wb") as f:
                np.savez(f, **self.snapshot)
            (self.folder / METADATA).write_text(json.dumps(self.meta), encoding="utf-8")
            checkpoints.commit(self.folder, self.meta)
            for old in checkpoints.committed_steps(self.root)[:-KEEP_STEPS]:
                shutil.rmtree(checkpoints.step_dir(self.root, old), ignore_errors=True)
        except BaseException as err:  # raised in training's thread, at the next save or end
            self.error = err

    def finish(self) -> None:
        self.join()
        if self.error is not None:
            raise RuntimeError(f"BackupAndRestore: writing {self.folder} failed") from self.error
