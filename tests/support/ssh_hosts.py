"""Stand-in hosts for the ssh target (issue 45): each a real sshd in a network namespace of
its own, with its own address and its own home folder, reached from the test's namespace
through a veth pair on a bridge the test makes. Nothing here leaves the worker's namespace.

The addresses are 127.45.<n>.<k>: loopback to the tests' guard (tests/loopback_guard), yet on
real links. Linux treats all of 127.0.0.0/8 as this machine's own (the local routing table,
looked up first), so each namespace gets a rule, consulted before that table, that sends the
stand-ins' subnet to the main table (its bridge or veth) unless the address is its own;
route_localnet lets such packets cross the links. The rules are taken out at the end.

Each host's sshd runs in the namespace of a holder process (``unshare --net sleep``), so it
can be restarted with another host key (a reinstalled machine) on the same address. The
login user is an unprivileged account of this machine when there is one (uid 1000 or
$SKYINFRA_TEST_SSH_USER), else the current user; every host gets a home of its own (sshd's
SetEnv HOME), so each host's home lists only what was put on that host.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import require_wheelhouse
from tests.support.tools import require_system_tool

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
USER_ENV = "SKYINFRA_TEST_SSH_USER"
_SUBNETS = itertools.count(45)


def _ip(*args: str, ns: int | None = None) -> None:
    prefix = [] if ns is None else ["nsenter", f"--net=/proc/{ns}/ns/net"]
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, text=True)


def _sysctl(name: str, ns: int | None = None) -> None:
    prefix = [] if ns is None else ["nsenter", f"--net=/proc/{ns}/ns/net"]
    subprocess.run([*prefix, "sysctl", "-qw", f"{name}=1"], check=True, capture_output=True)


def login_user() -> pwd.struct_passwd:
    """An unprivileged account with a shell when the machine has one, else this user."""
    wanted = os.environ.get(USER_ENV)
    if wanted:
        return pwd.getpwnam(wanted)
    for entry in pwd.getpwall():
        if entry.pw_uid >= 1000 and entry.pw_uid != 65534 and entry.pw_shell.endswith("sh"):
            return entry
    return pwd.getpwuid(os.getuid())


@dataclass
class Host:
    address: str
    home: Path
    holder: subprocess.Popen[bytes]
    config: Path
    host_key: Path
    sshd: subprocess.Popen[str] | None = None
    # Not reachable from the test's namespace (a private node): its sshd is waited for from
    # inside its own.
    inside: bool = False

    @property
    def ns(self) -> int:
        return self.holder.pid


@dataclass
class Hosts:
    """The stand-ins, their login user and the operator's key (its public half authorized)."""

    hosts: list[Host]
    user: str
    uid: int
    key: Path
    base: Path
    bridge: str
    subnet: str
    env: dict[str, str] = field(default_factory=dict)
    _rules: list[list[str]] = field(default_factory=list)

    @property
    def addresses(self) -> list[str]:
        return [h.address for h in self.hosts]

    def in_namespace(self, host: Host, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the host's network namespace (as root: a test's look at it)."""
        return subprocess.run(
            ["nsenter", f"--net=/proc/{host.ns}/ns/net", *argv],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def start_sshd(self, host: Host) -> None:
        host.sshd = subprocess.Popen(
            ["nsenter", f"--net=/proc/{host.ns}/ns/net", SSHD, "-D", "-e", "-f", str(host.config)],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # Bounded by the sshd: it either accepts a connection or exits.
        while True:
            if host.inside:
                if _answers_inside(host):
                    return
            else:
                with contextlib.suppress(OSError), socket.create_connection((host.address, 22), 1):
                    return
            if host.sshd.poll() is not None:
                err = host.sshd.stderr.read() if host.sshd.stderr else ""
                pytest.fail(f"sshd on {host.address} did not start: {err}")
            time.sleep(0.05)

    def stop_sshd(self, host: Host) -> None:
        if host.sshd is not None and host.sshd.poll() is None:
            host.sshd.terminate()
            host.sshd.wait(10)
        host.sshd = None

    def new_host_key(self, host: Host) -> None:
        """The machine was reinstalled: another host key on the same address."""
        self.stop_sshd(host)
        old = host.host_key
        host.host_key = old.with_name(old.name + "-new")
        _keygen(host.host_key)
        host.config.write_text(host.config.read_text().replace(str(old), str(host.host_key)))
        self.start_sshd(host)

    def old_host_key(self, host: Host) -> None:
        self.stop_sshd(host)
        new = host.host_key
        host.host_key = new.with_name(new.name.removesuffix("-new"))
        host.config.write_text(host.config.read_text().replace(str(new), str(host.host_key)))
        self.start_sshd(host)

    @property
    def no_host_address(self) -> str:
        """An address on the stand-ins' subnet where no host is: a connection to it finds no
        machine (no answer to ARP), as a spare that is switched off."""
        return f"{self.subnet}.250"

    def refuse_key(self, host: Host, *, refuse: bool = True) -> None:
        """The host's sshd restarted with no authorized key (``refuse=False``: the operator's
        again): it answers, and refuses the operator's key."""
        self.stop_sshd(host)
        keys, none = self.base / "authorized_keys", self.base / "no_authorized_keys"
        none.touch()
        old, new = (keys, none) if refuse else (none, keys)
        host.config.write_text(
            host.config.read_text().replace(
                f"AuthorizedKeysFile {old}\n", f"AuthorizedKeysFile {new}\n"
            )
        )
        self.start_sshd(host)

    def old_python(self, host: Host) -> None:
        """The host's ``python3`` (first on its sessions' PATH, through sshd's SetEnv) says it
        is Python 3.8: a machine without Python 3.10+. Takes effect at the next login."""
        folder = self.base / f"old-python-{self.hosts.index(host)}"
        folder.mkdir(mode=0o755, exist_ok=True)
        fake = folder / "python3"
        fake.write_text("#!/bin/sh\necho 3.8\n")
        fake.chmod(0o755)
        self.stop_sshd(host)
        text = host.config.read_text()
        path = f'"PATH={folder}:/usr/local/bin:/usr/bin:/bin"'
        host.config.write_text(text.replace("\nSetEnv ", f"\nSetEnv {path} ", 1))
        self.start_sshd(host)

    def cut_link(self, host: Host, *, up: bool = False) -> None:
        """The host taken off the network (its veth's outer end down; ``up``: back on): its
        sshd runs on, unreachable, as a machine whose switch port died."""
        k = self.hosts.index(host)
        _ip("link", "set", f"{self.bridge}h{k}", "up" if up else "down")

    def home_listing(self, host: Host) -> list[str]:
        return sorted(str(p.relative_to(host.home)) for p in host.home.rglob("*"))

    def user_processes(self) -> list[str]:
        """Every process of the login user on these hosts (all hosts share this machine's
        processes, and the login user the hosts of other test files: a process is these
        hosts' when its login's HOME or its command names one of their folders), but the sshd
        sessions themselves: what skyinfra left running."""
        homes = {f"HOME={h.home}".encode() for h in self.hosts}
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if proc.stat().st_uid != self.uid:
                    continue
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                environ = set((proc / "environ").read_bytes().split(b"\0"))
            except OSError:
                continue
            ours = bool(homes & environ) or str(self.base) in cmd
            if ours and cmd and not cmd.startswith("sshd"):
                found.append(f"{proc.name} {cmd}")
        return found


