"""The Terraform engine: the contract the lifecycle drives (engine.py), its environment
(config.py), what its JSON output means (events.py) and the operator's signals while it
runs (signals.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyinfra.terraform.config import (
        MIRROR_ENV,
        PLUGIN_CACHE_ENV,
        provider_mirror,
        terraform_env,
    )
    from skyinfra.terraform.engine import EmbeddedTerraform, EngineFactory, TerraformEngine
    from skyinfra.terraform.events import EventHandler, PlanSummary, format_event
    from skyinfra.terraform.signals import signals_as_interrupt

__all__ = [
    "MIRROR_ENV",
    "PLUGIN_CACHE_ENV",
    "EmbeddedTerraform",
    "EngineFactory",
    "EventHandler",
    "PlanSummary",
    "TerraformEngine",
    "format_event",
    "provider_mirror",
    "signals_as_interrupt",
    "terraform_env",
]

# Each name from its module when first used: a command that reaches a submodule alone (the
# state backend's file, for one) does not load the engine with it.
_PUBLIC = {
    "MIRROR_ENV": "config",
    "PLUGIN_CACHE_ENV": "config",
    "provider_mirror": "config",
    "terraform_env": "config",
    "EmbeddedTerraform": "engine",
    "EngineFactory": "engine",
    "TerraformEngine": "engine",
    "EventHandler": "events",
    "PlanSummary": "events",
    "format_event": "events",
    "signals_as_interrupt": "signals",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'skyinfra.terraform' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"skyinfra.terraform.{module}"), name)
    globals()[name] = value
    return value
