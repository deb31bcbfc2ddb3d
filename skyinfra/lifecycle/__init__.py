"""The cluster life cycle behind the CLI: up, down, status, and how `run` reaches the nodes.

Every verb works against the :class:`~skyinfra.targets.base.Target` the spec names (looked up
in the registry, skyinfra/targets/) and a :class:`~skyinfra.terraform.TerraformEngine` made by
an engine factory; nothing here knows which target or engine it drives.

The package's modules, one seam each: verbs.py (the target's verbs as the lifecycle asks
them, and how `run` and `status` reach the nodes), markers.py (the unfinished marker),
changes.py (`up`, and node 0's replacement of lost nodes), teardown.py (`down`, `gc`),
cluster_status.py (`status`), standbys.py (standby workers started on ready nodes).
Callers use the names below, as ``lifecycle.up`` and so on.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyinfra.lifecycle.changes import (
        PLAN_FILE,
        Confirm,
        SpecOrigin,
        broken_nodes,
        check_same_cluster,
        confirm_review_losses,
        first_missing,
        progress_printer,
        replace_from_root_module,
        up,
        up_with,
    )
    from skyinfra.lifecycle.cluster_status import STATUS_CONNECT_TIMEOUT_S, node_readiness, status
    from skyinfra.lifecycle.markers import (
        UNFINISHED_FILE,
        mark_finished,
        mark_unfinished,
        not_up_error,
        unfinished_command,
    )
    from skyinfra.lifecycle.standbys import REPLACED_WARM_WAIT_S, warm_nodes
    from skyinfra.lifecycle.teardown import down, gc
    from skyinfra.lifecycle.verbs import (
        Echo,
        applies_as_is,
        check_target_options,
        default_wait_ready_s,
        head_recovery_of,
        spot_prices,
        store_credentials_of,
        target_of,
        transport_for,
    )

# The names below and the module each comes from, imported when first used: `skyinfra jobs`,
# `logs` and `cancel` need only the transport (verbs.py), not `up`'s planning and rendering
# (changes.py imports Jinja and the review), which were most of their start.
_NAMES = {
    "PLAN_FILE": "skyinfra.lifecycle.changes",
    "Confirm": "skyinfra.lifecycle.changes",
    "SpecOrigin": "skyinfra.lifecycle.changes",
    "broken_nodes": "skyinfra.lifecycle.changes",
    "check_same_cluster": "skyinfra.lifecycle.changes",
    "confirm_review_losses": "skyinfra.lifecycle.changes",
    "first_missing": "skyinfra.lifecycle.changes",
    "progress_printer": "skyinfra.lifecycle.changes",
    "replace_from_root_module": "skyinfra.lifecycle.changes",
    "up": "skyinfra.lifecycle.changes",
    "up_with": "skyinfra.lifecycle.changes",
    "STATUS_CONNECT_TIMEOUT_S": "skyinfra.lifecycle.cluster_status",
    "node_readiness": "skyinfra.lifecycle.cluster_status",
    "status": "skyinfra.lifecycle.cluster_status",
    "UNFINISHED_FILE": "skyinfra.lifecycle.markers",
    "mark_finished": "skyinfra.lifecycle.markers",
    "mark_unfinished": "skyinfra.lifecycle.markers",
    "not_up_error": "skyinfra.lifecycle.markers",
    "unfinished_command": "skyinfra.lifecycle.markers",
    "REPLACED_WARM_WAIT_S": "skyinfra.lifecycle.standbys",
    "warm_nodes": "skyinfra.lifecycle.standbys",
    "down": "skyinfra.lifecycle.teardown",
    "gc": "skyinfra.lifecycle.teardown",
    "Echo": "skyinfra.lifecycle.verbs",
    "applies_as_is": "skyinfra.lifecycle.verbs",
    "check_target_options": "skyinfra.lifecycle.verbs",
    "default_wait_ready_s": "skyinfra.lifecycle.verbs",
    "head_recovery_of": "skyinfra.lifecycle.verbs",
    "spot_prices": "skyinfra.lifecycle.verbs",
    "store_credentials_of": "skyinfra.lifecycle.verbs",
    "target_of": "skyinfra.lifecycle.verbs",
    "transport_for": "skyinfra.lifecycle.verbs",
}

__all__ = [
    "PLAN_FILE",
    "REPLACED_WARM_WAIT_S",
    "STATUS_CONNECT_TIMEOUT_S",
    "UNFINISHED_FILE",
    "Confirm",
    "Echo",
    "SpecOrigin",
    "applies_as_is",
    "broken_nodes",
    "check_same_cluster",
    "check_target_options",
    "confirm_review_losses",
    "default_wait_ready_s",
    "down",
    "first_missing",
    "gc",
    "head_recovery_of",
    "mark_finished",
    "mark_unfinished",
    "node_readiness",
    "not_up_error",
    "progress_printer",
    "replace_from_root_module",
    "spot_prices",
    "status",
    "store_credentials_of",
    "target_of",
    "transport_for",
    "unfinished_command",
    "up",
    "up_with",
    "warm_nodes",
]


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'skyinfra.lifecycle' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later uses are a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
