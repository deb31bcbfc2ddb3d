"""`skyinfra checkpoints` on an AWS cluster, against moto's S3 over loopback: the sets under
the cluster's checkpoints_url listed with their bytes, objects and last change; `delete NAME`
deletes that set's prefix and nothing else, only when told (--yes off a terminal: without it,
exit 2 and nothing deleted); a bad or unknown name is exit 2, nothing deleted. The cluster
is down (a workspace as `down` leaves it): the sets outlive it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR
from skyinfra.targets.aws.reach import TARGET_FILE
from tests.support.aws import emptied_bucket
from tests.support.aws_e2e import aws_workspace

BUCKET = "ckpt-cli"
URL = f"s3://{BUCKET}/team/ckpts"


@pytest.fixture
def s3(cli_env: dict[str, str]) -> Iterator[Any]:
    with emptied_bucket(cli_env[ENDPOINT_ENV_VAR], BUCKET) as client:
        yield client


def keys(s3: Any) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def checkpoints(
    tmp_path: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    from tests.conftest import skyinfra_argv

    argv = [*skyinfra_argv(), "checkpoints", "--cluster", "ck", "--dir", str(tmp_path / "clusters")]
    return subprocess.run(
        [*argv, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_sets_in_s3_are_listed_and_deleted_only_when_told(
    s3: Any, cli_env: dict[str, str], ssh_key: Path, tmp_path: Path
) -> None:
    ws, _ = aws_workspace(tmp_path, "ck", ssh_key)
    # What `up` recorded: the store (its default would name the account; this one is given).
    ws.write_json(ws.path / TARGET_FILE, {"checkpoints_url": URL})
    objects = {
        "team/ckpts/warm/nodes/node-0/manifest.json": b"{}",
        "team/ckpts/warm/objects/aa": b"x" * 1000,
        "team/ckpts/warm/objects/bb": b"y" * 24,
        "team/ckpts/other/nodes/node-1/manifest.json": b"{}" * 10,
        "team/ckpts-not-a-set/x": b"outside the prefix",  # shares the prefix's first letters
        "elsewhere/keep": b"not the store's",
    }
    for key, body in objects.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)

    listed = checkpoints(tmp_path, cli_env, "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    sets = {s["name"]: s for s in json.loads(listed.stdout)}
    assert set(sets) == {"warm", "other"}
    assert sets["warm"]["size_bytes"] == 1026 and sets["warm"]["files"] == 3
    assert sets["warm"]["url"] == f"{URL}/warm" and sets["warm"]["modified"]
    assert sets["other"]["size_bytes"] == 20 and sets["other"]["files"] == 1
    table = checkpoints(tmp_path, cli_env)
    assert table.returncode == 0, table.stderr
    assert "warm" in table.stdout and "1.0 KiB" in table.stdout and f"under {URL}/" in table.stdout

    # Off a terminal without --yes: exit 2, nothing deleted.
    refused = checkpoints(tmp_path, cli_env, "delete", "warm")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        "--yes is needed off a terminal" in refused.stderr
        and "nothing was deleted" in refused.stderr
    )
    assert keys(s3) == sorted(objects)
    # A name that is not one, or no such set: exit 2 naming it, nothing deleted.
    for bad, said in (("../warm", "'../warm'"), ("nope", "has no such set")):
        wrong = checkpoints(tmp_path, cli_env, "delete", bad, "--yes")
        assert wrong.returncode == 2 and said in wrong.stderr, wrong.stderr
    assert keys(s3) == sorted(objects)

    gone = checkpoints(tmp_path, cli_env, "delete", "warm", "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert "3 object(s)" in gone.stdout
    assert keys(s3) == sorted(k for k in objects if not k.startswith("team/ckpts/warm/"))
    after = checkpoints(tmp_path, cli_env, "--json")
    assert [s["name"] for s in json.loads(after.stdout)] == ["other"]


def test_a_cluster_whose_store_is_not_known_says_so(
    cli_env: dict[str, str], ssh_key: Path, tmp_path: Path
) -> None:
    aws_workspace(tmp_path, "ck", ssh_key)  # never up, no checkpoints_url in its spec
    said = checkpoints(tmp_path, cli_env)
    assert said.returncode == 2, said.stdout + said.stderr
    assert "no checkpoint store is known yet" in said.stderr
