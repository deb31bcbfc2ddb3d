"""The S3 backend: the spec's URL, the rendered backend.tf (golden files), Terraform's lock
error read back into who holds the lock, and what `up` refuses about a cluster's backend."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from skyinfra import shared_state
from skyinfra.errors import SpecError, StateLockedError, WorkspaceError
from skyinfra.spec import validate_spec
from skyinfra.terraform import EmbeddedTerraform
from skyinfra.terraform.backend import (
    BACKEND_FILE,
    S3Backend,
    parse_backend,
    parse_lock_error,
    render_backend,
)
from skyinfra.workspace import Workspace

GOLDEN = Path(__file__).parent / "golden" / "backend"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://team-state", S3Backend("team-state", "")),
        ("s3://team-state/", S3Backend("team-state", "")),
        ("s3://team-state/sky/prod/", S3Backend("team-state", "sky/prod")),
        ("s3://team.state/p?region=eu-west-1", S3Backend("team.state", "p", "eu-west-1")),
    ],
)
def test_backend_urls(url: str, expected: S3Backend) -> None:
    assert parse_backend(url) == expected
    assert parse_backend(expected.url) == expected  # the URL round-trips


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("gs://bucket/p", "only the s3 backend"),
        ("s3://Bucket/p", "not a valid S3 bucket name"),
        ("s3://b/p", "not a valid S3 bucket name"),
        ("s3://bucket/a b", "not a plain key"),
        ("s3://bucket/p?regoin=us-east-1", "unknown part"),
        ("s3://bucket/p?region=mars", "not an AWS region"),
        (42, "an S3 URL"),
    ],
)
def test_bad_backend_urls_name_the_field_and_what_is_valid(url: object, says: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_backend(url, "--backend")
    assert err.value.field == "--backend"
    assert says in str(err.value)
    assert "s3://my-team-state/skyinfra" in str(err.value)


def test_one_state_key_per_cluster() -> None:
    backend = parse_backend("s3://team-state/sky")
    assert backend.key("a") == "sky/a/terraform.tfstate"
    assert backend.key("b") != backend.key("a")
    assert parse_backend("s3://team-state").key("a") == "a/terraform.tfstate"


@pytest.mark.parametrize(
    ("name", "endpoint"), [("aws.tf", None), ("emulator.tf", "http://127.0.0.1:5000")]
)
def test_backend_file_matches_golden(name: str, endpoint: str | None) -> None:
    text = render_backend(
        parse_backend("s3://team-state/sky"), "train", region="eu-west-1", endpoint=endpoint
    )
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN"):
        (GOLDEN / name).write_text(text)
    assert text == (GOLDEN / name).read_text()
    assert "use_lockfile = true" in text and "encrypt      = true" in text
    assert "dynamodb" not in text


def test_spec_backend_needs_a_region_on_the_local_target() -> None:
    with pytest.raises(SpecError) as err:
        validate_spec({"name": "a", "backend": "s3://team-state/sky"})
    assert err.value.field == "backend"
    assert "?region=" in str(err.value)
    spec = validate_spec({"name": "a", "backend": "s3://team-state/sky?region=us-east-1"})
    assert spec.backend == "s3://team-state/sky?region=us-east-1"
    assert validate_spec(spec.to_dict()) == spec  # spec.json round-trips


def test_emulator_mode_points_the_backend_at_the_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = validate_spec({"name": "a", "backend": "s3://team-state/sky?region=us-east-1"})
    monkeypatch.delenv("SKYINFRA_AWS_ENDPOINT_URL", raising=False)
    assert "endpoints" not in shared_state.backend_files(spec)[BACKEND_FILE]
    monkeypatch.setenv("SKYINFRA_AWS_ENDPOINT_URL", "http://127.0.0.1:5999/")
    text = shared_state.backend_files(spec)[BACKEND_FILE]
    assert 'endpoints                   = { s3 = "http://127.0.0.1:5999" }' in text
    assert shared_state.backend_files(validate_spec({"name": "a"})) == {}


# What Terraform 1.11 printed when a second apply met the first one's S3 lock (moto's S3).
LOCK_TEXT = """Error: Error acquiring the state lock

Error message: operation error S3: PutObject, https response error
StatusCode: 412, api error PreconditionFailed: At least one of the pre-conditions you
specified did not hold
Lock Info:
  ID:        1d5272f4-41c2-e36f-de9f-ccf512bcc190
  Path:      team-state/sky/c1/terraform.tfstate
  Operation: OperationTypeApply
  Who:       alice@build-7
  Version:   1.11.4
  Created:   2026-11-23 19:46:35.30814042 +0000 UTC
  Info:
