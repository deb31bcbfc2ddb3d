"""What `skyinfra verify`'s checks see: the cluster, each node, and the facts gathered on it.

One :class:`VerifyContext` per verify; the pytest plugin (plugin.py) hands it to the checks as
the ``cluster`` fixture, each node as ``node`` and its testinfra Host as ``host``. Work that
spans nodes (gathering facts in parallel, the head's listener, the collective) happens here,
once, and the per-node checks read the outcome.
"""

from __future__ import annotations

import json
import posixpath
import secrets
import shlex
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import testinfra.host
from skyinfra_runtime.topology import Node, Topology

from skyinfra.errors import SkyinfraError
from skyinfra.transport.base import NodeProcess, NodeTransport
from skyinfra.transport.bootstrap import NODE_ENV_FILE
from skyinfra.verify.collective import CollectiveOutcome, run_collective
from skyinfra.verify.hosts import node_host
from skyinfra.verify.node import script
from skyinfra.verify.report import NOT_CHECKED

FACTS_PREFIX = "skyinfra-verify-facts "
# How long the head's listener lives at most (it is ended when the port checks are done).
LISTENER_LIFETIME_S = 120
LISTENER_START_S = 20.0
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Expectations:
    """What the operator expects of every node."""

    runtime_version: str
    # (module, KERAS_BACKEND or None) for each plugin's framework.
    frameworks: tuple[tuple[str, str | None], ...] = ()
    efa: bool = False
    idle_timer: bool = False
    min_free_bytes: int = 5 * 1024**3
    collective_timeout_s: float = 60.0


def frameworks_of(topology: Topology) -> tuple[tuple[str, str | None], ...]:
    """The framework each of the cluster's plugins imports on the nodes."""
    out: dict[str, str | None] = {}
    for plugin in topology.plugins:
        if plugin.name == "keras":
            out["keras"] = str(plugin.options.get("backend", "jax"))
        else:
            out[plugin.name] = None
    return tuple(out.items())


