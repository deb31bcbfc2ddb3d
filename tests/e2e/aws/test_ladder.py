"""The ladder end to end (issue 44): `skyinfra plan` and `skyinfra up` of a cluster that accepts
one instance type in three regions, with real Terraform and the real AWS provider against
moto's server (which answers DescribeInstanceTypeOfferings per region and zone) behind the
fault-injecting proxy. The plan lists the rungs in the order `up` tries them, with their zones
(golden); with every zone of region 1 refusing the type, `apply PLANFILE` of the reviewed plan
(rung 1, in its first zone) tries rung 1's other zone, then climbs on to rung 2, the next rung
the plan approved, in the zones the plan listed for it, and nothing is left in region 1
(counted through the EC2 API of each region, by tag); growing the running cluster is planned on
its rung; with every rung refusing, `up` exits 10 and leaves nothing anywhere. `up` and `apply`
climb through the same code (ladder_shell.climb).
"""

# ruff: noqa: F811 (the fixtures imported from tests/support/capacity_e2e.py are parameters)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra import exitcodes
from tests.support.aws_e2e import NO_SPACE, UBUNTU_DLAMI, count_cluster_resources, skyinfra
from tests.support.capacity_e2e import (  # noqa: F401 (fixtures)
    TIMEOUT_S,
    capacity_log,
    env,
    live_instances,
    proxy,
)
from tests.support.fault_proxy import FaultProxy, insufficient_capacity
from tests.support.golden_plans import check_golden

TYPE = "p5en.48xlarge"
REGIONS = ("us-east-1", "us-west-2", "us-east-2")
# `apply`'s ladder: region 1 is one that moto offers p5en.48xlarge in two zones of (its
# DescribeInstanceTypeOfferings): the planfile's zone and one more, which `apply` must try
# before rung 2; each zone tried is a Terraform apply and a destroy.
UP_REGIONS = ("us-east-1", "us-west-2", "us-east-2")
REGION_1_ZONES = ("us-east-1a", "us-east-1c")


def _project(
    tmp_path: Path,
    name: str,
    key: Path,
    types: tuple[str, ...] = (TYPE,),
    regions: tuple[str, ...] = REGIONS,
    accelerators: str = "H200:8",
) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "skyinfra.toml").write_text(
        f'name = "{name}"\n'
        'provider = "aws"\n'
        "nodes = 2\n"
        "[aws]\n"
        + (f'accelerators = "{accelerators}"\n' if accelerators else "")
        + f"instance_types = {json.dumps(list(types))}\n"
        f"regions = {json.dumps(list(regions))}\n"
        # An AMI id moto knows in every region (a DLAMI parameter is seeded in one).
        f'ami = "{UBUNTU_DLAMI}"\n'
        'ssh_cidrs = ["203.0.113.7/32"]\n'
        f'ssh_key = "{key}"\n'
        "max_lifetime_hours = 8\n"
        "placement_group = false  # moto has no CreatePlacementGroup\n"
    )
    return project


def _ec2(endpoint: str, region: str) -> Any:
    return boto3.client("ec2", region_name=region, endpoint_url=endpoint)


def _offering_zones(endpoint: str, region: str, instance_type: str) -> list[str]:
    offers = _ec2(endpoint, region).describe_instance_type_offerings(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )["InstanceTypeOfferings"]
    return sorted(o["Location"] for o in offers)


