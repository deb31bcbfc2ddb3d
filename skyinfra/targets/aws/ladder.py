"""The ladder: the (instance type, region) rungs `up` may try, in order, and why a rung is out.

Rungs are type-major: every region of the first type, then every region of the second, and
so on (within a rung `up` walks the region's zones as before). Whether a rung stays is
decided here by pure functions of the rung and what the lookups found (RungFacts): another
GPU count per node than the first rung's without ``allow_reshape``, less GPU memory than
``min_gpu_memory_gib``, an hourly price above ``guardrails.max_hourly_usd`` drop it; too
little quota headroom skips it. The lookups themselves (prices, quotas, images) are the
shell's (preflight.py); plan.md shows :func:`ladder_markdown` and the plan's metadata keeps
:func:`ladder_metadata`, from which ``up``/``apply`` take the approved rungs and no other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from skyinfra.targets.aws.accelerators import GpuType, gpu_type

# Why a rung is not tried: "dropped" (it breaks a rule of the spec: reshape, GPU memory, a
# guardrail) or "skipped" (it could not hold the cluster now: quota, not offered).
Verdict = Literal["approved", "dropped", "skipped"]
LADDER_SCHEMA = 1


@dataclass(frozen=True)
class Rung:
    """One instance type in one region."""

    instance_type: str
    region: str

    @property
    def gpu(self) -> GpuType | None:
        return gpu_type(self.instance_type)

    @property
    def label(self) -> str:
        return f"{self.instance_type} in {self.region}"


def planned_rung(spec_rung: Rung, instance_type: str | None, region: str | None) -> Rung:
    """The rung a plan is on: its own instance type and region where the plan says them (a
    ladder's later rung, planned while the spec names the first), else the spec's."""
    return Rung(instance_type or spec_rung.instance_type, region or spec_rung.region)


def rungs(instance_types: Sequence[str], regions: Sequence[str]) -> tuple[Rung, ...]:
    """Type x region, type-major: the order `up` tries them."""
    return tuple(Rung(t, r) for t in instance_types for r in regions)


@dataclass(frozen=True)
class Quota:
    """A vCPU quota as Service Quotas reports it, and the vCPUs already running under it."""

    code: str
    title: str
    limit: float
    in_use: int

    @property
    def headroom(self) -> float:
        return max(self.limit - self.in_use, 0)


@dataclass(frozen=True)
class RungFacts:
    """What the lookups found for one rung (None: not looked up, or no answer)."""

    # The cluster's price per hour (every node) in USD.
    hourly_usd: float | None = None
    market: str = "on-demand"
    quota: Quota | None = None
    # Zones of the region offering the type (None: not looked up).
    zones: tuple[str, ...] | None = None
    # The image the nodes boot in this region (None: not looked up), or why it did not resolve.
    image: str | None = None
    image_problem: str | None = None
    # EC2's Spot placement score (1-10) where asked and answered.
    placement_score: int | None = None
    # Where hourly_usd came from ("price table", "Spot price history ..."), or why none.
    price_source: str | None = None
    # The checkpoints are in another region than the rung's (checkpoint_crossing).
    checkpoint_note: str | None = None


@dataclass(frozen=True)
class Policy:
    """The spec's rules a rung is held to."""

    nodes: int
    # GPUs per node the job was written for (accelerators' count, else the first rung's).
    gpus_per_node: int | None = None
    allow_reshape: bool = False
    min_gpu_memory_gib: float | None = None
    max_hourly_usd: float | None = None
    lifetime_hours: float | None = None


# ---------------------------------------------------------------- the rung's price


# rung_price's sources when a price it needs is missing.
NOT_IN_TABLE = "not in the price table"
NO_SPOT_HISTORY = "no Spot price history"


def rung_price(
    markets: Sequence[str],
    on_demand_usd: float | None,
    spot_usd_by_zone: Mapping[str, float] | None,
) -> tuple[float | None, str]:
    """The cluster's hourly price on a rung and where it came from: each node at its market's
    price (``markets``: one per node), a Spot node at the highest price among the rung's
    zones (`up` may land in any of them, and the guardrail must hold in each); None when a
    price it needs is missing."""
    spot_nodes = sum(1 for m in markets if m == "spot")
    on_demand_nodes = len(markets) - spot_nodes
    if on_demand_usd is None and on_demand_nodes:
        return None, NOT_IN_TABLE
    on_demand_total = (on_demand_usd or 0.0) * on_demand_nodes
    if not spot_nodes:
        return on_demand_total, "price table"
    if not spot_usd_by_zone:
        return None, NO_SPOT_HISTORY
    spot = max(spot_usd_by_zone.values())
    zones = len(spot_usd_by_zone)
    source = f"Spot price history (highest of {zones} zone{'s' if zones > 1 else ''})"
    if on_demand_nodes:
        source += " and price table"
    return spot * spot_nodes + on_demand_total, source


def best_score(scores: Mapping[str, int] | str) -> int | None:
    """The rung's Spot placement score: its best zone's (placement.spot_placement_scores'
    zone -> score), None when EC2 gave none or said why not (a reason)."""
    if isinstance(scores, str) or not scores:
        return None
    return max(scores.values())


@dataclass(frozen=True)
class CheckpointPlace:
    """Where ``aws.checkpoints_url`` keeps the checkpoints: its bucket's region, and how many
    bytes are under its prefix (None: not counted)."""

    url: str
    region: str
    size_bytes: int | None = None


def checkpoint_crossing(
    rung: Rung, place: CheckpointPlace | None, *, endpoint_only: bool = False
) -> str | None:
    """The plan's note for a rung in another region than the checkpoints: a resumed job
    restores them across regions (slower, and S3 charges the transfer). ``endpoint_only``: a
    private network without NAT, whose S3 gateway endpoint reaches its own region's buckets
    only, so that its nodes could not reach them at all."""
    if place is None or place.region == rung.region:
        return None
    size = "" if not place.size_bytes else f": {place.size_bytes / 1e9:,.1f} GB"
    note = f"restoring the checkpoints ({place.url}, in {place.region}) crosses regions{size}"
    if endpoint_only:
        note += (
            f"; without a NAT gateway its nodes cannot reach them (an S3 gateway endpoint "
            f"reaches buckets in its own region only): set aws.nat = true, or name a bucket "
            f"in {rung.region} with aws.checkpoints_url"
        )
    return note


# ---------------------------------------------------------------- the checks, one per rule


def reshape_refusal(rung: Rung, policy: Policy) -> str | None:
    """Another GPU count per node changes the processes per node and the device mesh: a
    resumed job would meet another world size. Refused unless ``allow_reshape``."""
    gpu = rung.gpu
    if policy.gpus_per_node is None or gpu is None or gpu.gpu_count == policy.gpus_per_node:
        return None
    if policy.allow_reshape:
        return None
    return (
        f"{gpu.gpu_count} GPUs per node where the job has {policy.gpus_per_node} (another "
        "world size); set aws.allow_reshape = true to allow it"
    )


def memory_refusal(rung: Rung, policy: Policy) -> str | None:
    """A GPU with less memory than ``min_gpu_memory_gib``."""
    gpu = rung.gpu
    if policy.min_gpu_memory_gib is None or gpu is None:
        return None
    if gpu.gpu_memory_gib >= policy.min_gpu_memory_gib:
        return None
    return (
        f"{gpu.gpu_memory_gib:.0f} GiB per GPU, under aws.min_gpu_memory_gib = "
        f"{policy.min_gpu_memory_gib:g}"
    )


def guardrail_refusal(rung: Rung, facts: RungFacts, policy: Policy) -> str | None:
    """The cluster's hourly price above ``guardrails.max_hourly_usd``; or no price where one
    was looked for (the price table, or the Spot history once the zones were looked up): the
    rung's own review could not show the limit holds and would refuse it, so `up` would stop
    there instead of climbing on."""
    if policy.max_hourly_usd is None:
        return None
    limit = f"guardrails.max_hourly_usd = ${policy.max_hourly_usd:,.2f}"
    if facts.hourly_usd is None:
        looked_up = facts.price_source == NOT_IN_TABLE or (
            facts.price_source == NO_SPOT_HISTORY and facts.zones is not None
        )
        if not looked_up:
            return None
        return (
            f"no price for {rung.instance_type} in {rung.region} ({facts.price_source}): "
            f"cannot show the cluster stays under {limit}"
        )
    if facts.hourly_usd <= policy.max_hourly_usd:
        return None
    return f"${facts.hourly_usd:,.2f}/h is above {limit}"


def vcpus_needed(rung: Rung, nodes: int) -> int | None:
    gpu = rung.gpu
    return None if gpu is None else gpu.vcpus * nodes


def quota_refusal(rung: Rung, facts: RungFacts, policy: Policy) -> str | None:
    """Too little quota headroom for the cluster: skipped before any launch, naming the quota
    and how to raise it."""
    quota = facts.quota
    needed = vcpus_needed(rung, policy.nodes)
    if quota is None or needed is None or needed <= quota.headroom:
        return None
    return (
        f"quota {quota.title} ({quota.code}) has {quota.headroom:g} vCPUs free in "
        f"{rung.region} ({quota.limit:g} less {quota.in_use} in use), {needed} needed: request "
        f"an increase of {quota.code} in the Service Quotas console"
    )


def image_refusal(rung: Rung, facts: RungFacts) -> str | None:
    """An image that does not resolve in the rung's region: its launch would fail."""
    if facts.image_problem is None:
        return None
    return f"no image in {rung.region}: {facts.image_problem}"


def offer_refusal(rung: Rung, facts: RungFacts) -> str | None:
    if facts.zones is None or facts.zones:
        return None
    return f"{rung.region} offers {rung.instance_type} in no zone"


@dataclass(frozen=True)
class Assessed:
    """A rung, what was found of it, and whether `up` may take it (reason when not)."""

    rung: Rung
    facts: RungFacts
    verdict: Verdict
    reason: str | None = None

    @property
    def approved(self) -> bool:
        return self.verdict == "approved"


def assess(rung: Rung, facts: RungFacts, policy: Policy) -> Assessed:
    """The rung's verdict: the first rule it breaks drops it; else too little room skips it."""
    for reason in (
        reshape_refusal(rung, policy),
        memory_refusal(rung, policy),
        guardrail_refusal(rung, facts, policy),
    ):
        if reason is not None:
            return Assessed(rung, facts, "dropped", reason)
    for reason in (
        offer_refusal(rung, facts),
        quota_refusal(rung, facts, policy),
        image_refusal(rung, facts),
    ):
        if reason is not None:
            return Assessed(rung, facts, "skipped", reason)
    return Assessed(rung, facts, "approved")


def assess_all(
    ladder: Sequence[Rung], facts: Mapping[Rung, RungFacts], policy: Policy
) -> tuple[Assessed, ...]:
    return tuple(assess(rung, facts.get(rung, RungFacts()), policy) for rung in ladder)


def base_gpus_per_node(ladder: Sequence[Rung], accelerators_count: int | None) -> int | None:
    """The GPUs per node the job is written for: the accelerators' count, else the first
    rung's (None: the first rung has no GPUs skyinfra knows)."""
    if accelerators_count is not None:
        return accelerators_count
    first = ladder[0].gpu if ladder else None
    return None if first is None else first.gpu_count


# ---------------------------------------------------------------- what the plan shows


def _money(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:,.2f}"


def _score(facts: RungFacts) -> str:
    if facts.placement_score is not None:
        return str(facts.placement_score)
    return "no score" if facts.market == "spot" else "-"


def _zones(facts: RungFacts) -> str:
    if facts.zones is None:
        return "not looked up"
    return ", ".join(facts.zones) or "none"


def _cells(a: Assessed, index: int, policy: Policy) -> tuple[str, ...]:
    gpu = a.rung.gpu
    facts = a.facts
    lifetime = (
        None
        if facts.hourly_usd is None or policy.lifetime_hours is None
        else facts.hourly_usd * policy.lifetime_hours
    )
    quota = (
        "not checked"
        if facts.quota is None
        else f"{facts.quota.headroom:g} vCPUs free ({facts.quota.code})"
    )
    status = "approved" if a.approved else f"{a.verdict}: {a.reason}"
    return (
        str(index),
        a.rung.instance_type,
        a.rung.region,
        _zones(facts),
        f"{gpu.gpu_count} x {gpu.gpu_name}" if gpu else "none known",
        f"{gpu.gpu_memory_gib:.0f} GiB" if gpu else "-",
        ("yes" if gpu.efa else "no") if gpu else "-",
        facts.market,
        _money(facts.hourly_usd),
        facts.price_source or "-",
        "no limit" if policy.lifetime_hours is None else _money(lifetime),
        quota,
        _score(facts),
        facts.image or ("not found" if facts.image_problem else "not resolved"),
        status,
    )


HEADER = (
    "#",
    "instance type",
    "region",
    "zones",
    "GPUs per node",
    "memory per GPU",
    "EFA",
    "market",
    "cluster $/h",
    "priced from",
    "lifetime $",
    "quota headroom",
    "Spot score",
    "image",
    "status",
)


def ladder_markdown(assessed: Sequence[Assessed], policy: Policy) -> str:
    """The ladder section of plan.md: every rung in the order `up` tries them, the dropped
    and skipped ones with their reason."""
    approved = sum(1 for a in assessed if a.approved)
    lines = [
        "### Ladder",
        "",
        f"`up` tries the approved rungs in this order ({approved} of {len(assessed)}), the "
        "zones of each region in turn, and takes the first with room for all "
        f"{policy.nodes} nodes; a refused rung is destroyed before the next.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
    ]
    for index, a in enumerate(assessed, 1):
        lines.append("| " + " | ".join(_cells(a, index, policy)) + " |")
    notes = [
        f"- rung {index} ({a.rung.label}): {a.facts.checkpoint_note}"
        for index, a in enumerate(assessed, 1)
        if a.approved and a.facts.checkpoint_note
    ]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def ladder_metadata(assessed: Sequence[Assessed]) -> dict[str, Any]:
    """The ladder as the plan's metadata keeps it: `up`/`apply` may take these approved rungs
    and no other."""
    return {
        "schema": LADDER_SCHEMA,
        "rungs": [
            {
                "instance_type": a.rung.instance_type,
                "region": a.rung.region,
                "verdict": a.verdict,
                "reason": a.reason,
                "hourly_usd": a.facts.hourly_usd,
                "price_source": a.facts.price_source,
                "placement_score": a.facts.placement_score,
                # The zones offering the type: `apply PLANFILE` walks the planned rung's.
                "zones": None if a.facts.zones is None else list(a.facts.zones),
                **({"note": a.facts.checkpoint_note} if a.facts.checkpoint_note else {}),
            }
            for a in assessed
        ],
    }


def approved_rungs(metadata: Mapping[str, Any]) -> tuple[Rung, ...]:
    """The rungs a reviewed plan approved, in order."""
    return tuple(
        Rung(str(r["instance_type"]), str(r["region"]))
        for r in metadata.get("rungs") or []
        if r.get("verdict") == "approved"
    )


def reviewed_assessed(metadata: Mapping[str, Any]) -> tuple[Assessed, ...]:
    """The ladder as a reviewed plan kept it, every rung with its verdict: `apply PLANFILE`
    climbs these approved rungs and no other (whatever the lookups would say now)."""
    return tuple(
        Assessed(
            Rung(str(r["instance_type"]), str(r["region"])),
            RungFacts(
                hourly_usd=r.get("hourly_usd"),
                zones=None if r.get("zones") is None else tuple(map(str, r["zones"])),
            ),
            r.get("verdict") if r.get("verdict") in ("approved", "dropped") else "skipped",
            r.get("reason"),
        )
        for r in metadata.get("rungs") or []
    )


def rung_problem(rung: Rung, approved: Sequence[Rung]) -> str | None:
    """Why ``up`` may not take ``rung`` under a reviewed plan (None: it may)."""
    if rung in approved:
        return None
    shown = ", ".join(r.label for r in approved) or "none"
    return f"{rung.label} is not a rung the reviewed plan approved ({shown})"
