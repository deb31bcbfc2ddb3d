"""What a plugin is: set-up before the user's code, teardown after, in a fixed order."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from typing import Protocol

from skyinfra_runtime.errors import PluginError
from skyinfra_runtime.info import InstanceInfo
from skyinfra_runtime.topology import Topology

INIT_TIMEOUT_ENV = "SKYINFRA_INIT_TIMEOUT"
# Linux's ioctl for an interface's IPv4 address (<linux/sockios.h>).
_SIOCGIFADDR = 0x8915
# Nodes finish booting at different times (cloud-init installs CUDA wheels): wait long by
# default for every peer to reach the rendezvous; tests pass a short timeout.
DEFAULT_INIT_TIMEOUT = 600.0


class Plugin(Protocol):
    name: str

    def setup(self, info: InstanceInfo, topology: Topology, script: bool = False) -> None:
        """``script``: the entry is a script or ``-m`` module, which runs as ``__main__``
        and may initialise the framework itself (as under torchrun)."""

    def explain(self, exc: BaseException) -> str | None:
        """A line on how to fix it when the user's code failed because of this plugin's
        set-up (e.g. initialising twice), else None."""

    def teardown(self, failed: bool = False) -> None: ...


def init_timeout(option: float | str | None) -> float:
    """Seconds to wait for peers: the plugin option, else SKYINFRA_INIT_TIMEOUT, else 600."""
    raw: float | str | None = option if option is not None else os.environ.get(INIT_TIMEOUT_ENV)
    if raw is None or raw == "":
        return DEFAULT_INIT_TIMEOUT
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise PluginError(
            f"init_timeout {raw!r} is not a number of seconds (option or {INIT_TIMEOUT_ENV})"
        ) from None
    if value <= 0:
        raise PluginError(f"init_timeout must be > 0 seconds, got {value}")
    return value


def gloo_address(topology: Topology, node: int) -> str | None:
    """The address gloo (JAX's and torch's CPU collectives) should give the other processes:
    this node's own (the topology's) when it is this machine's. gloo's default is the address
    the hostname resolves to: a VM's 127.0.0.1 or Debian's 127.0.1.1 on many machines, which
    another host cannot reach. None: the default stays (the node's address is not this
    machine's: a stand-in node of the emulated network)."""
    own = topology.nodes[node].private_ip
    family = socket.AF_INET6 if ":" in own else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((own, 0))
    except (OSError, ValueError):
        return None
    return own


def interface_of(address: str) -> str | None:
    """The name of this machine's network interface holding IPv4 ``address`` (torch's gloo
    takes an interface, GLOO_SOCKET_IFNAME, not an address); None when none does (IPv6, or
    a system without Linux's SIOCGIFADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                found = fcntl.ioctl(
                    probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode())
                )
            except OSError:  # no IPv4 address on it
                continue
            if socket.inet_ntoa(found[20:24]) == address:
                return name
    return None
