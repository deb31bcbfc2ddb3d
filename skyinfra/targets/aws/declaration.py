"""The aws target as the spec and the CLI know it (skyinfra.target_registry loads
:class:`AwsDeclaration` without boto3): its name, node limit, flags, plan traits, the parser
of its table and its offline checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from skyinfra.errors import SpecError
from skyinfra.guardrail_table import Guardrails
from skyinfra.spec import ClusterSpec, Problems
from skyinfra.target_registry import DiagramPart, PlanTraits, TargetOption
from skyinfra.targets.aws.addressing import MAX_NODES_DEFAULT_VPC

if TYPE_CHECKING:
    from skyinfra.targets.aws.spec import AwsSpec

SKIP_PREFLIGHT = TargetOption(
    name="skip_preflight",
    flag="--skip-preflight",
    help="skip the boto3 checks before Terraform (instance type offered in the zone, vCPU "
    "quota); values such as the AMI id are still looked up.",
    commands=("up", "plan", "render"),
)
ZONES = TargetOption(
    name="zones",
    flag="--zones",
    metavar="ZONES",
    help="availability zones to try, in order (e.g. us-east-1a,us-east-1c, or a,c); "
    "default aws.zones, else every zone offering the type. A new cluster whose zone has no "
    "capacity moves to the next one.",
)
RETRY_FOR = TargetOption(
    name="retry_for",
    flag="--retry-for",
    metavar="DURATION",
    help="keep cycling the zones, with back-off, until capacity appears or DURATION (e.g. "
    "30m) has passed.",
)


class AwsDeclaration:
    """The aws target as the spec and the CLI know it (skyinfra.target_registry); reading an
    aws spec loads no boto3. AwsTarget (target.py) adds the verbs."""

    name: ClassVar[str] = "aws"
    max_nodes: ClassVar[int] = MAX_NODES_DEFAULT_VPC  # spec.MAX_AWS_NODES
    options: ClassVar[tuple[TargetOption, ...]] = (SKIP_PREFLIGHT, ZONES, RETRY_FOR)
    plan_traits: ClassVar[PlanTraits] = PlanTraits(
        node_resource="aws_instance",
        node_noun="GPU node",
        diagram_parts=(
            DiagramPart("vpc", "VPC", "aws_vpc", "VPC (existing)"),
            DiagramPart(
                "subnet",
                "subnet",
                "aws_subnet",
                "subnet (existing)",
                address_prefix="module.network.aws_subnet.this",
            ),
            DiagramPart(
                "sg", "security group", "aws_security_group", address_prefix="module.security."
            ),
        ),
        priced=True,
        way_in=DiagramPart(
            "bastion",
            "bastion: the only public host, the way in",
            "aws_instance",
            address_prefix="module.bastion",
        ),
    )

    # The table's parser and checks are imported when an aws spec is read: every command
    # builds its flags from each target's declaration, most on clusters of another target.
    def parse_section(self, raw: Any, *, nodes: int) -> AwsSpec:
        from skyinfra.targets.aws.spec_parsing import parse_aws_section

        return parse_aws_section(raw)

    def environment_problems(self, spec: ClusterSpec) -> list[SpecError]:
        # Nodes install their frameworks themselves (cloud-init): nothing from this machine.
        return []

    def offline_problems(self, section: Any, guardrails: Guardrails) -> list[SpecError]:
        from skyinfra.targets.aws.spec import check_ssh_key_file

        problems = Problems()
        problems.check(lambda: check_ssh_key_file(section), None)
        if guardrails.require_idle_shutdown and section.idle_shutdown_minutes == 0:
            problems.found.append(
                SpecError(
                    "guardrails.require_idle_shutdown",
                    True,
                    "aws.idle_shutdown_minutes above 0 (it is 0: the idle shutdown is off), "
                    "or guardrails.require_idle_shutdown = false",
                )
            )
        world = [c for c in section.ssh_cidrs if c.endswith("/0")]
        if world and not guardrails.allow_world_ssh:
            problems.found.append(
                SpecError(
                    "guardrails.allow_world_ssh",
                    False,
                    f"true to open SSH to the internet ({world[0]} in aws.ssh_cidrs), or "
                    "narrower aws.ssh_cidrs",
                )
            )
        return problems.found
