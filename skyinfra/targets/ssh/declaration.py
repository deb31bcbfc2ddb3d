"""The ssh target as the spec and the CLI know it (skyinfra.target_registry loads
:class:`SshDeclaration` alone): its name, node limit, flags and plan traits; the parser of its
table (spec.py) and its checks are imported when an ssh spec is read.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

from skyinfra.errors import SpecError
from skyinfra.guardrail_table import Guardrails
from skyinfra.spec import ClusterSpec, Problems
from skyinfra.target_registry import DiagramPart, FixedShape, PlanTraits, TargetOption

if TYPE_CHECKING:
    from skyinfra.targets.ssh.spec import SshSpec

MAX_SSH_NODES = 64


class SshDeclaration:
    """The ssh target as the spec and the CLI know it (skyinfra.target_registry); SshTarget
    (target.py) adds the verbs."""

    name: ClassVar[str] = "ssh"
    max_nodes: ClassVar[int] = MAX_SSH_NODES
    options: ClassVar[tuple[TargetOption, ...]] = ()
    plan_traits: ClassVar[PlanTraits] = PlanTraits(
        node_resource="terraform_data",
        node_noun="host",
        diagram_parts=(DiagramPart("hosts", "your machines, reached over SSH"),),
        priced=False,
        # Each host's own machine: its address, folder and pinned key are in the plan's
        # resources (plan.md's full plan) and the root module's header; its GPUs, counted at
        # first contact, are in the plan's node outputs.
        fixed_shape=FixedShape(instance_type="SSH host", gpus_per_node=None, zone="your hosts"),
    )

    def parse_section(self, raw: Any, *, nodes: int) -> SshSpec:
        from skyinfra.targets.ssh.spec import parse_ssh_section

        return parse_ssh_section(raw, nodes)

    def offline_problems(self, section: Any, guardrails: Guardrails) -> list[SpecError]:
        from skyinfra.targets.ssh.spec import check_key_file

        problems = Problems()
        problems.check(lambda: check_key_file(section), None)
        return problems.found

    def environment_problems(self, spec: ClusterSpec) -> list[SpecError]:
        """Only ssh.checkpoints_url's credentials, which each job's agents get from this
        environment; the hosts install everything else themselves (the enrolment's node
        check says what a host lacks)."""
        from skyinfra.targets.ssh.checkpoint_store import operator_credentials
        from skyinfra.targets.ssh.spec import SshSpec

        store = spec.section_as(SshSpec).checkpoints
        found = operator_credentials(store, os.environ) if store else None
        return [found] if isinstance(found, SpecError) else []
