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
