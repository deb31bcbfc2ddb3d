"""The Target protocol: what the lifecycle needs from a place clusters run (local, aws, ...).

A target owns its section of the spec (``[local]``, ``[aws]``), renders the cluster's root
module (doing first whatever must happen before Terraform: the AWS preflight and wheel
staging), says how to reach the nodes and how long they take to become ready, and cleans up
after ``down``. The lifecycle (skyinfra/lifecycle/) and the commands (skyinfra/cli/) drive
every target through the verbs declared here and nothing else: they never look a verb up by
name and never branch on a target's name (tests/unit/test_target_conformance.py checks both).

Every target implements every verb. Where a target lacks a capability it says so, one way
for each kind of verb:

- a verb that answers a question (``spot_prices``, ``status_details``, ``node_installs``,
  ``applies_as_is``, ``head_recovery``, ``store_credentials``) answers with its empty value
  (None, ``{}``, False), the same answer a capable target gives when it has nothing to add;
- a verb that does something (``ssh_config``, ``interrupt_node``, the checkpoint verbs)
  raises :class:`~skyinfra.errors.UnsupportedByTarget` (a usage error: exit 2) carrying the
  target's name, the verb and, in words, why and what to do instead;
- ``climb_reviewed`` (go on to the other places a reviewed plan approved) raises the refusal
  it was given again: a target without a ladder has no other place to go.

The model is Ray's NodeProvider and SkyPilot's provision verbs: a target is a peer behind a
declared protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from skyinfra.target_registry import TargetDeclaration, TargetOption, TargetSection

if TYPE_CHECKING:
    from skyinfra_runtime.s3 import Credentials

    from skyinfra.errors import TerraformError
    from skyinfra.review.cost import PlannedPlace, SpotPrices
    from skyinfra.run.head_recovery import HeadRecovery
    from skyinfra.spec import ClusterSpec
    from skyinfra.terraform import EngineFactory, PlanSummary
    from skyinfra.topology import Topology
    from skyinfra.transport.base import NodeTransport
    from skyinfra.workspace import Workspace

__all__ = [
    "Ask",
    "CheckpointListing",
    "CheckpointSetInfo",
    "Echo",
    "InterruptRequest",
    "LadderReview",
    "Shell",
    "Target",
    "TargetOption",
    "TargetOptions",
    "TargetSection",
    "WithoutLadder",
]

Echo = Callable[[str], None]
# A yes/no question put to the user on a terminal (True: go on).
Ask = Callable[[str], bool]


@dataclass(frozen=True)
class Shell:
    """What `skyinfra ssh` executes on this machine to reach a node: ``argv`` with ``env``
    (None: this process's) in ``cwd`` (None: here)."""

    argv: list[str]
    env: dict[str, str] | None = None
    cwd: str | None = None


@dataclass(frozen=True)
class CheckpointSetInfo:
    """One checkpoint set where its target keeps it, as `skyinfra checkpoints` shows it."""

    name: str
    size_bytes: int
    items: int  # the files of its folder, the objects under its prefix
    item_unit: str  # what ``items`` counts, singular: "file", "object"
    modified: str | None  # the newest item's time, ISO 8601 to the second (None: empty)
    jobs: tuple[str, ...]  # the jobs that used it, oldest first
    location: str  # the set's folder or URL
    location_key: str  # the key ``--json`` names ``location`` by: "path", "url"
    place: str  # where `checkpoints delete` says it deletes from
    # The nodes whose own folder holds a copy (ssh: each host keeps its node's); None where
    # every node sees one copy (local: the workspace's folder; aws: the S3 prefix).
    nodes: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The set as ``skyinfra checkpoints --json`` prints it."""
        out = {
            "name": self.name,
            self.location_key: self.location,
            "size_bytes": self.size_bytes,
            "files": self.items,
            "modified": self.modified,
            "jobs": list(self.jobs),
        }
        if self.nodes is not None:
            out["nodes"] = list(self.nodes)
        return out


@dataclass(frozen=True)
class CheckpointListing:
    """The cluster's checkpoint sets and where they are kept, in words ("in <folder>",
    "under <url>/"), as the listing's last line names the place."""

    sets: list[CheckpointSetInfo]
    where: str


