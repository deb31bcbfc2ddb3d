"""Which address gloo (JAX's and torch's CPU collectives) gives the other processes (issue 45:
the ssh target's hosts), and for torch the interface that holds it. Its default is the address
the machine's hostname resolves to, which is a loopback one on many machines (a VM's
127.0.0.1, Debian's 127.0.1.1): another host's process then dials its own loopback
("Connection refused") and the job hangs until gloo gives up."""

from __future__ import annotations

from skyinfra_runtime.plugins.base import interface_of
from skyinfra_runtime.plugins.jax import gloo_address
from skyinfra_runtime.topology import Node, Topology


def topology(*addresses: str) -> Topology:
    nodes = tuple(Node(i, f"node-{i}", a, a, f"n{i}") for i, a in enumerate(addresses))
    return Topology(cluster="lab", provider="ssh", head_addr=addresses[0], head_port=29500,
                    nodes=nodes)  # fmt: skip


def test_the_nodes_own_address_when_it_is_this_machines() -> None:
    # 127.0.0.7 stands for a host's own address: this machine can bind it.
    assert gloo_address(topology("127.0.0.5", "127.0.0.7"), 1) == "127.0.0.7"


def test_gloos_default_when_the_nodes_address_is_not_here() -> None:
    # A stand-in node whose topology names another machine's address: not bindable here.
    assert gloo_address(topology("127.0.0.5", "203.0.113.9"), 1) is None


def test_torchs_gloo_gets_the_interface_that_holds_the_address() -> None:
    # torch's gloo takes an interface (GLOO_SOCKET_IFNAME): loopback's holds 127.0.0.1.
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("203.0.113.9") is None
