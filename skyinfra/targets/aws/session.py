"""boto3 clients for one region, pointed at the AWS API emulator when one is configured.

Every AWS call of the target (the preflight and its lookups, the subnet and AMI lookups, the
wheel staging) goes through one :class:`AwsClients`, so each service's client is made once
and every one of them honours ``SKYINFRA_AWS_ENDPOINT_URL`` (endpoints.py).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.loaders import Loader

from skyinfra.targets.aws.endpoints import Emulator, boto3_client_kwargs, emulator_from_env
from skyinfra.targets.aws.spec import AwsSpec

if TYPE_CHECKING:
    from skyinfra.spec import ClusterSpec


# One loader of botocore's data (service models, endpoints) per data path, for the process: a
# new session would decode the EC2 model (megabytes of JSON) again, ~0.2 s of CPU each time.
_LOADERS: dict[Any, Loader] = {}
_LOADERS_LOCK = threading.Lock()


def new_session() -> boto3.session.Session:
    """A new boto3 session (its own credentials and clients, as ``boto3.session.Session()``)
    that reads botocore's data through the process's one loader, which caches what it read."""
    core = botocore.session.get_session()
    data_path = core.get_config_variable("data_path")
    with _LOADERS_LOCK:
        shared = _LOADERS.get(data_path)
        if shared is None:
            session = boto3.session.Session(botocore_session=core)
            _LOADERS[data_path] = core.get_component("data_loader")
            return session
        searched = len(shared.search_paths)
        core.register_component("data_loader", shared)
        session = boto3.session.Session(botocore_session=core)
        # boto3 adds its own data folder to the loader of every session: once is enough.
        del shared.search_paths[searched:]
        return session


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
    return AwsClients(new_session(), spec.section_as(AwsSpec).region, emulator_from_env())
