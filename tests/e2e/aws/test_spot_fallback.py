"""Capacity failover end to end for Spot: no Spot capacity in any zone, and the worker goes
On-Demand under `aws.spot_fallback` (real Terraform and the real AWS provider against moto
behind the fault-injecting proxy, as in test_zone_failover.py; a file of its own so that
`make test`'s workers run it beside the zone move, whose file it would otherwise double)."""

# ruff: noqa: F811 (the fixtures imported from tests/support/capacity_e2e.py are parameters)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.aws_e2e import (
    NO_SPACE,
    count_cluster_resources,
    skyinfra,
)
from tests.support.capacity_e2e import (  # noqa: F401 (fixtures)
    TIMEOUT_S,
    A,
    B,
    capacity_log,
    env,
    live_instances,
    project_with_spec,
    proxy,
)
from tests.support.fault_proxy import FaultProxy, no_spot_capacity


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_spot_without_capacity_anywhere_goes_on_demand_with_the_fallback(
    env: dict[str, str],
    proxy: FaultProxy,
    dlami: None,
    moto_like_ec2: None,
    ssh_key: Path,
    ec2: Any,
    tmp_path: Path,
) -> None:
    """Issue 26: the worker is Spot, the head On-Demand; the proxy refuses Spot launches in
    both zones (On-Demand ones pass), so after a and b the worker goes On-Demand in a, and
    `up`, capacity.json and `status` say so."""
    project = project_with_spec(
        tmp_path,
        "cap-spot",
        ssh_key,
        'zones = ["a", "b"]\nmarket = "spot"\nspot_fallback = "on-demand"\n',
    )
    proxy.refuse[A] = no_spot_capacity()
    proxy.refuse[B] = no_spot_capacity()
    up = skyinfra("up", cwd=project, env=env, timeout=TIMEOUT_S)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        out = up.stdout
        assert f"[skyinfra] attempt 1 (round 1): 2 x t3.micro (1 on Spot) in {A}" in out
        assert (
            f"attempt 2: {B} refused 2 x t3.micro (1 on Spot): InsufficientInstanceCapacity" in out
        )
        assert (
            "[skyinfra] Spot could not place node-1: no Spot capacity in any zone tried "
            f"({A}, {B})" in out
        )
        assert 'aws.spot_fallback = "on-demand": launching it On-Demand' in out
        assert f"[skyinfra] attempt 3 (round 1): 2 x t3.micro in {A}" in out
        # The Spot launches were refused (the provider met it), the On-Demand head's passed.
        assert proxy.refused[A] == 1 and proxy.refused[B] == 1
        nodes = live_instances(ec2, "cap-spot", A)
        assert len(nodes) == 2 and live_instances(ec2, "cap-spot", B) == []
        assert {i.get("InstanceLifecycle", "on-demand") for i in nodes} == {"on-demand"}
        log = capacity_log(project, "cap-spot")
        assert log["zone"] == A and log["markets"] == {"node-0": "on-demand", "node-1": "on-demand"}
        assert log["spot_fallback"]["nodes"] == ["node-1"]
        assert log["spot_fallback"]["reason"].startswith(
            f"no Spot capacity in any zone tried ({A}, {B})"
        )
        assert [(a["zone"], a["outcome"]) for a in log["attempts"]] == [
            (A, "capacity"),
            (B, "capacity"),
            (A, "ok"),
        ]
        info = json.loads(skyinfra("status", "--json", cwd=project, env=env).stdout)
        assert info["spot_fallback"] == log["spot_fallback"]
        text = skyinfra("status", cwd=project, env=env).stdout
        assert "  Spot fallback: node-1 launched On-Demand (no Spot capacity in any zone" in text
    finally:
        proxy.refuse.clear()
        down = skyinfra("down", "--yes", cwd=project, env=env, timeout=TIMEOUT_S)
    assert down.returncode == 0, down.stdout + down.stderr
    assert count_cluster_resources(ec2, "cap-spot") == NO_SPACE
