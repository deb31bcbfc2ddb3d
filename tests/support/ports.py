"""Free ports for tests that bring up listeners on this machine."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Linux hands out a client's local port from this range (net.ipv4.ip_local_port_range); the
# kernel's default when the file cannot be read.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_LOW = 32768
# Below this, ports are often well known or taken by system services.
LOWEST = 10000


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def free_port_pair() -> int:
    """A port P with P and P + 1 free (a cluster's jax and torch rendezvous ports): other
    clusters on this machine (the default 29500) must not meet the test's.

    P is picked below the ephemeral range: a port the kernel hands out (bind to port 0) is
    one it also gives to the next outgoing connection, so a Terraform or AWS client in the
    same network namespace could take P + 1 before the cluster listens on it (seen: a
    second `up` refused head_port because 33116 was in use)."""
    top = min(ephemeral_low(), 65535) - 2
    if top <= LOWEST:
        raise RuntimeError(f"no ports below the ephemeral range (it starts at {top + 2})")
    for _ in range(200):
        port = random.randrange(LOWEST, top)
        if port not in (29499, 29500) and _is_free(port) and _is_free(port + 1):
            return port
    raise RuntimeError(f"no two free ports in a row between {LOWEST} and {top}")
