"""ladder.py and ladder_spec.py: the rungs in order, each rung check by itself, the ladder
table plan.md shows (golden), and the ladder fields of [aws] with their bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from skyinfra.errors import SpecError
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.targets.aws.accelerators import Accelerators
from skyinfra.targets.aws.ladder import (
    CheckpointPlace,
    Policy,
    Quota,
    Rung,
    RungFacts,
    approved_rungs,
    assess,
    assess_all,
    base_gpus_per_node,
    best_score,
    checkpoint_crossing,
    ladder_markdown,
    ladder_metadata,
    planned_rung,
    reviewed_assessed,
    rung_price,
    rung_problem,
    rungs,
)
from skyinfra.targets.aws.ladder_shell import (
    ladder_of,
    only_rung,
    policy_of,
    rung_facts,
    rung_spec,
)
from skyinfra.targets.aws.ladder_spec import parse_ladder
from skyinfra.targets.aws.spec import AwsSpec

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "ladder"
P_QUOTA = ("L-417A185B", "Running On-Demand P instances")


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


def test_rungs_are_type_major() -> None:
    assert rungs(["p5.48xlarge", "p4d.24xlarge"], ["us-east-1", "us-west-2"]) == (
        Rung("p5.48xlarge", "us-east-1"),
        Rung("p5.48xlarge", "us-west-2"),
        Rung("p4d.24xlarge", "us-east-1"),
        Rung("p4d.24xlarge", "us-west-2"),
    )


def test_another_gpu_count_is_refused_unless_allow_reshape() -> None:
    l4x4 = Rung("g6.12xlarge", "us-east-1")
    kept = Policy(nodes=2, gpus_per_node=8)
    verdict = assess(l4x4, RungFacts(), kept)
    assert verdict.verdict == "dropped"
    assert verdict.reason == (
        "4 GPUs per node where the job has 8 (another world size); set "
        "aws.allow_reshape = true to allow it"
    )
    allowed = Policy(nodes=2, gpus_per_node=8, allow_reshape=True)
    assert assess(l4x4, RungFacts(), allowed).approved


def test_guardrail_failing_rung_is_dropped_with_its_reason() -> None:
    policy = Policy(nodes=2, max_hourly_usd=100)
    dropped = assess(Rung("p5.48xlarge", "us-east-1"), RungFacts(hourly_usd=110.08), policy)
    assert (dropped.verdict, dropped.reason) == (
        "dropped",
        "$110.08/h is above guardrails.max_hourly_usd = $100.00",
    )
    assert assess(Rung("p4d.24xlarge", "us-east-1"), RungFacts(hourly_usd=43.92), policy).approved
    # A rung nobody priced (no lookups) is not dropped by a price it does not have.
    assert assess(Rung("p5.48xlarge", "us-west-2"), RungFacts(), policy).approved
    # One the price table has no price for is: its own review could not show the limit
    # holds and would refuse it, so `up` would stop there rather than climb on.
    unpriced = assess(
        Rung("p5.48xlarge", "eu-north-1"), RungFacts(price_source="not in the price table"), policy
    )
    assert (unpriced.verdict, unpriced.reason) == (
        "dropped",
        "no price for p5.48xlarge in eu-north-1 (not in the price table): cannot show the "
        "cluster stays under guardrails.max_hourly_usd = $100.00",
    )
    # A Spot rung without price history: dropped once its zones were looked up, not before.
    no_history = RungFacts(market="spot", price_source="no Spot price history")
    assert assess(Rung("p5.48xlarge", "us-east-1"), no_history, policy).approved
    looked_up = RungFacts(
        market="spot", price_source="no Spot price history", zones=("us-east-1a",)
    )
    assert assess(Rung("p5.48xlarge", "us-east-1"), looked_up, policy).verdict == "dropped"


def test_quota_headroom_skips_naming_the_quota() -> None:
    quota = Quota(*P_QUOTA, limit=384, in_use=192)
    skipped = assess(Rung("p5.48xlarge", "us-east-1"), RungFacts(quota=quota), Policy(nodes=2))
    assert skipped.verdict == "skipped"
    assert skipped.reason == (
        "quota Running On-Demand P instances (L-417A185B) has 192 vCPUs free in us-east-1 "
        "(384 less 192 in use), 384 needed: request an increase of L-417A185B in the Service "
        "Quotas console"
    )
    assert assess(
        Rung("p5.48xlarge", "us-east-1"), RungFacts(quota=quota), Policy(nodes=1)
    ).approved


def test_min_gpu_memory_and_offer_checks() -> None:
    policy = Policy(nodes=1, min_gpu_memory_gib=80)
    low = assess(Rung("p4d.24xlarge", "us-east-1"), RungFacts(), policy)
    assert low.reason == "40 GiB per GPU, under aws.min_gpu_memory_gib = 80"
    none = assess(Rung("p5.48xlarge", "sa-east-1"), RungFacts(zones=()), Policy(nodes=1))
    assert (none.verdict, none.reason) == ("skipped", "sa-east-1 offers p5.48xlarge in no zone")
    # An image that does not resolve in the rung's region: its launch would fail.
    lost = RungFacts(image_problem="ami-0123456789abcdef0 is not an image in eu-north-1")
    imageless = assess(Rung("p5.48xlarge", "eu-north-1"), lost, Policy(nodes=1))
    assert (imageless.verdict, imageless.reason) == (
        "skipped",
        "no image in eu-north-1: ami-0123456789abcdef0 is not an image in eu-north-1",
    )


def test_base_gpus_per_node() -> None:
    ladder = rungs(["g6.12xlarge", "p5.48xlarge"], ["us-east-1"])
    assert base_gpus_per_node(ladder, None) == 4
    assert base_gpus_per_node(ladder, 8) == 8
    assert base_gpus_per_node(rungs(["t3.micro"], ["us-east-1"]), None) is None


def _three_rung_ladder() -> tuple[Any, Policy]:
    ladder = rungs(["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "g6e.48xlarge"], ["us-east-1"])
    ladder += (Rung("p5.48xlarge", "us-west-2"), Rung("g6.12xlarge", "us-west-2"))
    quota = Quota(*P_QUOTA, limit=2000, in_use=0)
    facts = {
        Rung("p5.48xlarge", "us-east-1"): RungFacts(
            hourly_usd=110.08,
            price_source="price table",
            quota=quota,
            zones=("us-east-1a",),
            image="ami-0123456789abcdef0",
        ),
        Rung("p5en.48xlarge", "us-east-1"): RungFacts(quota=quota, image="ami-0123456789abcdef0"),
        Rung("p4d.24xlarge", "us-east-1"): RungFacts(
            hourly_usd=43.92, quota=Quota(*P_QUOTA, limit=192, in_use=96)
        ),
        Rung("g6e.48xlarge", "us-east-1"): RungFacts(hourly_usd=300.0),
        Rung("p5.48xlarge", "us-west-2"): RungFacts(
            hourly_usd=35.2,
            price_source="Spot price history (highest of 3 zones) and price table",
            market="spot",
            placement_score=7,
            image="ami-0fedcba9876543210",
        ),
        Rung("g6.12xlarge", "us-west-2"): RungFacts(market="spot"),
    }
    policy = Policy(nodes=2, gpus_per_node=8, max_hourly_usd=200, lifetime_hours=24)
    return assess_all(ladder, facts, policy), policy


def test_ladder_table_golden() -> None:
    assessed, policy = _three_rung_ladder()
    _golden("ladder.md", ladder_markdown(assessed, policy))


def test_metadata_keeps_the_approved_rungs_in_order() -> None:
    assessed, _ = _three_rung_ladder()
    approved = approved_rungs(ladder_metadata(assessed))
    assert approved == (
        Rung("p5.48xlarge", "us-east-1"),
        Rung("p5en.48xlarge", "us-east-1"),
        Rung("p5.48xlarge", "us-west-2"),
    )
    assert rung_problem(Rung("p5.48xlarge", "us-west-2"), approved) is None
    assert rung_problem(Rung("p4d.24xlarge", "us-east-1"), approved) == (
        "p4d.24xlarge in us-east-1 is not a rung the reviewed plan approved (p5.48xlarge in "
        "us-east-1, p5en.48xlarge in us-east-1, p5.48xlarge in us-west-2)"
    )


def test_reviewed_metadata_gives_back_each_rung_and_its_verdict() -> None:
    assessed, _ = _three_rung_ladder()
    again = reviewed_assessed(json.loads(json.dumps(ladder_metadata(assessed))))
    assert [(a.rung, a.verdict, a.reason, a.facts.zones) for a in again] == [
        (a.rung, a.verdict, a.reason, a.facts.zones) for a in assessed
    ]
    assert again[0].facts.zones == ("us-east-1a",)  # apply PLANFILE walks the planned rung's


def test_a_rung_is_priced_at_each_nodes_market() -> None:
    on_demand = ["on-demand", "on-demand"]
    assert rung_price(on_demand, 98.32, None) == (196.64, "price table")
    assert rung_price(on_demand, None, None) == (None, "not in the price table")
    # A Spot node at the highest zone's price (up may land in any zone), the head On-Demand.
    zones = {"us-west-2a": 30.0, "us-west-2b": 41.5}
    assert rung_price(["on-demand", "spot", "spot"], 98.32, zones) == (
        98.32 + 2 * 41.5,
        "Spot price history (highest of 2 zones) and price table",
    )
    assert rung_price(["spot"], None, {"us-west-2a": 30.0}) == (
        30.0,
        "Spot price history (highest of 1 zone)",
    )
    assert rung_price(["spot"], 98.32, {}) == (None, "no Spot price history")


def test_the_spot_placement_score_is_the_best_zones() -> None:
    assert best_score({"us-west-2a": 3, "us-west-2b": 9}) == 9
    assert best_score({}) is None
    assert best_score("InvalidAction: not implemented") is None
    # No answer for a Spot rung says so; an On-Demand rung has none to give.
    spot = assess(Rung("p5.48xlarge", "us-west-2"), RungFacts(market="spot"), Policy(nodes=1))
    assert "| spot | unpriced | - | no limit | not checked | no score |" in ladder_markdown(
        [spot], Policy(nodes=1)
    )


def test_a_rung_in_another_region_than_the_checkpoints_says_so() -> None:
    place = CheckpointPlace("s3://team-ckpt/llm", "us-east-1", 12_345_000_000)
    east, west = Rung("p5.48xlarge", "us-east-1"), Rung("p5.48xlarge", "us-west-2")
    assert checkpoint_crossing(east, place) is None
    assert checkpoint_crossing(west, None) is None
    note = checkpoint_crossing(west, place)
    assert note == (
        "restoring the checkpoints (s3://team-ckpt/llm, in us-east-1) crosses regions: 12.3 GB"
    )
    assessed = [
        assess(east, RungFacts(), Policy(nodes=1)),
        assess(west, RungFacts(checkpoint_note=note), Policy(nodes=1)),
    ]
    assert ladder_markdown(assessed, Policy(nodes=1)).endswith(
        f"\n\n- rung 2 ({west.label}): {note}\n"
    )
    assert ladder_metadata(assessed)["rungs"][1]["note"] == note
    # A private network without NAT: its S3 gateway endpoint cannot reach another region.
    assert checkpoint_crossing(west, place, endpoint_only=True) == (
        f"{note}; without a NAT gateway its nodes cannot reach them (an S3 gateway endpoint "
        "reaches buckets in its own region only): set aws.nat = true, or name a bucket in "
        "us-west-2 with aws.checkpoints_url"
    )
    assert checkpoint_crossing(east, place, endpoint_only=True) is None


def test_the_default_checkpoint_bucket_is_the_ladders_first_regions_on_every_rung() -> None:
    """Without aws.checkpoints_url every rung keeps its checkpoints in the default bucket of
    the ladder's first region (a job resumed on a rung in another region finds them there):
    the spec on any rung, and the spec `plan` renders (its ladder lists dropped), say so."""
    aws = {"instance_types": ["p5.48xlarge"], "regions": ["us-west-2", "us-east-1"], **CIDRS}
    spec = validate_spec({**BASE, "aws": aws})
    for rung in ladder_of(spec):
        assert rung_spec(spec, rung).section_as(AwsSpec).default_checkpoints_region == "us-west-2"
        on = only_rung(spec, rung)
        assert on.section_as(AwsSpec).default_checkpoints_region == "us-west-2"
        assert "checkpoints_region" not in on.section_as(AwsSpec).to_dict()  # not a key
    one = validate_spec(
        {**BASE, "aws": {"region": "eu-west-1", "instance_type": "g5.xlarge", **CIDRS}}
    )
    assert one.section_as(AwsSpec).default_checkpoints_region == "eu-west-1"


# ---------------------------------------------------------------- the [aws] ladder fields


def _ladder(raw: dict[str, Any]) -> Any:
    return parse_ladder(raw, raw.get("instance_type"), raw.get("region"))


def test_one_rung_spellings_stay_one_rung() -> None:
    fields = _ladder({"instance_type": "g5.xlarge", "region": "us-east-1"})
    assert (fields.instance_types, fields.regions) == (("g5.xlarge",), ("us-east-1",))
    assert not fields.types_listed and not fields.regions_listed


def test_lists_and_accelerators() -> None:
    fields = _ladder(
        {
            "instance_types": ["p5.48xlarge", "p5.4xlarge"],
            "regions": ["us-east-1", "us-west-2"],
        }
    )
    assert (fields.instance_types, fields.regions) == (
        ("p5.48xlarge", "p5.4xlarge"),
        ("us-east-1", "us-west-2"),
    )
    fields = _ladder({"accelerators": "A100:8", "regions": ["us-west-2"], "allow_reshape": True})
    assert fields.instance_types == ("p4d.24xlarge", "p4de.24xlarge")
    assert (fields.accelerators, fields.allow_reshape) == (Accelerators("A100", 8), True)
    assert fields.types_listed and fields.regions_listed
    fields = _ladder({"accelerators": "A100:8", "min_gpu_memory_gib": 80, "region": "us-east-1"})
    assert fields.instance_types == ("p4de.24xlarge",)


@pytest.mark.parametrize(
    ("raw", "field", "expected"),
    [
        ({"accelerators": "H100:3", "region": "us-east-1"}, "aws.accelerators", '"H100:8"'),
        ({"accelerators": "Z80:8", "region": "us-east-1"}, "aws.accelerators", "H100, H200"),
        (
            {"instance_type": "g5.xlarge", "regions": ["us-east-1", "moon-1"]},
            "aws.regions[1]",
            "an AWS region such as",
        ),
        ({"instance_type": "g5.xlarge", "region": "us-east-9"}, "aws.region", "us-east-1"),
        ({"instance_types": [], "region": "us-east-1"}, "aws.instance_types", "non-empty list"),
        (
            {"instance_type": "g5.xlarge", "instance_types": ["g5.xlarge"], "region": "us-east-1"},
            "aws.instance_types",
            "either aws.instance_type (one) or aws.instance_types",
        ),
        (
            {"instance_type": "g5.xlarge", "region": "us-east-1", "regions": ["us-east-1"]},
            "aws.regions",
            "either aws.region (one) or aws.regions",
        ),
        (
            {
                "accelerators": "H100:8",
                "instance_types": ["p5.48xlarge", "p4d.24xlarge"],
                "region": "us-east-1",
            },
            "aws.instance_types[1]",
            "a type with H100:8 per node (p5.48xlarge); p4d.24xlarge has A100:8",
        ),
        (
            {"accelerators": "A100:8", "min_gpu_memory_gib": 100, "region": "us-east-1"},
            "aws.min_gpu_memory_gib",
            "no type with A100:8 has that much",
        ),
        (
            {
                "instance_type": "g5.xlarge",
                "regions": ["us-east-1", "us-west-2"],
                "zones": ["us-east-1a"],
            },
            "aws.zones",
            "absent with several aws.regions",
        ),
        (
            {"instance_type": "g5.xlarge", "region": "us-east-1", "allow_reshape": "yes"},
            "aws.allow_reshape",
            "true or false",
        ),
    ],
)
def test_bad_ladder_input_names_the_field(raw: dict[str, Any], field: str, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        _ladder(raw)
    assert err.value.field == field
    assert expected in str(err.value)


# ---------------------------------------------------------------- the spec holds the ladder

BASE = {"name": "g", "provider": "aws", "nodes": 2}
CIDRS = {"ssh_cidrs": ["203.0.113.4/32"]}


@pytest.mark.parametrize(
    ("aws", "types", "regions"),
    [
        ({"instance_type": "g5.xlarge", "region": "us-east-1"}, ("g5.xlarge",), ("us-east-1",)),
        (
            {
                "instance_types": ["p5en.48xlarge", "p5.48xlarge"],
                "regions": ["us-west-2", "us-east-1"],
            },
            ("p5en.48xlarge", "p5.48xlarge"),
            ("us-west-2", "us-east-1"),
        ),
        (
            {"accelerators": "A100:8", "region": "us-east-1"},
            ("p4d.24xlarge", "p4de.24xlarge"),
            ("us-east-1",),
        ),
        (
            {"accelerators": "H100:8", "instance_type": "p5.48xlarge", "regions": ["us-east-2"]},
            ("p5.48xlarge",),
            ("us-east-2",),
        ),
    ],
)
def test_spec_keeps_the_ladder_and_round_trips(
    aws: dict[str, Any], types: tuple[str, ...], regions: tuple[str, ...]
) -> None:
    spec = validate_spec({**BASE, "aws": {**aws, **CIDRS}})
    section = spec.section_as(AwsSpec)
    assert (section.ladder_types, section.ladder_regions) == (types, regions)
    # The one-rung spellings hold the first rung: what the zone failover and render read.
    assert (section.instance_type, section.region) == (types[0], regions[0])
    again = ClusterSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec


def test_spec_names_every_ladder_problem() -> None:
    with pytest.raises(SpecError) as err:
        validate_spec(
            {**BASE, "aws": {"accelerators": "H100:3", "regions": ["us-east-1", "mars-1"], **CIDRS}}
        )
    fields = [p.field for p in getattr(err.value, "problems", [err.value])]
    assert "aws.accelerators" in fields
    assert "aws.instance_type" not in fields  # accelerators stand for it
    assert "aws.region" not in fields  # regions stand for it


def test_a_plan_is_on_the_rung_it_says_else_the_specs_first() -> None:
    """What a rung's Spot check is priced at (issue 44): the plan's own type and region."""
    first = Rung("p5en.48xlarge", "us-east-1")
    assert planned_rung(first, "p5.48xlarge", "us-west-2") == Rung("p5.48xlarge", "us-west-2")
    assert planned_rung(first, None, "us-west-2") == Rung("p5en.48xlarge", "us-west-2")
    assert planned_rung(first, None, None) == first


def test_a_rungs_price_counts_its_private_network() -> None:
    """guardrails.max_hourly_usd holds each rung to the cluster's price with its private
    network's bastion and NAT gateway (us-east-1's network prices in us-west-2, as the plan's
    total), not to its nodes' alone."""
    aws = {"instance_types": ["g5.xlarge"], "regions": ["us-east-1", "us-west-2"], **CIDRS}
    nodes_only = 2 * 1.006
    bastion, volume, nat = 0.0104, 8 * 0.08 / 730, 0.045
    limit = round(nodes_only + (bastion + nat) / 2, 4)  # the nodes pass it, not the network
    rails = {"guardrails": {"max_hourly_usd": limit, "allow_internet_egress": True}}
    public = validate_spec({**BASE, **rails, "aws": aws})
    private = validate_spec({**BASE, **rails, "aws": {**aws, "network": "private", "nat": True}})
    for rung in ladder_of(private):
        facts = rung_facts(private, rung, checks=False)
        assert facts.hourly_usd == pytest.approx(nodes_only + bastion + volume + nat)
        borrowed = "" if rung.region == "us-east-1" else " (us-east-1's price)"
        assert facts.price_source == (
            "price table, and the private network: bastion `t3.micro` $0.0104/h, its 8 GB "
            f"root volume $0.0009/h{borrowed}, NAT gateway $0.0450/h{borrowed}"
        )
        assert assess(rung, facts, policy_of(private)).reason == (
            f"${facts.hourly_usd:,.2f}/h is above guardrails.max_hourly_usd = ${limit:,.2f}"
        )
        kept = rung_facts(public, rung, checks=False)
        assert kept.hourly_usd == pytest.approx(nodes_only)
        assert kept.price_source == "price table"
        assert assess(rung, kept, policy_of(public)).approved
