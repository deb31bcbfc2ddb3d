"""Jobs that outlive the operator: ``skyinfra-runtime supervise``, ``logs``, ``cancel``, ``jobs``.

A job is one run of ENTRY on every node. On each node an *agent* (``supervise``) owns that
node's launcher: it detaches from whoever started it (double fork, its own session, stdio to
files, a pid file), so neither ``skyinfra`` nor the SSH channel that started it can end it by
going away. The agent keeps the node's full log in the run directory (``output.log``) and its
state in ``node.json``.

The agent on node 0 (the head) is the job's supervisor. The operator starts it first; it
listens on the head's private address (an ephemeral port, a per-job token) and the operator
then starts one agent per peer, told where the head listens. Peers report to the head over
that TCP connection (started, last output time, exit code) and end their launcher when the
head says so or when the connection drops. This needs nothing the cluster does not already
have on both targets (the nodes reach the head's address for the frameworks' rendezvous, and
the operator already reaches every node), where reaching peers from the head would need SSH
keys on the head. The supervisor enforces fail-fast (the first failing node ends the others)
and the timeout, and records the job in ``<head node dir>/jobs/<id>.json`` (atomic writes,
0600).

Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyinfra_runtime import exitcodes

TOKEN_ENV = "SKYINFRA_JOB_TOKEN"
SCHEMA = 1
# Ending a node: SIGTERM to its launcher's process group, SIGKILL after this many seconds
# (frameworks blocked in a collective ignore SIGTERM): the others end within 5 s of a failure.
END_GRACE_S = 3.0
# How long the head waits for every peer to report in before it counts the missing as failed.
JOIN_WAIT_S = 60.0
# Lines of a node's output kept for the operator when the job ends it (shown as they were
# before the SIGTERM, not the traceback the SIGTERM itself prints).
TAIL_LINES = 20
# How often a node's last-output time reaches the head and the record (at most).
OUTPUT_EVERY_S = 1.0
FINAL_STATES = ("succeeded", "failed", "cancelled", "timed_out")


def now() -> float:
    return time.time()


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` atomically (a reader sees the old or the new file), private (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: tells a live process from an unrelated one reusing its pid.
    None when it is gone, or a zombie nobody reaped (where no init reaps orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else None


def pid_alive(pid_file: Path) -> int | None:
    """The pid recorded in ``pid_file`` ("PID START") when that very process still runs."""
    try:
        pid_s, _, start = pid_file.read_text().strip().partition(" ")
        pid = int(pid_s)
    except (OSError, ValueError):
        return None
    now_start = _start_time(pid)
    if now_start is None or (start and now_start != start):
        return None
    return pid


# ---------------------------------------------------------------------------- the agent


@dataclass
class Paths:
    node_dir: Path
    job_id: str

    @property
    def run(self) -> Path:
        return self.node_dir / "runs" / self.job_id

    @property
    def log(self) -> Path:
        return self.run / "output.log"

    @property
    def node_state(self) -> Path:
        return self.run / "node.json"

    @property
    def agent_log(self) -> Path:
        return self.run / "agent.log"

    @property
    def pid_file(self) -> Path:
        # Named like the run: rundirs never prunes the directory of a run whose agent lives.
        return self.node_dir / "pids" / f"{self.job_id}.pid"

    @property
    def record(self) -> Path:
        return self.node_dir / "jobs" / f"{self.job_id}.json"


@dataclass
class Agent:
    """One node's side of a job: the launcher, its log, its state, its end."""

    paths: Paths
    node: int
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    last_output: float | None = None
    exit_code: int | None = None
    ended_reason: str = ""
    tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=TAIL_LINES)
    )
    tail_at_end: list[str] | None = None  # the last lines when the job ended this node
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: end() reaches the workers too
            preexec_fn=_end_with_parent,
        )
        self.save("running")
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = os.open(self.paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "wb", buffering=0) as log:
            for line in self.proc.stdout:
                log.write(line)
                self.tail.append(line.decode(errors="replace").rstrip("\n"))
                self.last_output = now()

    def end(self, reason: str) -> None:
        """SIGTERM the launcher's group, SIGKILL after the grace; idempotent."""
        with self._lock:
            if self.proc is None or self.ended_reason:
                return
            self.ended_reason = reason
            self.tail_at_end = list(self.tail)
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(END_GRACE_S)
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
            },
        )