@contextlib.contextmanager
def package_sources() -> Iterator[dict[str, str]]:
    """uv's settings for hosts that install their python_packages from the dependency
    wheelhouse (which holds jax and keras at the operator's versions, as a lab's machines use
    the lab's mirror) and nothing else (UV_OFFLINE: uv has no variable for --no-index): the
    hosts, in loopback-only namespaces, reach no index. The wheels are linked into a folder of
    their own that the hosts' unprivileged login can read: the wheelhouse may be in one only
    root can enter (a fresh clone under `mktemp -d`, as make test-cold makes)."""
    wheelhouse = require_wheelhouse()
    folder = Path(tempfile.mkdtemp(prefix="skyinfra-host-wheels-"))
    try:
        folder.chmod(0o755)
        for wheel in wheelhouse.glob("*.whl"):
            try:
                os.link(wheel, folder / wheel.name)
            except OSError:  # another file system
                shutil.copy(wheel, folder / wheel.name)
            (folder / wheel.name).chmod(0o644)
        yield {"UV_FIND_LINKS": str(folder), "UV_OFFLINE": "1"}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _answers_inside(host: Host) -> bool:
    probe = f"import socket; socket.create_connection(({host.address!r}, 22), 1).close()"
    done = subprocess.run(
        ["nsenter", f"--net=/proc/{host.ns}/ns/net", sys.executable, "-c", probe],
        capture_output=True, timeout=60,
    )  # fmt: skip
    return done.returncode == 0


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@contextlib.contextmanager
def stand_in_hosts(count: int, env: Mapping[str, str] | None = None) -> Iterator[Hosts]:
    """``count`` hosts, 127.45.<n>.2, .3, ...; the operator's side of the bridge is .1.
    ``env``: variables every login session there gets (such as package_sources())."""
    require_system_tool(SSHD if os.access(SSHD, os.X_OK) else None, "openssh-server")
    require_system_tool(shutil.which("nsenter"), "util-linux")
    # /proc/self/net is this network namespace's (unlike /sys/class/net, the mount's).
    links = [
        line.split(":")[0].strip()
        for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]
    ]
    others = [n for n in links if n != "lo" and not n.startswith("sky")]
    if others:
        # Not the loopback-only namespace of a test worker: the bridge and the routing rules
        # below would change this machine's own network.
        pytest.fail(
            "the ssh target's stand-in hosts need the test's own network namespace: run "
            "through `make test` (tests/loopback-only.sh), not pytest in the machine's network "
            f"(interfaces here: {others})"
        )
    user = login_user()
    n = next(_SUBNETS)
    subnet = f"127.{n}.0"
    bridge = f"skyhosts{n}"
    # Outside pytest's 0700 folders: the login user must reach its home.
    base = Path(tempfile.mkdtemp(prefix="skyinfra-ssh-hosts-"))
    base.chmod(0o755)
    key = base / "operator_ed25519"
    _keygen(key)
    authorized = base / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    authorized.chmod(0o644)
    Path("/run/sshd").mkdir(exist_ok=True)
    hosts = Hosts([], user.pw_name, user.pw_uid, key, base, bridge, subnet, dict(env or {}))
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _sysctl("net.ipv4.conf.all.route_localnet")
        _sysctl(f"net.ipv4.conf.{bridge}.route_localnet")
        _ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        _route_subnet(hosts, None, f"{subnet}.1")
        for k in range(count):
            hosts.hosts.append(_make_host(hosts, k))
        yield hosts
    finally:
        for host in hosts.hosts:
            hosts.stop_sshd(host)
            host.holder.kill()
            host.holder.wait(10)
        for rule in reversed(hosts._rules):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip(*rule)
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "del", bridge)
        shutil.rmtree(base, ignore_errors=True)


