"""plan.md: one review as a pull-request comment (pure).

Laid out after what Atlantis, tfcmt and infracost post (see docs/guides/review.md):
Terraform's ``Plan:`` line outside any fold, a warning for every destroy and replace (nodes
first, with Terraform's reason, the attributes forcing it and their values before → after),
the cluster's shape before → after, a Mermaid picture, the cost per hour and over the
cluster's lifetime, the guardrails, then the full plan folded. The whole comment stays under
GitHub's 65,536-character limit: the folded plan is cut first, and the comment says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from skyinfra.review.cost import Cost, SpotCost, signed_usd, usd
from skyinfra.review.guardrails import failed
from skyinfra.review.mermaid import diagram
from skyinfra.review.report import Review
from skyinfra.review.summary import Loss, Shape
from skyinfra.target_registry import declaration

# GitHub refuses issue and pull-request comments longer than this (characters).
COMMENT_LIMIT = 65536
# A hidden marker CI uses to find and update its own comment instead of adding another.
MARKER = "<!-- skyinfra-plan -->"


def _code(text: str) -> str:
    quoted = text.replace("`", "'")
    return f"`{quoted}`"


def header(review: Review) -> list[str]:
    facts = review.facts
    where = facts.target + (f"/{facts.region}" if facts.region else "")
    bad = failed(review.checks)
    verdict = "✅ guardrails pass" if not bad else f"❌ {len(bad)} guardrail(s) failed"
    versions = [f"Terraform {review.summary.terraform_version}"]
    versions += [f"{name} {version}" for name, version in review.providers.items()]
    return [
        MARKER,
        f"## skyinfra plan — cluster {_code(facts.cluster)} ({where}) {verdict}",
        "",
        f"**{review.summary.counts.line}**",
        "",
        " · ".join(versions) + f" · planfile sha256 {_code(review.planfile_sha256)}",
    ]


def _loss_line(loss: Loss) -> list[str]:
    cause = f"{loss.cause}: " if loss.cause else ""
    forced = ""
    if loss.replace_paths:
        forced = "; forced by " + ", ".join(_code(p) for p in loss.replace_paths)
    lines = [f"> - {_code(loss.address)} — {cause}{loss.reason}{forced}"]
    lines += [f">   - {_code(d.path)}: {_code(d.before)} → {_code(d.after)}" for d in loss.diffs]
    return lines


def warnings(losses: Sequence[Loss], *, target: str) -> list[str]:
    """The block `up`'s confirmation prints too (as plain text, see :func:`terminal`)."""
    if not losses:
        return []
    what = declaration(target).plan_traits.node_noun
    lines = ["> [!WARNING]"]
    for action, verb in (("replace", "REPLACED"), ("destroy", "DESTROYED")):
        nodes = [x for x in losses if x.action == action and x.node]
        if nodes:
            lines.append(
                f"> **{len(nodes)} {what}(s) will be {verb}**: whatever runs on them stops, "
                "and their disks go with them"
            )
    others = [x for x in losses if not x.node]
    if others:
        lines.append(f"> **{len(others)} other resource(s) will be destroyed or replaced**")
    lines.append(">")
    for loss in losses:
        lines += _loss_line(loss)
    return lines


def terminal(losses: Sequence[Loss], *, target: str) -> list[str]:
    """The warning block as terminal lines: the same story plan.md tells."""
    lines = [
        line.removeprefix("> ").replace("**", "")
        for line in warnings(losses, target=target)
        if line.startswith("> **")
    ]
    for loss in losses:
        cause = f" [{loss.cause}]" if loss.cause else ""
        forced = f"; forced by {', '.join(loss.replace_paths)}" if loss.replace_paths else ""
        lines.append(f"{loss.action} {loss.address}: {loss.reason}{cause}{forced}")
        lines += [f"    {d.path}: {d.before} -> {d.after}" for d in loss.diffs]
    return lines


def _row(name: str, before: str, after: str) -> str:
    mark = "" if before == after else " ⚠️" if before != "-" else ""
    return f"| {name} | {before} | {after}{mark} |"


