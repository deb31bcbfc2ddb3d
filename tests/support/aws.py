"""What the AWS tests share besides fixtures: the region they use, where this machine keeps
the AWS provider, and a rendered AWS root module written the way the target writes it (its own
copies of the modules, so it is self-contained). Terraform itself is the product's engine
(skyinfra.terraform.EmbeddedTerraform): see the ``terraform`` fixture in conftest.py.
"""

from __future__ import annotations

import base64
import gzip
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from skyinfra.render import module_files, module_source
from skyinfra.targets.aws.endpoints import Emulator
from skyinfra.targets.aws.render import (
    MODULES,
    AwsClusterParams,
    planned_private_ips,
    render_root_module,
)
from skyinfra.terraform import EmbeddedTerraform, provider_mirror
from skyinfra.workspace import Workspace

REGION = "us-east-1"
# The environment every emulated AWS test runs with: dummy credentials, never real ones, and
# no AWS config files. No instance metadata service either: without credentials boto3 would ask
# 169.254.169.254, a packet beyond loopback, which the loopback guard refuses.
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
# What a user's environment may hold that would mix other credentials with the dummy ones.
AMBIENT_AWS_CREDENTIALS = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
# The `terraform` fixture: the product's engine for a folder, wired to the provider mirror.
TerraformFactory = Callable[[Path], EmbeddedTerraform]
REPO = Path(__file__).resolve().parents[2]
MODULES_DIR = REPO / "infra" / "modules" / "aws"

# A test-only fallback where this machine image keeps the AWS provider, tried after
# SKYINFRA_TF_PROVIDER_MIRROR (skyinfra itself only ever reads the variable).
KNOWN_MIRROR_LOCATIONS = ("/opt/tf-plugins",)
AWS_PROVIDER_SUBPATH = "registry.terraform.io/hashicorp/aws"


def find_plugin_mirror() -> Path | None:
    """The mirror holding hashicorp/aws: the engine's SKYINFRA_TF_PROVIDER_MIRROR, else a
    known place on this machine image."""
    configured = provider_mirror()
    candidates = [configured] if configured else [Path(p) for p in KNOWN_MIRROR_LOCATIONS]
    for candidate in candidates:
        if (candidate / AWS_PROVIDER_SUBPATH).is_dir():
            return candidate
    return None


def write_root(tmp_path: Path, params: AwsClusterParams, emulator: Emulator | None = None) -> Path:
    """Render the AWS root module for ``params`` into ``tmp_path/root`` (placeholder user
    data), with its module copies, as the target writes a workspace."""
    root = tmp_path / "root"
    files = render_root_module(
        params,
        modules_source=module_source("aws"),
        user_data={name: "#cloud-config\n{}\n" for name in planned_private_ips(params)},
        emulator=emulator,
    )
    Workspace(root).write_files({**files, **module_files(*MODULES)})
    return root


def user_data_text(entry: Mapping[str, str | None]) -> str:
    """A node's cloud-config from the tfvars' user_data entry: plain text, or (past EC2's
    16 KB) the gzip skyinfra passes as base64 (skyinfra.targets.aws.render.encode_user_data)."""
    text = entry.get("text")
    if text is not None:
        return text
    return gzip.decompress(base64.b64decode(entry["base64"] or "")).decode()


@contextmanager
def emptied_bucket(endpoint: str, name: str) -> Iterator[Any]:
    """A bucket made on the emulator at ``endpoint`` for one test (its S3 client yielded),
    emptied and deleted after it."""
    import boto3

    client = boto3.client("s3", region_name=REGION, endpoint_url=endpoint)
    client.create_bucket(Bucket=name)
    try:
        yield client
    finally:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            for item in page.get("Contents", []):
                client.delete_object(Bucket=name, Key=item["Key"])
        client.delete_bucket(Bucket=name)
