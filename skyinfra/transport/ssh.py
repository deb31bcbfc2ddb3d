"""SshTransport: reach nodes over SSH (paramiko), with the same surface as LocalTransport.
The AWS target (targets/aws/reach.py) and the ssh target (targets/ssh/target.py) both reach
their nodes with it; each passes what is its own (host keys, readiness probe, node root).

Commands run in the node's own process group (the session sshd creates for them); its id is
recorded in the node's ``pids/`` folder so `kill` ends the whole tree and the idle timer sees
that the node is busy.

A node is ready once the bootstrap's provision.sh wrote its ready marker. Until then it is
pending, or failed when provision.sh wrote its failed marker or the optional status command
(cloud-init's, on AWS) reports an error (or finished without the marker): bootstrap.py holds
that protocol, this module runs its probe with the target's :class:`ReadinessProbe`. A node
that does not answer over SSH is unreachable, which right after `up` is normal (it is still
booting). Where a node's published host keys come from is the target's (the AWS target reads
them from the EC2 console: targets/aws/host_keys.py); ssh_connect.py pins them and shows a
key's fingerprint. A node whose SshTarget names a jump host (a private network's way in) is
reached over a channel that host opens, the jump's own key pinned the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import secrets
import shlex
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from skyinfra.errors import HostKeyChangedError, TransportError
from skyinfra.transport.base import Readiness
from skyinfra.transport.bootstrap import NODE_ENV_FILE, parse_probe_output, probe_script
from skyinfra.transport.nodesync import Entries
from skyinfra.transport.ssh_connect import (
    Hop,
    HostKeySource,
    JumpHost,
    SshKeys,
    SshTarget,
    connect,
    fingerprint,
    openssh_argv,
)
from skyinfra.transport.ssh_process import START_TIME, SshProcess
from skyinfra.transport.tree import CopyStats

# paramiko logs a failed connection's traceback from its own thread; without a handler
# Python prints it to stderr. The failure reaches the user as a TransportError (or as an
# unreachable node) anyway, so keep its log quiet unless the application configures logging.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

# Defined beside the connection code (ssh_connect.py); named here, where callers know them.
__all__ = [
    "HostKeySource",
    "JumpHost",
    "ReadinessProbe",
    "SshKeys",
    "SshTarget",
    "SshTransport",
    "fingerprint",
]


@dataclass(frozen=True)
class ReadinessProbe:
    """How a node's bootstrap says how it went (bootstrap.py): the files provision.sh writes
    (``ready_marker``, ``failed_marker``), a command printing ``status: <state>``
    (``cloud_init_status``; None: not asked) and where messages send the user to read what
    the bootstrap did (``bootstrap_log``)."""

    ready_marker: str
    failed_marker: str
    cloud_init_status: str | None
    bootstrap_log: str


class SshTransport:
    """Nodes reached over SSH with one private key; host keys are pinned in ``known_hosts``.

    What is trusted, and when (``keys``): with ``host_keys`` (the AWS target passes the keys
    each node printed on its EC2 console, read through the API with the operator's
    credentials) a node's first connection accepts only a key the node itself published, and
    the node reads as not reachable until it has; the keys are then recorded in
    ``known_hosts``. Without ``host_keys`` (tests, direct use) a key seen for the first time is
    trusted and recorded, and the ``on_new_host_key`` callback is told its fingerprint. Either
    way, a key that differs from the recorded one is refused afterwards (`down` forgets them).
    """

    def __init__(
        self,
        targets: Mapping[int, SshTarget],
        *,
        keys: SshKeys,
        node_root: str = "/opt/skyinfra/node",
        connect_timeout_s: float = 20.0,
        probe: ReadinessProbe | None = None,
        unreachable: Mapping[int, str] | None = None,
        gone: Callable[[int], bool] | None = None,
    ) -> None:
        """``probe``: how a node's bootstrap says it is ready or failed (None: a transport
        that only runs commands and copies, such as a first contact; its nodes read as failed);
        ``unreachable``: nodes never dialled, each with the reason (it reads as unreachable);
        ``gone``: whether a node's machine is certainly gone (the AWS target asks EC2), for
        ``node_gone``."""
        self._targets = dict(targets)
        self._unreachable = dict(unreachable or {})
        self._keys = keys
        self._key_path = keys.key_path
        self._root = node_root
        self._timeout = connect_timeout_s
        self._readiness_probe = probe
        self._clients: dict[int, paramiko.SSHClient] = {}
        self._host_keys = keys.host_keys
        self._gone = gone
        # The way-in hosts' connections (one per host), which every node's rides on.
        self._jumps: dict[JumpHost, paramiko.SSHClient] = {}
        self._jump_lock = threading.Lock()
        # One lock per node so nodes connect in parallel; _lock guards the dicts and the
        # known_hosts file.
        self._node_locks: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()

    def node_gone(self, node: int) -> bool:
        """The node's machine is certainly gone (not just unreachable for a moment): a job
        that loses its head then goes on as one that lost node 0 (skyinfra.run.job)."""
        return self._gone is not None and self._gone(node)

    # ------------------------------------------------------------------ connections

    def _target(self, node: int) -> SshTarget:
        if node in self._unreachable:
            raise TransportError(f"node {node}: {self._unreachable[node]}")
        try:
            return self._targets[node]
        except KeyError:
            raise TransportError(f"no node {node} (nodes: {self._nodes()})") from None

    def _nodes(self) -> list[int]:
        return sorted({*self._targets, *self._unreachable})

    def _on_node(self, node: int, path: str) -> str:
        """``path`` as the node sees it (under the target's root prefix, if any)."""
        target = self._targets.get(node)
        return f"{target.root}{path}" if target is not None and target.root else path

    def _client(self, node: int) -> paramiko.SSHClient:
        target = self._target(node)
        with self._lock:
            node_lock = self._node_locks.setdefault(node, threading.Lock())
        with node_lock:
            with self._lock:
                if node in self._clients:
                    return self._clients[node]
            source = self._host_keys
            client = connect(
                Hop(
                    f"node {node}",
                    target.host,
                    target.port,
                    target.user,
                    None if source is None else lambda: source(node),
                ),
                self._keys,
                timeout=self._timeout,
                file_lock=self._lock,
                sock=None if target.jump is None else self._through_jump(node, target),
            )
            with self._lock:
                self._clients[node] = client
            return client

    def _through_jump(self, node: int, target: SshTarget) -> paramiko.Channel:
        """A channel from the way-in host to the node's sshd (ProxyJump's), over the one
        connection to that host every node shares (made, and its key checked, first)."""
        jump = target.jump
        assert jump is not None
        with self._jump_lock:
            client = self._jumps.get(jump)
            transport = None if client is None else client.get_transport()
            if transport is None or not transport.is_active():
                if client is not None:
                    client.close()
                client = connect(
                    Hop(jump.label, jump.host, jump.port, jump.user, jump.host_keys, "it"),
                    self._keys,
                    timeout=self._timeout,
                    file_lock=self._lock,
                )
                self._jumps[jump] = client
                transport = client.get_transport()
            assert transport is not None
        try:
            return transport.open_channel(
                "direct-tcpip",
                (target.host, target.port),
                ("127.0.0.1", 0),
                timeout=self._timeout,
            )
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise TransportError(
                f"node {node}: {jump.label} ({jump.host}:{jump.port}) could not reach "
                f"{target.host}:{target.port}: {err or type(err).__name__}"
            ) from err

    def _drop(self, node: int) -> None:
        """Forget a node's connection (it broke: the node rebooted, or the network did)."""
        with self._lock:
            client = self._clients.pop(node, None)
        if client is not None:
            client.close()

    def ssh_client(self, node: int) -> paramiko.SSHClient:
        """The node's connection (made on first use, host key pinned): for tools that speak
        SSH themselves, such as `skyinfra verify`'s testinfra hosts."""
        return self._client(node)

    def target(self, node: int) -> SshTarget:
        """Where the node is reached (TransportError: a node that is never dialled)."""
        return self._target(node)

    def forget(self, node: int) -> None:
        """Drop the node's connection; the next use connects again (and checks the key)."""
        self._drop(node)

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
        with self._jump_lock:
            for client in self._jumps.values():
                client.close()
            self._jumps.clear()

    def _exec(self, node: int, command: str) -> paramiko.Channel:
        transport = self._client(node).get_transport()
        if transport is None or not transport.is_active():
            self._drop(node)
            raise TransportError(f"node {node}: SSH connection is closed")
        try:
            channel = transport.open_session()
        except (paramiko.SSHException, EOFError, OSError) as err:
            self._drop(node)
            raise TransportError(f"node {node}: SSH connection failed: {err}") from err
        channel.set_combine_stderr(True)
        channel.exec_command(command)
        return channel

    def check_call(
        self, node: int, script: str, *, timeout: float | None = None, stdin: bytes = b""
    ) -> str:
        """Run a shell snippet (``stdin`` on its stdin), return its output; TransportError on
        non-zero exit, or when ``timeout`` seconds pass without output or exit."""
        channel = self._exec(node, script)
        if timeout is not None:
            channel.settimeout(timeout)
        try:
            channel.sendall(stdin)
            channel.shutdown_write()
            output = channel.makefile("r").read().decode(errors="replace")
        except TimeoutError as err:
            channel.close()
            raise TransportError(f"node {node}: no answer within {timeout}s") from err
        except (OSError, EOFError, paramiko.SSHException) as err:
            self._drop(node)
            raise TransportError(f"node {node}: SSH connection failed: {err}") from err
        code = channel.recv_exit_status()
        if code != 0:
            raise TransportError(
                f"node {node}: remote command failed",
                argv=["sh", "-c", script],
                returncode=code,
                stderr=output,
            )
        return str(output)

    # ------------------------------------------------------------------ NodeTransport

    def node_root(self, node: int) -> str:
        return self._on_node(node, self._root)

    def readiness(self, node: int) -> Readiness:
        """Ready, pending, failed or unreachable, from the markers provision.sh writes (and
        the probe's status command when neither is there; see bootstrap.py). One SSH command;
        never raises."""
        if node in self._unreachable:
            return Readiness("unreachable", self._unreachable[node])
        target = self._targets.get(node)
        if target is None:
            return Readiness("failed", f"no node {node} (nodes: {self._nodes()})")
        probe = self._readiness_probe
        if probe is None:
            return Readiness("failed", f"node {node}: this transport has no readiness probe")
        ready_marker = self._on_node(node, probe.ready_marker)
        script = probe_script(
            ready_marker, self._on_node(node, probe.failed_marker), probe.cloud_init_status
        )
        output = self._probe(node, script)
        if isinstance(output, Readiness):
            return output
        return parse_probe_output(
            output,
            ready_marker=ready_marker,
            bootstrap_log=probe.bootstrap_log,
            tail_command=self._tail_hint(target, probe.bootstrap_log),
        )

    def _probe(self, node: int, script: str) -> str | Readiness:
        """The probe's output, or the node's Readiness when it cannot be asked: a second try
        on a fresh connection if the cached one broke, then unreachable."""
        error: Exception | None = None
        for _attempt in (1, 2):
            try:
                return self.check_call(node, script, timeout=self._timeout)
            except HostKeyChangedError as err:
                return Readiness("failed", str(err))
            except (TransportError, paramiko.SSHException, OSError, EOFError) as err:
                self._drop(node)
                error = err
        return Readiness("unreachable", f"not reachable over SSH ({error})")

    def _tail_hint(self, target: SshTarget, bootstrap_log: str) -> str:
        """A command the operator can paste: the key and the pinned host keys on both hops."""
        argv = openssh_argv(target, key=self._key_path, known_hosts=self._keys.known_hosts)
        return shlex.join([*argv, "sudo", "tail", "-n", "50", bootstrap_log])

    def start(
        self, node: int, argv: Sequence[str], *, env: Mapping[str, str], cwd: str, tag: str,
        stdin: bytes | None = None,
    ) -> SshProcess:  # fmt: skip
        """Start ``argv`` in ``cwd`` with ``env`` added (in the shell's command line: never a
        secret) and the node's venv first on PATH; ``stdin`` through the channel, then EOF."""
        if not argv:
            raise TransportError(f"node {node}: empty command")
        root = self.node_root(node)
        pid_file = posixpath.join(root, "pids", f"{tag}.pid")
        venv = posixpath.join(root, "venv")
        node_env = posixpath.join(root, NODE_ENV_FILE)
        exports = "".join(
            f"export {name}={shlex.quote(value)}; "
            for name, value in {
                "VIRTUAL_ENV": venv,
                **dict(env),
            }.items()
        )
        # The shell sshd starts leads its own session and process group: its pid is the
        # group id `kill` signals. `exec` keeps that pid for the user's command.
        command = (
            f"mkdir -p {shlex.quote(posixpath.dirname(pid_file))} && "
            f'echo "$$ $({START_TIME} $$)" > {shlex.quote(pid_file)} && '
            f"cd {shlex.quote(cwd)} && "
            # The node's own environment (NODE_ENV_FILE; on AWS, NCCL over EFA), before
            # the caller's variables, which win.
            f"if [ -r {shlex.quote(node_env)} ]; then . {shlex.quote(node_env)}; fi; "
            f'export PATH={shlex.quote(venv + "/bin")}:"$PATH"; {exports}'
            f"exec {shlex.join(argv)}"
        )
        channel = self._exec(node, command)
        try:
            if stdin is not None:
                channel.sendall(stdin)
                channel.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException) as err:
            channel.close()
            raise TransportError(f"node {node}: SSH channel failed: {err}") from err
        return SshProcess(node, self, channel, pid_file)

    def copy_tree(self, node: int, src: Path, wanted: Entries, run_id: str) -> CopyStats:
        """Only what the node's newest copy lacks travels, over SFTP (sshcopy.py)."""
        from skyinfra.transport.sshcopy import copy_tree

        return copy_tree(self, node, src, wanted, run_id)

    def open_sftp(self, node: int) -> paramiko.SFTPClient:
        return self._client(node).open_sftp()

    def put_file(self, node: int, src: Path, dest: str) -> None:
        """``dest`` replaced whole (a part file renamed over it): every run puts the node's
        topology.json, which another job's launcher may be reading at that moment."""
        folder = posixpath.dirname(dest) or "."
        self.check_call(node, f"mkdir -p {shlex.quote(folder)}")
        part = f"{folder}/.{posixpath.basename(dest)}.{secrets.token_hex(4)}.part"
        sftp = self._client(node).open_sftp()
        try:
            sftp.put(str(src), part)
            sftp.posix_rename(part, dest)
        except OSError as err:
            with contextlib.suppress(OSError):
                sftp.remove(part)
            raise TransportError(f"node {node}: uploading {src} to {dest} failed: {err}") from err
        finally:
            sftp.close()

    def fetch(self, node: int, remote: str, local: Path) -> bool:
        """Copy a file back; False when it does not exist on the node (or went while it was
        read: a node being lost). ``local`` is replaced only by a whole copy."""
        sftp = self._client(node).open_sftp()
        # A name of this call's own: two threads (or processes) may fetch one file at once.
        own = f"{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}"
        part = local.with_name(f".{local.name}.{own}.part")
        try:
            try:
                sftp.stat(remote)
                local.parent.mkdir(parents=True, exist_ok=True)
                sftp.get(remote, str(part))
            except FileNotFoundError:
                return False
            os.replace(part, local)
            return True
        finally:
            part.unlink(missing_ok=True)
            sftp.close()
