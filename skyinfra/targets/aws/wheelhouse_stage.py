"""Build the S3 wheelhouse on the operator's machine and stage it (wheelhouse.py is the pure
core and says why). Once per requirement set, platform and Python in an account and region:
when the index object and every wheel it lists are in the bucket, nothing is downloaded or
uploaded. Otherwise pip downloads the wheels into a temporary folder, before anything is
created (a requirement without a wheel for the nodes is the spec's error, exit 2), then the
bucket is made private as for the runtime wheel (staging.ensure_bucket), the wheels are
uploaded and the index last: an interrupted upload leaves no index, and the next `up`
uploads again.

A wheelhouse found staged is refreshed: each of its objects copied onto itself in S3 (no byte
leaves the operator's machine), which restarts the bucket's lifecycle clock. The bucket's one
rule expires every object 7 days after it was written (staging.py), the wheelhouse's too, and
that is what keeps a requirement set no cluster uses any more from being paid for forever; a
prefix filter sparing ``_wheelhouse/`` would keep them all. Refreshed at every `plan` and
`up` that uses it, a wheelhouse has its full 7 days left whenever nodes are launched on it.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

from skyinfra.digests import sha256_of
from skyinfra.errors import PreflightError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.resolve import Resolved
from skyinfra.targets.aws.spec import AwsSpec, jax_requirement
from skyinfra.targets.aws.staging import ensure_bucket, object_url
from skyinfra.targets.aws.wheelhouse import (
    INDEX_NAME,
    NodePlatform,
    StagedWheelhouse,
    WheelFile,
    WheelhouseIndex,
    download_command,
    missing_wheel_error,
    node_platform,
    requirement_set,
    wheelhouse_key,
    wheelhouse_prefix,
)

# pip's download of jax[cuda12] is several GB: minutes on a slow line, never hours.
DOWNLOAD_TIMEOUT_S = 3600
WHEEL_CONTENT_TYPE = "application/zip"
INDEX_CONTENT_TYPE = "application/json"
# The refresh's copies: one CopyObject per object up to S3's 5 GiB limit for it, a multipart
# copy above (boto3's managed copy).
REFRESH_COPY = TransferConfig(multipart_threshold=5 * 1024**3, multipart_chunksize=512 * 1024**2)


@dataclass(frozen=True)
class WheelhouseRequest:
    """What to stage, and where: ``fields`` names the spec field each requirement came from
    (for the error when one has no wheel)."""

    bucket: str
    region: str
    owner: str
    requirements: tuple[str, ...]
    platform: NodePlatform
    fields: Mapping[str, str]
    python: str = sys.executable


def _found(s3: Any, request: WheelhouseRequest, prefix: str) -> WheelhouseIndex | None:
    """The staged index when it and every wheel it lists are in the bucket (the bucket's
    lifecycle rule may have expired some); None otherwise, or without the bucket."""
    try:
        body = s3.get_object(
            Bucket=request.bucket, Key=prefix + INDEX_NAME, ExpectedBucketOwner=request.owner
        )["Body"].read()
        index = WheelhouseIndex.from_json(body.decode())
        present: set[str] = set()
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=request.bucket, Prefix=prefix, ExpectedBucketOwner=request.owner
        )
        for page in pages:
            present.update(item["Key"] for item in page.get("Contents", []))
    except ClientError as err:
        if str(err.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NoSuchBucket"):
            return None
        raise PreflightError(f"cannot read s3://{request.bucket}/{prefix}: {err}") from None
    except (ValueError, KeyError, TypeError):
        return None  # an index from another schema: staged anew
    if all(prefix + f.name in present for f in index.files):
        return index
    return None


def download(request: WheelhouseRequest, dest: Path) -> WheelhouseIndex:
    """pip's wheels for the requirements into ``dest``, and their index. SpecError naming
    the requirement (and its spec field) that has no wheel for the nodes' platform."""
    command = download_command(request.python, request.requirements, request.platform, str(dest))
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise PreflightError(f"could not download the nodes' wheels with pip: {err}") from None
    if done.returncode != 0:
        if "No module named pip" in done.stderr:
            raise PreflightError(
                f"{request.python} has no pip: the S3 wheelhouse is built with "
                "`python -m pip download`; install pip beside skyinfra"
            )
        raise missing_wheel_error(
            done.stderr + done.stdout, request.requirements, request.platform, dict(request.fields)
        )
    files = tuple(
        WheelFile(p.name, sha256_of(p), p.stat().st_size) for p in sorted(dest.glob("*.whl"))
    )
    return WheelhouseIndex(
        key=wheelhouse_key(request.requirements, request.platform),
        requirements=request.requirements,
        platform=request.platform.name,
        files=files,
    )


