"""Stage the runtime wheel in S3 and hand the nodes a presigned URL plus its sha256.

Nodes need no AWS permissions for this: the URL is the capability, it expires, and the node
checks the sha256 before installing (cloud-init's provision.sh).

Temporary credentials (SSO, an assumed role, anything with AWS_SESSION_TOKEN): the presigned
URL then carries the session token as ``X-Amz-Security-Token`` (checked with botocore 1.44:
SigV4 and the legacy SigV2 presigner both add it), and the URL lands in every node's user
data. What that means:
- anyone who can read the user data (every process on the node through the instance metadata
  service, any principal allowed ec2:DescribeInstanceAttribute) sees the token and the access
  key id. The token is not usable on its own: requests must be signed with the secret key,
  which never leaves the operator's machine (the AWS target refuses user data that contains
  it). What they can do is fetch this one wheel until the URL expires, which is the point.
- the URL dies when the credentials do, whatever ``expires_s`` says: a one-hour SSO session
  gives a URL good for at most that hour. Nodes fetch the wheel within minutes of `up`, and
  every `up` presigns afresh (a node re-created later gets a new URL), so this only bites a
  node whose first boot is delayed past the session's end.
- the token adds one to two KB to each node's user data (16 KB limit; gzip takes over above).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from skyinfra.errors import PreflightError

# Long enough for slow boots (package updates, big AMIs); short enough to be worthless later.
DEFAULT_URL_EXPIRY_S = 6 * 3600


@dataclass(frozen=True)
class StagedWheel:
    bucket: str
    key: str
    filename: str
    sha256: str
    url: str


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_bucket_name(account_id: str, region: str) -> str:
    """One bucket per account and region, like the CDK's bootstrap bucket."""
    return f"skyinfra-staging-{account_id}-{region}"


def ensure_bucket(s3: Any, bucket: str, region: str) -> None:
    """Create the private staging bucket when it is missing (idempotent)."""
    try:
        s3.head_bucket(Bucket=bucket)
        return
    except ClientError as err:
        code = str(err.response.get("Error", {}).get("Code"))
        if code in ("403", "AccessDenied"):
            raise PreflightError(
                f"S3 bucket {bucket!r} exists but belongs to someone else or is not readable: "
                "set another staging bucket name"
            ) from None
        if code not in ("404", "NoSuchBucket", "NotFound"):
            raise PreflightError(f"cannot check S3 bucket {bucket!r}: {err}") from None
    create: dict[str, Any] = {"Bucket": bucket}
    # us-east-1 is S3's default location and rejects an explicit LocationConstraint.
    if region != "us-east-1":
        create["CreateBucketConfiguration"] = {"LocationConstraint": region}
    s3.create_bucket(**create)
    s3.put_public_access_block(
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )


def stage_wheel(
    s3: Any,
    wheel: Path,
    *,
    bucket: str,
    region: str,
    cluster: str,
    expires_s: int = DEFAULT_URL_EXPIRY_S,
) -> StagedWheel:
    """Upload ``wheel`` under ``<cluster>/<sha256>/<filename>`` and presign a GET for it."""
    if not wheel.is_file() or wheel.suffix != ".whl":
        raise PreflightError(f"runtime wheel {wheel} is missing or not a .whl file: build it first")
    digest = sha256_of(wheel)
    key = f"{cluster}/{digest}/{wheel.name}"
    try:
        ensure_bucket(s3, bucket, region)
        s3.upload_file(str(wheel), bucket, key, ExtraArgs={"ContentType": "application/zip"})
        # With temporary credentials the URL includes X-Amz-Security-Token (module docstring).
        url = s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s
        )
    except (ClientError, BotoCoreError) as err:
        raise PreflightError(
            f"could not stage the runtime wheel in s3://{bucket}/{key}: {err}. Check that the "
            "credentials may create buckets and put objects (s3:CreateBucket, s3:PutObject)."
        ) from None
    return StagedWheel(bucket=bucket, key=key, filename=wheel.name, sha256=digest, url=str(url))
