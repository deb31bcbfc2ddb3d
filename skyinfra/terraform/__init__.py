"""The Terraform engine: the contract the lifecycle drives (engine.py), its environment
(config.py), what its JSON output means (events.py) and the operator's signals while it
runs (signals.py)."""

from skyinfra.terraform.config import MIRROR_ENV, PLUGIN_CACHE_ENV, provider_mirror, terraform_env
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
