"""`skyinfra drill interrupt` on the ssh target, and the repair that follows it.

Each host's node runs the stand-in for EC2's metadata service the local target's nodes run
(skyinfra_runtime/imds_standin.py, started by the bootstrap on the host's loopback, ended
with the node). The notice is sent from the host itself, over the node's SSH transport (the
stand-in listens on the host's loopback only). The node's job agent reads it as an AWS Spot
node reads EC2's: its workers get SIGTERM and the deadline, save, and the node goes as an
interrupted instance goes (its folder removed, its disk with it). The host stays: it is the
user's machine and nothing took it away, so the node is enrolled again on the same host
(``gone_nodes``: `up`, and so a run's restarts, re-enrol it with ``-replace``) and gets the
checkpoint sets of a node that was not interrupted, as a spare does (replace.py). A host that
stops answering is the lost-host path instead (spares)."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from skyinfra.errors import SkyinfraError, TransportError, UsageError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.base import Echo, InterruptRequest
from skyinfra.targets.ssh import enrol
from skyinfra.targets.ssh.hosts import enrolled, node_transport
from skyinfra.workspace import Workspace

# A node's resource in the rendered root module (infra/modules/ssh).
NODE_ADDRESS = re.compile(r'^module\.[a-z_]+\.terraform_data\.node\["node-(\d+)"\]$')


def notice_command(node_dir: str, seconds: int) -> str:
    """What runs on the host: the node's runtime sends its own stand-in the notice."""
    python = posixpath.join(node_dir, "venv", "bin", "python")
    return (
        f"{shlex.quote(python)} -m skyinfra_runtime imds-standin "
        f"--node-dir {shlex.quote(node_dir)} --send {seconds}"
    )


def interrupt(ws: Workspace, spec: ClusterSpec, request: InterruptRequest, echo: Echo) -> None:
    """Send node ``request.node``'s stand-in the notice and say what happens next."""
    node, h = request.node, enrolled(ws)[request.node]
    nodes = node_transport(ws, spec)  # rooted at the node's folder: its markers are there
    try:
        ready = nodes.readiness(node)
        if not ready.ready:
            raise UsageError(
                f"NODE node-{node}: not ready on host {h['host']} ({ready.state}: "
                f"{ready.detail}); nothing was sent"
            )
        try:
            said = nodes.check_call(node, notice_command(h["node_dir"], request.notice_s))
        except TransportError as err:
            if err.returncode == 2:  # the runtime's: no stand-in on this node
                raise UsageError(
                    f"NODE node-{node}: host {h['host']}'s node has no IMDS stand-in (enrolled "
                    "before skyinfra gave ssh nodes one); `skyinfra down` then `skyinfra up` "
                    "enrols it with one"
                ) from None
            raise TransportError(f"node {node} (host {h['host']}): {err.stderr.strip()}") from err
    finally:
        nodes.close()
    notice = json.loads(said.strip().splitlines()[-1])
    echo(
        f"[skyinfra] drill: Spot interruption notice sent to node-{node} (host {h['host']}): "
        f"{notice.get('action')} at {notice.get('time')} (in {request.notice_s} s)"
    )
    echo(
        "[skyinfra] its job's workers get SIGTERM and the time left "
        "($SKYINFRA_PREEMPT_DEADLINE); the node goes once its part of the job has ended, or at "
        f"that time, and host {h['host']} stays: `up` (or a run's restart) enrols the node "
        "there again, with the checkpoint sets of a node that was not interrupted"
    )


def gone_nodes(ws: Workspace, spec: ClusterSpec, indexes: Iterable[int]) -> list[int]:
    """Of the nodes ``indexes``, those whose host answers but whose folder holds no enrolled
    node any more (an interrupted node went; a folder deleted by hand). A host that does not
    answer is not one: it is lost, and a spare stands in (replace.py)."""
    hosts = enrolled(ws)
    wanted = sorted(i for i in set(indexes) if i in hosts)
    if not wanted:
        return []
    nodes = node_transport(ws, spec, rooted=False)

    def gone(i: int) -> bool:
        marker = shlex.quote(posixpath.join(hosts[i]["node_dir"], enrol.READY_MARKER))
        try:
            return nodes.check_call(i, f"[ -f {marker} ] && echo ready || echo gone").strip() == (
                "gone"
            )
        except SkyinfraError:
            return False

    try:
        with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
            return [i for i, g in zip(wanted, pool.map(gone, wanted), strict=True) if g]
    finally:
        nodes.close()


def node_indexes(addresses: Iterable[str]) -> dict[int, str]:
    """The nodes' indexes in Terraform's state, each with its resource's address."""
    found = {}
    for address in addresses:
        match = NODE_ADDRESS.match(address)
        if match:
            found[int(match.group(1))] = address
    return found
