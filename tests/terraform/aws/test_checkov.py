"""checkov on the rendered AWS root module: no failed check, every skip carries a reason.

checkov is not in the dev extras: installing it into the project venv downgrades boto3,
botocore and packaging. It runs from its own venv, found through SKYINFRA_CHECKOV (path
to the checkov executable) or PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from skyinfra.targets.aws.render import AwsClusterParams, PrivateNetwork
from tests.conftest import require_system_tool
from tests.support.aws import REGION, write_root

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOXdhYvR9XJ8xq0f1m8c1u1YV0qg7r5n0bq6yFZ9y6Qk ck"


def checkov_executable() -> str:
    # `make test` installs checkov into .venv-checkov (it pins an older boto3 than ours) and
    # points SKYINFRA_CHECKOV at it; under CI a missing checkov fails instead of skipping.
    found = os.environ.get("SKYINFRA_CHECKOV") or shutil.which("checkov")
    return require_system_tool(found, "checkov")


@pytest.mark.parametrize(
    ("efa", "recover", "private"),
    [(False, False, False), (True, False, False), (False, True, False), (True, False, True)],
    ids=["default", "efa-placement-group", "head-role", "private-bastion-nat-ssm"],
)
def test_rendered_root_has_no_failed_checks(
    tmp_path: Path, efa: bool, recover: bool, private: bool
) -> None:
    checkov = checkov_executable()
    params = AwsClusterParams(
        cluster_name="ck",
        region=REGION,
        availability_zone=f"{REGION}a",
        instance_type="p4d.24xlarge" if efa else "g5.xlarge",
        ami_id="ami-0123456789abcdef0",
        node_count=2,
        ssh_public_key=SSH_KEY,
        ssh_ingress_cidrs=["203.0.113.7/32"],
        placement_group=efa,
        efa_interface_count=4 if efa else 0,
        # aws.recover: node-0's own role with the recover policy (issue 26).
        head_recovery=("team-state", "skyinfra/ck/terraform.tfstate") if recover else None,
        # Issue 46: every resource a private network adds (bastion, NAT, SSM endpoints).
        private_network=PrivateNetwork(nat=True, ssm=True) if private else None,
    )
    root = write_root(tmp_path, params)
    # --skip-download: no traffic to the vendor's API (offline, loopback-only tests).
    result = subprocess.run(
        [checkov, "-d", str(root), "--framework", "terraform", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        # No version check against pypi.org either (the loopback guard caught checkov asking
        # on a fresh machine, where its update-check cache is empty).
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true"},
    )
    report = json.loads(result.stdout)
    assert report["summary"]["failed"] == 0, [
        (c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]
    ]
    assert report["summary"]["passed"] > 40
    skipped = report["results"].get("skipped_checks", [])
    assert skipped, "expected the documented skips"
    for check in skipped:
        reason = check["check_result"].get("suppress_comment") or ""
        assert len(reason) > 20, f"{check['check_id']} skipped without a reason"
