"""plan.md from real Terraform plans, replayed: the plan JSON each AWS case produced against
moto (recorded by tests/e2e/aws/test_plan_review.py) goes through the pure review and must
give its golden plan.md. The local cases run end to end in tests/e2e/local."""

from __future__ import annotations

import json

import pytest

from skyinfra.review import markdown
from skyinfra.review.cost import SpotPrices, shipped_table
from skyinfra.review.report import build_review, facts_of
from skyinfra.spec import ClusterSpec
from tests.support.golden_plans import check_golden, recorded

CASES = {
    "aws-create": (True, "Plan: 19 to add, 0 to change, 0 to destroy."),
    "aws-no-changes": (True, "Plan: 0 to add, 0 to change, 0 to destroy."),
    "aws-scale-2-to-4": (True, "| per hour | $2.01 | $4.02 | **+$2.01** |"),
    "aws-replace-ami": (True, "2 GPU node(s) will be REPLACED"),
    "aws-destroy": (True, "1 GPU node(s) will be DESTROYED"),
    "aws-world-ssh": (False, "| SSH from 0.0.0.0/0 | ❌ |"),
    "aws-no-idle-shutdown": (False, "| require_idle_shutdown | ❌ |"),
    # Issue 26: the worker goes Spot (replaced), priced at moto's Spot price for its zone.
    "aws-spot-workers": (
        True,
        "| Spot nodes | none (all On-Demand) | node-1; On-Demand: node-0 ⚠️ |",
    ),
}


def replay(name: str) -> tuple[str, bool]:
    plan, meta = recorded(name)
    spec = ClusterSpec.from_dict(meta["spec"])  # type: ignore[arg-type]
    review = build_review(
        plan,
        facts_of(spec),
        planfile_sha256=str(meta["planfile_sha256"]),
        providers=meta["providers"],  # type: ignore[arg-type]
        full_plan="(the full plan text)",
        table=shipped_table(),
        spot_prices=(
            SpotPrices.from_dict(meta["spot_prices"])  # type: ignore[arg-type]
            if meta.get("spot_prices")
            else None
        ),
    )
    hint = "Apply exactly this plan: `skyinfra apply skyinfra.tfplan` (sha256 checked)."
    return markdown.render(review, apply_hint=hint), review.passed


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_aws_plan_gives_its_golden_plan_md(name: str) -> None:
    text, passed = replay(name)
    check_golden(name, text)
    expect_pass, line = CASES[name]
    assert passed is expect_pass
    assert line in text


def test_plan_md_says_which_prefix_the_nodes_may_write() -> None:
    """Issue 25: the checkpoint prefix is the only place the nodes' role may write."""
    text, _ = replay("aws-create")
    section = text.split("### What the nodes' role may do in S3", 1)[1].split("<details>", 1)[0]
    writes = [line for line in section.splitlines() if "s3:PutObject" in line]
    assert writes == [
        "- list, read, write and delete (s3:ListBucket under the prefix, s3:GetObject, "
        "s3:PutObject, s3:DeleteObject) "
        "`s3://skyinfra-checkpoints-123456789012-us-east-1/gpu-review/checkpoints/*`: "
        "checkpoints, kept after `down`"
    ]
    plan, _ = recorded("aws-create")
    policies = [
        r
        for r in plan["resource_changes"]
        if r["address"].endswith("aws_iam_role_policy.checkpoints[0]")
    ]
    assert len(policies) == 1 and policies[0]["change"]["actions"] == ["create"]
    # The policy document Terraform rendered (real Terraform against moto, recorded): the
    # prefix and nothing else of the bucket.
    bucket = "arn:aws:s3:::skyinfra-checkpoints-123456789012-us-east-1"
    statements = json.loads(policies[0]["change"]["after"]["policy"])["Statement"]
    assert [(s["Effect"], s["Resource"], s.get("Condition")) for s in statements] == [
        ("Allow", bucket, {"StringLike": {"s3:prefix": "gpu-review/checkpoints/*"}}),
        ("Allow", f"{bucket}/gpu-review/checkpoints/*", None),
    ]
    assert statements[0]["Action"] == "s3:ListBucket"
    assert sorted(statements[1]["Action"]) == ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
