"""What a run came to: each node's outcome, the run's own exit code, runs/<id>/summary.json,
the lines `skyinfra run` and the demo print, and the RunError (RunTimeoutError) for a failed
(timed-out) run."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyinfra_runtime import exitcodes as node_exitcodes
from skyinfra_runtime.jobplace import nodes_words
from skyinfra_runtime.jobrecord import HeadRecoveryRun, Interruption

from skyinfra import exitcodes
from skyinfra.errors import RunError, RunTimeoutError
from skyinfra.run.job import queue_words
from skyinfra.transport.tree import CopyStats

SUMMARY_FILE = "summary.json"
# runs/<id>/copy.json: per node, what copying the project came to (CopyStats).
COPY_RECORD = "copy.json"


@dataclass
class NodeOutcome:
    node: int
    exit_code: int | None = None
    ended_by_us: bool = False
    # Why skyinfra ended it ("after node-1 failed", "at --timeout 30 s"); "" if it did not.
    ended_reason: str = ""
    result: Any = None
    copy: CopyStats | None = None  # what copying the project to the node came to


@dataclass
class RunReport:
    run_id: str
    run_dir: Path
    outcomes: dict[int, NodeOutcome] = field(default_factory=dict)
    first_failure: int | None = None
    timeout_s: float | None = None
    # When the job was first created, on the head's clock (its record's created_at): a job
    # started again after a lost node or supervisor keeps it, and its --timeout counts from it.
    created_at: float | None = None
    timed_out: list[int] = field(default_factory=list)  # nodes still running at the timeout
    # A job's attempts, from its record (skyinfra_runtime.jobs.supervisor): one when it was
    # never restarted; each with its cause, lost_s and recovery_s.
    attempts: list[dict[str, Any]] = field(default_factory=list)
    max_restarts: int = 0
    retry_on: str = "signal"
    job_state: str = ""  # the job's final state in its record ("" when not a job)
    needs_nodes: list[int] = field(default_factory=list)  # lost nodes (state needs_nodes)
    # The Spot interruption notices of the job's last attempt (node, action, time, noticed_at).
    interruptions: list[Interruption] = field(default_factory=list)
    # Node 0's unattended recovery of the job (its record's head_recovery; None: none).
    head_recovery: HeadRecoveryRun | None = None
    # The head's word when it queued the job (seq, position, waits_for, held_by); None: it
    # started at once.
    queued: dict[str, Any] | None = None
    # The cluster's nodes the job started on, its rank 0's first (its record's world once it
    # started; empty before, or when only followed).
    world: list[int] = field(default_factory=list)
    # The nodes whose agents this run started for the job (jobstart.agent_nodes: a job the
    # head started at once has none on the nodes outside its world); empty: not started here.
    agents: list[int] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """What `skyinfra run` exits with: OK, NODE_FAILED whatever the node's own code, or
        RUN_TIMEOUT when the timeout ended nodes that had not failed."""
        if self.first_failure is not None:
            return exitcodes.NODE_FAILED
        return exitcodes.RUN_TIMEOUT if self.timed_out else exitcodes.OK


def submitted_words(report: RunReport, name: str = "") -> str:
    """What a detached start came to, as `run --detach` and the Python API's ``submit`` say
    it: queued (its position and what it waits for), or started on every node or on the
    nodes the head gave it. ``name``: the called function's, after the job's id."""
    job = f"{report.run_id} ({name})" if name else report.run_id
    if report.queued is not None:
        return queue_words(job, report.queued)
    if report.world and len(report.world) < len(report.outcomes):
        return f"job {job} started on {nodes_words(report.world)}"
    return f"job {job} started on every node"


def describe_exit(outcome: NodeOutcome) -> str:
    """A node's outcome in words, with the runtime's meaning of its exit code."""
    code = outcome.exit_code
    if outcome.ended_by_us:
        reason = outcome.ended_reason or "after another node failed"
        return f"ended by skyinfra {reason} (exit {code}: {node_exitcodes.describe(code)})"
    if code == 0:
        return "ok (exit 0)"
    return f"failed (exit {code}, {node_exitcodes.describe(code)})"


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
        "timeout_s": report.timeout_s,
        "timed_out": list(report.timed_out),
        "max_restarts": report.max_restarts,
        "retry_on": report.retry_on,
        "attempts": report.attempts,
        "nodes": [
            {
                "node": o.node,
                "exit_code": o.exit_code,
                "exit_meaning": node_exitcodes.describe(o.exit_code),
                "ended_by_skyinfra": o.ended_by_us,
                "ended_reason": o.ended_reason if o.ended_by_us else "",
                "result": o.result,
                "copy": o.copy.as_json() if o.copy else None,
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
    if len(report.attempts) > 1 or report.max_restarts:
        for line in attempt_lines(report.attempts):
            echo(f"  {line}")
    for outcome in report.outcomes.values():
        echo(f"  node-{outcome.node}: {describe_exit(outcome)}")
    for outcome in report.outcomes.values():
        for worker in worker_results(outcome):
            if "value" not in worker:  # a script's: it returns nothing
                continue
            value = json.dumps(worker["value"], sort_keys=True)
            echo(f"  node-{outcome.node} worker {worker.get('worker')}: {value}")
    echo(f"{prefix} results and logs: {report.run_dir}")


def attempt_lines(attempts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each attempt of a job in words: how it ended, its cause, lost and recovery time."""
    lines = []
    for a in attempts:
        said = f"attempt {a.get('attempt')}: {a.get('outcome') or 'running'}"
        cause = a.get("cause")
        if isinstance(cause, Mapping) and cause.get("kind") == "lost":
            node = cause.get("node")
            # Node 0's cause is the operator's words (the head lost, or its supervisor killed).
            why = cause.get("meaning") if node == 0 else None
            said += f" ({why or f'node-{node} lost: its agent went away'})"
        elif isinstance(cause, Mapping):
            said += (
                f" (node-{cause.get('node')} exit {cause.get('exit_code')}: {cause.get('meaning')})"
            )
        if a.get("lost_s") is not None:
            said += f"; lost up to {a['lost_s']:.1f} s (its run time until the failure)"
        if a.get("recovery_s") is not None:
            said += f"; started {a['recovery_s']:.1f} s after the failure (recovery)"
        if a.get("not_restarted"):
            said += f"; not restarted: {a['not_restarted']}"
        if a.get("restarted_by"):
            said += f"; restarted by {a['restarted_by']}"
        if a.get("preempted_by"):
            said += f" by job {a['preempted_by']} (a higher priority; no restart spent)"
        lines.append(said)
    return lines


