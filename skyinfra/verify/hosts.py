"""testinfra hosts for a cluster's nodes, reached the way `skyinfra run` reaches them.

Local nodes get testinfra's local backend, run in the node's directory with the node's
environment (as the local transport starts its processes). SSH nodes get testinfra's
paramiko backend over the transport's own connection: the same key and the same pinned host
keys as `run` (testinfra's own paramiko connection would accept any host key).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import paramiko
import testinfra.host
from testinfra.backend import base
from testinfra.backend.local import LocalBackend
from testinfra.backend.paramiko import ParamikoBackend

from skyinfra.errors import InternalError
from skyinfra.targets.local.processes import NODE_ENV
from skyinfra.targets.local.transport import LocalTransport, node_environment
from skyinfra.transport.base import NodeTransport
from skyinfra.transport.ssh import SshTransport


# testinfra ships no type information: its classes are Any to mypy.
class NodeLocalBackend(LocalBackend):  # type: ignore[misc]
    """A local node: commands run in its directory with its venv first on PATH and the node's
    mark in the environment (so that `down` ends whatever a check left running)."""

    def __init__(self, name: str, node_dir: Path) -> None:
        super().__init__()
        self.hostname = name
        self._node_dir = node_dir

    def get_pytest_id(self) -> str:
        return self.hostname

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        cmd = self.get_command(command, *args)
        env = node_environment(self._node_dir)
        env[NODE_ENV] = str(self._node_dir)
        done = subprocess.run(
            ["/bin/sh", "-c", cmd],
            cwd=self._node_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        return self.result(done.returncode, self.encode(cmd), done.stdout, done.stderr)


class PinnedParamikoBackend(ParamikoBackend):  # type: ignore[misc]
    """testinfra's paramiko backend on the SSH transport's connection to one node."""

    def __init__(self, name: str, transport: SshTransport, node: int) -> None:
        super().__init__(name)
        self._transport = transport
        self._node = node

    def get_pytest_id(self) -> str:
        return str(self.host.name)

    @property
    def client(self) -> paramiko.SSHClient:
        return self._transport.ssh_client(self._node)

    @client.deleter
    def client(self) -> None:
        # testinfra drops a broken connection this way before its one retry.
        self._transport.forget(self._node)


def node_host(transport: NodeTransport, node: int, name: str) -> testinfra.host.Host:
    """The testinfra Host for ``node`` of a cluster reached through ``transport``."""
    backend: base.BaseBackend
    if isinstance(transport, LocalTransport):
        backend = NodeLocalBackend(name, Path(transport.node_root(node)))
    elif isinstance(transport, SshTransport):
        backend = PinnedParamikoBackend(name, transport, node)
    else:
        raise InternalError(
            f"skyinfra verify cannot reach nodes through {type(transport).__name__}"
        )
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host
