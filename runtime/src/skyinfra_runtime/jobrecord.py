"""Job record schema 1: what the head's supervisor writes in ``<head node dir>/jobs/<id>.json``
and what every reader on the operator's side (`run`, `jobs`, `logs`, `cancel`, the Python
API) reads, defined once, as the topology is (skyinfra_runtime.topology).

``JobRecord.from_dict`` reads every record written so far: a key an older runtime did not
write gets its default, and a key this version does not know is kept (``extra``) and written
back by ``to_dict``, so a record passes through the operator (``jobs --json``, the copies kept
in runs/) unchanged. ``to_dict`` writes the JSON the supervisor has always written.

Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import contextlib
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = 1
# A node's run folder's record of how each attempt's workers started (warm or cold).
TIMELINE_FILE = "timeline.json"


class JobState(str, enum.Enum):
    """A job's state. A str, so that it compares equal to the name in the JSON."""

    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    # A node was lost and restarts are left: the operator (or node 0, unattended) replaces it
    # and starts the next attempt (`skyinfra jobs recover`); nothing runs meanwhile.
    NEEDS_NODES = "needs_nodes"
    # Never written by a supervisor: the head's `jobs` says it of a record that is not final
    # and whose supervisor is gone (killed); `jobs recover` starts it again.
    LOST = "lost"
    # Submitted while other jobs hold the nodes (or wait ahead of it): it waits in the head's
    # queue, its agents started and idle, until the head starts it (first in, first out).
    QUEUED = "queued"
    # A higher-priority job took its nodes (`run --priority N`): its workers got SIGTERM and
    # the time left, as for a Spot notice; it waits in the queue at its place to resume.
    PREEMPTED = "preempted"

    def __str__(self) -> str:
        return self.value


# The states in which nothing of the job runs and no process of it will change the record.
# needs_nodes and lost are final too: only a new attempt (`jobs recover`) goes on from them.
# A tuple, not a set: `"lost" in FINAL_STATES` compares by value (an Enum hashes its name).
FINAL_STATES: tuple[JobState, ...] = (
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.TIMED_OUT,
    JobState.LOST,
    JobState.NEEDS_NODES,
)
# What `jobs recover` starts again: a job that lost nodes and waits for them, or whose
# supervisor was killed.
RECOVERABLE_STATES: tuple[JobState, ...] = (JobState.NEEDS_NODES, JobState.LOST)
RUNNING_STATES: tuple[JobState, ...] = (JobState.STARTING, JobState.RUNNING)


_QUEUE_KEYS = ("seq", "queued_at", "position", "waits_for", "held_by", "left_at")


@dataclass(frozen=True)
class QueueWait:
    """A job's time in the head's queue: its place in the submission order (``seq``, given
    out by the head under its start lock), when it was queued, its position now (1: next),
    what it waits for in words ("nodes 0-1, held by job J") and the job that holds them
    (None: only jobs queued ahead of it), and when it left the queue (None: it still waits,
    or was cancelled there). Kept in the record once the job started."""

    seq: int
    queued_at: float | None = None
    position: int = 1
    waits_for: str = ""
    held_by: str | None = None
    left_at: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueueWait:
        return cls(
            seq=_opt_int(data.get("seq")) or 0,
            queued_at=_opt_float(data.get("queued_at")),
            position=_opt_int(data.get("position")) or 1,
            waits_for=str(data.get("waits_for") or ""),
            held_by=_opt_str(data.get("held_by")),
            left_at=_opt_float(data.get("left_at")),
            extra=_extra(data, _QUEUE_KEYS),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "queued_at": self.queued_at,
            "position": self.position,
            "waits_for": self.waits_for,
            "held_by": self.held_by,
            "left_at": self.left_at,
            **self.extra,
        }


_PORT_KEYS = ("jax", "torch")


@dataclass(frozen=True)
class JobPorts:
    """The ports the head gave the job when it started it (skyinfra_runtime.jobs.ports): its
    JAX coordinator's and its torch rendezvous's, torch's always jax's + 1 (as the topology's
    head_port and head_port + 1). No two live jobs of a head hold the same."""

    jax: int
    torch: int
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobPorts:
        jax = _opt_int(data.get("jax")) or 0
        return cls(
            jax=jax,
            torch=_opt_int(data.get("torch")) or jax + 1,
            extra=_extra(data, _PORT_KEYS),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"jax": self.jax, "torch": self.torch, **self.extra}


