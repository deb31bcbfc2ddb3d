"""The head's agent: the job's supervisor (fail-fast, timeout, the record)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import threading
from dataclasses import dataclass
from typing import Any

from skyinfra_runtime import exitcodes
from skyinfra_runtime.jobs.agent import Agent
from skyinfra_runtime.jobs.records import (
    JOIN_WAIT_S,
    OUTPUT_EVERY_S,
    SCHEMA,
    now,
    write_json,
)
from skyinfra_runtime.jobs.wire import messages, send


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
    ):
        self.agent = agent
        self.events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        self.view = {i: NodeView(i) for i in range(nodes)}
        self.meta = meta
        self.timeout_s = timeout_s
        self.state = "starting"
        self.created_at = now()
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.first_failure: int | None = None
        self.timed_out: list[int] = []
        self.ending = ""  # why the supervisor is ending every node ("" while it is not)
        self.cancel = threading.Event()
        self.token = token

    def record(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "id": self.agent.paths.job_id,
            **self.meta,
            "state": self.state,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "timeout_s": self.timeout_s,
            "first_failure": self.first_failure,
            "timed_out": self.timed_out,
            "supervisor_pid": os.getpid(),
            "nodes": [
                {
                    "node": v.node,
                    "state": v.state,
                    "exit_code": v.exit_code,
                    "meaning": exitcodes.describe(v.exit_code) if v.state == "ended" else "",
                    "ended_reason": v.ended_reason,
                    "last_output_at": v.last_output_at,
                    "ended_at": v.ended_at,
                    "tail_at_end": v.tail_at_end,
                }
                for v in self.view.values()
            ],
        }

    def save(self) -> None:
        write_json(self.agent.paths.record, self.record())

    def serve(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._peer, args=(conn,), daemon=True).start()

    def _peer(self, conn: socket.socket) -> None:
        node = None
        try:
            for msg in messages(conn):
                if node is None:
                    i = msg.get("node")
                    if msg.get("token") != self.token or i not in self.view or i == 0:
                        return
                    node = int(i)
                    self.view[node].conn = conn
                    if self.ending:  # joined after the job began to end
                        send(conn, {"cmd": "end", "reason": self.ending})
                    continue
                self.events.put((str(msg.get("event")), node, msg))
        except OSError:
            pass
        finally:
            if node is not None:
                self.events.put(("lost", node, None))
            conn.close()

    def run(self) -> None:
        self.agent.start()
        self.view[0].state = "running"
        self.save()
        signal.signal(signal.SIGTERM, lambda *_: self.cancel.set())
        signal.signal(signal.SIGINT, lambda *_: self.cancel.set())
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        join_by = now() + JOIN_WAIT_S
        last_save = 0.0
        while any(v.state != "ended" for v in self.view.values()):
            changed = self._take_events()
            code = self.agent.poll()
            head = self.view[0]
            if code is not None and head.state != "ended":
                self._ended(0, code, self.agent.tail_at_end)
                changed = True
            head.last_output_at = self.agent.last_output
            if self.state == "starting" and all(v.state != "starting" for v in self.view.values()):
                self.state, self.started_at, changed = "running", now(), True
            if self.cancel.is_set() and not self.ending:
                self._end_all("cancelled")
                changed = True
            if self.state == "starting" and now() > join_by and not self.ending:
                missing = [v for v in self.view.values() if v.state == "starting"]
                for v in missing:
                    v.state, v.ended_reason = "ended", "never reported in"
                self.first_failure = missing[0].node
                self._end_all(f"after a node never reported in within {JOIN_WAIT_S:g} s")
                changed = True
            deadline = self.timeout_s and self.created_at + self.timeout_s
            if deadline and now() >= deadline and not self.ending:
                self.timed_out = [v.node for v in self.view.values() if v.state != "ended"]
                self._end_all(f"at --timeout {self.timeout_s:g} s")
                changed = True
            if changed or now() - last_save >= OUTPUT_EVERY_S:
                self.save()
                last_save = now()
        if self.agent.after_end is not None:
            self.agent.after_end()  # the head's final checkpoint upload, before the record ends
        self.ended_at = now()
        self.state = self._final_state()
        self.save()

    def _take_events(self) -> bool:
        changed = False
        try:
            while True:
                event, node, msg = self.events.get(timeout=0.1)
                v = self.view[node]
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
                    changed = True
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
            self.first_failure = node
            self._end_all(f"after node-{node} failed")

    def _end_all(self, reason: str) -> None:
        """Every node still running is ended at once: peers told, the head's own launcher in a
        thread of its own (the grace runs in parallel)."""
        self.ending = reason
        for v in self.view.values():
            if v.state == "ended":
                continue
            if v.node == 0:
                threading.Thread(target=self.agent.end, args=(reason,), daemon=True).start()
            elif v.conn is not None:
                with contextlib.suppress(OSError):
                    send(v.conn, {"cmd": "end", "reason": reason})

    def _final_state(self) -> str:
        if self.first_failure is not None:
            return "failed"
        if self.timed_out:
            return "timed_out"
        if self.ending == "cancelled":
            return "cancelled"
        return "succeeded"
