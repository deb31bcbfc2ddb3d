"""Where the operator dials each AWS node (pure; reach.py builds the transport on it).

A public network: each node at its own public address. A private one (issue 46): through
the topology's way in (ProxyJump), the bastion or node 0; node 0, when it is the way in, at
its own public address. From node 0's own copy of the workspace (aws.recover's kit, never
on a private network): the private addresses. In emulator mode the addresses are the
emulator's and never dialled: the nodes, and the way in by its name, are reached through
SKYINFRA_AWS_EMULATED_NODES's stand-in sshds (endpoints.py), the nodes' through the way
in's as on EC2; an unmapped one reads as unreachable, saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from skyinfra.errors import ConfigError
from skyinfra.targets.aws.endpoints import (
    EMULATED_NODES_ENV_VAR,
    ENDPOINT_ENV_VAR,
    EmulatedNode,
)
from skyinfra.topology import Node, Topology, WayIn
from skyinfra.transport.ssh import JumpHost, SshTarget

SSH_PORT = 22


@dataclass(frozen=True)
class Dialling:
    """What decides where the nodes are dialled: the login user, whether this is node 0's
    copy of the workspace, the emulator's stand-ins (None: real machines) and the host keys
    an instance printed on its console (by instance id)."""

    user: str
    on_node_0: bool
    emulated: Mapping[str, EmulatedNode] | None
    console_keys: Callable[[str], Sequence[str]]


Targets = tuple[dict[int, SshTarget], dict[int, str]]


def node_targets(topology: Topology, dialling: Dialling) -> Targets:
    """Each node's SshTarget, or the reason it is not dialled."""
    way_in = None if dialling.on_node_0 else topology.way_in
    if dialling.emulated is not None:
        return _emulated(topology, way_in, dialling, dialling.emulated)
    jump = (
        None
        if way_in is None
        else _jump(topology, way_in, dialling, way_in.public_ip, SSH_PORT, way_in.user)
    )
    targets = {}
    for node in topology.nodes:
        if dialling.on_node_0:
            targets[node.index] = SshTarget(node.private_ip, dialling.user, SSH_PORT)
        elif way_in is None:
            host = node.public_ip or node.private_ip
            targets[node.index] = SshTarget(host, dialling.user, SSH_PORT)
        elif node.index == way_in.node:
            targets[node.index] = SshTarget(way_in.public_ip, dialling.user, SSH_PORT)
        else:
            targets[node.index] = SshTarget(node.private_ip, dialling.user, SSH_PORT, jump=jump)
    return targets, {}


def _jump(
    topology: Topology,
    way_in: WayIn,
    dialling: Dialling,
    host: str,
    port: int,
    user: str | None = None,
) -> JumpHost:
    """The way in as a jump host, its keys the ones its instance printed (node 0's own, or
    the bastion's); logged in as ``user`` (the bastion's image's), else the nodes' user."""
    instance_id = (
        topology.nodes[way_in.node].instance_id if way_in.node is not None else way_in.instance_id
    )
    keys = dialling.console_keys
    return JumpHost(
        way_in.name,
        host,
        user or dialling.user,
        port,
        host_keys=lambda: keys(instance_id) if instance_id else [],
    )


def _emulated(
    topology: Topology,
    way_in: WayIn | None,
    dialling: Dialling,
    emulated: Mapping[str, EmulatedNode],
) -> Targets:
    names = [node.name for node in topology.nodes]
    known = names + ([way_in.name] if way_in is not None and way_in.name not in names else [])
    for name in emulated:
        if name not in known:
            raise ConfigError(
                f"{EMULATED_NODES_ENV_VAR}[{name!r}]",
                name,
                f"a node of {topology.cluster!r}"
                f"{' or its way in' if len(known) > len(names) else ''}: {known}",
            )
    jump = None
    if way_in is not None and way_in.name in emulated:
        at = emulated[way_in.name]
        # The stand-in sshds all log in as the spec's user, the bastion's too.
        jump = _jump(topology, way_in, dialling, at.host, at.port)
    targets: dict[int, SshTarget] = {}
    unreachable: dict[int, str] = {}
    for node in topology.nodes:
        behind = way_in is not None and node.index != way_in.node
        if node.name not in emulated:
            unreachable[node.index] = _not_dialled(node)
        elif behind and jump is None:
            assert way_in is not None
            unreachable[node.index] = (
                f"not dialled: {node.name} is reached through {way_in.name}, the private "
                f"network's way in, which {EMULATED_NODES_ENV_VAR} does not map to a stand-in "
                "sshd"
            )
        else:
            at = emulated[node.name]
            targets[node.index] = SshTarget(
                at.host, dialling.user, at.port, at.root, jump=jump if behind else None
            )
    return targets, unreachable


def _not_dialled(node: Node) -> str:
    addresses = ", ".join(a for a in (node.public_ip, node.private_ip) if a)
    return (
        f"not dialled: emulator mode ({ENDPOINT_ENV_VAR} is set), so {node.name}'s "
        f"addresses ({addresses}) are the emulator's, not a machine's; map "
        f"{node.name} to a stand-in sshd with {EMULATED_NODES_ENV_VAR}"
    )
