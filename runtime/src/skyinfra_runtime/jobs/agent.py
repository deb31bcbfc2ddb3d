"""One node's part of a job: the agent that owns the node's launcher, and a peer's reports
to the head."""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyinfra_runtime import spot
from skyinfra_runtime.exitcodes import SETUP_FAILED
from skyinfra_runtime.jobenv import mask_bytes
from skyinfra_runtime.jobports import PORT_ENV, WORLD_ENV
from skyinfra_runtime.jobrecord import WorkerStart, recorded_starts
from skyinfra_runtime.jobs.files import Paths, now, write_json
from skyinfra_runtime.jobs.records import (
    DEAD_PEER_GRACE_S,
    END_GRACE_S,
    OUTPUT_EVERY_S,
    SCHEMA,
    TAIL_LINES,
)
from skyinfra_runtime.jobs.wire import (
    bound_silence,
    heartbeat,
    heartbeat_s,
    messages,
    send,
    silent_peer_s,
)
from skyinfra_runtime.parentdeath import AGENT_PID_ENV

# The attempt a worker belongs to (1, then 2, ... after each restart of the job: as torchrun's
# TORCHELASTIC_RESTART_COUNT), in every worker's environment.
ATTEMPT_ENV = "SKYINFRA_ATTEMPT"
# After a Spot interruption notice the job's processes get SIGTERM and until the deadline less
# this to end by themselves (saving a checkpoint): what is left is for the final checkpoint
# upload and the node's exit report before the instance goes.
PREEMPT_MARGIN_S = 10.0


