"""What a saved plan would do, read from ``terraform show -json PLANFILE`` (never from the
human plan text). Pure.

:func:`destructive_changes` lists the resources a plan destroys or replaces, with Terraform's
own reason in words, so `up` can show them and ask before anything is lost.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Terraform's "action_reason" values (plan JSON format, "resource_changes"):
# https://developer.hashicorp.com/terraform/internals/json-format#change-representation
_REASONS = {
    "replace_because_tainted": "it is tainted (a create or provisioner failed)",
    "replace_because_cannot_update": "a setting changed that cannot be updated in place",
    "replace_by_request": "replacement was requested",
    "replace_by_triggers": "its replace_triggered_by inputs changed",
    "delete_because_no_resource_config": "the cluster no longer has it",
    "delete_because_no_module": "the cluster no longer has its module",
    "delete_because_wrong_repetition": "the cluster no longer has it",
    "delete_because_count_index": "the cluster no longer has it (fewer nodes)",
    "delete_because_each_key": "the cluster no longer has it (fewer nodes)",
    "delete_because_no_move_target": "the cluster no longer has it",
}


def reason_words(cause: str) -> str:
    """Terraform's action_reason in words ("" for none or one it does not document)."""
    return _REASONS.get(cause, "")


@dataclass(frozen=True)
class ResourceChange:
    address: str
    action: str  # "destroy" or "replace"
    reason: str
    # Terraform's own action_reason ("replace_because_tainted", ...), "" when it gives none.
    cause: str = ""

    @property
    def is_repair(self) -> bool:
        """Replacing a tainted resource (a create or provisioner that failed, or an
        interrupted apply) rebuilds something already broken: nothing working is lost."""
        return self.cause == "replace_because_tainted"

    def describe(self) -> str:
        return f"{self.action} {self.address}: {self.reason}"


def _changed_paths(change: Mapping[str, Any]) -> str:
    paths = change.get("replace_paths") or []
    names = sorted({".".join(str(part) for part in path) for path in paths if path})
    return ", ".join(names)


def destructive_changes(plan: Mapping[str, Any]) -> list[ResourceChange]:
    """Resources the plan destroys or replaces, in plan order."""
    found: list[ResourceChange] = []
    changes: Sequence[Mapping[str, Any]] = plan.get("resource_changes") or []
    for entry in changes:
        change = entry.get("change") or {}
        actions = list(change.get("actions") or [])
        if "delete" not in actions:
            continue
        action = "replace" if "create" in actions else "destroy"
        cause = str(entry.get("action_reason", "") or "")
        reason = _REASONS.get(cause, "")
        paths = _changed_paths(change)
        if action == "replace" and paths:
            reason = f"{reason or 'its settings changed'} ({paths})"
        found.append(
            ResourceChange(str(entry.get("address")), action, reason or "as planned", cause)
        )
    return found


def changes_beyond_nodes(plan: Mapping[str, Any], nodes: Collection[str]) -> list[str]:
    """Every change of the plan other than creating a resource of one of ``nodes`` (a
    resource keyed by the node's name, or by ``<name>/...``: its instance, its interfaces, its
    address), as "ACTIONS ADDRESS": what a head replacing lost nodes must not apply."""
    found = []
    changes: Sequence[Mapping[str, Any]] = plan.get("resource_changes") or []
    for entry in changes:
        actions = list((entry.get("change") or {}).get("actions") or [])
        if actions in (["no-op"], ["read"]):
            continue
        key = str(entry.get("index", ""))
        of_a_node = key in nodes or key.split("/", 1)[0] in nodes
        if actions == ["create"] and of_a_node:
            continue
        found.append(f"{'+'.join(actions)} {entry.get('address')}")
    return found
