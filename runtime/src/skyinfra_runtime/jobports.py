"""Each job's own ports: the head gives every job it starts a JAX coordinator port and a torch
rendezvous port (the next one) that no other live job of the cluster holds, so that jobs
side by side on one cluster never join each other's.

The range is a pair per node of the cluster from the topology's ``head_port`` on:
``head_port .. head_port + 2 * nodes - 1``. Every job holds at least one node, so a pair is
free whenever nodes are; the first job gets ``head_port`` and ``head_port + 1``, as every job
did before. The AWS nodes' security group allows all traffic between the cluster's members;
the local target claims the whole range when it brings a cluster up; an ssh cluster's
machines must let each other reach it (docs/guides/jobs.md).

The head writes the job's base port into every node's launcher environment
(``SKYINFRA_JOB_PORT``); the launcher hands its workers the topology with that port as
``head_port`` (``job_topology``), so the plugins, ``instance_info()`` and torchrun's
variables all use the job's ports.

Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from skyinfra_runtime.errors import TopologyError
from skyinfra_runtime.jobrecord import JobPorts
from skyinfra_runtime.topology import Topology

# The job's base port (its JAX coordinator's; torch's rendezvous is the next), and the
# cluster's nodes it runs on (rank order, comma-separated), set by the job's agent in its
# launcher's environment.
PORT_ENV = "SKYINFRA_JOB_PORT"
WORLD_ENV = "SKYINFRA_JOB_NODES"
HIGHEST_PORT = 65535


def port_range(head_port: int, nodes: int) -> range:
    """Every port the jobs of a cluster of ``nodes`` nodes may be given (a pair per node)."""
    return range(head_port, min(HIGHEST_PORT + 1, head_port + 2 * max(1, nodes)))


def allocate(head_port: int, nodes: int, taken: Iterable[JobPorts]) -> JobPorts | None:
    """The first pair of the range that none of ``taken`` (the live jobs' ports) holds a port
    of; None when every pair is held."""
    held = {p for t in taken for p in (t.jax, t.torch)}
    ports = port_range(head_port, nodes)
    for jax in ports[::2]:
        if jax + 1 in ports and jax not in held and jax + 1 not in held:
            return JobPorts(jax=jax, torch=jax + 1)
    return None


def job_topology(topology: Topology, node: int, environ: Mapping[str, str]) -> tuple[Topology, int]:
    """The topology the job's workers see, and cluster node ``node``'s index in it: the
    cluster's, with the job's own base port (``environ``'s) as head_port, and only the job's
    nodes (``run --nodes K``), numbered from 0 in the head's order, its first the job's head;
    the cluster's unchanged outside a job the head started."""
    raw = environ.get(PORT_ENV)
    if raw:
        try:
            port = int(raw)
        except ValueError:
            port = 0
        if not 1 <= port < HIGHEST_PORT:
            raise TopologyError(
                f"environment variable {PORT_ENV}={raw!r} is not a port; expected 1.."
                f"{HIGHEST_PORT - 1}"
            )
        topology = dataclasses.replace(topology, head_port=port)
    listed = environ.get(WORLD_ENV)
    if not listed:
        return topology, node
    try:
        world = [int(i) for i in listed.split(",")]
    except ValueError:
        world = []
    total = len(topology.nodes)
    if not world or node not in world or any(not 0 <= i < total for i in world):
        raise TopologyError(
            f"environment variable {WORLD_ENV}={listed!r}: expected this node ({node}) among "
            f"distinct node indices from 0 to {total - 1}"
        )
    nodes = tuple(dataclasses.replace(topology.nodes[i], index=k) for k, i in enumerate(world))
    world_topology = dataclasses.replace(topology, nodes=nodes, head_addr=nodes[0].private_ip)
    return world_topology, world.index(node)
