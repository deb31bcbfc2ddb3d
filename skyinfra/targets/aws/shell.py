"""`skyinfra ssh` on AWS nodes: the system's OpenSSH client, held to the host key skyinfra
pinned from the node's console (the workspace's ``known_hosts``, StrictHostKeyChecking=yes),
and the OpenSSH config block per node that lets ssh, scp, rsync and editors reach
``<cluster>-node-<i>`` directly. On a private network both go through the way in (the
bastion, or node 0), whose key is held the same way on its own hop: `ssh` with a
ProxyCommand that carries every option (ProxyJump would not pass them on), the config with
a ``Host <cluster>-bastion`` block and ``ProxyJump`` to it; with ``aws.ssm`` the config's
ProxyCommand opens a Session Manager session to each node's instance instead."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skyinfra.errors import SkyinfraError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.reach import KNOWN_HOSTS_FILE, transport
from skyinfra.targets.aws.spec import AwsSpec
from skyinfra.targets.base import Echo, Shell
from skyinfra.topology import Topology
from skyinfra.transport.bootstrap import node_shell_line
from skyinfra.transport.ssh import JumpHost, SshTarget, SshTransport
from skyinfra.transport.ssh_connect import openssh_argv
from skyinfra.workspace import Workspace

# Written by `skyinfra ssh --config` into the workspace (0600): Include it from ~/.ssh/config.
SSH_CONFIG_FILE = "ssh_config"


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
    argv = openssh_argv(
        target,
        key=Path(spec.section_as(AwsSpec).ssh_key).expanduser().resolve(),
        known_hosts=(ws.path / KNOWN_HOSTS_FILE).resolve(),
    )
    if not command:
        return Shell(argv)
    return Shell([*argv, node_shell_line(root, node, command)])


# Session Manager's SSH document (aws.ssm): the AWS CLI's session-manager-plugin carries the
# connection to the instance (%h, its id) with no bastion and no public address.
SSM_PROXY_COMMAND = (
    "aws ssm start-session --target %h --document-name AWS-StartSSHSession "
    "--parameters portNumber=%p --region {region}"
)


@dataclass(frozen=True)
class HostEntry:
    """One node's block of the config: its Host alias, where skyinfra dials it (None: not
    reachable from here, ``unreachable`` says why) and its instance."""

    alias: str
    target: SshTarget | None
    instance_id: str | None
    unreachable: str = ""


@dataclass(frozen=True)
class ConfigSettings:
    """What every block of the config shares: the cluster, where the file is written, the
    login key, the known_hosts the host keys are pinned in, and Session Manager's region
    (None: OpenSSH dials the nodes, through the way in's ProxyJump on a private network)."""

    cluster: str
    provider: str
    config_file: Path
    key: Path
    known_hosts: Path
    ssm_region: str | None = None


def ssh_config(ws: Workspace, spec: ClusterSpec, topology: Topology, *, echo: Echo) -> str:
    """A ``Host <cluster>-node-<i>`` block per node, also written to the workspace's
    ssh_config (0600). Each node's host key is pinned first; a node that cannot be reached
    now is said (ssh refuses it until a later `skyinfra ssh` or `run` pins it)."""
    aws = spec.section_as(AwsSpec)
    settings = ConfigSettings(
        cluster=spec.name,
        provider=spec.provider,
        config_file=(ws.path / SSH_CONFIG_FILE).resolve(),
        key=Path(aws.ssh_key).expanduser().resolve(),
        known_hosts=(ws.path / KNOWN_HOSTS_FILE).resolve(),
        ssm_region=aws.region if aws.ssm else None,
    )
    nodes = transport(ws, spec, topology)
    entries: list[HostEntry] = []
    try:
        for node in topology.nodes:
            host = f"{spec.name}-{node.name}"
            try:
                target: SshTarget | None = _pinned(nodes, node.index)
            except SkyinfraError as err:
                echo(f"[skyinfra] {host}: host key not pinned ({err}); ssh refuses it until it is")
                try:
                    target = nodes.target(node.index)
                except SkyinfraError:
                    entries.append(HostEntry(host, None, node.instance_id, str(err)))
                    continue
            entries.append(HostEntry(host, target, node.instance_id))
    finally:
        nodes.close()
    text = config_text(settings, entries)
    ws.write_text(settings.config_file, text)
    return text


def config_text(settings: ConfigSettings, entries: Sequence[HostEntry]) -> str:
    """The config's text (pure). With Session Manager each node's HostName is its instance
    id and its ProxyCommand a session; its host key is still checked against the one pinned
    under the address skyinfra dials (HostKeyAlias). Otherwise a node behind the way in
    jumps through it (ProxyJump), the way in its own block."""
    lines = [
        f"# skyinfra: cluster {settings.cluster} ({settings.provider}), written by "
        "`skyinfra ssh --config`.",
        f"# Include it from ~/.ssh/config: Include {settings.config_file}",
    ]
    names = {entry.alias for entry in entries}
    jumps: list[JumpHost] = []
    for entry in entries:
        target = entry.target
        if target is None:
            lines += ["", f"# {entry.alias}: not reachable from here ({entry.unreachable})"]
            continue
        if settings.ssm_region is not None:
            if entry.instance_id is None:
                lines += ["", f"# {entry.alias}: no instance id, which Session Manager dials"]
                continue
            lines += [
                "",
                *_host_block(settings, entry.alias, entry.instance_id, target),
                f"    HostKeyAlias {target.host}",
                f"    ProxyCommand {SSM_PROXY_COMMAND.format(region=settings.ssm_region)}",
            ]
            continue
        lines += ["", *_host_block(settings, entry.alias, target.host, target)]
        jump = target.jump
        if jump is not None:
            alias = f"{settings.cluster}-{jump.name}"
            lines.append(f"    ProxyJump {alias}")
            if alias not in names and jump not in jumps:
                jumps.append(jump)
    for jump in jumps:  # the bastion: not a node, its own block
        lines += [
            "",
            *_host_block(settings, f"{settings.cluster}-{jump.name}", jump.host, jump),
        ]
    return "\n".join(lines) + "\n"


def _host_block(
    settings: ConfigSettings, alias: str, host_name: str, at: SshTarget | JumpHost
) -> list[str]:
    return [
        f"Host {alias}",
        f"    HostName {host_name}",
        f"    Port {at.port}",
        f"    User {at.user}",
        f"    IdentityFile {settings.key}",
        "    IdentitiesOnly yes",
        f"    UserKnownHostsFile {settings.known_hosts}",
        "    StrictHostKeyChecking yes",
    ]
