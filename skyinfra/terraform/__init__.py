"""The Terraform engine: the contract the lifecycle drives (engine.py), its environment
(config.py), what its JSON output means (events.py) and the operator's signals while it
runs (signals.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyinfra.lazy_names import lazy_getattr

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
    "MIRROR_ENV": "skyinfra.terraform.config",
    "PLUGIN_CACHE_ENV": "skyinfra.terraform.config",
    "provider_mirror": "skyinfra.terraform.config",
    "terraform_env": "skyinfra.terraform.config",
    "EmbeddedTerraform": "skyinfra.terraform.engine",
    "EngineFactory": "skyinfra.terraform.engine",
    "TerraformEngine": "skyinfra.terraform.engine",
    "EventHandler": "skyinfra.terraform.events",
    "PlanSummary": "skyinfra.terraform.events",
    "format_event": "skyinfra.terraform.events",
    "signals_as_interrupt": "skyinfra.terraform.signals",
}


__getattr__ = lazy_getattr(__name__, _PUBLIC, globals())
