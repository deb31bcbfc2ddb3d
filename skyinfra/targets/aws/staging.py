"""Stage the runtime wheel in S3 where only the cluster's nodes may read it.

No credential leaves the operator's machine. The nodes get the object's plain address (no
query string: no access key id, no session token, no signature) and fetch it with their
instance role (infra/scripts/fetch-s3-object.py signs the GET with the role's temporary
credentials from the instance metadata service); the nodes module grants that role
s3:GetObject on this workspace's prefix and nothing else. A presigned URL would not do:
every presigned URL carries the signer's access key id (``X-Amz-Credential``) and, with
temporary credentials, the session token (``X-Amz-Security-Token``), and the user data holding
it lands in terraform.tfvars.json and terraform.tfstate whatever its expiry
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-presigned-url.html: "anyone with
the URL"; and the IAM guide's advice to use roles for applications on EC2 instead of passing
credentials, https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_use_switch-role-ec2.html).

The bucket (one per account and region) is made private and kept so on every `up`, whether
or not skyinfra created it, every call with ``ExpectedBucketOwner`` (a bucket of that name in
another account is refused, https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucket-owner-condition.html):
public access blocked, default encryption (SSE-S3), a policy denying requests without TLS
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/security-best-practices.html) and a
lifecycle rule expiring staged wheels (every `up` uploads the wheel again, so the clock starts
at the last `up`; a private network's wheelhouse, under the same rule, is refreshed by every
`plan` and `up` that uses it: wheelhouse_stage.py). `down` deletes the workspace's staged
objects (:func:`delete_staged`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from skyinfra.digests import sha256_of
from skyinfra.errors import PreflightError

# Staged wheels expire this many days after the last `up` uploaded them (a node made later,
# e.g. by an `up` after an idle shutdown, re-uploads first).
STAGED_WHEEL_EXPIRY_DAYS = 7
LIFECYCLE_RULE_ID = "skyinfra-expire-staged-wheels"
ABORT_UPLOADS_RULE_ID = "skyinfra-abort-incomplete-uploads"


@dataclass(frozen=True)
class StagedWheel:
    bucket: str
    key: str
    filename: str
    sha256: str
    # The object's plain address (no credentials in it): the nodes sign their GET themselves.
    url: str
    # The prefix the nodes' role may read (``<cluster>/<workspace id>/``).
    prefix: str


def default_bucket_name(account_id: str, region: str) -> str:
    """One bucket per account and region, like the CDK's bootstrap bucket."""
    return f"skyinfra-staging-{account_id}-{region}"


def staging_prefix(cluster: str, workspace_id: str) -> str:
    """Where one workspace's wheels go: the cluster name for people, the id for uniqueness
    (two projects may both have a cluster called ``train``)."""
    return f"{cluster}/{workspace_id}/"


