"""How many subnet addresses a cluster takes, and the subnet skyinfra makes for it (pure).

Every node takes exactly one private IPv4 address: its fixed one, host ``offset + index`` of
the subnet. With EFA, card 0 carries an EFA-with-ENA interface holding that address and
every other card an EFA-only interface, which has no IP address at all (the nodes module,
infra/modules/aws/nodes/main.tf): so a p5.48xlarge with 32 EFA interfaces still takes one
address, and nothing is auto-assigned that could take a node's planned address.
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html

AWS reserves the first four and the last address of every subnet, and a subnet can be at
most as large as its VPC (/16 the largest block a VPC may have):
https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html
"""

from __future__ import annotations

import ipaddress

# The VPC and subnet skyinfra makes when the spec names none (a /24 unless the cluster
# needs more: an existing cluster's subnet stays what it was).
DEFAULT_VPC_CIDR = "10.42.0.0/16"
DEFAULT_SUBNET_PREFIX = 24
DEFAULT_HOST_OFFSET = 10
# The first four addresses of a subnet are AWS's; so is the last one.
RESERVED_LOW = 4
RESERVED_HIGH = 1


def addresses_per_node(efa_interface_count: int) -> int:
    """Private IPv4 addresses one node takes: its fixed one (card 0). EFA-only interfaces on
    cards 1+ hold none, so the EFA count does not change it."""
    del efa_interface_count  # documented: EFA-only interfaces carry no IP address
    return 1


def max_nodes(subnet_cidr: str, host_offset: int, efa_interface_count: int = 0) -> int:
    """How many nodes fit in ``subnet_cidr`` from host ``host_offset`` on."""
    subnet = ipaddress.ip_network(subnet_cidr, strict=False)
    usable = subnet.num_addresses - RESERVED_HIGH - max(host_offset, RESERVED_LOW)
    return max(0, usable // addresses_per_node(efa_interface_count))


def subnet_for(
    node_count: int,
    *,
    vpc_cidr: str = DEFAULT_VPC_CIDR,
    host_offset: int = DEFAULT_HOST_OFFSET,
    efa_interface_count: int = 0,
) -> str:
    """The subnet skyinfra makes for ``node_count`` nodes: the VPC's first /24, or the
    smallest larger block from the VPC's start that holds them (the whole VPC at most; if
    even that is too small the renderer's check says so)."""
    vpc = ipaddress.ip_network(vpc_cidr, strict=False)
    prefix = max(DEFAULT_SUBNET_PREFIX, vpc.prefixlen)
    while prefix > vpc.prefixlen:
        candidate = f"{vpc.network_address}/{prefix}"
        if max_nodes(candidate, host_offset, efa_interface_count) >= node_count:
            break
        prefix -= 1
    return f"{vpc.network_address}/{prefix}"


# A private network's public subnet (the bastion's and the NAT gateway's): the VPC's last
# /28 (16 addresses, 11 usable: the smallest subnet AWS allows), away from the nodes' subnet,
# which grows from the VPC's start.
PUBLIC_SUBNET_PREFIX = 28


def public_subnet_for(vpc_cidr: str = DEFAULT_VPC_CIDR) -> str:
    """The public subnet of a private network in ``vpc_cidr``: its last /28."""
    vpc = ipaddress.ip_network(vpc_cidr, strict=False)
    last = vpc.broadcast_address - (2 ** (32 - PUBLIC_SUBNET_PREFIX) - 1)
    return f"{last}/{PUBLIC_SUBNET_PREFIX}"


# The most nodes the default layout holds: the whole /16 VPC as one subnet. The other
# limits are the account's and are checked by the preflight (vCPU and Elastic IP quotas);
# a cluster placement group has no instance limit of its own, only capacity
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups.html).
MAX_NODES_DEFAULT_VPC = max_nodes(DEFAULT_VPC_CIDR, DEFAULT_HOST_OFFSET)
