"""The AWS target behind ``skyinfra up/run/status/down`` for ``provider = "aws"``.

:class:`AwsTarget` is the registry's entry (skyinfra/targets/base.py's protocol); its verbs are
these methods, each a short call into the rooms beside this one:

- ``render`` and ``launch``: cluster_files.py's :func:`render_files` (the preflight, the staged
  wheel, the user data and the root module), zone by zone until one has capacity for
  ``launch`` (failover.py).
- ``transport`` reaches the nodes over SSH with the spec's key (in emulator mode only
  through SKYINFRA_AWS_EMULATED_NODES).

The rooms beside this one: session.py (boto3 clients), preflight.py (checks and lookups),
resolve.py (what they found, pinned), ami.py (login user), keys.py (the SSH key pair),
cloudinit.py and render.py (the documents), staging.py (the wheel in S3), wheelhouse.py and
wheelhouse_stage.py (a private network's S3 wheelhouse), reach.py,
host_keys.py and readiness.py (reaching nodes with skyinfra/transport/ssh.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from skyinfra.errors import SpecError, TerraformError
from skyinfra.review.cost import PlannedPlace, SpotPrices
from skyinfra.run.head_recovery import HeadRecovery
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws import checkpoint_store, failover, head
from skyinfra.targets.aws import shell as aws_shell
from skyinfra.targets.aws.capacity import LOG_FILE as CAPACITY_LOG
from skyinfra.targets.aws.capacity import CapacityLog, classify
from skyinfra.targets.aws.cluster_files import aws_of, render_files, running_nodes
from skyinfra.targets.aws.declaration import RETRY_FOR, SKIP_PREFLIGHT, ZONES, AwsDeclaration
from skyinfra.targets.aws.endpoints import (
    emulator_from_env,
)
from skyinfra.targets.aws.ladder import (
    Rung,
    ladder_markdown,
    ladder_metadata,
    planned_rung,
    reviewed_assessed,
)
from skyinfra.targets.aws.ladder_shell import (
    assess_ladder,
    climb,
    first_approved,
    ladder_of,
    landed_rung,
    landed_spec,
    one_rung,
    only_rung,
    policy_of,
    rung_of,
    rung_spec,
)

# console_host_keys and transport are reach.py's; named here too, where callers knew them.
from skyinfra.targets.aws.reach import KNOWN_HOSTS_FILE, TARGET_FILE, read_head_marker, transport
from skyinfra.targets.aws.reach import console_host_keys as console_host_keys
from skyinfra.targets.aws.session import AwsClients, clients_for, new_session
from skyinfra.targets.aws.spec import SPOT, node_markets
from skyinfra.targets.aws.spot_prices import spot_price_history
from skyinfra.targets.aws.staging import delete_staged
from skyinfra.targets.aws.tagged import count_tagged, orphans
from skyinfra.targets.base import (
    Ask,
    CheckpointListing,
    CheckpointSetInfo,
    InterruptRequest,
    LadderReview,
    Shell,
    TargetOptions,
)
from skyinfra.targets.identity import CLUSTER_TAG, WORKSPACE_TAG, read_workspace_id
from skyinfra.terraform import EngineFactory
from skyinfra.topology import Topology
from skyinfra.transport.ssh import SshTransport
from skyinfra.workspace import Workspace

if TYPE_CHECKING:
    from skyinfra_runtime.s3 import Credentials

    from skyinfra.targets.base import Target

Echo = Callable[[str], None]
T = TypeVar("T")

# How long `run` waits by default for nodes whose cloud-init is still installing (boot, apt,
# a venv with jax[cuda12]: several minutes on a fresh Deep Learning AMI).
WAIT_READY_S = 900


# ---------------------------------------------------------------- the Target


@dataclass(frozen=True)
class _RungLauncher(Generic[T]):
    """`up`'s launch of the cluster on one rung: zone by zone until one has room."""

    ws: Workspace
    echo: Echo
    options: TargetOptions
    apply: Callable[[dict[str, str]], T]
    engine_factory: EngineFactory
    # `apply PLANFILE`: the rungs its plan approved, each with its listed zones, the planned
    # one with the planfile's refused apply (failover.launch's ``reviewed``); empty for `up`.
    reviewed: Mapping[Rung, failover.ReviewedRung] = field(default_factory=dict)

    def launcher(self, on: ClusterSpec) -> failover.ZoneLauncher[T]:
        skip = bool(self.options.get(SKIP_PREFLIGHT.name))
        return failover.ZoneLauncher(
            clients=clients_for(on),
            render=lambda zone, reservation, markets: render_files(
                on,
                self.ws,
                echo=self.echo,
                skip_preflight=skip,
                zone=zone,
                capacity_reservation=reservation,
                markets=markets,
            ),
            apply=self.apply,
            engine_factory=self.engine_factory,
            echo=self.echo,
        )

    def __call__(self, on: ClusterSpec) -> T:
        return failover.launch(
            on,
            self.ws,
            self.launcher(on),
            zones_flag=self.options.get(ZONES.name),
            retry_for=self.options.get(RETRY_FOR.name),
            checks=not self.options.get(SKIP_PREFLIGHT.name),
            reviewed=self.reviewed.get(rung_of(on)),
        )