def stage_wheelhouse(
    s3: Any, request: WheelhouseRequest, *, say: Callable[[str], None] = lambda _: None
) -> StagedWheelhouse:
    """The wheelhouse for ``request`` in the bucket: found there, or built and uploaded."""
    key = wheelhouse_key(request.requirements, request.platform)
    prefix = wheelhouse_prefix(key)
    uploaded: list[str] = []
    index = _found(s3, request, prefix)
    if index is not None and not _refreshed(s3, request, prefix, index):
        index = None  # an object expired between the listing and its copy: staged anew
    if index is None:
        with tempfile.TemporaryDirectory(prefix="skyinfra-wheelhouse-") as folder:
            say(
                f"[skyinfra] downloading wheels for the nodes ({request.platform.name}): "
                + ", ".join(request.requirements)
            )
            index = download(request, Path(folder))
            _upload(s3, request, prefix, Path(folder), index)
        uploaded = [f.name for f in index.files] + [INDEX_NAME]
    text = index.to_json()
    if uploaded:
        say(
            f"[skyinfra] wheelhouse staged at s3://{request.bucket}/{prefix} "
            f"({len(index.files)} wheels, {index.total_bytes / 1e6:.1f} MB)"
        )
    else:
        say(
            f"[skyinfra] wheelhouse s3://{request.bucket}/{prefix} is staged already "
            "(refreshed: expires 7 days from now)"
        )
    return StagedWheelhouse(
        bucket=request.bucket,
        prefix=prefix,
        index_url=object_url(s3, request.bucket, prefix + INDEX_NAME),
        index_sha256=hashlib.sha256(text.encode()).hexdigest(),
        index=index,
        uploaded=tuple(uploaded),
    )


def _refreshed(s3: Any, request: WheelhouseRequest, prefix: str, index: WheelhouseIndex) -> bool:
    """Copy every object of the staged wheelhouse onto itself, the index last (a new object
    to S3's lifecycle rule, its age 0); False when one is gone."""
    # The source is the same bucket: its owner is checked with the destination's.
    mine = {"ExpectedBucketOwner": request.owner}
    objects = [(f.name, WHEEL_CONTENT_TYPE) for f in index.files] + [
        (INDEX_NAME, INDEX_CONTENT_TYPE)
    ]
    try:
        for name, content_type in objects:
            key = prefix + name
            s3.copy(
                {"Bucket": request.bucket, "Key": key},
                request.bucket,
                key,
                # S3 copies an object onto itself only when something of it is replaced.
                ExtraArgs={**mine, "MetadataDirective": "REPLACE", "ContentType": content_type},
                Config=REFRESH_COPY,
            )
    except ClientError as err:
        code = str(err.response.get("Error", {}).get("Code"))
        if code in ("404", "NoSuchKey", "NotFound"):
            return False
        raise PreflightError(
            f"could not refresh the wheelhouse s3://{request.bucket}/{prefix}: {err}. Check "
            "that the credentials may copy objects there (s3:GetObject, s3:PutObject)."
        ) from None
    except BotoCoreError as err:
        raise PreflightError(
            f"could not refresh the wheelhouse s3://{request.bucket}/{prefix}: {err}"
        ) from None
    return True


def _upload(
    s3: Any, request: WheelhouseRequest, prefix: str, folder: Path, index: WheelhouseIndex
) -> None:
    mine = {"ExpectedBucketOwner": request.owner}
    try:
        ensure_bucket(s3, request.bucket, request.region, request.owner)
        for wheel in index.files:
            s3.upload_file(
                str(folder / wheel.name),
                request.bucket,
                prefix + wheel.name,
                ExtraArgs={**mine, "ContentType": WHEEL_CONTENT_TYPE},
            )
        s3.put_object(
            Bucket=request.bucket,
            Key=prefix + INDEX_NAME,
            Body=index.to_json().encode(),
            ContentType=INDEX_CONTENT_TYPE,
            **mine,
        )
    except (ClientError, BotoCoreError) as err:
        raise PreflightError(
            f"could not stage the wheelhouse in s3://{request.bucket}/{prefix}: {err}. Check "
            "that the credentials may put objects there (s3:PutObject)."
        ) from None


def requirement_fields(jax: str | None, python_packages: Sequence[str], uv: str) -> dict[str, str]:
    """Each requirement's spec field, for the error naming one without a wheel."""
    fields = {p: "python_packages" for p in python_packages}
    if jax:
        fields[jax] = "aws.jax_extra"
    fields[uv] = "uv (skyinfra's installer)"
    return fields


def node_wheelhouse(
    s3: Any,
    spec: ClusterSpec,
    bucket: str,
    resolved: Resolved,
    uv_version: str,
    say: Callable[[str], None],
) -> StagedWheelhouse:
    """A private network's wheelhouse for the spec's nodes, in the account's staging bucket."""
    spec_aws = spec.section_as(AwsSpec)
    jax = jax_requirement(spec_aws)
    uv = f"uv=={uv_version}" if uv_version else "uv"
    request = WheelhouseRequest(
        bucket=bucket,
        region=spec_aws.region,
        owner=resolved.account_id,
        requirements=requirement_set(jax, spec.python_packages, uv_version),
        platform=node_platform(resolved.architectures),
        fields=requirement_fields(jax, spec.python_packages, uv),
    )
    return stage_wheelhouse(s3, request, say=say)
