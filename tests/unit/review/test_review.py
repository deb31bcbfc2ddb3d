"""The pure parts of the review on hand-made plan JSON: reasons and before -> after values of
a replaced node, counts, the cost arithmetic, the guardrails' rules and the comment's size."""

from __future__ import annotations

from typing import Any

import pytest

from skyinfra.errors import SpecError
from skyinfra.review import markdown
from skyinfra.review.cost import PriceTable, SpotPlan, SpotPrices, estimate
from skyinfra.review.guardrails import Guardrails, fixed_checks, parse_guardrails, policy_checks
from skyinfra.review.mermaid import diagram
from skyinfra.review.report import ClusterFacts, build_review
from skyinfra.review.summary import Resource, count_changes, losses, summarize

NODE = 'module.nodes.aws_instance.this["node-{}"]'
TABLE = PriceTable("test table", "2026-11-23", {"us-east-1": {"p5.48xlarge": 55.04}})


def instance(
    index: int, actions: list[str], before: Any, after: Any, **extra: Any
) -> dict[str, Any]:
    return {
        "address": NODE.format(index),
        "type": "aws_instance",
        "mode": "managed",
        "change": {"actions": actions, "before": before, "after": after, **extra},
    }


def node(ami: str, kind: str = "p5.48xlarge", tokens: str = "required") -> dict[str, Any]:
    return {
        "ami": ami,
        "instance_type": kind,
        "availability_zone": "us-east-1a",
        "metadata_options": [{"http_tokens": tokens}],
        "root_block_device": [{"encrypted": True}],
    }


def replaced_plan() -> dict[str, Any]:
    return {
        "terraform_version": "1.15.5",
        "resource_changes": [
            {
                "address": "module.security.aws_security_group.this",
                "type": "aws_security_group",
                "change": {"actions": ["delete", "create"], "before": {}, "after": {}},
                "action_reason": "replace_because_tainted",
            },
            instance(
                0,
                ["delete", "create"],
                node("ami-0aaaaaaaaaaaaaaaa"),
                node("ami-0bbbbbbbbbbbbbbbb"),
                replace_paths=[["ami"]],
                after_unknown={},
            )
            | {"action_reason": "replace_because_cannot_update"},
            instance(1, ["no-op"], node("ami-0aaaaaaaaaaaaaaaa"), node("ami-0aaaaaaaaaaaaaaaa")),
        ],
        "output_changes": {
            "head_addr": {"actions": ["no-op"], "before": "10.42.0.10", "after": "10.42.0.10"},
            "head_port": {"actions": ["no-op"], "before": 29500, "after": 29500},
        },
    }


def test_a_replaced_gpu_node_comes_first_with_reason_and_values() -> None:
    found = losses(replaced_plan())
    assert [x.address for x in found] == [NODE.format(0), "module.security.aws_security_group.this"]
    first = found[0]
    assert (first.action, first.node, first.cause) == (
        "replace",
        True,
        "replace_because_cannot_update",
    )
    assert first.replace_paths == ("ami",)
    assert [(d.path, d.before, d.after) for d in first.diffs] == [
        ("ami", "ami-0aaaaaaaaaaaaaaaa", "ami-0bbbbbbbbbbbbbbbb")
    ]
    assert count_changes(replaced_plan()).line == "Plan: 2 to add, 0 to change, 2 to destroy."
    lines = markdown.terminal(found, target="aws")
    assert lines[0].startswith("1 GPU node(s) will be REPLACED")
    assert "    ami: ami-0aaaaaaaaaaaaaaaa -> ami-0bbbbbbbbbbbbbbbb" in lines


def test_topology_and_diagram_mark_what_changes() -> None:
    summary = summarize(replaced_plan(), target="aws")
    assert (summary.after.nodes, summary.after.instance_type) == (2, "p5.48xlarge")
    assert summary.after.coordinator == "10.42.0.10:29500"
    text = diagram(summary.resources, target="aws", instance_type="p5.48xlarge")
    assert 'node_0["node-0 p5.48xlarge<br/>± replaced"]:::replace' in text
    assert 'node_1["node-1 p5.48xlarge"]' in text
    assert 'vpc["VPC (existing)"]' in text


