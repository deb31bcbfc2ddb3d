"""``ssh.checkpoints_url``: the ssh target's checkpoint sets kept in S3 (or an S3-compatible
store at ``ssh.s3_endpoint``) when the hosts can reach it, as AWS nodes keep theirs.

Each node's ``checkpoints.json`` (written by the enrolment; the runtime's ckptsync reads it)
says where the store is and that its agents sign with the operator's credentials: the hosts
have no instance role. Those credentials are the operator's ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), else those of the AWS profile the
shared config files give (``AWS_PROFILE``, else default: static keys, SSO, a role to assume),
read when a job starts and sent on every node agent's stdin with the job's secrets
(skyinfra.run.jobstart): never in a file on a host, in a log or on a command line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from skyinfra_runtime.ckptsync import OPERATOR_CREDENTIALS
from skyinfra_runtime.s3 import URL_EXPECTED, Credentials, parse_url, url_problem

from skyinfra.errors import SpecError
from skyinfra.spec import Problems

STORE_KEYS = ("checkpoints_url", "s3_endpoint", "s3_region")
DEFAULT_REGION = "us-east-1"
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
KEY_ENV, SECRET_ENV, TOKEN_ENV = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"
PROFILE_ENV = "AWS_PROFILE"


@dataclass(frozen=True)
class SshCheckpointStore:
    url: str  # s3://bucket/prefix
    region: str = DEFAULT_REGION
    # http(s)://host[:port] of an S3-compatible store (path-style); None: AWS S3 itself.
    endpoint: str | None = None

    def to_dict(self) -> dict[str, str]:
        table = {"checkpoints_url": self.url, "s3_region": self.region}
        if self.endpoint:
            table["s3_endpoint"] = self.endpoint
        return table

    def bucket_url(self) -> str:
        """Where the nodes reach the bucket: path-style under the endpoint, else S3's
        virtual-hosted address in the region."""
        bucket, _ = parse_url(self.url)
        if self.endpoint:
            return f"{self.endpoint.rstrip('/')}/{bucket}"
        return f"https://{bucket}.s3.{self.region}.amazonaws.com"

    def node_settings(self) -> str:
        """Each node's checkpoints.json: where the store is; no credential."""
        settings = {
            "url": self.url,
            "region": self.region,
            "bucket_url": self.bucket_url(),
            "credentials": OPERATOR_CREDENTIALS,
        }
        return json.dumps(settings, indent=2) + "\n"


def parse_store(raw: Mapping[str, Any], problems: Problems) -> SshCheckpointStore | None:
    """The three keys of ``[ssh]``; each problem added to ``problems`` naming the field."""
    url = raw.get("checkpoints_url")
    if url is None:
        for key in ("s3_endpoint", "s3_region"):
            if key in raw:
                problems.found.append(
                    SpecError(f"ssh.{key}", raw[key], "set only with ssh.checkpoints_url")
                )
        return None
    problem = url_problem(url)
    if problem:
        problems.found.append(SpecError("ssh.checkpoints_url", url, f"{URL_EXPECTED} ({problem})"))
    region = raw.get("s3_region", DEFAULT_REGION)
    if not isinstance(region, str) or not _REGION.match(region):
        problems.found.append(
            SpecError("ssh.s3_region", region, 'the bucket\'s region, e.g. "eu-west-1"')
        )
    endpoint = raw.get("s3_endpoint")
    endpoint_problem = None if endpoint is None else _endpoint_problem(endpoint)
    if endpoint_problem:
        problems.found.append(
            SpecError(
                "ssh.s3_endpoint",
                endpoint,
                "the S3-compatible store's address as the hosts reach it, http(s)://HOST[:PORT] "
                f'with no path ({endpoint_problem}), e.g. "https://minio.lab.example.com:9000"',
            )
        )
    if problem or endpoint_problem or not isinstance(region, str) or not _REGION.match(region):
        return None
    return SshCheckpointStore(str(url), region, None if endpoint is None else str(endpoint))