@dataclass
class VerifyContext:
    transport: NodeTransport
    topology: Topology
    expect: Expectations
    hosts: dict[int, testinfra.host.Host] = field(default_factory=dict)
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    # Whether the probe imports the frameworks (the plugin turns it off when no selected
    # check needs them).
    probe_frameworks: bool = True
    # The job running on the cluster (the head's record), if any: it holds the rendezvous
    # ports, and a check that took them would join its coordinator and end it.
    running_job: dict[str, Any] | None = None
    _facts: dict[int, dict[str, Any]] | None = None
    _listener: tuple[NodeProcess | None, str] | None = None
    _collective: dict[int, CollectiveOutcome] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for node in self.topology.nodes:
            if node.index not in self.hosts:
                self.hosts[node.index] = node_host(self.transport, node.index, node.name)

    # ------------------------------------------------------------------ nodes

    def node(self, index: int) -> Node:
        return self.topology.nodes[index]

    @property
    def head(self) -> int:
        """The node whose private address is the head's (node 0 when none is)."""
        for node in self.topology.nodes:
            if node.private_ip == self.topology.head_addr:
                return node.index
        return 0

    def root(self, index: int) -> str:
        return self.transport.node_root(index)

    def python(self, index: int) -> str:
        return f"{self.root(index)}/venv/bin/python"

    def topology_path(self, index: int) -> str:
        """Where `skyinfra run` puts the topology on a node (and the runtime reads it)."""
        return f"{self.root(index)}/topology.json"

    def has_gpu(self, index: int) -> bool:
        accelerator = self.node(index).accelerator
        return accelerator is not None and accelerator.count > 0

    def run_script(self, index: int, name: str, *args: str) -> Any:
        """Run node/<name>.py with the node's Python, in the node's own environment (its
        NODE_ENV_FILE, as every command skyinfra starts there); testinfra's CommandResult."""
        env = shlex.quote(posixpath.join(self.root(index), NODE_ENV_FILE))
        command = shlex.join([self.python(index), "-c", script(name), *args])
        return self.hosts[index].run(f"if [ -r {env} ]; then . {env}; fi; exec {command}")

    # ------------------------------------------------------------------ facts

    def facts(self, index: int) -> dict[str, Any]:
        """The node's facts (node/probe.py), gathered on every node at once on first use."""
        with self._lock:
            if self._facts is None:
                with ThreadPoolExecutor(max_workers=len(self.topology.nodes)) as pool:
                    found = pool.map(self._probe, [n.index for n in self.topology.nodes])
                    self._facts = dict(enumerate(found))
            return self._facts[index]

    def _probe(self, index: int) -> dict[str, Any]:
        config = {
            "node_dir": self.root(index),
            "node": index,
            "topology": self.topology_path(index),
            "frameworks": [list(f) for f in self.expect.frameworks]
            if self.probe_frameworks
            else [],
            "gpu": self.has_gpu(index) and self.probe_frameworks,
        }
        try:
            result = self.run_script(index, "probe", json.dumps(config))
        except Exception as err:  # the connection itself failed: every check says so
            return {"error": f"could not run the probe on the node: {err}"}
        for line in result.stdout.splitlines():
            if line.startswith(FACTS_PREFIX):
                facts: dict[str, Any] = json.loads(line[len(FACTS_PREFIX) :])
                return facts
        output = (result.stderr or result.stdout).strip().splitlines()
        return {
            "error": f"the probe failed with {self.python(index)} (exit {result.rc}): "
            + (output[-1] if output else "no output")
        }

    # ------------------------------------------------------------------ rendezvous

    @property
    def ports(self) -> dict[str, int]:
        return {"jax": self.topology.jax_port, "torch": self.topology.torch_port}

    def ports_held_by_a_job(self) -> str | None:
        """Why the checks that take the rendezvous ports must not run now (a job holds
        them), or None."""
        job = self.running_job
        if job is None:
            return None
        return (
            f"{NOT_CHECKED}job {job.get('id')} is {job.get('state') or 'running'} and holds the "
            "rendezvous ports (checking them would end it); verify again once it has ended"
        )

    def start_listener(self) -> str:
        """Hold the rendezvous ports on the head: "listening", or why not."""
        head = self.head
        root = self.root(head)
        try:
            proc = self.transport.start(
                head,
                [
                    self.python(head),
                    "-c",
                    script("listener"),
                    self.token,
                    str(LISTENER_LIFETIME_S),
                    *map(str, self.ports.values()),
                ],
                env={"PYTHONUNBUFFERED": "1"},
                cwd=root,
                tag=f"verify-{self.token}-listener",
            )
        except SkyinfraError as err:
            self._listener = (None, f"could not start a listener on the head: {err}")
            return self._listener[1]
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.extend(_first_line(proc.lines)))
        reader.daemon = True
        reader.start()
        reader.join(LISTENER_START_S)
        status = first[0] if first else f"the listener said nothing in {LISTENER_START_S:g}s"
        self._listener = (proc, status)
        return status

    def stop_listener(self) -> None:
        if self._listener is not None and self._listener[0] is not None:
            self._listener[0].kill(grace_s=1.0)
        self._listener = None

    def reach_head(self, index: int) -> dict[str, str]:
        """From node ``index``, connect to each rendezvous port of the head: port -> "ok" or
        why not."""
        source = self.node(index).private_ip
        result = self.run_script(
            index,
            "connect",
            self.topology.head_addr,
            source,
            self.token,
            str(CONNECT_TIMEOUT_S),
            *map(str, self.ports.values()),
        )
        if result.rc != 0:
            words = (result.stderr or result.stdout).strip().splitlines()
            reason = words[-1] if words else f"exit {result.rc}"
            return {str(p): f"could not run the check: {reason}" for p in self.ports.values()}
        answer: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
        return answer

    # ------------------------------------------------------------------ collective

    def collective(self) -> dict[int, CollectiveOutcome]:
        with self._lock:
            if self._collective is None:
                self._collective = run_collective(
                    self.transport,
                    self.topology,
                    timeout_s=self.expect.collective_timeout_s,
                    tag=f"verify-{self.token}",
                    gpu=any(self.has_gpu(n.index) for n in self.topology.nodes),
                )
            return self._collective


def _first_line(lines: Callable[[], Any]) -> list[str]:
    for line in lines():
        return [str(line)]
    return []


__all__ = ["Expectations", "VerifyContext", "frameworks_of"]
