"""Standby workers started on ready nodes: each node's runtime (``skyinfra-runtime warm-up``,
skyinfra_runtime/nodewarm.py) run over the node's transport, as a launcher would be, at the
end of `up` and on the nodes that replaced a job's lost ones before its next attempt starts.
A node that cannot start them is said and passed over: its first job starts cold, as before.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from skyinfra_runtime.rundirs import NODE_DIR_ENV
from skyinfra_runtime.warm import job_sets_framework, standby_warmup

from skyinfra.errors import SkyinfraError
from skyinfra.lifecycle.verbs import Echo, transport_for
from skyinfra.spec import ClusterSpec
from skyinfra.topology import Topology
from skyinfra.transport import NodeTransport
from skyinfra.transport.readiness import check_readiness
from skyinfra.workspace import Workspace

# How long a job's next attempt waits for its replaced nodes' standbys (their imports:
# seconds; a bound, past which the attempt starts cold there).
REPLACED_WARM_WAIT_S = 120.0
# Beyond a wait for the standbys, what the warm-up command may take (a Python start).
COMMAND_S = 60.0


def wants_standbys(spec: ClusterSpec, topology: Topology) -> bool:
    """Whether the cluster keeps standby workers at rest: warm_workers on, plugins that have
    one, and no spec env or secret that names a framework variable (every job would then
    start cold, as the launcher says: a standby would never serve)."""
    names = [name for name, _ in spec.env] + list(spec.secrets)
    return (
        topology.warm_workers
        and standby_warmup(topology.plugins) is not None
        and job_sets_framework(names) is None
    )


def warm_ready_nodes(ws: Workspace, spec: ClusterSpec, topology: Topology, echo: Echo) -> None:
    """At the end of `up`: every node that is ready now starts its standbys (not waited for).
    A node still bootstrapping (aws) is passed over: its first job asks for them."""
    if not wants_standbys(spec, topology):
        return
    try:
        transport = transport_for(ws, topology, spec=spec)
    except SkyinfraError as err:
        echo(f"[skyinfra] standby workers not started: {err}")
        return
    try:
        ready = [i for i, r in check_readiness(transport, topology).items() if r.ready]
        warm_nodes(transport, spec, topology, ready, echo)
    finally:
        transport.close()


def warm_nodes(
    transport: NodeTransport,
    spec: ClusterSpec,
    topology: Topology,
    nodes: Collection[int],
    echo: Echo,
    *,
    wait_s: float = 0.0,
) -> None:
    """``nodes`` start their standby workers; with ``wait_s``, return once they wait (or the
    node gave up, or ``wait_s`` passed), so that a job started next finds them."""
    from skyinfra.run.job import runtime_bin
    from skyinfra.run.nodes import NODE_PROCESS_ENV

    if not wants_standbys(spec, topology) or not nodes:
        return
    inline = json.dumps(topology.to_dict())
    started = {}
    for i in sorted(nodes):
        try:
            root = transport.node_root(i)
            argv = [runtime_bin(transport, i), "warm-up", "--topology", inline, "--node", str(i)]
            env = {**NODE_PROCESS_ENV, NODE_DIR_ENV: root}
            started[i] = transport.start(
                i, [*argv, "--wait-s", f"{wait_s:g}"], env=env, cwd=root, tag=f"warm-up-{i}"
            )
        except (SkyinfraError, OSError) as err:
            echo(f"[skyinfra] node-{i}: standby workers not started: {err}")
    for i, proc in started.items():
        try:
            lines = list(proc.lines())
            code = proc.wait(wait_s + COMMAND_S)
        except (SkyinfraError, OSError) as err:
            lines, code = [str(err)], None
        if code != 0:
            said = lines[-1] if lines else f"exit {code}"
            echo(f"[skyinfra] node-{i}: standby workers not started ({said}); jobs start cold")