def test_the_diagram_draws_a_private_networks_bastion_as_the_way_in() -> None:
    made = [
        Resource("module.bastion[0].aws_instance.this", "aws_instance", "create"),
        Resource("module.bastion[0].aws_security_group.this", "aws_security_group", "update"),
        Resource("module.network.aws_subnet.public[0]", "aws_subnet", "update"),
        Resource("module.network.aws_subnet.this[0]", "aws_subnet", "no-op"),
        Resource("module.security.aws_security_group.this", "aws_security_group", "no-op"),
        Resource(NODE.format(0), "aws_instance", "no-op"),
    ]
    lines = diagram(made, target="aws", instance_type="p5.48xlarge").splitlines()
    assert '  bastion["bastion: the only public host, the way in<br/>+ new"]:::create' in lines
    assert [line for line in lines if "bastion" in line and "-->" in line] == [
        "  vpc --> bastion",
        "  bastion -->|SSH| sg",
    ]
    # The boxes above the nodes are the nodes' subnet and group, not the bastion's.
    assert '  subnet["subnet"]' in lines and '  sg["security group"]' in lines
    assert not any("bastion" in line for line in diagram(made[3:], target="aws").splitlines())


def test_cost_per_hour_and_over_the_lifetime() -> None:
    cost = estimate(
        target="aws",
        region="us-east-1",
        before=(2, "p5.48xlarge"),
        after=(4, "p5.48xlarge"),
        lifetime_hours=8,
        idle_shutdown_minutes=30,
        table=TABLE,
    )
    assert (cost.before_hourly, cost.after_hourly, cost.delta_hourly) == (110.08, 220.16, 110.08)
    assert cost.lifetime_cost == pytest.approx(1761.28)
    assert cost.idle_cost == pytest.approx(110.08)
    unknown = estimate(
        target="aws",
        region="us-east-1",
        before=(0, "-"),
        after=(1, "p9z.mega"),
        lifetime_hours=None,
        idle_shutdown_minutes=None,
        table=TABLE,
    )
    assert unknown.after_hourly is None and unknown.missing == ("p9z.mega",)
    assert estimate(
        target="local",
        region=None,
        before=(1, "x"),
        after=(9, "x"),
        lifetime_hours=None,
        idle_shutdown_minutes=None,
        table=TABLE,
    ).free


def test_a_plan_is_priced_at_its_own_region_not_the_specs_first() -> None:
    """A ladder's later rung is planned in its own region (the root module's region variable)
    while the spec's region is the first rung's: `up` prices and judges that rung at its
    region's price, and plan.md names that region."""
    table = PriceTable(
        "test table",
        "2026-11-23",
        {"us-east-1": {"p5.48xlarge": 55.04}, "us-west-2": {"p5.48xlarge": 60.0}},
    )
    plan = {
        "resource_changes": [instance(i, ["create"], None, node("ami-1")) for i in range(2)],
        "variables": {"region": {"value": "us-west-2"}},
    }
    facts = ClusterFacts("train", "aws", "us-east-1", guardrails=Guardrails(max_hourly_usd=115))
    review = build_review(plan, facts, planfile_sha256="0", table=table)
    assert (review.facts.region, review.cost.after_hourly) == ("us-west-2", 120.0)
    assert not review.passed  # 120 > 115: at us-east-1's price it would have passed (110.08)
    same = build_review({**plan, "variables": {}}, facts, planfile_sha256="0", table=table)
    assert (same.facts.region, same.cost.after_hourly) == ("us-east-1", 110.08)


def test_guardrails_table_is_checked_field_by_field() -> None:
    assert parse_guardrails(None) == Guardrails()
    assert parse_guardrails({"max_hourly_usd": 50}).max_hourly_usd == 50.0
    for raw, field in (
        ({"max_hourly_usd": -1}, "guardrails.max_hourly_usd"),
        ({"max_hourly_usd": "50"}, "guardrails.max_hourly_usd"),
        ({"allow_world_ssh": "yes"}, "guardrails.allow_world_ssh"),
        ({"max_hourly": 5}, "guardrails.max_hourly"),
        ([1], "guardrails"),
    ):
        with pytest.raises(SpecError) as err:
            parse_guardrails(raw)
        assert err.value.field == field


