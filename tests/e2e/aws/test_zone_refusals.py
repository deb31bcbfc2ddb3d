"""Capacity failover end to end when no zone can take the nodes: every zone refusing, and a
quota refusal that no other zone can change (real Terraform and the real AWS provider against
moto behind the fault-injecting proxy, as in test_zone_failover.py; a file of their own so
that `make test`'s workers run them beside the zone move)."""

# ruff: noqa: F811 (the fixtures imported from tests/support/capacity_e2e.py are parameters)

from __future__ import annotations

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
    capacity_log,
    env,
    live_instances,
    project_with_spec,
    proxy,
)
from tests.support.fault_proxy import (
    FaultProxy,
    insufficient_capacity,
    vcpu_limit_exceeded,
)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_every_zone_refusing_leaves_nothing_and_prints_the_attempts(
    env: dict[str, str],
    proxy: FaultProxy,
    dlami: None,
    moto_like_ec2: None,
    ssh_key: Path,
    ec2: Any,
    tmp_path: Path,
) -> None:
    project = project_with_spec(tmp_path, "cap-none", ssh_key, 'zones = ["a"]\n')
    proxy.refuse[A] = insufficient_capacity()
    up = skyinfra("up", cwd=project, env=env, timeout=TIMEOUT_S)
    assert up.returncode == 10, up.stdout + up.stderr  # exitcodes.NO_CAPACITY
    err = up.stderr
    assert "error: no zone had capacity for 2 x t3.micro of cluster 'cap-none'; attempts:" in err
    table = err.split("attempts:\n")[1].splitlines()
    assert table[0].split() == ["#", "round", "zone", "asked", "AWS", "answered", "took"]
    assert table[1].split()[:3] == ["1", "1", A]
    assert "InsufficientInstanceCapacity" in table[1]
    assert "nothing of it is left (checked with AWS by tag)" in err
    assert "Traceback" not in err
    assert set(proxy.run_instances) == {A}  # only the zones asked for
    assert count_cluster_resources(ec2, "cap-none") == NO_SPACE
    assert live_instances(ec2, "cap-none") == []
    log = capacity_log(project, "cap-none")
    assert (log["zone"], log["first_choice"]) == (None, A)
    assert [a["outcome"] for a in log["attempts"]] == ["capacity"]
    status = skyinfra("status", cwd=project, env=env)
    assert "  zone: none (every zone tried refused the nodes)" in status.stdout
    down = skyinfra("down", "--yes", cwd=project, env=env)
    assert down.returncode == 0, down.stdout + down.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_quota_refusal_stops_at_once_with_its_own_message(
    env: dict[str, str],
    proxy: FaultProxy,
    dlami: None,
    moto_like_ec2: None,
    ssh_key: Path,
    ec2: Any,
    tmp_path: Path,
) -> None:
    project = project_with_spec(tmp_path, "cap-quota", ssh_key)
    proxy.refuse[A] = vcpu_limit_exceeded()
    up = skyinfra("up", cwd=project, env=env, timeout=TIMEOUT_S)
    assert up.returncode == 1, up.stdout + up.stderr
    err = up.stderr
    assert err.count("VcpuLimitExceeded") == 1, err
    assert "error: AWS refused 2 x t3.micro for cluster 'cap-quota': VcpuLimitExceeded:" in err
    assert "request a higher On-Demand vCPU quota" in err
    assert "Another zone cannot change this, so no other zone is tried" in err
    assert "attempt 2" not in up.stdout
    assert sum(proxy.run_instances.values()) == proxy.run_instances[A] > 0
    assert count_cluster_resources(ec2, "cap-quota") == NO_SPACE
