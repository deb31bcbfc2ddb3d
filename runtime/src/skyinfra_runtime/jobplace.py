"""Which nodes a job gets (``run --nodes K``): the head's choice, a pure function of the
cluster's node count, the nodes the live jobs hold and how many the job asks for, and what a
queued job waits for, in words.

The queue is strict first in, first out: a job starts when K nodes are free and no job
submitted before it still waits (no backfill: a one-node job does not pass a whole-cluster
job that waits for the nodes, which then never starves). The K nodes are the lowest free
ones; the first of them is the job's rank 0 (its coordinator and rendezvous host).

Standard library only: this runs on the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def place(total: int, held: Iterable[Sequence[int]], want: int) -> tuple[int, ...] | None:
    """The ``want`` lowest nodes of ``0..total-1`` that none of ``held`` (each live job's
    nodes) holds; None while fewer are free."""
    taken = {n for nodes in held for n in nodes}
    free = [i for i in range(total) if i not in taken]
    return tuple(free[:want]) if len(free) >= want else None


def nodes_words(nodes: Sequence[int]) -> str:
    """ "node 1", "nodes 0-3", "nodes 0, 2": the cluster's nodes a job holds or waits for."""
    ordered = sorted(nodes)
    if len(ordered) == 1:
        return f"node {ordered[0]}"
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"nodes {ordered[0]}-{ordered[-1]}"
    return "nodes " + ", ".join(str(n) for n in ordered)


def waits_for(
    total: int, want: int, holders: Sequence[tuple[str, Sequence[int]]], ahead: Sequence[str]
) -> str:
    """What a queued job waits for: every node ("nodes 0-1, held by job J") or K of them
    ("1 free node of 2; nodes 0-1 held by jobs J, L"), and the jobs queued ahead of it."""
    if want >= total:
        said = nodes_words(range(total))
        if holders:
            said += f", held by job {holders[0][0]}"
    else:
        said = f"{want} free node{'s' if want > 1 else ''} of {total}"
        if holders:
            held = sorted({n for _, nodes in holders for n in nodes})
            ids = ", ".join(job for job, _ in holders)
            said += f"; {nodes_words(held)} held by job{'s' if len(holders) > 1 else ''} {ids}"
    if ahead:
        said += f"; {len(ahead)} job(s) queued ahead of it (next: {ahead[0]})"
    return said