@dataclass
class Agent:
    """One node's side of a job: the launcher, its log, its state, its end."""

    paths: Paths
    node: int
    argv: list[str]
    # The user's env and secrets, added to the launcher's environment (so every worker starts
    # with them, before any plugin); never written anywhere by the agent.
    env: dict[str, str] = field(default_factory=dict)
    # The secrets' values (jobenv.masks): replaced by *** in the node's log and tail.
    hidden: list[bytes] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    last_output: float | None = None
    exit_code: int | None = None
    ended_reason: str = ""
    tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=TAIL_LINES)
    )
    tail_at_end: list[str] | None = None  # the last lines when the job ended this node
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Runs just before the launcher starts (the checkpoint restore, ckptsync.py); a string it
    # returns is an error: the launcher is not started and the node's part fails with it.
    before_start: Callable[[], str | None] | None = None
    # Runs once the launcher has ended, before the node's exit is reported (the final
    # checkpoint upload): the job counts as ended only once every node's has been made.
    after_end: Callable[[], None] | None = None
    attempt: int = 1
    # The Spot interruption notice this node received (spot.py), and who is told of it (the
    # head's supervisor, or a peer's report to the head): set once, kept for every attempt.
    notice: spot.Notice | None = None
    _notice_hook: Callable[[spot.Notice], None] | None = None
    # How this attempt's workers started (warm or cold), once its launcher recorded it.
    workers: tuple[WorkerStart, ...] | None = None

    @property
    def deadline_file(self) -> Path:
        """$SKYINFRA_PREEMPT_DEADLINE of the node's workers: exists once a notice came."""
        return self.paths.run / "preempt-deadline"

    def noticed(self, notice: spot.Notice) -> None:
        """A Spot interruption notice for this node (the watcher's thread): recorded on the
        node (`skyinfra status` reads it), said in the log, and passed on to the head."""
        with self._lock:
            if self.notice is not None:
                return
            self.notice = notice
            hook = self._notice_hook
        write_json(self.paths.node_dir / spot.INTERRUPTION_FILE, notice.to_dict())
        left = notice.time - now()
        self.note(
            f"Spot interruption notice: {notice.action} at {spot.format_time(notice.time)} "
            f"({left:.0f} s from now)"
        )
        if hook is not None:
            hook(notice)

    def on_notice(self, hook: Callable[[spot.Notice], None]) -> None:
        """Who hears of this node's notice (called at once when one already came)."""
        with self._lock:
            self._notice_hook = hook
            pending = self.notice
        if pending is not None:
            hook(pending)

    def reset(self, attempt: int) -> None:
        """Ready for the job's next attempt: the same argv, env and secrets (kept in this
        agent's memory only), a fresh launcher."""
        with self._lock:
            self.attempt = attempt
            self.proc = None
            self.exit_code = None
            self.ended_reason = ""
            self.tail_at_end = None
            self.workers = None
            self.tail.clear()
        # A preempted job's deadline is over once it resumes: seconds_left() is None again.
        self.deadline_file.unlink(missing_ok=True)

    def note(self, line: str) -> None:
        """A line of skyinfra's own in the node's log (whoever follows it sees it)."""
        fd = os.open(self.paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "wb", buffering=0) as log:
            log.write(f"[skyinfra] {line}\n".encode())

    def start(self) -> None:
        argv = self.argv
        problem = self.before_start() if self.before_start is not None else None
        if problem:
            code = f"import sys; print({problem!r}, file=sys.stderr); sys.exit({SETUP_FAILED})"
            argv = [sys.executable, "-c", code]
        self.proc = subprocess.Popen(
            argv,
            env={
                **os.environ,
                **self.env,
                ATTEMPT_ENV: str(self.attempt),
                spot.DEADLINE_ENV: str(self.deadline_file),
                # The launcher ends (SIGTERM) when this agent dies, even of SIGKILL: it sets
                # that up itself (parentdeath.py), never a preexec_fn in this threaded process.
                AGENT_PID_ENV: str(os.getpid()),
            },
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: end() reaches the workers too
        )
        self.save("running")
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = os.open(self.paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "wb", buffering=0) as log:
            for raw in self.proc.stdout:
                line = mask_bytes(raw, self.hidden) if self.hidden else raw
                log.write(line)
                self.tail.append(line.decode(errors="replace").rstrip("\n"))
                self.last_output = now()

    def worker_starts(self) -> tuple[WorkerStart, ...] | None:
        """How this attempt's workers started, once the launcher recorded it (None: not yet,
        or it never will: it failed before starting them)."""
        if self.workers is None:
            self.workers = recorded_starts(self.paths.run, self.attempt)
        return self.workers

    def preempt(self, deadline: float, reason: str) -> None:
        """The node (or a peer of the job) is going away at ``deadline``: the workers find
        the deadline in $SKYINFRA_PREEMPT_DEADLINE, then get SIGTERM and until shortly
        before the deadline to save and end."""
        spot.write_deadline(self.deadline_file, deadline)
        self.end(reason, grace_s=max(END_GRACE_S, deadline - now() - PREEMPT_MARGIN_S))

    def end(self, reason: str, grace_s: float = END_GRACE_S) -> None:
        """SIGTERM the launcher's group, SIGKILL after ``grace_s``; idempotent."""
        with self._lock:
            if self.proc is None or self.ended_reason:
                return
            self.ended_reason = reason
            self.tail_at_end = list(self.tail)
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace_s)
        # The leader may be gone while a worker of it lingers in the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    def poll(self) -> int | None:
        if self.proc is None or self.exit_code is not None:
            return self.exit_code
        code = self.proc.poll()
        if code is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # nothing of it outlives it
            self.exit_code = code
        return code

    def save(self, state: str) -> None:
        write_json(
            self.paths.node_state,
            {
                "schema": SCHEMA,
                "job": self.paths.job_id,
                "node": self.node,
                "state": state,
                "exit_code": self.exit_code,
                "ended_reason": self.ended_reason,
                "last_output_at": self.last_output,
                "agent_pid": os.getpid(),
                "interrupted": self.notice.to_dict() if self.notice is not None else None,
            },
        )


def _grace(msg: dict[str, Any]) -> float:
    """The grace an "end" names, bounded by the usual one (a head without it: the usual)."""
    grace = msg.get("grace_s")
    if isinstance(grace, int | float) and not isinstance(grace, bool) and grace >= 0:
        return min(float(grace), END_GRACE_S)
    return END_GRACE_S


