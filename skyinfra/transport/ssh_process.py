"""A command started on a node over SSH (SshTransport.start): its output, its exit, and
ending its process group by the pid file it wrote."""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import paramiko


class RunsScripts(Protocol):
    """What a process asks of its transport (SshTransport): a shell snippet run on a node."""

    def check_call(
        self, node: int, script: str, *, timeout: float | None = None, stdin: bytes = b""
    ) -> str: ...


# Shell: when process $1 started (field 22 of /proc/PID/stat; the command name before it
# may hold spaces). Pid files hold "PID START".
START_TIME = "start_of() { sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f20; }; start_of"


class SshProcess:
    """A command running on a node; stdout and stderr arrive merged, line by line."""

    def __init__(
        self, node: int, transport: RunsScripts, channel: paramiko.Channel, pid_file: str
    ) -> None:
        self.node = node
        self._transport = transport
        self._channel = channel
        self._pid_file = pid_file

    def lines(self) -> Iterator[str]:
        stream = self._channel.makefile("r")
        for line in stream:
            yield str(line).rstrip("\n")

    def poll(self) -> int | None:
        if self._channel.exit_status_ready():
            return int(self._channel.recv_exit_status())
        return None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._channel.exit_status_ready():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"node {self.node}: command still running after {timeout}s")
            time.sleep(0.05)
        return int(self._channel.recv_exit_status())

    def kill(self, grace_s: float = 10.0) -> None:
        """TERM the remote process group, then KILL it after ``grace_s`` seconds."""
        pid_file = shlex.quote(self._pid_file)
        steps = int(max(grace_s, 0.5) / 0.5)
        # A live process with the recorded pid but another start time reused the pid of a
        # stale file: never signal it (a gone leader's group id cannot be reused while any
        # member of the group lives, so that group is still ours).
        script = (
            f"read -r pid start < {pid_file} 2>/dev/null || exit 0; "
            f'now=$({START_TIME} "$pid"); '
            f'if [ -n "$now" ] && [ "$now" != "$start" ]; then rm -f {pid_file}; exit 0; fi; '
            'kill -TERM -- "-$pid" 2>/dev/null || exit 0; '
            f"for _ in $(seq {steps}); do "
            'kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done; '
            'kill -KILL -- "-$pid" 2>/dev/null; '
            f"rm -f {pid_file}"
        )
        self._transport.check_call(self.node, script)
        with contextlib.suppress(TimeoutError):
            self.wait(timeout=5)
