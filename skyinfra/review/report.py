"""One review of a saved plan (pure): what plan.md and `skyinfra plan --json` show, built from
the plan JSON and the facts of the spec that Terraform does not hold (idle shutdown, lifetime,
guardrails)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from skyinfra.errors import GuardrailError
from skyinfra.review import cost as cost_mod
from skyinfra.review.guardrails import Check, Guardrails, failed, fixed_checks, policy_checks
from skyinfra.review.network import network_hourly, shape_lines
from skyinfra.review.summary import PlanSummary, summarize
from skyinfra.spec import ClusterSpec


@dataclass(frozen=True)
class ClusterFacts:
    """What the review needs from the spec."""

    cluster: str
    target: str
    region: str | None = None
    idle_shutdown_minutes: int | None = None
    max_lifetime_hours: float | None = None
    guardrails: Guardrails = field(default_factory=Guardrails)


@dataclass(frozen=True)
class Review:
    facts: ClusterFacts
    summary: PlanSummary
    cost: cost_mod.Cost
    checks: tuple[Check, ...]
    planfile_sha256: str
    providers: Mapping[str, str]
    full_plan: str = ""
    # What the nodes' instance role may do in S3 (node_access()), one line each.
    node_access: tuple[str, ...] = ()
    # A private network's shape (network.shape_lines()): what is public, the way in, egress.
    network: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not failed(self.checks)

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary (`skyinfra plan --json`)."""
        counts = self.summary.counts
        return {
            "cluster": self.facts.cluster,
            "target": self.facts.target,
            "region": self.facts.region,
            "terraform_version": self.summary.terraform_version,
            "providers": dict(self.providers),
            "planfile_sha256": self.planfile_sha256,
            "plan": {
                "add": counts.add,
                "change": counts.change,
                "destroy": counts.destroy,
                "no_changes": counts.no_changes,
                "line": counts.line,
            },
            "losses": [
                {
                    "address": loss.address,
                    "action": loss.action,
                    "node": loss.node,
                    "action_reason": loss.cause,
                    "reason": loss.reason,
                    "replace_paths": list(loss.replace_paths),
                    "diffs": [
                        {"path": d.path, "before": d.before, "after": d.after} for d in loss.diffs
                    ],
                }
                for loss in self.summary.losses
            ],
            "topology": {
                "before": _shape(self.summary.before),
                "after": _shape(self.summary.after),
            },
            "cost": self.cost.to_dict(),
            "guardrails": [{"name": c.name, "ok": c.ok, "reason": c.reason} for c in self.checks],
            "node_access": list(self.node_access),
            "network": list(self.network),
            "passed": self.passed,
        }


def _shape(shape: Any) -> dict[str, Any]:
    data = dict(shape.__dict__)
    data["node_names"] = list(shape.node_names)
    return data


def node_access(plan: Mapping[str, Any]) -> tuple[str, ...]:
    """What the nodes' role may do in S3, from the root module's variables in the plan (the
    AWS target's ``staging`` and ``checkpoints``; nothing on other targets)."""
    variables = plan.get("variables") or {}

    def value(name: str) -> Mapping[str, Any] | None:
        item = variables.get(name)
        found = item.get("value") if isinstance(item, Mapping) else None
        return found if isinstance(found, Mapping) else None

    lines = []
    staging = value("staging")
    if staging:
        lines.append(
            f"read (s3:GetObject) `s3://{staging.get('bucket')}/{staging.get('prefix')}*`: "
            "the staged runtime wheel"
        )
        if staging.get("wheelhouse"):
            lines.append(
                f"read (s3:GetObject) `s3://{staging.get('bucket')}/{staging['wheelhouse']}*`: "
                "the S3 wheelhouse the nodes install from (shared by the account's clusters "
                "with the same requirements; `down` keeps it)"
            )
    ckpt = value("checkpoints")
    if ckpt:
        where = f"s3://{ckpt.get('bucket')}/{ckpt.get('prefix')}/"
        lines.append(
            f"list, read, write and delete (s3:ListBucket under the prefix, s3:GetObject, "
            f"s3:PutObject, s3:DeleteObject) `{where}*`: checkpoints, kept after `down`"
        )
    return tuple(lines)