def _route_subnet(hosts: Hosts, ns: int | None, own: str) -> None:
    """In namespace ``ns`` (None: the test's): the subnet through the main table, except its
    own address; everything else as before (the local table, after)."""
    rules = [
        ["rule", "add", "pref", "5", "to", own, "lookup", "local"],
        ["rule", "add", "pref", "10", "to", f"{hosts.subnet}.0/24", "lookup", "main"],
        ["rule", "add", "pref", "11", "lookup", "local"],
        ["rule", "del", "pref", "0"],
    ]
    for rule in rules:
        _ip(*rule, ns=ns)
    if ns is None:  # the test's namespace outlives the fixture: put it back
        hosts._rules += [
            ["rule", "add", "pref", "0", "lookup", "local"],
            ["rule", "del", "pref", "11"],
            ["rule", "del", "pref", "10"],
            ["rule", "del", "pref", "5"],
        ]


def _make_host(hosts: Hosts, k: int) -> Host:
    address = f"{hosts.subnet}.{k + 2}"
    holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
    # The holder is in its namespace once its /proc entry names another one than ours.
    while os.readlink(f"/proc/{holder.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
        if holder.poll() is not None:
            pytest.fail("unshare --net failed")
        time.sleep(0.01)
    ns = holder.pid
    outer, inner = f"{hosts.bridge}h{k}", f"{hosts.bridge}n{k}"
    _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", str(ns))
    _ip("link", "set", outer, "master", hosts.bridge)
    _ip("link", "set", outer, "up")
    _ip("link", "set", "lo", "up", ns=ns)
    _sysctl("net.ipv4.conf.all.route_localnet", ns)
    _sysctl(f"net.ipv4.conf.{inner}.route_localnet", ns)
    _ip("addr", "add", f"{address}/24", "dev", inner, ns=ns)
    _ip("link", "set", inner, "up", ns=ns)
    _route_subnet(hosts, ns, address)
    home = hosts.base / f"home-{k}"
    home.mkdir()
    os.chown(home, hosts.uid, -1)
    host_key = hosts.base / f"host{k}_ed25519"
    _keygen(host_key)
    config = hosts.base / f"sshd{k}_config"
    session_env = " ".join(f'"{n}={v}"' for n, v in {"HOME": str(home), **hosts.env}.items())
    config.write_text(
        f"Port 22\nListenAddress {address}\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {hosts.base / 'authorized_keys'}\nPidFile none\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM yes\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n"
        f"SetEnv {session_env}\n"
    )
    host = Host(address, home, holder, config, host_key)
    hosts.start_sshd(host)
    return host
