"""`status`: the cluster's state, resources and nodes, each node's readiness, Spot notice and
waiting standby workers, the running jobs, and the target's own facts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from skyinfra_runtime.nodefacts import NodeFacts

from skyinfra import shared_state
from skyinfra.errors import SkyinfraError, part_made
from skyinfra.lifecycle.markers import unfinished_command
from skyinfra.lifecycle.verbs import target_of, transport_for
from skyinfra.spec import ClusterSpec
from skyinfra.terraform import EmbeddedTerraform, EngineFactory
from skyinfra.terraform.backend import has_backend
from skyinfra.topology import Topology, read_topology
from skyinfra.transport import Readiness
from skyinfra.transport.readiness import check_readiness
from skyinfra.workspace import Workspace

# `status` asks every node whether it is ready; a node that does not answer within this many
# seconds shows as unreachable.
STATUS_CONNECT_TIMEOUT_S = 5.0


def _node_facts(
    ws: Workspace, spec: ClusterSpec, topology: Topology, ready: Sequence[int]
) -> dict[int, NodeFacts]:
    """What each ready node's runtime says of it (skyinfra_runtime.nodefacts): its Spot
    interruption notice, the one its job's agent recorded or its metadata service's now, and
    its waiting standby workers with their memory. A node that does not answer is left out."""
    from skyinfra.run.job import runtime_bin

    found: dict[int, NodeFacts] = {}
    try:
        transport = transport_for(
            ws, topology, spec=spec, connect_timeout_s=STATUS_CONNECT_TIMEOUT_S
        )
    except SkyinfraError:
        return found
    try:
        for i in ready:
            try:
                root = transport.node_root(i)
                argv = [runtime_bin(transport, i), "node-facts", "--node-dir", root]
                proc = transport.start(i, argv, env={}, cwd=root, tag=f"status-facts-{i}")
                lines = list(proc.lines())
                if proc.wait(30) != 0 or not lines:
                    continue
                said = json.loads(lines[-1])
            except (SkyinfraError, OSError, ValueError):
                continue
            if isinstance(said, dict):
                found[i] = NodeFacts.from_dict(said)
    finally:
        transport.close()
    return found


def _running_jobs(
    ws: Workspace, spec: ClusterSpec, topology: Topology
) -> tuple[list[dict[str, Any]], str]:
    """The running jobs' records as `status` reports them (JSON), and why they could not be
    read ("" when they could)."""
    from skyinfra.run.job import running_jobs

    timeout = STATUS_CONNECT_TIMEOUT_S
    found, why = running_jobs(
        lambda: transport_for(ws, topology, spec=spec, connect_timeout_s=timeout)
    )
    return [job.to_dict() for job in found], why


def node_readiness(
    ws: Workspace,
    spec: ClusterSpec,
    topology: Topology,
    *,
    connect_timeout_s: float | None = None,
) -> dict[int, Readiness]:
    """Every node's readiness through its transport; a node that cannot be reached (or a
    transport that cannot be set up, such as a missing SSH key) reads as unreachable."""
    try:
        transport = transport_for(ws, topology, spec=spec, connect_timeout_s=connect_timeout_s)
    except SkyinfraError as err:
        return {n.index: Readiness("unreachable", str(err)) for n in topology.nodes}
    try:
        return check_readiness(transport, topology)
    finally:
        transport.close()


def _state(ws: Workspace, resources: Sequence[str], topology: Topology | None) -> tuple[str, str]:
    """The cluster's state for `status` (up, down or incomplete), and for an incomplete one
    what happened and what to run."""
    if not resources:
        return "down", ""
    command = unfinished_command(ws)
    if topology is not None and command is None:
        return "up", ""
    holders = ws.lock_holders()
    if holders:
        who = " and ".join(f"`skyinfra {h.command}` (pid {h.pid})" for h in holders)
        return "incomplete", (
            f"{who} {'are' if len(holders) > 1 else 'is'} changing the cluster now: wait for "
            f"{'them' if len(holders) > 1 else 'it'} to end"
        )
    return "incomplete", part_made(ws.name, command or "up")


def status(ws: Workspace, *, engine_factory: EngineFactory = EmbeddedTerraform) -> dict[str, Any]:
    """The cluster's state, resources and nodes; each node says whether it is ready
    (``readiness``: ready, pending, failed or unreachable, with ``readiness_detail``)."""
    spec = ws.spec()
    engine = engine_factory(ws.path)
    if has_backend(ws.path):  # shared state: another operator may have changed the cluster
        shared_state.ensure_init(ws, engine)
        shared_state.refresh_topology(ws, spec, engine)
    resources = engine.state_list() if shared_state.has_state(ws) else []
    topology = read_topology(ws.topology_file) if ws.topology_file.is_file() else None
    nodes: list[dict[str, Any]] = []
    if topology is not None:
        readiness = node_readiness(ws, spec, topology, connect_timeout_s=STATUS_CONNECT_TIMEOUT_S)
        for node in topology.nodes:
            ready = readiness[node.index]
            nodes.append(
                {
                    "index": node.index,
                    "name": node.name,
                    "private_ip": node.private_ip,
                    "public_ip": node.public_ip,
                    "instance_id": node.instance_id,
                    # The topology's count (aws: the instance type's; ssh: nvidia-smi's).
                    "gpus": node.accelerator.count if node.accelerator else 0,
                    "gpu_type": node.accelerator.type if node.accelerator else None,
                    "ready": ready.ready,
                    "readiness": ready.state,
                    "readiness_detail": ready.detail,
                    "phase": ready.phase,
                    "phase_s": ready.phase_s,
                    "bootstrap_s": ready.bootstrap_s,
                }
            )
    answering = [int(n["index"]) for n in nodes if n["ready"]]
    if topology is not None and answering:
        facts = _node_facts(ws, spec, topology, answering)
        for n in nodes:
            said = facts.get(int(n["index"]))
            n["interrupted"] = said.interrupted if said else None
            # Its waiting standby workers (None: the node did not say).
            n["standbys"] = [s.to_dict() for s in said.standbys] if said else None
    jobs: list[dict[str, Any]] = []
    jobs_error = ""
    if topology is not None and nodes and nodes[0]["readiness"] == "ready":
        jobs, jobs_error = _running_jobs(ws, spec, topology)
    state, unfinished = _state(ws, resources, topology)
    problems = [unfinished] if unfinished else []
    for n in nodes:
        if n["readiness"] == "failed":
            problems.append(f"{n['name']} failed: {n['readiness_detail'] or 'no detail'}")
    target = target_of(spec)
    info = {
        "cluster": spec.name,
        "provider": spec.provider,
        "workspace": str(ws.path),
        # up, down, or incomplete: an `up` (or `apply`) did not finish ("problems" says what
        # to run).
        "state": state,
        # Nothing incomplete, no node failed: `status` exits 0 (else CLUSTER_UNHEALTHY).
        "healthy": not problems,
        "problems": problems,
        "engine": engine.describe(),
        "backend": spec.backend or "local (the workspace)",
        "resources": resources,
        "nodes": nodes,
        "jobs": jobs,  # the running ones (the head's records)
        "jobs_error": jobs_error,
        # What the nodes install, where the target says (aws: the pinned jax).
        "node_installs": target.node_installs(ws, spec),
    }
    # A target's own facts (aws: the zone, and why it is not the first choice).
    info.update(target.status_details(ws, spec))
    return info
