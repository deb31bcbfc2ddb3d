"""The head's agent: the job's supervisor (fail-fast, timeout, restarts, the record).

Restarts (``--max-restarts N``): once every node of an attempt has ended, a failure whose
cause may pass (a worker or launcher killed by a signal: the OOM killer's SIGKILL, a kill -9;
with ``--retry-on error`` also a non-zero exit of the user's code) starts the same job again
as the next attempt on the same nodes: the head's launcher here, each peer's by a "start" on
its connection (the peer's agent kept its argv, env and secrets in memory: nothing is written
or sent again). A node whose agent is gone cannot be restarted from here (the head has no way
to start processes on peers): the job ends.

A Spot interruption notice on a node (its agent's watcher, spot.py) ends the attempt at once:
every node's workers get SIGTERM and until shortly before the notice's time to save (the
deadline in $SKYINFRA_PREEMPT_DEADLINE), then the interrupted node counts as lost (it is going
away): the operator replaces it and starts the next attempt, as for any lost node.

The queue: a job submitted while the nodes it asks for are held by other jobs (or while jobs
wait ahead of it) is ``queued``. Its agents are all started (the operator started them, then
may go) and idle: the peers' agents are connected and wait for the head's "start". The
supervisor looks every QUEUE_POLL_S, under the head's start lock, whether its turn came (its K
nodes are free and no live queued job was submitted before it): then it leaves the queue,
starts its launcher and tells its peers to start theirs, as a restart does. Cancelled while
queued (SIGTERM, as for any job): it ends ``cancelled`` without ever starting, and its peers'
agents go.

Priorities (``run --priority N``, jobprio.py): the queue's order is higher priority first,
then submission order. The first job in that order that cannot start asks the fewest running
jobs of a lower priority to give up their nodes (jobs/preemption.py); each such job's attempt
ends as for a Spot notice (SIGTERM and the time left to save, the final checkpoint upload),
its state is ``preempted`` and it waits in the queue at its place, then resumes on the same
nodes (its peers' agents wait there, and on AWS each node's checkpoint folder) as its next
attempt, which spends no restart.

Every job, queued or not, gets its nodes (``run --nodes K``: K of the cluster's, jobplace.py)
and its own ports (jobports.py) as it starts (take_start); every peer waits for the head's
"start", which carries them; a peer not among the K gets "done" and goes, and the head's own
launcher starts only when node 0 is among them. A job started at once has peers' agents on
its K nodes alone (the operator reads them in the head's ready line and starts no other: the
others count as ended, "not in the job"). The record's nodes are the K.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import threading
from dataclasses import dataclass, replace
from typing import Any

from skyinfra_runtime import exitcodes
from skyinfra_runtime.jobplace import nodes_words, waits_for
from skyinfra_runtime.jobports import PORT_ENV, WORLD_ENV
from skyinfra_runtime.jobprio import Waiter, ahead_of, victims
from skyinfra_runtime.jobrecord import (
    Attempt,
    HeadRecoveryRun,
    Interruption,
    JobPorts,
    JobRecord,
    JobState,
    NodeResult,
    QueueWait,
    WorkerStart,
    worker_starts,
)
from skyinfra_runtime.jobs import preemption, recovery
from skyinfra_runtime.jobs.agent import Agent
from skyinfra_runtime.jobs.files import now, write_json
from skyinfra_runtime.jobs.records import (
    DEAD_PEER_GRACE_S,
    END_GRACE_S,
    JOIN_WAIT_S,
    OUTPUT_EVERY_S,
    QUEUE_POLL_S,
    holder_jobs,
    holders,
    lock_job_starts,
    queued_jobs,
    starting,
)
from skyinfra_runtime.jobs.wire import (
    bound_silence,
    heartbeat,
    heartbeat_s,
    messages,
    send,
    silent_peer_s,
)
from skyinfra_runtime.restarts import failure_kind, worker_killed


@dataclass
class NodeView:
    node: int
    state: str = "starting"  # starting, running, ended
    exit_code: int | None = None
    ended_reason: str = ""
    last_output_at: float | None = None
    tail_at_end: list[str] | None = None
    ended_at: float | None = None
    conn: socket.socket | None = None
    workers: tuple[WorkerStart, ...] = ()  # how its workers started (warm or cold)


class Supervisor:
    """The head's agent: node 0's launcher, the peers' reports, fail-fast, timeout, record."""

    def __init__(
        self,
        agent: Agent,
        nodes: int,
        meta: dict[str, Any],
        timeout_s: float | None,
        *,
        token: str,
        max_restarts: int = 0,
        retry_on: str = "signal",
        recover: dict[str, Any] | None = None,
    ):
        self.agent = agent
        self.events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        self.view = {i: NodeView(i) for i in range(nodes)}
        self.timeout_s = timeout_s
        self.state = JobState.STARTING
        # A job started again after its head lost a node (or its supervisor) keeps the time it
        # was first created: its --timeout counts from there, across every attempt.
        created = meta.pop("created_at", None)
        self.created_at = float(created) if isinstance(created, int | float) else now()
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.first_failure: int | None = None
        self.timed_out: list[int] = []
        self.ending = ""  # why the supervisor is ending every node ("" while it is not)
        self.end_grace_s = END_GRACE_S  # the SIGTERM-to-SIGKILL grace of that ending
        self.cancel = threading.Event()
        self.token = token
        self.max_restarts = max_restarts
        self.retry_on = retry_on
        # One entry per attempt: when it started and ended, its cause, lost and recovery time;
        # a job the operator started again after a node was lost goes on from its attempts.
        before = [a for a in meta.pop("attempts_before", None) or [] if isinstance(a, dict)]
        if before and before[-1].pop("not_restarted", None):
            why = before[-1].pop("restarted_why", None) or "after replacing the lost node(s)"
            who = before[-1].pop("restarted_who", None) or "the operator"
            before[-1]["restarted_by"] = f"{who}, {why}"
        self.attempt = len(before) + 1
        self.agent.attempt = self.attempt
        self.attempts: list[dict[str, Any]] = [*before, {"attempt": self.attempt}]
        # What the operator said of the job (entry, args, env, ...), read into the record once;
        # each save fills in the rest.
        self.launched = JobRecord.from_dict({**meta, "id": self.agent.paths.job_id})
        self.failed_at: float | None = None  # when the head saw the attempt's first failure
        self.needs_nodes: list[int] = []  # lost nodes, for the operator to replace
        # Nodes with a Spot interruption notice: node -> the notice (action, time, ...).
        self.interrupted: dict[int, Interruption] = {}
        self.ending_deadline: float | None = None  # the notice's time while it ends the job
        self.start_peers = False  # a restart's peers are started after the head's launcher
        # The command that recovers the job unattended (jobs/recovery.py; None: the operator
        # does), and, once the job ended needing nodes, what the record says of its run.
        self.recover = recover
        self.head_recovery: HeadRecoveryRun | None = None
        # Its wait in the head's queue (None: it started at once, or not queued yet). Until it
        # leaves the queue its peers' agents wait for a "start" (released: they may start).
        self.queue: QueueWait | None = None
        self.released = True
        self._release_lock = threading.Lock()
        # How many of the cluster's nodes it runs on (`run --nodes K`; set by supervise),
        # which ones and its own coordinator and rendezvous ports: given when it starts
        # (take_start).
        self.want = nodes
        self.world: tuple[int, ...] = tuple(range(nodes))
        self.ports: JobPorts | None = None
        # `run --priority N`, its place in the head's submission order (set by supervise),
        # and its preemptions: a higher-priority job's ask (SIGUSR1) and who made it.
        self.priority = 0
        self.seq = 0
        # The nodes it named (the Python API's nodes=[...]), in rank order; None: any free.
        self.on: tuple[int, ...] | None = None
        # A job started again (`jobs recover`) keeps its earlier preemptions unspent.
        self.preemptions = sum(1 for a in before if a.get("preempted_by"))
        self.preempt_asked = threading.Event()
        # Before the first save makes it a holder another job may ask: SIGUSR1's default
        # action would end this process.
        signal.signal(preemption.ASK_SIGNAL, lambda *_: self.preempt_asked.set())
        self.preempted_by: preemption.Ask | None = None
        self.waited_s = 0.0  # its time in the queue, every wait (not counted by --timeout)

    def take_start(self, world: tuple[int, ...], ports: JobPorts) -> None:
        """The nodes and ports the head gave the job as it starts it (under the start lock):
        in the record, in the head's launcher's environment and in every peer's "start"; the
        cluster's other nodes are not in the job (their agents go without starting)."""
        self.world, self.ports = world, ports
        self.agent.env[PORT_ENV] = str(ports.jax)
        self.agent.env[WORLD_ENV] = ",".join(str(i) for i in world)
        for v in self.view.values():
            if v.node not in world:
                v.state, v.ended_reason, v.exit_code = "ended", "not in the job", 0

    def _start_message(self, node: int) -> dict[str, Any]:
        """A peer's "start" (with the job's ports and nodes), or "done" to a peer not in it."""
        if node not in self.world:
            return {"cmd": "done"}
        msg: dict[str, Any] = {"cmd": "start", "attempt": self.attempt}
        if self.ports is not None:
            msg.update(port=self.ports.jax, world=list(self.world))
        return msg

    def enqueue(self, queued: dict[str, Any]) -> None:
        """The head queued the job (commands.supervise, under the start lock): it waits for
        its turn before anything of it starts (``run`` then waits in ``wait_in_queue``)."""
        self.queue = QueueWait.from_dict(queued)
        self.state = JobState.QUEUED
        self.released = False

    @property
    def restarts_used(self) -> int:
        """Restarts spent: every attempt after the first but those that resumed a preempted
        job (a preemption is no failure)."""
        return self.attempt - 1 - self.preemptions

    @property
    def restarts_left(self) -> int:
        return self.max_restarts - self.restarts_used

    def record(self) -> JobRecord:
        attempts = tuple(Attempt.from_dict(a) for a in self.attempts)
        return replace(
            self.launched,
            state=self.state,
            created_at=self.created_at,
            started_at=self.started_at,
            ended_at=self.ended_at,
            timeout_s=self.timeout_s,
            first_failure=self.first_failure,
            timed_out=tuple(self.timed_out),
            supervisor_pid=os.getpid(),
            # Rewritten at least every OUTPUT_EVERY_S while an attempt runs: a follower that
            # sees it stand still asks the head whether this process still lives.
            saved_at=now(),
            attempt=self.attempt,
            max_restarts=self.max_restarts,
            retry_on=self.retry_on,
            restarts_left=self.restarts_left,
            attempts=attempts,
            needs_nodes=tuple(self.needs_nodes),
            head_recovery=self.head_recovery,
            # Every notice of the job, earlier attempts' included.
            interruptions=tuple(i for a in attempts for i in a.interruptions),
            queue=self.queue,
            priority=self.priority,
            seq=self.seq,
            preemptions=self.preemptions,
            ports=self.ports,
            world=self.world if self.ports is not None else (),
            named_nodes=self.on or (),
            nodes_asked=self.want if not self.on and self.want < len(self.view) else None,
            nodes=tuple(
                NodeResult(
                    node=v.node,
                    state=v.state,
                    exit_code=v.exit_code,
                    meaning=exitcodes.describe(v.exit_code) if v.state == "ended" else "",
                    ended_reason=v.ended_reason,
                    last_output_at=v.last_output_at,
                    ended_at=v.ended_at,
                    tail_at_end=None if v.tail_at_end is None else tuple(v.tail_at_end),
                    interrupted=self.interrupted.get(v.node),
                    workers=v.workers,
                )
                for v in self.view.values()
                if v.node in self.world
            ),
        )

    def save(self) -> None:
        write_json(self.agent.paths.record, self.record().to_dict())

    def serve(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._peer, args=(conn,), daemon=True).start()

    def _peer(self, conn: socket.socket) -> None:
        node = None
        # A peer whose host vanished (no FIN, no reset) is lost once it said nothing for the
        # bound (wire.py): the head never waits on a silent connection for ever.
        bound = silent_peer_s()
        bound_silence(conn, bound)
        beating = heartbeat(conn, {"cmd": "alive"}, heartbeat_s(bound))
        silent = False
        try:
            for msg in messages(conn):
                if msg.get("event") == "alive":
                    continue
                if node is None:
                    i = msg.get("node")
                    if msg.get("token") != self.token or i not in self.view or i == 0:
                        return
                    node = int(i)
                    with self._release_lock:
                        self.view[node].conn = conn
                        if msg.get("waiting") and self.released:
                            # A peer that joined once the job started (or left the queue):
                            # it starts at once, with the job's ports.
                            send(conn, self._start_message(node))
                    if self.ending:  # joined after the job began to end
                        send(conn, self._end_message())
                    continue
                self.events.put((str(msg.get("event")), node, msg))
        except TimeoutError:
            silent = True
        except OSError:
            pass
        finally:
            beating.set()
            if node is not None:
                if self.view[node].conn is conn:
                    self.view[node].conn = None  # gone: this node cannot be restarted
                said = {"silent_s": bound} if silent else None
                self.events.put(("lost", node, said))
            conn.close()

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.cancel.set())
        signal.signal(signal.SIGINT, lambda *_: self.cancel.set())
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.agent.on_notice(lambda notice: self.events.put(("notice", 0, notice.to_dict())))
        if self.queue is not None:
            if not self.wait_in_queue(only=self.on):
                self._cancelled_in_queue()
                return
            self.start_peers = True  # once the head's launcher runs, as a restart's
        while True:
            self._run_attempt()
            cause = self._cause()
            current = self.attempts[-1]
            if self.preempted_by is not None and cause is None:
                current.update(ended_at=now(), outcome=JobState.PREEMPTED.value)
                if self._back_in_queue():
                    continue
                break  # cancelled while it waited to resume
            current.update(
                ended_at=now(),
                outcome=self._final_state().value,
                cause=cause,
                # From the attempt's start (every node's launcher started) to the failure the
                # head saw: the most work the failure can have cost. What was really lost is
                # the work since the job's last committed checkpoint, which only the job knows.
                lost_s=_seconds(current.get("started_at"), self.failed_at),
            )
            why_not = self._why_not_restart(cause)
            if why_not is not None:
                if cause is not None:
                    current["not_restarted"] = why_not
                break
            if self._lost_nodes():
                # The head cannot start processes on another node, nor replace one: the
                # operator does (Terraform), then starts the next attempt.
                current["failed_at"] = self.failed_at
                self.needs_nodes = self._lost_nodes()
                gone = ", ".join(
                    f"node-{i} {'interrupted' if i in self.interrupted else 'lost'}"
                    for i in self.needs_nodes
                )
                who = "node-0 (unattended recovery)" if self.recover else "the operator"
                current["not_restarted"] = (
                    f"{gone}: waiting for {who} to replace it and start the next attempt"
                )
                break
            self._restart(cause or {})
        for v in self.view.values():  # the peers' agents may go
            if v.conn is not None:
                with contextlib.suppress(OSError):
                    send(v.conn, {"cmd": "done"})
        if self.agent.after_end is not None:
            self.agent.after_end()  # the head's final checkpoint upload, before the record ends
        self.ended_at = now()
        self.state = self._final_state()
        if self.state is JobState.NEEDS_NODES and self.recover is not None:
            # Run by the caller once this agent's part is gone (commands.supervise).
            self.head_recovery = HeadRecoveryRun(
                by="node-0",
                state="running",
                started_at=now(),
                log=str(recovery.log_path(self.agent.paths)),
            )
        self.save()

    def wait_in_queue(self, only: tuple[int, ...] | None = None) -> bool:
        """Wait until this queued job's turn: True once it left the queue (state starting,
        written under the start lock, so that a job submitted meanwhile queues behind it);
        False when it was cancelled first. Its position and what it waits for are rewritten
        in the record whenever they change. At the head of the queue and unable to start, it
        preempts lower-priority jobs (jobprio.victims). ``only``: the nodes it needs (a
        preempted job resumes on its own)."""
        assert self.queue is not None
        node_dir, me = self.agent.paths.node_dir, self.agent.paths.job_id
        while not self.cancel.is_set():
            lock = lock_job_starts(node_dir)
            try:
                total = len(self.view)
                held = holders(node_dir, total, but=me)
                mine = Waiter(me, self.priority, self.queue.seq)
                ahead = ahead_of(mine, queued_jobs(node_dir, but=me))
                start = None if ahead else starting(node_dir, total, self.want, me, held, only)
                if start is not None:
                    self.take_start(*start)
                    self.queue = replace(self.queue, position=0, left_at=now())
                    self.waited_s += now() - (self.queue.queued_at or now())
                    self.state = JobState.STARTING
                    self.save()
                    return True
                leaving = () if ahead else self._preempt_for_me(total, only)
            finally:
                os.close(lock)
            words = waits_for(total, self.want, held, [w.job for w in ahead], only)
            if leaving:
                words += f"; preempting job{'s' if len(leaving) > 1 else ''} {', '.join(leaving)}"
            said = replace(
                self.queue,
                position=len(ahead) + 1,
                held_by=held[0][0] if held else None,
                waits_for=words,
            )
            if said != self.queue:
                self.queue = said
                self.save()
            self.cancel.wait(QUEUE_POLL_S)
        return False

    def _preempt_for_me(self, total: int, only: tuple[int, ...] | None) -> list[str]:
        """Under the start lock, at the head of the queue: ask the running jobs jobprio picks
        to give up their nodes; the jobs leaving for this one (asked now or before)."""
        node_dir, me = self.agent.paths.node_dir, self.agent.paths.job_id
        running = holder_jobs(node_dir, total, but=me)
        chosen = victims(total, self.want, self.priority, running, only) or ()
        for victim in chosen:
            preemption.ask(node_dir, victim, me, self.priority)
            self.agent.note(f"preempting job {victim} (a lower priority) for this job's nodes")
        return [h.job for h in running if h.leaving] + list(chosen)

    def _preempted(self) -> None:
        """A higher-priority job asked for this job's nodes: the attempt ends as for a Spot
        notice (every node's workers get SIGTERM and the time left to save)."""
        self.preempt_asked.clear()
        asked = preemption.read_ask(self.agent.paths)
        if asked is None or self.ending:
            return
        self.preempted_by = asked
        self.attempts[-1]["preempted_by"] = asked.by
        self.ending_deadline = asked.deadline
        said = f"preempted by job {asked.by} (priority {asked.priority} > {self.priority})"
        self.agent.note(f"{said}; every node's workers get SIGTERM and the time left")
        self._end_all(said)

    def _back_in_queue(self) -> bool:
        """After its preemption: the head's final checkpoint upload, ``preempted`` in the
        queue at its place, then (True) its next attempt on the same nodes once they are
        free and its turn came; False when it was cancelled meanwhile."""
        if self.agent.after_end is not None:
            self.agent.after_end()
        self.preemptions += 1
        self.state = JobState.PREEMPTED
        self.queue = QueueWait(seq=self.seq, queued_at=now())
        self.save()  # before the ask goes: the asker never sees it holding nodes, not leaving
        self.agent.paths.preempt_ask.unlink(missing_ok=True)
        if not self.wait_in_queue(only=self.world):
            self.ending = "cancelled"
            return False
        self.attempt += 1
        self.agent.note(
            f"attempt {self.attempt} resumes the job on {nodes_words(self.world)} after its "
            "preemption (no restart spent)"
        )
        self.attempts.append({"attempt": self.attempt})
        self.ending, self.first_failure, self.failed_at = "", None, None
        self.ending_deadline, self.preempted_by = None, None
        for v in self.view.values():
            if v.node in self.world:
                self.view[v.node] = NodeView(v.node, conn=v.conn)
        self.agent.reset(self.attempt)
        self.start_peers = True
        return True

    def _cancelled_in_queue(self) -> None:
        """Cancelled before its turn: nothing of it ever ran; its peers' agents go."""
        self.attempts = []
        self.ending = "cancelled"
        for v in self.view.values():
            v.state, v.ended_reason = "ended", "cancelled while queued: never started"
            v.ended_at = now()
            if v.conn is not None:
                with contextlib.suppress(OSError):
                    send(v.conn, {"cmd": "done"})
        self.state, self.ended_at = JobState.CANCELLED, now()
        self.save()

    def _timeout_from(self) -> float:
        """When --timeout starts counting: the job's creation, less its time in the queue."""
        return self.created_at + max(0.0, self.waited_s)

    def _run_attempt(self) -> None:
        """Every node's launcher of this attempt, until each has ended."""
        if self.agent.paths.preempt_ask.exists():  # asked while between attempts
            self.preempt_asked.set()
        if 0 in self.world:
            self.agent.start()
            self.view[0].state = "running"
        if self.start_peers:
            self._start_peers()
        self.save()
        join_by = now() + JOIN_WAIT_S
        last_save = 0.0
        while any(v.state != "ended" for v in self.view.values()):
            changed = self._take_events()
            code = self.agent.poll()
            head = self.view[0]
            if code is not None and head.state != "ended" and 0 in self.world:
                self._ended(0, code, self.agent.tail_at_end)
                changed = True
            head.last_output_at = self.agent.last_output
            if 0 in self.world and not head.workers:
                started = self.agent.worker_starts()
                if started:
                    head.workers, changed = started, True
            if self.state is JobState.STARTING and all(
                v.state != "starting" for v in self.view.values()
            ):
                self.state, changed = JobState.RUNNING, True
                self.started_at = self.started_at or now()
                self._attempt_started()
            if self.cancel.is_set() and not self.ending:
                self._end_all("cancelled")
                changed = True
            if self.preempt_asked.is_set():
                self._preempted()
                changed = True
            if self.state is JobState.STARTING and now() > join_by and not self.ending:
                missing = [v for v in self.view.values() if v.state == "starting"]
                for v in missing:
                    v.state, v.ended_reason = "ended", "never reported in"
                self.first_failure = missing[0].node
                self._end_all(f"after a node never reported in within {JOIN_WAIT_S:g} s")
                changed = True
            deadline = self.timeout_s and self._timeout_from() + self.timeout_s
            if deadline and now() >= deadline and not self.ending:
                self.timed_out = [v.node for v in self.view.values() if v.state != "ended"]
                self._end_all(f"at --timeout {self.timeout_s:g} s")
                changed = True
            if changed or now() - last_save >= OUTPUT_EVERY_S:
                self.save()
                last_save = now()

    def _attempt_started(self) -> None:
        current = self.attempts[-1]
        current["started_at"] = now()
        if len(self.attempts) > 1 and not self.attempts[-2].get("preempted_by"):
            before = self.attempts[-2]
            # From the failure the head saw to every node's launcher of this attempt started.
            current["recovery_s"] = _seconds(before.get("failed_at"), current["started_at"])
            self.agent.note(
                f"attempt {self.attempt} started on every node "
                f"(recovery {current['recovery_s']:.1f} s after the failure)"
            )

    def _cause(self) -> dict[str, Any] | None:
        """What ended the attempt: a worker killed by a signal if any node's was, else a node
        that was lost (its agent gone), else the first failure. The others' collectives
        often fail first, with errors of their own, and are not the cause."""
        if self.interrupted:
            node = min(self.interrupted, key=lambda i: self.interrupted[i].noticed_at or 0.0)
            notice = self.interrupted[node]
            return {
                "node": node,
                "exit_code": self.view[node].exit_code,
                "meaning": f"a Spot interruption notice ({notice.action} at {notice.time_utc})",
                "kind": "interrupted",
            }
        if self.first_failure is None:
            return None
        killed = sorted(
            (v for v in self.view.values() if worker_killed(v.exit_code)),
            key=lambda v: v.ended_at or 0.0,
        )
        lost = self._lost_nodes()
        v = killed[0] if killed else self.view[lost[0]] if lost else self.view[self.first_failure]
        return {
            "node": v.node,
            "exit_code": v.exit_code,
            "meaning": exitcodes.describe(v.exit_code),
            "kind": "lost" if v.node in lost and not killed else failure_kind(v.exit_code),
        }

    def _why_not_restart(self, cause: dict[str, Any] | None) -> str | None:
        """None when the job restarts; else why it does not (recorded with the attempt)."""
        if cause is None or self.timed_out or self.ending == "cancelled":
            return "it was not a failure" if cause is None else "it timed out or was cancelled"
        if self.restarts_used >= self.max_restarts:
            return f"no restart left (--max-restarts {self.max_restarts})"
        kind = cause["kind"]
        if kind == "error" and self.retry_on != "error":
            return "an error exit is not retried without --retry-on error"
        if 0 in self.interrupted:
            return (
                "the head (node-0) itself is interrupted: the job's record goes with it; "
                "run the job again on the same --checkpoints set"
            )
        return None

    def _restart(self, cause: dict[str, Any]) -> None:
        """The next attempt: every node's view reset, the head's launcher and every peer's
        started again (the same argv, env, secrets and checkpoint directory)."""
        self.attempts[-1]["failed_at"] = self.failed_at
        if self.agent.after_end is not None:
            self.agent.after_end()  # the head's checkpoint upload of the attempt (AWS)
        self.attempt += 1
        said = (
            f"attempt {self.attempt - 1} ended: node-{cause.get('node')} exit "
            f"{cause.get('exit_code')} ({cause.get('meaning')}); restarting the job as attempt "
            f"{self.attempt} on the same nodes ({self.restarts_left} restart(s) left after "
            "this one)"
        )
        self.agent.note(said)
        self.attempts.append({"attempt": self.attempt})
        self.state, self.ending, self.first_failure, self.failed_at = (
            JobState.STARTING,
            "",
            None,
            None,
        )
        self.ending_deadline = None
        for v in self.view.values():
            if v.node in self.world:  # the others are not in the job
                self.view[v.node] = NodeView(v.node, conn=v.conn)
        self.save()
        self.agent.reset(self.attempt)
        self.start_peers = True

    def _start_peers(self) -> None:
        """A restart's "start" to every peer, once the head's launcher runs: the peers' jax
        clients then find its coordinator listening instead of backing off and retrying."""
        self.start_peers = False
        with self._release_lock:
            self.released = True  # a queued job's peer that joins later starts at once
            for v in self.view.values():
                if v.node != 0 and v.conn is not None:
                    with contextlib.suppress(OSError):
                        send(v.conn, self._start_message(v.node))

    def _take_events(self) -> bool:
        changed = False
        try:
            while True:
                event, node, msg = self.events.get(timeout=0.1)
                v = self.view[node]
                if msg is not None and msg.get("attempt", self.attempt) != self.attempt:
                    continue  # a late word of an earlier attempt
                if event == "started" and v.state == "starting":
                    v.state, changed = "running", True
                elif event == "output":
                    # Stamped on the head's clock (the peer reports within a second of the
                    # line): a record's times compare with each other and with its "now".
                    v.last_output_at = now()
                elif event == "exit" and v.state != "ended":
                    self._ended(node, msg.get("code"), msg.get("tail"))
                    changed = True
                elif event == "lost" and v.state != "ended":
                    self._ended(node, None)
                    if msg is not None and "silent_s" in msg:
                        v.ended_reason = (
                            f"lost: no word from its agent for {msg['silent_s']:g} s "
                            "(its host stopped answering)"
                        )
                    changed = True
                elif event == "workers" and msg is not None:
                    v.workers, changed = worker_starts(msg.get("workers")), True
                elif event == "notice" and msg is not None:
                    changed = self._noticed(node, msg) or changed
        except queue.Empty:
            return changed

    def _ended(self, node: int, code: int | None, tail: list[str] | None = None) -> None:
        v = self.view[node]
        v.state, v.exit_code, v.ended_at = "ended", code, now()
        v.tail_at_end = tail
        if self.ending:
            v.ended_reason = v.ended_reason or (self.ending if code != 0 else "")
            return
        # A node that ended by itself (or whose agent was killed) is not one the job ended.
        v.ended_reason = ""
        if code != 0:
            self.first_failure, self.failed_at = node, now()
            # A dead peer (a worker killed by a signal, or its agent gone) leaves the others
            # blocked in collectives that cannot complete: they get no grace worth waiting for.
            # An exit of the user's code may leave the others able to stop cleanly: the grace.
            dead = code is None or worker_killed(code)
            grace = DEAD_PEER_GRACE_S if dead else END_GRACE_S
            self._end_all(f"after node-{node} failed", grace)

    def _noticed(self, node: int, msg: dict[str, Any]) -> bool:
        """A Spot interruption notice on ``node``: recorded, and the attempt ended with the
        time left (every node's workers save what they can before the node goes)."""
        if node in self.interrupted or not isinstance(msg.get("time"), (int, float)):
            return False
        keys = ("action", "time", "time_utc", "noticed_at")
        notice = Interruption.from_dict({k: msg[k] for k in keys if k in msg})
        if notice.noticed_at is None:
            notice = replace(notice, noticed_at=now())
        self.interrupted[node] = notice
        listed: list[dict[str, Any]] = self.attempts[-1].setdefault("interruptions", [])
        listed.append(replace(notice, node=node).to_dict())
        said = f"a Spot interruption notice on node-{node}: {notice.action} at {notice.time_utc}"
        self.agent.note(f"{said}; every node's workers get SIGTERM and the time left")
        if self.ending or all(v.state == "ended" for v in self.view.values()):
            return True
        if self.first_failure is None:
            self.first_failure, self.failed_at = node, now()
        self.ending_deadline = float(msg["time"])
        self._end_all(said)
        return True

    def _end_message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {
            "cmd": "end",
            "reason": self.ending,
            "attempt": self.attempt,
            "grace_s": self.end_grace_s,
        }
        if self.ending_deadline is not None:
            msg["deadline"] = self.ending_deadline
        return msg

    def _end_all(self, reason: str, grace_s: float = END_GRACE_S) -> None:
        """Every node still running is ended at once: peers told, the head's own launcher in a
        thread of its own (the grace runs in parallel; until the notice's deadline when a node
        is being interrupted)."""
        self.ending, self.end_grace_s = reason, grace_s
        self.attempts[-1]["end_grace_s"] = grace_s  # what the others were given, on record
        deadline = self.ending_deadline
        for v in self.view.values():
            if v.state == "ended":
                continue
            if v.node == 0:
                end = (
                    (lambda: self.agent.preempt(deadline, reason))
                    if deadline is not None
                    else (lambda: self.agent.end(reason, grace_s))
                )
                threading.Thread(target=end, daemon=True).start()
            elif v.conn is not None:
                with contextlib.suppress(OSError):
                    send(v.conn, self._end_message())

    def _lost_nodes(self) -> list[int]:
        """Peers whose agent is gone (or never came), and peers being interrupted (they are
        going away): only the operator can start them."""
        gone = {v.node for v in self.view.values() if v.node != 0 and v.conn is None}
        return sorted((gone | (set(self.interrupted) - {0})) & set(self.world))

    def _final_state(self) -> JobState:
        if self.needs_nodes:
            return JobState.NEEDS_NODES
        if self.first_failure is not None:
            return JobState.FAILED
        if self.timed_out:
            return JobState.TIMED_OUT
        if self.ending == "cancelled":
            return JobState.CANCELLED
        return JobState.SUCCEEDED


def _seconds(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 3)
