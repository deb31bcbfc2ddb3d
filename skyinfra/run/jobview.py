"""A job as `skyinfra jobs` shows it: its record with whether it stalled and when each node
last printed, and the values a function entry returned."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra_runtime.jobrecord import JobRecord

from skyinfra.errors import SkyinfraError
from skyinfra.transport.base import NodeTransport

# `jobs --stall-after`'s default, in minutes: longer than what a healthy job may spend
# without a line (an XLA compile of a large model, a checkpoint written to disk, an evaluation
# pass that prints only at its end: each can take 10-20 minutes), shorter than the idle
# shutdown's default 60 minutes, so a hung job (a collective waiting on a dead peer) is flagged
# well within the hour it would otherwise burn unnoticed.
DEFAULT_STALL_AFTER_MIN = 30.0


@dataclass(frozen=True)
class JobView:
    """A job's record as `jobs` shows it: with the newest output of its nodes, that output's
    age and whether the job is stalled (:func:`annotate`), each node's result when it is
    known, and the state said otherwise for a copy kept after the cluster went down."""

    record: JobRecord
    last_output_at: float | None = None
    last_output_age_s: float | None = None
    stalled: bool = False
    results: Mapping[int, Any] | None = None  # each node's result.json (a function's job)
    shown_state: str | None = None

    @property
    def state(self) -> str:
        return self.shown_state or self.record.state.value

    def to_dict(self) -> dict[str, Any]:
        """What `jobs --json` prints: the record, and the three keys :func:`annotate` adds."""
        out = {
            **self.record.to_dict(),
            "last_output_at": self.last_output_at,
            "last_output_age_s": self.last_output_age_s,
            "stalled": self.stalled,
        }
        if self.results is not None:
            for n in out["nodes"]:
                n["result"] = self.results.get(n["node"])
        return out


def annotate(job: JobRecord, stall_after_s: float) -> JobView:
    """``job`` with ``last_output_at`` (the newest of its nodes'), ``last_output_age_s``
    (from the head's ``checked_at``: one clock; counted from the job's start while no node
    has printed) and ``stalled`` (a running job whose every node has been silent that long)."""
    times = [n.last_output_at for n in job.nodes if n.last_output_at]
    last = max(times) if times else None
    since = last or job.started_at or job.created_at
    checked = job.checked_at or time.time()
    age = max(0.0, float(checked) - float(since)) if since else None
    return JobView(
        job,
        last_output_at=last,
        last_output_age_s=None if age is None else round(age, 1),
        stalled=bool(job.running and age is not None and age >= stall_after_s),
    )


def is_function_entry(entry: str) -> bool:
    """``script.py:function`` or ``package.module:function`` (what returns a value)."""
    return ":" in entry and not entry.startswith("-m ")


def job_results(transport: NodeTransport, job: JobRecord, into: Path) -> dict[int, Any]:
    """Each node's result.json of the job (the launcher writes it when the entry, a function,
    returned on every worker of the node), fetched into ``into``; a node without one: None."""
    job_id = job.id
    results: dict[int, Any] = {}
    for n in job.nodes:
        i = n.node
        local = into / f"node-{i}.result.json"
        try:  # a lost node (its folder gone) has none: the others' are still shown
            remote = f"{transport.node_root(i)}/runs/{job_id}/result.json"
            found = transport.fetch(i, remote, local)
        except (SkyinfraError, OSError):
            found = False
        results[i] = None
        if found:
            with contextlib.suppress(ValueError, OSError):
                results[i] = json.loads(local.read_text(encoding="utf-8"))
    return results
