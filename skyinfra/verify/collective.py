"""The short real collective of `skyinfra verify`: every node launches the runtime with the
cluster's jax and torch plugins (their rendezvous, with a short timeout) and sums one number
per process across the cluster. A node that cannot join fails in seconds, and the others
name it, instead of a run hanging for the plugins' 10-minute default.
"""

from __future__ import annotations

import json
import queue
import re
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skyinfra_runtime.topology import Topology

from skyinfra.errors import TransportError
from skyinfra.transport.base import NodeProcess, NodeTransport
from skyinfra.verify.node import script

RESULT_PREFIX = "skyinfra-verify-collective "
# The frameworks with a cross-process collective here (keras rides on one of them).
COLLECTIVE_PLUGINS = ("jax", "torch")
# jax would take 75% of each GPU's memory at its first use, leaving torch none.
COLLECTIVE_ENV = {"PYTHONUNBUFFERED": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
# Beyond the rendezvous timeout: importing the frameworks and starting the launcher.
START_MARGIN_S = 30.0
# NCCL prints which network it uses at communicator set-up with NCCL_DEBUG=INFO ("NCCL INFO
# Using network AWS Libfabric" with the aws-ofi-nccl plugin, "... Using network Socket" when
# no net plugin loaded: NCCL falls back to TCP without an error; see research F8).
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
_NCCL_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_NCCL_PLUGIN = re.compile(
    r"NCCL INFO (?:NET/OFI Initializing (aws-ofi-nccl \S+)|NET/Plugin\s*:?\s*Loaded (.+?)\s*$)"
)
# How the runtime's plugins say their rendezvous timed out (skyinfra_runtime.plugins).
_RENDEZVOUS_TIMEOUT = re.compile(r"(init_process_group|jax\.distributed\.initialize)\b.* failed")


@dataclass
class CollectiveOutcome:
    """One node's part: ``ok``, else ``reason`` says why; ``lines`` is its output."""

    node: int
    ok: bool = False
    reason: str = ""
    sums: dict[str, float] = field(default_factory=dict)
    # Ended by verify because another node failed first (it could not have finished).
    ended_early: bool = False
    lines: list[str] = field(default_factory=list)

    def nccl_network(self) -> str | None:
        """The network NCCL said it uses (``Socket``, ``Libfabric``, ``IB``...), with the net
        plugin it loaded when it said; None when NCCL said nothing (not used here)."""
        return nccl_network(self.lines)


def nccl_network(lines: Sequence[str]) -> str | None:
    network = plugin = None
    for line in lines:
        if found := _NCCL_NETWORK.search(line):
            network = found.group(1)
        elif found := _NCCL_PLUGIN.search(line):
            plugin = found.group(1) or found.group(2)
    if network is None:
        return None
    return f"{network} ({plugin})" if plugin else network


def collective_topology(topology: Topology, timeout_s: float) -> dict[str, object] | None:
    """The topology the collective launches with: the cluster's jax and torch plugins only,
    each waiting ``timeout_s`` for its peers (None: the cluster has neither)."""
    plugins = [
        {"name": p.name, "options": {**dict(p.options), "init_timeout": timeout_s}}
        for p in topology.plugins
        if p.name in COLLECTIVE_PLUGINS
    ]
    if not plugins:
        return None
    return {**topology.to_dict(), "plugins": plugins}


def run_collective(
    transport: NodeTransport,
    topology: Topology,
    *,
    timeout_s: float,
    tag: str,
    gpu: bool = False,
) -> dict[int, CollectiveOutcome]:
    """Launch the collective on every node at once; wait ``timeout_s`` (+ start margin)."""
    inline = collective_topology(topology, timeout_s)
    outcomes = {n.index: CollectiveOutcome(n.index) for n in topology.nodes}
    if inline is None:
        return outcomes
    frameworks = [p["name"] for p in inline["plugins"]]  # type: ignore[attr-defined]
    lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
    procs: dict[int, NodeProcess] = {}
    with tempfile.TemporaryDirectory(prefix="skyinfra-verify-") as tmp:
        entry = Path(tmp) / "collective.py"
        entry.write_text(script("collective"), encoding="utf-8")
        for node in topology.nodes:
            root = transport.node_root(node.index)
            try:
                transport.put_file(node.index, entry, f"{root}/verify/collective.py")
                procs[node.index] = transport.start(
                    node.index,
                    [
                        f"{root}/venv/bin/skyinfra-runtime",
                        "launch",
                        "--topology",
                        json.dumps(inline),
                        "--node",
                        str(node.index),
                        f"{root}/verify/collective.py:main",
                        "--",
                        *frameworks,
                    ],
                    env={**COLLECTIVE_ENV, **(NCCL_DEBUG_ENV if gpu else {})},
                    cwd=f"{root}/verify",
                    tag=tag,
                )
            except TransportError as err:
                first = str(err).splitlines()[0]  # the evidence (argv: the topology) is long
                outcomes[node.index].reason = f"could not start the runtime's launcher: {first}"
    for index, proc in procs.items():
        threading.Thread(target=_pump, args=(proc, index, lines), daemon=True).start()
    try:
        _wait(procs, outcomes, lines, deadline=time.monotonic() + timeout_s + START_MARGIN_S)
    except KeyboardInterrupt:
        for proc in procs.values():
            proc.kill(grace_s=1.0)
        raise
    _judge(outcomes, procs, timeout_s)
    return outcomes


def _pump(proc: NodeProcess, index: int, out: queue.Queue[tuple[int, str | None]]) -> None:
    try:
        for line in proc.lines():
            out.put((index, line))
    except (OSError, ValueError):
        pass
    out.put((index, None))


def _wait(
    procs: Mapping[int, NodeProcess],
    outcomes: dict[int, CollectiveOutcome],
    lines: queue.Queue[tuple[int, str | None]],
    *,
    deadline: float,
) -> None:
    open_streams = set(procs)
    running = set(procs)
    # A node that could not start, or ended with an error, is missing: the others would only
    # wait out their rendezvous timeout, so they are ended at once (like `run` does).
    failed_first = [i for i, o in outcomes.items() if o.reason]
    while (open_streams or running) and time.monotonic() < deadline:
        if failed_first:
            break
        try:
            index, line = lines.get(timeout=0.2)
        except queue.Empty:
            pass
        else:
            if line is None:
                open_streams.discard(index)
            else:
                outcomes[index].lines.append(line)
        for i in list(running):
            code = procs[i].poll()
            if code is not None:
                running.discard(i)
                if code != 0:
                    failed_first.append(i)
        if not running and not open_streams:
            break
    if failed_first:
        time.sleep(0.5)  # the failed node's last lines
        while not lines.empty():
            index, line = lines.get()
            if line is not None:
                outcomes[index].lines.append(line)
    for index in running:
        outcomes[index].ended_early = bool(failed_first)
        procs[index].kill(grace_s=2.0)


def _last_words(lines: Sequence[str]) -> str:
    meaningful = [ln.strip() for ln in lines if ln.strip() and "NCCL INFO" not in ln]
    return meaningful[-1][:300] if meaningful else "no output"


def _judge(
    outcomes: dict[int, CollectiveOutcome], procs: Mapping[int, NodeProcess], timeout_s: float
) -> None:
    # Nodes that never reached the rendezvous (not started, or failed another way): the
    # others name them. A node whose own set-up timed out at the rendezvous is not missing.
    missing: list[int] = []
    for index, outcome in outcomes.items():
        if outcome.reason:  # not started
            missing.append(index)
            continue
        if outcome.ended_early:
            continue  # named below, with the nodes it waited for
        code = procs[index].poll()
        results = [ln[len(RESULT_PREFIX) :] for ln in outcome.lines if ln.startswith(RESULT_PREFIX)]
        if code is None or code != 0 or not results:
            if code is not None:
                words = _last_words(outcome.lines)
                outcome.reason = f"the collective failed (exit {code}): {words}"
                if not _RENDEZVOUS_TIMEOUT.search(words):
                    missing.append(index)
            continue
        for text in results:
            answer = json.loads(text)
            for name in COLLECTIVE_PLUGINS:
                if name in answer:
                    outcome.sums[name] = float(answer[name])
                    if answer[name] != answer["expected"]:
                        outcome.reason = (
                            f"{name}'s cross-process sum is {answer[name]:g}, expected "
                            f"{answer['expected']:g}"
                        )
        outcome.ok = not outcome.reason
    for index, outcome in outcomes.items():
        if outcome.ok:
            continue
        others = [i for i in missing if i != index]
        note = f"missing: {', '.join(f'node {i}' for i in others)}; " if others else ""
        if outcome.ended_early:
            outcome.reason = "ended without a result: the collective cannot finish without them"
        elif not outcome.reason:
            outcome.reason = (
                f"no result within {timeout_s:g}s (+{START_MARGIN_S:g}s start): still waiting "
                "for the other nodes at the rendezvous"
            )
        outcome.reason = note + outcome.reason
