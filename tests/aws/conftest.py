"""Fixtures of the AWS tests: Terraform with the provider mirror, moto's server on loopback."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

# pytest puts this folder (no __init__.py) on sys.path, which makes aws_tf importable.
from aws_tf import REGION, Terraform, find_plugin_mirror, write_cli_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def plugin_mirror() -> Path:
    mirror = find_plugin_mirror()
    if mirror is None:
        pytest.skip(
            "no Terraform filesystem mirror with hashicorp/aws: set SKYINFRA_TF_PROVIDER_MIRROR "
            "to a directory holding registry.terraform.io/hashicorp/aws/<version>/<platform>/"
        )
    return mirror


@pytest.fixture(scope="session")
def terraform(plugin_mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Terraform:
    base = tmp_path_factory.mktemp("terraform")
    (base / "plugin-cache").mkdir()
    return Terraform(write_cli_config(base / "cli.tfrc", plugin_mirror, base / "plugin-cache"))


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """moto's server in this process, on 127.0.0.1 (its backends are reachable for seeding)."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws_env(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Dummy credentials for boto3 and Terraform; never real ones from the environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    return moto_url


@pytest.fixture
def ec2(aws_env: str):  # type: ignore[no-untyped-def]
    return boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)
