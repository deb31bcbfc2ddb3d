"""Spot interruption notices: the IMDSv2 client a node's job agent polls, and the deadline a
job's code reads.

EC2 announces a Spot interruption about two minutes ahead on the instance metadata service:
``/latest/meta-data/spot/instance-action`` answers 404 until then, and then JSON such as
``{"action": "terminate", "time": "2026-11-24T08:22:00Z"}``; a rebalance recommendation
(earlier, not guaranteed) appears at ``/latest/meta-data/events/recommendations/rebalance``.
IMDSv2 wants a session token first (``PUT /latest/api/token`` with
``X-aws-ec2-metadata-token-ttl-seconds``), sent back as ``X-aws-ec2-metadata-token``.

A node watches only when its node directory holds ``notice.json`` (``{"imds": URL, "poll_s":
S}``): cloud-init writes it on AWS Spot nodes, a local node's IMDS stand-in
(imds_standin.py) writes its own loopback URL there. Elsewhere nothing is polled.

On a notice the agent writes the instance's termination time (epoch seconds) into the file
``$SKYINFRA_PREEMPT_DEADLINE`` names, then sends SIGTERM to the job's processes: a training
loop reads it with ``preemption_deadline()`` / ``seconds_left()`` to decide what it can still
save. Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import calendar
import functools
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Every worker of a job has it: the path of a file that holds the deadline (epoch seconds)
# once a notice came; the file does not exist before.
DEADLINE_ENV = "SKYINFRA_PREEMPT_DEADLINE"
# In the node directory: where this node's metadata service is and how often to ask it.
SETTINGS_FILE = "notice.json"
# In the node directory: the notice this node received (`skyinfra status` shows it).
INTERRUPTION_FILE = "interruption.json"
AWS_IMDS = "http://169.254.169.254"
DEFAULT_POLL_S = 5.0
TOKEN_TTL_S = 21600
INSTANCE_ACTION = "/latest/meta-data/spot/instance-action"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
TOKEN_PATH = "/latest/api/token"
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
if TYPE_CHECKING:
    import urllib.request


@functools.cache
def direct_opener() -> urllib.request.OpenerDirector:
    """An opener that never goes through a proxy: the metadata service is on the instance's
    own link (HTTP_PROXY would send the request, and its token, elsewhere), as the AWS SDKs
    do. Made on first use: urllib.request (with http.client) costs about 15 ms of start-up,
    and every `skyinfra` command and every node process imports this module."""
    import urllib.request

    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def preemption_deadline() -> float | None:
    """When this node will be taken away (epoch seconds), once a Spot interruption notice
    came; None before (or outside a job)."""
    path = os.environ.get(DEADLINE_ENV)
    if not path:
        return None
    try:
        return float(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def seconds_left() -> float | None:
    """Seconds until this node is taken away (never below 0), or None without a notice."""
    deadline = preemption_deadline()
    return None if deadline is None else max(0.0, deadline - time.time())


def write_deadline(path: Path, deadline: float) -> None:
    """The deadline file, written atomically (a reader sees no half-written number)."""
    tmp = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{deadline:.3f}\n")
    os.replace(tmp, path)


def parse_time(text: str) -> float:
    """EC2's notice time ("2026-11-24T08:22:00Z", UTC) as epoch seconds."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def format_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@dataclass(frozen=True)
class Notice:
    """A Spot interruption notice: what EC2 will do (terminate, stop, hibernate) and when."""

    action: str
    time: float  # epoch seconds
    noticed_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "time": self.time,
            "time_utc": format_time(self.time),
            "noticed_at": self.noticed_at,
        }


class ImdsError(Exception):
    """The metadata service answered something else than IMDSv2 does."""