@dataclass(frozen=True)
class Cause:
    """What ended an attempt: the node, its exit code (None: its agent went away) and its
    kind (skyinfra_runtime.restarts: signal, error, lost, interrupted)."""

    node: int | None
    exit_code: int | None
    meaning: str
    kind: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cause:
        return cls(
            node=_opt_int(data.get("node")),
            exit_code=_opt_int(data.get("exit_code")),
            meaning=str(data.get("meaning") or ""),
            kind=str(data.get("kind") or ""),
            extra=_extra(data, ("node", "exit_code", "meaning", "kind")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "exit_code": self.exit_code,
            "meaning": self.meaning,
            "kind": self.kind,
            **self.extra,
        }


_NOTICE_KEYS = ("node", "action", "time", "time_utc", "noticed_at")


@dataclass(frozen=True)
class Interruption:
    """A Spot interruption notice the head got (spot.py): on which node (None in the node's
    own ``interrupted``), what EC2 will do and when, and when the node's agent saw it. A key
    the notice did not carry is None here and absent from ``to_dict``."""

    node: int | None = None
    action: str | None = None
    time: float | None = None  # when EC2 acts (epoch seconds)
    time_utc: str | None = None
    noticed_at: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interruption:
        return cls(
            node=_opt_int(data.get("node")),
            action=_opt_str(data.get("action")),
            time=_opt_float(data.get("time")),
            time_utc=_opt_str(data.get("time_utc")),
            noticed_at=_opt_float(data.get("noticed_at")),
            extra=_extra(data, _NOTICE_KEYS),
        )

    def to_dict(self) -> dict[str, Any]:
        said = {
            "node": self.node,
            "action": self.action,
            "time": self.time,
            "time_utc": self.time_utc,
            "noticed_at": self.noticed_at,
        }
        return {**{k: v for k, v in said.items() if v is not None}, **self.extra}


_HEAD_RECOVERY_KEYS = ("by", "state", "started_at", "log", "exit_code", "ended_at", "tail")


@dataclass(frozen=True)
class HeadRecoveryRun:
    """Node 0's unattended recovery of a job that lost nodes (jobs/recovery.py): running
    from ``started_at``, or failed (its exit code, when, its output's last lines)."""

    by: str = "node-0"
    state: str = "running"  # running, failed
    started_at: float | None = None
    log: str = ""  # on node 0
    exit_code: int | None = None
    ended_at: float | None = None
    tail: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeadRecoveryRun:
        tail = data.get("tail")
        return cls(
            by=str(data.get("by") or "node-0"),
            state=str(data.get("state") or "running"),
            started_at=_opt_float(data.get("started_at")),
            log=str(data.get("log") or ""),
            exit_code=_opt_int(data.get("exit_code")),
            ended_at=_opt_float(data.get("ended_at")),
            tail=tuple(str(line) for line in tail) if isinstance(tail, list) else (),
            extra=_extra(data, _HEAD_RECOVERY_KEYS),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "by": self.by,
            "state": self.state,
            "started_at": self.started_at,
            "log": self.log,
        }
        if self.ended_at is not None:  # it ended (failed): how
            out.update(exit_code=self.exit_code, ended_at=self.ended_at, tail=list(self.tail))
        return {**out, **self.extra}


_ATTEMPT_KEYS = (
    "attempt",
    "started_at",
    "end_grace_s",
    "interruptions",
    "ended_at",
    "outcome",
    "cause",
    "lost_s",
    "not_restarted",
    "failed_at",
    "recovery_s",
    "restarted_by",
    "restarted_why",
    "restarted_who",
    "preempted_by",
)


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job (its first start, each restart, each recovery). A key the
    supervisor has not written (yet) is None here and absent from ``to_dict``; ``outcome``,
    ``cause``, ``lost_s`` and ``ended_at`` are written together once the attempt ended."""

    attempt: int
    started_at: float | None = None
    ended_at: float | None = None
    outcome: str | None = None
    cause: Cause | None = None
    # From the attempt's start to the failure the head saw: the most work it can have cost.
    lost_s: float | None = None
    failed_at: float | None = None
    # From the earlier attempt's failure to every node of this one started.
    recovery_s: float | None = None
    end_grace_s: float | None = None
    interruptions: tuple[Interruption, ...] = ()
    # Why the job did not go on after this attempt (on its own: the head).
    not_restarted: str | None = None
    # Who started the next attempt after all, and why (the operator's `jobs recover`, node 0).
    restarted_by: str | None = None
    # What the operator hands the next attempt's supervisor; it makes restarted_by of them.
    restarted_why: str | None = None
    restarted_who: str | None = None
    # The higher-priority job that preempted this attempt (not a failure: no restart spent).
    preempted_by: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.outcome is not None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attempt:
        cause = data.get("cause")
        return cls(
            attempt=_opt_int(data.get("attempt")) or 1,
            started_at=_opt_float(data.get("started_at")),
            ended_at=_opt_float(data.get("ended_at")),
            outcome=_opt_str(data.get("outcome")),
            cause=Cause.from_dict(cause) if isinstance(cause, Mapping) else None,
            lost_s=_opt_float(data.get("lost_s")),
            failed_at=_opt_float(data.get("failed_at")),
            recovery_s=_opt_float(data.get("recovery_s")),
            end_grace_s=_opt_float(data.get("end_grace_s")),
            interruptions=_notices(data.get("interruptions")),
            not_restarted=_opt_str(data.get("not_restarted")),
            restarted_by=_opt_str(data.get("restarted_by")),
            restarted_why=_opt_str(data.get("restarted_why")),
            restarted_who=_opt_str(data.get("restarted_who")),
            preempted_by=_opt_str(data.get("preempted_by")),
            extra=_extra(data, _ATTEMPT_KEYS),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"attempt": self.attempt}
        optional = {
            "started_at": self.started_at,
            "end_grace_s": self.end_grace_s,
            "interruptions": [i.to_dict() for i in self.interruptions] or None,
        }
        out.update((k, v) for k, v in optional.items() if v is not None)
        if self.ended:
            out.update(
                ended_at=self.ended_at,
                outcome=self.outcome,
                cause=None if self.cause is None else self.cause.to_dict(),
                lost_s=self.lost_s,
            )
        later = {
            "not_restarted": self.not_restarted,
            "failed_at": self.failed_at,
            "recovery_s": self.recovery_s,
            "restarted_by": self.restarted_by,
            "restarted_why": self.restarted_why,
            "restarted_who": self.restarted_who,
            "preempted_by": self.preempted_by,
        }
        out.update((k, v) for k, v in later.items() if v is not None)
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class WorkerStart:
    """How one worker of a node started in an attempt: on a standby (warm, how long the
    standby had waited for a job, or how long the job waited for its imports) or cold (and
    why). Written by the node's launcher in its
    run's timeline.json, and kept in the node's part of the job's record."""

    worker: int
    warm: bool
    waited_s: float | None = None
    reason: str | None = None
    # A standby taken while it still imported: how long the job waited for the rest.
    imports_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        said = {
            "worker": self.worker,
            "start": "warm" if self.warm else "cold",
            "waited_s": None if self.waited_s is None else round(self.waited_s, 3),
            "reason": self.reason,
        }
        return said if self.imports_s is None else {**said, "imports_s": round(self.imports_s, 3)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerStart:
        return cls(
            worker=_opt_int(data.get("worker")) or 0,
            warm=data.get("start") == "warm",
            waited_s=_opt_float(data.get("waited_s")),
            reason=_opt_str(data.get("reason")),
            imports_s=_opt_float(data.get("imports_s")),
        )


_NODE_KEYS = (
    "node",
    "state",
    "exit_code",
    "meaning",
    "ended_reason",
    "last_output_at",
    "ended_at",
    "tail_at_end",
    "interrupted",
    "workers",
)


@dataclass(frozen=True)
class NodeResult:
    """One node's part of the job's current attempt, as the head saw it."""

    node: int
    state: str = "starting"  # starting, running, ended
    exit_code: int | None = None  # None once ended: its agent went away (the node lost)
    meaning: str = ""
    ended_reason: str = ""  # why the job ended this node ("" when it ended by itself)
    last_output_at: float | None = None
    ended_at: float | None = None
    tail_at_end: tuple[str, ...] | None = None
    interrupted: Interruption | None = None  # its Spot interruption notice
    # How each of its workers started (warm or cold); empty until its launcher said.
    workers: tuple[WorkerStart, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.state == "ended"

    @property
    def vanished(self) -> bool:
        """Ended without an exit code: its agent went away."""
        return self.ended and self.exit_code is None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeResult:
        tail = data.get("tail_at_end")
        interrupted = data.get("interrupted")
        return cls(
            node=_opt_int(data.get("node")) or 0,
            state=str(data.get("state") or "starting"),
            exit_code=_opt_int(data.get("exit_code")),
            meaning=str(data.get("meaning") or ""),
            ended_reason=str(data.get("ended_reason") or ""),
            last_output_at=_opt_float(data.get("last_output_at")),
            ended_at=_opt_float(data.get("ended_at")),
            tail_at_end=tuple(str(line) for line in tail) if isinstance(tail, list) else None,
            interrupted=Interruption.from_dict(interrupted)
            if isinstance(interrupted, Mapping)
            else None,
            workers=worker_starts(data.get("workers")),
            extra=_extra(data, _NODE_KEYS),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "state": self.state,
            "exit_code": self.exit_code,
            "meaning": self.meaning,
            "ended_reason": self.ended_reason,
            "last_output_at": self.last_output_at,
            "ended_at": self.ended_at,
            "tail_at_end": None if self.tail_at_end is None else list(self.tail_at_end),
            "interrupted": None if self.interrupted is None else self.interrupted.to_dict(),
            # Only once its launcher said (a record written before this key reads back as is).
            **({"workers": [w.to_dict() for w in self.workers]} if self.workers else {}),
            **self.extra,
        }


# The keys `skyinfra run` hands the supervisor (--meta) that the record keeps as they came.
_META_KEYS = ("entry", "args", "started_by", "nodes_total", "checkpoints", "env", "secrets")
_RECORD_KEYS = (
    "schema",
    "id",
    *_META_KEYS,
    "state",
    "created_at",
    "started_at",
    "ended_at",
    "timeout_s",
    "first_failure",
    "timed_out",
    "supervisor_pid",
    "saved_at",
    "attempt",
    "max_restarts",
    "retry_on",
    "restarts_left",
    "attempts",
    "needs_nodes",
    "head_recovery",
    "interruptions",
    "queue",
    "priority",
    "seq",
    "preemptions",
    "ports",
    "world",
    "named_nodes",
    "nodes_asked",
    "nodes",
    "checked_at",
    "ended_by_down",
)


@dataclass(frozen=True)
class JobRecord:
    """A job as its head's supervisor records it."""

    id: str
    state: JobState = JobState.STARTING
    schema: int = SCHEMA
    # What was started, and by whom (the operator's --meta).
    entry: str = ""
    args: tuple[str, ...] = ()
    started_by: str = ""
    nodes_total: int = 0
    checkpoints: str = ""  # the job's checkpoint set ("" in records older than sets)
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # names only: the values never reach a record
    # When it was first created (kept across attempts: --timeout counts from it), when its
    # first attempt ran on every node, and when it ended.
    created_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    timeout_s: float | None = None
    first_failure: int | None = None  # the node whose failure ended the current attempt
    timed_out: tuple[int, ...] = ()  # the nodes --timeout ended
    supervisor_pid: int | None = None
    # Rewritten at least every second while an attempt runs: a follower that sees it stand
    # still asks the head whether the supervisor still lives.
    saved_at: float | None = None
    attempt: int = 1
    max_restarts: int = 0
    retry_on: str = "signal"
    restarts_left: int = 0
    attempts: tuple[Attempt, ...] = ()
    needs_nodes: tuple[int, ...] = ()  # lost nodes the operator is to replace
    # Node 0's unattended recovery of the job (jobs/recovery.py).
    head_recovery: HeadRecoveryRun | None = None
    # Every Spot interruption notice of the job, earlier attempts' included.
    interruptions: tuple[Interruption, ...] = ()
    # Its wait in the head's queue (None: it started at once; records older than the queue).
    queue: QueueWait | None = None
    # `run --priority N` (0 by default; higher goes first and may preempt lower, jobprio.py),
    # its place in the head's submission order (None: records older than priorities), and
    # how often a higher-priority job preempted it (never counted against --max-restarts).
    priority: int = 0
    seq: int | None = None
    preemptions: int = 0
    # Its own coordinator and rendezvous ports, given out by the head when it started the job
    # (None: not started yet, or a record older than them: the topology's head_port).
    ports: JobPorts | None = None
    # The cluster's nodes the job runs on, its rank 0's first (`run --nodes K`: the K the
    # head chose as it started the job; () before it started, and in older records: every
    # node). Only these are in ``nodes``.
    world: tuple[int, ...] = ()
    # The nodes it named (`run --nodes 0,2`, the API's nodes=[0, 2]), in rank order, from its
    # submission on: a recovery starts it on those again. (): any free ones, or every node.
    named_nodes: tuple[int, ...] = ()
    # How many nodes `run --nodes K` asked for, from its submission on (a job lost while
    # queued has no world yet): a recovery asks for K again. None: every node, or named ones.
    nodes_asked: int | None = None
    nodes: tuple[NodeResult, ...] = ()
    # The head's time when its `jobs` listed the record (never written by the supervisor).
    checked_at: float | None = None
    # The operator's copy of a job (runs/<id>/job.json) that `down` ended with the cluster.
    ended_by_down: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def queued(self) -> bool:
        """It waits in the head's queue: queued, or preempted and waiting to resume."""
        return self.state in (JobState.QUEUED, JobState.PREEMPTED)

    @property
    def preempting(self) -> bool:
        """A higher-priority job asked for its nodes: its attempt ends, then it waits in the
        queue (``preempted``) to resume."""
        return not self.final and bool(self.attempts) and self.attempts[-1].preempted_by is not None

    def node(self, index: int) -> NodeResult | None:
        for n in self.nodes:
            if n.node == index:
                return n
        return None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobRecord:
        """The record ``data`` (JSON as any version wrote it). ValueError when it is not a
        record at all (not an object, no id, or a state no version has written)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a job record must be a JSON object, got {type(data).__name__}")
        job_id = data.get("id")
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job record field 'id' is {job_id!r}; expected a non-empty string")
        state = data.get("state", JobState.STARTING.value)
        try:
            job_state = JobState(state)
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise ValueError(
                f"job {job_id}: record field 'state' is {state!r}; expected one of {known}"
            ) from None
        env = data.get("env")
        secrets = data.get("secrets")
        head_recovery = data.get("head_recovery")
        nodes = data.get("nodes")
        attempts = data.get("attempts")
        queue = data.get("queue")
        ports = data.get("ports")
        return cls(
            id=job_id,
            state=job_state,
            schema=_opt_int(data.get("schema")) or SCHEMA,
            entry=str(data.get("entry") or ""),
            args=tuple(str(a) for a in data.get("args") or ()),
            started_by=str(data.get("started_by") or ""),
            nodes_total=_opt_int(data.get("nodes_total")) or 0,
            checkpoints=str(data.get("checkpoints") or ""),
            env={str(k): str(v) for k, v in env.items()} if isinstance(env, Mapping) else {},
            secrets=tuple(str(s) for s in secrets) if isinstance(secrets, list) else (),
            created_at=_opt_float(data.get("created_at")),
            started_at=_opt_float(data.get("started_at")),
            ended_at=_opt_float(data.get("ended_at")),
            timeout_s=_opt_float(data.get("timeout_s")),
            first_failure=_opt_int(data.get("first_failure")),
            timed_out=_ints(data.get("timed_out")),
            supervisor_pid=_opt_int(data.get("supervisor_pid")),
            saved_at=_opt_float(data.get("saved_at")),
            attempt=_opt_int(data.get("attempt")) or 1,
            max_restarts=_opt_int(data.get("max_restarts")) or 0,
            retry_on=str(data.get("retry_on") or "signal"),
            restarts_left=_opt_int(data.get("restarts_left")) or 0,
            attempts=tuple(Attempt.from_dict(a) for a in attempts or () if isinstance(a, Mapping))
            if isinstance(attempts, list)
            else (),
            needs_nodes=_ints(data.get("needs_nodes")),
            head_recovery=HeadRecoveryRun.from_dict(head_recovery)
            if isinstance(head_recovery, Mapping)
            else None,
            interruptions=_notices(data.get("interruptions")),
            queue=QueueWait.from_dict(queue) if isinstance(queue, Mapping) else None,
            priority=_opt_int(data.get("priority")) or 0,
            seq=_opt_int(data.get("seq")),
            preemptions=_opt_int(data.get("preemptions")) or 0,
            ports=JobPorts.from_dict(ports) if isinstance(ports, Mapping) else None,
            world=_ints(data.get("world")),
            named_nodes=_ints(data.get("named_nodes")),
            nodes_asked=_opt_int(data.get("nodes_asked")),
            nodes=tuple(NodeResult.from_dict(n) for n in nodes if isinstance(n, Mapping))
            if isinstance(nodes, list)
            else (),
            checked_at=_opt_float(data.get("checked_at")),
            ended_by_down=data.get("ended_by_down") is True,
            extra=_extra(data, _RECORD_KEYS),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "id": self.id,
            "entry": self.entry,
            "args": list(self.args),
            "started_by": self.started_by,
            "nodes_total": self.nodes_total,
            "checkpoints": self.checkpoints,
            "env": dict(self.env),
            "secrets": list(self.secrets),
            "state": self.state.value,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "timeout_s": self.timeout_s,
            "first_failure": self.first_failure,
            "timed_out": list(self.timed_out),
            "supervisor_pid": self.supervisor_pid,
            "saved_at": self.saved_at,
            "attempt": self.attempt,
            "max_restarts": self.max_restarts,
            "retry_on": self.retry_on,
            "restarts_left": self.restarts_left,
            "attempts": [a.to_dict() for a in self.attempts],
            "needs_nodes": list(self.needs_nodes),
            **(
                {"head_recovery": self.head_recovery.to_dict()}
                if self.head_recovery is not None
                else {}
            ),
            "interruptions": [i.to_dict() for i in self.interruptions],
            **({"queue": self.queue.to_dict()} if self.queue is not None else {}),
            **({"priority": self.priority} if self.priority else {}),
            **({"seq": self.seq} if self.seq is not None else {}),
            **({"preemptions": self.preemptions} if self.preemptions else {}),
            **({"ports": self.ports.to_dict()} if self.ports is not None else {}),
            **({"world": list(self.world)} if self.world else {}),
            **({"named_nodes": list(self.named_nodes)} if self.named_nodes else {}),
            **({"nodes_asked": self.nodes_asked} if self.nodes_asked is not None else {}),
            "nodes": [n.to_dict() for n in self.nodes],
            **({"checked_at": self.checked_at} if self.checked_at is not None else {}),
            **({"ended_by_down": True} if self.ended_by_down else {}),
            **self.extra,
        }


# ------------------------------------------------------------------------- field readers
# Lenient: a record is the supervisor's own output, read back by any later version; a value
# of the wrong type reads as missing rather than failing a whole listing.


def _opt_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _opt_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value  # an int stays an int: to_dict writes back what was read


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _ints(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(i for i in (_opt_int(v) for v in value) if i is not None)


def record_starts(run_dir: Path, node: int, attempt: str | None, starts: list[WorkerStart]) -> None:
    """Add an attempt's worker starts to the node's run's timeline.json (the launcher)."""
    path = run_dir / TIMELINE_FILE
    try:
        timeline = json.loads(path.read_text())
    except (OSError, ValueError):
        timeline = {"schema": 1, "node": node, "attempts": []}
    timeline["attempts"].append({"attempt": attempt, "workers": [s.to_dict() for s in starts]})
    with contextlib.suppress(OSError):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(timeline, indent=2))
        tmp.replace(path)  # whole: the node's agent reads it while the job runs


def recorded_starts(run_dir: Path, attempt: int) -> tuple[WorkerStart, ...] | None:
    """The worker starts the launcher recorded for ``attempt`` (None: not yet)."""
    try:
        timeline = json.loads((run_dir / TIMELINE_FILE).read_text())
        attempts = [a for a in timeline["attempts"] if str(a.get("attempt")) == str(attempt)]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return worker_starts(attempts[-1].get("workers")) if attempts else None


def worker_starts(value: object) -> tuple[WorkerStart, ...]:
    """A list of WorkerStart dicts as written (anything else: none)."""
    if not isinstance(value, list):
        return ()
    return tuple(WorkerStart.from_dict(w) for w in value if isinstance(w, Mapping))


def _notices(value: object) -> tuple[Interruption, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(Interruption.from_dict(v) for v in value if isinstance(v, Mapping))


def _extra(data: Mapping[str, Any], known: Sequence[str]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in known}
