"""Priorities (``run --priority N``): the queue's order and which running jobs a waiting one
preempts, pure functions of what the head's records say (jobs/records.py reads them, the
supervisor acts on the answer).

The queue's order is (higher priority first, then submission order): jobs of one priority
keep first in, first out, and a job passes only jobs of a lower priority. The first job in
that order that cannot start preempts running jobs of a lower priority (never its own or a
higher one): the lowest priority first and, within one priority, the newest (last submitted)
first, only as many as free the nodes it needs. Jobs already being preempted count as
leaving: their nodes are the waiting job's once they ended, and nothing more is preempted
for it meanwhile.

Standard library only: this runs on the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_PRIORITY = 0


@dataclass(frozen=True)
class Holder:
    """A running job as the decision sees it: its priority, its place in the submission
    order, the cluster's nodes it holds, and whether it is already being preempted."""

    job: str
    priority: int
    seq: int
    nodes: tuple[int, ...]
    leaving: bool = False


@dataclass(frozen=True)
class Waiter:
    """A job in the head's queue (queued, or preempted and waiting to resume)."""

    job: str
    priority: int
    seq: int


def order_key(priority: int, seq: int) -> tuple[int, int]:
    """A job's place in the queue: higher priority first, then submission order."""
    return (-priority, seq)


def queue_order(waiting: Iterable[Waiter]) -> list[Waiter]:
    return sorted(waiting, key=lambda w: order_key(w.priority, w.seq))


def ahead_of(me: Waiter, waiting: Iterable[Waiter]) -> list[Waiter]:
    """The jobs queued ahead of ``me``, in queue order."""
    mine = order_key(me.priority, me.seq)
    return [w for w in queue_order(waiting) if order_key(w.priority, w.seq) < mine]


def _enough(free: set[int], want: int, only: Sequence[int] | None) -> bool:
    return set(only) <= free if only else len(free) >= want


def victims(
    total: int,
    want: int,
    priority: int,
    holders: Sequence[Holder],
    only: Sequence[int] | None = None,
) -> tuple[str, ...] | None:
    """The running jobs to preempt so that a job of ``priority`` asking for ``want`` of the
    ``total`` nodes (``only``: exactly those) can start: () when none need be (the nodes are
    free, or will be once the leaving jobs ended), None when preempting every lower-priority
    job would still not free them (it waits without preempting)."""
    held = {n for h in holders if not h.leaving for n in h.nodes}
    free = set(range(total)) - held
    if _enough(free, want, only):
        return ()
    candidates = sorted(
        (h for h in holders if not h.leaving and h.priority < priority),
        key=lambda h: (h.priority, -h.seq),
    )
    chosen: list[Holder] = []
    for h in candidates:
        chosen.append(h)
        if _enough(free | _nodes(chosen), want, only):
            break
    else:
        return None
    # Only as many as it needs: a job chosen first whose nodes the later ones freed anyway
    # (a one-node job before a two-node one, for two nodes) keeps running.
    for h in list(chosen):
        rest = [c for c in chosen if c is not h]
        if _enough(free | _nodes(rest), want, only):
            chosen = rest
    return tuple(h.job for h in chosen)


def _nodes(jobs: Iterable[Holder]) -> set[int]:
    return {n for h in jobs for n in h.nodes}
