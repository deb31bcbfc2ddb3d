"""Where the nodes keep checkpoints on AWS: one S3 prefix per cluster that outlives it.

``aws.checkpoints_url = "s3://bucket/prefix"`` names it (a bucket in the cluster's region);
without one it is ``s3://skyinfra-checkpoints-<account>-<region>/<cluster>/checkpoints`` in
the ladder's first region, whichever rung the cluster is on (so that a job resumed on a rung
in another region finds its checkpoints; the plan notes the crossing), a bucket of its own
beside the staging bucket: the staging bucket's lifecycle rule expires every object after 7
days, and `down` deletes the workspace's staged objects, neither of which may
touch checkpoints. skyinfra creates the default bucket and keeps it private on every `up`
(staging.ensure_bucket: public access blocked, SSE-S3, TLS only, no expiry); a bucket the spec
names is the user's, used as it is.

Every job's checkpoint set is ``<prefix>/<NAME>/`` (NAME: the job id, or ``run --checkpoints
NAME``); the layout under it is the nodes' (skyinfra_runtime/ckptsync.py). The nodes' role
may list, read, write and delete under ``<prefix>/`` and nothing else (the nodes module's
``checkpoints`` variable). `down` keeps it and says how to delete it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from skyinfra_runtime.checkpoints import name_problem
from skyinfra_runtime.s3 import parse_url

from skyinfra.errors import PreflightError, SkyinfraError
from skyinfra.targets.aws.endpoints import Emulator
from skyinfra.targets.aws.reach import TARGET_FILE
from skyinfra.targets.aws.staging import ensure_bucket, object_url
from skyinfra.workspace import Workspace


@dataclass(frozen=True)
class CheckpointStore:
    url: str  # s3://bucket/prefix
    bucket: str
    prefix: str
    # True: skyinfra's own bucket (created and kept private by `up`).
    default: bool

    def node_settings(
        self, s3: Any, region: str, emulator: Emulator | None = None
    ) -> dict[str, str]:
        """What a node needs to reach the store (its ``checkpoints.json``): no credential, the
        node signs with its role. With an emulator (whose nodes are stand-ins without an
        instance role) the emulator's conventional dummy keys, which are no secret."""
        settings = {
            "url": self.url,
            "region": region,
            "bucket_url": object_url(s3, self.bucket, "").rstrip("/"),
        }
        if emulator is not None:
            settings["emulator_access_key"] = emulator.access_key
            settings["emulator_secret_key"] = emulator.secret_key
        return settings


def default_bucket_name(account_id: str, region: str) -> str:
    return f"skyinfra-checkpoints-{account_id}-{region}"


def store_for(cluster: str, url: str | None, account_id: str, region: str) -> CheckpointStore:
    """The spec's store, or the default one of the account and region."""
    default = url is None
    if url is None:
        url = f"s3://{default_bucket_name(account_id, region)}/{cluster}/checkpoints"
    bucket, prefix = parse_url(url)
    return CheckpointStore(url=url, bucket=bucket, prefix=prefix, default=default)


def prepare(s3: Any, store: CheckpointStore, region: str, owner: str) -> None:
    """Create and lock down the default bucket (never a bucket the spec names)."""
    if not store.default:
        return
    try:
        ensure_bucket(s3, store.bucket, region, owner, expiry_days=None)
    except (ClientError, BotoCoreError) as err:
        raise PreflightError(
            f"could not prepare the checkpoint bucket s3://{store.bucket}: {err}. Check that "
            "the credentials may create and configure buckets, or name a bucket of yours with "
            "aws.checkpoints_url."
        ) from None


def kept_line(url: str) -> str:
    """What `down` says about the checkpoints it keeps."""
    bucket, prefix = parse_url(url)
    return (
        f"[skyinfra] kept the checkpoints under {url}/: down never deletes them, and a later "
        f"job of the same checkpoint set (a new cluster too) restores from there. "
        "`skyinfra checkpoints` lists the sets, `skyinfra checkpoints delete NAME` deletes one; "
        f"all of them: aws s3 rm --recursive s3://{bucket}/{prefix}/"
    )


@dataclass(frozen=True)
class StoredSet:
    """One checkpoint set under a store's prefix: ``<prefix>/<name>/``."""

    name: str
    url: str  # s3://bucket/prefix/name
    size_bytes: int
    objects: int
    modified: datetime | None  # the newest object's LastModified


def recorded_url(ws: Workspace, spec_url: str | None) -> str | None:
    """The cluster's store: what `up` recorded (its default has the account in it), else the
    spec's ``aws.checkpoints_url``; None when neither says (the cluster never came up)."""
    settings_file = ws.path / TARGET_FILE
    settings = ws.read_json(settings_file) if settings_file.is_file() else {}
    url = settings.get("checkpoints_url") or spec_url
    return str(url) if url else None


def list_stored(s3: Any, url: str) -> list[StoredSet]:
    """Every set under the store's prefix, by name, with its bytes, objects and newest time."""
    bucket, prefix = parse_url(url)
    found: dict[str, list[Any]] = {}
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
    for page in pages:
        for item in page.get("Contents", []):
            name, sep, _ = item["Key"][len(prefix) + 1 :].partition("/")
            if sep and not name_problem(name):  # a stray object beside the sets is not one
                found.setdefault(name, []).append(item)
    return [
        StoredSet(
            name=name,
            url=f"s3://{bucket}/{prefix}/{name}",
            size_bytes=sum(int(i.get("Size", 0)) for i in items),
            objects=len(items),
            modified=max((i["LastModified"] for i in items if i.get("LastModified")), default=None),
        )
        for name, items in sorted(found.items())
    ]


def delete_stored(s3: Any, url: str, name: str) -> int:
    """Delete every object of set ``name`` (``<prefix>/<name>/``); how many were deleted. A
    key S3 refused to delete is an error naming it (the rest may be gone already)."""
    bucket, prefix = parse_url(url)
    deleted = 0
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/{name}/")
    for page in pages:  # at most 1000 keys a page: DeleteObjects' own limit
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if not keys:
            continue
        answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        errors = answer.get("Errors") or []
        if errors:
            first = errors[0]
            raise SkyinfraError(
                f"S3 did not delete s3://{bucket}/{first.get('Key')}: {first.get('Code')} "
                f"{first.get('Message')} ({len(errors)} object(s) left)"
            )
        deleted += len(keys)
    return deleted
