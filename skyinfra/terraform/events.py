"""Terraform's machine-readable output (``-json`` event lines) turned into what we show and use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

EventHandler = Callable[[dict[str, Any]], None]

# Events worth a progress line; their "@message" is already the human sentence.
_PROGRESS_EVENTS = frozenset(
    {
        "apply_start",
        "apply_complete",
        "apply_errored",
        "provision_errored",
        "provision_output",
        "planned_change",
        "change_summary",
    }
)


@dataclass(frozen=True)
class PlanSummary:
    add: int
    change: int
    remove: int
    # Root outputs the plan creates, changes or removes. A plan may change outputs alone (a
    # Terraform that was stopped after its resources were saved but before its outputs):
    # it still has to be applied, since `up` reads the cluster from the outputs.
    outputs: int = 0

    @property
    def no_changes(self) -> bool:
        return self.add == 0 and self.change == 0 and self.remove == 0 and self.outputs == 0


def format_event(event: dict[str, Any]) -> str | None:
    """One progress line for a Terraform JSON event, or None for events not worth a line."""
    kind = event.get("type")
    message = str(event.get("@message", ""))
    if kind in _PROGRESS_EVENTS:
        return message
    if kind == "diagnostic" and event.get("@level") in ("error", "warning"):
        diag = event.get("diagnostic", {})
        text = f"{event['@level']}: {diag.get('summary', message)}: {diag.get('detail', '')}"
        return text.rstrip(": ")
    return None


def plan_summary(events: Sequence[dict[str, Any]]) -> PlanSummary:
    """The counts of a plan's ``change_summary`` event and of its ``outputs`` event's
    changed outputs (neither: nothing to do)."""
    counts = (0, 0, 0)
    outputs = 0
    for event in events:
        if event.get("type") == "change_summary":
            c = event["changes"]
            counts = (int(c["add"]), int(c["change"]), int(c["remove"]))
        elif event.get("type") == "outputs":
            changed = event.get("outputs", {}).values()
            outputs = sum(1 for o in changed if o.get("action", "noop") != "noop")
    return PlanSummary(*counts, outputs=outputs)


def error_diagnostics(events: Sequence[dict[str, Any]]) -> str:
    """The error diagnostics among ``events``, one indented line each ("" when none)."""
    lines = []
    for event in events:
        if event.get("type") == "diagnostic" and event.get("@level") == "error":
            diag = event.get("diagnostic", {})
            lines.append(f"  {diag.get('summary', '')}: {diag.get('detail', '')}".rstrip(": "))
    return (":\n" + "\n".join(lines)) if lines else ""
