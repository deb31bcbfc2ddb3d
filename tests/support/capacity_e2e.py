"""What the capacity end-to-end tests share (tests/e2e/aws: test_zone_failover.py,
test_zone_refusals.py, test_spot_fallback.py): moto behind the fault-injecting proxy
(tests/support/fault_proxy.py) as the user's AWS API, a project with a t3.micro spec, and what
a cluster left, counted through the EC2 API by tag and zone. The fixtures (`proxy`, `env`) are
imported by the modules that use them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR
from tests.support.aws import REGION
from tests.support.aws_e2e import write_spec
from tests.support.fault_proxy import FaultProxy, fault_proxy

A, B = f"{REGION}a", f"{REGION}b"
# Each attempt is a real Terraform apply (and a destroy after a refusal): minutes on a busy
# machine. The --retry-for rounds and growing a running cluster are covered in process, with
# the provider's own error text (integration/aws/test_failover_loop.py).
TIMEOUT_S = 600


@pytest.fixture
def proxy(cli_env: dict[str, str]) -> Iterator[FaultProxy]:
    with fault_proxy(cli_env[ENDPOINT_ENV_VAR], REGION) as running:
        yield running


@pytest.fixture
def env(cli_env: dict[str, str], proxy: FaultProxy) -> dict[str, str]:
    """The user's shell, with the proxy as the AWS API and a short back-off between rounds."""
    return {**cli_env, ENDPOINT_ENV_VAR: proxy.url, "SKYINFRA_CAPACITY_BACKOFF_S": "0.2"}


def project_with_spec(tmp_path: Path, name: str, key: Path, extra: str = "") -> Path:
    project = tmp_path / "project"
    project.mkdir()
    spec = write_spec(project / "skyinfra.toml", name, "t3.micro", key)
    spec.write_text(spec.read_text() + extra)
    return project


def live_instances(ec2: Any, cluster: str, zone: str | None = None) -> list[dict[str, Any]]:
    filters = [
        {"Name": "tag:skyinfra:cluster", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ]
    if zone is not None:
        filters.append({"Name": "availability-zone", "Values": [zone]})
    reservations = ec2.describe_instances(Filters=filters)["Reservations"]
    return [i for r in reservations for i in r["Instances"]]


def capacity_log(project: Path, cluster: str) -> dict[str, Any]:
    path = project / ".skyinfra" / "clusters" / cluster / "capacity.json"
    return dict(json.loads(path.read_text()))
