"""A head's job records, queue and start lock: which jobs hold which nodes and ports, which wait.

Where a job's files are and how they are written: files.py. Standard library only: this runs
on the nodes.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from skyinfra_runtime.errors import TopologyError
from skyinfra_runtime.jobplace import place
from skyinfra_runtime.jobports import allocate
from skyinfra_runtime.jobprio import Holder, Waiter, queue_order

# The final states are defined once, in skyinfra_runtime.jobrecord (the operator's too).
from skyinfra_runtime.jobrecord import FINAL_STATES as FINAL_STATES
from skyinfra_runtime.jobrecord import JobPorts, JobRecord
from skyinfra_runtime.jobs.files import Paths, pid_alive, read_json, write_json
from skyinfra_runtime.topology import DEFAULT_HEAD_PORT, load_topology

SCHEMA = 1  # of node.json (the job's record has its own: skyinfra_runtime.jobrecord)
# Ending a node: SIGTERM to its launcher's process group, SIGKILL after this many seconds
# (frameworks blocked in a collective ignore SIGTERM): the others end within 5 s of a failure.
END_GRACE_S = 3.0
# Ending the others after a peer died (a worker killed by a signal, or its agent gone): the
# collectives they wait in can never complete, so a grace meant for a clean stop only delays
# the restart. SIGTERM still comes first (a worker between steps acts on it at once).
DEAD_PEER_GRACE_S = 0.1
# How long the head waits for every peer to report in before it counts the missing as failed.
JOIN_WAIT_S = 60.0
# Lines of a node's output kept for the operator when the job ends it (shown as they were
# before the SIGTERM, not the traceback the SIGTERM itself prints).
TAIL_LINES = 20
# How often a node's last-output time reaches the head and the record (at most).
OUTPUT_EVERY_S = 1.0


def _live_records(
    node_dir: Path, keep: Callable[[JobRecord], bool], but: str | None = None
) -> Iterator[tuple[str, JobRecord]]:
    """This head's job records (other than ``but``) that ``keep`` takes and whose supervisor
    runs, as (job id, record) in the order of their ids; files that are not a job's record are
    passed over. ``keep`` goes first: the pid file is read only for a record it takes."""
    for path in sorted((node_dir / "jobs").glob("*.json")):
        job_id = path.stem
        try:
            record = JobRecord.from_dict(read_json(path))
        except ValueError:  # not a job's record
            continue
        if job_id == but or not keep(record):
            continue
        if pid_alive(Paths(node_dir, job_id).pid_file) is not None:
            yield job_id, record


def _started(record: JobRecord) -> bool:
    return not (record.final or record.queued)


def holders(
    node_dir: Path, total: int, but: str | None = None
) -> list[tuple[str, tuple[int, ...]]]:
    """The jobs of this head (other than ``but``) that hold nodes, with the cluster's nodes
    each holds (a record without ``world``: every node): started (neither final nor queued)
    and their supervisor runs. A job's nodes are its alone until it ended."""
    return [
        (job_id, record.world or tuple(range(total)))
        for job_id, record in _live_records(node_dir, _started, but)
    ]


def holder_jobs(node_dir: Path, total: int, but: str | None = None) -> list[Holder]:
    """``holders`` as the priority decision sees them: each with its priority, its place in
    the submission order, and whether it is being preempted (an ask is waiting for it)."""
    return [
        Holder(
            job=job_id,
            priority=record.priority,
            seq=record.seq if record.seq is not None else (record.queue.seq if record.queue else 0),
            nodes=record.world or tuple(range(total)),
            leaving=Paths(node_dir, job_id).preempt_ask.exists(),
        )
        for job_id, record in _live_records(node_dir, _started, but)
    ]


def ports_in_use(node_dir: Path, but: str | None = None) -> list[JobPorts]:
    """The ports of this head's jobs (other than ``but``) that hold them: started (neither
    final nor queued), with ports, and their supervisor runs (called under the start lock)."""
    held = []
    for _, record in _live_records(node_dir, _started, but):
        if record.ports is not None:
            held.append(record.ports)
    return held


def cluster_ports(node_dir: Path, nodes: int) -> tuple[int, int]:
    """The cluster's head_port and node count, from the topology the operator copied to the
    node folder (jobports.port_range of them is the jobs' range); without one (a bare node
    folder), the default head_port and the job's ``nodes``."""
    try:
        topology = load_topology(node_dir / "topology.json")
    except TopologyError:
        return DEFAULT_HEAD_PORT, nodes
    return topology.head_port, len(topology.nodes)


def starting(
    node_dir: Path,
    total: int,
    want: int,
    job: str,
    held: list[tuple[str, tuple[int, ...]]],
    only: tuple[int, ...] | None = None,
) -> tuple[tuple[int, ...], JobPorts] | None:
    """The nodes and ports job ``job`` starts on now (under the start lock), ``held`` being
    the other live jobs' nodes; None while ``want`` nodes (``only``: those) or a pair of
    ports are not free."""
    world = place(total, [nodes for _, nodes in held], want, only)
    if world is None:
        return None
    head_port, cluster_nodes = cluster_ports(node_dir, total)
    ports = allocate(head_port, cluster_nodes, ports_in_use(node_dir, but=job))
    return None if ports is None else (world, ports)


# How often a queued job's supervisor looks whether its turn has come.
QUEUE_POLL_S = 0.2


def queued_jobs(node_dir: Path, but: str | None = None) -> list[Waiter]:
    """The jobs of this head waiting in its queue (queued, or preempted and waiting to
    resume; other than ``but``) whose supervisor runs, in the queue's order (jobprio)."""
    waiting = _live_records(node_dir, lambda record: record.queued, but)
    return queue_order(
        Waiter(job_id, record.priority, record.queue.seq)
        for job_id, record in waiting
        if record.queue is not None
    )


def next_queue_seq(node_dir: Path) -> int:
    """The next place in the head's submission order (called under the start lock)."""
    path = node_dir / "jobs" / ".queue-seq"
    last = read_json(path)
    seq = (last if isinstance(last, int) and not isinstance(last, bool) else 0) + 1
    write_json(path, seq)
    return seq


def lock_job_starts(node_dir: Path) -> int:
    """Take the head's job-start lock for this process (a POSIX lock: the daemon a fork makes
    does not hold it, and the kernel drops it when this process ends or closes the fd
    returned). Every job's start, and every queued job's leaving the queue, is decided under
    it."""
    lock = node_dir / "jobs" / ".start.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    return fd
