"""Starting a job: its nodes' agents (skyinfra_runtime's supervise), the head first, with
the job's token, env and secrets on its stdin (skyinfra.run.job follows and ends it)."""

from __future__ import annotations

import getpass
import json
import secrets
import signal
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyinfra_runtime.s3 import PRIVATE_KEY
from skyinfra_runtime.topology import Topology

from skyinfra.errors import ClusterBusyError, Detached, TransportError
from skyinfra.run.job import DETACHING_SIGNALS, json_line, runtime_bin
from skyinfra.run.launch import JobLaunch, Restarts
from skyinfra.transport.base import NodeProcess, NodeTransport


def who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


# Per node: the launcher's argv, environment and working directory.
NodeLaunches = Mapping[int, tuple[list[str], dict[str, str], str]]


@dataclass(frozen=True)
class HeadWord:
    """What the head said of a job as its agents started: its place in the head's queue
    (seq, position, waits_for, held_by) when other jobs hold the nodes, else None; the nodes
    it gave the job, rank 0 first, when it started it at once (empty for a queued one); and
    the nodes whose agents were started for it."""

    queued: dict[str, Any] | None
    world: tuple[int, ...]
    agents: tuple[int, ...]


def agent_nodes(nodes: Sequence[int], world: Sequence[int], queued: bool) -> list[int]:
    """The nodes a job's agents start on once the head answered: a queued job's on every
    node (it starts on whichever free first, after `run` may be gone), a job started at once
    on its world's alone (and node 0's, its supervisor): a one-node job on an 8-node cluster
    starts two agents, not eight, and its peers' copies wait for no other node."""
    if queued or not world:
        return sorted(nodes)
    return sorted({0, *world} & set(nodes))


def start_job(
    transport: NodeTransport,
    topology: Topology,
    job_id: str,
    launch: JobLaunch,
    per_node: NodeLaunches,
    *,
    timeout_s: float | None,
    attempts_before: Sequence[Mapping[str, Any]] = (),
    created_at: float | None = None,
) -> HeadWord:
    """Start the job's agents: the head first (it says which port it listens on, and starts
    the job at once on the nodes it gives it, or queues it), then the peers (agent_nodes).
    Returns the head's word (HeadWord): a queued job's agents are all started and wait (the
    peers for the head's "start"); the head starts it when its turn comes. ``per_node``:
    each node's launcher. The job's token and ``launch``'s job_env (the user's env and
    secrets) go on each agent's stdin, never on a command line or in a file; the record keeps
    env and the secrets' names. ``launch``'s checkpoints: the job's
    checkpoint set (None: the job id), on every agent's command line (``--checkpoints``) and
    in the record. ``created_at``: a job started again (after ``attempts_before``) keeps its
    first creation time, from which its timeout counts."""
    # A hang-up or SIGTERM while the agents start waits until every one has (a job whose peers
    # never start would fail after JOIN_WAIT_S), then stops following (Detached), as the
    # handler `run` installed would. Deferred by a handler of our own, not by blocking the
    # signal: a blocked mask would be inherited by the agents and the user's processes.
    old: dict[int, Any] = {}
    hung_up: list[int] = []
    if threading.current_thread() is threading.main_thread():
        for signum in DETACHING_SIGNALS:
            current = signal.getsignal(signum)
            if callable(current):
                old[signum] = current
                signal.signal(signum, lambda got, _: hung_up.append(got))
    recover = (launch.restarts or Restarts()).head_recovery
    if recover is not None and recover.prepare is not None:
        recover.prepare(transport)  # what node 0's recovery command needs there
    try:
        queued = _start_agents(
            transport,
            topology,
            job_id,
            launch,
            per_node,
            timeout_s=timeout_s,
            attempts_before=attempts_before,
            created_at=created_at,
        )
    finally:
        for number, handler in old.items():
            signal.signal(number, handler)
    if hung_up:  # every agent started (a failure to start raised above)
        raise Detached(job_id, hung_up[0])
    return queued