def report_to_head(agent: Agent, head: str, token: str, *, wait_start: bool = False) -> None:
    """A peer's agent: report to the head, end the launcher when told or when the head goes;
    when the head restarts the job, run the launcher again as the attempt it names (the env
    and secrets are those this agent read on its stdin: they never travel again).
    ``wait_start``: the launcher starts when the head says "start" (at once for a job the
    head started, once its turn came for a queued one), with the job's ports; never when it
    says "done" or goes (cancelled in the queue)."""
    host, _, port = head.rpartition(":")
    sock = None
    until = now() + 30
    while sock is None:
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            if now() > until:
                raise
            time.sleep(0.2)
    # A head whose host vanished (no FIN, no reset) is gone once it said nothing for the
    # bound (wire.py): this node's launcher is ended then, not left waiting for ever.
    bound = silent_peer_s()
    bound_silence(sock, bound)
    # The head's "start" of a next attempt (its number), or None: the job is over.
    starts: queue.Queue[int | None] = queue.Queue()

    def report(msg: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            send(sock, msg)

    report({"node": agent.node, "token": token, "waiting": wait_start})
    beating = heartbeat(sock, {"event": "alive"}, heartbeat_s(bound))
    agent.on_notice(lambda notice: report({"event": "notice", **notice.to_dict()}))

    def listen() -> None:
        reason = "the job's supervisor on the head went away"
        try:
            for msg in messages(sock):
                cmd = msg.get("cmd")
                # One connection, in order: an attempt's "end" always comes before the next
                # attempt's "start", so it never reaches the next launcher.
                if cmd == "end" and msg.get("attempt", agent.attempt) == agent.attempt:
                    reason = str(msg.get("reason") or "ended by the job")
                    deadline = msg.get("deadline")
                    if isinstance(deadline, (int, float)):  # a node of the job is going away
                        agent.preempt(float(deadline), reason)
                    else:
                        agent.end(reason, _grace(msg))
                elif cmd == "start":
                    port, world = msg.get("port"), msg.get("world")
                    if isinstance(port, int) and not isinstance(port, bool):
                        agent.env[PORT_ENV] = str(port)  # the job's own ports (jobports)
                    if isinstance(world, list):  # the job's nodes (`run --nodes K`)
                        agent.env[WORLD_ENV] = ",".join(str(i) for i in world)
                    starts.put(int(msg.get("attempt", agent.attempt + 1)))
                elif cmd == "done":
                    starts.put(None)
                    return
        except TimeoutError:
            reason = f"no word from the job's supervisor on the head for {bound:g} s"
        except OSError:
            pass
        # The head is gone (or cut off, and then its supervisor ends the job anyway): a worker
        # in a collective with it can never finish, so no clean-stop grace.
        agent.end(reason, DEAD_PEER_GRACE_S)
        starts.put(None)

    def on_term(signum: int, frame: object) -> None:
        threading.Thread(target=agent.end, args=("SIGTERM to its agent",), daemon=True).start()
        starts.put(None)  # a queued job's peer, waiting for its start: it never starts

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    threading.Thread(target=listen, daemon=True).start()
    first = starts.get() if wait_start else agent.attempt
    if first is not None and first != agent.attempt:
        agent.reset(first)
    while first is not None:
        agent.start()
        report({"event": "started", "attempt": agent.attempt})
        said, said_at = None, 0.0
        told_workers = False

        def tell_workers() -> bool:
            workers = agent.worker_starts()
            if workers is not None:
                listed = [w.to_dict() for w in workers]
                report({"event": "workers", "workers": listed, "attempt": agent.attempt})
            return workers is not None

        while (code := agent.poll()) is None:
            if agent.last_output != said and now() - said_at >= min(OUTPUT_EVERY_S, 0.2):
                said, said_at = agent.last_output, now()
                report({"event": "output", "t": said})
            told_workers = told_workers or tell_workers()
            # The exit is seen within 50 ms (a death reaches the head, and the job's restart
            # starts, that much sooner); output times still go at most five times a second.
            time.sleep(0.05)
        told_workers = told_workers or tell_workers()
        if agent.after_end is not None:
            agent.after_end()
        report({"event": "exit", "code": code, "tail": agent.tail_at_end, "attempt": agent.attempt})
        attempt = starts.get()
        if attempt is None or agent.ended_reason == "SIGTERM to its agent":
            break
        agent.reset(attempt)
        agent.note(f"attempt {attempt} starts on this node (the job was restarted)")
    beating.set()
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    sock.close()
