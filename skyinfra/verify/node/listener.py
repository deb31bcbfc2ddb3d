"""Hold the head's rendezvous ports for `skyinfra verify` and answer each connection with a
token, so the other nodes learn they reached this listener and not another process.

Usage: python listener.py TOKEN SECONDS PORT...  Prints "listening" once every port is held,
or "held PORT ERROR" for the first port another process already holds; serves the ports it
holds until killed or for SECONDS at most.
"""

from __future__ import annotations

import selectors
import socket
import sys
import time


def main() -> int:
    token, seconds, ports = sys.argv[1], float(sys.argv[2]), [int(p) for p in sys.argv[3:]]
    listeners = []
    held = []
    for port in ports:
        sock = socket.socket()
        # Like the coordinators (jax's and torch's bind every address); SO_REUSEADDR lets a
        # port that a finished job left in TIME_WAIT be bound, as they do.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
            sock.listen(64)
        except OSError as exc:
            held.append(f"held {port} {exc.strerror or exc}")
            sock.close()
            continue
        listeners.append(sock)
    selector = selectors.DefaultSelector()
    for sock in listeners:
        selector.register(sock, selectors.EVENT_READ)
    # The first held port, if any; the others are served all the same.
    print(held[0] if held else "listening", flush=True)
    if not listeners:
        return 3
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.5):
            listener = key.fileobj
            assert isinstance(listener, socket.socket)
            conn, _addr = listener.accept()
            with conn:
                conn.sendall(f"{token} {listener.getsockname()[1]}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