def _end_with_parent() -> None:
    """In the launcher, before exec: SIGTERM when its agent dies (even of SIGKILL), so a
    launcher never outlives the agent that owns it (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.sendall((json.dumps(msg) + "\n").encode())


def _messages(sock: socket.socket) -> Any:
    with sock.makefile("r", encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                return


# -------------------------------------------------------------------------- the head


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

    def __init__(self, agent: Agent, nodes: int, meta: dict[str, Any], timeout_s: float | None):
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
        self.token = os.environ.get(TOKEN_ENV, "")

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
            for msg in _messages(conn):
                if node is None:
                    i = msg.get("node")
                    if msg.get("token") != self.token or i not in self.view or i == 0:
                        return
                    node = int(i)
                    self.view[node].conn = conn
                    if self.ending:  # joined after the job began to end
                        _send(conn, {"cmd": "end", "reason": self.ending})
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
                    v.last_output_at = msg.get("t")
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
                    _send(v.conn, {"cmd": "end", "reason": reason})

    def _final_state(self) -> str:
        if self.first_failure is not None:
            return "failed"
        if self.timed_out:
            return "timed_out"
        if self.ending == "cancelled":
            return "cancelled"
        return "succeeded"


def _peer_agent(agent: Agent, head: str) -> None:
    """A peer's agent: report to the head, end the launcher when told or when the head goes."""
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
    sock.settimeout(None)
    lock = threading.Lock()

    def send(msg: dict[str, Any]) -> None:
        with lock, contextlib.suppress(OSError):
            _send(sock, msg)

    send({"node": agent.node, "token": os.environ.get(TOKEN_ENV, "")})

    def listen() -> None:
        reason = "the job's supervisor on the head went away"
        with contextlib.suppress(OSError):
            for msg in _messages(sock):
                if msg.get("cmd") == "end":
                    reason = str(msg.get("reason") or "ended by the job")
                    break
        agent.end(reason)

    def on_term(signum: int, frame: object) -> None:
        threading.Thread(target=agent.end, args=("SIGTERM to its agent",), daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    agent.start()
    send({"event": "started"})
    threading.Thread(target=listen, daemon=True).start()
    said = None
    while (code := agent.poll()) is None:
        if agent.last_output != said:
            said = agent.last_output
            send({"event": "output", "t": said})
        time.sleep(min(OUTPUT_EVERY_S, 0.2))
    send({"event": "exit", "code": code, "tail": agent.tail_at_end})
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        sock.recv(1)  # the head closes once it has read the exit
    sock.close()


def _daemonize(paths: Paths) -> int | None:
    """Detach: the caller gets the read end of a pipe the daemon writes its first line to (its
    pid and port) and returns None in the daemon. Two forks and setsid: no controlling
    terminal, not a child of the SSH channel or of skyinfra."""
    r, w = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(w)
        os.waitpid(pid, 0)
        return r
    os.close(r)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.environ["SKYINFRA_JOB_READY_FD"] = str(w)
    paths.run.mkdir(parents=True, exist_ok=True)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(paths.agent_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    return None


def _ready(msg: dict[str, Any]) -> None:
    w = int(os.environ.pop("SKYINFRA_JOB_READY_FD"))
    os.write(w, (json.dumps(msg) + "\n").encode())
    os.close(w)


def supervise(ns: argparse.Namespace) -> int:
    paths = Paths(Path(ns.node_dir), ns.job)
    argv = list(ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv)
    if not argv:
        print("skyinfra-runtime supervise: no launcher command after --", file=sys.stderr)
        return exitcodes.USAGE
    if ns.node != 0 and not ns.head:
        print("skyinfra-runtime supervise: a peer needs --head HOST:PORT", file=sys.stderr)
        return exitcodes.USAGE
    server = None
    listen = ns.listen
    if ns.node == 0:
        try:
            server = socket.create_server((listen, 0))
        except OSError:
            # An address this machine does not have: an emulated node (AWS faked on this
            # machine), whose peers are on loopback too. The operator tells peers what we say.
            listen = "127.0.0.1"
            server = socket.create_server((listen, 0))
    r = _daemonize(paths)
    if r is not None:  # the caller: say what the daemon said, then go
        if server is not None:
            server.close()
        with os.fdopen(r, "rb") as f:
            line = f.readline().decode()
        if not line:
            print(f"skyinfra-runtime: the agent did not start; see {paths.agent_log}")
            return exitcodes.SETUP_FAILED
        print(line, end="", flush=True)
        return exitcodes.OK
    try:
        agent = Agent(paths, ns.node, argv)
        paths.pid_file.parent.mkdir(parents=True, exist_ok=True)
        write_json(paths.node_state, {"node": ns.node, "state": "starting"})
        pid_tmp = paths.pid_file.with_name(f".{paths.pid_file.name}.tmp")
        fd = os.open(pid_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()} {_start_time(os.getpid()) or ''}\n")
        os.replace(pid_tmp, paths.pid_file)
        if server is not None:
            meta = json.loads(ns.meta) if ns.meta else {}
            sup = Supervisor(agent, ns.nodes, meta, ns.timeout)
            sup.save()
            threading.Thread(target=sup.serve, args=(server,), daemon=True).start()
            _ready({"pid": os.getpid(), "host": listen, "port": server.getsockname()[1]})
            sup.run()
            server.close()
        else:
            _ready({"pid": os.getpid()})
            _peer_agent(agent, ns.head)
    finally:
        paths.pid_file.unlink(missing_ok=True)
        # Last: a follower that sees "ended" finds nothing of the node's part left.
        agent.save("ended")
    return exitcodes.OK


# ----------------------------------------------------------------- the operator's asks


def logs(ns: argparse.Namespace) -> int:
    """Print a node's log of a job (the last ``--tail`` lines); ``--follow``: go on until the
    node's agent has ended and its output is all out."""
    paths = Paths(Path(ns.node_dir), ns.job)
    log = paths.log
    out = sys.stdout.buffer
    with contextlib.suppress(BrokenPipeError):
        if ns.tail is not None and log.is_file():
            lines = log.read_bytes().splitlines(keepends=True)
            start = sum(len(line) for line in lines[: max(0, len(lines) - ns.tail)])
        else:
            start = 0
        pos = start
        while True:
            done = (read_json(paths.node_state) or {}).get("state") == "ended"
            if not ns.follow and not done:
                done = True
            if log.is_file():
                with log.open("rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                # Whole lines only while the node still writes; the rest at the end.
                cut = len(chunk) if done else chunk.rfind(b"\n") + 1
                out.write(chunk[:cut])
                out.flush()
                pos += cut
            if done:
                return exitcodes.OK
            time.sleep(0.2)
    return exitcodes.OK


def cancel(ns: argparse.Namespace) -> int:
    """End the job: SIGTERM to its supervisor, which ends every node (TERM, then KILL after
    the grace); wait until the supervisor is gone. Prints the record's final state."""
    paths = Paths(Path(ns.node_dir), ns.job)
    pid = pid_alive(paths.pid_file)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        until = now() + ns.wait
        while pid_alive(paths.pid_file) == pid and now() < until:
            time.sleep(0.1)
        if pid_alive(paths.pid_file) == pid:
            print(f"skyinfra-runtime: the job's supervisor {pid} still runs", file=sys.stderr)
            return exitcodes.USER_FAILED
    record = read_json(paths.record) or {}
    print(json.dumps({"was_running": pid is not None, "state": record.get("state")}))
    return exitcodes.OK


def list_jobs(ns: argparse.Namespace) -> int:
    """Every job record on this node (the head), as one JSON list; a record whose supervisor
    died without finishing it says so (state "lost")."""
    root = Path(ns.node_dir)
    out = []
    for path in sorted((root / "jobs").glob("*.json")):
        rec = read_json(path)
        if not isinstance(rec, dict):
            continue
        if (
            rec.get("state") not in FINAL_STATES
            and pid_alive(Paths(root, str(rec.get("id"))).pid_file) is None
        ):
            rec["state"] = "lost"
        out.append(rec)
    print(json.dumps(out))
    return exitcodes.OK


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="skyinfra-runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    sup = sub.add_parser("supervise", help="run one node's part of a job, detached")
    sup.add_argument("--job", required=True)
    sup.add_argument("--node-dir", required=True)
    sup.add_argument("--node", type=int, required=True)
    sup.add_argument("--nodes", type=int, default=1, help="nodes in the job (head only)")
    sup.add_argument("--listen", default="127.0.0.1", help="the head's address (head only)")
    sup.add_argument("--head", help="HOST:PORT of the job's supervisor (peers)")
    sup.add_argument("--timeout", type=float, default=None)
    sup.add_argument("--meta", help="JSON recorded with the job (head only)")
    sup.add_argument("argv", nargs=argparse.REMAINDER)
    lg = sub.add_parser("logs", help="a node's log of a job")
    lg.add_argument("--job", required=True)
    lg.add_argument("--node-dir", required=True)
    lg.add_argument("--follow", action="store_true")
    lg.add_argument("--tail", type=int, default=None)
    ca = sub.add_parser("cancel", help="end a job (on the head)")
    ca.add_argument("--job", required=True)
    ca.add_argument("--node-dir", required=True)
    ca.add_argument("--wait", type=float, default=30.0)
    jb = sub.add_parser("jobs", help="the job records (on the head), as JSON")
    jb.add_argument("--node-dir", required=True)
    ns = parser.parse_args(argv)
    handler = {"supervise": supervise, "logs": logs, "cancel": cancel, "jobs": list_jobs}
    return handler[ns.command](ns)
