"""Each job's own ports (skyinfra_runtime.jobports): the head's choice as a pure function of
the cluster's head_port, its node count and the ports the live jobs hold, checked against a
golden table (SKYINFRA_UPDATE_GOLDEN=1 rewrites it); the topology a job's workers see."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from skyinfra_runtime.errors import TopologyError
from skyinfra_runtime.jobports import PORT_ENV, allocate, job_topology, port_range
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


def test_the_workers_topology_has_the_jobs_port() -> None:
    cluster = local_topology(2)
    mine = job_topology(cluster, {PORT_ENV: "29502"})
    assert (mine.jax_port, mine.torch_port, mine.nodes) == (29502, 29503, cluster.nodes)
    assert job_topology(cluster, {}) == cluster  # outside a job the head started
    with pytest.raises(TopologyError, match=f"{PORT_ENV}='x' is not a port"):
        job_topology(cluster, {PORT_ENV: "x"})
