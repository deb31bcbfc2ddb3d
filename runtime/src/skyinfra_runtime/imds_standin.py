"""A local node's stand-in for EC2's instance metadata service (IMDSv2), on loopback.

The local target has no cloud to send a Spot interruption notice, so each local node runs this
small HTTP server on its own loopback address (started by the node's bootstrap, ended with the
node) and speaks what the node's watcher (spot.py) asks of the real one:

- ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` (1-21600): a token;
- ``GET /latest/meta-data/spot/instance-action`` and
  ``.../events/recommendations/rebalance``: 401 without a valid token, 404 until a notice,
  then the JSON EC2 answers;
- ``POST /skyinfra/interrupt`` with ``{"seconds": N}`` (what `skyinfra drill interrupt` sends,
  through ``send_notice``: from the operator's machine to a local node, from the host itself
  to an ssh node with ``imds-standin --node-dir D --send N``): the notice, for a termination
  N seconds from now, and the rebalance recommendation with it.

Then the node goes as a terminated instance goes: at the notice's time, or as soon as no job's
agent runs on the node any more (its part of the job has ended and saved: waiting on would
only make a rehearsal longer), the node's bootstrap ``--remove`` ends every process of the node
and deletes its folder, as `down` does to a node (and this server with it).

Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from skyinfra_runtime import rundirs, spot
from skyinfra_runtime.jobs.files import pid_alive, process_start_time, write_json

INTERRUPT_PATH = "/skyinfra/interrupt"
PID_FILE = "imds-standin.pid"
POLL_S = 0.5  # what the stand-in tells the node's watcher (loopback: cheap)
MAX_NOTICE_S = 3600
# After a notice, how long no job's agent must have run on the node before it goes (the
# operator's log followers end just after the agents).
QUIET_S = 0.5


class StandIn:
    """The metadata the stand-in serves: its tokens, the notice once there is one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokens: dict[str, float] = {}  # token -> expiry (epoch seconds)
        self.notice: dict[str, Any] | None = None
        self.rebalance: str | None = None
        self.noticed = threading.Event()

    def new_token(self, ttl_s: int) -> str:
        token = secrets.token_urlsafe(32)
        with self.lock:
            self.tokens[token] = time.time() + ttl_s
        return token

    def valid(self, token: str | None) -> bool:
        with self.lock:
            return token is not None and self.tokens.get(token, 0.0) > time.time()

    def interrupt(self, seconds: float, action: str = "terminate") -> dict[str, Any]:
        """The notice for ``action`` ``seconds`` from now (the first one stands: EC2 sends
        one per instance)."""
        with self.lock:
            if self.notice is None:
                now = time.time()
                when = now + seconds
                # EC2 says seconds, not fractions: the deadline is the whole second at or
                # after now + N.
                when_text = spot.format_time(when + 0.999)
                self.notice = {"action": action, "time": when_text}
                self.rebalance = spot.format_time(now)
                self.noticed.set()
            return dict(self.notice)