def _endpoint_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return "not a string"
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "it does not start with http:// or https:// and a host"
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return "it has a path, a query or a user"
    try:
        _ = parts.port  # one out of range raises
    except ValueError:
        return "its port is not a number from 1 to 65535"
    return None


def operator_credentials(
    store: SshCheckpointStore, environ: Mapping[str, str]
) -> Credentials | SpecError:
    """The credentials each node's agent signs with, as the AWS CLI finds them here: this
    environment's keys, else the profile (``AWS_PROFILE``, else ``default``) of the shared
    credentials and config files, with what a profile may name (SSO, a role to assume, a
    credential process). Never the instance role or a container's of the machine skyinfra
    runs on: the hosts are not that machine. A SpecError naming ssh.checkpoints_url and what
    to set when there are none, or naming the profile when it fails."""
    key, secret = environ.get(KEY_ENV, ""), environ.get(SECRET_ENV, "")
    if key and secret:
        return Credentials(key, secret, environ.get(TOKEN_ENV) or None)
    found = _profile_credentials(store, environ)
    if found is not None:
        return found
    return SpecError(
        "ssh.checkpoints_url", store.url,
        f"credentials for it where skyinfra runs: the hosts have no instance role, so each "
        f"job's agents get this shell's {KEY_ENV} and {SECRET_ENV} (and {TOKEN_ENV} for "
        "temporary ones), or those of its AWS profile (AWS_PROFILE, else default, in "
        "~/.aws/credentials or ~/.aws/config), on their stdin, never in a file there; export "
        "them or set a profile, or remove ssh.checkpoints_url to keep the checkpoints in a "
        "folder on each host",
    )  # fmt: skip


# botocore's providers of its default chain this machine's own identity would come from: the
# hosts sign with the operator's credentials, never with this machine's role.
_MACHINE_PROVIDERS = ("env", "container-role", "iam-role", "boto-config", "ec2-credentials-file")
_PROFILE_SETTINGS = (
    ("profile", PROFILE_ENV),
    ("credentials_file", "AWS_SHARED_CREDENTIALS_FILE"),
    ("config_file", "AWS_CONFIG_FILE"),
)


def _profile_credentials(
    store: SshCheckpointStore, environ: Mapping[str, str]
) -> Credentials | SpecError | None:
    """The credentials of the AWS profile ``environ`` names (``AWS_PROFILE``, else default)
    in the shared files, frozen as they are now (temporary ones keep their session token);
    None where there is no such file or the profile holds none; a SpecError naming the
    profile when it is not there or gives none."""
    import botocore.session
    from botocore.exceptions import BotoCoreError, ProfileNotFound

    session = botocore.session.Session()
    for setting, name in _PROFILE_SETTINGS:
        if environ.get(name):
            session.set_config_variable(setting, environ[name])
    profile = environ.get(PROFILE_ENV) or "default"
    try:
        resolver = session.get_component("credential_provider")
        for method in _MACHINE_PROVIDERS:
            resolver.remove(method)  # one this botocore lacks is passed over
        loaded = resolver.load_credentials()
        frozen = loaded.get_frozen_credentials() if loaded is not None else None
    except ProfileNotFound:
        known = sorted(session.available_profiles)
        return SpecError(
            "ssh.checkpoints_url",
            store.url,
            f"credentials for it from {PROFILE_ENV}={profile!r}, which is no profile of "
            f"~/.aws/config or ~/.aws/credentials (those there: {', '.join(known) or 'none'}): "
            f"set {PROFILE_ENV} to one of them, or export {KEY_ENV} and {SECRET_ENV}",
        )
    except BotoCoreError as err:
        return SpecError(
            "ssh.checkpoints_url",
            store.url,
            f"credentials for it from the AWS profile {profile!r}, which gave none ({err}): "
            f"renew them (e.g. `aws sso login --profile {profile}`), or export {KEY_ENV} and "
            f"{SECRET_ENV}",
        )
    if frozen is None or not frozen.access_key or not frozen.secret_key:
        return None
    return Credentials(frozen.access_key, frozen.secret_key, frozen.token or None)
