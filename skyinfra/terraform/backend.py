"""Where a cluster's Terraform state lives: the workspace (default) or a shared S3 backend.

``backend = "s3://bucket/prefix"`` in the spec (or ``--backend``) renders ``backend.tf`` into
the root module: Terraform's S3 backend with its native lock file (``use_lockfile = true``,
Terraform >= 1.10; no DynamoDB table), server-side encryption on, and one state object per
cluster (``<prefix>/<cluster>/terraform.tfstate``). The lock is an object beside the state
(``...tfstate.tflock``), created with a conditional write (``If-None-Match: *``), so two
operators on two machines can never apply at once; its JSON names the holder.
https://developer.hashicorp.com/terraform/language/backend/s3#state-locking

Pure: parsing, rendering and reading Terraform's lock error. No I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from skyinfra.errors import SpecError

# The file the backend block goes to in the root module (absent: state stays local).
BACKEND_FILE = "backend.tf"
STATE_OBJECT = "terraform.tfstate"
# Terraform's S3 lock object lies beside the state, at the state's key plus this (use_lockfile).
LOCK_SUFFIX = ".tflock"
# S3 bucket names: 3-63 characters, lower-case letters, digits, dots and hyphens.
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PREFIX_RE = re.compile(r"^[A-Za-z0-9!_.*'()/-]*$")
_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
EXPECTED = "an S3 URL like 's3://my-team-state/skyinfra' (optionally '?region=eu-west-1')"


@dataclass(frozen=True)
class S3Backend:
    bucket: str
    prefix: str  # no leading or trailing '/'; may be ""
    region: str | None = None  # None: the cluster's own region decides

    @property
    def url(self) -> str:
        tail = f"/{self.prefix}" if self.prefix else ""
        query = f"?region={self.region}" if self.region else ""
        return f"s3://{self.bucket}{tail}{query}"

    def key(self, cluster: str) -> str:
        """The state object of ``cluster``: one per cluster under the prefix."""
        return "/".join(p for p in (self.prefix, cluster, STATE_OBJECT) if p)


def parse_backend(value: object, field: str = "backend") -> S3Backend:
    """``s3://bucket[/prefix][?region=R]`` -> S3Backend; SpecError naming ``field`` otherwise."""
    if not isinstance(value, str):
        raise SpecError(field, value, EXPECTED)
    parts = urlsplit(value.strip())
    if parts.scheme != "s3":
        raise SpecError(field, value, f"{EXPECTED}; only the s3 backend is supported")
    bucket = parts.netloc
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise SpecError(field, value, f"{EXPECTED}; {bucket!r} is not a valid S3 bucket name")
    prefix = parts.path.strip("/")
    if not _PREFIX_RE.match(prefix) or "//" in prefix:
        raise SpecError(field, value, f"{EXPECTED}; the prefix {prefix!r} is not a plain key")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"region"})
    if unknown or parts.fragment:
        raise SpecError(field, value, f"{EXPECTED}; unknown part {unknown or parts.fragment!r}")
    region = query["region"][-1] if "region" in query else None
    if region is not None and not _REGION_RE.match(region):
        raise SpecError(field, value, f"{EXPECTED}; {region!r} is not an AWS region")
    return S3Backend(bucket=bucket, prefix=prefix, region=region)


def _hcl(value: str) -> str:
    return json.dumps(value)


def render_backend(
    backend: S3Backend, cluster: str, *, region: str, endpoint: str | None = None
) -> str:
    """``backend.tf`` for ``cluster``. ``endpoint``: an AWS API emulator's URL (emulator
    mode, SKYINFRA_AWS_ENDPOINT_URL), where S3 is served on one host (path-style) and there
    is no STS or metadata service to ask."""
    lines = [
        f"# Rendered by skyinfra for cluster {_hcl(cluster)}: its state lives in {backend.url}.",
        "# Terraform's S3 lock file guards it (use_lockfile): one apply at a time, team-wide.",
        "",
        "terraform {",
        '  backend "s3" {',
        f"    bucket       = {_hcl(backend.bucket)}",
        f"    key          = {_hcl(backend.key(cluster))}",
        f"    region       = {_hcl(region)}",
        "    encrypt      = true",
        "    use_lockfile = true",
    ]
    if endpoint is not None:
        lines += [
            "",
            "    # Emulator mode: the emulator's conventional dummy credentials, not secrets.",
            f"    endpoints                   = {{ s3 = {_hcl(endpoint)} }}",
            "    use_path_style              = true",
            '    access_key                  = "test"',
            '    secret_key                  = "test"',
            "    skip_credentials_validation = true",
            "    skip_requesting_account_id  = true",
            "    skip_metadata_api_check     = true",
            "    skip_region_validation      = true",
        ]
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def has_backend(workdir: Path) -> bool:
    """Whether the root module in ``workdir`` keeps its state in a shared backend."""
    return (workdir / BACKEND_FILE).is_file()


@dataclass(frozen=True)
class LockInfo:
    """Who holds a state lock, from Terraform's "Error acquiring the state lock"."""

    id: str
    path: str = ""
    operation: str = ""
    who: str = ""
    version: str = ""
    created: str = ""

    def describe(self) -> str:
        parts = [f"lock {self.id}"]
        if self.path:
            parts.append(f"on {self.path}")
        holder = ", ".join(
            p
            for p in (
                f"held by {self.who}" if self.who else "",
                f"for {self.operation}" if self.operation else "",
                f"since {self.created}" if self.created else "",
                f"Terraform {self.version}" if self.version else "",
            )
            if p
        )
        return " ".join(parts) + (f" ({holder})" if holder else "")


LOCK_ERROR = "Error acquiring the state lock"
_LOCK_FIELD = re.compile(r"^\s*(ID|Path|Operation|Who|Version|Created):\s*(.*?)\s*$", re.M)


def parse_lock_error(text: str) -> LockInfo | None:
    """The lock and its holder when ``text`` (Terraform's diagnostics) says the state is
    locked; None for any other failure."""
    if LOCK_ERROR not in text:
        return None
    fields = {name.lower(): value for name, value in _LOCK_FIELD.findall(text)}
    return LockInfo(
        id=fields.get("id", ""),
        path=fields.get("path", ""),
        operation=fields.get("operation", ""),
        who=fields.get("who", ""),
        version=fields.get("version", ""),
        created=fields.get("created", ""),
    )
