"""Fixtures of the AWS tests: Terraform with the provider mirror, moto's server on loopback,
a real sshd on loopback."""

from __future__ import annotations

import datetime
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra.targets.aws.preflight import DEFAULT_DLAMI_PARAMETER
from skyinfra.terraform import MIRROR_ENV, PLUGIN_CACHE_ENV, EmbeddedTerraform
from skyinfra.transport.ssh import SshTarget
from tests.support.aws import (
    AMBIENT_AWS_CREDENTIALS,
    DUMMY_AWS_ENV,
    REGION,
    TerraformFactory,
    find_plugin_mirror,
)
from tests.support.tools import require_system_tool


def seed_dlami(ami: str, name: str = DEFAULT_DLAMI_PARAMETER) -> None:
    """Put a public DLAMI parameter into moto's SSM backend (its API refuses /aws/...)."""
    # Imported here: tests/conftest.py imports this module in every worker, and moto's
    # models are 1.7 s of CPU a worker that only the AWS tests need.
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import Parameter, ssm_backends

    store = ssm_backends[DEFAULT_ACCOUNT_ID][REGION]._parameters
    store[name] = [
        Parameter(
            account_id=DEFAULT_ACCOUNT_ID,
            name=name,
            value=ami,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=datetime.datetime.now(),
            version=1,
            data_type="aws:ec2:image",
        )
    ]


def unseed_dlami(name: str = DEFAULT_DLAMI_PARAMETER) -> None:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import ssm_backends

    ssm_backends[DEFAULT_ACCOUNT_ID][REGION]._parameters.pop(name, None)


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
def terraform(plugin_mirror: Path, tf_plugin_cache: Path) -> TerraformFactory:
    """The product's engine for a folder, with providers only from the mirror (no registry
    traffic) and the worker's plugin cache (tests/conftest.py)."""
    env = {**os.environ, MIRROR_ENV: str(plugin_mirror), PLUGIN_CACHE_ENV: str(tf_plugin_cache)}
    return lambda workdir: EmbeddedTerraform(workdir, env=env)


def logging_retried_calls(plain: Callable[..., None]) -> Callable[..., None]:
    """Make moto's server log, beside its line per request, each call that is an AWS SDK's
    retry (`amz-sdk-request: attempt=N` over 1, the same invocation id each attempt). Evidence
    for a known flake: the AWS provider now and then meets moto's answer to its own earlier
    attempt (a revoke that finds the rule gone); a failing test's captured log shows whether
    that call was a retry. Wraps the handler's ``log_request``."""

    def log_request(self: Any, code: int | str = "-", size: int | str = "-") -> None:
        headers = getattr(self, "headers", None)
        attempt = headers.get("amz-sdk-request", "") if headers is not None else ""
        if attempt and not attempt.startswith("attempt=1;"):
            self.log(
                "info",
                "retried call (%s, invocation %s) answered %s",
                attempt,
                headers.get("amz-sdk-invocation-id", "?"),
                code,
            )
        plain(self, code, size)

    return log_request


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """moto's server in this process, on 127.0.0.1 (its backends are reachable for seeding)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        logged = logging_retried_calls(MotoRequestHandler.log_request)
        mp.setattr(MotoRequestHandler, "log_request", logged)
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
    for name, value in DUMMY_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    for name in AMBIENT_AWS_CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    return moto_url


@pytest.fixture
def ec2(aws_env: str):  # type: ignore[no-untyped-def]
    return boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)


SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshTarget, Path]]:
    """sshd on 127.0.0.1 with throwaway host and user keys: (target, private key)."""
    require_system_tool(SSHD if os.access(SSHD, os.X_OK) else None, "openssh-server")
    base = tmp_path_factory.mktemp("sshd")
    host_key = base / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    user_key = base / "user_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(user_key)], check=True)
    authorized = base / "authorized_keys"
    authorized.write_text((base / "user_ed25519.pub").read_text())
    authorized.chmod(0o600)
    port = free_port()
    # The login user's HOME is a fresh folder, as a new node's user has: bash, started by sshd,
    # sources ~/.bashrc even for a command, and this machine's own user's (pyenv's init and
    # rehash, about 0.1 s of CPU a command) is no part of a node.
    home = base / "home"
    home.mkdir()
    config = base / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {authorized}\nPidFile {base}/sshd.pid\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n"
        f"SetEnv HOME={home}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE, text=True
    )
    try:
        # Wait until sshd accepts connections (it needs a moment to bind).
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.skip(f"sshd did not start: {proc.stderr.read() if proc.stderr else ''}")
                time.sleep(0.1)
        yield SshTarget(host="127.0.0.1", user=getpass.getuser(), port=port), user_key
    finally:
        proc.terminate()
        proc.wait(10)
