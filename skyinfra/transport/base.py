"""The NodeTransport protocol: what `skyinfra run` needs from a node, whatever the target."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from skyinfra.transport.nodesync import Entries
from skyinfra.transport.tree import CopyStats

# Decides, for a path relative to the copied directory, whether to leave it out.
IgnoreFn = Callable[[str], bool]


# ready: the bootstrap finished; pending: still running (or not started); failed: it ended
# with an error and will not become ready; unreachable: the node did not answer (yet).
ReadinessState = Literal["ready", "pending", "failed", "unreachable"]


@dataclass(frozen=True)
class Readiness:
    """Whether a node can take a run, and in words why not (with where to look)."""

    state: ReadinessState
    detail: str = ""
    # The bootstrap's current (or last) phase and how long the node has been in it, and in
    # the bootstrap as a whole, in seconds; None where the target does not report phases.
    phase: str | None = None
    phase_s: float | None = None
    bootstrap_s: float | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"


class NodeProcess(Protocol):
    """A command running on a node; output is stdout and stderr merged, line by line."""

    node: int

    def lines(self) -> Iterator[str]: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self, grace_s: float = 10.0) -> None:
        """End the command and its children: SIGTERM, then SIGKILL after ``grace_s``."""
        ...


@runtime_checkable
class NodeTransport(Protocol):
    """How skyinfra reaches a target's nodes (``Target.transport``); every transport
    implements every verb (``node_gone`` answers False where it cannot tell)."""

    def node_root(self, node: int) -> str:
        """The node's own directory (holds venv/, work/, runs/)."""
        ...

    def readiness(self, node: int) -> Readiness:
        """Whether the node's bootstrap finished; never raises for an unreachable node."""
        ...

    def copy_tree(self, node: int, src: Path, wanted: Entries, run_id: str) -> CopyStats:
        """Make ``<node root>/runs/<run_id>/work`` hold exactly ``wanted`` (tree.scan of
        ``src``): what the node's newest complete copy holds unchanged is hard-linked from
        it, only the rest travels (nodesync.py); the run directory must be new."""
        ...

    def put_file(self, node: int, src: Path, dest: str) -> None:
        """Copy a file to the node; ``dest`` is replaced whole, never seen half-written (runs
        started at once put the same node files)."""
        ...

    def start(
        self,
        node: int,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        tag: str,
        stdin: bytes | None = None,
    ) -> NodeProcess:
        """Start ``argv`` on the node in ``cwd`` with ``env`` added; ``tag`` names the run.
        ``env`` may show on the node's command lines (SSH): never a secret there. ``stdin``:
        bytes the process reads on its standard input, then end of file (a pipe locally, the
        SSH channel on AWS): the only way a secret reaches a node (skyinfra.run.job)."""
        ...

    def fetch(self, node: int, remote: str, local: Path) -> bool:
        """Copy a file back; False when it does not exist on the node."""
        ...

    def node_gone(self, node: int) -> bool:
        """Whether the node is certainly gone, not just unreachable for a moment (local: its
        folder is; aws: EC2 says its instance is terminated). False where the transport
        cannot tell: a failed read then stays an error."""
        ...

    def close(self) -> None:
        """Let go of what the transport holds open (aws: its SSH connections); nothing to do
        for a transport that holds nothing (local). Safe to call more than once."""
        ...
