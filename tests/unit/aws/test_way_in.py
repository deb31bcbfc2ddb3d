"""Where the operator dials each AWS node (targets/aws/way_in.py, pure): at its own address on
a public network; on a private one through the way in the topology names (the bastion, or
node 0), each hop's host keys the ones its own instance printed; in emulator mode through the
stand-ins SKYINFRA_AWS_EMULATED_NODES maps, the way in by its name."""

from __future__ import annotations

import dataclasses

import pytest

from skyinfra.errors import ConfigError
from skyinfra.targets.aws.endpoints import EmulatedNode
from skyinfra.targets.aws.way_in import Dialling, node_targets
from skyinfra.topology import Node, Topology, WayIn
from skyinfra.transport.ssh import SshTarget

CONSOLES = {"i-b": ["ssh-ed25519 BASTION"], "i-0": ["ssh-ed25519 NODE0"], "i-1": ["ssh-ed25519 N1"]}


def topology(way_in: WayIn | None, node_0_public: str | None = None) -> Topology:
    return Topology(
        cluster="c",
        provider="aws",
        head_addr="10.42.0.10",
        head_port=29500,
        nodes=(
            Node(0, "node-0", "10.42.0.10", node_0_public, "i-0"),
            Node(1, "node-1", "10.42.0.11", None, "i-1"),
        ),
        way_in=way_in,
    )


def dialling(**changes: object) -> Dialling:
    plain = Dialling("ubuntu", False, None, lambda instance: CONSOLES.get(instance, []))
    return dataclasses.replace(plain, **changes)


BASTION = WayIn("bastion", "198.51.100.7", instance_id="i-b")


def test_a_public_network_dials_each_node_at_its_own_address() -> None:
    public = dataclasses.replace(
        topology(None, "198.51.100.1"),
        nodes=(
            Node(0, "node-0", "10.42.0.10", "198.51.100.1", "i-0"),
            Node(1, "node-1", "10.42.0.11", "198.51.100.2", "i-1"),
        ),
    )
    targets, unreachable = node_targets(public, dialling())
    assert targets == {
        0: SshTarget("198.51.100.1", "ubuntu"),
        1: SshTarget("198.51.100.2", "ubuntu"),
    }
    assert unreachable == {}


def test_every_node_goes_through_the_bastion_pinned_from_its_own_console() -> None:
    targets, _ = node_targets(topology(BASTION), dialling())
    assert [(t.host, t.jump and t.jump.host) for t in targets.values()] == [
        ("10.42.0.10", "198.51.100.7"),
        ("10.42.0.11", "198.51.100.7"),
    ]
    jump = targets[0].jump
    assert jump is not None and jump.name == "bastion" and jump.label == "bastion (the way in)"
    assert jump.host_keys is not None and list(jump.host_keys()) == ["ssh-ed25519 BASTION"]


def test_the_bastion_is_logged_in_as_its_own_images_user() -> None:
    """The bastion boots its own image (Amazon Linux: ec2-user), not the nodes' (ubuntu)."""
    own = dataclasses.replace(BASTION, user="ec2-user")
    targets, _ = node_targets(topology(own), dialling())
    assert {t.user for t in targets.values()} == {"ubuntu"}
    assert {t.jump.user for t in targets.values() if t.jump} == {"ec2-user"}


def test_node_0_as_the_way_in_is_dialled_directly_and_the_others_through_it() -> None:
    way_in = WayIn("node-0", "198.51.100.1", node=0)
    targets, _ = node_targets(topology(way_in, "198.51.100.1"), dialling())
    assert targets[0] == SshTarget("198.51.100.1", "ubuntu")
    jump = targets[1].jump
    assert targets[1].host == "10.42.0.11" and jump is not None
    assert (jump.name, jump.host) == ("node-0", "198.51.100.1")
    assert jump.host_keys is not None and list(jump.host_keys()) == ["ssh-ed25519 NODE0"]


def test_node_0s_own_copy_dials_the_private_addresses_directly() -> None:
    targets, _ = node_targets(topology(BASTION), dialling(on_node_0=True))
    assert targets == {0: SshTarget("10.42.0.10", "ubuntu"), 1: SshTarget("10.42.0.11", "ubuntu")}


def test_emulated_nodes_go_through_the_emulated_bastion_or_say_why_not() -> None:
    stand_ins = {
        "bastion": EmulatedNode("127.9.0.2", 22),
        "node-0": EmulatedNode("127.9.1.2", 22, "/tmp/n0"),
        "node-1": EmulatedNode("127.9.1.3", 22, "/tmp/n1"),
    }
    targets, unreachable = node_targets(topology(BASTION), dialling(emulated=stand_ins))
    assert unreachable == {}
    assert targets[1].host == "127.9.1.3" and targets[1].root == "/tmp/n1"
    assert targets[1].jump is not None and targets[1].jump.host == "127.9.0.2"

    without = {k: v for k, v in stand_ins.items() if k != "bastion"}
    targets, unreachable = node_targets(topology(BASTION), dialling(emulated=without))
    assert targets == {}
    assert "reached through bastion" in unreachable[0] and "does not map" in unreachable[0]

    with pytest.raises(
        ConfigError, match=r"a node of 'c' or its way in: \['node-0', 'node-1', 'bastion'\]"
    ):
        node_targets(
            topology(BASTION), dialling(emulated={**stand_ins, "nope": stand_ins["bastion"]})
        )
