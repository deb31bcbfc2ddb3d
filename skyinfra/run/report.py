"""What a run came to: each node's outcome, the run's own exit code, runs/<id>/summary.json,
the lines `skyinfra run` and the demo print, and the RunError for a failed run."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyinfra_runtime import exitcodes as node_exitcodes

from skyinfra import exitcodes
from skyinfra.errors import RunError

SUMMARY_FILE = "summary.json"


@dataclass
class NodeOutcome:
    node: int
    exit_code: int | None = None
    ended_by_us: bool = False
    result: Any = None


@dataclass
class RunReport:
    run_id: str
    run_dir: Path
    outcomes: dict[int, NodeOutcome] = field(default_factory=dict)
    first_failure: int | None = None

    @property
    def exit_code(self) -> int:
        """What `skyinfra run` exits with: OK, or NODE_FAILED whatever the node's own code."""
        return exitcodes.OK if self.first_failure is None else exitcodes.NODE_FAILED


def describe_exit(outcome: NodeOutcome) -> str:
    """A node's outcome in words, with the runtime's meaning of its exit code."""
    if outcome.ended_by_us:
        return f"ended by skyinfra after another node failed (exit {outcome.exit_code})"
    if outcome.exit_code == 0:
        return "ok (exit 0)"
    return f"failed (exit {outcome.exit_code}, {node_exitcodes.describe(outcome.exit_code)})"


def worker_results(outcome: NodeOutcome) -> list[dict[str, Any]]:
    """The node's per-worker entries from its result.json (none when it wrote none)."""
    if not isinstance(outcome.result, dict):
        return []
    return list(outcome.result.get("workers", []))


def summary(report: RunReport, *, entry: str, args: Sequence[str]) -> dict[str, Any]:
    """The content of runs/<id>/summary.json."""
    return {
        "run_id": report.run_id,
        "entry": entry,
        "args": list(args),
        # What `skyinfra run` exits with (skyinfra.exitcodes); each node's own code is below.
        "exit_code": report.exit_code,
        "first_failure": report.first_failure,
        "nodes": [
            {
                "node": o.node,
                "exit_code": o.exit_code,
                "exit_meaning": node_exitcodes.describe(o.exit_code),
                "ended_by_skyinfra": o.ended_by_us,
                "result": o.result,
            }
            for o in report.outcomes.values()
        ],
    }


def write_summary(report: RunReport, *, entry: str, args: Sequence[str]) -> Path:
    path = report.run_dir / SUMMARY_FILE
    text = json.dumps(summary(report, entry=entry, args=args), indent=2) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def print_report(
    report: RunReport, echo: Callable[[str], None], *, prefix: str = "[skyinfra]"
) -> None:
    """Each node's outcome, each worker's returned value, and where results and logs are."""
    echo(f"{prefix} run {report.run_id}:")
    for outcome in report.outcomes.values():
        echo(f"  node-{outcome.node}: {describe_exit(outcome)}")
    for outcome in report.outcomes.values():
        for worker in worker_results(outcome):
            value = json.dumps(worker.get("value"), sort_keys=True)
            echo(f"  node-{outcome.node} worker {worker.get('worker')}: {value}")
    echo(f"{prefix} results and logs: {report.run_dir}")


def raise_for_failure(report: RunReport) -> None:
    """RunError (exit NODE_FAILED) naming the first failing node and every node's own code."""
    if report.first_failure is None:
        return
    first = report.outcomes[report.first_failure]
    codes = {i: o.exit_code for i, o in report.outcomes.items()}
    per_node = ", ".join(f"node-{o.node}: {describe_exit(o)}" for o in report.outcomes.values())
    raise RunError(
        f"run {report.run_id} failed on node {first.node} "
        f"(node-{first.node}, exit {first.exit_code}: "
        f"{node_exitcodes.describe(first.exit_code)}); "
        f"nodes: {per_node}; logs in {report.run_dir}",
        node=first.node,
        exit_codes=codes,
    )
