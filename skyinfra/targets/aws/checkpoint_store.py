"""Where the nodes keep checkpoints on AWS: one S3 prefix per cluster that outlives it.

``aws.checkpoints_url = "s3://bucket/prefix"`` names it (a bucket in the cluster's region);
without one it is ``s3://skyinfra-checkpoints-<account>-<region>/<cluster>/checkpoints``, a
bucket of its own beside the staging bucket: the staging bucket's lifecycle rule expires every
object after 7 days, and `down` deletes the workspace's staged objects, neither of which may
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
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from skyinfra_runtime.s3 import parse_url

from skyinfra.errors import PreflightError
from skyinfra.targets.aws.endpoints import Emulator
from skyinfra.targets.aws.staging import ensure_bucket, object_url


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
        f"job of the same checkpoint set (a new cluster too) restores from there. Delete "
        f"them with: aws s3 rm --recursive s3://{bucket}/{prefix}/"
    )
