"""The messages between a peer's agent and the head: one JSON object per line over TCP.

Liveness: a host that vanishes without closing its connections (power lost, link cut, a
partition) sends no FIN and no reset, so a plain read would wait for it forever. Each side
therefore says "alive" every ``heartbeat_s(bound)`` and gives up on a connection that brought
nothing for ``silent_peer_s()`` seconds (the read's deadline): the head then counts the peer
lost, and a peer counts its head gone. TCP keepalive and TCP_USER_TIMEOUT bound the same
silence in the kernel (probes while idle; unacknowledged data), where the platform has them.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import weakref
from typing import Any

# A peer (or head) that says nothing for this long is lost: nine heartbeats missed.
SILENT_PEER_S = 45.0
# Overrides SILENT_PEER_S for every agent and supervisor started with it in the environment
# (tests, which should not wait 45 s for a cut link; an operator on a very slow network).
SILENT_PEER_ENV = "SKYINFRA_PEER_SILENT_S"

# One sender at a time per connection: the head's supervisor writes to a peer from its main
# loop, the peer's reader thread and the heartbeat thread; two lines must never interleave.
_send_locks: weakref.WeakKeyDictionary[socket.socket, threading.Lock] = weakref.WeakKeyDictionary()
_send_locks_lock = threading.Lock()


def silent_peer_s() -> float:
    """The bound on a connection's silence: $SKYINFRA_PEER_SILENT_S when it is a positive
    number of seconds, else SILENT_PEER_S."""
    try:
        bound = float(os.environ.get(SILENT_PEER_ENV, ""))
    except ValueError:
        return SILENT_PEER_S
    return bound if bound > 0 else SILENT_PEER_S


def heartbeat_s(bound: float) -> float:
    """How often a side says "alive" under ``bound``: several beats fit in it, so a beat
    delayed by a busy machine never makes a live peer look lost."""
    return min(5.0, bound / 4)


def bound_silence(sock: socket.socket, bound: float) -> None:
    """Reads (and a send blocked on a full buffer) on ``sock`` fail with TimeoutError after
    ``bound`` seconds; the kernel probes an idle connection and drops one whose data goes
    unacknowledged for as long."""
    sock.settimeout(bound)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    whole = max(1, int(bound))
    # Idle for a third of the bound, then six probes over the rest (Linux names; macOS has
    # TCP_KEEPALIVE for the idle time; elsewhere the system's defaults).
    options = (
        ("TCP_KEEPIDLE", max(1, whole // 3)),
        ("TCP_KEEPALIVE", max(1, whole // 3)),
        ("TCP_KEEPINTVL", max(1, whole // 9)),
        ("TCP_KEEPCNT", 6),
        ("TCP_USER_TIMEOUT", whole * 1000),  # milliseconds
    )
    for name, value in options:
        option = getattr(socket, name, None)
        if option is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, option, value)


def send(sock: socket.socket, msg: dict[str, Any]) -> None:
    with _send_locks_lock:
        lock = _send_locks.setdefault(sock, threading.Lock())
    with lock:
        sock.sendall((json.dumps(msg) + "\n").encode())


def heartbeat(sock: socket.socket, msg: dict[str, Any], every: float) -> threading.Event:
    """Send ``msg`` on ``sock`` every ``every`` seconds (a thread of its own) until the event
    returned is set or a send fails."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            try:
                send(sock, msg)
            except OSError:
                return

    threading.Thread(target=beat, daemon=True).start()
    return stop


def messages(sock: socket.socket) -> Any:
    """The messages read from ``sock`` until it closes (or its bound on silence passes:
    TimeoutError, an OSError)."""
    with sock.makefile("r", encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                return
