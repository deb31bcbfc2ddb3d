"""`skyinfra plan` and `apply PLANFILE` on AWS against moto's server (real Terraform, the real
AWS provider): golden plan.md for create, no changes, scale 2 -> 4 (cost doubles), a GPU node
replaced for a new AMI (with Terraform's reason and the AMI before -> after), nodes destroyed,
world-open SSH (❌, exit 8), the worker moved to Spot (issue 26: replaced, named in the
topology, priced at the Spot price) and no idle shutdown under require_idle_shutdown (❌, exit 8).
One cluster for the whole module: each case is a plan of a changed spec against it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skyinfra import exitcodes
from tests.support.aws import REGION
from tests.support.aws_e2e import (
    AMAZON_LINUX_DLAMI,
    UBUNTU_DLAMI,
    skyinfra,
)
from tests.support.golden_plans import check_golden, check_recorded_changes, record_plan

# About 45 s per `plan` against moto on a 2-core machine (preflight, wheel staging, the AWS
# provider's start and refresh): 6-7 minutes in all. Every `make test` runs it, so a change to
# the templates, the modules or Terraform that moves a plan away from its golden fails here.
# `make record-plans` runs it with SKYINFRA_UPDATE_GOLDEN=1 to rewrite the goldens and the plan
# JSON that tests/unit/review/test_golden_plans.py replays.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def spec(key: Path, *, nodes: int = 2, **aws: str) -> str:
    table = {
        "region": f'"{REGION}"',
        "instance_type": '"g5.xlarge"',
        "ssh_cidrs": '["203.0.113.7/32"]',
        "ssh_key": f'"{key}"',
        "max_lifetime_hours": "8",
        **aws,
    }
    return (
        'name = "gpu-review"\nprovider = "aws"\n'
        f"nodes = {nodes}\n"
        "[guardrails]\nmax_hourly_usd = 10\nrequire_idle_shutdown = true\n"
        "[aws]\n" + "".join(f"{k} = {v}\n" for k, v in table.items())
    )


def plan(project: Path, env: dict[str, str], text: str, out: str) -> tuple[int, str, str]:
    (project / "skyinfra.toml").write_text(text)
    proc = skyinfra("plan", "--out", out, cwd=project, env=env)
    assert proc.returncode in (0, 2, exitcodes.GUARDRAIL), proc.stdout + proc.stderr
    return proc.returncode, (project / out / "plan.md").read_text(), proc.stdout


def golden(name: str, project: Path, out: str, text: str) -> None:
    """plan.md against its golden file, and today's resource changes against the recorded plan
    JSON that tests/unit/review/test_golden_plans.py replays without Terraform (so the replay
    stays true); with SKYINFRA_UPDATE_GOLDEN=1 both are rewritten."""
    check_golden(name, text)
    check_recorded_changes(name, project / out)
    record_plan(name, project / out)


def test_plan_md_for_gpu_cluster_changes(
    cli_env: dict[str, str],
    dlami: None,
    moto_like_ec2: None,
    ssh_key: Path,
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    base = spec(ssh_key)
    code, text, _ = plan(project, cli_env, base, "p-create")
    assert code == exitcodes.PLAN_CHANGES
    golden("aws-create", project, "p-create", text)
    applied = skyinfra("apply", "p-create/skyinfra.tfplan", cwd=project, env=cli_env)
    try:
        assert applied.returncode == 0, applied.stdout + applied.stderr
        cases(project, cli_env, ssh_key)
    finally:
        down = skyinfra("down", "--yes", "--cluster", "gpu-review", cwd=project, env=cli_env)
        assert down.returncode == 0, down.stdout + down.stderr


def cases(project: Path, env: dict[str, str], key: Path) -> None:
    base = spec(key)
    code, text, _ = plan(project, env, base, "p-same")
    assert code == exitcodes.OK, text
    golden("aws-no-changes", project, "p-same", text)

    code, text, _ = plan(project, env, spec(key, nodes=4), "p-scale")
    assert code == exitcodes.PLAN_CHANGES
    golden("aws-scale-2-to-4", project, "p-scale", text)

    code, text, out = plan(project, env, spec(key, ami=f'"{AMAZON_LINUX_DLAMI}"'), "p-ami")
    assert code == exitcodes.PLAN_CHANGES
    golden("aws-replace-ami", project, "p-ami", text)
    assert f"ami: {UBUNTU_DLAMI} -> {AMAZON_LINUX_DLAMI}" in out  # the terminal tells it too

    code, text, _ = plan(project, env, spec(key, nodes=1), "p-destroy")
    assert code == exitcodes.PLAN_CHANGES
    golden("aws-destroy", project, "p-destroy", text)

    world = spec(key, ssh_cidrs='["0.0.0.0/0"]', allow_ssh_from_anywhere="true")
    code, text, _ = plan(project, env, world, "p-world")
    assert code == exitcodes.GUARDRAIL
    golden("aws-world-ssh", project, "p-world", text)
    refused = skyinfra("apply", "p-world/skyinfra.tfplan", cwd=project, env=env)
    assert refused.returncode == exitcodes.GUARDRAIL, refused.stdout + refused.stderr
    # `up` refuses the same before applying anything, whatever --yes says: the spec alone
    # breaks this guardrail, so before any plan (the offline checks `validate` runs).
    refused = skyinfra("up", "--yes", cwd=project, env=env)
    assert refused.returncode == exitcodes.GUARDRAIL, refused.stdout + refused.stderr
    assert "guardrails.allow_world_ssh" in refused.stderr
    assert "0.0.0.0/0 in aws.ssh_cidrs" in refused.stderr
    assert "terraform plan" not in refused.stdout
    assert "terraform apply" not in refused.stdout

    # Issue 26: the worker goes Spot (the head stays On-Demand), capped at $0.50/h: node-1 is
    # replaced for its market, the topology names it, the cost prices it at moto's Spot price.
    spot = spec(key, market='"spot"', spot_max_price="0.5")
    code, text, out = plan(project, env, spot, "p-spot")
    assert code == exitcodes.PLAN_CHANGES
    golden("aws-spot-workers", project, "p-spot", text)
    assert "instance_market_options" in out  # the terminal names what forces the replacement

    code, text, _ = plan(project, env, spec(key, idle_shutdown_minutes="0"), "p-idle")
    assert code == exitcodes.GUARDRAIL
    golden("aws-no-idle-shutdown", project, "p-idle", text)

    summary: dict[str, Any] = json.loads((project / "p-idle/plan-meta.json").read_text())
    assert summary["passed"] is False
    (project / "skyinfra.toml").write_text(base)
