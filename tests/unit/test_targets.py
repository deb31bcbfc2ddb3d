"""The Target seam: the registry, each target's own table and flags, the spec round trip, and
one rule per field (what the spec accepts, the renderers accept too)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from skyinfra.cli import cli
from skyinfra.errors import InternalError, SpecError
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.targets import TARGETS, all_targets, get_target
from skyinfra.targets.aws.render import AwsClusterParams, validate_params
from skyinfra.targets.aws.spec import AwsSpec
from skyinfra.targets.local.spec import LocalSpec
from tests.conftest import skyinfra_argv

AWS = {"region": "us-east-1", "instance_type": "g5.xlarge", "ssh_cidrs": ["203.0.113.4/32"]}


def test_every_registered_target_is_a_peer() -> None:
    assert [t.name for t in all_targets()] == list(TARGETS)
    for target in all_targets():
        assert target.max_nodes >= 1 and target.wait_ready_s >= 0
        for option in target.options:
            assert option.flag.startswith("--") and option.commands


def test_unknown_target_names_the_known_ones() -> None:
    with pytest.raises(SpecError, match=r"expected one of \['local', 'aws', 'ssh'\]"):
        get_target("gcp")
    with pytest.raises(SpecError, match="'provider'"):
        validate_spec({"name": "c", "provider": "gcp"})


def test_node_limit_comes_from_the_target() -> None:
    # AWS: as many as the default /16 VPC holds (one address each); subnet and quotas are
    # checked where they are known (render, preflight).
    validate_spec({"name": "c", "provider": "aws", "nodes": 1000, "aws": AWS})
    with pytest.raises(SpecError, match="from 1 to 32"):
        validate_spec({"name": "c", "nodes": 33})
    with pytest.raises(SpecError, match="from 1 to 65525"):
        validate_spec({"name": "c", "provider": "aws", "nodes": 65526, "aws": AWS})


@pytest.mark.parametrize(
    "raw",
    [
        {"name": "c", "nodes": 2, "local": {"base_address": "127.0.1.2"}},
        {"name": "c", "plugins": ["jax", "torch:backend=gloo"], "python_packages": ["numpy"]},
        {"name": "c", "run_timeout": 3600},
        {
            "name": "c",
            "provider": "aws",
            "nodes": 3,
            "aws": {**AWS, "ami": "ami-0123456789abcdef0"},
        },
        {
            "name": "c",
            "provider": "aws",
            "aws": {**AWS, "ssh_cidrs": ["0.0.0.0/0"], "allow_ssh_from_anywhere": True},
        },
    ],
)
def test_spec_round_trips_through_to_dict_and_from_dict(raw: dict[str, object]) -> None:
    spec = validate_spec(raw)
    assert ClusterSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_spec_json_of_skyinfra_0_1_0_still_loads() -> None:
    """0.1.0 stored dataclasses.asdict(spec): every target's table, null when unused."""
    old = {
        "name": "c", "provider": "local", "nodes": 2, "procs_per_node": 1, "head_port": 29500,
        "plugins": [{"name": "jax", "options": {}}], "python_packages": [],
        "local": {"base_address": "127.0.0.2", "python": None}, "aws": None,
    }  # fmt: skip
    spec = ClusterSpec.from_dict(old)
    assert spec.section == LocalSpec("127.0.0.2") and spec.plugins[0].name == "jax"


def test_another_targets_table_is_checked_and_allowed() -> None:
    spec = validate_spec({"name": "c", "provider": "aws", "aws": AWS, "local": {}})
    assert isinstance(spec.section, AwsSpec)
    with pytest.raises(SpecError, match=re.escape("'local.base_address'")):
        validate_spec({"name": "c", "provider": "aws", "aws": AWS, "local": {"base_address": "x"}})


def test_section_as_the_wrong_type_is_an_internal_error() -> None:
    spec = validate_spec({"name": "c"})
    with pytest.raises(InternalError, match="not a AwsSpec"):
        spec.section_as(AwsSpec)


