"""The [aws] settings the GPU paths depend on: placement group with EFA, the jax extra, and
the root module's parameters built from them (subnet sized for the cluster)."""

from __future__ import annotations

import pytest

from skyinfra.errors import SpecError
from skyinfra.spec import validate_spec
from skyinfra.targets.aws.cluster_files import cluster_params
from skyinfra.targets.aws.spec import AwsSpec
from skyinfra.targets.aws.spec_parsing import parse_aws_section

AWS = {"region": "us-east-1", "instance_type": "p4d.24xlarge", "ssh_cidrs": ["203.0.113.4/32"]}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOXdhYvR9XJ8xq0f1m8c1u1YV0qg7r5n0bq6yFZ9y6Qk k"


@pytest.mark.parametrize(
    ("table", "placement_group"),
    [
        ({}, False),
        ({"efa": True}, True),  # AWS recommends a cluster placement group for EFA
        ({"efa": True, "placement_group": False}, False),  # unless told not to
        ({"placement_group": True}, True),
    ],
)
def test_placement_group_follows_efa_unless_set(
    table: dict[str, object], placement_group: bool
) -> None:
    parsed = parse_aws_section({**AWS, **table})
    assert parsed.placement_group is placement_group
    # The spec file keeps the decision: a later `up` reads the same value back.
    assert parse_aws_section(parsed.to_dict()).placement_group is placement_group


@pytest.mark.parametrize("extra", ["cuda11", "CUDA12", "cuda", "gpu", 12])
def test_unknown_jax_extra_is_refused_naming_the_valid_ones(extra: object) -> None:
    with pytest.raises(SpecError) as err:
        parse_aws_section({**AWS, "jax_extra": extra})
    assert err.value.field == "aws.jax_extra"
    assert "['cuda12', 'cuda13', 'cpu', 'none']" in str(err.value)


@pytest.mark.parametrize(("nodes", "subnet"), [(2, "10.42.0.0/24"), (300, "10.42.0.0/23")])
def test_cluster_params_size_skyinfra_subnet(nodes: int, subnet: str) -> None:
    spec = validate_spec(
        {"name": "g", "provider": "aws", "nodes": nodes, "aws": {**AWS, "efa": True}}
    )
    params = cluster_params(spec, None, KEY)
    assert (params.subnet_cidr_block, params.placement_group) == (subnet, True)
    assert spec.section_as(AwsSpec).efa
