"""Guardrails: checks of the spec's ``[guardrails]`` table (skyinfra/guardrail_table.py) plus
fixed checks on the planned resources (pure). Each check passes (✅) or fails (❌) with its
reason; a failed one makes `plan` exit non-zero and `up`/`apply` refuse before Terraform
changes anything.

Fixed checks (AWS), on what the plan leaves in place (its "after" values):

- no SSH ingress from the whole internet (0.0.0.0/0 or ::/0), unless
  ``guardrails.allow_world_ssh``;
- IMDSv2 required on every node (``metadata_options.http_tokens = "required"``:
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html);
- every node's root volume encrypted;
- with EFA interfaces, the security group's self ingress AND egress rules (EFA needs both:
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security);
- with the head's role (``aws.recover``, issue 26), that node-0 alone launches with it, and
  in a few words what the role may and may not do (the nodes module's "The head's role");
- with a private network (issue 46), no egress to 0.0.0.0/0 (a NAT gateway's default route)
  unless ``guardrails.allow_internet_egress`` (skyinfra/review/network.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyinfra.guardrail_table import GUARDRAIL_KEYS, Guardrails, parse_guardrails
from skyinfra.review.cost import Cost, usd
from skyinfra.review.network import EGRESS_CHECK, egress_check
from skyinfra.target_registry import declaration

# The table is the spec's (guardrail_table.py); the checks on it are here.
__all__ = [
    "GUARDRAIL_KEYS",
    "Check",
    "Guardrails",
    "failed",
    "fixed_checks",
    "parse_guardrails",
    "policy_checks",
]

WORLD = ("0.0.0.0/0", "::/0")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    reason: str

    @property
    def mark(self) -> str:
        return "✅" if self.ok else "❌"


def _after(plan: Mapping[str, Any], kind: str) -> list[tuple[str, Mapping[str, Any]]]:
    out: list[tuple[str, Mapping[str, Any]]] = []
    for entry in plan.get("resource_changes") or []:
        after = (entry.get("change") or {}).get("after")
        if entry.get("type") == kind and isinstance(after, dict):
            out.append((str(entry.get("address")), after))
    return out


def _world_ssh(plan: Mapping[str, Any]) -> list[str]:
    found = []
    for address, rule in _after(plan, "aws_vpc_security_group_ingress_rule"):
        cidrs = {rule.get("cidr_ipv4"), rule.get("cidr_ipv6")}
        if not cidrs & set(WORLD):
            continue
        proto = str(rule.get("ip_protocol"))
        low: Any = rule.get("from_port")
        high: Any = rule.get("to_port")
        every_port = proto == "-1" or low is None or high is None
        if every_port or (proto in ("tcp", "6") and int(low) <= 22 <= int(high)):
            found.append(address)
    return found


def _first_block(value: Any) -> Mapping[str, Any]:
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return value[0]
    return {}


def fixed_checks(plan: Mapping[str, Any], rails: Guardrails) -> list[Check]:
    """The checks every AWS plan gets (none apply to the local target: no cloud resources)."""
    instances = _after(plan, "aws_instance")
    if not instances and not _after(plan, "aws_security_group"):
        return []
    checks = []
    world = _world_ssh(plan)
    if not world:
        checks.append(Check("SSH from 0.0.0.0/0", True, "no rule opens port 22 to the internet"))
    else:
        checks.append(
            Check(
                "SSH from 0.0.0.0/0",
                rails.allow_world_ssh,
                f"{', '.join(world)} opens port 22 to the internet"
                + (
                    " (allowed by guardrails.allow_world_ssh)"
                    if rails.allow_world_ssh
                    else "; narrow aws.ssh_cidrs or set guardrails.allow_world_ssh = true"
                ),
            )
        )
    if instances:
        weak = [
            a
            for a, i in instances
            if _first_block(i.get("metadata_options")).get("http_tokens") != "required"
        ]
        checks.append(
            Check(
                "IMDSv2 required",
                not weak,
                "every node requires session tokens"
                if not weak
                else f"IMDSv1 allowed on {', '.join(weak)}",
            )
        )
        plain = [
            a
            for a, i in instances
            if _first_block(i.get("root_block_device")).get("encrypted") is not True
        ]
        checks.append(
            Check(
                "Encrypted root volumes",
                not plain,
                "every node's root volume is encrypted"
                if not plain
                else f"unencrypted root volume on {', '.join(plain)}",
            )
        )
    efa = [a for a, n in _after(plan, "aws_network_interface") if n.get("interface_type") == "efa"]
    if efa:
        missing = [
            direction
            for direction in ("ingress", "egress")
            if not any(
                rule.get("ip_protocol") == "-1" and rule.get("cidr_ipv4") is None
                for _, rule in _after(plan, f"aws_vpc_security_group_{direction}_rule")
            )
        ]
        checks.append(
            Check(
                "EFA self rules",
                not missing,
                f"{len(efa)} EFA interface(s); all-traffic self ingress and egress rules kept"
                if not missing
                else f"{len(efa)} EFA interface(s) but no self {' or '.join(missing)} rule: "
                "NCCL over EFA fails without both",
            )
        )
    head = _head_role(plan)
    if head is not None:
        checks.append(head)
    egress = egress_check(plan, rails)
    if egress is not None:
        checks.append(Check(EGRESS_CHECK, *egress))
    return checks


# The nodes module's head role (aws.recover) and node-0's instance.
_HEAD_ROLE = "aws_iam_role.head[0]"
_HEAD_NODE = '["node-0"]'


def _head_role(plan: Mapping[str, Any]) -> Check | None:
    """The head's role (unattended recovery, ``aws.recover``): planned, node-0 alone launches
    with its profile; the reason says what it can and cannot do. None without the role."""
    roles = [r for a, r in _after(plan, "aws_iam_role") if a.endswith(_HEAD_ROLE)]
    if not roles:
        return None
    role = str(roles[0].get("name"))
    cluster = role.removesuffix("-head")
    others = [
        a
        for a, i in _after(plan, "aws_instance")
        if i.get("iam_instance_profile") == role and not a.endswith(_HEAD_NODE)
    ]
    heads = [i for a, i in _after(plan, "aws_instance") if a.endswith(_HEAD_NODE)]
    head_missing = bool(heads) and heads[0].get("iam_instance_profile") != role
    name = "Head's role (aws.recover)"
    if others or head_missing:
        wrong = (
            f"{', '.join(others)} also launch(es) with `{role}`"
            if others
            else f"node-0 does not launch with `{role}`"
        )
        return Check(name, False, f"{wrong}: only node-0 may hold the head's role")
    state = _variable(plan, "head_recovery")
    where = (
        f" (`s3://{state.get('bucket')}/{state.get('state_key')}` and its `.tflock`)"
        if state
        else ""
    )
    return Check(
        name,
        True,
        f"`{role}` on node-0 only: may re-create this cluster's instances (launched tagged "
        f"`skyinfra:cluster = {cluster}`), read and write this cluster's state and lock"
        f"{where}, read this cluster's resources; cannot terminate or delete anything, nor "
        "touch other clusters, other buckets or other roles",
    )


def _variable(plan: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """A root-module variable's value in the plan, when it is an object."""
    item = (plan.get("variables") or {}).get(name)
    found = item.get("value") if isinstance(item, Mapping) else None
    return found if isinstance(found, Mapping) else None