"""


def test_lock_error_names_the_lock_and_its_holder() -> None:
    lock = parse_lock_error(LOCK_TEXT)
    assert lock is not None
    assert lock.id == "1d5272f4-41c2-e36f-de9f-ccf512bcc190"
    assert lock.who == "alice@build-7"
    assert lock.operation == "OperationTypeApply"
    err = StateLockedError("c1", lock, argv=["terraform", "plan"], returncode=1, stderr="x")
    text = str(err)
    assert "alice@build-7" in text and "OperationTypeApply" in text
    assert "skyinfra unlock --cluster c1 1d5272f4-41c2-e36f-de9f-ccf512bcc190" in text
    assert err.argv == ["terraform", "plan"] and err.returncode == 1
    assert parse_lock_error("Error: Invalid reference") is None


def test_up_never_moves_state_by_accident(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "a")
    ws.ensure()
    shared = validate_spec({"name": "a", "backend": "s3://team-state/sky?region=us-east-1"})
    local = validate_spec({"name": "a"})
    ws.write_json(ws.spec_file, shared.to_dict())
    shared_state.check_backend_kept(ws, shared)  # the same backend: fine
    with pytest.raises(WorkspaceError, match="keeps its state in s3://team-state/sky"):
        shared_state.check_backend_kept(ws, local)
    ws.write_json(ws.spec_file, local.to_dict())
    with pytest.raises(WorkspaceError, match="skyinfra state push --cluster a"):
        shared_state.check_backend_kept(ws, shared)


class _ListingEngine:
    """Stands in for Terraform: counts `state list`, which costs a Terraform command (and
    the provider's hashing) where the state is in a backend."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses, self.listed = addresses, 0

    def state_list(self) -> list[str]:
        self.listed += 1
        return self.addresses


@pytest.mark.parametrize(
    ("section", "listed", "replaced"),
    [
        # AWS: Terraform's refresh sees a lost instance; the state is never listed for it.
        ({"provider": "aws", "aws": {"region": "us-east-1", "instance_type": "t3.micro",
                                     "ssh_cidrs": ["203.0.113.7/32"]}}, 0, []),
        # Local: a node folder gone is a broken node only the target sees.
        ({}, 1, ['module.nodes.terraform_data.node["node-0"]']),
    ],
)  # fmt: skip
def test_up_lists_a_shared_state_only_for_a_target_that_looks_at_it(
    tmp_path: Path, section: dict[str, object], listed: int, replaced: list[str]
) -> None:
    from skyinfra.lifecycle import broken_nodes

    ws = Workspace(tmp_path / "a")
    ws.ensure()
    (ws.path / BACKEND_FILE).write_text('terraform {\n  backend "s3" {}\n}\n')
    spec = validate_spec(
        {"name": "a", "backend": "s3://team-state/sky?region=us-east-1", **section}
    )
    engine = _ListingEngine(['module.nodes.terraform_data.node["node-0"]'])
    assert broken_nodes(ws, spec, engine) == replaced  # type: ignore[arg-type]
    assert engine.listed == listed


class _PullingTerraform(EmbeddedTerraform):
    """The embedded engine with its processes answered here: `state pull` gives ``state``;
    every command started is noted."""

    def __init__(self, workdir: Path, state: str) -> None:
        super().__init__(workdir, env={})
        self.state = state
        self.ran: list[list[str]] = []

    def _run(self, args: Sequence[str], **kwargs: object) -> tuple[int, str, str]:
        self.ran.append(list(args))
        return (0, self.state, "") if list(args) == ["state", "pull"] else (0, "", "")


def test_a_shared_states_outputs_and_resources_come_from_one_pull(tmp_path: Path) -> None:
    """`status` of a cluster whose state is in S3 asks its outputs and its resources: one
    `state pull` answers both (each a Terraform command of its own before, the provider
    hashed against the lock file each time); any other command drops what was pulled."""
    (tmp_path / BACKEND_FILE).write_text('terraform {\n  backend "s3" {}\n}\n')
    state = {
        "version": 4,
        "lineage": "l-1",
        "serial": 7,
        "outputs": {"nodes": {"value": {"node-0": {"ip": "10.0.0.1"}}, "type": "string"}},
        "resources": [
            {"module": "module.nodes", "mode": "managed", "type": "aws_instance",
             "name": "this", "instances": [{"index_key": "node-0"}]},
        ],
    }  # fmt: skip
    engine = _PullingTerraform(tmp_path, json.dumps(state))
    assert engine.output() == {"nodes": {"node-0": {"ip": "10.0.0.1"}}}
    assert engine.state_list() == ['module.nodes.aws_instance.this["node-0"]']
    assert engine.state_identity() == {"lineage": "l-1", "serial": 7}
    assert engine.ran == [["state", "pull"]]
    engine.command(["apply", "-auto-approve"])  # the state may have changed: pulled again
    assert engine.state_list() == ['module.nodes.aws_instance.this["node-0"]']
    assert engine.ran[1:] == [["apply", "-auto-approve"], ["state", "pull"]]
    # No state in the backend yet: nothing, from the same one command.
    empty = _PullingTerraform(tmp_path, "")
    assert (empty.output(), empty.state_list(), empty.state_identity()) == ({}, [], None)
    assert empty.ran == [["state", "pull"]]
