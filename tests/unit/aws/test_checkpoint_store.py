"""Checkpoints on AWS, the operator's side (pure): the store's location, what the root module
and the nodes' user data get, what `down` says and what plan.md says the nodes may do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import yaml

from skyinfra.review.report import node_access
from skyinfra.spec import validate_spec
from skyinfra.targets.aws import checkpoint_store
from skyinfra.targets.aws.reach import TARGET_FILE
from skyinfra.targets.aws.target import AwsTarget
from skyinfra.workspace import Workspace
from tests.conftest import content_of
from tests.unit.aws.test_cloudinit import VARIANTS
from tests.unit.aws.test_render import params, render


def test_the_default_store_is_a_bucket_of_its_own_under_the_cluster() -> None:
    store = checkpoint_store.store_for("train", None, "123456789012", "eu-west-1")
    assert store.url == "s3://skyinfra-checkpoints-123456789012-eu-west-1/train/checkpoints"
    assert (store.bucket, store.prefix, store.default) == (
        "skyinfra-checkpoints-123456789012-eu-west-1",
        "train/checkpoints",
        True,
    )
    mine = checkpoint_store.store_for("train", "s3://team-ckpts/a/b", "1", "eu-west-1")
    assert (mine.bucket, mine.prefix, mine.default) == ("team-ckpts", "a/b", False)


class FakeS3:
    class meta:
        endpoint_url = "http://127.0.0.1:5000"

        class config:
            s3: ClassVar[dict[str, str]] = {"addressing_style": "path"}


def test_nodes_get_the_bucket_address_and_no_credential() -> None:
    store = checkpoint_store.store_for("train", "s3://team-ckpts/a", "1", "us-east-1")
    assert store.node_settings(FakeS3(), "us-east-1") == {
        "url": "s3://team-ckpts/a",
        "region": "us-east-1",
        "bucket_url": "http://127.0.0.1:5000/team-ckpts",
    }


def test_the_root_module_passes_the_prefix_to_the_nodes_module() -> None:
    files = render(params(checkpoints=("team-ckpts", "a/b")))
    tfvars = json.loads(files["terraform.tfvars.json"])
    assert tfvars["checkpoints"] == {"bucket": "team-ckpts", "prefix": "a/b"}
    assert "checkpoints                 = var.checkpoints" in files["main.tf"]
    assert json.loads(render(params())["terraform.tfvars.json"])["checkpoints"] is None


def test_the_user_data_writes_the_nodes_settings_file() -> None:
    files = {f["path"]: content_of(f) for f in yaml.safe_load(_doc())["write_files"]}
    settings = json.loads(files["/opt/skyinfra/node/checkpoints.json"])
    assert settings["url"] == "s3://team-ckpts/train"
    assert "secret" not in json.dumps(settings).lower()


def _doc() -> str:
    from skyinfra.targets.aws.cloudinit import render_user_data

    return render_user_data(VARIANTS["checkpoints"])


def test_down_says_what_it_keeps_and_how_to_delete_it() -> None:
    line = checkpoint_store.kept_line("s3://team-ckpts/train")
    assert "kept the checkpoints under s3://team-ckpts/train/" in line
    assert "aws s3 rm --recursive s3://team-ckpts/train/" in line


def test_down_says_it_in_after_down(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "clusters" / "train")
    ws.path.mkdir(parents=True)
    ws.write_json(ws.path / TARGET_FILE, {"checkpoints_url": "s3://team-ckpts/train"})
    spec = validate_spec(
        {
            "name": "train",
            "provider": "aws",
            "aws": {
                "region": "us-east-1",
                "instance_type": "g5.xlarge",
                "ssh_cidrs": ["203.0.113.4/32"],
            },
        }
    )
    said: list[str] = []
    AwsTarget().after_down(ws, spec, echo=said.append)
    assert said == [checkpoint_store.kept_line("s3://team-ckpts/train")]


def test_plan_md_says_which_prefix_the_nodes_may_write() -> None:
    plan: dict[str, Any] = {
        "variables": {
            "staging": {"value": {"bucket": "stage", "prefix": "train/ws/"}},
            "checkpoints": {"value": {"bucket": "team-ckpts", "prefix": "train"}},
        }
    }
    lines = node_access(plan)
    assert lines[0].startswith("read (s3:GetObject) `s3://stage/train/ws/*`")
    assert "s3:PutObject" in lines[1] and "`s3://team-ckpts/train/*`" in lines[1]
    assert node_access({"variables": {}}) == ()
