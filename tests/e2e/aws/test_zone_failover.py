"""Capacity failover end to end: `skyinfra up` on the AWS target as a user runs it, with real
Terraform and the real AWS provider, against moto's server behind a fault-injecting proxy
(tests/support/fault_proxy.py) that answers RunInstances in chosen zones with EC2's own error
bodies. What is left is counted through the EC2 API, by tag and by zone.
"""

# ruff: noqa: F811 (the fixtures imported from tests/support/capacity_e2e.py are parameters)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.aws_e2e import NO_SPACE, count_cluster_resources, skyinfra
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
from tests.support.fault_proxy import (
    FaultProxy,
    capacity_reservations_body,
    insufficient_capacity,
)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_full_zone_moves_the_new_cluster_to_the_next_zone(
    env: dict[str, str],
    proxy: FaultProxy,
    dlami: None,
    moto_like_ec2: None,
    ssh_key: Path,
    ec2: Any,
    tmp_path: Path,
) -> None:
    project = project_with_spec(tmp_path, "cap-move", ssh_key)
    proxy.refuse[A] = insufficient_capacity()
    up = skyinfra("up", cwd=project, env=env, timeout=TIMEOUT_S)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        out = up.stdout
        assert f"[skyinfra] attempt 1 (round 1): 2 x t3.micro in {A}" in out
        assert f"attempt 1: {A} refused 2 x t3.micro: InsufficientInstanceCapacity: We " in out
        assert f"[skyinfra] attempt 2 (round 1): 2 x t3.micro in {B}" in out
        # Every node in b, nothing left in a; the provider met the refusal (both nodes).
        assert len(live_instances(ec2, "cap-move", B)) == 2
        assert live_instances(ec2, "cap-move", A) == []
        assert proxy.refused[A] == 2 and proxy.run_instances[B] == 2
        log = capacity_log(project, "cap-move")
        assert (log["schema"], log["zone"], log["first_choice"]) == (1, B, A)
        assert log["reason"].startswith(f"{A} refused 2 x t3.micro: InsufficientInstanceCapacity")
        assert [(a["zone"], a["outcome"], a["code"]) for a in log["attempts"]] == [
            (A, "capacity", "InsufficientInstanceCapacity"),
            (B, "ok", ""),
        ]
        assert all(a["duration_s"] > 0 for a in log["attempts"])

        status = skyinfra("status", "--json", cwd=project, env=env)
        info = json.loads(status.stdout)
        assert info["zone"] == B and info["zone_reason"] == log["reason"]
        text = skyinfra("status", cwd=project, env=env).stdout
        assert f"  zone: {B} (not the first choice: {A} refused 2 x t3.micro" in text

    finally:
        proxy.refuse.clear()
        down = skyinfra("down", "--yes", cwd=project, env=env, timeout=TIMEOUT_S)
    assert down.returncode == 0, down.stdout + down.stderr
    assert count_cluster_resources(ec2, "cap-move") == NO_SPACE


def test_a_reservation_without_room_is_refused_before_terraform(
    env: dict[str, str], proxy: FaultProxy, dlami: None, ssh_key: Path, tmp_path: Path
) -> None:
    project = project_with_spec(
        tmp_path, "cap-odcr", ssh_key, 'capacity_reservation_id = "cr-0123456789abcdef0"\n'
    )
    reservation = {
        "id": "cr-0123456789abcdef0",
        "type": "t3.micro",
        "zone": B,
        "total": 4,
        "available": 1,
    }
    proxy.answers["DescribeCapacityReservations"] = lambda: capacity_reservations_body(
        [reservation]
    )
    up = skyinfra("up", cwd=project, env=env, timeout=120)
    assert up.returncode == 3, up.stdout + up.stderr  # exitcodes.PREFLIGHT
    assert (
        "error: capacity reservation cr-0123456789abcdef0 (aws.capacity_reservation_id) has 1 "
        f"free of 4 t3.micro in {B}; 2 node(s) would launch into it" in up.stderr
    )
    assert "terraform init" not in up.stdout
    assert not (project / ".skyinfra").exists()
    assert sum(proxy.run_instances.values()) == 0
