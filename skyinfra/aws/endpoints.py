"""Point boto3 and the rendered provider block at an AWS API emulator (moto, LocalStack).

Set ``SKYINFRA_AWS_ENDPOINT_URL=http://127.0.0.1:5000`` and every AWS call skyinfra makes, from
Python and from Terraform, goes there instead of AWS.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from skyinfra.errors import ConfigError

ENDPOINT_ENV_VAR = "SKYINFRA_AWS_ENDPOINT_URL"

# The AWS services the rendered root module talks to (provider `endpoints {}` keys).
TERRAFORM_SERVICES = ("ec2", "iam", "s3", "ssm", "sts")

# Emulators accept any credentials; these are the values LocalStack documents and moto
# accepts. They are placeholders, never secrets.
EMULATOR_ACCESS_KEY = "test"
EMULATOR_SECRET_KEY = "test"


@dataclass(frozen=True)
class Emulator:
    """An AWS API emulator reachable at ``url``."""

    url: str
    env_var: str = ENDPOINT_ENV_VAR
    services: tuple[str, ...] = TERRAFORM_SERVICES
    access_key: str = EMULATOR_ACCESS_KEY
    secret_key: str = EMULATOR_SECRET_KEY


def parse_endpoint_url(value: str) -> str:
    """Check an endpoint override and return it without a trailing slash."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            ENDPOINT_ENV_VAR,
            value,
            "an http(s) URL of an AWS API emulator, e.g. http://127.0.0.1:5000",
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(ENDPOINT_ENV_VAR, value, "a URL without path, query or fragment")
    return f"{parts.scheme}://{parts.netloc}"


def emulator_from_env(environ: Mapping[str, str] | None = None) -> Emulator | None:
    """The emulator named by SKYINFRA_AWS_ENDPOINT_URL, or None to talk to AWS itself."""
    env = os.environ if environ is None else environ
    value = env.get(ENDPOINT_ENV_VAR, "")
    if not value.strip():
        return None
    return Emulator(url=parse_endpoint_url(value))


def boto3_client_kwargs(region: str, emulator: Emulator | None) -> dict[str, Any]:
    """Keyword arguments for ``boto3.client(service, **kwargs)`` / ``session.client``."""
    kwargs: dict[str, Any] = {"region_name": region}
    if emulator is not None:
        from botocore.config import Config

        kwargs["endpoint_url"] = emulator.url
        # Emulators serve S3 on one host, so bucket names go in the path, not the hostname.
        kwargs["config"] = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2})
    return kwargs