def planned_region(plan: Mapping[str, Any]) -> str | None:
    """The region the planned root module was given (its ``region`` variable), if any: the
    plan of a ladder's rung is in that rung's region, where the spec names the first."""
    variable = (plan.get("variables") or {}).get("region") or {}
    value = variable.get("value") if isinstance(variable, Mapping) else None
    return value if isinstance(value, str) and value else None


def planned_place(plan: Mapping[str, Any], target: str) -> cost_mod.PlannedPlace:
    """The plan's nodes' instance type (after the plan; before it when it removes them all)
    and region: what a Spot check of this plan is priced at, not the spec's first rung."""
    summary = summarize(plan, target=target)
    side = summary.after if summary.after.nodes else summary.before
    one = side.nodes and side.instance_type not in ("", "-") and " / " not in side.instance_type
    kind = side.instance_type if one else None
    return cost_mod.PlannedPlace(instance_type=kind, region=planned_region(plan))


def build_review(
    plan: Mapping[str, Any],
    facts: ClusterFacts,
    *,
    planfile_sha256: str,
    providers: Mapping[str, str] | None = None,
    full_plan: str = "",
    table: cost_mod.PriceTable | None = None,
    spot_prices: cost_mod.SpotPrices | None = None,
) -> Review:
    """``spot_prices``: the Spot price history of the nodes' type at plan time (issue 26);
    the plan's Spot nodes are priced (and ``max_hourly_usd`` judged) at its price. The nodes
    are priced at the plan's own region and instance type (a ladder's rung: its own)."""
    facts = replace(facts, region=planned_region(plan) or facts.region)
    summary = summarize(plan, target=facts.target)
    table = table or cost_mod.price_table()
    cost = cost_mod.estimate(
        target=facts.target,
        region=facts.region,
        before=(summary.before.nodes, summary.before.instance_type),
        after=(summary.after.nodes, summary.after.instance_type),
        lifetime_hours=facts.max_lifetime_hours,
        idle_shutdown_minutes=facts.idle_shutdown_minutes,
        table=table,
        spot_plan=cost_mod.SpotPlan(
            nodes=(len(summary.before.spot_nodes), len(summary.after.spot_nodes)),
            zone=summary.after.zone if summary.after.nodes else summary.before.zone,
            prices=spot_prices,
        ),
    )
    network = network_hourly(plan, table, facts.region)
    cost = cost_mod.with_network(cost, network.before, network.after, network.parts)
    checks = [
        *policy_checks(
            facts.guardrails,
            cost,
            idle_shutdown_minutes=facts.idle_shutdown_minutes,
            max_lifetime_hours=facts.max_lifetime_hours,
            target=facts.target,
        ),
        *fixed_checks(plan, facts.guardrails),
    ]
    return Review(
        facts=facts,
        summary=summary,
        cost=cost,
        checks=tuple(checks),
        planfile_sha256=planfile_sha256,
        providers=dict(sorted((providers or {}).items())),
        full_plan=full_plan,
        node_access=node_access(plan),
        network=shape_lines(plan, table, facts.region),
    )


def facts_of(spec: ClusterSpec) -> ClusterFacts:
    """What the review reads from the spec (a target's section may hold a region, an idle
    shutdown and a lifetime: AWS's does)."""
    section = spec.section
    return ClusterFacts(
        cluster=spec.name,
        target=spec.provider,
        region=getattr(section, "region", None),
        idle_shutdown_minutes=getattr(section, "idle_shutdown_minutes", None),
        max_lifetime_hours=getattr(section, "max_lifetime_hours", None),
        guardrails=spec.guardrails,
    )


def refuse_failed_guardrails(review: Review) -> None:
    """GuardrailError naming every failed check (`up` and `apply` refuse before applying)."""
    bad = failed(review.checks)
    if bad:
        reasons = "; ".join(f"{c.name}: {c.reason}" for c in bad)
        raise GuardrailError(
            f"cluster {review.facts.cluster!r}: {len(bad)} guardrail(s) failed ({reasons}); "
            "nothing was changed"
        )
