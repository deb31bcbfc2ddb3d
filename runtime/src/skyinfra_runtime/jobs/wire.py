"""The messages between a peer's agent and the head: one JSON object per line over TCP."""

from __future__ import annotations

import json
import socket
from typing import Any


def send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.sendall((json.dumps(msg) + "\n").encode())


def messages(sock: socket.socket) -> Any:
    with sock.makefile("r", encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                return
