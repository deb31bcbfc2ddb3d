"""The network fields of ``[aws]`` (issue 46): ``network`` ("public", the default and the
behaviour from before it, or "private"), ``bastion``, ``bastion_ami``, ``nat`` and ``ssm``.
Checked offline, each problem naming its field (exit 2 from `validate`, nothing written).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyinfra.errors import SpecError
from skyinfra.spec.fields import read_bool

PUBLIC = "public"
PRIVATE = "private"
NETWORKS = (PUBLIC, PRIVATE)
# The login user of the bastion's default image, Amazon Linux 2023 minimal (its module's
# lookup, infra/modules/aws/bastion).
BASTION_DEFAULT_USER = "ec2-user"
NETWORK_KEYS = ("network", "bastion", "bastion_ami", "nat", "ssm")


@dataclass(frozen=True)
class NetworkFields:
    network: str = PUBLIC
    # None: the default, a bastion with a private network (and none with a public one).
    bastion: bool | None = None
    nat: bool = False
    ssm: bool = False
    # The bastion's image; None: its module's Amazon Linux 2023 minimal (not the nodes' AMI).
    bastion_ami: str | None = None

    @property
    def private(self) -> bool:
        return self.network == PRIVATE

    @property
    def has_bastion(self) -> bool:
        return self.private and self.bastion is not False


def elastic_ips(fields: NetworkFields) -> int | None:
    """Elastic IPs a private network takes (node 0's without a bastion, the NAT gateway's);
    None on a public network (one per EFA node, as before)."""
    if not fields.private:
        return None
    return (0 if fields.has_bastion else 1) + (1 if fields.nat else 0)


def _network(raw: Mapping[str, Any]) -> str:
    value = raw.get("network", PUBLIC)
    if value not in NETWORKS:
        raise SpecError(
            "aws.network",
            value,
            f'one of {list(NETWORKS)}: "{PUBLIC}" (every node has a public address, the '
            f'default) or "{PRIVATE}" (no node has one; the way in is a bastion or node 0)',
        )
    return str(value)


def network_problems(raw: Mapping[str, Any], *, allow_ssh_from_anywhere: bool) -> list[SpecError]:
    """Every problem of the network fields, checked together with the rest of the table."""
    found: list[SpecError] = []
    try:
        network = _network(raw)
    except SpecError as err:
        return [err]
    for key in ("bastion", "nat", "ssm"):
        try:
            read_bool(raw, key, f"aws.{key}", False)
        except SpecError as err:
            found.append(err)
    if found:
        return found
    if network == PUBLIC:
        found += [
            SpecError(
                f"aws.{key}",
                raw[key],
                f'absent with a public network, or aws.network = "{PRIVATE}": {why}',
            )
            for key, why in (
                ("bastion", "a bastion is the way in to private nodes"),
                ("bastion_ami", "the bastion's image, and only a private network has one"),
                ("nat", "public nodes reach the internet through their own addresses"),
                ("ssm", "the SSM interface endpoints are for a private subnet"),
            )
            if raw.get(key)
        ]
        return found
    if raw.get("bastion") is False and "bastion_ami" in raw:
        found.append(
            SpecError(
                "aws.bastion_ami",
                raw["bastion_ami"],
                "absent with aws.bastion = false: node 0 is the way in, there is no bastion "
                "to boot it",
            )
        )
    if allow_ssh_from_anywhere:
        found.append(
            SpecError(
                "aws.allow_ssh_from_anywhere",
                True,
                f'false with aws.network = "{PRIVATE}": its one way in takes SSH from '
                "aws.ssh_cidrs only, never from the whole internet",
            )
        )
    for key in ("subnet_id", "vpc_id"):
        if key in raw:
            found.append(
                SpecError(
                    f"aws.{key}",
                    raw[key],
                    f'absent with aws.network = "{PRIVATE}": a private network builds its own '
                    "VPC, subnets and route tables",
                )
            )
    if raw.get("recover"):
        found.append(
            SpecError(
                "aws.recover",
                True,
                f'false with aws.network = "{PRIVATE}": node 0 would need the EC2 API, which a '
                "private subnet without NAT cannot reach",
            )
        )
    return found


def parse_network(raw: Mapping[str, Any]) -> NetworkFields:
    """The fields, once :func:`network_problems` found none."""
    return NetworkFields(
        network=str(raw.get("network", PUBLIC)),
        bastion=raw.get("bastion"),
        nat=bool(raw.get("nat", False)),
        ssm=bool(raw.get("ssm", False)),
        bastion_ami=raw.get("bastion_ami"),
    )
