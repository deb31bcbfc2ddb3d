"""The ``[ssh]`` table of the spec: the machines the ssh target enrols, and how to log in.

``hosts`` are node 0 first, at least ``nodes`` of them (the first ``nodes`` are enrolled);
``spare_hosts`` stand by for a lost host (a later session's recovery) and may not repeat a
host. ``private_addresses``: per host, the address the nodes reach each other on when it is
not the one the operator dials. Everything here is checked offline, before anything is
written or dialled; what only a host can say (reachable, key accepted, Python 3.10+) is
checked when `up` first contacts it (preflight.py).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyinfra.errors import SpecError
from skyinfra.spec import Problems, read_int, reject_unknown
from skyinfra.targets.ssh.checkpoint_store import (
    STORE_KEYS,
    SshCheckpointStore,
    parse_store,
)

SSH_KEYS = (
    "hosts", "user", "key", "port", "private_addresses", "python", "spare_hosts", *STORE_KEYS,
)  # fmt: skip
DEFAULT_PYTHON = "python3"
# A host name (RFC 1123 labels) or an IPv4/IPv6 address; no user@ or :port (those are
# ssh.user and ssh.port).
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)
_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
# An interpreter's name on the host's PATH or its absolute path: no spaces, no quotes.
_PYTHON = re.compile(r"^(/[A-Za-z0-9._+/-]+|[A-Za-z0-9._+-]+)$")
HOST_EXAMPLE = 'e.g. ["10.0.0.5", "gpu-2.lab.example.com"]'


@dataclass(frozen=True)
class SshSpec:
    hosts: tuple[str, ...]
    user: str
    key: str
    port: int = 22
    private_addresses: tuple[str, ...] = ()
    python: str = DEFAULT_PYTHON
    spare_hosts: tuple[str, ...] = field(default=())
    # ssh.checkpoints_url (checkpoint_store.py); None: a folder on each host only.
    checkpoints: SshCheckpointStore | None = None

    def to_dict(self) -> dict[str, Any]:
        table: dict[str, Any] = {
            "hosts": list(self.hosts),
            "user": self.user,
            "key": self.key,
            "port": self.port,
            "python": self.python,
        }
        if self.private_addresses:
            table["private_addresses"] = list(self.private_addresses)
        if self.spare_hosts:
            table["spare_hosts"] = list(self.spare_hosts)
        if self.checkpoints:
            table.update(self.checkpoints.to_dict())
        return table

    def node_hosts(self, nodes: int) -> tuple[str, ...]:
        """The hosts enrolled as nodes 0..nodes-1."""
        return self.hosts[:nodes]

    def private_address(self, index: int) -> str:
        """Where the other nodes reach node ``index``."""
        if self.private_addresses:
            return self.private_addresses[index]
        return self.hosts[index]


def _is_host(value: Any) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(_HOSTNAME.match(value))


def _host_list(raw: dict[str, Any], key: str, required: bool) -> tuple[str, ...]:
    value = raw.get(key)
    path = f"ssh.{key}"
    if value is None and not required:
        return ()
    if not isinstance(value, list) or (required and not value):
        raise SpecError(path, value, f"a list of host names or addresses, {HOST_EXAMPLE}")
    for i, host in enumerate(value):
        if not _is_host(host):
            raise SpecError(
                f"{path}[{i}]", host,
                "a host name or an IP address (no user@ or :port: those are ssh.user and "
                f"ssh.port), {HOST_EXAMPLE}",
            )  # fmt: skip
    seen: dict[str, int] = {}
    for i, host in enumerate(value):
        norm = host.lower().rstrip(".")
        if norm in seen:
            raise SpecError(
                f"{path}[{i}]", host,
                f"a host not already listed: it is {path}[{seen[norm]}] too; each machine "
                "enrols once (one node per host)",
            )  # fmt: skip
        seen[norm] = i
    return tuple(value)


def parse_ssh_section(raw: Any, nodes: int) -> SshSpec:
    """``[ssh]``; every problem is a SpecError naming the field and what would be valid."""
    if raw is None:
        raise SpecError(
            "ssh", None, 'a [ssh] table with hosts, user and key, e.g. hosts = ["10.0.0.5", '
            '"10.0.0.6"], user = "ubuntu", key = "~/.ssh/id_ed25519"',
        )  # fmt: skip
    if not isinstance(raw, dict):
        raise SpecError("ssh", raw, "a table")
    reject_unknown(raw, SSH_KEYS, "ssh.")
    problems = Problems()
    none: tuple[str, ...] = ()
    hosts = problems.check(lambda: _host_list(raw, "hosts", True), none)
    if hosts and len(hosts) < nodes:
        problems.found.append(
            SpecError(
                "ssh.hosts",
                list(hosts),
                f"at least {nodes} hosts (nodes = {nodes}; {len(hosts)} listed): add hosts "
                "or lower nodes",
            )
        )
    spares = problems.check(lambda: _host_list(raw, "spare_hosts", False), none)
    enrolled = {h.lower().rstrip(".") for h in hosts}
    for i, host in enumerate(spares):
        if host.lower().rstrip(".") in enrolled:
            problems.found.append(
                SpecError(
                    f"ssh.spare_hosts[{i}]",
                    host,
                    "a host that is not in ssh.hosts: a spare stands in for a lost host, so "
                    "it cannot be one already",
                )
            )
    user = raw.get("user")
    if not isinstance(user, str) or not _USER.match(user):
        problems.found.append(
            SpecError(
                "ssh.user",
                user,
                'the login name on the hosts, e.g. "ubuntu" (skyinfra needs no root)',
            )
        )
    elif user == "root":  # the promise: no root, no sudo on the user's machines
        problems.found.append(
            SpecError(
                "ssh.user",
                user,
                "a login other than root: skyinfra needs no root and runs nothing as root on "
                'your machines; use an unprivileged account, e.g. "ubuntu"',
            )
        )
    key = raw.get("key")
    if not isinstance(key, str) or not key.strip():
        problems.found.append(
            SpecError("ssh.key", key, 'the path of an SSH private key, e.g. "~/.ssh/id_ed25519"')
        )
    port = problems.check(lambda: read_int(raw, "port", "ssh.port", 22, 1, 65535), 22)
    python = raw.get("python", DEFAULT_PYTHON)
    if not isinstance(python, str) or not _PYTHON.match(python):
        problems.found.append(
            SpecError(
                "ssh.python",
                python,
                "an interpreter on the hosts, by name on PATH or absolute path (Python 3.10 "
                'or newer), e.g. "python3" or "/usr/bin/python3.11"',
            )
        )
    private = raw.get("private_addresses")
    private_addresses: tuple[str, ...] = ()
    if private is not None:
        if (
            not isinstance(private, list)
            or len(private) != len(hosts)
            or not all(_is_host(a) for a in private)
        ):
            problems.found.append(
                SpecError(
                    "ssh.private_addresses",
                    private,
                    f"one address per host of ssh.hosts ({len(hosts)}), in the same order: "
                    "where the nodes reach each other",
                )
            )
        else:
            private_addresses = tuple(private)
    store = parse_store(raw, problems)
    problems.raise_any()
    return SshSpec(
        hosts=hosts,
        user=str(user),
        key=str(key),
        port=port,
        private_addresses=private_addresses,
        python=str(python),
        spare_hosts=spares,
        checkpoints=store,
    )


def check_key_file(section: SshSpec) -> Path:
    """The private key ``ssh.key`` names must exist here: Terraform's provisioners and every
    later connection log in with it."""
    private = Path(section.key).expanduser()
    if not private.is_file():
        raise SpecError(
            "ssh.key", section.key,
            f"an existing SSH private key file (no file {private}); the key whose public half "
            "is in ~/.ssh/authorized_keys of ssh.user on every host",
        )  # fmt: skip
    return private
