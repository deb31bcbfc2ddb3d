"""plan.md from real Terraform plans, replayed: the plan JSON each AWS case produced against
moto (recorded by tests/e2e/aws/test_plan_review.py) goes through the pure review and must
give its golden plan.md. The local cases run end to end in tests/e2e/local."""

from __future__ import annotations

import pytest

from skyinfra.review import markdown
from skyinfra.review.cost import shipped_table
from skyinfra.review.report import build_review, facts_of
from skyinfra.spec import ClusterSpec
from tests.support.golden_plans import check_golden, recorded

CASES = {
    "aws-create": (True, "Plan: 18 to add, 0 to change, 0 to destroy."),
    "aws-no-changes": (True, "Plan: 0 to add, 0 to change, 0 to destroy."),
    "aws-scale-2-to-4": (True, "| per hour | $2.01 | $4.02 | **+$2.01** |"),
    "aws-replace-ami": (True, "2 GPU node(s) will be REPLACED"),
    "aws-destroy": (True, "1 GPU node(s) will be DESTROYED"),
    "aws-world-ssh": (False, "| SSH from 0.0.0.0/0 | ❌ |"),
    "aws-no-idle-shutdown": (False, "| require_idle_shutdown | ❌ |"),
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