class Imds:
    """An IMDSv2 client: a session token (renewed when refused), then GETs with it."""

    def __init__(self, base: str, timeout_s: float = 2.0) -> None:
        self.base = base.rstrip("/")
        self.timeout_s = timeout_s
        self._token: str | None = None

    def _token_now(self) -> str:
        import urllib.request

        if self._token is None:
            req = urllib.request.Request(
                self.base + TOKEN_PATH, method="PUT", headers={TOKEN_TTL_HEADER: str(TOKEN_TTL_S)}
            )
            with direct_opener().open(req, timeout=self.timeout_s) as resp:
                self._token = resp.read().decode().strip()
        return self._token

    def get(self, path: str) -> str | None:
        """The body at ``path``, or None where the service answers 404 (nothing there)."""
        import urllib.error
        import urllib.request

        for _ in range(2):  # a second time with a fresh token, when the first was refused
            req = urllib.request.Request(
                self.base + path, headers={TOKEN_HEADER: self._token_now()}
            )
            try:
                with direct_opener().open(req, timeout=self.timeout_s) as resp:
                    return str(resp.read().decode())
            except urllib.error.HTTPError as err:
                if err.code == 404:
                    return None
                if err.code != 401:
                    raise ImdsError(f"GET {path}: HTTP {err.code}") from None
                self._token = None
        raise ImdsError(f"GET {path}: the token was refused twice")

    def instance_action(self) -> Notice | None:
        body = self.get(INSTANCE_ACTION)
        if body is None:
            return None
        try:
            data = json.loads(body)
            return Notice(str(data["action"]), parse_time(str(data["time"])), time.time())
        except (ValueError, KeyError, TypeError) as err:
            raise ImdsError(f"{INSTANCE_ACTION}: unexpected answer {body[:200]!r}") from err

    def rebalance(self) -> str | None:
        """The rebalance recommendation's notice time (as EC2 writes it), or None."""
        body = self.get(REBALANCE)
        if body is None:
            return None
        try:
            return str(json.loads(body)["noticeTime"])
        except (ValueError, KeyError, TypeError):
            return body.strip()[:64]


def read_settings(node_dir: str | Path) -> tuple[str, float] | None:
    """(metadata URL, poll seconds) from the node's notice.json; None when the node has none
    (not a Spot node: nothing to watch)."""
    try:
        raw = json.loads((Path(node_dir) / SETTINGS_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("imds", AWS_IMDS), str):
        return None
    poll = raw.get("poll_s", DEFAULT_POLL_S)
    poll_s = float(poll) if isinstance(poll, (int, float)) and poll > 0 else DEFAULT_POLL_S
    return str(raw.get("imds", AWS_IMDS)), poll_s


class NoticeWatcher:
    """Polls the metadata service every ``poll_s`` in a thread of its own: ``on_notice`` once
    for an interruption notice (then it stops), ``on_rebalance`` once for a rebalance
    recommendation. A service that does not answer is asked again at the next poll."""

    def __init__(
        self,
        imds: Imds,
        poll_s: float,
        on_notice: Callable[[Notice], None],
        on_rebalance: Callable[[str], None] = lambda _: None,
        on_error: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.imds = imds
        self.poll_s = poll_s
        self.on_notice = on_notice
        self.on_rebalance = on_rebalance
        self.on_error = on_error
        self.stop = threading.Event()
        self._rebalanced = False
        self._said_error = False

    def start(self) -> None:
        threading.Thread(target=self.run, name="spot-notice", daemon=True).start()

    def poll_once(self) -> Notice | None:
        try:
            notice = self.imds.instance_action()
            if not self._rebalanced and notice is None:
                when = self.imds.rebalance()
                if when is not None:
                    self._rebalanced = True
                    self.on_rebalance(when)
        except (OSError, ImdsError) as err:  # URLError is an OSError
            if not self._said_error:  # once: a service down for a while is not news each poll
                self._said_error = True
                self.on_error(str(err))
            return None
        return notice

    def run(self) -> None:
        while not self.stop.is_set():
            notice = self.poll_once()
            if notice is not None:
                self.on_notice(notice)
                return
            self.stop.wait(self.poll_s)


def node_interruption(node_dir: str | Path) -> dict[str, Any] | None:
    """This node's Spot interruption, whether or not a job runs here: the one a job's agent
    recorded (``interruption.json``), else the metadata service's notice now (recorded, so
    the next look finds it), else None (not a Spot node, no notice, or no answer)."""
    path = Path(node_dir) / INTERRUPTION_FILE
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        recorded = None
    if isinstance(recorded, dict):
        return recorded
    settings = read_settings(node_dir)
    if settings is None:
        return None
    try:
        notice = Imds(settings[0]).instance_action()
    except (OSError, ImdsError):
        return None
    if notice is None:
        return None
    data = notice.to_dict()
    # As the job's agent and the stand-in write it: whole (a reader sees old or new), 0600.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
    return data


def main(argv: list[str]) -> int:
    """``skyinfra-runtime notice --node-dir D``: the node's interruption as JSON ({}: none);
    `skyinfra status` asks every ready node, so a notice shows with no job running."""
    import argparse

    parser = argparse.ArgumentParser(prog="skyinfra-runtime notice")
    parser.add_argument("--node-dir", required=True)
    ns = parser.parse_args(argv)
    print(json.dumps(node_interruption(ns.node_dir) or {}))
    return 0