def make_handler(state: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "skyinfra-imds-standin"

        def log_message(self, format: str, *args: Any) -> None:
            return  # the watcher asks every half second: nothing worth a log line

        def _send(self, code: int, body: str = "", kind: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            if self.path != spot.TOKEN_PATH:
                self._send(404, "Not Found")
                return
            ttl = self.headers.get(spot.TOKEN_TTL_HEADER, "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                self._send(400, "Bad Request")  # as IMDS: the TTL header is required
                return
            self._send(200, state.new_token(int(ttl)))

        def do_GET(self) -> None:
            if not state.valid(self.headers.get(spot.TOKEN_HEADER)):
                self._send(401, "Unauthorized")
                return
            if self.path == spot.INSTANCE_ACTION and state.notice is not None:
                self._send(200, json.dumps(state.notice), "application/json")
            elif self.path == spot.REBALANCE and state.rebalance is not None:
                self._send(200, json.dumps({"noticeTime": state.rebalance}), "application/json")
            else:
                self._send(404, "Not Found")

        def do_POST(self) -> None:
            if self.path != INTERRUPT_PATH:
                self._send(404, "Not Found")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                seconds = float(body.get("seconds", 120))
                action = str(body.get("action", "terminate"))
            except (ValueError, TypeError, AttributeError):
                self._send(400, "expected a JSON object with a number 'seconds'")
                return
            if not 0 <= seconds <= MAX_NOTICE_S or action not in ("terminate", "stop"):
                self._send(400, f"seconds: 0 to {MAX_NOTICE_S}; action: terminate or stop")
                return
            self._send(200, json.dumps(state.interrupt(seconds, action)), "application/json")

    return Handler


def serve(
    address: str, port: int = 0, poll_interval_s: float = 0.5
) -> tuple[ThreadingHTTPServer, StandIn]:
    """The stand-in listening on ``address`` (port 0: any free one), served in a thread
    (``poll_interval_s``: how soon a shutdown() is seen)."""
    state = StandIn()
    server = ThreadingHTTPServer((address, port), make_handler(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(poll_interval_s,), daemon=True).start()
    return server, state


def send_notice(url: str, seconds: int) -> dict[str, Any]:
    """POST the notice (``seconds`` until the node goes) to the stand-in at ``url``; what it
    answers (``{"action": ..., "time": ...}``, EC2's form). OSError (HTTPError included)
    when it refuses or does not answer, ValueError when its answer is not that."""
    import urllib.request

    body = json.dumps({"seconds": seconds, "action": "terminate"}).encode()
    req = urllib.request.Request(
        url + INTERRUPT_PATH, data=body, method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with spot.direct_opener().open(req, timeout=10) as resp:  # loopback: never through a proxy
        answer = json.loads(resp.read())
    if not isinstance(answer, dict):
        raise ValueError(f"the IMDS stand-in answered {answer!r}")
    return answer


def _send(node_dir: Path, seconds: int) -> int:
    """``--send``: the node's stand-in (as its notice.json says) sent the notice; its answer
    printed as JSON. 2 when the node has no stand-in, 1 when it refused or did not answer."""
    import urllib.error

    settings = spot.read_settings(node_dir)
    if settings is None:
        print(f"{node_dir}/{spot.SETTINGS_FILE} is missing: this node has no IMDS stand-in")
        return 2
    try:
        answer = send_notice(settings[0], seconds)
    except (OSError, ValueError) as err:
        detail = str(err)
        if isinstance(err, urllib.error.HTTPError):
            detail = err.read().decode(errors="replace")
        print(f"the IMDS stand-in at {settings[0]} refused the notice: {detail}")
        return 1
    print(json.dumps(answer))
    return 0


def _agents_alive(node_dir: Path) -> bool:
    """Whether a job's agent (a process the node's pids/ records, besides this one) runs."""
    pids = node_dir / "pids"
    if not pids.is_dir():
        return False
    return any(f.name != PID_FILE and pid_alive(f) is not None for f in sorted(pids.glob("*.pid")))


def terminate_when_due(node_dir: Path, state: StandIn, remove_script: str) -> None:
    """After the notice: wait until its time or until no agent runs on the node, then end
    the node as its bootstrap's ``--remove`` does (this process becomes that script)."""
    state.noticed.wait()
    assert state.notice is not None
    deadline = spot.parse_time(state.notice["time"])
    notice = spot.Notice(state.notice["action"], deadline, time.time())
    write_json(node_dir / spot.INTERRUPTION_FILE, notice.to_dict())  # what `status` shows
    quiet_since: float | None = None
    while time.time() < deadline:
        if _agents_alive(node_dir):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        elif time.time() - quiet_since >= QUIET_S:  # nothing of a job has run for a while
            break
        time.sleep(0.1)
    print(f"terminating the node at {spot.format_time(time.time())}", flush=True)
    # Not a recorded group any more: --remove must not end the script it runs as.
    (node_dir / "pids" / PID_FILE).unlink(missing_ok=True)
    # Nor wait 5 s on a group whose leader is gone but not yet reaped by the process that
    # started it (the operator's log followers): kill -0 still finds a zombie's group.
    for pid_file in (node_dir / "pids").glob("*.pid"):
        if pid_alive(pid_file) is None:
            pid_file.unlink(missing_ok=True)
    # Without the node's marks: --remove ends every process that carries one, and would find
    # its own subshells (they carry this process's environment) until it gave up after 5 s.
    env = {k: v for k, v in os.environ.items() if k not in rundirs.NODE_MARK_ENVS}
    argv = ["bash", remove_script, "--remove", "--node-dir", str(node_dir)]
    os.execve("/bin/bash", argv, env)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="skyinfra-runtime imds-standin")
    parser.add_argument("--node-dir", required=True)
    parser.add_argument("--listen", help="the node's loopback address")
    parser.add_argument("--remove-script", help="the node bootstrap script")
    parser.add_argument(
        "--send", type=int, metavar="SECONDS", help="send the node's stand-in the notice instead"
    )
    ns = parser.parse_args(argv)
    node_dir = Path(ns.node_dir)
    if ns.send is not None:
        return _send(node_dir, ns.send)
    if not ns.listen or not ns.remove_script:
        parser.error("serving needs --listen and --remove-script")
    server, state = serve(ns.listen)
    host, port = str(ns.listen), int(server.server_address[1])
    pid_file = node_dir / "pids" / PID_FILE
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(pid_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()} {process_start_time(os.getpid()) or ''}\n")
    # At once: nothing to flush, and `down`'s --remove waits on every process of the node.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    # Last: a node whose notice.json exists has its stand-in listening.
    write_json(node_dir / spot.SETTINGS_FILE, {"imds": f"http://{host}:{port}", "poll_s": POLL_S})
    print(f"IMDS stand-in on http://{host}:{port}", flush=True)
    terminate_when_due(node_dir, state, ns.remove_script)
    return 0
