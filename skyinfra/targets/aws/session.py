"""boto3 clients for one region, pointed at the AWS API emulator when one is configured.

Every AWS call of the target (the preflight and its lookups, the subnet and AMI lookups, the
wheel staging) goes through one :class:`AwsClients`, so each service's client is made once
and every one of them honours ``SKYINFRA_AWS_ENDPOINT_URL`` (endpoints.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from skyinfra.targets.aws.endpoints import Emulator, boto3_client_kwargs, emulator_from_env
from skyinfra.targets.aws.spec import AwsSpec

if TYPE_CHECKING:
    from skyinfra.spec import ClusterSpec


class AwsClients:
    """boto3 clients for one region, pointed at the emulator when one is configured."""

    def __init__(
        self, session: boto3.session.Session, region: str, emulator: Emulator | None
    ) -> None:
        self.session = session
        self.region = region
        self.emulator = emulator
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            kwargs = boto3_client_kwargs(self.region, self.emulator)
            if service == "s3":
                # Presign with SigV4: botocore otherwise picks the legacy SigV2 presigner in
                # some regions (us-east-1, eu-west-1), which S3 is retiring.
                sigv4 = Config(signature_version="s3v4")
                kwargs["config"] = kwargs["config"].merge(sigv4) if "config" in kwargs else sigv4
            self._clients[service] = self.session.client(service, **kwargs)
        return self._clients[service]

    def secret_values(self) -> list[str]:
        """The caller's credentials (access key id, secret key, session token): none of them
        may end up in user data (the nodes fetch the wheel with their own role, staging.py)."""
        credentials = self.session.get_credentials()
        if credentials is None:
            return []
        frozen = credentials.get_frozen_credentials()
        values = (frozen.access_key, frozen.secret_key, frozen.token)
        return [value for value in values if value]


def clients_for(spec: ClusterSpec) -> AwsClients:
    """The clients of the spec's region, in a new boto3 session."""
    return AwsClients(boto3.session.Session(), spec.section_as(AwsSpec).region, emulator_from_env())
