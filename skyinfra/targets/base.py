"""The Target protocol: what the lifecycle needs from a place clusters run (local, aws, ...).

A target owns its section of the spec (``[local]``, ``[aws]``), renders the cluster's root
module (doing first whatever must happen before Terraform: the AWS preflight and wheel
staging), says how to reach the nodes and how long they take to become ready, and cleans up
after ``down``. The lifecycle (skyinfra/lifecycle.py) drives every target through these verbs
and nothing else: it has no branch on a target's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from skyinfra.target_registry import TargetDeclaration, TargetOption, TargetSection

if TYPE_CHECKING:
    from skyinfra.spec import ClusterSpec
    from skyinfra.topology import Topology
    from skyinfra.transport.base import NodeTransport
    from skyinfra.workspace import Workspace

__all__ = ["Echo", "Shell", "Target", "TargetOption", "TargetOptions", "TargetSection"]

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Shell:
    """What `skyinfra ssh` executes on this machine to reach a node: ``argv`` with ``env``
    (None: this process's) in ``cwd`` (None: here)."""

    argv: list[str]
    env: dict[str, str] | None = None
    cwd: str | None = None


# The target-specific flags the user gave (name -> value); only flags that were set.
TargetOptions = Mapping[str, Any]


class Target(TargetDeclaration, Protocol):
    """One kind of place clusters run; see the module docstring. It declares what its
    declaration does (name, max_nodes, options, parse_section: skyinfra.target_registry).

    Two verbs are optional (the lifecycle looks them up with ``getattr``):
    ``launch(spec, ws, *, echo, options, apply, engine_factory)`` renders and calls
    ``apply(files)`` itself, as often as it needs (aws: zone by zone until one has capacity,
    targets/aws/failover.py), instead of `up` rendering once; ``status_details(ws, spec)``
    returns extra keys for `status` (aws: ``zone``, ``zone_reason``). `skyinfra ssh` looks up
    ``shell(ws, spec, topology, node, command) -> Shell`` (a shell, or ``command`` run by the
    node's shell, on node ``node``) and ``ssh_config(ws, spec, topology, *, echo) -> str`` (an
    OpenSSH config block per node; absent: the target's nodes have no SSH).
    ``head_recovery(ws, spec) -> HeadRecovery | None``: the command node 0's supervisor runs
    to replace a detached job's lost nodes itself (skyinfra.run.head_recovery; absent, or
    None: the job waits for `skyinfra jobs recover`).
    """

    # How long `run` waits by default for nodes whose bootstrap is still going (0: nodes are
    # ready when `up` returns).
    wait_ready_s: ClassVar[float]

    def render(
        self, spec: ClusterSpec, ws: Workspace, *, echo: Echo, options: TargetOptions
    ) -> dict[str, str]:
        """The root module's files (relative path -> text). Runs what must come before
        Terraform (checks, staging) but writes nothing into the workspace."""
        ...

    def transport(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        *,
        connect_timeout_s: float | None = None,
    ) -> NodeTransport:
        """How `run` and `status` reach the nodes."""
        ...

    def nodes_to_replace(
        self, ws: Workspace, spec: ClusterSpec, in_state: Sequence[str]
    ) -> list[str]:
        """The Terraform addresses among ``in_state`` (the state's resources) of nodes that
        are broken in a way Terraform's refresh does not see; `up` replaces them."""
        ...

    def after_down(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> None:
        """Clean up what Terraform does not own, once the cluster is destroyed."""
        ...

    def leftovers(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> list[str]:
        """After ``down``: what of this cluster still exists, asked of the place it runs
        rather than of Terraform's state (AWS: resources tagged with the workspace's id,
        counted through the API; local: node folders and processes). One line each; empty
        when nothing is left."""
        ...

    def orphans(
        self, workspaces: Sequence[Workspace], specs: Sequence[ClusterSpec], *, echo: Echo
    ) -> list[str]:
        """What this target made (by its tags) that the state of none of ``workspaces``
        knows about, searched where ``specs`` run (AWS: their regions). Lists, never
        deletes; one line each."""
        ...
