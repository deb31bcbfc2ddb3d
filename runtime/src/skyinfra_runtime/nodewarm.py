"""``skyinfra-runtime warm-up --topology T --node N [--wait-s S]``: start this node's standby
workers now, before any job asks (standbys.py): the operator runs it on each node once the
node is ready (after `up`, and on a node that replaced a lost one before the job's next
attempt starts there). It runs in the node's environment as the transport gives it, as a
launcher does, so its standbys' imports are the ones a job's launcher would have asked for;
it is handed no job's variable and no secret.

Prints one JSON line: ``{"slots": K, "ready": R}`` (K: the standbys asked for, 0 when the
cluster wants none; R: those waiting once it returns). With ``--wait-s``, it returns once
every slot has a standby waiting, the keeper gave up, or S seconds passed.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from skyinfra_runtime import exitcodes, nodefacts, rundirs, standbys, warm
from skyinfra_runtime.errors import RuntimeSetupError, TopologyError, UsageError
from skyinfra_runtime.launcher import resolve_procs
from skyinfra_runtime.topology import Topology, load_topology, node_index

POLL_S = 0.2
# A keeper not running this long after the ask ended: it gave up (a framework that does not
# import), and waiting longer would not help.
KEEPER_START_S = 5.0


def wanted(topology: Topology, node: int) -> tuple[int, warm.Warmup | None]:
    """The standbys the cluster wants on ``node`` at rest: one per worker slot of a job run
    with the spec's procs_per_node, doing the plugins' warmup (none: ``warm_workers = false``,
    or no plugin that has one)."""
    if not topology.warm_workers:
        return 0, None
    procs = resolve_procs(topology.procs_per_node, topology, node)
    # As the launcher asks (launcher._Warmth): torch's standby is keyed by the thread count
    # its worker count and the node's environment give, so a job finds it fit.
    warmup = warm.node_warmup(topology.plugins, procs, os.environ)
    return (0, None) if warmup is None else (procs, warmup)


def waiting_slots(node_dir: Path) -> set[int]:
    return {s.slot for s in nodefacts.waiting_standbys(node_dir)}


def warm_up(node_dir: Path, slots: int, warmup: warm.Warmup, wait_s: float) -> int:
    """Ask the keeper for the standbys (starting it); how many wait once it returns."""
    folder = standbys.folder(node_dir)
    standbys.ensure(folder, slots, warmup, warm.standby_env(os.environ))
    started = time.monotonic()
    while len(waiting_slots(node_dir)) < slots and (time.monotonic() - started) < wait_s:
        if time.monotonic() - started > KEEPER_START_S and not standbys.keeper_running(folder):
            break
        time.sleep(POLL_S)
    return len(waiting_slots(node_dir))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="skyinfra-runtime warm-up")
    parser.add_argument("--topology", required=True, help="path or inline JSON")
    parser.add_argument("--node", required=True, help="this node's index")
    parser.add_argument("--wait-s", type=float, default=0.0, help="wait for them (seconds)")
    ns = parser.parse_args(argv)
    node_dir = os.environ.get(rundirs.NODE_DIR_ENV)
    try:
        if not node_dir:
            raise UsageError(f"${rundirs.NODE_DIR_ENV} is not set: no node folder to warm")
        topology = load_topology(ns.topology)
        node = node_index(topology, ns.node)
        slots, warmup = wanted(topology, node)
    except (UsageError, TopologyError, RuntimeSetupError) as exc:
        print(f"skyinfra-runtime warm-up: {exc}")
        return exitcodes.USAGE
    if warmup is None:
        standbys.stop(standbys.folder(node_dir))  # a cluster that wants none keeps none
        ready = 0
    else:
        ready = warm_up(Path(node_dir), slots, warmup, ns.wait_s)
    print(json.dumps({"slots": slots, "ready": ready}))
    return exitcodes.OK
