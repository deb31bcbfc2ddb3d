"""The head's rendezvous ports (jax: head_port, torch: head_port + 1): free on the head, and
reachable from every node over the private addresses while a listener holds them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from skyinfra.verify.context import VerifyContext


@pytest.fixture(scope="module")
def listener(cluster: VerifyContext) -> Iterator[str]:
    held = cluster.ports_held_by_a_job()
    if held is not None:
        pytest.skip(held)
    status = cluster.start_listener()
    try:
        yield status
    finally:
        cluster.stop_listener()


def test_ports_free_on_head(cluster: VerifyContext, node: int, listener: str) -> None:
    if node != cluster.head:
        pytest.skip("n/a: the ports are the head's")
    if listener.startswith("held "):
        port = int(listener.split()[1])
        pytest.fail(
            f"port {port} is already held by another process on the head "
            f"({listener.split(' ', 2)[2]}): the {_owner(cluster, port)} rendezvous would fail",
            pytrace=False,
        )
    assert listener == "listening", listener


def test_ports_reachable(cluster: VerifyContext, node: int, listener: str) -> None:
    answers = cluster.reach_head(node)
    bad = {port: why for port, why in answers.items() if why != "ok"}
    assert not bad, "; ".join(
        f"{_owner(cluster, int(port))} port {port}: {why}" for port, why in bad.items()
    )


def _owner(cluster: VerifyContext, port: int) -> str:
    return next((name for name, p in cluster.ports.items() if p == port), "rendezvous")