def _start_agents(
    transport: NodeTransport,
    topology: Topology,
    job_id: str,
    launch: JobLaunch,
    per_node: NodeLaunches,
    *,
    timeout_s: float | None,
    attempts_before: Sequence[Mapping[str, Any]] = (),
    created_at: float | None = None,
) -> HeadWord:
    """``attempts_before``: a job started again after a lost node was replaced goes on as the
    next attempt (its record keeps the earlier ones)."""
    token = secrets.token_hex(16)
    job_env, checkpoints = launch.job_env, launch.checkpoints
    restarts = launch.restarts or Restarts()
    private: dict[str, Any] = {"token": token, **job_env.private()}
    if launch.store_credentials is not None:  # never in the record, a file or an argv
        private[PRIVATE_KEY] = launch.store_credentials.to_private()
    # The head's alone, with the token and secrets (not in the record): the command it runs
    # to recover the job itself, and that command's settings.
    recover = restarts.head_recovery
    head_private = {**private, **({"recover": recover.private()} if recover else {})}
    head_ip = topology.nodes[0].private_ip
    meta = {
        "entry": launch.entry,
        "args": list(launch.args),
        "started_by": who(),
        "nodes_total": len(per_node),
        "checkpoints": checkpoints or job_id,
        **job_env.record(),
        **({"attempts_before": [dict(a) for a in attempts_before]} if attempts_before else {}),
        **({"created_at": created_at} if created_at is not None else {}),
    }

    def start(i: int, role: list[str]) -> NodeProcess:
        argv, env, cwd = per_node[i]
        sup = [
            runtime_bin(transport, i), "supervise",
            "--job", job_id,
            "--node-dir", transport.node_root(i),
            "--node", str(i),
            "--private-stdin",
            "--checkpoints", checkpoints or job_id,
            "--attempt", str(len(attempts_before) + 1),
            *role,
        ]  # fmt: skip
        stdin = json.dumps(head_private if i == 0 else private).encode()
        return transport.start(
            i, [*sup, "--", *argv], env=env, cwd=cwd, tag=f"{job_id}-start", stdin=stdin
        )

    def started(i: int, proc: NodeProcess) -> dict[str, Any]:
        out = list(proc.lines())
        code = proc.wait(60)
        said = json_line(out)
        if said is not None and isinstance(said.get("busy"), dict):
            # The head refused: another job's supervisor started first (refuse_if_busy's
            # look came before it).
            raise ClusterBusyError(topology.cluster, said["busy"])
        if code != 0 or said is None:
            raise TransportError(
                f"node {i}: the job's agent did not start (exit {code}): "
                + job_env.mask(" ".join(out))
            )
        return said

    role = ["--nodes", str(len(per_node)), "--listen", head_ip, "--meta", json.dumps(meta)]
    if timeout_s is not None:
        role += ["--timeout", f"{timeout_s:g}"]
    role += ["--max-restarts", str(restarts.max_restarts), "--retry-on", restarts.retry_on]
    if launch.world is not None:  # K of the nodes: every node's agent starts, the head picks
        role += ["--world", str(launch.world)]
    if launch.on is not None:  # named nodes: the head starts it on those once they are free
        role += ["--on", ",".join(str(i) for i in launch.on)]
    if launch.priority:
        role += ["--priority", str(launch.priority)]
    said = started(0, start(0, role))
    head = f"{said.get('host', head_ip)}:{said['port']}"
    queued = said.get("queued") if isinstance(said.get("queued"), dict) else None
    given = said.get("world") if queued is None else None
    world = tuple(int(i) for i in given) if isinstance(given, list) else ()
    agents = agent_nodes(list(per_node), world, queued is not None)
    # Every peer waits for the head's "start", which carries the job's own ports (at once for
    # a job the head started, when its turn comes for a queued one).
    peer_role = ["--head", head, "--wait-start"]
    # The peers start together: each start is a process (or an SSH channel) of its own, and
    # waiting for one before starting the next cost 0.2 s a node (1.5 s of an 8-node start).
    peers = {i: start(i, peer_role) for i in agents if i != 0}
    failed: list[TransportError] = []
    for i, proc in peers.items():  # every one is waited for, even after a failure
        try:
            started(i, proc)
        except TransportError as err:
            failed.append(err)
    if failed:
        raise failed[0]
    return HeadWord(queued, world, tuple(agents))
