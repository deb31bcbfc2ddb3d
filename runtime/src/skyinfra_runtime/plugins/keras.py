"""keras plugin: the backend before keras is imported; on JAX with several processes or
several devices (one node with several GPUs) a distribution.

DataParallel (or ModelParallel with a layout map) over every device of every process, with
``auto_shard_dataset=False``: the data is already split per process by ``shard()``, and Keras
refuses NumPy input under a multi-worker distribution unless told so. ``initialize_rng()``
makes every process start from the same seed, so weights are initialised identically.
(seeds keras-distribution-api-guide.txt and skyward-keras-plugin.txt.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyinfra_runtime.errors import PluginError
from skyinfra_runtime.info import InstanceInfo
from skyinfra_runtime.plugin_table import validate_plugin
from skyinfra_runtime.topology import Topology


@dataclass
class KerasPlugin:
    backend: str = "jax"
    # Model parallelism (JAX backend): mesh shape and axis names, plus a layout map of
    # variable-path regex -> axes (None for a replicated dimension), as in the Keras guide.
    # keras 3 matches keys with re.fullmatch on the whole path ("sequential/dense/kernel"),
    # so a key usually starts with ".*".
    mesh_shape: Sequence[int] | None = None
    axis_names: Sequence[str] | None = None
    layout_map: Mapping[str, Sequence[str | None]] | None = None
    batch_dim_name: str | None = None
    name: str = field(default="keras", init=False)
    _distributed: bool = field(default=False, init=False, repr=False)
    # keras.callbacks.BackupAndRestore before this plugin put skyinfra's in its place.
    _keras_backup: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        given = {
            "backend": self.backend,
            "mesh_shape": self.mesh_shape,
            "axis_names": self.axis_names,
            "layout_map": self.layout_map,
            "batch_dim_name": self.batch_dim_name,
        }
        clean = validate_plugin("keras", {k: v for k, v in given.items() if v is not None})
        self.layout_map = clean.get("layout_map")  # "" -> None: a replicated dimension

    def setup(self, info: InstanceInfo, topology: Topology, script: bool = False) -> None:
        loaded = sys.modules.get("keras")
        if loaded is not None:
            current = _loaded_backend(loaded)
            if current != self.backend:
                raise PluginError(
                    f"keras was already imported with backend {current!r} before the keras plugin"
                    f" could set {self.backend!r}; import keras inside your function, or set"
                    f" KERAS_BACKEND={self.backend} before anything imports it"
                )
        os.environ["KERAS_BACKEND"] = self.backend
        if self.backend != "jax":
            return  # torch/tensorflow: their own plugins or APIs distribute
        model_parallel = self.mesh_shape is not None
        if info.total_workers > 1:
            import jax

            if not jax.distributed.is_initialized():
                raise PluginError(
                    f"keras(backend='jax') on {info.total_workers} processes needs the jax plugin"
                    " to initialise first: list plugins as jax, then keras, and leave jax's"
                    " initialize option on (with initialize = false the script initialises"
                    " JAX and sets the Keras distribution itself)"
                )
        elif not model_parallel and _local_devices() < 2:
            return  # one process on one device: nothing to distribute
        try:
            import keras
        except ImportError:
            raise PluginError("plugin 'keras' needs keras installed on the node") from None
        keras.distribution.set_distribution(self._distribution(keras))
        self._distributed = True
        from keras.src.backend.jax.distribution_lib import initialize_rng

        initialize_rng()
        if info.total_workers > 1:
            # Keras's own writes a file per process in place and restores whatever each
            # finds: processes diverge on resume (skyinfra_runtime.keras_backup says how).
            from skyinfra_runtime.keras_backup import backup_and_restore_class

            self._keras_backup = keras.callbacks.BackupAndRestore
            keras.callbacks.BackupAndRestore = backup_and_restore_class()

    def _distribution(self, keras: Any) -> Any:
        devices = keras.distribution.list_devices()
        if self.mesh_shape is None:
            return keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
        assert self.axis_names is not None and self.layout_map is not None  # __post_init__
        shape = tuple(int(n) for n in self.mesh_shape)
        size = 1
        for n in shape:
            size *= n
        if size != len(devices):
            raise PluginError(
                f"keras mesh_shape {shape} holds {size} devices but the cluster has {len(devices)}"
            )
        mesh = keras.distribution.DeviceMesh(
            shape=shape, axis_names=list(self.axis_names), devices=devices
        )
        layout_map = keras.distribution.LayoutMap(mesh)
        for pattern, axes in self.layout_map.items():
            layout_map[pattern] = tuple(axes)
        return keras.distribution.ModelParallel(
            layout_map=layout_map,
            batch_dim_name=self.batch_dim_name or self.axis_names[0],
            auto_shard_dataset=False,
        )

    def explain(self, exc: BaseException) -> str | None:
        return None

    def teardown(self, failed: bool = False) -> None:
        try:
            if self._keras_backup is not None:
                # However the entry ended (a SystemExit on a Spot notice included), the backup
                # it began at its last epoch's end is completed before the worker exits.
                from skyinfra_runtime.keras_backup import wait_for_writes

                wait_for_writes()
        finally:
            if self._distributed:
                import keras

                keras.distribution.set_distribution(None)
                self._distributed = False
                if self._keras_backup is not None:
                    keras.callbacks.BackupAndRestore = self._keras_backup
                    self._keras_backup = None


def _loaded_backend(keras_module: Any) -> str:
    try:
        return str(keras_module.backend.backend())
    except Exception:  # partially imported keras: fall back to what it read
        return os.environ.get("KERAS_BACKEND", "tensorflow")


def _local_devices() -> int:
    """Devices this one process sees: DataParallel whenever there are several (one node with
    4 or 8 GPUs trains on all of them, not on the first)."""
    import jax

    return int(jax.local_device_count())
