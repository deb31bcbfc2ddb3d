"""A private network's stand-ins (issue 46): the operator in the test's network namespace, a
bastion's sshd in a second one reachable from it, and the nodes' sshds in a third reachable
only from the bastion's, over veth pairs and addresses made here (tests/support/ssh_hosts.py
makes single hosts the same way and holds the helpers).

    operator 127.<n>.0.1 --veth-- 127.<n>.0.2 bastion 127.<n>.1.1 --veth-- nodes 127.<n>.1.2, .3

The bastion forwards no packets (ip_forward off): the nodes are reached only by an SSH
connection the bastion's sshd opens (ProxyJump). The operator's namespace has no route to
the nodes' subnet at all (an `unreachable` route for the whole 127.<n>.0.0/16 under the
bastion's /24, so 127/8's local table is not consulted for it either): a direct dial fails
with "No route to host". The nodes share one namespace and one host key; the bastion has
its own key. Every host logs in the test's own user (the nodes' folders are the test's),
each sshd with a home of its own.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ssh_hosts import _SUBNETS, SSHD, Host, Hosts, _ip, _keygen, _sysctl
from tests.support.tools import require_system_tool


@dataclass
class PrivateNetwork:
    hosts: Hosts  # the bastion first, then the nodes
    subnet: int

    @property
    def bastion(self) -> Host:
        return self.hosts.hosts[0]

    @property
    def nodes(self) -> list[Host]:
        return self.hosts.hosts[1:]


def _holder() -> subprocess.Popen[bytes]:
    holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
    while os.readlink(f"/proc/{holder.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
        if holder.poll() is not None:
            pytest.fail("unshare --net failed")
        time.sleep(0.01)
    return holder


def _rules(ns: int | None, own: list[str], subnets: str) -> list[list[str]]:
    """Route ``subnets`` through the main table but the namespace's ``own`` addresses; the
    rules to put back (the test's namespace outlives the fixture)."""
    for address in own:
        _ip("rule", "add", "pref", "5", "to", address, "lookup", "local", ns=ns)
    _ip("rule", "add", "pref", "10", "to", subnets, "lookup", "main", ns=ns)
    _ip("rule", "add", "pref", "11", "lookup", "local", ns=ns)
    _ip("rule", "del", "pref", "0", ns=ns)
    _ip("route", "add", "unreachable", subnets, ns=ns)
    return [
        ["rule", "add", "pref", "0", "lookup", "local"],
        ["rule", "del", "pref", "11"],
        ["rule", "del", "pref", "10"],
        *[["rule", "del", "pref", "5"] for _ in own],
        ["route", "del", "unreachable", subnets],
    ]


def _veth(outer: str, outer_ns: int | None, inner: str, inner_ns: int) -> None:
    _ip(
        "link",
        "add",
        outer,
        "type",
        "veth",
        "peer",
        "name",
        inner,
        "netns",
        str(inner_ns),
        ns=outer_ns,
    )
    for name, ns in ((outer, outer_ns), (inner, inner_ns)):
        _sysctl(f"net.ipv4.conf.{name}.route_localnet", ns)
        _ip("link", "set", name, "up", ns=ns)


def _sshd_config(base: Path, name: str, addresses: list[str], host_key: Path) -> Path:
    home = base / f"home-{name}"
    home.mkdir()
    config = base / f"sshd-{name}_config"
    listen = "".join(f"ListenAddress {a}\n" for a in addresses)
    config.write_text(
        f"Port 22\n{listen}HostKey {host_key}\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\nPidFile none\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n"
        "AllowTcpForwarding yes\n"
        f"SetEnv HOME={home}\n"
    )
    return config


@contextlib.contextmanager
def private_network(node_count: int) -> Iterator[PrivateNetwork]:
    require_system_tool(SSHD if os.access(SSHD, os.X_OK) else None, "openssh-server")
    require_system_tool(shutil.which("nsenter"), "util-linux")
    links = [
        line.split(":")[0].strip()
        for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]
    ]
    if [name for name in links if name != "lo" and not name.startswith("sky")]:
        pytest.fail("the bastion's stand-ins need the test's own namespace: run `make test`")
    n = next(_SUBNETS)
    prefix = f"127.{n}"
    base = Path(tempfile.mkdtemp(prefix="skyinfra-bastion-"))
    key = base / "operator_ed25519"
    _keygen(key)
    (base / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)
    uid = os.getuid()
    hosts = Hosts([], getpass.getuser(), uid, key, base, f"skybast{n}", f"{prefix}.0")
    holders: list[subprocess.Popen[bytes]] = []
    try:
        bastion_ns, nodes_ns = _holder(), _holder()
        holders += [bastion_ns, nodes_ns]
        _sysctl("net.ipv4.conf.all.route_localnet")
        _veth(f"skybast{n}o", None, f"skybast{n}b", bastion_ns.pid)
        _veth(f"skybast{n}p", bastion_ns.pid, f"skybast{n}n", nodes_ns.pid)
        for holder in holders:
            _ip("link", "set", "lo", "up", ns=holder.pid)
            _sysctl("net.ipv4.conf.all.route_localnet", holder.pid)
        forward = ["sysctl", "-qw", "net.ipv4.ip_forward=0"]
        subprocess.run(
            ["nsenter", f"--net=/proc/{bastion_ns.pid}/ns/net", *forward],
            check=True, capture_output=True,
        )  # fmt: skip
        _ip("addr", "add", f"{prefix}.0.1/24", "dev", f"skybast{n}o")
        _ip("addr", "add", f"{prefix}.0.2/24", "dev", f"skybast{n}b", ns=bastion_ns.pid)
        _ip("addr", "add", f"{prefix}.1.1/24", "dev", f"skybast{n}p", ns=bastion_ns.pid)
        nodes = [f"{prefix}.1.{k + 2}" for k in range(node_count)]
        for address in nodes:
            _ip("addr", "add", f"{address}/24", "dev", f"skybast{n}n", ns=nodes_ns.pid)
        hosts._rules = _rules(None, [f"{prefix}.0.1"], f"{prefix}.0.0/16")
        _rules(bastion_ns.pid, [f"{prefix}.0.2", f"{prefix}.1.1"], f"{prefix}.0.0/16")
        _rules(nodes_ns.pid, nodes, f"{prefix}.0.0/16")
        bastion_key, nodes_key = base / "bastion_ed25519", base / "nodes_ed25519"
        _keygen(bastion_key)
        _keygen(nodes_key)
        bastion = Host(
            f"{prefix}.0.2",
            base / "home-bastion",
            bastion_ns,
            _sshd_config(base, "bastion", [f"{prefix}.0.2"], bastion_key),
            bastion_key,
        )
        # One sshd for the nodes' addresses (one namespace): it answers on each.
        first = Host(
            nodes[0],
            base / "home-nodes",
            nodes_ns,
            _sshd_config(base, "nodes", nodes, nodes_key),
            nodes_key,
            inside=True,
        )
        hosts.hosts += [bastion, first]
        hosts.start_sshd(bastion)
        hosts.start_sshd(first)
        hosts.hosts += [
            Host(a, first.home, nodes_ns, first.config, nodes_key, inside=True) for a in nodes[1:]
        ]
        yield PrivateNetwork(hosts, n)
    finally:
        for host in hosts.hosts:
            hosts.stop_sshd(host)
        for holder in holders:
            holder.kill()
            holder.wait(10)
        for rule in reversed(hosts._rules):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip(*rule)
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "del", f"skybast{n}o")
        shutil.rmtree(base, ignore_errors=True)