@dataclass(frozen=True)
class InterruptRequest:
    """What `skyinfra drill interrupt` asks of a target's ``interrupt_node``: send worker
    ``node`` (an index of the topology) a Spot interruption notice ``notice_s`` seconds ahead.
    ``role_arn``: the role a cloud's fault service acts as (aws: FIS; None: none given);
    ``yes``: go ahead without asking."""

    node: int
    notice_s: int
    role_arn: str | None = None
    yes: bool = False


@dataclass(frozen=True)
class LadderReview:
    """A target's ladder of places to launch as `plan` shows it (``markdown``; empty: none
    shown) and keeps it in plan-meta.json (``metadata``: `apply PLANFILE` may take its
    approved rungs and no other), and ``render_spec``: the spec on the rung the plan renders.
    A target's ``plan_ladder`` (aws, issue 44); its lookups are made once per plan."""

    markdown: str
    metadata: dict[str, Any]
    render_spec: ClusterSpec


# The target-specific flags the user gave (name -> value); only flags that were set.
TargetOptions = Mapping[str, Any]
# What `up` gets back from applying a rendered root module (lifecycle.up's ``apply``).
Apply = Callable[[dict[str, str]], "tuple[PlanSummary, Topology]"]


class WithoutLadder:
    """The ladder verbs of a target with one place to launch (local: this machine; ssh: the
    hosts the spec names): no ladder for `plan` to show, no other place for `apply` to go."""

    def plan_ladder(
        self, spec: ClusterSpec, ws: Workspace, echo: Echo, options: TargetOptions
    ) -> LadderReview | None:
        """None: one place, no ladder."""
        return None

    def climb_reviewed(
        self,
        spec: ClusterSpec,
        ws: Workspace,
        reviewed: Mapping[str, Any],
        refusal: TerraformError,
        *,
        echo: Echo,
        apply: Apply,
        engine_factory: EngineFactory,
    ) -> tuple[PlanSummary, Topology]:
        """No other place to go: the refusal again."""
        raise refusal


