"""Wheel staging in moto's S3 (a private bucket, a plain object URL) and the endpoint override."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

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
from skyinfra.targets.aws.staging import (
    LIFECYCLE_RULE_ID,
    STAGED_WHEEL_EXPIRY_DAYS,
    default_bucket_name,
    delete_staged,
    ensure_bucket,
    stage_wheel,
    staging_prefix,
)
from tests.support.aws import REGION


def make_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("skyinfra_runtime/__init__.py", "VERSION = '0.1.0'\n")
    return path


OWNER = "123456789012"


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1"])
def test_stage_wheel_in_a_private_bucket_with_a_plain_url(
    aws_env: str, tmp_path: Path, region: str
) -> None:
    wheel = make_wheel(tmp_path / "skyinfra_runtime-0.1.0-py3-none-any.whl")
    s3 = boto3.client("s3", **boto3_client_kwargs(region, Emulator(url=aws_env)))
    bucket = default_bucket_name(OWNER, region)
    prefix = staging_prefix("demo", "ws-0123456789abcdef")
    staged = stage_wheel(s3, wheel, bucket=bucket, region=region, owner=OWNER, prefix=prefix)
    assert staged.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert staged.key == f"demo/ws-0123456789abcdef/{staged.sha256}/{wheel.name}"
    # The object's plain address: no query string, so no credential, token or signature.
    assert staged.url == f"{aws_env}/{bucket}/{staged.key}"
    body = s3.get_object(Bucket=bucket, Key=staged.key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == staged.sha256
    assert_private(s3, bucket)
    # Staging again is idempotent (bucket exists).
    assert stage_wheel(s3, wheel, bucket=bucket, region=region, owner=OWNER, prefix=prefix) == (
        staged
    )


def assert_private(s3: object, bucket: str) -> None:
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]  # type: ignore[attr-defined]
    assert all(block.values())
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]  # type: ignore[attr-defined]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    lifecycle = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]  # type: ignore[attr-defined]
    assert [(r["ID"], r["Status"], r["Expiration"]["Days"]) for r in lifecycle] == [
        (LIFECYCLE_RULE_ID, "Enabled", STAGED_WHEEL_EXPIRY_DAYS)
    ]


def test_an_existing_bucket_is_made_private_and_every_call_names_its_owner(
    aws_env: str, tmp_path: Path
) -> None:
    """A bucket skyinfra did not create (nothing set on it) gets the same settings; every
    S3 call carries ExpectedBucketOwner; `down`'s delete takes this workspace's objects only."""
    wheel = make_wheel(tmp_path / "skyinfra_runtime-0.1.0-py3-none-any.whl")
    s3 = boto3.client("s3", **boto3_client_kwargs(REGION, Emulator(url=aws_env)))
    bucket = "someone-made-this-bucket"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="demo/ws-ffffffffffffffff/x/other.whl", Body=b"x")
    calls: list[tuple[str, dict[str, object]]] = []
    s3.meta.events.register(
        "provide-client-params.s3.*",
        lambda params, model, **_: calls.append((model.name, dict(params))),
    )
    prefix = staging_prefix("demo", "ws-0123456789abcdef")
    staged = stage_wheel(s3, wheel, bucket=bucket, region=REGION, owner=OWNER, prefix=prefix)
    deleted = delete_staged(s3, bucket=bucket, prefix=prefix, owner=OWNER)
    assert deleted == [staged.key]
    names = [name for name, _ in calls]
    for needed in (
        "HeadBucket",
        "PutPublicAccessBlock",
        "PutBucketEncryption",
        "PutBucketLifecycleConfiguration",
        "PutObject",
        "ListObjectsV2",
        "DeleteObjects",
    ):
        assert needed in names
    assert "CreateBucket" not in names
    assert all(params.get("ExpectedBucketOwner") == OWNER for _, params in calls), calls
    assert_private(s3, bucket)
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert left == ["demo/ws-ffffffffffffffff/x/other.whl"]  # another workspace's wheel
    with pytest.raises(ValueError):
        delete_staged(s3, bucket=bucket, prefix="demo/", owner=OWNER)


def test_tls_only_policy_refuses_plain_http(aws_env: str) -> None:
    """On AWS (an https endpoint) the bucket gets a policy denying requests without TLS;
    moto enforces bucket policies, so over its plain-http endpoint the policy must refuse."""
    s3 = boto3.client("s3", **boto3_client_kwargs(REGION, Emulator(url=aws_env)))
    bucket = "skyinfra-tls-only-check"
    ensure_bucket(s3, bucket, REGION, OWNER)  # http endpoint: no policy, still usable
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    ensure_bucket(s3, bucket, REGION, OWNER, tls_only=True)  # as over https
    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    (statement,) = policy["Statement"]
    assert (statement["Effect"], statement["Principal"]) == ("Deny", "*")
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert statement["Resource"] == [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]
    with pytest.raises(ClientError, match=r"403|AccessDenied|Forbidden"):
        s3.get_object(Bucket=bucket, Key="k")


def test_stage_missing_wheel_is_a_clear_error(aws_env: str, tmp_path: Path) -> None:
    s3 = boto3.client("s3", **boto3_client_kwargs(REGION, Emulator(url=aws_env)))
    with pytest.raises(PreflightError, match=r"missing or not a \.whl"):
        stage_wheel(
            s3, tmp_path / "nope.whl", bucket="b-x", region=REGION, owner=OWNER, prefix="c/w/"
        )


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
