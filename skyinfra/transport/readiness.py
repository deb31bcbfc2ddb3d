"""Whether nodes can take a run: every node's readiness asked in parallel, and waiting for
nodes still bootstrapping. Used by `skyinfra run` (wait) and `skyinfra status` (ask once)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO

from skyinfra_runtime.topology import Topology

from skyinfra.errors import NodesNotReadyError, SkyinfraError
from skyinfra.progress import ProgressLine
from skyinfra.transport.base import NodeTransport, Readiness

# How often `run` asks the nodes again while it waits, and how often it says it still waits
# when nothing changed.
READY_POLL_S = 5.0
READY_PROGRESS_S = 30.0
# Nodes asked at once.
MAX_ASKING = 32


def check_readiness(transport: NodeTransport, topology: Topology) -> dict[int, Readiness]:
    """Every node's readiness, asked in parallel (an unreachable node costs a connect
    timeout; asked one after the other, N of them would cost N)."""
    indices = [n.index for n in topology.nodes]

    def ask(node: int) -> Readiness:
        try:
            return transport.readiness(node)
        except SkyinfraError as err:  # the protocol says never; a broken transport still might
            return Readiness("unreachable", str(err))

    if len(indices) == 1:
        return {indices[0]: ask(indices[0])}
    # Threads of its own, not concurrent.futures: that (with logging) was 10 ms of every `run`.
    # At most MAX_ASKING at once, as the pool had: each ask may be an SSH session.
    answers: dict[int, Readiness | BaseException] = {}
    pending = iter(indices)
    taking = threading.Lock()

    def ask_each() -> None:
        while True:
            with taking:
                node = next(pending, None)
            if node is None:
                return
            try:
                answers[node] = ask(node)
            except BaseException as err:  # a bug: raised in the caller, as pool.map would
                answers[node] = err

    threads = [
        threading.Thread(target=ask_each, daemon=True) for _ in range(min(MAX_ASKING, len(indices)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    found: dict[int, Readiness] = {}
    for i in indices:
        answer = answers[i]
        if isinstance(answer, BaseException):
            raise answer
        found[i] = answer
    return found


def wait_until_ready(
    transport: NodeTransport,
    topology: Topology,
    *,
    timeout_s: float,
    echo: Callable[[str], None] = print,
    poll_s: float = READY_POLL_S,
    progress_s: float = READY_PROGRESS_S,
    terminal: TextIO | None = None,
) -> None:
    """Return once every node's bootstrap finished; NodesNotReadyError as soon as one failed,
    or after ``timeout_s`` seconds (0: ask once) naming the nodes that are not ready.

    While it waits, a progress line says who is waiting and in which bootstrap phase: a bar
    redrawn on ``terminal`` when it is a terminal, else plain lines through
    ``echo`` when the set of waiting nodes or their phases change, or every ``progress_s``."""
    names = {n.index: n.name for n in topology.nodes}
    start = time.monotonic()
    progress = ProgressLine(echo, stream=terminal, every_s=progress_s)
    try:
        _wait(transport, topology, names, timeout_s, echo, poll_s, progress, start)
    finally:
        progress.close()


def _node_words(name: str, r: Readiness) -> tuple[str, str]:
    """A waiting node as the progress line shows it, and the same without its seconds."""
    if r.state == "unreachable":
        return f"{name} (not reachable yet)", f"{name} (not reachable yet)"
    if r.phase is not None and r.phase_s is not None:
        return f"{name} ({r.phase} {r.phase_s:.0f} s)", f"{name} ({r.phase})"
    return name, name


def _wait(
    transport: NodeTransport,
    topology: Topology,
    names: dict[int, str],
    timeout_s: float,
    echo: Callable[[str], None],
    poll_s: float,
    progress: ProgressLine,
    start: float,
) -> None:
    total = len(names)

    def describe(some: dict[int, Readiness]) -> str:
        return "; ".join(f"{names[i]}: {r.detail or r.state}" for i, r in sorted(some.items()))

    while True:
        states = check_readiness(transport, topology)
        failed = {i: r for i, r in states.items() if r.state == "failed"}
        if failed:
            raise NodesNotReadyError(
                f"cannot run: {describe(failed)}",
                nodes={names[i]: r.state for i, r in failed.items()},
            )
        waiting = {i: r for i, r in states.items() if not r.ready}
        elapsed = time.monotonic() - start
        if not waiting:
            if progress.said_something():
                progress.close()
                echo(f"[skyinfra] all {total} node(s) ready after {elapsed:.0f} s")
            return
        if elapsed >= timeout_s:
            waited = f" after {timeout_s:.0f} s" if timeout_s > 0 else ""
            hint = (
                "; wait longer with `skyinfra run --wait-ready SECONDS`, or check `skyinfra status`"
                if timeout_s > 0
                else ""
            )
            raise NodesNotReadyError(
                f"{len(waiting)} of {total} node(s) not ready{waited}: {describe(waiting)}{hint}",
                nodes={names[i]: r.state for i, r in waiting.items()},
            )
        words = [_node_words(names[i], r) for i, r in sorted(waiting.items())]
        who = ", ".join(w[0] for w in words)
        key = ", ".join(w[1] for w in words)
        ready = total - len(waiting)
        if progress.on_terminal:
            text = f"ready; waiting for {who} ({elapsed:.0f}/{timeout_s:.0f} s)"
            progress.update(text, ready, total)
        else:
            line = f"[skyinfra] waiting for {who} to finish bootstrap"
            text = f"{line} ({ready}/{total} ready, {elapsed:.0f}/{timeout_s:.0f} s)"
            progress.update(text, ready, total, key=line if key == who else key)
        time.sleep(max(0.0, min(poll_s, timeout_s - elapsed)))