def partition_of(region: str) -> str:
    """The ARN partition of a region (aws, aws-cn, aws-us-gov)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def tls_only_policy(bucket: str, region: str = "us-east-1") -> str:
    arn = f"arn:{partition_of(region)}:s3:::{bucket}"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [arn, f"{arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        },
        sort_keys=True,
    )


def _error_code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code"))


def ensure_bucket(
    s3: Any,
    bucket: str,
    region: str,
    owner: str,
    *,
    tls_only: bool | None = None,
    expiry_days: int | None = STAGED_WHEEL_EXPIRY_DAYS,
) -> None:
    """Create the staging bucket when it is missing, then (created or found) make it private:
    public access block, default encryption, TLS-only policy, expiry of staged wheels. Every
    call names ``owner`` (the account id) as the expected bucket owner.

    ``tls_only`` (default: whether the client reaches S3 over https, as it always does on
    AWS) sets the policy that denies requests without TLS; an emulator served over plain
    http (moto enforces the policy) could not be used with it. ``expiry_days=None``: objects
    never expire (the checkpoint bucket, checkpoint_store.py); only incomplete multipart
    uploads are cleaned up."""
    if tls_only is None:
        tls_only = urlsplit(str(s3.meta.endpoint_url)).scheme == "https"
    mine = {"Bucket": bucket, "ExpectedBucketOwner": owner}
    try:
        s3.head_bucket(**mine)
        exists = True
    except ClientError as err:
        code = _error_code(err)
        if code in ("403", "AccessDenied"):
            raise PreflightError(
                f"S3 bucket {bucket!r} exists but is not owned by account {owner} or is not "
                "readable: skyinfra stages the runtime wheel only in its own account's bucket"
            ) from None
        if code not in ("404", "NoSuchBucket", "NotFound"):
            raise PreflightError(f"cannot check S3 bucket {bucket!r}: {err}") from None
        exists = False
    if not exists:
        create: dict[str, Any] = {"Bucket": bucket}
        # us-east-1 is S3's default location and rejects an explicit LocationConstraint.
        if region != "us-east-1":
            create["CreateBucketConfiguration"] = {"LocationConstraint": region}
        s3.create_bucket(**create)
    s3.put_public_access_block(
        **mine,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    s3.put_bucket_encryption(
        **mine,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    if tls_only:
        s3.put_bucket_policy(**mine, Policy=tls_only_policy(bucket, region))
    s3.put_bucket_lifecycle_configuration(
        **mine,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": LIFECYCLE_RULE_ID if expiry_days else ABORT_UPLOADS_RULE_ID,
                    "Filter": {"Prefix": ""},
                    "Status": "Enabled",
                    **({"Expiration": {"Days": expiry_days}} if expiry_days else {}),
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
                }
            ]
        },
    )


def object_url(s3: Any, bucket: str, key: str) -> str:
    """The object's address as the client reaches S3 (virtual-hosted on AWS, path-style on
    an emulator), without any query string."""
    endpoint = urlsplit(str(s3.meta.endpoint_url))
    quoted = quote(key, safe="/~")
    style = (s3.meta.config.s3 or {}).get("addressing_style")
    if style == "path":
        return f"{endpoint.scheme}://{endpoint.netloc}/{bucket}/{quoted}"
    return f"{endpoint.scheme}://{bucket}.{endpoint.netloc}/{quoted}"


def stage_wheel(
    s3: Any,
    wheel: Path,
    *,
    bucket: str,
    region: str,
    owner: str,
    prefix: str,
) -> StagedWheel:
    """Upload ``wheel`` under ``<prefix><sha256>/<filename>`` of a private bucket."""
    if not wheel.is_file() or wheel.suffix != ".whl":
        raise PreflightError(f"runtime wheel {wheel} is missing or not a .whl file: build it first")
    digest = sha256_of(wheel)
    key = f"{prefix}{digest}/{wheel.name}"
    try:
        ensure_bucket(s3, bucket, region, owner)
        s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=wheel.read_bytes(),
            ContentType="application/zip",
            ExpectedBucketOwner=owner,
        )
    except (ClientError, BotoCoreError) as err:
        raise PreflightError(
            f"could not stage the runtime wheel in s3://{bucket}/{key}: {err}. Check that the "
            "credentials may create and configure buckets and put objects (s3:CreateBucket, "
            "s3:PutBucketPolicy, s3:PutEncryptionConfiguration, s3:PutLifecycleConfiguration, "
            "s3:PutBucketPublicAccessBlock, s3:PutObject)."
        ) from None
    return StagedWheel(
        bucket=bucket,
        key=key,
        filename=wheel.name,
        sha256=digest,
        url=object_url(s3, bucket, key),
        prefix=prefix,
    )


def delete_staged(s3: Any, *, bucket: str, prefix: str, owner: str) -> list[str]:
    """Delete every object under ``prefix`` (one workspace's wheels); the keys deleted."""
    if not prefix.endswith("/") or prefix.count("/") < 2:
        raise ValueError(f"refusing to delete under {prefix!r}: not a workspace's prefix")
    deleted: list[str] = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix, ExpectedBucketOwner=owner):
        keys = [item["Key"] for item in page.get("Contents", [])]
        if keys:
            s3.delete_objects(
                Bucket=bucket,
                Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True},
                ExpectedBucketOwner=owner,
            )
            deleted += keys
    return deleted