def topology(before: Shape, after: Shape) -> list[str]:
    def nodes(shape: Shape) -> str:
        return "-" if shape.nodes == 0 else f"{shape.nodes} x {shape.instance_type}"

    def efa(shape: Shape) -> str:
        return "-" if shape.nodes == 0 else str(shape.efa_per_node)

    def keep(shape: Shape, value: str) -> str:
        return "-" if shape.nodes == 0 else value

    return [
        "### Topology",
        "",
        "| | before | after |",
        "|---|---|---|",
        _row("nodes x type", nodes(before), nodes(after)),
        _row("GPUs per node", keep(before, before.gpus_per_node), keep(after, after.gpus_per_node)),
        _row("zone", keep(before, before.zone), keep(after, after.zone)),
        _row(
            "placement group",
            keep(before, before.placement_group),
            keep(after, after.placement_group),
        ),
        _row("EFA interfaces per node", efa(before), efa(after)),
        _row("coordinator", keep(before, before.coordinator), keep(after, after.coordinator)),
        *_spot_row(before, after),
        *_spares_row(before, after),
    ]


def _spares_row(before: Shape, after: Shape) -> list[str]:
    """Spare hosts standing by (listed, not enrolled until a host is lost)."""
    if not (before.spare_hosts or after.spare_hosts):
        return []

    def spares(shape: Shape) -> str:
        return ", ".join(shape.spare_hosts) or "-"

    return [_row("spare hosts (not enrolled)", spares(before), spares(after))]


def _spot_row(before: Shape, after: Shape) -> list[str]:
    """Which nodes are Spot (issue 26); no row when neither side has any."""
    if not before.spot_nodes and not after.spot_nodes:
        return []

    def spot(shape: Shape) -> str:
        if shape.nodes == 0:
            return "-"
        if not shape.spot_nodes:
            return "none (all On-Demand)"
        on_demand = [n for n in shape.node_names if n not in shape.spot_nodes]
        rest = f"; On-Demand: {', '.join(on_demand)}" if on_demand else ""
        return ", ".join(shape.spot_nodes) + rest

    return [_row("Spot nodes", spot(before), spot(after))]


def cost(c: Cost) -> list[str]:
    lines = ["### Cost", ""]
    if c.free:
        return [*lines, "The local target runs on this machine: **$0.00** per hour."]
    lines += [
        "| | before | after | change |",
        "|---|---|---|---|",
        f"| per hour | {usd(c.before_hourly)} | {usd(c.after_hourly)} | "
        f"**{signed_usd(c.delta_hourly)}** |",
    ]
    if c.lifetime_hours is not None:
        lines.append(
            f"| over the lifetime ({c.lifetime_hours:g} h, `max_lifetime_hours`) | | "
            f"at most {usd(c.lifetime_cost)} | |"
        )
    lines.append("")
    if c.lifetime_hours is None:
        lines.append(
            "No `max_lifetime_hours`: the cluster costs this every hour until `skyinfra down`"
            + (
                f"; an idle node ends itself after {c.idle_shutdown_minutes} min "
                f"(idle time costs at most {usd(c.idle_cost)} per idle period)."
                if c.idle_shutdown_minutes
                else ", and idle shutdown is off."
            )
        )
    elif c.idle_shutdown_minutes:
        lines.append(
            f"Nodes end themselves after {c.lifetime_hours:g} h, or after "
            f"{c.idle_shutdown_minutes} min idle, whichever comes first."
        )
    else:
        lines.append(
            f"Idle shutdown is off: nodes cost this, busy or idle, until they end themselves "
            f"after {c.lifetime_hours:g} h."
        )
    if c.network_parts:
        lines.append(
            f"The per-hour figures include the network: {', '.join(c.network_parts)} (a NAT "
            "gateway's per-GB charge is not in them)."
        )
    if c.missing:
        lines.append(f"No price in the table for {', '.join(_code(t) for t in c.missing)}.")
    lines.append(f"<sub>On-demand list prices; source: {c.source}; as of {c.date}.</sub>")
    if c.spot is not None:
        lines += ["", *spot_prices(c.spot)]
    return lines