def test_fixed_checks_catch_imdsv1_and_missing_efa_egress() -> None:
    plan = replaced_plan()
    plan["resource_changes"][2]["change"]["after"] = node("ami-0a", tokens="optional")
    plan["resource_changes"].append(
        {
            "address": 'module.nodes.aws_network_interface.efa["node-0/0"]',
            "type": "aws_network_interface",
            "change": {"actions": ["create"], "before": None, "after": {"interface_type": "efa"}},
        }
    )
    plan["resource_changes"].append(
        {
            "address": "module.security.aws_vpc_security_group_ingress_rule.self",
            "type": "aws_vpc_security_group_ingress_rule",
            "change": {"actions": ["create"], "before": None, "after": {"ip_protocol": "-1"}},
        }
    )
    checks = {c.name: c for c in fixed_checks(plan, Guardrails())}
    assert not checks["IMDSv2 required"].ok and NODE.format(1) in checks["IMDSv2 required"].reason
    assert checks["Encrypted root volumes"].ok
    assert (
        not checks["EFA self rules"].ok and "no self egress rule" in checks["EFA self rules"].reason
    )
    assert checks["SSH from 0.0.0.0/0"].ok


def test_the_comment_stays_under_githubs_limit_cutting_the_full_plan_first() -> None:
    facts = ClusterFacts("big", "aws", "us-east-1")
    huge = "\n".join(f"line {i} " + "x" * 80 for i in range(2000))  # ~180,000 characters
    review = build_review(
        replaced_plan(), facts, planfile_sha256="ab" * 32, full_plan=huge, table=TABLE
    )
    text = markdown.render(review)
    assert len(text) <= markdown.COMMENT_LIMIT
    assert "Full plan truncated to fit GitHub's 65,536-character limit" in text
    assert "**Plan: 2 to add, 0 to change, 2 to destroy.**" in text  # outside the fold
    assert text.index("[!WARNING]") < text.index("<details>")
    small = markdown.render(
        build_review(
            replaced_plan(), facts, planfile_sha256="ab" * 32, full_plan="short", table=TABLE
        )
    )
    assert "truncated" not in small and "short" in small
    assert len(markdown.render(review, limit=20_000)) <= 20_000


def test_topology_names_the_spot_nodes_and_only_when_there_are_some() -> None:
    """Issue 26: a row saying which nodes are Spot, from each node's instance_market_options;
    an On-Demand plan has no such row (its plan.md is as before)."""
    spot = [{"market_type": "spot", "spot_options": [{"spot_instance_type": "one-time"}]}]
    plan = replaced_plan()
    plan["resource_changes"][2] = instance(
        1,
        ["delete", "create"],
        node("ami-0aaaaaaaaaaaaaaaa"),
        node("ami-0aaaaaaaaaaaaaaaa") | {"instance_market_options": spot},
        replace_paths=[["instance_market_options"]],
    )
    summary = summarize(plan, target="aws")
    assert (summary.before.spot_nodes, summary.after.spot_nodes) == ((), ("node-1",))
    rows = markdown.topology(summary.before, summary.after)
    assert "| Spot nodes | none (all On-Demand) | node-1; On-Demand: node-0 ⚠️ |" in rows
    plain = summarize(replaced_plan(), target="aws")
    assert not any("Spot" in row for row in markdown.topology(plain.before, plain.after))
    # The replaced node's market in words, once (its block forces it through several paths).
    worker = next(loss for loss in summary.losses if loss.address == NODE.format(1))
    market = [d for d in worker.diffs if d.path == "instance_market_options"]
    assert [(d.before, d.after) for d in market] == [("on-demand", "spot (one-time)")]


SPOT_PRICES = SpotPrices(
    "p5.48xlarge",
    "test history",
    {
        "us-east-1a": (16.512, "2026-11-25T09:00:00Z"),
        "us-east-1b": (22.016, "2026-11-25T08:00:00Z"),
    },
)


