"""Wheel staging in moto's S3 (presigned URL fetched over real HTTP) and the endpoint override."""

from __future__ import annotations

import hashlib
import urllib.request
import zipfile
from pathlib import Path

import boto3
import pytest
from aws_tf import REGION

from skyinfra.errors import ConfigError, PreflightError
from skyinfra.targets.aws.endpoints import (
    EMULATED_NODES_ENV_VAR,
    ENDPOINT_ENV_VAR,
    EmulatedNode,
    Emulator,
    boto3_client_kwargs,
    emulated_nodes_from_env,
    emulator_from_env,
)
from skyinfra.targets.aws.staging import default_bucket_name, stage_wheel


def make_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("skyinfra_runtime/__init__.py", "VERSION = '0.1.0'\n")
    return path


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1"])
def test_stage_wheel_presigned_url_serves_the_same_bytes(
    aws_env: str, tmp_path: Path, region: str
) -> None:
    wheel = make_wheel(tmp_path / "skyinfra_runtime-0.1.0-py3-none-any.whl")
    s3 = boto3.client("s3", **boto3_client_kwargs(region, Emulator(url=aws_env)))
    bucket = default_bucket_name("123456789012", region)
    staged = stage_wheel(s3, wheel, bucket=bucket, region=region, cluster="demo")
    assert staged.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert staged.key == f"demo/{staged.sha256}/{wheel.name}"
    assert staged.url.startswith(aws_env) and "Signature" in staged.url
    with urllib.request.urlopen(staged.url) as response:
        assert hashlib.sha256(response.read()).hexdigest() == staged.sha256
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert all(block.values())
    # Staging again is idempotent (bucket exists).
    assert stage_wheel(s3, wheel, bucket=bucket, region=region, cluster="demo") == staged


def test_stage_missing_wheel_is_a_clear_error(aws_env: str, tmp_path: Path) -> None:
    s3 = boto3.client("s3", **boto3_client_kwargs(REGION, Emulator(url=aws_env)))
    with pytest.raises(PreflightError, match=r"missing or not a \.whl"):
        stage_wheel(s3, tmp_path / "nope.whl", bucket="b-x", region=REGION, cluster="c")


def test_endpoint_override_from_env() -> None:
    assert emulator_from_env({}) is None
    emulator = emulator_from_env({ENDPOINT_ENV_VAR: "http://127.0.0.1:4566/"})
    assert emulator is not None and emulator.url == "http://127.0.0.1:4566"
    kwargs = boto3_client_kwargs("us-east-1", emulator)
    assert kwargs["endpoint_url"] == "http://127.0.0.1:4566"
    assert boto3_client_kwargs("us-east-1", None) == {"region_name": "us-east-1"}
    for bad in ("127.0.0.1:4566", "ftp://x", "http://127.0.0.1:4566/path"):
        with pytest.raises(ConfigError, match=ENDPOINT_ENV_VAR) as err:
            emulator_from_env({ENDPOINT_ENV_VAR: bad})
        assert err.value.variable == ENDPOINT_ENV_VAR and err.value.exit_code == 2


def test_emulated_nodes_map_from_env() -> None:
    assert emulated_nodes_from_env({}) == {}
    nodes = emulated_nodes_from_env(
        {
            EMULATED_NODES_ENV_VAR: '{"node-0": {"ssh": "127.0.0.1:2222", "root": "/tmp/n0"},'
            ' "node-1": "[::1]:2223"}'
        }
    )
    assert nodes == {
        "node-0": EmulatedNode(host="127.0.0.1", port=2222, root="/tmp/n0"),
        "node-1": EmulatedNode(host="::1", port=2223),
    }


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("node-0=127.0.0.1:22", EMULATED_NODES_ENV_VAR),
        ('["127.0.0.1:22"]', EMULATED_NODES_ENV_VAR),
        ('{"node-0": "127.0.0.1"}', "['node-0'].ssh"),
        ('{"node-0": "localhost:22"}', "['node-0'].ssh"),
        ('{"node-0": "127.0.0.1:70000"}', "['node-0'].ssh"),
        ('{"node-0": {"ssh": "127.0.0.1:22", "root": "tmp/n0"}}', "['node-0'].root"),
        ('{"node-0": {"ssh": "127.0.0.1:22", "root": "/tmp/n0/"}}', "['node-0'].root"),
        ('{"node-0": {"ssh": "127.0.0.1:22", "host": "x"}}', "['node-0'].host"),
    ],
)
def test_emulated_nodes_map_errors_name_the_setting(value: str, field: str) -> None:
    with pytest.raises(ConfigError) as caught:  # a setting, not the spec: still exit 2
        emulated_nodes_from_env({EMULATED_NODES_ENV_VAR: value})
    assert caught.value.variable.endswith(field)
    assert caught.value.variable.startswith(EMULATED_NODES_ENV_VAR)