@runtime_checkable
class Target(TargetDeclaration, Protocol):
    """One kind of place clusters run; see the module docstring for what a target without a
    capability answers. It declares what its declaration does (name, max_nodes, options,
    parse_section: skyinfra.target_registry)."""

    # How long `run` waits by default for nodes whose bootstrap is still going (0: nodes are
    # ready when `up` returns).
    wait_ready_s: ClassVar[float]

    def render(
        self, spec: ClusterSpec, ws: Workspace, *, echo: Echo, options: TargetOptions
    ) -> dict[str, str]:
        """The root module's files (relative path -> text). Runs what must come before
        Terraform (checks, staging) but writes nothing into the workspace."""
        ...

    def launch(
        self,
        spec: ClusterSpec,
        ws: Workspace,
        *,
        echo: Echo,
        options: TargetOptions,
        apply: Apply,
        engine_factory: EngineFactory,
    ) -> tuple[PlanSummary, Topology]:
        """`up`'s render and apply: renders (``render``) and calls ``apply(files)``, once
        (local) or as often as it needs (aws: zone by zone until one has capacity,
        targets/aws/failover.py), and returns what the last ``apply`` returned."""
        ...

    def plan_ladder(
        self, spec: ClusterSpec, ws: Workspace, echo: Echo, options: TargetOptions
    ) -> LadderReview | None:
        """The places `up` would try, in order (aws: instance types x regions), for plan.md
        and the plan's metadata, and the spec on the rung `plan` renders. None: a target
        without a ladder."""
        ...

    def climb_reviewed(
        self,
        spec: ClusterSpec,
        ws: Workspace,
        reviewed: Mapping[str, Any],
        refusal: TerraformError,
        *,
        echo: Echo,
        apply: Apply,
        engine_factory: EngineFactory,
    ) -> tuple[PlanSummary, Topology]:
        """`apply PLANFILE` whose planned place had no capacity (``refusal``): go on to the
        places the plan approved (``reviewed``: its metadata's ladder) as `up` would, and to
        no other; what the last ``apply`` returned. Without a ladder: ``refusal`` again."""
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
        self, ws: Workspace, spec: ClusterSpec, in_state: Callable[[], Sequence[str]]
    ) -> list[str]:
        """The Terraform addresses among ``in_state()`` (the state's resources) of nodes that
        are broken in a way Terraform's refresh does not see; `up` replaces them. Listed only
        when called: with the state in a backend that is a Terraform command of its own."""
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

    def spot_prices(
        self, spec: ClusterSpec, echo: Echo, place: PlannedPlace | None = None
    ) -> SpotPrices | None:
        """The Spot prices `up`'s review judges Spot nodes by (issue 26), at ``place``: the
        plan's own instance type and region (a ladder's later rung), else the spec's. None:
        no Spot nodes, no prices to be had, or a target without Spot."""
        ...

    def status_details(self, ws: Workspace, spec: ClusterSpec) -> dict[str, Any]:
        """The target's own keys for `status` (aws: ``zone``, ``zone_reason``, ``markets``,
        ...). ``{}``: nothing to add."""
        ...

    def node_installs(self, ws: Workspace, spec: ClusterSpec) -> dict[str, str]:
        """What the nodes install that `status` shows (aws: the pinned jax). ``{}``: nothing
        pinned (the local nodes install the operator's own packages)."""
        ...

    def applies_as_is(self, ws: Workspace) -> bool:
        """Whether this workspace's root module is applied as it is, never rendered again
        (aws: node 0's copy of the operator's workspace). False: a target whose workspaces
        are always the operator's."""
        ...

    def head_recovery(self, ws: Workspace, spec: ClusterSpec) -> HeadRecovery | None:
        """The command node 0's supervisor runs to replace a detached job's lost nodes
        itself (skyinfra.run.head_recovery). None: the spec does not turn it on, or the target
        cannot, and the job waits for `skyinfra jobs recover`."""
        ...

    def store_credentials(self, spec: ClusterSpec) -> Credentials | None:
        """The credentials each node's agent signs its checkpoint store's requests with, sent
        on its stdin with the job's secrets when a job starts (ssh: the operator's, for
        ``ssh.checkpoints_url``: the hosts have no role). None: the nodes have their own way
        (aws: the instance role) or no store. SpecError (exit 2) when the store needs some
        and this environment has none."""
        ...

    def shell(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        node: int,
        command: Sequence[str],
    ) -> Shell:
        """What `skyinfra ssh` executes here for a shell on node ``node`` (an index of
        ``topology``), or ``command`` run by the node's shell when given."""
        ...

    def ssh_config(
        self, ws: Workspace, spec: ClusterSpec, topology: Topology, *, echo: Echo
    ) -> str:
        """An OpenSSH config block per node, for `skyinfra ssh --config`. A target whose
        nodes have no SSH raises UnsupportedByTarget."""
        ...

    def interrupt_node(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        request: InterruptRequest,
        *,
        ask: Ask | None,
        echo: Echo,
    ) -> None:
        """`skyinfra drill interrupt`: send the ``request``'s worker its Spot interruption
        notice and say what was sent. ``ask``: how to ask, unless ``request.yes`` (None: not
        on a terminal). A target without Spot notices raises UnsupportedByTarget."""
        ...

    def checkpoint_sets(self, ws: Workspace, spec: ClusterSpec) -> CheckpointListing:
        """The cluster's checkpoint sets where the target keeps them (local: folders of the
        workspace; aws: S3 prefixes under the cluster's checkpoints URL), each with the jobs
        that used it. A target without checkpoint sets raises UnsupportedByTarget."""
        ...

    def checkpoint_set(self, ws: Workspace, spec: ClusterSpec, name: str) -> CheckpointSetInfo:
        """Set ``name``; a UsageError naming it (and the sets there are) when it is not a
        valid name or the cluster has no such set."""
        ...

    def delete_checkpoint_set(
        self, ws: Workspace, spec: ClusterSpec, found: CheckpointSetInfo
    ) -> str:
        """Delete set ``found`` and everything in it; what more to say after "deleted <set>"
        ("" or, say, ": 12 object(s) under s3://.../")."""
        ...