def _size(n: int) -> str:
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= factor:
            return f"{n / factor:.1f} {unit}"
    return f"{n} B"


def copy_line(copies: Mapping[int, CopyStats]) -> str:
    """One line on what the copy sent, over all nodes, and why a node got a full copy."""
    sent = sum(c.sent_files for c in copies.values())
    sent_bytes = sum(c.sent_bytes for c in copies.values())
    kept = sum(c.linked_files + c.node_copied_files for c in copies.values())
    kept_bytes = sum(c.linked_bytes for c in copies.values())
    line = (
        f"[skyinfra] copy to {len(copies)} node(s): {sent} file(s) sent ({_size(sent_bytes)}), "
        f"{kept} unchanged kept from the nodes' previous copy ({_size(kept_bytes)} linked)"
    )
    fresh = [f"node-{i}" for i, c in sorted(copies.items()) if c.base is None]
    notes = [f"no earlier copy on {', '.join(fresh)}"] if fresh else []
    for i, c in sorted(copies.items()):
        if c.base is not None and c.base_untrusted:
            notes.append(
                f"node-{i}: {c.base_untrusted} file(s) of run {c.base} differ from its "
                "manifest (changed or removed on the node), not reused"
            )
    return line + ("; " + "; ".join(notes) if notes else "")


def raise_for_failure(report: RunReport) -> None:
    """RunError (exit NODE_FAILED) naming the first failing node and every node's own code;
    RunTimeoutError (exit RUN_TIMEOUT) naming the nodes still running at the timeout."""
    codes = {i: o.exit_code for i, o in report.outcomes.items()}
    if report.first_failure is None and report.timed_out:
        still = ", ".join(f"node-{i}" for i in report.timed_out)
        raise RunTimeoutError(
            f"run {report.run_id} timed out after {report.timeout_s:g} s (--timeout); still "
            f"running then, and ended: {still}; logs in {report.run_dir}",
            still_running=report.timed_out,
            exit_codes=codes,
        )
    if report.first_failure is None:
        return
    first = report.outcomes[report.first_failure]
    per_node = ", ".join(f"node-{o.node}: {describe_exit(o)}" for o in report.outcomes.values())
    raise RunError(
        f"run {report.run_id} failed on node {first.node} "
        f"(node-{first.node}, exit {first.exit_code}: "
        f"{node_exitcodes.describe(first.exit_code)}); "
        f"nodes: {per_node}; logs in {report.run_dir}",
        node=first.node,
        exit_codes=codes,
    )
