"""A saved plan read as a change to a cluster (pure): Terraform's counts, the resources it
destroys or replaces (GPU nodes first, with ``action_reason``, ``replace_paths`` and the values
before and after) and the cluster's shape before and after.

Everything comes from ``terraform show -json PLANFILE`` (format 1.x:
https://developer.hashicorp.com/terraform/internals/json-format), never from plan text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from skyinfra.target_registry import declaration, declarations
from skyinfra.terraform.plan import reason_words

_NODE_KEY = re.compile(r'\["(node-\d+)"\]$')
_EFA_KEY = re.compile(r'\["(node-\d+)/\d+"\]$')
# Shown for a value Terraform knows only after apply.
UNKNOWN = "(known after apply)"
# Attributes whose before -> after a warning shows for a replaced node (when they differ).
NODE_ATTRIBUTES = ("ami", "instance_type", "user_data", "user_data_base64", "placement_group")
_LONG_VALUE = 60


@dataclass(frozen=True)
class Diff:
    path: str
    before: str
    after: str


@dataclass(frozen=True)
class Loss:
    """A resource the plan destroys or replaces."""

    address: str
    action: str  # "destroy" or "replace"
    node: bool  # one of the cluster's nodes (a GPU node on AWS)
    cause: str  # Terraform's action_reason, "" when it gives none
    reason: str  # the cause in words
    replace_paths: tuple[str, ...] = ()
    diffs: tuple[Diff, ...] = ()


@dataclass(frozen=True)
class Shape:
    """The cluster's shape on one side of the plan (``nodes == 0``: no cluster)."""

    nodes: int = 0
    instance_type: str = "-"
    gpus_per_node: str = "-"
    zone: str = "-"
    placement_group: str = "-"
    efa_per_node: int = 0
    coordinator: str = "-"
    node_names: tuple[str, ...] = ()
    # Spot (issue 26): the nodes launched on the Spot market (instance_market_options).
    spot_nodes: tuple[str, ...] = ()
    # Hosts standing by, not enrolled (the root module's spare_hosts output: the ssh target).
    spare_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Counts:
    add: int = 0
    change: int = 0
    destroy: int = 0

    @property
    def line(self) -> str:
        """Terraform's own summary line."""
        return f"Plan: {self.add} to add, {self.change} to change, {self.destroy} to destroy."

    @property
    def no_changes(self) -> bool:
        return self.add == self.change == self.destroy == 0


@dataclass(frozen=True)
class Resource:
    """One resource of the plan with what happens to it (for the diagram)."""

    address: str
    type: str
    action: str  # create, update, replace, destroy, no-op, read


