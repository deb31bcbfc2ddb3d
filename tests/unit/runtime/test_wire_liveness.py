"""The bound on a silent connection between the head and a peer's agent
(skyinfra_runtime.jobs.wire): its setting, a silent peer's read ending, heartbeats keeping a
quiet one alive, the kernel's options, and lines from several sending threads never mixed."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from skyinfra_runtime.jobs import wire


@pytest.mark.parametrize(
    ("value", "bound"),
    [(None, wire.SILENT_PEER_S), ("7.5", 7.5), ("0", wire.SILENT_PEER_S),
     ("-3", wire.SILENT_PEER_S), ("soon", wire.SILENT_PEER_S)],
)  # fmt: skip
def test_the_bound_is_45_s_unless_the_environment_names_a_positive_one(
    monkeypatch: pytest.MonkeyPatch, value: str | None, bound: float
) -> None:
    if value is None:
        monkeypatch.delenv(wire.SILENT_PEER_ENV, raising=False)
    else:
        monkeypatch.setenv(wire.SILENT_PEER_ENV, value)
    assert wire.silent_peer_s() == bound
    assert wire.SILENT_PEER_S == 45.0
    assert wire.heartbeat_s(45.0) == 5.0 and wire.heartbeat_s(2.0) == 0.5


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        near = socket.create_connection(server.getsockname())
        far, _ = server.accept()
    with near, far:
        yield near, far


def test_a_peer_that_says_nothing_ends_the_read_and_the_kernel_bounds_it_too(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    near, _far = tcp_pair  # open and silent: no FIN, nothing sent
    wire.bound_silence(near, 0.3)
    assert near.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        assert near.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 1000
    with pytest.raises(TimeoutError):
        list(wire.messages(near))


def test_heartbeats_keep_a_quiet_peer_alive_and_lines_never_mix(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    near, far = tcp_pair
    wire.bound_silence(near, 60.0)  # generous: only a dead heartbeat would reach it
    beating = wire.heartbeat(far, {"event": "alive"}, 0.01)
    senders = [
        threading.Thread(
            target=lambda k=k: [wire.send(far, {"n": k, "pad": "x" * 5000}) for _ in range(200)]
        )
        for k in range(3)
    ]
    for t in senders:
        t.start()
    counts = {0: 0, 1: 0, 2: 0}
    beats = 0
    for msg in wire.messages(near):
        if msg.get("event") == "alive":
            beats += 1
        else:
            counts[msg["n"]] += 1  # a line mixed with another would not parse (the read ends)
        if sum(counts.values()) == 600 and beats >= 3:
            break
    beating.set()
    for t in senders:
        t.join()
    assert counts == {0: 200, 1: 200, 2: 200}