def test_spot_nodes_are_priced_at_the_zones_spot_price_and_judged_on_it() -> None:
    """Issue 26: 3 of 4 nodes Spot in us-east-1a: 55.04 + 3 x 16.512 per hour; the guardrail
    is judged on that, and plan.md shows the price per zone, dated, and the saving."""
    cost = estimate(
        target="aws",
        region="us-east-1",
        before=(0, "-"),
        after=(4, "p5.48xlarge"),
        lifetime_hours=8,
        idle_shutdown_minutes=30,
        table=TABLE,
        spot_plan=SpotPlan(nodes=(0, 3), zone="us-east-1a", prices=SPOT_PRICES),
    )
    assert cost.after_hourly == pytest.approx(55.04 + 3 * 16.512)
    assert cost.spot is not None and cost.spot.saving == pytest.approx(0.7)
    checks = policy_checks(
        Guardrails(max_hourly_usd=120),
        cost,
        idle_shutdown_minutes=30,
        max_lifetime_hours=8,
        target="aws",
    )
    assert [(c.ok, c.reason) for c in checks] == [
        (True, "$104.58/h ≤ $120.00/h (3 Spot node(s) at the Spot price in us-east-1a)")
    ]
    lines = markdown.cost(cost)
    assert (
        "**Spot nodes: 3** (`p5.48xlarge`), priced at the Spot price in us-east-1a: "
        "$16.51/h each against $55.04/h On-Demand (70% less)." in lines
    )
    assert "| us-east-1b | $22.02/h | 2026-11-25T08:00:00Z | 60% less |" in lines
    assert "<sub>Spot prices: test history." in lines[-1]
    # Without a Spot price for the zone: the On-Demand price, the most a node costs uncapped.
    unknown = estimate(
        target="aws",
        region="us-east-1",
        before=(0, "-"),
        after=(4, "p5.48xlarge"),
        lifetime_hours=8,
        idle_shutdown_minutes=30,
        table=TABLE,
        spot_plan=SpotPlan(nodes=(0, 3), zone="us-east-1c", prices=SPOT_PRICES),
    )
    assert unknown.after_hourly == pytest.approx(4 * 55.04)
    assert "no Spot price for us-east-1c at plan time" in "\n".join(markdown.cost(unknown))
    assert SpotPrices.from_dict(SPOT_PRICES.to_dict()) == SPOT_PRICES
    # On-Demand only: no Spot section, as before issue 26.
    plain = estimate(
        target="aws",
        region="us-east-1",
        before=(0, "-"),
        after=(4, "p5.48xlarge"),
        lifetime_hours=8,
        idle_shutdown_minutes=30,
        table=TABLE,
        spot_plan=SpotPlan(prices=SPOT_PRICES),
    )
    assert plain.spot is None and "Spot" not in "\n".join(markdown.cost(plain))


def head_role_plan(*profiles: str) -> dict[str, Any]:
    """A plan with the head's role (aws.recover, issue 26) and nodes launching with
    ``profiles`` in node order."""
    plan = replaced_plan()
    plan["resource_changes"] = [
        instance(i, ["create"], None, node("ami-0a") | {"iam_instance_profile": profile})
        for i, profile in enumerate(profiles)
    ] + [
        {
            "address": "module.nodes.aws_iam_role.head[0]",
            "type": "aws_iam_role",
            "change": {"actions": ["create"], "before": None, "after": {"name": "train-head"}},
        }
    ]
    plan["variables"] = {
        "head_recovery": {
            "value": {
                "bucket": "team-state",
                "state_key": "skyinfra/train/terraform.tfstate",
                "lock_key": "skyinfra/train/terraform.tfstate.tflock",
            }
        }
    }
    return plan


def test_the_heads_role_gets_one_guardrail_line_saying_what_it_can_and_cannot_do() -> None:
    plan = head_role_plan("train-head", "train-node", "train-node")
    checks = {c.name: c for c in fixed_checks(plan, Guardrails())}
    head = checks["Head's role (aws.recover)"]
    assert head.ok
    for words in (
        "`train-head` on node-0 only",
        "re-create this cluster's instances",
        "`skyinfra:cluster = train`",
        "read and write this cluster's state and lock",
        "`s3://team-state/skyinfra/train/terraform.tfstate`",
        "read this cluster's resources",
        "cannot terminate or delete anything",
        "other clusters, other buckets or other roles",
    ):
        assert words in head.reason
    review = build_review(plan, ClusterFacts("train", "aws", "us-east-1"), planfile_sha256="0")
    text = markdown.render(review)
    assert "| Head's role (aws.recover) | ✅ | `train-head` on node-0 only" in text
    assert review.to_dict()["guardrails"][-1]["name"] == "Head's role (aws.recover)"


def test_the_heads_role_on_another_node_fails_its_line() -> None:
    checks = {
        c.name: c for c in fixed_checks(head_role_plan("train-head", "train-head"), Guardrails())
    }
    head = checks["Head's role (aws.recover)"]
    assert not head.ok and NODE.format(1) in head.reason
    checks = {
        c.name: c for c in fixed_checks(head_role_plan("train-node", "train-node"), Guardrails())
    }
    assert not checks["Head's role (aws.recover)"].ok
    assert "node-0 does not launch with `train-head`" in checks["Head's role (aws.recover)"].reason


def test_no_heads_role_line_without_the_role() -> None:
    names = [c.name for c in fixed_checks(replaced_plan(), Guardrails())]
    assert not any(n.startswith("Head's role") for n in names)
