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


def free_port_pair(nodes: int = 4) -> int:
    """A port P with P to P + 2 * nodes - 1 free (the jax and torch ports the head gives the
    jobs of a cluster of up to ``nodes`` nodes, skyinfra_runtime.jobports): other clusters on
    this machine (the default 29500) must not meet the test's.

    P is picked below the ephemeral range: a port the kernel hands out (bind to port 0) is
    one it also gives to the next outgoing connection, so a Terraform or AWS client in the
    same network namespace could take P + 1 before the cluster listens on it (seen: a
    second `up` refused head_port because 33116 was in use)."""
    span = 2 * max(1, nodes)
    top = min(ephemeral_low(), 65535) - span
    if top <= LOWEST:
        raise RuntimeError(f"no ports below the ephemeral range (it starts at {top + span})")
    for _ in range(200):
        port = random.randrange(LOWEST, top)
        near_default = port + span > 29500 and port < 29500 + span
        if not near_default and all(_is_free(p) for p in range(port, port + span)):
            return port
    raise RuntimeError(f"no {span} free ports in a row between {LOWEST} and {top}")
