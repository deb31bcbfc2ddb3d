"""Which nodes a job gets (``run --nodes K``): the head's choice, a pure function of the
cluster's node count, the nodes the live jobs hold and how many the job asks for, and what a
queued job waits for, in words.

Within one priority (jobprio.py orders the priorities) the queue is strict first in, first
out: a job starts when K nodes are free and no job ahead of it still waits (no backfill: a
one-node job does not pass a whole-cluster job that waits for the nodes, which then never
starves). The K nodes are the lowest free ones (or the ones it names, ``only``); the first of
them is the job's rank 0 (its coordinator and rendezvous host).

Standard library only: this runs on the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def place(
    total: int, held: Iterable[Sequence[int]], want: int, only: Sequence[int] | None = None
) -> tuple[int, ...] | None:
    """The ``want`` lowest nodes of ``0..total-1`` that none of ``held`` (each live job's
    nodes) holds; None while fewer are free. ``only``: exactly those nodes (a preempted job
    resumes on the nodes its agents wait on), None while any of them is held."""
    taken = {n for nodes in held for n in nodes}
    if only:
        return None if taken & set(only) else tuple(only)
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
    total: int,
    want: int,
    holders: Sequence[tuple[str, Sequence[int]]],
    ahead: Sequence[str],
    only: Sequence[int] | None = None,
) -> str:
    """What a queued job waits for, exactly: how many nodes and how many are free ("2 nodes,
    1 free; node 0 held by job J"), or the nodes it needs ("node 1; node 1 held by job J"),
    each holder with the nodes it holds, and the jobs queued ahead of it."""
    held = {n for _, nodes in holders for n in nodes}
    if only:
        said = nodes_words(only)
        holders = [(job, nodes) for job, nodes in holders if set(nodes) & set(only)]
    else:
        free = total - len(held)
        said = f"{want} node{'s' if want > 1 else ''}, {free} free"
    for job, nodes in holders:
        said += f"; {nodes_words(nodes)} held by job {job}"
    if ahead:
        said += f"; {len(ahead)} job(s) queued ahead of it (next: {ahead[0]})"
    return said
