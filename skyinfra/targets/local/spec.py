"""The ``[local]`` table of the spec: where the local target's nodes live on this machine."""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from skyinfra.errors import SpecError
from skyinfra.guardrail_table import Guardrails
from skyinfra.spec import ClusterSpec, read_bool, reject_unknown
from skyinfra.target_registry import DiagramPart, FixedShape, PlanTraits, TargetOption

LOCAL_KEYS = ("base_address", "python", "recover")
MAX_LOCAL_NODES = 32
DEFAULT_BASE_ADDRESS = "127.0.0.2"


@dataclass(frozen=True)
class LocalSpec:
    base_address: str = DEFAULT_BASE_ADDRESS
    # None: the operator's own interpreter (sys.executable), resolved when rendering.
    python: str | None = None
    # Unattended recovery (issue 26): node 0's supervisor replaces a detached job's lost or
    # interrupted nodes itself and starts its next attempt (skyinfra.run.head_recovery), as
    # aws.recover does on AWS: a rehearsal with no cloud.
    recover: bool = False

    def to_dict(self) -> dict[str, Any]:
        table: dict[str, Any] = {"base_address": self.base_address}
        if self.python is not None:
            table["python"] = self.python
        if self.recover:
            table["recover"] = True
        return table


def parse_local_section(raw: Any, nodes: int) -> LocalSpec:
    """``[local]`` (absent: the defaults)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError("local", raw, "a table")
    reject_unknown(raw, LOCAL_KEYS, "local.")
    base = raw.get("base_address", DEFAULT_BASE_ADDRESS)
    try:
        first = ipaddress.IPv4Address(base)
    except (ipaddress.AddressValueError, ValueError):
        first = None
    loopback = ipaddress.IPv4Network("127.0.0.0/8")
    if first is None or first not in loopback or int(first) & 0xFF == 0:
        raise SpecError(
            "local.base_address", base, "an IPv4 address in 127.0.0.0/8, e.g. 127.0.0.2"
        )
    if ipaddress.IPv4Address(int(first) + nodes - 1) not in loopback or int(
        first
    ) + nodes - 1 >= int(ipaddress.IPv4Address("127.255.255.255")):
        raise SpecError(
            "local.base_address", base, f"room for {nodes} consecutive addresses in 127.0.0.0/8"
        )
    python = raw.get("python")
    if python is not None and (not isinstance(python, str) or not Path(python).is_file()):
        raise SpecError("local.python", python, "the path of an existing Python interpreter")
    recover = read_bool(raw, "recover", "local.recover", False)
    return LocalSpec(base_address=str(first), python=python, recover=recover)


class LocalDeclaration:
    """The local target as the spec and the CLI know it (skyinfra.target_registry);
    LocalTarget (target.py) adds the verbs."""

    name: ClassVar[str] = "local"
    max_nodes: ClassVar[int] = MAX_LOCAL_NODES
    options: ClassVar[tuple[TargetOption, ...]] = ()
    plan_traits: ClassVar[PlanTraits] = PlanTraits(
        node_resource="terraform_data",
        node_noun="node",
        diagram_parts=(DiagramPart("host", "this machine (loopback)"),),
        priced=False,
        fixed_shape=FixedShape(instance_type="local node", gpus_per_node="0", zone="this machine"),
    )

    def parse_section(self, raw: Any, *, nodes: int) -> LocalSpec:
        return parse_local_section(raw, nodes)

    def offline_problems(self, section: Any, guardrails: Guardrails) -> list[SpecError]:
        # local.python is checked when parsed; local nodes cost nothing and have no SSH.
        return []

    def environment_problems(self, spec: ClusterSpec) -> list[SpecError]:
        """The plugins' frameworks that the nodes' interpreter cannot import (frameworks.py):
        local nodes reuse its site-packages."""
        from skyinfra.targets.local.frameworks import framework_problems

        python = spec.section_as(LocalSpec).python or sys.executable
        return framework_problems(spec, python)
