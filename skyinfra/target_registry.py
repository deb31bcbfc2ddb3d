"""Which targets exist, and what each declares before it is loaded.

A target is a name and two classes, each named here by where it lives and imported on first
use (in the manner of pytest-testinfra's backend table): its *declaration* (the parser of its
spec table, its node limit and its command-line flags; light, needed to read a spec and to
build the CLI) and its *target* (skyinfra.targets.base.Target: render, transport, ...; loaded
when a cluster runs there, with whatever SDK it needs). Naming every target costs nothing, and
a target whose SDK is missing fails only when asked for.

A new target is one folder under skyinfra/targets/ with the two classes, plus one entry here.
This module sits below the spec and imports no target, topology or workspace: the spec asks it
for the section parsers, and everything that knows targets sits above the spec.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from skyinfra.errors import ProviderUnavailableError, SpecError
from skyinfra.guardrail_table import Guardrails


@dataclass(frozen=True)
class TargetOption:
    """A command-line flag of one target, e.g. ``--skip-preflight`` of aws (a boolean flag).

    The CLI adds every target's flags to the commands named in ``commands`` and hands the
    values to the cluster's target as TargetOptions (skyinfra.targets.base); a flag of another
    target is a usage error that says which target it belongs to.
    """

    name: str  # the key in TargetOptions, e.g. "skip_preflight"
    flag: str  # e.g. "--skip-preflight"
    help: str
    commands: tuple[str, ...] = ("up",)
    # A flag that takes a value (shown as this placeholder, e.g. "DURATION"); None: boolean.
    metavar: str | None = None


class TargetSection(Protocol):
    """A target's validated section of the spec; ``to_dict`` round-trips through
    ``parse_section`` (it is what spec.json stores)."""

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class DiagramPart:
    """A box of plan.md's diagram above the nodes, e.g. the VPC; the parts form a chain, each
    holding the next, the last holding the nodes."""

    ident: str
    label: str
    # The Terraform resource type whose planned action marks the box; None: it has none.
    resource_type: str | None = None
    # The label when the plan holds no such resource (the cluster uses an existing one).
    label_when_absent: str | None = None
    # Only resources of the type whose address starts so (the nodes' subnet, not another).
    address_prefix: str = ""


@dataclass(frozen=True)
class FixedShape:
    """What every node is, where the plan's values do not say (nodes on this machine)."""

    instance_type: str
    # None: the plan's node outputs say (their accelerator, as on AWS).
    gpus_per_node: str | None
    zone: str


@dataclass(frozen=True)
class PlanTraits:
    """What the plan review (skyinfra/review/) needs to know of a target's clusters: it asks
    these instead of branching on the target's name."""

    node_resource: str  # the Terraform resource type of one node
    node_noun: str  # what plan.md's warnings call a node
    diagram_parts: tuple[DiagramPart, ...]
    # Nodes cost money by region and instance type (the price table); False: free, and idle
    # nodes cost nothing.
    priced: bool
    # None: the nodes' type, GPUs, zone, placement group and EFA are read from the plan.
    fixed_shape: FixedShape | None = None
    # The way in, drawn when the plan holds it (a private network's bastion): inside the
    # first diagram part, SSH from it to the last (which holds the nodes).
    way_in: DiagramPart | None = None


class TargetDeclaration(Protocol):
    """What a target declares: known before any of its verbs (or their SDK) is loaded."""

    name: ClassVar[str]
    # The most nodes one cluster may have here (the spec refuses more, before anything runs).
    max_nodes: ClassVar[int]
    options: ClassVar[tuple[TargetOption, ...]]
    plan_traits: ClassVar[PlanTraits]

    def parse_section(self, raw: Any, *, nodes: int) -> TargetSection:
        """Validate the target's spec section (``None``: absent); SpecError naming the field."""
        ...

    def offline_problems(self, section: Any, guardrails: Guardrails) -> list[SpecError]:
        """What else can be judged on this machine alone, with no cloud and no workspace:
        the files the table names, and the guardrails the table alone breaks (each
        SpecError's field says which: ``guardrails.*`` for a guardrail)."""
        ...

    def environment_problems(self, spec: Any) -> list[SpecError]:
        """What this machine lacks to run the (valid) ClusterSpec ``spec`` here: `validate`
        and `up` ask; a target whose nodes install everything themselves finds nothing."""
        ...


@dataclass(frozen=True)
class Entry:
    declaration: str  # "module:Class" of the TargetDeclaration
    target: str  # "module:Class" of the Target (skyinfra.targets.base)


TARGETS: dict[str, Entry] = {
    "local": Entry(
        "skyinfra.targets.local.spec:LocalDeclaration",
        "skyinfra.targets.local.target:LocalTarget",
    ),
    "aws": Entry(
        "skyinfra.targets.aws.declaration:AwsDeclaration",
        "skyinfra.targets.aws.target:AwsTarget",
    ),
    "ssh": Entry(
        "skyinfra.targets.ssh.declaration:SshDeclaration",
        "skyinfra.targets.ssh.target:SshHostsTarget",
    ),
}


def target_names() -> tuple[str, ...]:
    return tuple(TARGETS)


def _instance(name: str, where: str) -> Any:
    module_name, _, class_name = where.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise ProviderUnavailableError(
            f"target {name!r} cannot be loaded in this installation: {err}"
        ) from err
    return getattr(module, class_name)()


def _entry(name: str) -> Entry:
    try:
        return TARGETS[name]
    except KeyError:
        raise SpecError("provider", name, f"one of {list(TARGETS)}") from None


@functools.cache
def declaration(name: str) -> TargetDeclaration:
    """What the target called ``name`` declares (its spec table, node limit, flags)."""
    declared: TargetDeclaration = _instance(name, _entry(name).declaration)
    return declared


def declarations() -> tuple[TargetDeclaration, ...]:
    return tuple(declaration(name) for name in TARGETS)


def load_target(name: str) -> Any:
    """A new instance of the target called ``name``; skyinfra.targets.get_target types and
    caches it (this module cannot name the Target protocol: it is above the spec)."""
    return _instance(name, _entry(name).target)
