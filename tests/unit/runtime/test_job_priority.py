"""Priorities (skyinfra_runtime.jobprio): the queue's order and which running jobs a waiting
one preempts, pure functions checked against a golden table (SKYINFRA_UPDATE_GOLDEN=1 rewrites
it), and the record's fields for them."""

from __future__ import annotations

import os
from pathlib import Path

from skyinfra_runtime.jobprio import Holder, Waiter, ahead_of, queue_order, victims
from skyinfra_runtime.jobrecord import Attempt, JobRecord, JobState

GOLDEN = Path(__file__).parents[1] / "golden" / "queue" / "priority.txt"


def _h(job: str, priority: int, seq: int, nodes: tuple[int, ...], leaving: bool = False) -> Holder:
    return Holder(job, priority, seq, nodes, leaving)


# (nodes, the running jobs, nodes wanted, the waiting job's priority, only those nodes, why)
CASES = [
    (2, [], 2, 5, None, "an idle cluster: nothing to preempt"),
    (2, [_h("A", 0, 1, (0, 1))], 2, 0, None, "the same priority never preempts"),
    (2, [_h("A", 5, 1, (0, 1))], 2, 1, None, "a higher priority is never preempted"),
    (2, [_h("A", 0, 1, (0, 1))], 1, 1, None, "a whole-cluster job goes for a one-node one"),
    (2, [_h("A", 0, 1, (0,)), _h("B", 0, 2, (1,))], 1, 1, None, "one node: the newest job"),
    (2, [_h("A", 0, 1, (0,)), _h("B", 0, 2, (1,))], 2, 1, None, "both nodes: both jobs"),
    (2, [_h("A", -1, 1, (0,)), _h("B", 0, 2, (1,))], 1, 1, None, "the lowest priority first"),
    (2, [_h("A", 0, 1, (0,))], 1, 1, None, "a free node: nothing to preempt"),
    (
        3,
        [_h("A", 0, 1, (0,)), _h("B", 0, 2, (1, 2))],
        2,
        1,
        None,
        "only as many as needed: B alone frees two",
    ),
    (
        3,
        [_h("A", 0, 3, (0,)), _h("B", 0, 2, (1, 2))],
        2,
        1,
        None,
        "the newest (A) is not enough, B is: A keeps running",
    ),
    (2, [_h("A", 0, 1, (0,)), _h("B", 2, 2, (1,))], 2, 1, None, "B outranks it: no way, waits"),
    (2, [_h("A", 0, 1, (0,), leaving=True), _h("B", 0, 2, (1,))], 1, 1, None, "A leaving: wait"),
    (2, [_h("A", 0, 1, (0,)), _h("B", 0, 2, (1,))], 1, 1, (0,), "node 0 needed: its holder"),
]


def table() -> str:
    lines = ["nodes running                      want prio only -> preempt    why"]
    for total, running, want, priority, only, why in CASES:
        got = victims(total, want, priority, running, only)
        given = "none (waits)" if got is None else ", ".join(got) or "-"
        held = " ".join(
            f"{h.job}:p{h.priority}#{h.seq}{list(h.nodes)}{'~' if h.leaving else ''}"
            for h in running
        )
        lines.append(
            f"{total:<5} {held or '-':<28} {want:<4} {priority:<4} {only or '-'!s:<4} -> "
            f"{given:<10} {why}"
        )
    lines += ["", "the queue's order (job:priority#seq):"]
    for waiting in (
        [Waiter("A", 0, 1), Waiter("B", 0, 2), Waiter("C", 0, 3)],
        [Waiter("A", 0, 1), Waiter("B", 5, 2), Waiter("C", 0, 3)],
        [Waiter("A", -1, 1), Waiter("B", 0, 2), Waiter("C", 1, 3), Waiter("D", 1, 4)],
    ):
        before = " ".join(f"{w.job}:{w.priority}#{w.seq}" for w in waiting)
        after = " ".join(w.job for w in queue_order(waiting))
        lines.append(f"{before:<28} -> {after}")
    return "\n".join(lines) + "\n"


def test_priority_golden() -> None:
    text = table()
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_a_preempted_job_waits_ahead_of_later_jobs_of_its_priority() -> None:
    """Back in the queue at its place: its seq is older than any job submitted since."""
    preempted, later = Waiter("L", 0, 1), Waiter("M", 0, 7)
    assert ahead_of(later, [preempted]) == [preempted]
    assert ahead_of(preempted, [later]) == []
    assert ahead_of(Waiter("H", 1, 9), [preempted, later]) == []


def test_the_record_keeps_priority_and_preemptions() -> None:
    data = {
        "id": "j",
        "state": "preempted",
        "priority": 3,
        "seq": 4,
        "preemptions": 1,
        "attempts": [{"attempt": 1, "outcome": "preempted", "preempted_by": "h", "ended_at": 1}],
    }
    record = JobRecord.from_dict(data)
    assert record.state is JobState.PREEMPTED and record.queued and not record.final
    assert (record.priority, record.seq, record.preemptions) == (3, 4, 1)
    assert record.attempts[0] == Attempt.from_dict(data["attempts"][0])
    assert record.attempts[0].preempted_by == "h"
    assert record.to_dict()["attempts"][0]["preempted_by"] == "h"
    assert {"priority", "seq", "preemptions"} <= set(record.to_dict())
    old = JobRecord.from_dict({"id": "old"}).to_dict()  # an older record keeps its shape
    assert not {"priority", "seq", "preemptions"} & set(old)
