"""Free ports for tests that bring up listeners on this machine."""

from __future__ import annotations

import socket


def free_port_pair() -> int:
    """A port P with P and P + 1 free (a cluster's jax and torch rendezvous ports): other
    clusters on this machine (the default 29500) must not meet the test's."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = int(sock.getsockname()[1])
        if port >= 65534:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two free ports in a row")
