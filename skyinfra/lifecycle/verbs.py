"""The target's verbs as the lifecycle and the commands ask them: the spec's target, its flags, and
how `run` and `status` reach the nodes; nothing here knows which target it asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from skyinfra.errors import SpecError
from skyinfra.spec import ClusterSpec
from skyinfra.target_registry import declaration, declarations
from skyinfra.targets import get_target
from skyinfra.targets.base import Target, TargetOptions
from skyinfra.topology import Topology
from skyinfra.transport import NodeTransport
from skyinfra.workspace import Workspace

if TYPE_CHECKING:
    from skyinfra_runtime.s3 import Credentials

    from skyinfra.review.cost import PlannedPlace, SpotPrices
    from skyinfra.run.head_recovery import HeadRecovery

Echo = Callable[[str], None]


def target_of(spec: ClusterSpec) -> Target:
    return get_target(spec.provider)


def check_target_options(spec: ClusterSpec, options: TargetOptions) -> None:
    """Flags of another target are a usage error that says whose they are."""
    own = {option.name for option in declaration(spec.provider).options}
    for name, value in options.items():
        if name in own:
            continue
        owners = [(t.name, o.flag) for t in declarations() for o in t.options if o.name == name]
        flag, owner = (owners[0][1], owners[0][0]) if owners else (name, "no target")
        raise SpecError(
            flag,
            value,
            f"a flag of target {owner!r} only; cluster {spec.name!r} uses target {spec.provider!r}",
        )


def spot_prices(
    spec: ClusterSpec, echo: Echo, place: PlannedPlace | None = None
) -> SpotPrices | None:
    """The Spot prices the review judges Spot nodes by (a target's ``spot_prices``, issue 26),
    at ``place`` (report.planned_place: the plan's own type and region); None on a target
    without them or without Spot nodes."""
    return target_of(spec).spot_prices(spec, echo, place)


def transport_for(
    ws: Workspace,
    topology: Topology,
    *,
    spec: ClusterSpec | None = None,
    connect_timeout_s: float | None = None,
) -> NodeTransport:
    """How `run` and `status` reach the nodes (``connect_timeout_s``: SSH targets only)."""
    spec = spec or ws.spec()
    return target_of(spec).transport(ws, spec, topology, connect_timeout_s=connect_timeout_s)


def applies_as_is(ws: Workspace, spec: ClusterSpec) -> bool:
    """Whether this workspace's root module is applied as it is, never rendered again: node
    0's copy of the operator's workspace (the target's verb ``applies_as_is``)."""
    return target_of(spec).applies_as_is(ws)


def head_recovery_of(ws: Workspace, spec: ClusterSpec) -> HeadRecovery | None:
    """The command node 0's supervisor runs to recover a job that lost nodes, when the
    cluster's target has one (verb ``head_recovery``) and its spec turns it on."""
    return target_of(spec).head_recovery(ws, spec)


def store_credentials_of(spec: ClusterSpec) -> Credentials | None:
    """What each job's agents sign their checkpoint store's requests with, when the nodes
    have no way of their own (the target's verb ``store_credentials``)."""
    return target_of(spec).store_credentials(spec)


def default_wait_ready_s(spec: ClusterSpec) -> float:
    """How long `run` waits for nodes still bootstrapping, unless --wait-ready says."""
    return target_of(spec).wait_ready_s
