"""The built-in plugins: ``jax()``, ``keras(backend="jax")``, ``torch(backend=None)``.

Their names, options and option rules are the table in :mod:`skyinfra_runtime.plugin_table`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skyinfra_runtime.plugin_table import (
    PLUGINS,
    parse_plugin_flag,
    plugin_problems,
    validate_plugin,
    validate_plugins,
)
from skyinfra_runtime.plugins.base import Plugin
from skyinfra_runtime.plugins.jax import JaxPlugin
from skyinfra_runtime.plugins.keras import KerasPlugin
from skyinfra_runtime.plugins.torch import TorchPlugin

__all__ = [
    "PLUGINS",
    "Plugin",
    "from_name",
    "jax",
    "keras",
    "parse_plugin_flag",
    "plugin_problems",
    "torch",
    "validate_plugin",
    "validate_plugins",
]


def jax(
    init_timeout: float | None = None, initialize: bool = True, compilation_cache: bool = True
) -> JaxPlugin:
    return JaxPlugin(
        init_timeout=init_timeout, initialize=initialize, compilation_cache=compilation_cache
    )


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


def from_name(name: str, options: Mapping[str, Any]) -> Plugin:
    """A plugin from its name and options (as the topology or ``--plugin`` give them)."""
    clean = validate_plugin(name, options)
    if name == "jax":
        return JaxPlugin(**clean)
    if name == "keras":
        return KerasPlugin(**clean)
    return TorchPlugin(**clean)