def _ladder_section(text: str) -> str:
    start = text.index("### Ladder")
    end = text.find("\n### ", start + 1)
    return text[start : end if end != -1 else None].rstrip("\n") + "\n"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_plan_lists_the_rungs_in_order(
    env: dict[str, str], proxy: FaultProxy, ssh_key: Path, tmp_path: Path
) -> None:
    project = _project(tmp_path, "ladder-plan", ssh_key)
    plan = skyinfra("plan", cwd=project, env=env, timeout=TIMEOUT_S)
    assert plan.returncode == 2, plan.stdout + plan.stderr  # 2: changes to apply
    out = project / ".skyinfra" / "clusters" / "ladder-plan" / "plan"
    # Rungs 2 and 3 say that the checkpoints (the default bucket of region 1) cross regions.
    check_golden("aws-ladder-three-rungs", _ladder_section((out / "plan.md").read_text()))
    meta = json.loads((out / "plan-meta.json").read_text())
    assert [(r["instance_type"], r["region"], r["verdict"]) for r in meta["ladder"]["rungs"]] == [
        (TYPE, region, "approved") for region in REGIONS
    ]
    assert sum(proxy.run_instances.values()) == 0  # planning launches nothing

    # The ladder changed after the review (another region order): the planfile is stale.
    spec = project / "skyinfra.toml"
    spec.write_text(
        spec.read_text().replace('"us-west-2", "us-east-2"', '"us-east-2", "us-west-2"')
    )
    stale = skyinfra("apply", str(out / "skyinfra.tfplan"), cwd=project, env=env)
    assert stale.returncode == exitcodes.STALE_PLAN, stale.stdout + stale.stderr
    assert "aws.regions" in stale.stderr
    assert sum(proxy.run_instances.values()) == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_plan_drops_a_rung_with_another_gpu_count_unless_allow_reshape(
    env: dict[str, str], proxy: FaultProxy, ssh_key: Path, tmp_path: Path
) -> None:
    project = _project(
        tmp_path, "ladder-shape", ssh_key, ("p5.48xlarge", "g6e.12xlarge"), ("us-east-1",), ""
    )
    plan = skyinfra("plan", cwd=project, env=env, timeout=TIMEOUT_S)
    assert plan.returncode == 2, plan.stdout + plan.stderr
    out = project / ".skyinfra" / "clusters" / "ladder-shape" / "plan"
    rungs = json.loads((out / "plan-meta.json").read_text())["ladder"]["rungs"]
    assert [(r["instance_type"], r["verdict"]) for r in rungs] == [
        ("p5.48xlarge", "approved"),
        ("g6e.12xlarge", "dropped"),
    ]
    assert rungs[1]["reason"] == (
        "4 GPUs per node where the job has 8 (another world size); set aws.allow_reshape = "
        "true to allow it"
    )
    assert "dropped: 4 GPUs per node where the job has 8" in (out / "plan.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_region_1_full_apply_lands_on_the_next_reviewed_rung_and_leaves_nothing_there(
    env: dict[str, str],
    proxy: FaultProxy,
    moto_like_ec2: None,
    ssh_key: Path,
    tmp_path: Path,
    aws_env: str,
) -> None:
    assert _offering_zones(aws_env, UP_REGIONS[0], TYPE) == list(REGION_1_ZONES)
    project = _project(tmp_path, "ladder-up", ssh_key, regions=UP_REGIONS)
    plan = skyinfra("plan", cwd=project, env=env, timeout=TIMEOUT_S)
    assert plan.returncode == 2, plan.stdout + plan.stderr
    planfile = project / ".skyinfra" / "clusters" / "ladder-up" / "plan" / "skyinfra.tfplan"
    # Rung 2 as if the review had seen one zone offer the type: apply keeps to it, though
    # us-west-2a and d offer it now.
    meta_file = planfile.parent / "plan-meta.json"
    meta = json.loads(meta_file.read_text())
    assert meta["ladder"]["rungs"][1]["zones"] == ["us-west-2a", "us-west-2c", "us-west-2d"]
    meta["ladder"]["rungs"][1]["zones"] = ["us-west-2c"]
    meta_file.write_text(json.dumps(meta))
    for zone in REGION_1_ZONES:
        proxy.refuse[zone] = insufficient_capacity()
    up = skyinfra("apply", str(planfile), cwd=project, env=env, timeout=2 * TIMEOUT_S)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        out = up.stdout
        assert (
            f"[skyinfra] the reviewed plan's rung ({TYPE} in us-east-1) was refused in "
            "us-east-1a: InsufficientInstanceCapacity"
        ) in out
        # The planned rung's other zone, the plan listed, before the next rung.
        assert (
            f"[skyinfra] zones to try for 2 x {TYPE}: us-east-1c (us-east-1a refused the "
            "planfile's apply already)"
        ) in out
        assert f"attempt 2 (round 1): 2 x {TYPE} in us-east-1c" in out
        assert f"[skyinfra] zones to try for 2 x {TYPE}: us-west-2c\n" in out
        assert f"[skyinfra] rung 1 ({TYPE} in us-east-1) had no room: next rung" in out
        assert f"[skyinfra] rung 2 of 3: 2 x {TYPE} in us-west-2" in out
        assert f"[skyinfra] took rung 2 of 3: {TYPE} in us-west-2" in out
        assert "rung 3 of 3" not in out
        assert {z: proxy.refused[z] for z in REGION_1_ZONES} == {z: 2 for z in REGION_1_ZONES}
        # Both nodes in us-west-2; nothing of the cluster left in us-east-1.
        assert len(live_instances(_ec2(aws_env, "us-west-2"), "ladder-up")) == 2
        assert count_cluster_resources(_ec2(aws_env, "us-east-1"), "ladder-up") == NO_SPACE
        log = capacity_log(project, "ladder-up")
        assert log["rung"] == {"index": 2, "instance_type": TYPE, "region": "us-west-2"}
        assert log["zone"] == "us-west-2c"
        # Rung 2 keeps its checkpoints in the default bucket of the ladder's first region,
        # where a job resumed on any rung finds them.
        settings = json.loads(
            (project / ".skyinfra" / "clusters" / "ladder-up" / "aws-target.json").read_text()
        )
        assert settings["checkpoints_url"] == (
            "s3://skyinfra-checkpoints-123456789012-us-east-1/ladder-up/checkpoints"
        )
        # The staging bucket (the wheel the nodes install) is the rung's region's.
        assert (settings["region"], settings["staging_bucket"]) == (
            "us-west-2",
            "skyinfra-staging-123456789012-us-west-2",
        )
        # The planfile's zone, refused, then the rung's other zone, then rung 2's.
        assert [a["zone"] for a in log["attempts"][:2]] == list(REGION_1_ZONES)
        status = json.loads(skyinfra("status", "--json", cwd=project, env=env).stdout)
        assert status["rung"] == {"instance_type": TYPE, "region": "us-west-2"}
        text = skyinfra("status", cwd=project, env=env).stdout
        assert f"  rung: {TYPE} in us-west-2" in text

        # A running cluster never moves: growing it is planned on its rung, in its zone.
        spec_file = project / "skyinfra.toml"
        spec_file.write_text(spec_file.read_text().replace("nodes = 2\n", "nodes = 3\n"))
        grow = skyinfra("plan", cwd=project, env=env, timeout=TIMEOUT_S)
        assert grow.returncode == 2, grow.stdout + grow.stderr
        grown = (planfile.parent / "plan.md").read_text()
        assert "(aws/us-west-2)" in grown and ", 0 to destroy.**" in grown, grown
        assert f"| nodes x type | 2 x {TYPE} | 3 x {TYPE}" in grown
        assert "| zone | us-west-2c | us-west-2c |" in grown
    finally:
        proxy.refuse.clear()
        down = skyinfra("down", "--yes", cwd=project, env=env, timeout=TIMEOUT_S)
    assert down.returncode == 0, down.stdout + down.stderr
    for region in UP_REGIONS:
        assert count_cluster_resources(_ec2(aws_env, region), "ladder-up") == NO_SPACE, region


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_every_rung_refusing_exits_10_and_leaves_nothing_anywhere(
    env: dict[str, str],
    proxy: FaultProxy,
    moto_like_ec2: None,
    ssh_key: Path,
    tmp_path: Path,
    aws_env: str,
) -> None:
    # p4d.24xlarge is offered in one zone of each of these regions (moto's offerings).
    regions = ("eu-west-1", "eu-north-1")
    zones = [z for r in regions for z in _offering_zones(aws_env, r, "p4d.24xlarge")]
    assert len(zones) == 2
    for zone in zones:
        proxy.refuse[zone] = insufficient_capacity()
    project = _project(tmp_path, "ladder-full", ssh_key, ("p4d.24xlarge",), regions, "A100:8")
    up = skyinfra("up", cwd=project, env=env, timeout=2 * TIMEOUT_S)
    assert up.returncode == exitcodes.NO_CAPACITY, up.stdout + up.stderr
    assert "no rung of the ladder of cluster 'ladder-full' had capacity" in up.stderr
    for i, region in enumerate(regions, 1):
        assert (
            f"  rung {i} (p4d.24xlarge in {region}): no zone had capacity for 2 x p4d.24xlarge "
            "of cluster 'ladder-full'; nothing of it is left (checked with AWS by tag)"
        ) in up.stderr
    for zone in zones:
        assert zone in up.stderr  # the attempts' table: each zone (and so region) tried
        assert proxy.refused[zone] == 2
    for region in regions:
        assert count_cluster_resources(_ec2(aws_env, region), "ladder-full") == NO_SPACE, region
    assert capacity_log(project, "ladder-full")["zone"] is None
