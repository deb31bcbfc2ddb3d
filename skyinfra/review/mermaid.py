"""The cluster as a Mermaid flowchart (pure): the target's parts above the nodes (VPC → subnet
→ security group on AWS, this machine on the local target: its PlanTraits) → the nodes, and
the way in when the plan holds one (a private network's bastion, the only public host);
every part marked with what the plan does to it.
GitHub renders ```` ```mermaid ```` blocks in pull-request comments:
https://docs.github.com/en/get-started/writing-on-github/working-with-advanced-formatting/creating-diagrams
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from skyinfra.review.summary import Resource
from skyinfra.target_registry import DiagramPart, declaration

_MARKS = {
    "create": "+ new",
    "replace": "± replaced",
    "destroy": "- destroyed",
    "update": "~ changed",
}
_CLASSES = (
    "classDef create fill:#e6ffec,stroke:#1a7f37",
    "classDef replace fill:#fff1e5,stroke:#bc4c00,stroke-width:2px",
    "classDef destroy fill:#ffebe9,stroke:#cf222e,stroke-dasharray: 4 2",
    "classDef update fill:#fff8c5,stroke:#9a6700",
)
_NODE = re.compile(r'\["(node-\d+)"\]$')


def _label(text: str, action: str) -> str:
    mark = _MARKS.get(action)
    return f"{text}<br/>{mark}" if mark else text


def _node(ident: str, text: str, action: str) -> str:
    line = f'  {ident}["{_label(text, action)}"]'
    return line + (f":::{action}" if action in _MARKS else "")


def _first(resources: Sequence[Resource], part: DiagramPart) -> Resource | None:
    found = [
        r
        for r in resources
        if r.type == part.resource_type and r.address.startswith(part.address_prefix)
    ]
    return found[0] if found else None


def diagram(resources: Sequence[Resource], *, target: str, instance_type: str = "") -> str:
    """The flowchart's text (without the fences)."""
    traits = declaration(target).plan_traits
    lines = ["flowchart LR"]
    nodes = []
    for res in resources:
        match = _NODE.search(res.address)
        if res.type == traits.node_resource and match:
            nodes.append((match.group(1), res.action))
    nodes.sort(key=lambda n: int(n[0].split("-")[1]))
    for part in traits.diagram_parts:
        found = _first(resources, part) if part.resource_type else None
        label = part.label if found or part.label_when_absent is None else part.label_when_absent
        lines.append(_node(part.ident, label, found.action if found else ""))
    idents = [part.ident for part in traits.diagram_parts]
    lines += [f"  {above} --> {below}" for above, below in itertools.pairwise(idents)]
    parent = idents[-1]
    way_in = _first(resources, traits.way_in) if traits.way_in is not None else None
    if traits.way_in is not None and way_in is not None:
        lines.append(_node(traits.way_in.ident, traits.way_in.label, way_in.action))
        lines.append(f"  {idents[0]} --> {traits.way_in.ident}")
        lines.append(f"  {traits.way_in.ident} -->|SSH| {parent}")
    suffix = f" {instance_type}" if instance_type and instance_type != "-" else ""
    for name, action in nodes:
        ident = name.replace("-", "_")
        lines.append(_node(ident, f"{name}{suffix}", action))
        lines.append(f"  {parent} --> {ident}")
    lines += [f"  {c}" for c in _CLASSES]
    return "\n".join(lines)