def _percent(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{fraction * 100:.0f}% less"


def spot_prices(spot: SpotCost) -> list[str]:
    """Issue 26: what the Spot nodes are priced at, and the Spot price per zone."""
    kind = _code(spot.instance_type)
    if spot.spot_usd is None:
        first = (
            f"**Spot nodes: {spot.nodes_after}** ({kind}), priced at the On-Demand price "
            f"{usd(spot.on_demand_usd)}/h each: no Spot price for {spot.zone} at plan time."
        )
    else:
        first = (
            f"**Spot nodes: {spot.nodes_after}** ({kind}), priced at the Spot price in "
            f"{spot.zone}: {usd(spot.spot_usd)}/h each against {usd(spot.on_demand_usd)}/h "
            f"On-Demand ({_percent(spot.saving)})."
        )
    lines = [first]
    if spot.prices.zones:
        lines += ["", "| zone | Spot price | as of | against On-Demand |", "|---|---|---|---|"]
        for zone, (price, as_of) in sorted(spot.prices.zones.items()):
            saving = 1 - price / spot.on_demand_usd if spot.on_demand_usd else None
            lines.append(f"| {zone} | {usd(price)}/h | {as_of} | {_percent(saving)} |")
    lines.append(
        f"<sub>Spot prices: {spot.prices.source}. They move with demand, and EC2 may interrupt "
        "a Spot node with two minutes' notice.</sub>"
    )
    return lines


def guardrails(review: Review) -> list[str]:
    if not review.checks:
        return ["### Guardrails", "", "No guardrails apply."]
    lines = ["### Guardrails", "", "| check | | |", "|---|---|---|"]
    lines += [f"| {c.name} | {c.mark} | {c.reason} |" for c in review.checks]
    return lines


def _fold(text: str, budget: int) -> list[str]:
    opening = ["<details><summary>Full plan</summary>", "", "```"]
    closing = ["```", "", "</details>"]
    if not text:
        return []
    fixed = sum(len(x) + 1 for x in opening + closing)
    room = budget - fixed - 200
    if len(text) <= room:
        return [*opening, text.rstrip("\n"), *closing]
    if room <= 0:
        return [
            f"_The full plan ({len(text):,} characters) does not fit in the comment: see "
            "plan.json, or `skyinfra tf -- show PLANFILE`._"
        ]
    kept = text[: max(room, 0)].rsplit("\n", 1)[0]
    return [
        *opening,
        kept,
        *closing,
        f"_Full plan truncated to fit GitHub's {COMMENT_LIMIT:,}-character limit: "
        f"{len(kept):,} of {len(text):,} characters shown; the rest is in plan.json "
        "(or `skyinfra tf -- show PLANFILE`)._",
    ]


def render(
    review: Review,
    *,
    limit: int = COMMENT_LIMIT,
    apply_hint: str = "",
    sections: Sequence[str] = (),
) -> str:
    """plan.md; ``sections``: a target's own (markdown, after the guardrails), such as aws's
    ladder of instance types and regions."""
    facts = review.facts
    summary = review.summary
    parts: list[list[str]] = [header(review)]
    block = warnings(summary.losses, target=facts.target)
    if block:
        parts.append(block)
    parts.append(topology(summary.before, summary.after))
    parts.append(
        [
            "### Cluster",
            "",
            "```mermaid",
            diagram(
                summary.resources, target=facts.target, instance_type=summary.after.instance_type
            ),
            "```",
        ]
    )
    parts.append(cost(review.cost))
    parts.append(guardrails(review))
    if review.network:
        items = [f"- {line}" for line in review.network if not line.startswith("<sub>")]
        notes = [line for line in review.network if line.startswith("<sub>")]
        parts.append(["### Network", "", *items, *([""] if notes else []), *notes])
    parts += [section.rstrip("\n").split("\n") for section in sections]
    if review.node_access:
        parts.append(
            ["### What the nodes' role may do in S3", "", *(f"- {a}" for a in review.node_access)]
        )
    footer = [
        "<sub>Built from `terraform show -json`. "
        + (apply_hint or "Apply exactly this plan with `skyinfra apply PLANFILE`.")
        + "</sub>"
    ]
    body = "\n\n".join("\n".join(p) for p in parts)
    tail = "\n".join(footer)
    budget = limit - len(body) - len(tail) - 4
    fold = _fold(review.full_plan, budget)
    text = body + ("\n\n" + "\n".join(fold) if fold else "") + "\n\n" + tail + "\n"
    if len(text) > limit:  # a plan with thousands of losses: cut the comment itself
        note = "\n\n_Comment truncated to GitHub's limit; see plan.json._\n"
        text = text[: limit - len(note)] + note
    return text
