"""The Terraform engine: the contract the lifecycle drives (engine.py), its environment
(config.py) and what its JSON output means (events.py)."""

from skyinfra.terraform.config import MIRROR_ENV, PLUGIN_CACHE_ENV, provider_mirror, terraform_env
from skyinfra.terraform.engine import (
    EmbeddedTerraform,
    EngineFactory,
    TerraformEngine,
    signals_as_interrupt,
)
from skyinfra.terraform.events import EventHandler, PlanSummary, format_event

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