@dataclass(frozen=True)
class PlanSummary:
    counts: Counts
    losses: tuple[Loss, ...]
    before: Shape
    after: Shape
    resources: tuple[Resource, ...]
    terraform_version: str
    # Outputs that change (name -> (before, after) as text).
    output_changes: tuple[tuple[str, str, str], ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = value
    else:
        import json

        text = json.dumps(value, sort_keys=True)
    if len(text) > _LONG_VALUE:
        import hashlib

        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        return f"({len(text)} characters, sha256 {digest}…)"
    return text


def _market(value: Any) -> str:
    """An aws_instance's instance_market_options in words: "on-demand" (no block), or the
    market type with its Spot options ("spot (one-time, terminate, max_price 0.5000)")."""
    if not value:
        return "on-demand"
    if not isinstance(value, list) or not isinstance(value[0], dict):
        return _text(value)
    block = value[0]
    spot = (block.get("spot_options") or [{}])[0] or {}
    details = [
        str(spot[key])
        for key in ("spot_instance_type", "instance_interruption_behavior")
        if spot.get(key)
    ]
    if spot.get("max_price"):
        details.append(f"max_price {spot['max_price']}")
    market = str(block.get("market_type") or "?")
    return market + (f" ({', '.join(details)})" if details else "")


def action_of(actions: Sequence[str]) -> str:
    acts = list(actions)
    if "delete" in acts and "create" in acts:
        return "replace"
    if acts == ["delete"]:
        return "destroy"
    if acts == ["create"]:
        return "create"
    if acts == ["update"]:
        return "update"
    if acts == ["read"]:
        return "read"
    return "no-op"


def _changes(plan: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in plan.get("resource_changes") or [] if c.get("mode", "managed") == "managed"]


def count_changes(plan: Mapping[str, Any]) -> Counts:
    """Terraform's own counting: a replacement adds one and destroys one."""
    add = change = destroy = 0
    for entry in _changes(plan):
        action = action_of((entry.get("change") or {}).get("actions") or [])
        add += action in ("create", "replace")
        destroy += action in ("destroy", "replace")
        change += action == "update"
    return Counts(add, change, destroy)


def node_types() -> tuple[str, ...]:
    """The resource types that are a cluster's nodes, one per target (its PlanTraits)."""
    return tuple(target.plan_traits.node_resource for target in declarations())


def is_node(entry: Mapping[str, Any]) -> bool:
    return entry.get("type") in node_types() and bool(_NODE_KEY.search(str(entry.get("address"))))


def _paths(change: Mapping[str, Any]) -> tuple[str, ...]:
    paths = change.get("replace_paths") or []
    return tuple(sorted({".".join(str(p) for p in path) for path in paths if path}))


def _diffs(
    change: Mapping[str, Any], forced: Sequence[str], extra: Sequence[str]
) -> tuple[Diff, ...]:
    """Before -> after of the attributes forcing the replacement, and of ``extra`` ones when
    they are known and differ (an unknown value there is Terraform's bookkeeping, not news)."""
    before = change.get("before") or {}
    after = change.get("after") or {}
    unknown = change.get("after_unknown") or {}
    out = []
    seen: set[str] = set()
    for name in dict.fromkeys([*forced, *extra]):
        top = name.split(".")[0]
        # A block forces its replacement through several paths (instance_market_options,
        # instance_market_options.0.market_type, ...): its value is shown once.
        if top in seen or (top not in before and top not in after):
            continue
        seen.add(top)
        old, new = before.get(top), after.get(top)
        if unknown.get(top) is True:
            if name in forced:
                out.append(Diff(top, _text(old), UNKNOWN))
            continue
        # (Not a set: a block such as instance_market_options is a list, unhashable.)
        if old == new or (old in (None, "") and new in (None, "")):
            continue
        shown = _market if top == "instance_market_options" else _text
        out.append(Diff(top, shown(old), shown(new)))
    return tuple(out)


def losses(plan: Mapping[str, Any]) -> tuple[Loss, ...]:
    """Every destroy and replace, nodes first (then in plan order)."""
    found: list[Loss] = []
    for entry in _changes(plan):
        change = entry.get("change") or {}
        action = action_of(change.get("actions") or [])
        if action not in ("destroy", "replace"):
            continue
        cause = str(entry.get("action_reason") or "")
        paths = _paths(change)
        node = is_node(entry)
        found.append(
            Loss(
                address=str(entry.get("address")),
                action=action,
                node=node,
                cause=cause,
                # "(fewer nodes)" is said of nodes only: another resource keyed the same way
                # (an SSH rule per CIDR) goes for its own reason.
                reason=(reason_words(cause) or "as planned").removesuffix(
                    "" if node else " (fewer nodes)"
                ),
                replace_paths=paths,
                diffs=(
                    _diffs(change, paths, NODE_ATTRIBUTES if node else ())
                    if action == "replace"
                    else ()
                ),
            )
        )
    return tuple(sorted(found, key=lambda loss: not loss.node))


def _side(entry: Mapping[str, Any], side: str) -> Mapping[str, Any] | None:
    change = entry.get("change") or {}
    value = change.get(side)
    return value if isinstance(value, dict) else None


def _outputs(plan: Mapping[str, Any], side: str) -> dict[str, Any]:
    """Output values on one side; an unknown one maps to UNKNOWN."""
    out: dict[str, Any] = {}
    for name, change in (plan.get("output_changes") or {}).items():
        if side == "after" and (change.get("after_unknown") is True):
            out[name] = UNKNOWN
        else:
            out[name] = change.get(side)
    return out


def _first(values: Iterable[Any]) -> str:
    seen = sorted({str(v) for v in values if v not in (None, "")})
    if not seen:
        return "-"
    return seen[0] if len(seen) == 1 else " / ".join(seen)


def _gpus(outputs: Mapping[str, Any]) -> str:
    nodes = outputs.get("nodes")
    if not isinstance(nodes, dict):
        return "-"
    kinds = set()
    for node in nodes.values():
        acc = node.get("accelerator") if isinstance(node, dict) else None
        if isinstance(acc, dict) and acc.get("count"):
            kinds.add(f"{acc['count']} x {acc.get('type', 'GPU')}")
        else:  # the ssh target's hosts may differ: one without GPU among others says so
            kinds.add("0")
    return _first(kinds) if kinds else "0"


def _host_list(value: Any) -> tuple[str, ...]:
    return tuple(str(h) for h in value) if isinstance(value, list) else ()


def shape(plan: Mapping[str, Any], side: str, *, target: str) -> Shape:
    """The cluster on ``side`` ("before" or "after") of the plan."""
    changes = _changes(plan)
    nodes = {}
    for entry in changes:
        value = _side(entry, side)
        if value is not None and is_node(entry):
            match = _NODE_KEY.search(str(entry["address"]))
            assert match is not None
            nodes[match.group(1)] = (entry, value)
    if not nodes:
        return Shape()
    names = tuple(sorted(nodes, key=lambda n: int(n.split("-")[1])))
    outputs = _outputs(plan, side)
    port = outputs.get("head_port")
    addr = outputs.get("head_addr")
    coordinator = "-" if addr is None and port is None else f"{addr or UNKNOWN}:{port or UNKNOWN}"
    fixed = declaration(target).plan_traits.fixed_shape
    if fixed is not None:
        return Shape(
            nodes=len(names),
            instance_type=fixed.instance_type,
            gpus_per_node=fixed.gpus_per_node or _gpus(outputs),
            zone=fixed.zone,
            placement_group="-",
            coordinator=coordinator,
            node_names=names,
            spare_hosts=_host_list(outputs.get("spare_hosts")),
        )
    types = [value.get("instance_type") for _, value in nodes.values()]
    zones = []
    subnet_zone = [
        (_side(e, side) or {}).get("availability_zone")
        for e in changes
        if e.get("type") == "aws_subnet" and _side(e, side) is not None
    ]
    for entry, value in nodes.values():
        unknown = (entry.get("change") or {}).get("after_unknown") or {}
        zone = value.get("availability_zone")
        if side == "after" and unknown.get("availability_zone"):
            zone = subnet_zone[0] if subnet_zone and subnet_zone[0] else UNKNOWN
        zones.append(zone)
    groups = [
        f"{(_side(e, side) or {}).get('name')} ({(_side(e, side) or {}).get('strategy')})"
        for e in changes
        if e.get("type") == "aws_placement_group" and _side(e, side) is not None
    ]
    efa = [
        e
        for e in changes
        if e.get("type") == "aws_network_interface"
        and (_side(e, side) or {}).get("interface_type") == "efa"
    ]
    spot = tuple(
        name
        for name in names
        if any(
            isinstance(m, dict) and m.get("market_type") == "spot"
            for m in nodes[name][1].get("instance_market_options") or []
        )
    )
    return Shape(
        nodes=len(names),
        instance_type=_first(types),
        gpus_per_node=_gpus(outputs),
        zone=_first(zones),
        placement_group=_first(groups) if groups else "none",
        efa_per_node=len(efa) // len(names),
        coordinator=coordinator,
        node_names=names,
        spot_nodes=spot,
    )


def resources(plan: Mapping[str, Any]) -> tuple[Resource, ...]:
    return tuple(
        Resource(
            str(e.get("address")),
            str(e.get("type")),
            action_of((e.get("change") or {}).get("actions") or []),
        )
        for e in _changes(plan)
    )


def _output_changes(plan: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    out = []
    for name, change in sorted((plan.get("output_changes") or {}).items()):
        if action_of(change.get("actions") or []) == "no-op":
            continue
        after = UNKNOWN if change.get("after_unknown") is True else _text(change.get("after"))
        out.append((name, _text(change.get("before")), after))
    return tuple(out)


def summarize(plan: Mapping[str, Any], *, target: str) -> PlanSummary:
    """The plan JSON as a cluster change."""
    return PlanSummary(
        counts=count_changes(plan),
        losses=losses(plan),
        before=shape(plan, "before", target=target),
        after=shape(plan, "after", target=target),
        resources=resources(plan),
        terraform_version=str(plan.get("terraform_version", "?")),
        output_changes=_output_changes(plan),
    )
