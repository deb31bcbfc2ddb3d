"""`skyinfra checkpoints` on AWS: the cluster's sets under its checkpoint store's prefix
(checkpoint_store.py: what `up` recorded, else the spec's aws.checkpoints_url), listed and
deleted through S3."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from skyinfra_runtime.checkpoints import name_problem

from skyinfra.checkpoints import uses
from skyinfra.errors import SkyinfraError, UsageError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.checkpoint_store import (
    StoredSet,
    delete_stored,
    list_stored,
    recorded_url,
)
from skyinfra.targets.aws.session import clients_for
from skyinfra.targets.aws.spec import AwsSpec
from skyinfra.targets.base import CheckpointListing, CheckpointSetInfo
from skyinfra.workspace import Workspace


def _store(ws: Workspace, spec: ClusterSpec) -> tuple[Any, str]:
    """The S3 client and the cluster's store URL (UsageError when none is known)."""
    url = recorded_url(ws, spec.section_as(AwsSpec).checkpoints_url)
    if url is None:
        raise UsageError(
            f"cluster {ws.name!r}: no checkpoint store is known yet (`up` records the default "
            "one; aws.checkpoints_url names yours)"
        )
    return clients_for(spec).client("s3"), url


def _stored(ws: Workspace, spec: ClusterSpec) -> tuple[str, list[StoredSet]]:
    s3, url = _store(ws, spec)
    try:
        return url, list_stored(s3, url)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") == "NoSuchBucket":
            return url, []  # the default bucket before any `up` made it: no set
        raise SkyinfraError(f"could not list the checkpoint sets under {url}/: {err}") from None
    except BotoCoreError as err:
        raise SkyinfraError(f"could not list the checkpoint sets under {url}/: {err}") from None


def _info(stored: StoredSet, jobs: list[str]) -> CheckpointSetInfo:
    return CheckpointSetInfo(
        name=stored.name,
        size_bytes=stored.size_bytes,
        items=stored.objects,
        item_unit="object",
        modified=stored.modified.isoformat(timespec="seconds") if stored.modified else None,
        jobs=tuple(jobs),
        location=stored.url,
        location_key="url",
        place=f"{stored.url}/",
    )


def listing(ws: Workspace, spec: ClusterSpec) -> CheckpointListing:
    url, sets = _stored(ws, spec)
    used = uses(ws)
    return CheckpointListing([_info(s, used.get(s.name, [])) for s in sets], f"under {url}/")


def find(ws: Workspace, spec: ClusterSpec, name: str) -> CheckpointSetInfo:
    problem = name_problem(name)
    if problem:
        raise UsageError(f"checkpoint set {name!r}: expected {problem}")
    url, sets = _stored(ws, spec)
    stored = next((s for s in sets if s.name == name), None)
    if stored is None:
        names = ", ".join(s.name for s in sets) or "none"
        raise UsageError(
            f"checkpoint set {name!r}: cluster {ws.name!r} has no such set under {url}/ "
            f"(it has: {names})"
        )
    return _info(stored, uses(ws).get(name, []))


def delete(ws: Workspace, spec: ClusterSpec, found: CheckpointSetInfo) -> str:
    s3, url = _store(ws, spec)
    count = delete_stored(s3, url, found.name)
    return f": {count} object(s) under {found.place}"