def policy_checks(
    rails: Guardrails,
    cost: Cost,
    *,
    idle_shutdown_minutes: int | None,
    max_lifetime_hours: float | None,
    target: str,
) -> list[Check]:
    """The spec's own guardrails (only those it sets)."""
    checks = []
    if rails.max_hourly_usd is not None:
        limit = usd(rails.max_hourly_usd)
        if cost.after_hourly is None:
            checks.append(
                Check(
                    "max_hourly_usd",
                    False,
                    f"no price for {', '.join(cost.missing)} in the price table: cannot show "
                    f"the cluster stays under {limit}/h",
                )
            )
        else:
            ok = cost.after_hourly <= rails.max_hourly_usd
            spot = cost.spot
            how = ""
            if spot is not None and spot.nodes_after:
                at = (
                    f"the Spot price in {spot.zone}"
                    if spot.spot_usd is not None
                    else "the On-Demand price (no Spot price known)"
                )
                how = f" ({spot.nodes_after} Spot node(s) at {at})"
            checks.append(
                Check(
                    "max_hourly_usd",
                    ok,
                    f"{usd(cost.after_hourly)}/h {'≤' if ok else '>'} {limit}/h{how}",
                )
            )
    if rails.require_idle_shutdown:
        if not declaration(target).plan_traits.priced:
            checks.append(
                Check("require_idle_shutdown", True, f"{target} nodes cost nothing while idle")
            )
        elif idle_shutdown_minutes:
            checks.append(
                Check(
                    "require_idle_shutdown",
                    True,
                    f"nodes shut down after {idle_shutdown_minutes} min idle",
                )
            )
        elif max_lifetime_hours:
            checks.append(
                Check(
                    "require_idle_shutdown",
                    False,
                    "aws.idle_shutdown_minutes = 0: idle nodes run (and cost) until "
                    f"max_lifetime_hours ({max_lifetime_hours:g} h); set idle_shutdown_minutes",
                )
            )
        else:
            checks.append(
                Check(
                    "require_idle_shutdown",
                    False,
                    "aws.idle_shutdown_minutes = 0: idle nodes run (and cost) until someone "
                    "runs `skyinfra down`; set idle_shutdown_minutes (e.g. 60)",
                )
            )
    return checks


def failed(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]
