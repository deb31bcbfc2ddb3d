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
cloudinit.py and render.py (the documents), staging.py (the wheel in S3), reach.py,
host_keys.py and readiness.py (reaching nodes with skyinfra/transport/ssh.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from skyinfra.review.cost import SpotPrices
from skyinfra.run.head_recovery import HeadRecovery
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws import checkpoint_store, failover, head
from skyinfra.targets.aws import shell as aws_shell
from skyinfra.targets.aws.capacity import LOG_FILE as CAPACITY_LOG
from skyinfra.targets.aws.capacity import CapacityLog
from skyinfra.targets.aws.cluster_files import aws_of, render_files
from skyinfra.targets.aws.declaration import RETRY_FOR, SKIP_PREFLIGHT, ZONES, AwsDeclaration
from skyinfra.targets.aws.endpoints import (
    emulator_from_env,
)

# console_host_keys and transport are reach.py's; named here too, where callers knew them.
from skyinfra.targets.aws.reach import KNOWN_HOSTS_FILE, TARGET_FILE, read_head_marker, transport
from skyinfra.targets.aws.reach import console_host_keys as console_host_keys
from skyinfra.targets.aws.session import AwsClients, clients_for
from skyinfra.targets.aws.spec import SPOT, node_markets
from skyinfra.targets.aws.spot_prices import spot_price_history
from skyinfra.targets.aws.staging import delete_staged
from skyinfra.targets.aws.tagged import count_tagged, orphans
from skyinfra.targets.base import (
    Ask,
    CheckpointListing,
    CheckpointSetInfo,
    InterruptRequest,
    Shell,
    TargetOptions,
)
from skyinfra.targets.identity import CLUSTER_TAG, WORKSPACE_TAG, read_workspace_id
from skyinfra.terraform import EngineFactory
from skyinfra.topology import Topology
from skyinfra.transport.ssh import SshTransport
from skyinfra.workspace import Workspace

if TYPE_CHECKING:
    from skyinfra.targets.base import Target

Echo = Callable[[str], None]
T = TypeVar("T")

# How long `run` waits by default for nodes whose cloud-init is still installing (boot, apt,
# a venv with jax[cuda12]: several minutes on a fresh Deep Learning AMI).
WAIT_READY_S = 900


# ---------------------------------------------------------------- the Target


class AwsTarget(AwsDeclaration):
    """EC2 GPU nodes in a VPC of their own (or the spec's subnet), reached over SSH; its name,
    spec table and flags are its declaration's (declaration.py)."""

    wait_ready_s: ClassVar[float] = float(WAIT_READY_S)

    def render(
        self, spec: ClusterSpec, ws: Workspace, *, echo: Echo, options: TargetOptions
    ) -> dict[str, str]:
        return render_files(
            spec, ws, echo=echo, skip_preflight=bool(options.get(SKIP_PREFLIGHT.name))
        )

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
        """`up`'s render and apply, zone by zone until one has capacity (failover.py)."""
        skip = bool(options.get(SKIP_PREFLIGHT.name))
        return failover.launch(
            spec,
            ws,
            echo=echo,
            clients=clients_for(spec),
            render=lambda zone, reservation, markets: render_files(
                spec,
                ws,
                echo=echo,
                skip_preflight=skip,
                zone=zone,
                capacity_reservation=reservation,
                markets=markets,
            ),
            apply=apply,
            engine_factory=engine_factory,
            zones_flag=options.get(ZONES.name),
            retry_for=options.get(RETRY_FOR.name),
            checks=not skip,
        )

    def spot_prices(self, spec: ClusterSpec, echo: Echo) -> SpotPrices | None:
        """The Spot price history of the spec's type at plan time, when some node is Spot
        (issue 26); None without Spot nodes, or (with a warning) when EC2 does not answer."""
        spec_aws = aws_of(spec)
        if SPOT not in node_markets(spec_aws, spec.nodes).values():
            return None
        clients = clients_for(spec)
        try:
            return spot_price_history(clients.client("ec2"), spec_aws.instance_type)
        except (ClientError, BotoCoreError) as err:
            echo(f"[skyinfra] warning: no Spot price history for {spec_aws.instance_type}: {err}")
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
        return {
            "zone": log.zone,
            "zone_reason": log.reason,
            "capacity_reservation_id": log.reservation,
            "attempts": len(log.attempts),
            "markets": log.markets,
            "spot_fallback": (
                None if fallback is None else {"nodes": fallback.nodes, "reason": fallback.reason}
            ),
        }

    def head_recovery(self, ws: Workspace, spec: ClusterSpec) -> HeadRecovery | None:
        """aws.recover: node 0's skyinfra replaces a detached job's lost workers (head.py)."""
        spec_aws = aws_of(spec)
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
        return aws_shell.shell(ws, spec, topology, node, command)

    def ssh_config(
        self, ws: Workspace, spec: ClusterSpec, topology: Topology, *, echo: Echo
    ) -> str:
        return aws_shell.ssh_config(ws, spec, topology, echo=echo)

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

        drill.interrupt(ws, spec, topology, request, ask=ask, echo=echo)

    def checkpoint_sets(self, ws: Workspace, spec: ClusterSpec) -> CheckpointListing:
        """The sets under the cluster's checkpoint store's prefix (checkpoint_sets.py)."""
        from skyinfra.targets.aws import checkpoint_sets

        return checkpoint_sets.listing(ws, spec)

    def checkpoint_set(self, ws: Workspace, spec: ClusterSpec, name: str) -> CheckpointSetInfo:
        from skyinfra.targets.aws import checkpoint_sets

        return checkpoint_sets.find(ws, spec, name)

    def delete_checkpoint_set(
        self, ws: Workspace, spec: ClusterSpec, found: CheckpointSetInfo
    ) -> str:
        from skyinfra.targets.aws import checkpoint_sets

        return checkpoint_sets.delete(ws, spec, found)

    def node_installs(self, ws: Workspace, spec: ClusterSpec) -> dict[str, str]:
        """What the nodes install, as `up` rendered it (status shows the jax pin)."""
        settings_file = ws.path / TARGET_FILE
        jax = ws.read_json(settings_file).get("jax") if settings_file.is_file() else None
        return {"jax": str(jax)} if jax else {}

    def nodes_to_replace(
        self, ws: Workspace, spec: ClusterSpec, in_state: Sequence[str]
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
        s3 = clients_for(spec).client("s3")
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
        left, unchecked = count_tagged(clients_for(spec), tags, iam_role=f"{spec.name}-node")
        for kind in unchecked:
            echo(f"[skyinfra] warning: could not list {kind}; not checked")
        return left

    def orphans(
        self, workspaces: Sequence[Workspace], specs: Sequence[ClusterSpec], *, echo: Echo
    ) -> list[str]:
        """Resources tagged ``skyinfra:cluster`` in the regions of ``specs`` that the state
        of none of ``workspaces`` holds."""
        regions = sorted({aws_of(spec).region for spec in specs if spec.provider == self.name})
        clients = [
            AwsClients(boto3.session.Session(), region, emulator_from_env()) for region in regions
        ]
        lines, unchecked = orphans(clients, [w.path for w in workspaces])
        for kind in unchecked:
            echo(f"[skyinfra] warning: could not list {kind}; not checked")
        return lines


if TYPE_CHECKING:
    _satisfies_the_protocol: Target = AwsTarget()
