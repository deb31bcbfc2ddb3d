"""The built-in plugins: ``jax()``, ``keras(backend="jax")``, ``torch(backend=None)``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skyinfra_runtime.errors import PluginError
from skyinfra_runtime.plugins.base import Plugin, check_options
from skyinfra_runtime.plugins.jax import JaxPlugin
from skyinfra_runtime.plugins.keras import KerasPlugin
from skyinfra_runtime.plugins.torch import TorchPlugin

__all__ = ["Plugin", "from_name", "jax", "keras", "torch"]


def jax(init_timeout: float | None = None) -> JaxPlugin:
    return JaxPlugin(init_timeout=init_timeout)


def keras(
    backend: str = "jax",
    *,
    mesh_shape: Sequence[int] | None = None,
    axis_names: Sequence[str] | None = None,
    layout_map: Mapping[str, Sequence[str | None]] | None = None,
    batch_dim_name: str | None = None,
) -> KerasPlugin:
    return KerasPlugin(
        backend=backend,
        mesh_shape=mesh_shape,
        axis_names=axis_names,
        layout_map=layout_map,
        batch_dim_name=batch_dim_name,
    )


def torch(backend: str | None = None, init_timeout: float | None = None) -> TorchPlugin:
    return TorchPlugin(backend=backend, init_timeout=init_timeout)


_OPTIONS: dict[str, tuple[str, ...]] = {
    "jax": ("init_timeout",),
    "keras": ("backend", "mesh_shape", "axis_names", "layout_map", "batch_dim_name"),
    "torch": ("backend", "init_timeout"),
}


def from_name(name: str, options: Mapping[str, Any]) -> Plugin:
    """A plugin from its name and options (as the topology or ``--plugin`` give them)."""
    if name not in _OPTIONS:
        raise PluginError(f"unknown plugin {name!r}; available: {', '.join(_OPTIONS)}")
    check_options(name, options, _OPTIONS[name])
    if name == "jax":
        return JaxPlugin(**options)
    if name == "keras":
        return KerasPlugin(**options)
    return TorchPlugin(**options)
