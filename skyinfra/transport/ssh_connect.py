"""One SSH connection with its host key pinned (SshTransport's, transport/ssh.py): to a node,
or to the way-in host a private network's nodes are reached through (OpenSSH's ProxyJump),
and to a node over a channel that host opened. Each hop's key is checked on its own: one
published on the host's console (the AWS target reads them through EC2) is the only one
accepted, and a key that differs from the recorded one is refused, naming the host.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from skyinfra.errors import HostKeyChangedError, TransportError

# A node's published host keys ("<type> <base64>" lines), or empty when not published yet.
HostKeySource = Callable[[int], Sequence[str]]


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as `ssh-keygen -l` prints it."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


@dataclass(frozen=True)
class JumpHost:
    """The one host a private network's nodes are reached through (ProxyJump): a bastion,
    or node 0. ``name`` is the topology's (its `ssh --config` Host is ``<cluster>-<name>``);
    ``host_keys`` are the keys it published (None: trusted on first use, then pinned)."""

    name: str
    host: str
    user: str = "ubuntu"
    port: int = 22
    host_keys: Callable[[], Sequence[str]] | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        return f"{self.name} (the way in)"


@dataclass(frozen=True)
class SshTarget:
    """How to reach one node."""

    host: str
    user: str = "ubuntu"
    port: int = 22
    # Prefix of every path of the node (node root, markers): an emulated node that lives in a
    # folder of a shared machine (SKYINFRA_AWS_EMULATED_NODES); empty for a real node.
    root: str = ""
    # None: dialled directly; else through this host (``host`` is then as it sees it).
    jump: JumpHost | None = None


@dataclass(frozen=True)
class SshKeys:
    """The keys of the connections to the nodes: the private key they log in with
    (``key_path``), the file host keys are pinned in (``known_hosts``), the host keys the
    nodes published (``host_keys``; None: a key seen first is trusted and recorded) and who
    is told a first-seen key's fingerprint (``on_new_host_key``)."""

    key_path: Path
    known_hosts: Path
    host_keys: HostKeySource | None = None
    on_new_host_key: Callable[[str], None] | None = None


def openssh_argv(target: SshTarget, *, key: Path, known_hosts: Path) -> list[str]:
    """The system OpenSSH client's command line to the target, held to the host keys pinned
    in ``known_hosts`` with ``key`` on every hop: through a jump host, a ProxyCommand that
    carries the same options (``-J`` would dial the jump without them)."""
    options = [
        "-i", str(key),
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "StrictHostKeyChecking=yes",
    ]  # fmt: skip
    jump = target.jump
    if jump is not None:
        through = ["ssh", *options, "-p", str(jump.port), "-W", "%h:%p", f"{jump.user}@{jump.host}"]
        options += ["-o", f"ProxyCommand={shlex.join(through)}"]
    return ["ssh", *options, "-p", str(target.port), f"{target.user}@{target.host}"]


@dataclass(frozen=True)
class Hop:
    """One connection to make: who it is in messages (``label``: "node 1", "bastion (the
    way in)"), where, and the keys that host published (None: none are asked for)."""

    label: str
    host: str
    port: int
    user: str
    published: Callable[[], Sequence[str]] | None
    # Who published the keys, in messages.
    who: str = "the node"


def host_name(host: str, port: int) -> str:
    """The host's name in known_hosts, as OpenSSH writes it."""
    return host if port == 22 else f"[{host}]:{port}"


def connect(
    hop: Hop,
    keys: SshKeys,
    *,
    timeout: float,
    file_lock: threading.Lock,
    sock: paramiko.Channel | None = None,
) -> paramiko.SSHClient:
    """A connection to ``hop`` (over ``sock``, a channel a jump host opened, when given),
    its host key checked and recorded in ``keys.known_hosts`` (``file_lock`` guards it)."""
    client = paramiko.SSHClient()
    with file_lock:
        if keys.known_hosts.is_file():
            client.load_host_keys(str(keys.known_hosts))
    published = _pin_published_keys(hop, client)
    client.set_missing_host_key_policy(
        paramiko.RejectPolicy() if published else paramiko.AutoAddPolicy()
    )
    try:
        client.connect(
            hop.host,
            port=hop.port,
            username=hop.user,
            key_filename=str(keys.key_path),
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            allow_agent=False,
            look_for_keys=False,
            sock=sock,
        )
    except paramiko.BadHostKeyException as err:
        client.close()
        if published:
            raise HostKeyChangedError(
                f"{hop.label} ({hop.host}:{hop.port}) presented {fingerprint(err.key)}, which "
                f"is not a key {hop.who} published on its console: refusing the connection "
                "(someone may be in between)"
            ) from err
        raise HostKeyChangedError(
            f"{hop.label} ({hop.host}:{hop.port}): host key changed since it was recorded in "
            f"{keys.known_hosts}; if the machine was replaced, remove its line"
        ) from err
    except (paramiko.SSHException, OSError, EOFError) as err:
        client.close()
        raise TransportError(
            f"{hop.label}: cannot connect to {hop.user}@{hop.host}:{hop.port} "
            f"with key {keys.key_path}: {err}"
        ) from err
    _tell_new_key(hop, keys, client, published)
    with file_lock:
        keys.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        # Merge what other connections recorded meanwhile, then write.
        if keys.known_hosts.is_file():
            client.load_host_keys(str(keys.known_hosts))
        client.save_host_keys(str(keys.known_hosts))
    return client


def _pin_published_keys(hop: Hop, client: paramiko.SSHClient) -> bool:
    """With a key source, and no key recorded for the host yet: add the host's published
    keys as the only acceptable ones (True). TransportError while it has published none."""
    if hop.published is None:
        return False
    name = host_name(hop.host, hop.port)
    if client.get_host_keys().lookup(name):
        return True  # pinned at an earlier connection (from the console, too)
    lines = list(hop.published())
    if not lines:
        raise TransportError(
            f"{hop.label}: its SSH host key is not on its console yet (cloud-init prints "
            "it at first boot; read through EC2 GetConsoleOutput): not connecting to a "
            "host whose key cannot be checked"
        )
    for line in lines:
        key_type, _, data = line.partition(" ")
        try:
            key = paramiko.PKey.from_type_string(key_type, base64.b64decode(data))
        except (ValueError, paramiko.SSHException, binascii.Error):
            continue  # a key type paramiko does not know
        client.get_host_keys().add(name, key_type, key)
    return True


def _tell_new_key(hop: Hop, keys: SshKeys, client: paramiko.SSHClient, published: bool) -> None:
    transport = client.get_transport()
    if keys.on_new_host_key is None or transport is None:
        return
    if keys.known_hosts.is_file():
        recorded = paramiko.HostKeys(str(keys.known_hosts))
        if recorded.lookup(host_name(hop.host, hop.port)):
            return
    how = "matches the key it published on its console" if published else "trusted on first use"
    keys.on_new_host_key(
        f"[skyinfra] {hop.label} ({hop.host}:{hop.port}): host key "
        f"{fingerprint(transport.get_remote_server_key())} {how}; recorded in {keys.known_hosts}"
    )
