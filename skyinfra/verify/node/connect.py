"""Reach the head's rendezvous ports from this node (for `skyinfra verify`).

Usage: python connect.py HEAD_ADDR SOURCE_ADDR TOKEN TIMEOUT PORT...  Connects from
SOURCE_ADDR (this node's private address; empty: any) to each port and prints one JSON line
{port: "ok" | why not}.
"""

from __future__ import annotations

import json
import socket
import sys


def reach(head: str, source: str, token: str, timeout: float, port: int) -> str:
    try:
        with socket.create_connection(
            (head, port), timeout=timeout, source_address=(source, 0) if source else None
        ) as sock:
            sock.settimeout(timeout)
            answer = sock.makefile("r", errors="replace").readline().split()
    except OSError as exc:
        return f"cannot connect to {head}:{port}: {exc.strerror or exc}"
    if answer[:2] != [token, str(port)]:
        return (
            f"{head}:{port} answered, but not as verify's listener: another process holds "
            "the port on the head"
        )
    return "ok"


def main() -> None:
    head, source, token, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    ports = [int(p) for p in sys.argv[5:]]
    print(json.dumps({str(p): reach(head, source, token, timeout, p) for p in ports}))


if __name__ == "__main__":
    main()