def test_flag_of_another_target_is_refused_naming_its_target(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*skyinfra_argv(), "up", "--name", "c", "--skip-preflight"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "invalid value for --skip-preflight: got" in proc.stderr
    assert "a flag of target 'aws' only; cluster 'c' uses target 'local'" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_says_which_target_a_flag_belongs_to() -> None:
    result = CliRunner().invoke(cli, ["up", "--help"])
    assert result.exit_code == 0
    assert "--skip-preflight" in result.output and "[aws] skip the boto3 checks" in result.output
    assert "local, aws" in result.output


# ---------------------------------------------------------------- one rule, one place


def aws_params(**overrides: object) -> AwsClusterParams:
    values: dict[str, object] = {
        "cluster_name": "c",
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "instance_type": "g5.xlarge",
        "ami_id": "ami-0123456789abcdef0",
        "node_count": 2,
        "ssh_public_key": "ssh-ed25519 AAAA",
        "ssh_ingress_cidrs": ["203.0.113.4/32"],
        **overrides,
    }
    return AwsClusterParams(**values)  # type: ignore[arg-type]


def test_a_one_letter_name_the_spec_accepts_renders_on_aws() -> None:
    """The spec allowed 1-32 characters while the AWS renderer wanted 2-40: one rule now."""
    spec = validate_spec({"name": "c", "provider": "aws", "aws": AWS})
    validate_params(aws_params(cluster_name=spec.name))
    with pytest.raises(SpecError, match="'name'"):
        validate_params(aws_params(cluster_name="c-"))


def test_ssh_from_anywhere_is_a_key_the_spec_knows() -> None:
    """The renderer's message told users to set aws.allow_ssh_from_anywhere, which the spec
    rejected as unknown; now the spec owns the rule and its escape hatch."""
    anywhere = {**AWS, "ssh_cidrs": ["0.0.0.0/0"]}
    with pytest.raises(
        SpecError, match=re.escape("needs aws.allow_ssh_from_anywhere = true")
    ) as err:
        validate_spec({"name": "c", "provider": "aws", "aws": anywhere})
    assert err.value.field == "aws.ssh_cidrs[0]"
    spec = validate_spec(
        {"name": "c", "provider": "aws", "aws": {**anywhere, "allow_ssh_from_anywhere": True}}
    )
    assert spec.section_as(AwsSpec).allow_ssh_from_anywhere
    validate_params(aws_params(ssh_ingress_cidrs=["0.0.0.0/0"], allow_ssh_from_anywhere=True))


def test_ipv6_ssh_cidrs_are_refused_by_the_spec_as_by_the_renderer() -> None:
    with pytest.raises(SpecError, match="an IPv4 CIDR") as err:
        validate_spec({"name": "c", "provider": "aws", "aws": {**AWS, "ssh_cidrs": ["::/0"]}})
    assert err.value.field == "aws.ssh_cidrs[0]"


def test_vpc_without_subnet_is_an_internal_error() -> None:
    with pytest.raises(InternalError, match="both or neither"):
        validate_params(aws_params(existing_vpc_id="vpc-0123abcd"))


def test_local_nodes_install_with_the_operators_uv_unless_told_pip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The uv binary of skyinfra's own installation; SKYINFRA_NODE_INSTALLER=pip turns it off
    (the nodes' bootstrap then uses pip); another value is refused, naming the variable."""
    from skyinfra.errors import ConfigError
    from skyinfra.targets.local.target import INSTALLER_ENV, operator_uv

    monkeypatch.delenv(INSTALLER_ENV, raising=False)
    uv = operator_uv()
    assert uv and os.access(uv, os.X_OK)
    monkeypatch.setenv(INSTALLER_ENV, "pip")
    assert operator_uv() == ""
    monkeypatch.setenv(INSTALLER_ENV, "conda")
    with pytest.raises(ConfigError, match="SKYINFRA_NODE_INSTALLER"):
        operator_uv()
