"""Issue 46's spec fields (aws.network, bastion, nat, ssm): each bad combination is one
SpecError naming its field, offline (pure; `validate`'s exit 2 is tests/unit/test_validate.py);
what the renderer and the preflight take from a good one."""

from __future__ import annotations

from typing import Any

import pytest

from skyinfra.errors import SpecError
from skyinfra.targets.aws.network_spec import NetworkFields, elastic_ips
from skyinfra.targets.aws.spec_parsing import parse_aws_section

BASE: dict[str, Any] = {
    "region": "us-east-1",
    "instance_type": "p4d.24xlarge",
    "ssh_cidrs": ["203.0.113.7/32"],
}


def fields_of(error: SpecError) -> set[str]:
    return {e.field for e in getattr(error, "problems", (error,))}


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        ({"network": "dmz"}, "aws.network", "one of ['public', 'private']"),
        ({"network": 1}, "aws.network", "one of ['public', 'private']"),
        (
            {"network": "private", "ssh_cidrs": ["0.0.0.0/0"], "allow_ssh_from_anywhere": True},
            "aws.allow_ssh_from_anywhere",
            "never from the whole internet",
        ),
        ({"network": "private", "ssh_cidrs": []}, "aws.ssh_cidrs", "a non-empty list of CIDRs"),
        ({"ssm": True}, "aws.ssm", 'aws.network = "private"'),
        ({"network": "public", "bastion": True}, "aws.bastion", "a bastion is the way in"),
        ({"nat": True}, "aws.nat", "their own addresses"),
        ({"network": "private", "nat": "yes"}, "aws.nat", "true or false"),
        ({"network": "private", "subnet_id": "subnet-0abc12345"}, "aws.subnet_id", "its own VPC"),
        ({"network": "private", "recover": True}, "aws.recover", "EC2 API"),
        ({"network": "private", "bastion_ami": "al2023"}, "aws.bastion_ami", "an AMI id like"),
        ({"bastion_ami": "ami-0123456789abcdef0"}, "aws.bastion_ami", "only a private network"),
        (
            {"network": "private", "bastion": False, "bastion_ami": "ami-0123456789abcdef0"},
            "aws.bastion_ami",
            "no bastion to boot it",
        ),
    ],
)
def test_a_bad_network_names_its_field(extra: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_aws_section({**BASE, **extra})
    assert fields_of(caught.value) == {field}
    assert says in str(caught.value)


def test_bastion_and_nat_with_a_public_network_are_both_named() -> None:
    with pytest.raises(SpecError) as caught:
        parse_aws_section({**BASE, "bastion": True, "nat": True})
    assert fields_of(caught.value) == {"aws.bastion", "aws.nat"}


def test_a_public_spec_reads_and_writes_as_before() -> None:
    table = parse_aws_section(dict(BASE))
    assert table.network_fields == NetworkFields()
    assert not {"network", "bastion", "nat", "ssm"} & set(table.to_dict())
    # bastion = false says nothing a public network does not already do.
    assert parse_aws_section({**BASE, "bastion": False}).network == "public"


def test_a_private_network_has_a_bastion_unless_told_otherwise() -> None:
    private = parse_aws_section({**BASE, "network": "private"})
    assert private.network_fields.has_bastion
    assert private.to_dict()["network"] == "private"
    assert parse_aws_section(private.to_dict()) == private
    no_bastion = parse_aws_section({**BASE, "network": "private", "bastion": False})
    assert not no_bastion.network_fields.has_bastion
    # The bastion's own image: absent (the module's Amazon Linux 2023 minimal), or given.
    assert private.bastion_ami is None and "bastion_ami" not in private.to_dict()
    given = parse_aws_section({**BASE, "network": "private", "bastion_ami": "ami-0abc12345"})
    assert given.network_fields.bastion_ami == "ami-0abc12345"
    assert parse_aws_section(given.to_dict()) == given


@pytest.mark.parametrize(
    ("fields", "eips"),
    [
        (NetworkFields(), None),  # public: one per EFA node, as before
        (NetworkFields("private"), 0),
        (NetworkFields("private", bastion=False), 1),
        (NetworkFields("private", nat=True), 1),
    ],
)
def test_elastic_ips_a_network_takes(fields: NetworkFields, eips: int | None) -> None:
    assert elastic_ips(fields) == eips
