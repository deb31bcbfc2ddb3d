"""`skyinfra ssh` on AWS nodes: the system's OpenSSH client, held to the host key skyinfra
pinned from the node's console (the workspace's ``known_hosts``, StrictHostKeyChecking=yes),
and the OpenSSH config block per node that lets ssh, scp, rsync and editors reach
``<cluster>-node-<i>`` directly. On a private network both go through the way in (the
bastion, or node 0), whose key is held the same way on its own hop: `ssh` with a
ProxyCommand that carries every option (ProxyJump would not pass them on), the config with
a ``Host <cluster>-bastion`` block and ``ProxyJump`` to it."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from skyinfra.errors import SkyinfraError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.reach import KNOWN_HOSTS_FILE, transport
from skyinfra.targets.aws.spec import AwsSpec
from skyinfra.targets.base import Echo, Shell
from skyinfra.topology import Topology
from skyinfra.transport.bootstrap import node_shell_line
from skyinfra.transport.ssh import JumpHost, SshTarget, SshTransport
from skyinfra.workspace import Workspace

# Written by `skyinfra ssh --config` into the workspace (0600): Include it from ~/.ssh/config.
SSH_CONFIG_FILE = "ssh_config"


def _options(ws: Workspace, spec: ClusterSpec) -> list[str]:
    key = Path(spec.section_as(AwsSpec).ssh_key).expanduser().resolve()
    return [
        "-i", str(key),
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={(ws.path / KNOWN_HOSTS_FILE).resolve()}",
        "-o", "StrictHostKeyChecking=yes",
    ]  # fmt: skip


def _pinned(nodes: SshTransport, node: int) -> SshTarget:
    """The node's address, once its host key is in the workspace's known_hosts (the first
    connection pins it from the node's console, as `run` does)."""
    target = nodes.target(node)
    nodes.ssh_client(node)
    return target


def shell(
    ws: Workspace, spec: ClusterSpec, topology: Topology, node: int, command: Sequence[str]
) -> Shell:
    """ssh to the node: a login shell, or ``command`` (its words joined by spaces, as ssh
    does) run in the node's folder with the node's environment (node-env.sh, the venv first
    on PATH, SKYINFRA_NODE, SKYINFRA_NODE_DIR, SKYINFRA_SHARED_DIR)."""
    nodes = transport(ws, spec, topology)
    try:
        target = _pinned(nodes, node)
        root = nodes.node_root(node)
    finally:
        nodes.close()
    options = _options(ws, spec)
    if target.jump is not None:
        jump = target.jump
        through = ["ssh", *options, "-p", str(jump.port), "-W", "%h:%p", f"{jump.user}@{jump.host}"]
        options += ["-o", f"ProxyCommand={shlex.join(through)}"]
    argv = ["ssh", *options, "-p", str(target.port), f"{target.user}@{target.host}"]
    if not command:
        return Shell(argv)
    return Shell([*argv, node_shell_line(root, node, command)])


def ssh_config(ws: Workspace, spec: ClusterSpec, topology: Topology, *, echo: Echo) -> str:
    """A ``Host <cluster>-node-<i>`` block per node, also written to the workspace's
    ssh_config (0600). Each node's host key is pinned first; a node that cannot be reached
    now is said (ssh refuses it until a later `skyinfra ssh` or `run` pins it)."""
    options = _options(ws, spec)
    lines = [
        f"# skyinfra: cluster {spec.name} ({spec.provider}), written by `skyinfra ssh --config`.",
        f"# Include it from ~/.ssh/config: Include {(ws.path / SSH_CONFIG_FILE).resolve()}",
    ]
    nodes = transport(ws, spec, topology)
    names = {node.name for node in topology.nodes}
    jumps: list[JumpHost] = []
    try:
        for node in topology.nodes:
            host = f"{spec.name}-{node.name}"
            try:
                target = _pinned(nodes, node.index)
            except SkyinfraError as err:
                echo(f"[skyinfra] {host}: host key not pinned ({err}); ssh refuses it until it is")
                try:
                    target = nodes.target(node.index)
                except SkyinfraError:
                    lines += ["", f"# {host}: not reachable from here ({err})"]
                    continue
            jump = target.jump
            lines += ["", *_host_block(host, target.host, target.port, target.user, options)]
            if jump is not None:
                lines.append(f"    ProxyJump {spec.name}-{jump.name}")
                if jump.name not in names and jump not in jumps:
                    jumps.append(jump)
    finally:
        nodes.close()
    for jump in jumps:  # the bastion: not a node, its own block
        lines += [
            "",
            *_host_block(f"{spec.name}-{jump.name}", jump.host, jump.port, jump.user, options),
        ]
    text = "\n".join(lines) + "\n"
    ws.write_text(ws.path / SSH_CONFIG_FILE, text)
    return text


def _host_block(alias: str, host: str, port: int, user: str, options: list[str]) -> list[str]:
    return [
        f"Host {alias}",
        f"    HostName {host}",
        f"    Port {port}",
        f"    User {user}",
        f"    IdentityFile {options[1]}",
        "    IdentitiesOnly yes",
        f"    {options[5].replace('=', ' ', 1)}",
        "    StrictHostKeyChecking yes",
    ]