class AwsTarget(AwsDeclaration):
    """EC2 GPU nodes in a VPC of their own (or the spec's subnet), reached over SSH; its name,
    spec table and flags are its declaration's (declaration.py)."""

    wait_ready_s: ClassVar[float] = float(WAIT_READY_S)

    def render(
        self, spec: ClusterSpec, ws: Workspace, *, echo: Echo, options: TargetOptions
    ) -> dict[str, str]:
        """`render`: a ladder's cluster on its first approved rung (the
        rung a reviewed plan applies), a running one on the rung it runs on; `plan` hands in
        the spec plan_ladder put on that rung (one rung: nothing looked up again)."""
        skip = bool(options.get(SKIP_PREFLIGHT.name))
        if len(ladder_of(spec)) > 1:
            spec = (
                landed_spec(spec, ws)
                if running_nodes(ws)
                else rung_spec(spec, first_approved(spec, assess_ladder(spec, checks=not skip)))
            )
        return render_files(spec, ws, echo=echo, skip_preflight=skip)

    def launch(
        self,
        spec: ClusterSpec,
        ws: Workspace,
        *,
        echo: Echo,
        options: TargetOptions,
        apply: Callable[[dict[str, str]], T],
        engine_factory: EngineFactory,
    ) -> T:
        """`up`'s render and apply, zone by zone until one has capacity (failover.py), on
        the ladder's approved rungs in order (ladder_shell.py); a running cluster stays on
        its rung."""
        launch_rung = _RungLauncher(ws, echo, options, apply, engine_factory)
        if len(ladder_of(spec)) < 2:
            return launch_rung(spec)
        regions = aws_of(spec).ladder_regions
        if options.get(ZONES.name) and len(regions) > 1:
            raise SpecError(
                "--zones",
                options[ZONES.name],
                f"absent with several aws.regions ({', '.join(regions)}): zones belong to one",
            )
        if running_nodes(ws):
            return launch_rung(landed_spec(spec, ws))
        assessed = assess_ladder(spec, checks=not options.get(SKIP_PREFLIGHT.name))
        return climb(spec, ws, assessed, echo=echo, launch_rung=launch_rung)

    def climb_reviewed(
        self,
        spec: ClusterSpec,
        ws: Workspace,
        reviewed: Mapping[str, Any],
        refusal: TerraformError,
        *,
        echo: Echo,
        apply: Callable[[dict[str, str]], T],
        engine_factory: EngineFactory,
    ) -> T:
        """`apply PLANFILE` whose planned zone had no capacity: the planned rung (the plan's
        first approved one) goes on with the other zones the plan listed for it, as `up`'s
        zone failover would (what the planfile made in its zone destroyed first), then the
        rungs after it that the plan approved (``reviewed``, its metadata's ladder) are climbed
        as `up` climbs, each in the zones the plan listed for it, and no other. Any other
        refusal is ``refusal`` raised again."""
        failure = classify(str(refusal))
        assessed = reviewed_assessed(reviewed)
        if failure.outcome != "capacity" or not any(a.approved for a in assessed):
            raise refusal
        first = next(a for a in assessed if a.approved)
        planned = rung_spec(spec, first.rung)
        settings = ws.path / TARGET_FILE
        zone = ws.read_json(settings).get("availability_zone") if settings.is_file() else None
        echo(
            f"[skyinfra] the reviewed plan's rung ({first.rung.label}) was refused in "
            f"{zone}: {failure.code}: {failure.message}"
        )
        listed = {a.rung: failover.ReviewedRung(a.facts.zones or ()) for a in assessed}
        listed[first.rung] = replace(
            listed[first.rung], refused=failover.planned_attempt(planned, str(zone), failure)
        )
        launch_rung = _RungLauncher(ws, echo, {}, apply, engine_factory, listed)
        return climb(spec, ws, assessed, echo=echo, launch_rung=launch_rung)

    def plan_ladder(
        self, spec: ClusterSpec, ws: Workspace, echo: Echo, options: TargetOptions
    ) -> LadderReview | None:
        """The ladder for plan.md and plan-meta.json, and the spec on the rung to render:
        the first approved one, or the one a running cluster is on. A spec of one rung is a
        ladder of that rung, kept in the metadata only (plan.md shows its zone)."""
        if len(ladder_of(spec)) < 2:
            one = one_rung(spec, checks=not options.get(SKIP_PREFLIGHT.name))
            return LadderReview("", ladder_metadata(one), spec)
        echo(f"[skyinfra] looking up the ladder's {len(ladder_of(spec))} rungs")
        assessed = assess_ladder(spec, checks=not options.get(SKIP_PREFLIGHT.name))
        rung = rung_of(landed_spec(spec, ws)) if running_nodes(ws) else None
        on = only_rung(spec, rung or first_approved(spec, assessed))
        return LadderReview(
            ladder_markdown(assessed, policy_of(spec)), ladder_metadata(assessed), on
        )

    def spot_prices(
        self, spec: ClusterSpec, echo: Echo, place: PlannedPlace | None = None
    ) -> SpotPrices | None:
        """The Spot price history at plan time of the planned rung's type in its region
        (``place``; else the spec's first rung), when some node is Spot (issue 26); None
        without Spot nodes, or (with a warning) when EC2 does not answer."""
        spec_aws = aws_of(spec)
        if SPOT not in node_markets(spec_aws, spec.nodes).values():
            return None
        place = place or PlannedPlace()
        rung = planned_rung(rung_of(spec), place.instance_type, place.region)
        clients = AwsClients(new_session(), rung.region, emulator_from_env())
        try:
            return spot_price_history(clients.client("ec2"), rung.instance_type)
        except (ClientError, BotoCoreError) as err:
            echo(f"[skyinfra] warning: no Spot price history for {rung.label}: {err}")
            return None

    def status_details(self, ws: Workspace, spec: ClusterSpec) -> dict[str, Any]:
        """The zone and, after a failover, why it is not the first choice (capacity.json);
        each node's market and the nodes a Spot fallback launched On-Demand (issue 26)."""
        path = ws.path / CAPACITY_LOG
        if not path.is_file():
            settings = ws.path / TARGET_FILE
            zone = ws.read_json(settings).get("availability_zone") if settings.is_file() else None
            return {"zone": zone, "zone_reason": None}
        log = CapacityLog.from_dict(ws.read_json(path))
        fallback = log.spot_fallback
        rung = landed_rung(ws)
        return {
            **(
                {"rung": {"instance_type": rung.instance_type, "region": rung.region}}
                if rung
                else {}
            ),
            "zone": log.zone,
            "zone_reason": log.reason,
            "capacity_reservation_id": log.reservation,
            "attempts": len(log.attempts),
            "markets": log.markets,
            "spot_fallback": (
                None if fallback is None else {"nodes": fallback.nodes, "reason": fallback.reason}
            ),
        }

    def store_credentials(self, spec: ClusterSpec) -> Credentials | None:
        """None: the nodes sign with their instance role."""
        return None

    def head_recovery(self, ws: Workspace, spec: ClusterSpec) -> HeadRecovery | None:
        """aws.recover: node 0's skyinfra replaces a detached job's lost workers (head.py)."""
        spec_aws = aws_of(landed_spec(spec, ws))
        return head.head_recovery(ws, spec_aws.recover, spec_aws.region)

    def applies_as_is(self, ws: Workspace) -> bool:
        """Node 0's copy of the workspace (the kit) is applied as it is, never rendered."""
        return read_head_marker(ws) is not None

    def transport(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        *,
        connect_timeout_s: float | None = None,
    ) -> SshTransport:
        spec = landed_spec(spec, ws)  # the rung's region: EC2's console output, instance states
        if connect_timeout_s is None:
            return transport(ws, spec, topology)
        return transport(ws, spec, topology, connect_timeout_s=connect_timeout_s)

    def shell(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        node: int,
        command: Sequence[str],
    ) -> Shell:
        return aws_shell.shell(ws, landed_spec(spec, ws), topology, node, command)

    def ssh_config(
        self, ws: Workspace, spec: ClusterSpec, topology: Topology, *, echo: Echo
    ) -> str:
        return aws_shell.ssh_config(ws, landed_spec(spec, ws), topology, echo=echo)

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
        """A real interruption of the node's Spot instance through FIS (drill.py)."""
        from skyinfra.targets.aws import drill

        drill.interrupt(ws, landed_spec(spec, ws), topology, request, ask=ask, echo=echo)

    def checkpoint_sets(self, ws: Workspace, spec: ClusterSpec) -> CheckpointListing:
        """The sets under the cluster's checkpoint store's prefix (checkpoint_sets.py)."""
        from skyinfra.targets.aws import checkpoint_sets

        return checkpoint_sets.listing(ws, landed_spec(spec, ws))

    def checkpoint_set(self, ws: Workspace, spec: ClusterSpec, name: str) -> CheckpointSetInfo:
        from skyinfra.targets.aws import checkpoint_sets

        return checkpoint_sets.find(ws, landed_spec(spec, ws), name)

    def delete_checkpoint_set(
        self, ws: Workspace, spec: ClusterSpec, found: CheckpointSetInfo
    ) -> str:
        from skyinfra.targets.aws import checkpoint_sets

        return checkpoint_sets.delete(ws, landed_spec(spec, ws), found)

    def node_installs(self, ws: Workspace, spec: ClusterSpec) -> dict[str, str]:
        """What the nodes install, as `up` rendered it (status shows the jax pin)."""
        settings_file = ws.path / TARGET_FILE
        jax = ws.read_json(settings_file).get("jax") if settings_file.is_file() else None
        return {"jax": str(jax)} if jax else {}

    def nodes_to_replace(
        self, ws: Workspace, spec: ClusterSpec, in_state: Callable[[], Sequence[str]]
    ) -> list[str]:
        """None: Terraform's refresh sees an instance that is gone (terminated, deleted) and
        plans a new one itself; a node whose bootstrap failed is not replaced by `up`."""
        return []

    def after_down(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> None:
        """Forget the destroyed nodes' host keys (the next `up` makes new nodes with new keys
        and, for the private addresses, the same IPs, which a stale pin would refuse), and
        delete the workspace's staged wheels from S3."""
        known_hosts = ws.path / KNOWN_HOSTS_FILE
        if known_hosts.is_file():
            known_hosts.unlink()
            echo(f"[skyinfra] forgot the destroyed nodes' host keys ({known_hosts.name})")
        settings_file = ws.path / TARGET_FILE
        settings = ws.read_json(settings_file) if settings_file.is_file() else {}
        if settings.get("checkpoints_url"):
            echo(checkpoint_store.kept_line(str(settings["checkpoints_url"])))
        bucket, prefix = settings.get("staging_bucket"), settings.get("staging_prefix")
        owner = settings.get("account_id")
        if not (bucket and prefix and owner):
            return  # a workspace from before staging was recorded: the lifecycle rule expires it
        s3 = clients_for(landed_spec(spec, ws)).client("s3")
        try:
            deleted = delete_staged(s3, bucket=bucket, prefix=prefix, owner=owner)
        except (ClientError, BotoCoreError) as err:
            echo(
                f"[skyinfra] warning: could not delete the staged wheel under "
                f"s3://{bucket}/{prefix} ({err}); the bucket's lifecycle rule expires it"
            )
            return
        if deleted:
            echo(f"[skyinfra] deleted the staged runtime wheel(s) under s3://{bucket}/{prefix}")

    def leftovers(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> list[str]:
        """What the EC2 and IAM APIs still show tagged with this workspace's id (with only
        the cluster's name for a workspace from before ids), counted after `down`."""
        ws_id = read_workspace_id(ws.path)
        tags = {CLUSTER_TAG: spec.name}
        if ws_id is not None:
            tags[WORKSPACE_TAG] = ws_id
        left, unchecked = count_tagged(
            clients_for(landed_spec(spec, ws)), tags, iam_role=f"{spec.name}-node"
        )
        for kind in unchecked:
            echo(f"[skyinfra] warning: could not list {kind}; not checked")
        return left

    def orphans(
        self, workspaces: Sequence[Workspace], specs: Sequence[ClusterSpec], *, echo: Echo
    ) -> list[str]:
        """Resources tagged ``skyinfra:cluster`` in the regions of ``specs`` that the state
        of none of ``workspaces`` holds."""
        regions = sorted(
            {r for s in specs if s.provider == self.name for r in aws_of(s).ladder_regions}
        )
        clients = [AwsClients(new_session(), region, emulator_from_env()) for region in regions]
        lines, unchecked = orphans(clients, [w.path for w in workspaces])
        for kind in unchecked:
            echo(f"[skyinfra] warning: could not list {kind}; not checked")
        return lines


if TYPE_CHECKING:
    _satisfies_the_protocol: Target = AwsTarget()
