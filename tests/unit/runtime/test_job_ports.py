"""Each job's own ports and nodes (skyinfra_runtime.jobports, jobplace): the head's choices as
pure functions of the cluster's head_port, its node count and what the live jobs hold, checked
against golden tables (SKYINFRA_UPDATE_GOLDEN=1 rewrites them); the topology a job's workers
see."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from skyinfra_runtime.errors import TopologyError
from skyinfra_runtime.jobplace import nodes_words, place, waits_for
from skyinfra_runtime.jobports import PORT_ENV, WORLD_ENV, allocate, job_topology, port_range
from skyinfra_runtime.jobrecord import JobPorts, JobRecord

from tests.support.topologies import local_topology

GOLDEN = Path(__file__).parents[1] / "golden" / "ports" / "allocation.txt"

# (head_port, nodes, the live jobs' ports as jax ports, why the case is here)
CASES = [
    (29500, 2, [], "an idle cluster: the topology's head_port, as before"),
    (29500, 2, [29500], "one job runs: the next pair"),
    (29500, 2, [29500, 29502], "every pair of a 2-node cluster held: none"),
    (29500, 4, [29502], "a hole below a held pair is given first"),
    (29500, 4, [29500, 29504], "the lowest free pair between held ones"),
    (29500, 1, [], "a 1-node cluster: one pair"),
    (29500, 1, [29500], "a 1-node cluster whose pair is held: none"),
    (65532, 4, [], "the range stops at 65535"),
    (65532, 4, [65532], "its last whole pair"),
    (65532, 4, [65532, 65534], "no pair past 65535"),
]


def _taken(jax_ports: list[int]) -> list[JobPorts]:
    return [JobPorts(jax=p, torch=p + 1) for p in jax_ports]


def table() -> str:
    lines = ["head_port nodes range        held             -> given         why"]
    for head_port, nodes, held, why in CASES:
        got = allocate(head_port, nodes, _taken(held))
        span = port_range(head_port, nodes)
        given = "none" if got is None else f"{got.jax}/{got.torch}"
        held_words = ",".join(str(p) for p in held) or "-"
        lines.append(
            f"{head_port:<9} {nodes:<5} {span[0]}-{span[-1]:<6} {held_words:<16} -> "
            f"{given:<13} {why}"
        )
    return "\n".join(lines) + "\n"


def test_allocation_golden() -> None:
    text = table()
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_no_two_live_jobs_get_a_port_twice() -> None:
    """Jobs started one after another while all live: each pair once, until none is left."""
    held: list[JobPorts] = []
    while (got := allocate(29500, 8, held)) is not None:
        held.append(got)
    ports = [p for h in held for p in (h.jax, h.torch)]
    assert len(held) == 8 and sorted(ports) == list(port_range(29500, 8))


def test_the_record_keeps_the_ports() -> None:
    record = JobRecord.from_dict({"id": "j", "ports": {"jax": 29502, "torch": 29503}})
    assert record.ports == JobPorts(jax=29502, torch=29503)
    assert record.to_dict()["ports"] == {"jax": 29502, "torch": 29503}
    assert "ports" not in JobRecord.from_dict({"id": "old"}).to_dict()  # older records


def test_the_workers_topology_has_the_jobs_port_and_nodes() -> None:
    cluster = local_topology(3)
    mine, node = job_topology(cluster, 1, {PORT_ENV: "29502"})
    assert (mine.jax_port, mine.torch_port, mine.nodes, node) == (29502, 29503, cluster.nodes, 1)
    assert job_topology(cluster, 2, {}) == (cluster, 2)  # outside a job the head started
    # `run --nodes 2` on nodes 2 and 1: node 2 is the job's rank 0 and its head address.
    world, node = job_topology(cluster, 1, {PORT_ENV: "29504", WORLD_ENV: "2,1"})
    assert node == 1 and [n.index for n in world.nodes] == [0, 1]
    assert [n.private_ip for n in world.nodes] == [
        cluster.nodes[2].private_ip,
        cluster.nodes[1].private_ip,
    ]
    assert world.head_addr == cluster.nodes[2].private_ip and world.head_port == 29504
    with pytest.raises(TopologyError, match=f"{PORT_ENV}='x' is not a port"):
        job_topology(cluster, 0, {PORT_ENV: "x"})
    with pytest.raises(TopologyError, match=f"{WORLD_ENV}='1,2': expected this node \\(0\\)"):
        job_topology(cluster, 0, {WORLD_ENV: "1,2"})


# (nodes of the cluster, the live jobs' nodes, nodes asked for, why)
PLACES = [
    (2, [], 2, "an idle cluster, every node"),
    (2, [], 1, "an idle cluster, one node: the lowest"),
    (2, [[0]], 1, "node 0 held: node 1"),
    (2, [[0]], 2, "node 0 held, both asked: none"),
    (2, [[0], [1]], 1, "both held: none"),
    (4, [[1], [3]], 2, "the free ones, not in a row"),
    (4, [[0, 1, 2, 3]], 1, "a whole-cluster job holds all"),
]
# (nodes of the cluster, the live jobs' nodes, the nodes a resuming job needs, why)
PLACES_ONLY = [
    (2, [[0]], [1], "its node free: it"),
    (2, [[1]], [1], "its node held: none"),
    (4, [[2]], [0, 1], "its two free: them"),
]


def places() -> str:
    lines = ["nodes held             want -> given"]
    for total, held, want, why in PLACES:
        got = place(total, held, want)
        given = "none" if got is None else nodes_words(got)
        lines.append(f"{total:<5} {held!s:<16} {want:<4} -> {given:<12} {why}")
    for total, held, only, why in PLACES_ONLY:
        got = place(total, held, len(only), only)
        given = "none" if got is None else nodes_words(got)
        lines.append(f"{total:<5} {held!s:<16} {only!s:<4} -> {given:<12} {why}")
    lines.append("")
    lines.append("what a queued job waits for:")
    for total, want, holders, ahead in [
        (2, 2, [("J", (0, 1))], []),
        (2, 2, [("J", (0,))], []),  # a whole-cluster job behind a one-node job
        (2, 1, [("J", (0,)), ("L", (1,))], []),
        (4, 2, [("J", (0, 1, 2))], ["M"]),
        (2, 1, [], ["M", "N"]),
    ]:
        lines.append(f"{total} nodes, {want} wanted: {waits_for(total, want, holders, ahead)}")
    said = waits_for(2, 1, [("J", (0,)), ("L", (1,))], [], only=(1,))
    lines.append(f"2 nodes, node 1 needed: {said}")
    return "\n".join(lines) + "\n"


def test_placement_golden() -> None:
    """Which nodes a job gets (the lowest free ones) and what a queued one waits for."""
    path = GOLDEN.with_name("placement.txt")
    text = places()
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
