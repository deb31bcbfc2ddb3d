"""What the shared-state end-to-end tests share (tests/e2e/local: test_shared_state.py,
test_jobs_attached.py): a state bucket on moto's server over loopback, and the operators' shell
in emulator mode (the S3 backend on moto, dummy credentials only), with one wheel cache per
module. The fixtures are imported by the modules that use them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.support.aws import REGION


@pytest.fixture
def bucket(moto_url: str) -> Iterator[str]:
    s3 = boto3.client(
        "s3",
        region_name=REGION,
        endpoint_url=moto_url,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    name = f"team-state-{time.monotonic_ns() % 10**9}"
    s3.create_bucket(Bucket=name)
    yield name


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel cache for the module: the runtime wheel is built once."""
    return tmp_path_factory.mktemp("shared-state-cache")


@pytest.fixture
def env(clean_env: dict[str, str], moto_url: str, shared_cache: Path) -> dict[str, str]:
    """Emulator mode: the S3 backend goes to moto; dummy credentials only."""
    return {
        **clean_env,
        "SKYINFRA_CACHE": str(shared_cache / "cache"),
        "SKYINFRA_TF_PLUGIN_CACHE": str(shared_cache / "tf-plugins"),
        "SKYINFRA_AWS_ENDPOINT_URL": moto_url,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }
